// engine/ops/resize.cpp: the resample2d op and its backward (a separable 2-tap map of the last
// two dims), and the public padding and resizing functions over it (engine/functions.h): pad
// (constant, reflect, replicate, circular), interpolate (nearest, nearest-exact, linear /
// bilinear / trilinear with and without align_corners), pixel_shuffle and pixel_unshuffle:
// host-side tables for one op (Note [Resizing through resample2d]), cat for constant pads,
// reshape / permute for the pixel shuffles; gradients and double backward come from those ops.
// Not here: the kernels (kernels/cpu/pool.cpp, kernels/cuda/pool.cu), the modules
// (nn/layers_resize.h).
#include <cmath>
#include <limits>

#include "engine/ops/families.h"

namespace brisk {

// Note [Resizing through resample2d]
// Every padding and resizing mode is, along one dim, a map from output positions to input
// positions (reflect: mirror, replicate: clamp, circular: wrap, nearest: floor of a scaled
// position) or a blend of two such maps (linear: weights 1 - l and l). Those per-dim maps are
// separable, so the last two dims are resampled by ONE op, resample2d (below),
// from two small tables made here on the host (indices and weights of 2 taps per output row
// and column, copied to x's device): y[i, j] = sum over a, b of wh[i, a] ww[j, b]
// x[ih[i, a], iw[j, b]], one pass over the output, 1 read per output when every second weight
// is 0 (pads, nearest). A third spatial dim (trilinear, 3-d nearest, a pad of a leading dim) is
// one more resample2d over the view (outer, n, inner) with an identity column table. Its
// gradient is resample2d_backward, a scatter of each plane in output order (deterministic), and
// the gradient of that is resample2d again, so double backward works. Index_select per dim did
// the same with existing ops but ran 5-36x slower than PyTorch on the CPU (its last-dim gather
// pays a division per element; examples/bench/bench_resize.cpp). Constant padding stays cat
// with filled blocks (crops are narrow): that is one copy, as fast as PyTorch's.
// Positions, rounding and clamping are written from PyTorch's CPU kernels (aten's UpSample):
// nearest computes src = floor(dst * scale) in float, linear modes the source coordinate in
// float (double for F64 inputs), so index choices and weights are PyTorch's own.

namespace {

using detail::check_floating;
using detail::define;
using detail::mask;
using detail::with_shape;

// ---- resample2d: (x (*, H, W), ih (Ho, 2), wh (Ho, 2), iw (Wo, 2), ww (Wo, 2)) -> y (*, Ho, Wo)
// y[.., i, j] = sum over taps a, b in {0, 1} of wh[i, a] * ww[j, b] * x[.., ih[i, a], iw[j, b]].
// One pass for a separable map of the last two dims, given as tables made on the host by
// the public functions below (Note [Resizing through resample2d]). Linear in x, so its
// gradient is the adjoint, resample2d_backward, whose gradient is resample2d again. The tables
// take no gradient. attrs.shape (backward only) holds x's sizes.

// The tables' checks, shared by both ops; `plane` is (H, W) of x.
void check_tables(std::span<const Tensor> in, DType t, const char* op) {
  check_floating(in[0], op);
  const DType wt = t == DType::F64 ? DType::F64 : DType::F32;
  for (int k = 1; k < 5; k += 2) {
    const Tensor &idx = in[size_t(k)], &w = in[size_t(k) + 1];
    BRISK_CHECK(idx.dtype() == DType::I64 && idx.dim() == 2 && idx.size(1) == 2, op, ": index table ", k / 2,
                " must be I64 (n, 2), got ", idx.str());
    BRISK_CHECK(w.dtype() == wt && w.sizes() == idx.sizes(), op, ": weight table ", k / 2, " must be ", dtype_name(wt),
                " of its index table's sizes ", idx.sizes(), ", got ", w.str());
  }
}

Shape resampled(const Shape& x, std::span<const Tensor> in, const char* op) {
  BRISK_CHECK(x.size() >= 2, op, ": input must have at least 2 dims (*, H, W), got ", x);
  Shape y = x;
  y[y.size() - 2] = in[1].size(0);
  y[y.size() - 1] = in[3].size(0);
  return y;
}

void resample2d_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  check_tables(in, in[0].dtype(), "resample2d");
  out[0] = {resampled(in[0].sizes(), in, "resample2d"), in[0].dtype()};
}

void resample2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::Resample2dBackward, {c.grads[0], c.inputs[1], c.inputs[2], c.inputs[3], c.inputs[4]},
                with_shape(c.attrs, c.in_specs[0].sizes));
}

const OpDef kResample2d{.infer = resample2d_infer,
                        .backward = resample2d_bw,
                        .save_inputs = mask(1, 2, 3, 4),  // the tables
                        .diff_inputs = mask(0)};

void resample2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "resample2d_backward";
  check_tables(in, in[0].dtype(), op);
  BRISK_CHECK(in[0].sizes() == resampled(attrs.shape, in, op), op, ": grad ", in[0].sizes(),
              " does not match the resampled size of input ", attrs.shape);
  out[0] = {attrs.shape, in[0].dtype()};
}

void resample2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::Resample2d, {c.grads[0], c.inputs[1], c.inputs[2], c.inputs[3], c.inputs[4]}, c.attrs);
}

const OpDef kResample2dBackward{.infer = resample2d_backward_infer,
                                .backward = resample2d_backward_bw,
                                .save_inputs = mask(1, 2, 3, 4),
                                .diff_inputs = mask(0)};

bool identity(const std::vector<int64_t>& idx, int64_t n) {
  if (int64_t(idx.size()) != n) return false;
  for (int64_t i = 0; i < n; ++i)
    if (idx[size_t(i)] != i) return false;
  return true;
}

// One dim's resampling table: per output, two (input index, weight) taps.
struct Axis {
  std::vector<int64_t> idx;  // (n, 2) row-major
  std::vector<double> w;     // (n, 2)
  bool is_identity = false;  // output k reads input k with weight 1 (n = input size)
};

// Output k reads input src[k] alone.
Axis one_tap_axis(const std::vector<int64_t>& src, int64_t in) {
  Axis a;
  a.idx.reserve(2 * src.size());
  a.w.reserve(2 * src.size());
  for (int64_t s : src) {
    a.idx.push_back(s);
    a.idx.push_back(s);
    a.w.push_back(1.0);
    a.w.push_back(0.0);
  }
  a.is_identity = identity(src, in);
  return a;
}

Axis identity_axis(int64_t n) {
  std::vector<int64_t> src(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) src[size_t(k)] = k;
  return one_tap_axis(src, n);
}

// resample2d of the last two dims of x (see Note [Resizing through resample2d]).
Tensor resample_last2(const Tensor& x, const Axis& h, const Axis& w) {
  if (h.is_identity && w.is_identity) return x;
  const Device dev = x.device();
  const DType wt = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  auto table = [&](const std::vector<int64_t>& v) {
    Tensor t = from_data<int64_t>(v.data(), {int64_t(v.size() / 2), 2});
    return dev.is_cpu() ? t : t.to(dev);
  };
  auto weights = [&](const std::vector<double>& v) { return from_vector(v, {int64_t(v.size() / 2), 2}, wt, dev); };
  return call1(OpId::Resample2d, {x, table(h.idx), weights(h.w), table(w.idx), weights(w.w)}, Attrs{});
}

// resample2d of dim d alone: over the view (outer, n, inner), or (outer, 1, n) for the last dim.
Tensor resample_dim(const Tensor& x, int64_t d, const Axis& a) {
  if (a.is_identity) return x;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
  Shape out = x.sizes();
  out[int(d)] = int64_t(a.idx.size() / 2);
  if (inner == 1) return reshape(resample_last2(reshape(x, {outer, 1, x.size(d)}), identity_axis(1), a), out);
  return reshape(resample_last2(reshape(x, {outer, x.size(d), inner}), a, identity_axis(inner)), out);
}

enum class PadMode { Constant, Reflect, Replicate, Circular };

PadMode pad_mode(const std::string& mode) {
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "replicate") return PadMode::Replicate;
  if (mode == "circular") return PadMode::Circular;
  BRISK_FAIL("pad: unknown padding mode '", mode, "' (expected constant, reflect, replicate or circular)");
}

// Input position of output position o along a dim of size n padded by (lo, hi) in `mode`.
// Reflect and replicate mirror / clamp against the whole input; circular, as PyTorch, first
// crops (negative pads), then wraps around what is left, [c0, c0 + kept).
int64_t pad_source(int64_t o, int64_t lo, int64_t hi, int64_t n, PadMode mode) {
  const int64_t s = o - lo;
  switch (mode) {
    case PadMode::Reflect: return s < 0 ? -s : (s >= n ? 2 * (n - 1) - s : s);
    case PadMode::Replicate: return s < 0 ? 0 : (s >= n ? n - 1 : s);
    default: {  // circular
      const int64_t c0 = std::max<int64_t>(-lo, 0);
      const int64_t kept = n - c0 - std::max<int64_t>(-hi, 0);
      const int64_t k = o - std::max<int64_t>(lo, 0);
      return c0 + ((k % kept) + kept) % kept;
    }
  }
}

// x padded by (lo, hi) along dim d with `value`: narrow for crops, cat with filled blocks.
Tensor pad_constant(const Tensor& x, int64_t d, int64_t lo, int64_t hi, double value) {
  Tensor y = narrow(x, d, std::max<int64_t>(-lo, 0), x.size(d) + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0));
  if (lo <= 0 && hi <= 0) return y;
  std::vector<Tensor> parts;
  Shape block = y.sizes();
  if (lo > 0) {
    block[d] = lo;
    parts.push_back(full(block, value, x.dtype(), x.device()));
  }
  parts.push_back(y);
  if (hi > 0) {
    block[d] = hi;
    parts.push_back(full(block, value, x.dtype(), x.device()));
  }
  return cat(parts, d);
}

// ---- interpolate

enum class Sampling { Nearest, NearestExact, Linear };

// What `mode` samples and the input rank it needs (0: any of 3, 4, 5).
Sampling sampling_of(const std::string& mode, int64_t dim, const Shape& sizes) {
  if (mode == "nearest") return Sampling::Nearest;
  if (mode == "nearest-exact") return Sampling::NearestExact;
  const int64_t want = mode == "linear" ? 3 : mode == "bilinear" ? 4 : mode == "trilinear" ? 5 : 0;
  BRISK_CHECK(want != 0, "interpolate: unknown mode '", mode,
              "' (expected nearest, nearest-exact, linear, bilinear or trilinear; area and bicubic are not "
              "implemented)");
  BRISK_CHECK(dim == want, "interpolate: mode '", mode, "' takes a ", want, "-D input (", want - 2,
              " spatial dims), got ", sizes);
  return Sampling::Linear;
}

// PyTorch's compute_scales_value: 1 / scale_factor when one is given, else in / out; in T.
template <class T>
T scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale.has_value() && *scale > 0 ? T(1.0 / *scale) : T(in) / T(out);
}

// PyTorch's nearest_idx / nearest_neighbor_exact_idx (float arithmetic, as its CPU kernel).
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float s = scale_value<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t src = 0;
    if (!exact && out == in) {
      src = o;
    } else if (!exact && out == 2 * in) {
      src = o >> 1;
    } else {
      const float pos = exact ? std::floor((float(o) + 0.5f) * s) : std::floor(float(o) * s);
      src = std::min(int64_t(pos), in - 1);
    }
    idx[size_t(o)] = src;
  }
  return idx;
}

// The two taps and weights of linear output o: x[i0] * w0 + x[i1] * w1 (PyTorch's
// area_pixel_compute_scale / area_pixel_compute_source_index and compute_indices_weights_linear).
template <class T>
void linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, std::vector<int64_t>& i0,
                 std::vector<int64_t>& i1, std::vector<double>& w0, std::vector<double>& w1) {
  const T s = align_corners ? (out > 1 ? T(in - 1) / T(out - 1) : T(0)) : scale_value<T>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    T src = align_corners ? s * T(o) : s * (T(o) + T(0.5)) - T(0.5);
    if (src < T(0)) src = T(0);
    const int64_t lo = std::min(int64_t(src), in - 1);
    const T lambda = std::min(src - T(lo), T(1));
    i0.push_back(lo);
    i1.push_back(lo < in - 1 ? lo + 1 : lo);
    w1.push_back(double(lambda));
    w0.push_back(double(T(1) - lambda));
  }
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  BRISK_CHECK(x.defined(), "pad: undefined input");
  const PadMode m = pad_mode(mode);
  BRISK_CHECK(pads.size() % 2 == 0, "pad: the padding list must hold (before, after) pairs, last dim first, got ",
              pads.size(), " values");
  BRISK_CHECK(int64_t(pads.size() / 2) <= x.dim(), "pad: ", pads.size() / 2, " (before, after) pairs for a ", x.dim(),
              "-D input ", x.sizes());
  BRISK_CHECK(m == PadMode::Constant || value == 0.0, "pad: mode '", mode, "' takes no fill value, got ", value);
  BRISK_CHECK(m == PadMode::Constant || is_floating(x.dtype()), "pad: mode '", mode,
              "' takes a floating tensor (constant mode takes any), got ", x.str());
  // Constant pads and crops first, per dim; the other modes collect one table per dim.
  Tensor y = x;
  std::vector<Axis> axes(static_cast<size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) axes[size_t(d)] = identity_axis(x.size(d));
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - int64_t(k);
    const int64_t lo = pads[2 * k], hi = pads[2 * k + 1], n = x.size(d);
    int64_t out = 0;
    const bool overflow = __builtin_add_overflow(n, lo, &out) || __builtin_add_overflow(out, hi, &out);
    BRISK_CHECK(!overflow && out >= 0, "pad: padding (", lo, ", ", hi, ") of dim ", d, " (size ", n, ") of input ",
                x.sizes(), " gives a negative or overflowing size");
    if (lo == 0 && hi == 0) continue;
    if (m == PadMode::Constant) {
      y = pad_constant(y, d, lo, hi, value);
      continue;
    }
    if (m == PadMode::Reflect) {
      BRISK_CHECK(lo < n && hi < n, "pad: reflect padding (", lo, ", ", hi, ") of dim ", d,
                  " must be smaller than its size ", n, " (input ", x.sizes(), ")");
    } else if (m == PadMode::Circular) {
      const int64_t kept = n + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0);  // after the crops
      BRISK_CHECK(lo <= kept && hi <= kept, "pad: circular padding (", lo, ", ", hi, ") of dim ", d,
                  " must be at most its size ", kept, kept < n ? " after cropping" : "", " (input ", x.sizes(),
                  "): it would wrap more than once");
    }
    BRISK_CHECK(n > 0 || out == 0, "pad: ", mode, " padding of dim ", d, " of input ", x.sizes(), ", which is empty");
    std::vector<int64_t> idx(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) idx[size_t(o)] = pad_source(o, lo, hi, n, m);
    axes[size_t(d)] = one_tap_axis(idx, n);
  }
  if (m == PadMode::Constant) return y;
  // The last two dims in one pass, any others one by one (see Note [Resizing through resample2d]).
  const int64_t n = x.dim();
  for (int64_t d = 0; d + 2 < n; ++d) y = resample_dim(y, d, axes[size_t(d)]);
  if (n == 1) return resample_dim(y, 0, axes[0]);
  return resample_last2(y, axes[size_t(n - 2)], axes[size_t(n - 1)]);
}

// See Note [Resizing through resample2d].
Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  BRISK_CHECK(x.defined(), "interpolate: undefined input");
  BRISK_CHECK(x.dim() >= 3 && x.dim() <= 5, "interpolate: input must be 3-D (B, C, L), 4-D (B, C, H, W) or 5-D ",
              "(B, C, D, H, W), got ", x.sizes());
  BRISK_CHECK(is_floating(x.dtype()), "interpolate: expects a floating tensor, got ", x.str());
  const Sampling sampling = sampling_of(o.mode, x.dim(), x.sizes());
  BRISK_CHECK(sampling == Sampling::Linear || !o.align_corners.has_value(), "interpolate: align_corners is only for ",
              "the linear modes (linear, bilinear, trilinear), not '", o.mode, "'");
  const bool align = o.align_corners.value_or(false);
  const int64_t spatial = x.dim() - 2;
  BRISK_CHECK(o.size.empty() != o.scale_factor.empty(), "interpolate: give exactly one of size and scale_factor (got ",
              o.size.size(), " sizes and ", o.scale_factor.size(), " scale factors)");
  const size_t given = o.size.empty() ? o.scale_factor.size() : o.size.size();
  BRISK_CHECK(given == 1 || int64_t(given) == spatial, "interpolate: ", o.size.empty() ? "scale_factor" : "size",
              " must hold 1 or ", spatial, " values for input ", x.sizes(), ", got ", given);
  Shape out_sizes = Shape::filled(spatial, 0);
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = x.size(2 + i);
    BRISK_CHECK(in > 0, "interpolate: input ", x.sizes(), " has an empty spatial dim ", 2 + i);
    if (!o.size.empty()) {
      out_sizes[i] = o.size[given == 1 ? 0 : size_t(i)];
      BRISK_CHECK(out_sizes[i] > 0, "interpolate: output sizes must be positive, got ", o.size.size(), " values (",
                  out_sizes[i], " for dim ", 2 + i, ") for input ", x.sizes());
      continue;
    }
    const double f = o.scale_factor[given == 1 ? 0 : size_t(i)];
    BRISK_CHECK(std::isfinite(f) && f > 0, "interpolate: scale_factor must be positive and finite, got ", f,
                " for dim ", 2 + i);
    const double want = std::floor(double(in) * f);
    BRISK_CHECK(want >= 1 && want < 9.0e15, "interpolate: scale_factor ", f, " gives output size ", want, " for dim ",
                2 + i, " of size ", in, " (input ", x.sizes(), ")");
    out_sizes[i] = int64_t(want);
    if (!o.recompute_scale_factor) scales[size_t(i)] = f;
  }
  std::vector<Axis> axes;
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = x.size(2 + i), out = out_sizes[i];
    if (sampling != Sampling::Linear) {
      axes.push_back(one_tap_axis(nearest_indices(in, out, scales[size_t(i)], sampling == Sampling::NearestExact), in));
      continue;
    }
    std::vector<int64_t> i0, i1;
    std::vector<double> w0, w1;
    if (x.dtype() == DType::F64) {
      linear_taps<double>(in, out, align, scales[size_t(i)], i0, i1, w0, w1);
    } else {
      linear_taps<float>(in, out, align, scales[size_t(i)], i0, i1, w0, w1);
    }
    Axis a;
    a.is_identity = identity(i0, in);
    for (size_t k = 0; k < i0.size(); ++k) {
      a.idx.push_back(i0[k]);
      a.idx.push_back(i1[k]);
      a.w.push_back(w0[k]);
      a.w.push_back(w1[k]);
      a.is_identity = a.is_identity && w1[k] == 0.0;  // every output on its own input alone
    }
    axes.push_back(std::move(a));
  }
  // (B, C, L): the last two dims are (C, L); (B, C, D, H, W): D first, then (H, W) in one pass.
  if (spatial == 1) return resample_last2(x, identity_axis(x.size(1)), axes[0]);
  const Tensor y = spatial == 3 ? resample_dim(x, 2, axes[0]) : x;
  return resample_last2(y, axes[size_t(spatial - 2)], axes[size_t(spatial - 1)]);
}

// (*, C * r^2, H, W) -> (*, C, r, r, H, W) -> (*, C, H, r, W, r) -> (*, C, H * r, W * r).
Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  BRISK_CHECK(x.defined(), "pixel_shuffle: undefined input");
  BRISK_CHECK(x.dim() >= 3, "pixel_shuffle: input must have at least 3 dims (*, C, H, W), got ", x.sizes());
  BRISK_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), c = x.size(-3), h = x.size(-2), w = x.size(-1);
  BRISK_CHECK(r <= (int64_t(1) << 31) && c % (r * r) == 0, "pixel_shuffle: the ", c, " channels of input ", x.sizes(),
              " are not divisible by upscale_factor^2 = ", r, "^2");
  Shape split = x.sizes();
  split.resize(n - 3);
  Shape dims;
  for (int64_t i = 0; i < n - 3; ++i) dims.push_back(i);
  const int64_t b = n - 3;  // first of (C, r, r, H, W)
  Shape out = split;
  for (int64_t s : {c / (r * r), r, r, h, w}) split.push_back(s);
  for (int64_t s : {b, b + 3, b + 1, b + 4, b + 2}) dims.push_back(s);
  for (int64_t s : {c / (r * r), h * r, w * r}) out.push_back(s);
  return reshape(permute(reshape(x, split), dims), out);
}

// (*, C, H * r, W * r) -> (*, C, H, r, W, r) -> (*, C, r, r, H, W) -> (*, C * r^2, H, W).
Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  BRISK_CHECK(x.defined(), "pixel_unshuffle: undefined input");
  BRISK_CHECK(x.dim() >= 3, "pixel_unshuffle: input must have at least 3 dims (*, C, H, W), got ", x.sizes());
  BRISK_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), c = x.size(-3), h = x.size(-2), w = x.size(-1);
  BRISK_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: the height ", h, " and width ", w, " of input ", x.sizes(),
              " must be divisible by downscale_factor ", r);
  Shape split = x.sizes();
  split.resize(n - 3);
  Shape dims;
  for (int64_t i = 0; i < n - 3; ++i) dims.push_back(i);
  const int64_t b = n - 3;  // first of (C, H, r, W, r)
  Shape out = split;
  for (int64_t s : {c, h / r, r, w / r, r}) split.push_back(s);
  for (int64_t s : {b, b + 2, b + 4, b + 1, b + 3}) dims.push_back(s);
  for (int64_t s : {c * r * r, h / r, w / r}) out.push_back(s);
  return reshape(permute(reshape(x, split), dims), out);
}

namespace detail {

void define_resize_ops() {
  define(OpId::Resample2d, kResample2d);
  define(OpId::Resample2dBackward, kResample2dBackward);
}

}  // namespace detail

}  // namespace brisk
