// data/transforms.cpp: the fused per-sample pipeline and the batch-level transforms.
#include "data/transforms.h"

#include <cmath>

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

Compose::Compose(std::vector<Transform> steps) : steps_(std::move(steps)) {
  using K = Transform::Kind;
  // Stage of each kind in the fused order; steps must not go backwards.
  auto stage = [](K k) {
    switch (k) {
      case K::RandomCrop:
      case K::CenterCrop: return 0;
      case K::RandomHorizontalFlip: return 1;
      case K::ToTensor: return 2;
      case K::Normalize: return 3;
      case K::RandomErasing: return 4;
    }
    return 0;
  };
  int last = -1;
  for (const Transform& t : steps_) {
    int s = stage(t.kind);
    BRISK_CHECK(s >= last && !(s == last && s != 3),
                "Compose: transforms must be ordered crop, flip, to_tensor, "
                "normalize, erasing (each at most once)");
    last = s;
    switch (t.kind) {
      case K::RandomCrop:
      case K::CenterCrop: crop_ = t; break;
      case K::RandomHorizontalFlip: flip_ = t; break;
      case K::ToTensor: scale_ = true; break;
      case K::Normalize:
        BRISK_CHECK(scale_, "Compose: normalize needs to_tensor before it");
        mean_ = t.mean;
        std_ = t.std;
        break;
      case K::RandomErasing: erasing_ = t; break;
    }
  }
}

Shape Compose::output_shape(const Shape& in) const {
  BRISK_CHECK(in.size() == 2 || in.size() == 3, "Compose: samples must be (H, W) or (C, H, W), got ", in);
  int64_t c = in.size() == 3 ? in[0] : 1;
  int64_t h = in[in.size() - 2], w = in[in.size() - 1];
  if (crop_) {
    h = crop_->height;
    w = crop_->width;
  }
  return {c, h, w};
}

void Compose::apply(const Tensor& input, float* dst, uint64_t seed, uint64_t epoch, uint64_t index) const {
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
    for (int64_t y = 0; y < oh; ++y) {
      int64_t sy = y + off_y - pad;
      float* row = dst + (ch * oh + y) * ow;
      for (int64_t x = 0; x < ow; ++x) {
        int64_t xx = flip ? ow - 1 - x : x;
        int64_t sx = xx + off_x - pad;
        float raw = 0;
        if (sy >= 0 && sy < ih && sx >= 0 && sx < iw) {
          int64_t k = (ch * ih + sy) * iw + sx;
          raw = s8 ? float(s8[k]) : s32[k];
        }
        row[x] = raw * a + b;
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
