// compress/quantize.cpp: observers and qparams, quantize / dequantize / fake quantize, the quantized
// modules (dynamic and static Linear, Conv2d: the int8 ops of engine/ops/quantized.cpp), fusion
// with batch-norm folding, the prepare / prepare_qat / convert module swaps, and the safetensors
// files.
// Not here: the int8 kernels (kernels/cpu/quantized.cpp) and GEMM (kernels/cpu/gemm_i8.cpp).
#include "compress/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "engine/error.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "engine/serialize.h"

namespace brisk::nn::quantize {

// Note [Quantization]
// Numerics are PyTorch's, op for op, in F32 where PyTorch computes F32 tensors: qparams as
// torch.ao's _calculate_qparams (scale = range / (qmax - qmin), at least eps; zero point =
// qmin - round(min / scale), half to even, clamped; symmetric: max(|min|, max) / ((qmax - qmin)
// / 2), zero point 0 for qint8 and 128 for quint8), quantization as quantize_val
// (zp + nearbyint(x * (1 / scale)), clamped), the dynamic Linear's activation qparams as fbgemm's
// ChooseQuantizationParams (double math, reduce_range: [0, 127]).
// Quantized modules take and return F32 tensors: each quantizes its input with its own input
// qparams (dynamic: from the batch's min and max; static: calibrated), multiplies int8 by int8
// into int32 (kernels/cpu/gemm_i8.h, weights packed once), and writes F32 through the GEMM's
// epilogue (scale_in * scale_w[o], bias, fused ReLU). PyTorch's static modules instead hand
// quint8 tensors from layer to layer, requantized with an output observer; the next layer's
// input observer here sees the same values that output observer would (max pooling and
// flatten between them commute with quantization), so the only difference is one rounding
// of F32 outputs kept between layers: it costs a little speed (F32 pooling) and no accuracy.
// Conv: the quantized sample is laid out channels-last inside a border of zero points, so the
// im2col rows (pixel, (i, j, c)) are runs of kw * C bytes (the weight is packed in that order);
// the GEMM writes (pixel, channel) rows, and the pass that turns them into NCHW planes also
// applies a fused 2x2 max pool (fuse() absorbs a MaxPool2d(2) after a conv): in the
// Fashion-MNIST CNN that pass replaced a transpose plus a separate F32 pooling over 4x the data,
// and took the int8 CNN from 1.7x to 2.4-2.7x the F32 one (examples/bench/bench_int8.cpp).
// Fake quantization is the same round trip on the host; the straight-through estimator is
// built from existing ops: y = q + (x * m - (x * m).detach()), where m is 1 where x quantized
// inside [qmin, qmax] and 0 where it was clamped: the value is exactly q (the bracket is
// exactly 0 for finite x) and dy/dx = m, as torch's fake_quantize backward.
// Module swaps: prepare wraps each Linear / Conv2d (after fusion) in an Observed module (child
// "0" the float layer, observers beside it); prepare_qat in a Qat module (the float layer's own
// parameters, so an optimizer made afterwards trains them, with FakeQuantize children
// "activation_post_process"/"weight_fake_quant"); convert replaces both with QuantizedLinear /
// QuantizedConv2d. Only Sequential children are fused; a model whose forward calls a conv and
// its batch norm as separate named children outside a Sequential is converted unfused.

namespace {

constexpr const char* kQuantizedKey = "brisk.quantized";

std::pair<int64_t, int64_t> dtype_range(QDType d) {
  return d == QDType::QInt8 ? std::pair<int64_t, int64_t>{-128, 127} : std::pair<int64_t, int64_t>{0, 255};
}

DType storage_dtype(QDType d) { return d == QDType::QInt8 ? DType::I8 : DType::U8; }

Tensor cpu_f32(const Tensor& x, const char* fn) {
  BRISK_CHECK(x.defined(), fn, ": undefined tensor");
  BRISK_CHECK(x.device().is_cpu(), fn, ": CPU tensors only, got ", x.str());
  BRISK_CHECK(x.dtype() == DType::F32, fn, ": expects F32, got ", x.str());
  return x.contiguous();
}

// Channels along axis: element i belongs to channel (i / inner) % channels.
struct ChannelLayout {
  int64_t channels = 1, inner = 1;
  ChannelLayout(const Tensor& x, int64_t axis, const char* fn) {
    BRISK_CHECK(axis >= 0 && axis < x.dim(), fn, ": channel axis ", axis, " out of range for ", x.str());
    channels = x.size(axis);
    for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  }
  int64_t channel(int64_t i) const { return (i / inner) % channels; }
};

float round_half_even(float v) { return std::nearbyint(v); }

// qparams as the affine ops take them: F32 scales and I64 zero points, 1-D.
Tensor as_1d(const Tensor& t, DType dtype) {
  const Tensor c = t.dtype() == dtype ? t : cast(t, dtype);
  return c.reshape(Shape{c.numel()}).contiguous();
}

std::vector<float> scales_of(const QParams& q) { return q.scale.to_vector<float>(); }
std::vector<int64_t> zero_points_of(const QParams& q) { return q.zero_point.to_vector<int64_t>(); }

QParams make_qparams(std::vector<float> scale, std::vector<int64_t> zp, int64_t axis, QDType dtype, int64_t qmin,
                     int64_t qmax) {
  QParams q;
  const int64_t n = int64_t(scale.size());
  q.scale = from_data(scale.data(), Shape{n});
  q.zero_point = from_data(zp.data(), Shape{n});
  q.axis = axis;
  q.dtype = dtype;
  q.quant_min = qmin;
  q.quant_max = qmax;
  return q;
}

}  // namespace

// ---- qparams

std::pair<int64_t, int64_t> quant_range(const ObserverOptions& o) {
  auto [lo, hi] = dtype_range(o.dtype);
  if (o.quant_min || o.quant_max) {
    BRISK_CHECK(o.quant_min && o.quant_max, "quant_range: give both quant_min and quant_max");
    BRISK_CHECK(*o.quant_min < *o.quant_max && *o.quant_min >= lo && *o.quant_max <= hi, "quant_range: [", *o.quant_min,
                ", ", *o.quant_max, "] is not inside the dtype's [", lo, ", ", hi, "]");
    lo = *o.quant_min;
    hi = *o.quant_max;
  }
  if (o.reduce_range) {
    lo = lo >= 0 ? lo / 2 : -((-lo) / 2);
    hi = hi / 2;
  }
  return {lo, hi};
}

QParams calculate_qparams(const std::vector<float>& min_val, const std::vector<float>& max_val,
                          const ObserverOptions& o) {
  BRISK_CHECK(min_val.size() == max_val.size() && !min_val.empty(), "calculate_qparams: ", min_val.size(),
              " minima for ", max_val.size(), " maxima");
  const auto [qmin, qmax] = quant_range(o);
  const bool custom = o.quant_min.has_value();
  std::vector<float> scale(min_val.size());
  std::vector<int64_t> zp(min_val.size());
  for (size_t c = 0; c < min_val.size(); ++c) {
    BRISK_CHECK(min_val[c] <= max_val[c], "calculate_qparams: min ", min_val[c], " > max ", max_val[c]);
    const float min_neg = std::min(min_val[c], 0.0f);
    float max_pos = std::max(max_val[c], 0.0f);
    if (symmetric(o.qscheme)) {
      max_pos = std::max(-min_neg, max_pos);
      scale[c] = std::max(max_pos / float(double(qmax - qmin) / 2), o.eps);
      zp[c] = o.dtype == QDType::QUInt8 ? (custom ? (qmin + qmax) / 2 : 128) : 0;
    } else {
      scale[c] = std::max((max_pos - min_neg) / float(qmax - qmin), o.eps);
      zp[c] = std::clamp<int64_t>(qmin - int64_t(round_half_even(min_neg / scale[c])), qmin, qmax);
    }
  }
  return make_qparams(std::move(scale), std::move(zp), per_channel(o.qscheme) ? o.ch_axis : -1, o.dtype, qmin, qmax);
}

std::pair<float, int32_t> choose_qparams(float min, float max, int32_t qmin, int32_t qmax, bool reduce_range) {
  return choose_int8_qparams(min, max, qmin, qmax, reduce_range);
}

// ---- observers

Observer::Observer(ObserverOptions options) : options(options) {
  quant_range(options);
  BRISK_CHECK(!(options.reduce_range && options.dtype == QDType::QUInt8 && symmetric(options.qscheme)),
              "Observer: reduce_range with symmetric quint8 is not supported (as in PyTorch)");
}

void Observer::current_min_max(const Tensor& x_in, std::vector<float>& lo, std::vector<float>& hi) const {
  const Tensor x = cpu_f32(x_in, "observer");
  const float* p = x.data<float>();
  const int64_t n = x.numel();
  if (!per_channel(options.qscheme)) {
    lo.assign(1, INFINITY);
    hi.assign(1, -INFINITY);
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      lo[0] = std::min(lo[0], p[i]);
      hi[0] = std::max(hi[0], p[i]);
    }
    return;
  }
  const ChannelLayout ch(x, options.ch_axis, "observer");
  lo.assign(size_t(ch.channels), INFINITY);
  hi.assign(size_t(ch.channels), -INFINITY);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    const int64_t c = ch.channel(i);
    lo[size_t(c)] = std::min(lo[size_t(c)], p[i]);
    hi[size_t(c)] = std::max(hi[size_t(c)], p[i]);
  }
}

QParams Observer::calculate_qparams() const {
  if (!observed()) {  // PyTorch's default for an observer that saw nothing
    const auto [qmin, qmax] = quant_range(options);
    return make_qparams({1.0f}, {0}, -1, options.dtype, qmin, qmax);
  }
  return quantize::calculate_qparams(min_val, max_val, options);
}

void MinMaxObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  std::vector<float> lo, hi;
  current_min_max(x, lo, hi);
  if (!observed()) {
    min_val = lo;
    max_val = hi;
    return;
  }
  BRISK_CHECK(lo.size() == min_val.size(), "MinMaxObserver: ", lo.size(), " channels after ", min_val.size());
  for (size_t c = 0; c < lo.size(); ++c) {
    min_val[c] = std::min(min_val[c], lo[c]);
    max_val[c] = std::max(max_val[c], hi[c]);
  }
}

void MovingAverageMinMaxObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  std::vector<float> lo, hi;
  current_min_max(x, lo, hi);
  if (!observed()) {
    min_val = lo;
    max_val = hi;
    return;
  }
  BRISK_CHECK(lo.size() == min_val.size(), "MovingAverageMinMaxObserver: ", lo.size(), " channels after ",
              min_val.size());
  for (size_t c = 0; c < lo.size(); ++c) {
    min_val[c] = min_val[c] + averaging_constant * (lo[c] - min_val[c]);
    max_val[c] = max_val[c] + averaging_constant * (hi[c] - max_val[c]);
  }
}

// ---- histogram observer

namespace {

// torch.linspace(lo, hi, n) in F32 (the first half counted from lo, the second from hi).
std::vector<float> linspace(float lo, float hi, int64_t n) {
  std::vector<float> e(static_cast<size_t>(n));
  const float step = (hi - lo) / float(n - 1);
  const int64_t half = n / 2;
  for (int64_t i = 0; i < n; ++i) e[size_t(i)] = i < half ? lo + step * float(i) : hi - step * float(n - i - 1);
  return e;
}

// torch.histc(x, bins, lo, hi): linear position, then a local search among the F32 edges;
// values equal to hi go to the last bin, values outside are dropped.
void histc_into(const float* x, int64_t n, int64_t bins, float lo, float hi, std::vector<float>& hist) {
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const std::vector<float> edges = linspace(lo, hi, bins + 1);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!(v >= lo && v <= hi)) continue;
    int64_t pos = int64_t((v - lo) * float(bins) / (hi - lo));
    const int64_t pmin = std::max<int64_t>(0, pos - 1), pmax = std::min<int64_t>(pos + 2, bins + 1);
    pos = std::upper_bound(edges.begin() + pmin, edges.begin() + pmax, v) - edges.begin() - 1;
    if (pos == bins) pos -= 1;
    hist[size_t(pos)] += 1.0f;
  }
}

// Python's floor division of floats, as torch.div(rounding_mode="floor").
float div_floor(float a, float b) {
  if (b == 0) return a / b;
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float fl = std::floor(div);
  if (div - fl > 0.5f) fl += 1.0f;
  return fl;
}

float l2_norm(float begin, float end, float density) {
  return density * ((end * end * end - begin * begin * begin) / 3);
}

}  // namespace

HistogramObserver::HistogramObserver(ObserverOptions options, int64_t bins, HistogramMethod method, double percentile)
    : Observer(options), bins(bins), method(method), percentile(percentile) {
  BRISK_CHECK(!per_channel(options.qscheme), "HistogramObserver: per-tensor schemes only");
  BRISK_CHECK(bins >= 2, "HistogramObserver: bins must be >= 2, got ", bins);
  BRISK_CHECK(percentile > 0.5 && percentile <= 1.0, "HistogramObserver: percentile must be in (0.5, 1], got ",
              percentile);
}

void HistogramObserver::observe(const Tensor& x_in) {
  if (x_in.numel() == 0) return;
  const Tensor x = cpu_f32(x_in, "HistogramObserver");
  std::vector<float> lo, hi;
  current_min_max(x, lo, hi);
  if (!(lo[0] <= hi[0])) return;  // nothing finite
  const float* p = x.data<float>();
  if (!observed()) {
    min_val = lo;
    max_val = hi;
    histogram.assign(size_t(bins), 0.0f);
    histc_into(p, x.numel(), bins, lo[0], hi[0], histogram);
    return;
  }
  const float new_min = std::min(min_val[0], lo[0]), new_max = std::max(max_val[0], hi[0]);
  std::vector<float> update(size_t(bins), 0.0f);
  histc_into(p, x.numel(), bins, new_min, new_max, update);
  if (new_min != min_val[0] || new_max != max_val[0]) {
    // Rebin the old counts into the new range, each old bin spread uniformly over the new bins
    // it overlaps.
    const double old_w = (double(max_val[0]) - min_val[0]) / double(bins);
    const double new_w = (double(new_max) - new_min) / double(bins);
    for (int64_t b = 0; b < bins; ++b) {
      const double count = histogram[size_t(b)];
      if (count == 0) continue;
      const double a0 = min_val[0] + b * old_w, a1 = a0 + old_w;
      if (old_w == 0) {
        update[size_t(std::clamp<int64_t>(int64_t((a0 - new_min) / new_w), 0, bins - 1))] += float(count);
        continue;
      }
      const int64_t first = std::clamp<int64_t>(int64_t((a0 - new_min) / new_w), 0, bins - 1);
      const int64_t last = std::clamp<int64_t>(int64_t((a1 - new_min) / new_w), 0, bins - 1);
      for (int64_t t = first; t <= last; ++t) {
        const double t0 = new_min + t * new_w, t1 = t0 + new_w;
        const double overlap = std::max(0.0, std::min(a1, t1) - std::max(a0, t0));
        update[size_t(t)] += float(count * overlap / old_w);
      }
    }
    histogram = std::move(update);
    min_val[0] = new_min;
    max_val[0] = new_max;
  } else {
    for (int64_t b = 0; b < bins; ++b) histogram[size_t(b)] += update[size_t(b)];
  }
}

std::pair<float, float> HistogramObserver::search_range() const {
  BRISK_CHECK(observed(), "HistogramObserver: observe data before asking for qparams");
  const float mn = min_val[0], mx = max_val[0];
  if (method == HistogramMethod::Percentile) {
    double total = 0;
    for (float h : histogram) total += h;
    const double width = (double(mx) - mn) / double(bins);
    auto quantile = [&](double q) {
      const double target = q * total;
      double cum = 0;
      for (int64_t b = 0; b < bins; ++b) {
        const double h = histogram[size_t(b)];
        if (h > 0 && cum + h >= target) return float(mn + (double(b) + (target - cum) / h) * width);
        cum += h;
      }
      return mx;
    };
    return {quantile(1.0 - percentile), quantile(percentile)};
  }
  // PyTorch's _non_linear_param_search and _compute_quantization_error, F32 tensor math as
  // theirs (python floats where they use python floats).
  const int64_t dst_nbins = int64_t(1) << 8;
  const float bin_width_t = (mx - mn) / float(bins);  // the F32 tensor
  const double bin_width = (double(mx) - double(mn)) / double(bins);
  std::vector<float> csum(static_cast<size_t>(bins));
  float run = 0;
  for (int64_t b = 0; b < bins; ++b) csum[size_t(b)] = run += histogram[size_t(b)];
  double total = 0;
  for (float h : histogram) total += h;
  auto error = [&](int64_t s, int64_t e) -> double {
    const double dst_w = bin_width * double(e - s + 1) / double(dst_nbins);
    if (dst_w == 0.0) return 0.0;
    const float dw = float(dst_w), bw = float(bin_width), half = float(dst_w / 2), neg_half = float(-dst_w / 2);
    double sum = 0;
    for (int64_t b = 0; b < bins; ++b) {
      const float begin = float(b - s) * bw;
      const float end = begin + bw;
      const float dob = std::clamp(div_floor(begin, dw), 0.0f, float(dst_nbins - 1));
      const float doe = std::clamp(div_floor(end, dw), 0.0f, float(dst_nbins - 1));
      const float density = histogram[size_t(b)] / bw;
      float norm = 0.0f;
      norm += l2_norm(begin - (dob + 0.5f) * dw, half, density);
      norm += (doe - dob - 1) * l2_norm(neg_half, half, density);
      norm += l2_norm(neg_half, end - (doe * dw + half), density);
      sum += norm;
    }
    return double(float(sum));
  };
  double alpha = 0.0, beta = 1.0, norm_min = INFINITY;
  int64_t start = 0, end = bins - 1;
  const double step = 1e-5;
  while (alpha < beta) {
    const double next_alpha = alpha + step, next_beta = beta - step;
    int64_t l = start, r = end;
    while (l < end && csum[size_t(l)] < float(next_alpha * total)) ++l;
    while (r > start && csum[size_t(r)] > float(next_beta * total)) --r;
    int64_t ns = start, ne = end;
    if ((l - start) > (end - r)) {
      ns = l;
      alpha = next_alpha;
    } else {
      ne = r;
      beta = next_beta;
    }
    if (ns == start && ne == end) continue;
    const double norm = error(ns, ne);
    if (norm > norm_min) break;
    norm_min = norm;
    start = ns;
    end = ne;
  }
  return {mn + bin_width_t * float(start), mn + bin_width_t * float(end + 1)};
}

QParams HistogramObserver::calculate_qparams() const {
  if (!observed()) return Observer::calculate_qparams();
  const auto [lo, hi] = search_range();
  return quantize::calculate_qparams({lo}, {hi}, options);
}

// ---- quantized tensors

QTensor quantize_per_tensor(const Tensor& x, float scale, int64_t zero_point, QDType dtype) {
  const auto [qmin, qmax] = dtype_range(dtype);
  return quantize(x, make_qparams({scale}, {zero_point}, -1, dtype, qmin, qmax));
}

QTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                             QDType dtype) {
  const auto [qmin, qmax] = dtype_range(dtype);
  QParams q = make_qparams(scales.to_vector<float>(), zero_points.to_vector<int64_t>(), axis, dtype, qmin, qmax);
  return quantize(x, q);
}

QTensor quantize(const Tensor& x_in, const QParams& q) {
  const Tensor x = cpu_f32(x_in, "quantize");
  const std::vector<float> scale = scales_of(q);
  const std::vector<int64_t> zp = zero_points_of(q);
  BRISK_CHECK(!scale.empty() && scale.size() == zp.size(), "quantize: ", scale.size(), " scales for ", zp.size(),
              " zero points");
  for (float s : scale) BRISK_CHECK(s > 0 && std::isfinite(s), "quantize: scales must be positive, got ", s);
  const auto range = dtype_range(q.dtype);
  const int64_t dmin = range.first, dmax = range.second;
  BRISK_CHECK(q.quant_min >= dmin && q.quant_max <= dmax && q.quant_min < q.quant_max, "quantize: range [", q.quant_min,
              ", ", q.quant_max, "] outside the dtype's");
  if (q.per_channel()) {
    BRISK_CHECK(q.axis < x.dim() && int64_t(scale.size()) == x.size(q.axis), "quantize: ", scale.size(), " scales for ",
                q.axis < x.dim() ? x.size(q.axis) : 0, " channels on axis ", q.axis, " of ", x.str());
  } else {
    BRISK_CHECK(scale.size() == 1, "quantize: per-tensor qparams with ", scale.size(), " scales");
  }
  // The quantize_affine op (kernels/cpu/quantized.cpp): the dtype's whole range, as torch.
  return {quantize_affine(x, as_1d(q.scale, DType::F32), as_1d(q.zero_point, DType::I64), q.per_channel() ? q.axis : -1,
                          storage_dtype(q.dtype)),
          q};
}

Tensor dequantize(const QTensor& q) {
  const Tensor r = q.int_repr.contiguous();
  BRISK_CHECK(r.dtype() == storage_dtype(q.qparams.dtype), "dequantize: int_repr is ", r.str(), " for a ",
              q.qparams.dtype == QDType::QInt8 ? "qint8" : "quint8", " tensor");
  const bool per_channel = q.qparams.per_channel();
  BRISK_CHECK(!per_channel || q.qparams.axis < r.dim(), "dequantize: channel axis ", q.qparams.axis,
              " out of range for ", r.str());
  return dequantize_affine(r, as_1d(q.qparams.scale, DType::F32), as_1d(q.qparams.zero_point, DType::I64),
                           per_channel ? q.qparams.axis : -1);
}

Tensor QTensor::dequantize() const { return quantize::dequantize(*this); }

// ---- fake quantization

namespace {

// The round trip and the STE mask, per channel (axis >= 0) or per tensor.
Tensor fake_quantize_impl(const Tensor& x_in, const std::vector<float>& scale, const std::vector<int64_t>& zp,
                          int64_t axis, int64_t qmin, int64_t qmax, const char* fn) {
  const Tensor x = cpu_f32(x_in, fn);
  BRISK_CHECK(qmin < qmax, fn, ": quant_min ", qmin, " >= quant_max ", qmax);
  for (float s : scale) BRISK_CHECK(s > 0 && std::isfinite(s), fn, ": scales must be positive, got ", s);
  for (int64_t z : zp) BRISK_CHECK(z >= qmin && z <= qmax, fn, ": zero point ", z, " outside [", qmin, ", ", qmax, "]");
  std::optional<ChannelLayout> ch;
  if (axis >= 0) {
    ch.emplace(x, axis, fn);
    BRISK_CHECK(int64_t(scale.size()) == ch->channels && zp.size() == scale.size(), fn, ": ", scale.size(),
                " scales and ", zp.size(), " zero points for ", ch->channels, " channels of ", x.str());
  }
  const int64_t n = x.numel();
  Tensor y = empty(x.sizes(), DType::F32);
  Tensor mask = empty(x.sizes(), DType::F32);
  const float* p = x.data<float>();
  float* py = y.data<float>();
  float* pm = mask.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const size_t c = ch ? size_t(ch->channel(i)) : 0;
    const float inv = 1.0f / scale[c];
    // torch: qval = int64(zp + nearbyint(x * inv)); mask = qmin <= qval <= qmax;
    // out = (clamp(qval) - zp) * scale
    const float r = float(zp[c]) + std::nearbyint(p[i] * inv);
    const bool inside = r >= float(qmin) && r <= float(qmax);
    const float qv = std::fmin(std::fmax(r, float(qmin)), float(qmax));
    py[i] = (qv - float(zp[c])) * scale[c];
    pm[i] = inside ? 1.0f : 0.0f;
  }
  if (!(GradMode::enabled() && x_in.requires_grad())) return y;
  const Tensor xm = mul(x_in, mask);
  return add(y, sub(xm, xm.detach()));
}

}  // namespace

Tensor fake_quantize_per_tensor_affine(const Tensor& x, float scale, int64_t zero_point, int64_t quant_min,
                                       int64_t quant_max) {
  return fake_quantize_impl(x, {scale}, {zero_point}, -1, quant_min, quant_max, "fake_quantize_per_tensor_affine");
}

Tensor fake_quantize_per_channel_affine(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                                        int64_t quant_min, int64_t quant_max) {
  return fake_quantize_impl(x, scales.to_vector<float>(), zero_points.to_vector<int64_t>(), axis, quant_min, quant_max,
                            "fake_quantize_per_channel_affine");
}

Tensor fake_quantize(const Tensor& x, const QParams& q) {
  return fake_quantize_impl(x, scales_of(q), zero_points_of(q), q.axis, q.quant_min, q.quant_max, "fake_quantize");
}

FakeQuantize::FakeQuantize(std::shared_ptr<Observer> observer) : Module("FakeQuantize"), observer(std::move(observer)) {
  BRISK_CHECK(this->observer != nullptr, "FakeQuantize: needs an observer");
}

Tensor FakeQuantize::forward(const Tensor& x) {
  if (is_training() && observer_enabled) observer->observe(x.detach());
  if (!fake_quant_enabled || !observer->observed()) return x;
  return fake_quantize(x, observer->calculate_qparams());
}

QParams FakeQuantize::qparams() const { return observer->calculate_qparams(); }

// ---- qconfigs

namespace {

std::shared_ptr<Observer> per_tensor_weight_observer() {
  return std::make_shared<MinMaxObserver>(
      ObserverOptions{.dtype = QDType::QInt8, .qscheme = QScheme::PerTensorSymmetric});
}

std::shared_ptr<Observer> per_channel_weight_observer() {
  return std::make_shared<MinMaxObserver>(
      ObserverOptions{.ch_axis = 0, .dtype = QDType::QInt8, .qscheme = QScheme::PerChannelSymmetric});
}

}  // namespace

QConfig default_qconfig() {
  return {[] { return std::make_shared<MinMaxObserver>(ObserverOptions{.reduce_range = true}); },
          per_tensor_weight_observer};
}

QConfig get_default_qconfig(const std::string& backend) {
  if (backend == "fbgemm" || backend == "x86")
    return {[] { return std::make_shared<HistogramObserver>(ObserverOptions{.reduce_range = true}); },
            per_channel_weight_observer};
  if (backend == "qnnpack")
    return {[] { return std::make_shared<HistogramObserver>(ObserverOptions{.reduce_range = false}); },
            per_tensor_weight_observer};
  throw Error("get_default_qconfig: unknown backend '" + backend + "' (fbgemm, x86 or qnnpack)");
}

QConfig default_dynamic_qconfig() { return {{}, per_tensor_weight_observer}; }

QConfig per_channel_dynamic_qconfig() { return {{}, per_channel_weight_observer}; }

QConfig minmax_qconfig() {
  return {[] { return std::make_shared<MinMaxObserver>(ObserverOptions{.reduce_range = true}); },
          per_channel_weight_observer};
}

QConfig default_qat_qconfig() {
  return {[] { return std::make_shared<MovingAverageMinMaxObserver>(ObserverOptions{.reduce_range = true}); },
          [] {
            return std::make_shared<MovingAverageMinMaxObserver>(
                ObserverOptions{.ch_axis = 0, .dtype = QDType::QInt8, .qscheme = QScheme::PerChannelSymmetric});
          }};
}

// ---- quantized modules

namespace {

// Checks weight qparams are what the int8 kernel takes: qint8, symmetric (zero point 0), one
// scale per output channel (axis 0) or one for all.
std::vector<float> weight_scales(const QParams& q, int64_t out, const char* fn) {
  BRISK_CHECK(q.dtype == QDType::QInt8, fn, ": weights must be qint8");
  std::vector<float> s = scales_of(q);
  for (int64_t z : zero_points_of(q)) BRISK_CHECK(z == 0, fn, ": weights need symmetric qparams (zero point 0)");
  BRISK_CHECK(q.per_channel() ? (q.axis == 0 && int64_t(s.size()) == out) : s.size() == 1, fn,
              ": weight qparams must be per tensor or per output channel (axis 0)");
  if (s.size() == 1) s.assign(size_t(out), s[0]);
  return s;
}

// Registers the int values and qparams of a quantized weight as buffers (the saved names).
// The weight's qparams as register_weight stored them (per channel on axis 0, or per tensor):
// what each quantized module's repack() reads back, also after load_quantized.
QParams stored_weight_qparams(const Module& m) {
  const Tensor scale = m.maybe_buffer("weight_scale");
  return make_qparams(scale.to_vector<float>(), m.maybe_buffer("weight_zero_point").to_vector<int64_t>(),
                      scale.numel() > 1 ? 0 : -1, QDType::QInt8, -128, 127);
}

void register_weight(Module& m, const QTensor& w, const Tensor& bias) {
  m.register_buffer("weight", w.int_repr);
  m.register_buffer("weight_scale", w.qparams.scale);
  m.register_buffer("weight_zero_point", w.qparams.zero_point);
  if (bias.defined()) m.register_buffer("bias", bias.detach().contiguous().clone());
}

void register_input(Module& m, const QParams& input) {
  BRISK_CHECK(!input.per_channel() && input.dtype == QDType::QUInt8, m.type_name(),
              ": input qparams must be quint8 per tensor");
  m.register_buffer("input_scale", input.scale.clone());
  m.register_buffer("input_zero_point", input.zero_point.clone());
}

// The weight's scales as the F32 (out) tensor the int8 ops take.
Tensor scale_tensor(const std::vector<float>& s) { return from_data(s.data(), Shape{int64_t(s.size())}); }

// The static modules' input qparams (quint8 per tensor, clamped to the whole [0, 255] as
// torch.quantize_per_tensor does in PyTorch's converted modules).
Int8Params input_params(const Module& m, bool relu) {
  return {.input_scale = double(m.maybe_buffer("input_scale").item<float>()),
          .input_zero_point = m.maybe_buffer("input_zero_point").item<int64_t>(),
          .relu = relu};
}

// x F32 (*, K) through int8_linear, after the module's own checks.
Tensor run_linear(const Module& m, const Tensor& x_in, int64_t in_features, const Tensor& packed, const Tensor& col_sum,
                  const Tensor& w_scale, const Int8Params& p, const char* fn) {
  const Tensor x = cpu_f32(x_in, fn);
  BRISK_CHECK(x.dim() >= 1 && x.size(-1) == in_features, fn, ": expects (*, ", in_features, "), got ", x.str());
  return int8_linear(x, m.maybe_buffer("weight"), w_scale, packed, col_sum, m.maybe_buffer("bias"), p);
}

}  // namespace

DynamicQuantLinear::DynamicQuantLinear(const Linear& linear, const QParams& wq, bool reduce_range)
    : Module("DynamicQuantLinear"),
      in_features(linear.in_features),
      out_features(linear.out_features),
      reduce_range(reduce_range) {
  const Tensor w = linear.maybe_parameter("weight").detach();
  register_weight(*this, quantize(w, wq), linear.maybe_parameter("bias"));
  repack();
}

void DynamicQuantLinear::repack() {
  w_scale_ = scale_tensor(weight_scales(stored_weight_qparams(*this), out_features, "DynamicQuantLinear"));
  std::tie(packed_, col_sum_) = int8_pack_weight(buffer("weight"));
}

Tensor DynamicQuantLinear::forward(const Tensor& x) {
  const Int8Params p{.dynamic = true, .reduce_range = reduce_range};
  return run_linear(*this, x, in_features, packed_, col_sum_, w_scale_, p, "DynamicQuantLinear");
}

QuantizedLinear::QuantizedLinear(const Tensor& weight, const Tensor& bias, const QParams& wq, const QParams& input,
                                 bool relu)
    : Module("QuantizedLinear"), in_features(weight.size(1)), out_features(weight.size(0)), relu(relu) {
  register_weight(*this, quantize(weight.detach(), wq), bias);
  register_input(*this, input);
  repack();
}

void QuantizedLinear::repack() {
  w_scale_ = scale_tensor(weight_scales(stored_weight_qparams(*this), out_features, "QuantizedLinear"));
  std::tie(packed_, col_sum_) = int8_pack_weight(buffer("weight"));
}

Tensor QuantizedLinear::forward(const Tensor& x) {
  return run_linear(*this, x, in_features, packed_, col_sum_, w_scale_, input_params(*this, relu), "QuantizedLinear");
}

QuantizedConv2d::QuantizedConv2d(const Conv2d& conv, const Tensor& weight, const Tensor& bias, const QParams& wq,
                                 const QParams& input, bool relu, bool pool)
    : Module("QuantizedConv2d"),
      in_channels(conv.in_channels),
      out_channels(conv.out_channels),
      kernel_size(conv.kernel_size),
      options(conv.options),
      relu(relu),
      pool(pool) {
  BRISK_CHECK(options.groups == 1, "QuantizedConv2d: grouped convolution (groups ", options.groups,
              ") is not supported; keep it in F32 (QuantizeOptions::keep_unsupported_float)");
  register_weight(*this, quantize(weight.detach(), wq), bias);
  register_input(*this, input);
  repack();
}

void QuantizedConv2d::repack() {
  w_scale_ = scale_tensor(weight_scales(stored_weight_qparams(*this), out_channels, "QuantizedConv2d"));
  // GEMM depth in (i, j, c) order, channels innermost, as the kernel's channels-last im2col reads it.
  std::tie(packed_, col_sum_) = int8_pack_weight(buffer("weight").permute(Shape{0, 2, 3, 1}).contiguous());
}

// x (B, C, H, W) F32 -> y (B, O, Ho, Wo) F32 through int8_conv2d (kernels/cpu/quantized.cpp).
Tensor QuantizedConv2d::forward(const Tensor& x_in) {
  const Tensor x = cpu_f32(x_in, "QuantizedConv2d");
  BRISK_CHECK(x.dim() == 4 && x.size(1) == in_channels, "QuantizedConv2d: expects (B, ", in_channels, ", H, W), got ",
              x.str());
  Int8Params p = input_params(*this, relu);
  p.pool = pool;
  p.stride = {options.stride[0], options.stride[1]};
  p.padding = {options.padding[0], options.padding[1]};
  p.dilation = {options.dilation[0], options.dilation[1]};
  return int8_conv2d(x, buffer("weight"), w_scale_, packed_, col_sum_, maybe_buffer("bias"), p);
}

// ---- fusion

Fused::Fused(ModulePtr layer_in, bool relu, bool pool)
    : Module("Fused"), layer(std::move(layer_in)), relu(relu), pool(pool) {
  register_module("0", layer);
}

namespace {
// The fused tail in F32: ReLU, then the 2x2 max pool.
Tensor tail(Tensor y, bool relu, bool pool) {
  if (relu) y = brisk::relu(y);
  if (pool) y = functional::max_pool2d(y, Pair{2, 2});
  return y;
}
}  // namespace

Tensor Fused::forward(const Tensor& x) { return tail((*layer)(x), relu, pool); }

namespace {

// A Conv2d with bn folded in (torch.nn.utils.fuse_conv_bn_weights).
ModulePtr fold_conv_bn(const Conv2d& conv, const BatchNorm& bn) {
  NoGradGuard no_grad;
  ConvOptions opt = conv.options;
  opt.bias = true;
  auto fused = std::make_shared<Conv2d>(conv.in_channels, conv.out_channels, conv.kernel_size, opt);
  const Tensor w = conv.maybe_parameter("weight");
  Tensor b = conv.maybe_parameter("bias");
  const Tensor rm = bn.maybe_buffer("running_mean"), rv = bn.maybe_buffer("running_var");
  BRISK_CHECK(rm.defined() && rv.defined(), "fuse: batch norm without running statistics cannot be folded");
  const int64_t O = conv.out_channels;
  Tensor gamma = bn.maybe_parameter("weight"), beta = bn.maybe_parameter("bias");
  if (!gamma.defined()) gamma = ones(Shape{O});
  if (!beta.defined()) beta = zeros(Shape{O});
  if (!b.defined()) b = zeros(Shape{O});
  const Tensor inv_std = rsqrt(add(rv, scalar_tensor(bn.eps)));
  const Tensor g = mul(gamma, inv_std);
  fused->parameter("weight").copy_(mul(w, reshape(g, Shape{O, 1, 1, 1})));
  fused->parameter("bias").copy_(add(mul(sub(b, rm), g), beta));
  return fused;
}

bool is_relu(const ModulePtr& m) { return m && m->type_name() == "ReLU"; }

void fuse_in(Module& m) {
  for (auto& [name, child] : m.named_children()) fuse_in(*child);
  auto* seq = dynamic_cast<Sequential*>(&m);
  if (!seq) return;
  const size_t n = seq->size();
  for (size_t i = 0; i < n; ++i) {
    ModulePtr cur = (*seq)[i];
    auto* conv = dynamic_cast<Conv2d*>(cur.get());
    auto* lin = dynamic_cast<Linear*>(cur.get());
    if (!conv && !lin) continue;
    size_t used = 1;
    ModulePtr layer = cur;
    if (conv && i + 1 < n) {
      if (auto* bn = dynamic_cast<BatchNorm2d*>((*seq)[i + 1].get())) {
        BRISK_CHECK(!bn->is_training(), "fuse: folding batch norm needs eval mode (call model->eval() first)");
        layer = fold_conv_bn(*conv, *bn);
        used = 2;
      }
    }
    const bool relu = i + used < n && is_relu((*seq)[i + used]);
    if (relu) ++used;
    bool pool = false;
    if (conv && i + used < n) {
      if (auto* mp = dynamic_cast<MaxPool2d*>((*seq)[i + used].get())) {
        pool = mp->kernel == Pair{2, 2} && (!mp->stride || *mp->stride == Pair{2, 2}) && mp->padding == Pair{0, 0} &&
               mp->dilation == Pair{1, 1} && !mp->ceil_mode;
        if (pool) ++used;
      }
    }
    if (used == 1) continue;
    const auto names = seq->named_children();
    seq->replace_module(names[i].first, std::make_shared<Fused>(layer, relu, pool));
    for (size_t j = 1; j < used; ++j) seq->replace_module(names[i + j].first, std::make_shared<Identity>());
    i += used - 1;
  }
}

// ---- observed and QAT wrappers

// The float layer (Linear or Conv2d) and its ReLU flag, from a bare layer or a Fused.
struct LayerRef {
  ModulePtr layer;
  bool relu = false, pool = false;
};

void check_static_qconfig(const QConfig& qc, const char* fn) {
  BRISK_CHECK(qc.activation != nullptr && qc.weight != nullptr, fn,
              ": the qconfig needs an activation and a weight observer (a dynamic qconfig has no activation "
              "observer: use quantize_dynamic)");
}

std::optional<LayerRef> as_layer(const ModulePtr& m) {
  if (auto* f = dynamic_cast<Fused*>(m.get())) return LayerRef{f->layer, f->relu, f->pool};
  if (dynamic_cast<Linear*>(m.get()) || dynamic_cast<Conv2d*>(m.get())) return LayerRef{m, false, false};
  return std::nullopt;
}

class Observed : public Module {
 public:
  Observed(LayerRef ref, const QConfig& qc)
      : Module("Observed"),
        layer(ref.layer),
        relu(ref.relu),
        pool(ref.pool),
        act(qc.activation()),
        weight(qc.weight()) {
    register_module("0", layer);
  }
  Tensor forward(const Tensor& x) override {
    act->observe(x.detach());
    return tail((*layer)(x), relu, pool);
  }
  ModulePtr layer;
  bool relu, pool;
  std::shared_ptr<Observer> act, weight;
};

class Qat : public Module {
 public:
  Qat(LayerRef ref, const QConfig& qc) : Module("Qat"), layer(ref.layer), relu(ref.relu), pool(ref.pool) {
    act = register_module("activation_post_process", std::make_shared<FakeQuantize>(qc.activation()));
    weight_fq = register_module("weight_fake_quant", std::make_shared<FakeQuantize>(qc.weight()));
    register_module("0", layer);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor xq = (*act)(x);
    const Tensor w = (*weight_fq)(layer->parameter("weight"));
    const Tensor b = layer->maybe_parameter("bias");
    Tensor y;
    if (auto* conv = dynamic_cast<Conv2d*>(layer.get())) {
      const ConvOptions& o = conv->options;
      y = functional::conv2d(xq, w, b, o.stride, o.padding, o.dilation, o.groups);
    } else {
      y = functional::linear(xq, w, b);
    }
    return tail(y, relu, pool);
  }
  ModulePtr layer;
  bool relu, pool;
  std::shared_ptr<FakeQuantize> act, weight_fq;
};

bool is_container(const Module& m) {
  return dynamic_cast<const Sequential*>(&m) || dynamic_cast<const ModuleList*>(&m) ||
         dynamic_cast<const ModuleDict*>(&m) || !m.named_children().empty();
}

// Swaps every module `swap` returns a replacement for; leaves with parameters that it does not
// handle are an error unless kept in F32.
void swap_modules(Module& m, const std::string& prefix, const std::function<ModulePtr(const ModulePtr&)>& swap,
                  const QuantizeOptions& options, const char* fn) {
  for (auto& [name, child] : m.named_children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (ModulePtr r = swap(child)) {
      m.replace_module(name, r);
      continue;
    }
    if (is_container(*child)) {
      swap_modules(*child, path, swap, options, fn);
      continue;
    }
    const bool has_params = !child->named_parameters(false).empty();
    BRISK_CHECK(!has_params || options.keep_unsupported_float, fn, ": cannot quantize '", path, "' (",
                child->type_name(),
                "): supported are Linear, Conv2d (groups 1), BatchNorm2d after a Conv2d and "
                "parameter-free layers; set QuantizeOptions::keep_unsupported_float to keep it in F32");
  }
}

ModulePtr quantized_from(const LayerRef& ref, const Tensor& weight, const QParams& wq, const QParams& in) {
  const Tensor b = ref.layer->maybe_parameter("bias");
  if (auto* conv = dynamic_cast<Conv2d*>(ref.layer.get())) {
    return std::make_shared<QuantizedConv2d>(*conv, weight, b, wq, in, ref.relu, ref.pool);
  }
  return std::make_shared<QuantizedLinear>(weight, b, wq, in, ref.relu);
}

void check_root(const ModulePtr& model, const char* fn) { BRISK_CHECK(model != nullptr, fn, ": null model"); }

}  // namespace

ModulePtr fuse(ModulePtr model) {
  check_root(model, "fuse");
  fuse_in(*model);
  return model;
}

ModulePtr quantize_dynamic(ModulePtr model, const QConfig& qc, const QuantizeOptions& options) {
  check_root(model, "quantize_dynamic");
  BRISK_CHECK(!dynamic_cast<Linear*>(model.get()), "quantize_dynamic: the root is a Linear; wrap it in a Sequential");
  BRISK_CHECK(qc.weight != nullptr, "quantize_dynamic: the qconfig has no weight observer");
  swap_modules(
      *model, "",
      [&](const ModulePtr& m) -> ModulePtr {
        auto* lin = dynamic_cast<Linear*>(m.get());
        if (!lin) return nullptr;
        auto obs = qc.weight();
        obs->observe(lin->maybe_parameter("weight").detach());
        return std::make_shared<DynamicQuantLinear>(*lin, obs->calculate_qparams(), options.reduce_range);
      },
      QuantizeOptions{.keep_unsupported_float = true}, "quantize_dynamic");
  return model;
}

ModulePtr prepare(ModulePtr model, const QConfig& qconfig, const QuantizeOptions& options) {
  check_root(model, "prepare");
  check_static_qconfig(qconfig, "prepare");
  model->eval();
  fuse(model);
  swap_modules(
      *model, "",
      [&](const ModulePtr& m) -> ModulePtr {
        auto ref = as_layer(m);
        return ref ? std::make_shared<Observed>(*ref, qconfig) : nullptr;
      },
      options, "prepare");
  return model;
}

ModulePtr prepare_qat(ModulePtr model, const QConfig& qconfig, const QuantizeOptions& options) {
  check_root(model, "prepare_qat");
  check_static_qconfig(qconfig, "prepare_qat");
  const bool was_training = model->is_training();
  model->eval();
  fuse(model);
  swap_modules(
      *model, "",
      [&](const ModulePtr& m) -> ModulePtr {
        auto ref = as_layer(m);
        return ref ? std::make_shared<Qat>(*ref, qconfig) : nullptr;
      },
      options, "prepare_qat");
  (void)was_training;
  model->train();
  return model;
}

ModulePtr convert(ModulePtr model, const QuantizeOptions& options) {
  check_root(model, "convert");
  swap_modules(
      *model, "",
      [&](const ModulePtr& m) -> ModulePtr {
        if (auto* o = dynamic_cast<Observed*>(m.get())) {
          BRISK_CHECK(o->act->observed() || options.allow_uncalibrated,
                      "convert: an input observer saw no data; run calibration batches through the prepared model "
                      "(or set QuantizeOptions::allow_uncalibrated)");
          const Tensor w = o->layer->parameter("weight").detach();
          o->weight->observe(w);
          return quantized_from({o->layer, o->relu, o->pool}, w, o->weight->calculate_qparams(),
                                o->act->calculate_qparams());
        }
        if (auto* q = dynamic_cast<Qat*>(m.get())) {
          BRISK_CHECK(q->act->observer->observed() || options.allow_uncalibrated,
                      "convert: a QAT module never ran in training mode; train (or calibrate) it first");
          const Tensor w = q->layer->parameter("weight").detach();
          if (!q->weight_fq->observer->observed()) q->weight_fq->observer->observe(w);
          return quantized_from({q->layer, q->relu, q->pool}, w, q->weight_fq->qparams(), q->act->qparams());
        }
        return nullptr;
      },
      QuantizeOptions{.keep_unsupported_float = true}, "convert");
  model->eval();
  return model;
}

// ---- files

void save_quantized(const Module& model, const std::string& path) {
  save_safetensors(path, model.state_dict(), {{kQuantizedKey, "1"}});
}

void load_quantized(Module& model, const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const auto it = file.metadata.find(kQuantizedKey);
  BRISK_CHECK(it != file.metadata.end(), "load_quantized: ", path, " is not a quantized model (no metadata '",
              kQuantizedKey, "'); load float weights with nn::load_module");
  const NamedTensors mine = model.state_dict();
  for (const auto& [name, t] : file.tensors) {
    for (const auto& [mname, mt] : mine) {
      if (mname != name) continue;
      BRISK_CHECK(mt.dtype() == t.dtype(), "load_quantized: '", name, "' is ", t.dtype(), " in ", path,
                  " but the model's is ", mt.dtype(),
                  (t.dtype() == DType::I8 && mt.dtype() == DType::F32
                       ? ": int8 weights need a quantized model (quantize_dynamic, or prepare and convert with "
                         "allow_uncalibrated), not an F32 one"
                       : ""));
    }
  }
  const LoadReport report = model.load_state_dict(file.tensors, true);
  (void)report;
  model.apply([](Module& m) {
    if (auto* d = dynamic_cast<DynamicQuantLinear*>(&m)) d->repack();
    if (auto* l = dynamic_cast<QuantizedLinear*>(&m)) l->repack();
    if (auto* c = dynamic_cast<QuantizedConv2d*>(&m)) c->repack();
  });
}

}  // namespace brisk::nn::quantize
