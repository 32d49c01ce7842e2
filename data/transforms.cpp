// data/transforms.cpp: the fused per-sample pipeline (images and feature vectors), feature
// statistics, and the batch-level transforms.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/functions.h"
#include "engine/random.h"

namespace brisk::data {

Transform to_tensor() { return {.kind = Transform::Kind::ToTensor}; }
Transform normalize(std::vector<double> mean, std::vector<double> std) {
  BRISK_CHECK(!mean.empty() && mean.size() == std.size(), "Normalize: mean and std need the same, non-zero length");
  for (double s : std) BRISK_CHECK(s > 0, "Normalize: std must be positive, got ", s);
  return {.kind = Transform::Kind::Normalize, .mean = std::move(mean), .std = std::move(std)};
}
Transform random_crop(int64_t h, int64_t w, int64_t padding) {
  BRISK_CHECK(h > 0 && w > 0 && padding >= 0, "RandomCrop: bad size (", h, ", ", w, ") or padding ", padding);
  return {.kind = Transform::Kind::RandomCrop, .height = h, .width = w, .padding = padding};
}
Transform center_crop(int64_t h, int64_t w) {
  BRISK_CHECK(h > 0 && w > 0, "CenterCrop: bad size (", h, ", ", w, ")");
  return {.kind = Transform::Kind::CenterCrop, .height = h, .width = w};
}
Transform random_horizontal_flip(double p) {
  BRISK_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
  return {.kind = Transform::Kind::RandomHorizontalFlip, .p = p};
}
Transform random_erasing(double p, double slo, double shi, double rlo, double rhi, double value) {
  BRISK_CHECK(p >= 0 && p <= 1 && slo > 0 && slo <= shi && shi <= 1 && rlo > 0 && rlo <= rhi,
              "RandomErasing: invalid p/scale/ratio");
  return {.kind = Transform::Kind::RandomErasing,
          .p = p,
          .scale_lo = slo,
          .scale_hi = shi,
          .ratio_lo = rlo,
          .ratio_hi = rhi,
          .value = value};
}

// Feature-vector steps.
Transform fill_missing(std::vector<double> values) {
  BRISK_CHECK(!values.empty(), "fill_missing: needs one value per feature (or one for all)");
  return {.kind = Transform::Kind::FillMissing, .values = std::move(values)};
}
Transform standardize(std::vector<double> mean, std::vector<double> std) {
  BRISK_CHECK(!mean.empty() && mean.size() == std.size(),
              "standardize: mean and std need the same, non-zero length, got ", mean.size(), " and ", std.size());
  for (size_t f = 0; f < std.size(); ++f)
    BRISK_CHECK(std[f] > 0 && std::isfinite(std[f]) && std::isfinite(mean[f]), "standardize: feature ", f, " has mean ",
                mean[f], " and std ", std[f], " (std must be positive and both finite)");
  return {.kind = Transform::Kind::Standardize, .mean = std::move(mean), .std = std::move(std)};
}
Transform min_max(std::vector<double> min, std::vector<double> max) {
  BRISK_CHECK(!min.empty() && min.size() == max.size(), "min_max: min and max need the same, non-zero length, got ",
              min.size(), " and ", max.size());
  for (size_t f = 0; f < min.size(); ++f)
    BRISK_CHECK(std::isfinite(min[f]) && std::isfinite(max[f]) && min[f] <= max[f], "min_max: feature ", f, " has min ",
                min[f], " > max ", max[f], " (or a non-finite bound)");
  return {.kind = Transform::Kind::MinMax, .low = std::move(min), .high = std::move(max)};
}
Transform one_hot(int64_t column, int64_t num_classes) {
  BRISK_CHECK(column >= 0 && num_classes >= 1, "one_hot: bad column ", column, " or num_classes ", num_classes);
  return {.kind = Transform::Kind::OneHot, .column = column, .num_classes = num_classes};
}
Transform standardize(const FeatureStats& stats) { return standardize(stats.mean, stats.std); }
Transform min_max(const FeatureStats& stats) { return min_max(stats.min, stats.max); }

namespace {

bool is_feature_step(Transform::Kind k) {
  using K = Transform::Kind;
  return k == K::FillMissing || k == K::Standardize || k == K::MinMax || k == K::OneHot;
}

// Per-feature statistics of n samples of f values each, row-major in v.
FeatureStats stats_of(const std::vector<double>& v, int64_t n, int64_t f) {
  BRISK_CHECK(n > 0 && f > 0, "feature_stats: no samples or no features (", n, " x ", f, ")");
  FeatureStats st;
  for (int64_t j = 0; j < f; ++j) {
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      double x = v[size_t(i * f + j)];
      if (std::isnan(x)) continue;
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      ++count;
    }
    BRISK_CHECK(count > 0, "feature_stats: feature ", j, " has no values (every sample is missing it)");
    double mean = sum / double(count), sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      double x = v[size_t(i * f + j)];
      if (!std::isnan(x)) sq += (x - mean) * (x - mean);
    }
    double sd = std::sqrt(sq / double(count));
    st.mean.push_back(mean);
    st.std.push_back(sd > 0 ? sd : 1.0);
    st.min.push_back(lo);
    st.max.push_back(hi);
    st.count.push_back(count);
  }
  return st;
}

}  // namespace

FeatureStats feature_stats(const Tensor& x) {
  BRISK_CHECK(x.defined() && x.dim() >= 1, "feature_stats: expects samples (N, F), got ",
              x.defined() ? x.str() : "an undefined tensor");
  const int64_t n = x.size(0), f = n > 0 ? x.numel() / n : 0;
  return stats_of(x.to_vector<double>(), n, f);
}

FeatureStats feature_stats(const Dataset& dataset) {
  if (dataset.has_tensors()) return feature_stats(dataset.inputs());
  std::vector<double> v;
  const int64_t n = dataset.size();
  int64_t f = 0;
  for (int64_t i = 0; i < n; ++i) {
    Tensor x = dataset.get(i).input;
    if (i == 0) f = x.numel();
    BRISK_CHECK(x.numel() == f, "feature_stats: sample ", i, " has ", x.numel(), " values but sample 0 has ", f);
    std::vector<double> row = x.to_vector<double>();
    v.insert(v.end(), row.begin(), row.end());
  }
  return stats_of(v, n, f);
}

Compose::Compose(std::vector<Transform> steps) : steps_(std::move(steps)) {
  const auto features =
      std::count_if(steps_.begin(), steps_.end(), [](const Transform& t) { return is_feature_step(t.kind); });
  BRISK_CHECK(features == 0 || size_t(features) == steps_.size(),
              "Compose: feature-vector steps (fill_missing, standardize, min_max, one_hot) and image steps do not mix");
  features_ = features > 0;
  int last = -1;
  for (const Transform& t : steps_) {
    if (features_) {
      add_feature_step(t, last);
    } else {
      add_image_step(t, last);
    }
  }
}

void Compose::add_image_step(const Transform& t, int& last) {
  using K = Transform::Kind;
  // Stage of each kind in the fused order; steps must not go backwards.
  int s = 0;
  switch (t.kind) {
    case K::RandomHorizontalFlip: s = 1; break;
    case K::ToTensor: s = 2; break;
    case K::Normalize: s = 3; break;
    case K::RandomErasing: s = 4; break;
    default: s = 0; break;  // crops
  }
  BRISK_CHECK(s >= last && !(s == last && s != 3),
              "Compose: transforms must be ordered crop, flip, to_tensor, "
              "normalize, erasing (each at most once)");
  last = s;
  switch (t.kind) {
    case K::RandomHorizontalFlip: flip_ = t; break;
    case K::ToTensor: scale_ = true; break;
    case K::Normalize:
      BRISK_CHECK(scale_, "Compose: normalize needs to_tensor before it");
      mean_ = t.mean;
      std_ = t.std;
      break;
    case K::RandomErasing: erasing_ = t; break;
    default: crop_ = t; break;
  }
}

void Compose::add_feature_step(const Transform& t, int& last) {
  using K = Transform::Kind;
  int s = t.kind == K::FillMissing ? 0 : t.kind == K::Standardize ? 1 : t.kind == K::MinMax ? 2 : 3;
  BRISK_CHECK(s > last || (s == 3 && last == 3),
              "Compose: feature steps must be ordered fill_missing, standardize, min_max, one_hot "
              "(one_hot may repeat, the others at most once)");
  last = s;
  if (s == 0) fill_ = t;
  if (s == 1) standardize_ = t;
  if (s == 2) min_max_ = t;
  if (s == 3) {
    for (const auto& [column, classes] : one_hot_)
      BRISK_CHECK(column != t.column, "Compose: one_hot of column ", t.column, " twice");
    one_hot_.emplace_back(t.column, t.num_classes);
    std::sort(one_hot_.begin(), one_hot_.end());
  }
}

Shape Compose::output_shape(const Shape& in) const {
  if (features_) {
    BRISK_CHECK(in.size() == 1, "Compose: feature-vector steps need samples (F), got ", in);
    const int64_t f = in[0];
    auto check = [&](const char* who, size_t n, const char* what) {
      BRISK_CHECK(n == 1 || int64_t(n) == f, who, ": ", n, " ", what, " for ", f, " features");
    };
    if (fill_) check("fill_missing", fill_->values.size(), "values");
    if (standardize_) check("standardize", standardize_->mean.size(), "means");
    if (min_max_) check("min_max", min_max_->low.size(), "minimums");
    int64_t out = f;
    for (const auto& [column, classes] : one_hot_) {
      BRISK_CHECK(column < f, "one_hot: column ", column, " is out of range for ", f, " features");
      out += classes - 1;
    }
    return {out};
  }
  BRISK_CHECK(in.size() == 2 || in.size() == 3, "Compose: samples must be (H, W) or (C, H, W), got ", in,
              " (feature vectors (F) take fill_missing, standardize, min_max and one_hot)");
  int64_t c = in.size() == 3 ? in[0] : 1;
  int64_t h = in[in.size() - 2], w = in[in.size() - 1];
  if (crop_) {
    h = crop_->height;
    w = crop_->width;
  }
  return {c, h, w};
}

namespace {

// The values of a contiguous CPU tensor as doubles, one at a time.
double value_at(const void* p, DType dtype, int64_t k) {
  switch (dtype) {
    case DType::F32: return double(static_cast<const float*>(p)[k]);
    case DType::F64: return static_cast<const double*>(p)[k];
    case DType::I64: return double(static_cast<const int64_t*>(p)[k]);
    case DType::I32: return double(static_cast<const int32_t*>(p)[k]);
    case DType::U8: return double(static_cast<const uint8_t*>(p)[k]);
    default: BRISK_FAIL("Compose: feature samples must be F32, F64, I64, I32 or U8, got ", dtype);
  }
}

// The entry of a per-feature list for feature f (a list of 1 is for every feature).
double entry(const std::vector<double>& list, int64_t f) { return list[list.size() == 1 ? 0 : size_t(f)]; }

}  // namespace

// out = one_hot(min_max(standardize(fill(x)))), feature by feature, straight into dst.
void Compose::apply_features(const Tensor& input, float* dst, uint64_t index) const {
  output_shape(input.sizes());  // checks the sizes and the per-feature lists
  BRISK_CHECK(input.device().is_cpu(), "Compose: samples must be on the CPU, got ", input.device().str());
  const int64_t f = input.size(0);
  Tensor src = input.contiguous();
  const void* p = src.data_ptr();
  size_t next_one_hot = 0;
  float* out = dst;
  for (int64_t j = 0; j < f; ++j) {
    double v = value_at(p, src.dtype(), j);
    if (fill_ && std::isnan(v)) v = entry(fill_->values, j);
    if (next_one_hot < one_hot_.size() && one_hot_[next_one_hot].first == j) {
      const int64_t classes = one_hot_[next_one_hot++].second;
      BRISK_CHECK(std::isnan(v) || (v >= 0 && v < double(classes) && v == std::trunc(v)), "one_hot: sample ", index,
                  " has ", v, " in column ", j, ", not a class in 0..", classes - 1);
      for (int64_t k = 0; k < classes; ++k) out[k] = !std::isnan(v) && int64_t(v) == k ? 1.0f : 0.0f;
      out += classes;
      continue;
    }
    if (standardize_) v = (v - entry(standardize_->mean, j)) / entry(standardize_->std, j);
    if (min_max_) {
      const double lo = entry(min_max_->low, j), range = entry(min_max_->high, j) - lo;
      v = range > 0 ? (v - lo) / range : v - lo;
    }
    *out++ = float(v);
  }
}

Tensor Compose::apply_rows(const Tensor& samples, uint64_t seed, uint64_t epoch) const {
  BRISK_CHECK(samples.defined() && samples.dim() >= 1, "Compose::apply_rows: expects samples (N, ...)");
  if (empty()) return cast(samples, DType::F32);
  Tensor rows = samples.device().is_cpu() ? samples : to_device(samples, Device::cpu());
  const int64_t n = rows.size(0);
  Shape sample = rows.sizes();
  sample.erase(0);
  Shape out = output_shape(sample);
  const int64_t per = out.numel();
  out.insert(0, n);
  Tensor result = brisk::empty(out, DType::F32);
  float* dst = static_cast<float*>(result.data_ptr());
  for (int64_t i = 0; i < n; ++i) apply(rows.select(0, i), dst + i * per, seed, epoch, uint64_t(i));
  return result;
}

void Compose::apply(const Tensor& input, float* dst, uint64_t seed, uint64_t epoch, uint64_t index) const {
  if (features_) return apply_features(input, dst, index);
  const Shape& in = input.sizes();
  Shape out = output_shape(in);
  int64_t c = out[0], oh = out[1], ow = out[2];
  int64_t ih = in[in.size() - 2], iw = in[in.size() - 1];
  BRISK_CHECK(mean_.empty() || mean_.size() == 1 || int64_t(mean_.size()) == c, "Normalize: ", mean_.size(),
              " means for ", c, " channels");
  BRISK_CHECK(input.dtype() == DType::U8 || input.dtype() == DType::F32,
              "Compose: sample dtype must be U8 or F32, got ", input.dtype());
  Tensor src = input.contiguous();
  // Random choices: two Philox counters keyed by (epoch, index) under the seed.
  uint64_t key = (epoch << 40) ^ index;
  Philox4 r0 = philox(seed, key, 0x7a11);
  Philox4 r1 = philox(seed, key, 0x7a12);
  auto u = [](uint32_t x) { return double(x) * (1.0 / 4294967296.0); };
  int64_t off_y = 0, off_x = 0, pad = 0;
  if (crop_) {
    if (crop_->kind == Transform::Kind::RandomCrop) {
      pad = crop_->padding;
      int64_t range_y = ih + 2 * pad - oh, range_x = iw + 2 * pad - ow;
      BRISK_CHECK(range_y >= 0 && range_x >= 0, "RandomCrop: crop (", oh, ", ", ow,
                  ") is larger than the padded input (", ih + 2 * pad, ", ", iw + 2 * pad, ")");
      off_y = int64_t(r0.v[0] % uint64_t(range_y + 1));
      off_x = int64_t(r0.v[1] % uint64_t(range_x + 1));
    } else {
      BRISK_CHECK(ih >= oh && iw >= ow, "CenterCrop: crop (", oh, ", ", ow, ") is larger than the input (", ih, ", ",
                  iw, ")");
      off_y = (ih - oh) / 2;
      off_x = (iw - ow) / 2;
    }
  }
  bool flip = flip_ && u(r0.v[2]) < flip_->p;
  int64_t ey0 = 0, ey1 = 0, ex0 = 0, ex1 = 0;  // erased rectangle [y0, y1) x [x0, x1)
  if (erasing_ && u(r0.v[3]) < erasing_->p) {
    double area = double(oh * ow) * (erasing_->scale_lo + u(r1.v[0]) * (erasing_->scale_hi - erasing_->scale_lo));
    double log_r =
        std::log(erasing_->ratio_lo) + u(r1.v[1]) * (std::log(erasing_->ratio_hi) - std::log(erasing_->ratio_lo));
    double ratio = std::exp(log_r);
    int64_t eh = int64_t(std::lround(std::sqrt(area * ratio))), ew = int64_t(std::lround(std::sqrt(area / ratio)));
    if (eh > 0 && ew > 0 && eh < oh && ew < ow) {
      ey0 = int64_t(r1.v[2] % uint64_t(oh - eh + 1));
      ex0 = int64_t(r1.v[3] % uint64_t(ow - ew + 1));
      ey1 = ey0 + eh;
      ex1 = ex0 + ew;
    }
  }
  const double scale = scale_ && input.dtype() == DType::U8 ? 1.0 / 255.0 : 1.0;
  const uint8_t* s8 = input.dtype() == DType::U8 ? static_cast<const uint8_t*>(src.data_ptr()) : nullptr;
  const float* s32 = input.dtype() == DType::F32 ? static_cast<const float*>(src.data_ptr()) : nullptr;
  const float erase_value = erasing_ ? float(erasing_->value) : 0.0f;
  for (int64_t ch = 0; ch < c; ++ch) {
    double m = mean_.empty() ? 0.0 : mean_[mean_.size() == 1 ? 0 : size_t(ch)];
    double inv_s = std_.empty() ? 1.0 : 1.0 / std_[std_.size() == 1 ? 0 : size_t(ch)];
    // v_out = raw * a + b: scaling and normalization folded into one multiply-add.
    const float a = float(scale * inv_s), b = float(-m * inv_s);
    // Output column x reads source column sx = (flip ? ow - 1 - x : x) + d; the columns
    // [x_lo, x_hi) meet the input, the others (and rows outside it) the zero padding, b after
    // the multiply-add. Branch-free inner loops, so they vectorize.
    const int64_t d = off_x - pad;
    const int64_t x_lo = std::clamp<int64_t>(flip ? ow + d - iw : -d, 0, ow);
    const int64_t x_hi = std::clamp<int64_t>(flip ? ow + d : iw - d, x_lo, ow);
    const float zero = 0.0f * a + b;  // what the padding becomes
    for (int64_t y = 0; y < oh; ++y) {
      int64_t sy = y + off_y - pad;
      float* row = dst + (ch * oh + y) * ow;
      if (sy < 0 || sy >= ih) {
        std::fill_n(row, ow, zero);
      } else {
        std::fill_n(row, x_lo, zero);
        std::fill(row + x_hi, row + ow, zero);
        const int64_t base = (ch * ih + sy) * iw;
        if (!flip) {  // row[x] = src[base + x + d]
          if (s8) {
            const uint8_t* r = s8 + base + d;
            for (int64_t x = x_lo; x < x_hi; ++x) row[x] = float(r[x]) * a + b;
          } else {
            const float* r = s32 + base + d;
            for (int64_t x = x_lo; x < x_hi; ++x) row[x] = r[x] * a + b;
          }
        } else {  // row[x] = src[base + ow - 1 - x + d]
          const int64_t last = base + ow - 1 + d;
          for (int64_t x = x_lo; x < x_hi; ++x) row[x] = (s8 ? float(s8[last - x]) : s32[last - x]) * a + b;
        }
      }
      if (y >= ey0 && y < ey1) {
        for (int64_t x = ex0; x < ex1; ++x) row[x] = erase_value;
      }
    }
  }
}

Tensor normalize_batch(const Tensor& batch, const std::vector<double>& mean, const std::vector<double>& std) {
  BRISK_CHECK(batch.dim() == 4, "normalize_batch: expects (B, C, H, W), got ", batch.sizes());
  int64_t c = batch.size(1);
  BRISK_CHECK(int64_t(mean.size()) == c && int64_t(std.size()) == c, "normalize_batch: ", mean.size(), " means and ",
              std.size(), " stds for ", c, " channels");
  Tensor m = from_vector(mean, {1, c, 1, 1}, batch.dtype(), batch.device());
  Tensor s = from_vector(std, {1, c, 1, 1}, batch.dtype(), batch.device());
  return (batch - m) / s;
}

Tensor random_horizontal_flip_batch(const Tensor& batch, double p) {
  BRISK_CHECK(batch.dim() == 4, "random_horizontal_flip_batch: expects (B, C, H, W), got ", batch.sizes());
  int64_t w = batch.size(3);
  Tensor reversed = arange(double(w - 1), -1.0, -1.0, DType::I64, batch.device());
  Tensor flipped = index_select(batch, 3, reversed);
  Tensor coin = lt(rand({batch.size(0), 1, 1, 1}, DType::F32, batch.device()), full({}, p, DType::F32, batch.device()));
  return where(coin, flipped, batch);
}

}  // namespace brisk::data
