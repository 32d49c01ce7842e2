// engine/op_params.h: the named parameters of the op families whose attributes are more than
// a field or two, one struct per family (convolution, pooling, layer norm, batch norm, ...),
// read by the family's inference and backward formulas and by the kernels of every backend.
// Each struct holds the ONE place that writes it into an op's Attrs (`store`) and reads it back
// (`from`); no other code reads those Attrs fields for these ops. See Note [Op parameters].
// Not here: the Attrs struct (engine/op.h), the checks of the values (each family's inference
// in engine/ops/), PyTorch's argument defaults (nn/functional*.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>

#include "engine/error.h"
#include "engine/op.h"

namespace brisk {

// Note [Op parameters]
// An op whose attributes are a handful of related values (a conv's stride, padding, dilation
// and groups) reads them as one struct with named fields, never as Attrs' generic fields
// (`dim` for groups, `flag2` for count_include_pad, eight packed geometry ints). The struct
// keeps its values in Attrs' existing fields, through its `store`/`from` pair only, rather
// than in a typed slot: Attrs keeps its size and layout (a Node copies it), and code that
// builds Attrs by field keeps working. The layout of each family is written once, below.
// Adding a family: a section here (struct, from, store), its ops.def comment naming it.

// A (height, width) pair of a 2-D op.
struct Hw {
  int64_t h = 0, w = 0;
  friend bool operator==(const Hw&, const Hw&) = default;
};

namespace detail {

// attrs.geometry's layout, shared by conv and pooling: (stride, padding, dilation, kernel), each
// height then width.
inline constexpr int kGeometrySize = 8;

inline Shape pack_geometry(Hw stride, Hw padding, Hw dilation, Hw kernel) {
  return {stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, kernel.h, kernel.w};
}

inline const Shape& checked_geometry(const Attrs& a, const char* op) {
  BRISK_CHECK(a.geometry.size() == kGeometrySize, op,
              ": attrs.geometry must hold 8 values (stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, kernel_h, ",
              "kernel_w), got ", a.geometry);
  return a.geometry;
}

}  // namespace detail

// ---- convolution: conv2d, conv2d_backward_input, conv2d_backward_weight
// The kernel size comes from the weight. Stored in attrs.geometry (kernel entries 0) and
// attrs.dim (groups).
struct ConvParams {
  Hw stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;

  static ConvParams from(const Attrs& a, const char* op = "conv2d") {
    const Shape& g = detail::checked_geometry(a, op);
    return {{g[0], g[1]}, {g[2], g[3]}, {g[4], g[5]}, a.dim};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_geometry(stride, padding, dilation, {0, 0});
    a.dim = groups;
  }
};

// Note [One conv geometry]
// One conv2d problem: the sizes of x (B, C, H, W), w (O, C / groups, kh, kw) and y (B, O, Ho,
// Wo) with its ConvParams, named once. The ops' inference makes it with infer() (every check
// that names a user error, and the output size); the kernels of both backends read it from
// their operands (kernels/cpu/conv.h, kernels/cuda/conv.cu; int8_conv2d too), so no backend
// derives sizes, strides or groups on its own.
struct ConvGeometry {
  int64_t B = 0, C = 0, H = 0, W = 0;
  int64_t O = 0, kh = 0, kw = 0;
  int64_t Ho = 0, Wo = 0;
  int64_t groups = 1, Cg = 0, Og = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;

  ConvGeometry() = default;
  // From the operands of an inferred op (no checks).
  ConvGeometry(const Shape& x, const Shape& w, const Shape& y, const ConvParams& p)
      : B(x[0]),
        C(x[1]),
        H(x[2]),
        W(x[3]),
        O(w[0]),
        kh(w[2]),
        kw(w[3]),
        Ho(y[2]),
        Wo(y[3]),
        groups(p.groups),
        Cg(w[1]),
        Og(w[0] / p.groups),
        sh(p.stride.h),
        sw(p.stride.w),
        ph(p.padding.h),
        pw(p.padding.w),
        dh(p.dilation.h),
        dw(p.dilation.w) {}
  // From x's and w's sizes: checks ranks, params, groups and channels, that the dilated kernel
  // fits the padded input, and computes (Ho, Wo); errors name `op` and the shapes
  // (engine/ops/conv.cpp).
  static ConvGeometry infer(const Shape& x, const Shape& w, const ConvParams& p, const char* op);

  Shape x_sizes() const { return {B, C, H, W}; }
  Shape w_sizes() const { return {O, Cg, kh, kw}; }
  Shape y_sizes() const { return {B, O, Ho, Wo}; }
  int64_t K() const { return Cg * kh * kw; }  // GEMM depth
  int64_t P() const { return Ho * Wo; }       // output pixels per plane
  double macs() const { return double(B) * double(O) * double(K()) * double(P()); }
  // The input plane is the col matrix itself.
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  // One input channel per group (groups == C, as MobileNetV2's): direct loops instead of GEMM.
  bool depthwise() const { return Cg == 1 && groups > 1; }
};

// ---- pooling: max_pool2d, avg_pool2d and their backward ops
// (adaptive_avg_pool2d reads only its output size, attrs.shape). Stored in attrs.geometry,
// attrs.flag (ceil_mode) and attrs.flag2 (count_include_pad, avg_pool2d only).
struct PoolParams {
  Hw kernel, stride, padding, dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;

  static PoolParams from(const Attrs& a, const char* op) {
    const Shape& g = detail::checked_geometry(a, op);
    return {{g[6], g[7]}, {g[0], g[1]}, {g[2], g[3]}, {g[4], g[5]}, a.flag, a.flag2};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_geometry(stride, padding, dilation, kernel);
    a.flag = ceil_mode;
    a.flag2 = count_include_pad;
  }
};

// ---- layer_norm: over the last `normalized_dims` dims. Stored in attrs.dim and attrs.a.
struct LayerNormParams {
  int64_t normalized_dims = 1;
  double eps = 1e-5;

  static LayerNormParams from(const Attrs& a) { return {a.dim, a.a}; }
  void store(Attrs& a) const {
    a.dim = normalized_dims;
    a.a = eps;
  }
};

// ---- batch_norm: training (batch statistics) or eval (the running ones). Stored in
// attrs.flag and attrs.b.
struct BatchNormParams {
  bool training = false;
  double eps = 1e-5;

  static BatchNormParams from(const Attrs& a) { return {a.flag, a.b}; }
  void store(Attrs& a) const {
    a.flag = training;
    a.b = eps;
  }
};

// ---- cross_entropy, cross_entropy_backward: rows whose target is ignore_index count for
// nothing; label_smoothing in [0, 1]. Stored in attrs.start, attrs.a and attrs.reduction.
struct CrossEntropyParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  Reduction reduction = Reduction::Mean;

  static CrossEntropyParams from(const Attrs& a) { return {a.start, a.a, a.reduction}; }
  void store(Attrs& a) const {
    a.start = ignore_index;
    a.a = label_smoothing;
    a.reduction = reduction;
  }
};

// ---- fused optimizer steps: fused_sgd, fused_adam, fused_adamw, fused_rmsprop, fused_adagrad
// (Note [Fused steps are ops] in engine/ops/optim.cpp). Each struct is PyTorch's
// hyperparameters of the optimizer; what differs per parameter (the step count t behind Adam's
// bias corrections and Adagrad's decayed lr, SGD's fresh momentum buffers) is attrs.per_param,
// one integer per parameter. Stored bit for bit: the doubles in attrs.geometry (std::bit_cast),
// the switches as bits of attrs.dim.
namespace detail {

template <size_t N>
Shape pack_doubles(const double (&v)[N]) {
  static_assert(N <= size_t(kMaxDims), "attrs.geometry holds at most 8 values");
  Shape s;
  for (double x : v) s.push_back(std::bit_cast<int64_t>(x));
  return s;
}

inline double unpacked(const Attrs& a, int i, int n, const char* op) {
  BRISK_CHECK(a.geometry.size() == n, op, ": attrs.geometry must hold its ", n, " hyperparameters, got ",
              a.geometry.size(), " values");
  return std::bit_cast<double>(a.geometry[i]);
}

inline bool bit(const Attrs& a, int i) { return (a.dim >> i) & 1; }

}  // namespace detail

// SGD. Buffers: [momentum_buffer] when momentum != 0, else none. attrs.per_param (momentum
// only): 1 where the buffer is fresh (this step writes the direction into it instead of
// reading it), else 0.
struct SgdParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;

  int num_buffers() const { return momentum != 0 ? 1 : 0; }
  static SgdParams from(const Attrs& a) {
    auto d = [&](int i) { return detail::unpacked(a, i, 4, "fused_sgd"); };
    return {d(0), d(1), d(2), d(3), detail::bit(a, 0), detail::bit(a, 1)};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_doubles({lr, momentum, dampening, weight_decay});
    a.dim = int64_t(nesterov) | int64_t(maximize) << 1;
  }
};

// Adam (L2 weight decay, fused_adam) and AdamW (decoupled: p *= 1 - lr * wd, fused_adamw).
// Buffers: [exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad only)]. attrs.per_param: each
// parameter's step count t, this step included.
struct AdamParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;

  int num_buffers() const { return amsgrad ? 3 : 2; }
  // lr / (1 - beta1^t), computed in double as PyTorch's _single_tensor_adam does.
  double step_size(int64_t step) const { return lr / (1 - std::pow(beta1, double(step))); }
  // sqrt(1 - beta2^t).
  double bias_correction2_sqrt(int64_t step) const { return std::sqrt(1 - std::pow(beta2, double(step))); }
  static AdamParams from(const Attrs& a) {
    auto d = [&](int i) { return detail::unpacked(a, i, 5, "fused_adam"); };
    return {d(0), d(1), d(2), d(3), d(4), detail::bit(a, 0), detail::bit(a, 1), detail::bit(a, 2)};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_doubles({lr, beta1, beta2, eps, weight_decay});
    a.dim = int64_t(amsgrad) | int64_t(maximize) << 1 | int64_t(decoupled) << 2;
  }
};

// RMSprop. Buffers: [square_avg, grad_avg (centered only), momentum_buffer (momentum > 0 only)].
// No attrs.per_param.
struct RmspropParams {
  double lr = 0, alpha = 0, eps = 0, weight_decay = 0, momentum = 0;
  bool centered = false, maximize = false;

  int num_buffers() const { return 1 + (centered ? 1 : 0) + (momentum > 0 ? 1 : 0); }
  static RmspropParams from(const Attrs& a) {
    auto d = [&](int i) { return detail::unpacked(a, i, 5, "fused_rmsprop"); };
    return {d(0), d(1), d(2), d(3), d(4), detail::bit(a, 0), detail::bit(a, 1)};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_doubles({lr, alpha, eps, weight_decay, momentum});
    a.dim = int64_t(centered) | int64_t(maximize) << 1;
  }
};

// Adagrad. Buffers: [sum]. attrs.per_param: each parameter's step count t, this step included.
struct AdagradParams {
  double lr = 0, lr_decay = 0, eps = 0, weight_decay = 0;
  bool maximize = false;

  int num_buffers() const { return 1; }
  // lr / (1 + (t - 1) lr_decay), as PyTorch's _single_tensor_adagrad.
  double decayed_lr(int64_t step) const { return lr / (1 + double(step - 1) * lr_decay); }
  static AdagradParams from(const Attrs& a) {
    auto d = [&](int i) { return detail::unpacked(a, i, 4, "fused_adagrad"); };
    return {d(0), d(1), d(2), d(3), detail::bit(a, 0)};
  }
  void store(Attrs& a) const {
    a.geometry = detail::pack_doubles({lr, lr_decay, eps, weight_decay});
    a.dim = int64_t(maximize);
  }
};

// ---- int8 inference: int8_linear, int8_conv2d (Note [Int8 ops] in engine/ops/quantized.cpp).
// The input is quantized per tensor to quint8 [0, 255] with (input_scale, input_zero_point), or,
// when dynamic, with fbgemm's qparams of its own min and max (reduce_range: 7 bits); the F32
// results get relu and (conv only) a 2x2 / stride 2 max pool. Stored in attrs.a (scale),
// attrs.start (zero point), the switches as bits of attrs.end, and the conv's stride, padding
// and dilation in attrs.geometry (the kernel size comes from the weight).
struct Int8Params {
  double input_scale = 1;
  int64_t input_zero_point = 0;
  bool dynamic = false, reduce_range = false, relu = false, pool = false;
  Hw stride{1, 1}, padding{0, 0}, dilation{1, 1};

  // int8_conv2d's geometry parameters (one group).
  ConvParams conv() const { return {stride, padding, dilation, 1}; }
  static Int8Params from(const Attrs& a) {
    Int8Params p{a.a, a.start, bool(a.end & 1), bool(a.end & 2), bool(a.end & 4), bool(a.end & 8)};
    if (a.geometry.size() == detail::kGeometrySize) {
      const Shape& g = a.geometry;
      p.stride = {g[0], g[1]};
      p.padding = {g[2], g[3]};
      p.dilation = {g[4], g[5]};
    }
    return p;
  }
  void store(Attrs& a) const {
    a.a = input_scale;
    a.start = input_zero_point;
    a.end = int64_t(dynamic) | int64_t(reduce_range) << 1 | int64_t(relu) << 2 | int64_t(pool) << 3;
    a.geometry = detail::pack_geometry(stride, padding, dilation, {0, 0});
  }
};

// One value quantized as torch.quantize_per_tensor does: round half to even of x * inv_scale
// (F32), plus the zero point, clamped to [qmin, qmax]; inf and huge values clamp, NaN gives qmin.
inline int64_t quantize_value(float x, float inv_scale, int64_t zp, int64_t qmin, int64_t qmax) {
  const float r = std::nearbyint(x * inv_scale);
  if (!(std::abs(r) < 1e15f)) return r > 0 ? qmax : qmin;
  return std::clamp<int64_t>(int64_t(float(zp) + r), qmin, qmax);
}

// fbgemm's ChooseQuantizationParams, int8_linear's dynamic input qparams (and
// nn::quantize::choose_qparams): scale from min(min, 0) and max(max, 0) in double, zero point
// nudged into [qmin, qmax]; reduce_range halves the range.
inline std::pair<float, int32_t> choose_int8_qparams(float min, float max, int32_t qmin, int32_t qmax,
                                                     bool reduce_range) {
  BRISK_CHECK(min <= max, "choose_qparams: min ", min, " > max ", max);
  if (reduce_range) {
    qmin /= 2;
    qmax /= 2;
  }
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  double scale = (double(max) - min) / (qmax - qmin);
  if (float(scale) == 0.0f || std::isinf(1.0f / float(scale))) scale = 0.1;
  constexpr float kSmallScale = 6.1e-5f;
  if (scale < kSmallScale) {
    const float org = float(scale);
    scale = kSmallScale;
    if (min == 0.0f) {
      max = kSmallScale * float(qmax - qmin);
    } else if (max == 0.0f) {
      min = -kSmallScale * float(qmax - qmin);
    } else {
      const float amplifier = kSmallScale / org;
      min *= amplifier;
      max *= amplifier;
    }
  }
  const double zp_from_min = qmin - min / scale, zp_from_max = qmax - max / scale;
  const double err_min = std::abs(qmin) - std::abs(min / scale), err_max = std::abs(qmax) - std::abs(max / scale);
  const double initial = err_min < err_max ? zp_from_min : zp_from_max;
  int32_t zp = initial < qmin ? qmin : initial > qmax ? qmax : int32_t(std::nearbyint(initial));
  return {float(scale), zp};
}

}  // namespace brisk
