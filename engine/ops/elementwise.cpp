// engine/ops/elementwise.cpp: the elementwise ops, one block per op: its backward formula
// (written with ordinary ops, so it runs on every device and differentiates again), its OpDef
// row (inference, what backward saves, autocast policy) and its public function. Inference is
// NumPy broadcasting for the binary ops. Composite ops (square, logsigmoid) are a public
// function over other ops and nothing else: no OpId, gradients from those ops.
// Not here: the kernels (the functors and the elementwise list in kernels/functors.h).
//
// The file-local helpers and formulas are `static` (not in an anonymous namespace) so that a
// block reads in one piece. Each row is a specialization kDef<OpId::X>; define_elementwise_ops
// (at the end) installs every op of ops.def that has one, so a block is all an op needs here.
#include <atomic>
#include <cmath>
#include <limits>

#include "engine/backend.h"
#include "engine/grad_mode.h"
#include "engine/hooks.h"
#include "engine/ops/families.h"

namespace brisk {

using detail::mask;

// The OpDef of op Id when it is an elementwise op (specialized in the op's block), else none.
template <OpId Id>
static constexpr OpDef kDef{};

// ---- shared helpers: inference
static void same_as_input(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  out[0] = {in[0].sizes(), in[0].dtype()};
}

static Shape broadcast_inputs(std::span<const Tensor> in, const char* op) {
  Shape s = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].sizes(), op);
  return s;
}

// Two inputs of one dtype, broadcast; the output has their dtype.
template <OpId Id>
static void binary_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == in[1].dtype(), op_name(Id), ": dtypes differ (", in[0].str(), ", ", in[1].str(), ")");
  out[0] = {broadcast_inputs(in, op_name(Id)), in[0].dtype()};
}

// ---- shared helpers: backward formulas (grads g, inputs x / a / b, output y)
static const Tensor& g0(const BackwardCtx& c) { return c.grads[0]; }
static Tensor scalar_like(double v, const Tensor& t) { return scalar_tensor(v, t.dtype(), t.device()); }
// The gradient of a broadcast input is summed back to the input's shape.
static Tensor to_input(const BackwardCtx& c, int i, const Tensor& g) { return sum_to(g, c.in_specs[size_t(i)].sizes); }

// ---- shared helpers: public functions
// Brings two operands to their common dtype (PyTorch's promotion) before a binary op.
static std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, const char* op) {
  BRISK_CHECK(a.defined() && b.defined(), op, ": undefined input");
  if (a.dtype() == b.dtype()) return {a, b};
  DType t = promote_types(a.dtype(), b.dtype());
  return {a.dtype() == t ? a : cast(a, t), b.dtype() == t ? b : cast(b, t)};
}

// Float-only math on an integer tensor computes in F32, as in PyTorch.
static Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : cast(x, DType::F32); }

// A finite whole number (Note [Scalar operands]).
static bool integral(double v) { return std::isfinite(v) && v == std::trunc(v); }

static Tensor unary(OpId id, const Tensor& x, const Attrs& attrs = {}) { return call1(id, {x}, attrs); }

// add's and sub's alpha scales an integer tensor only by a whole number.
static void check_alpha(OpId id, DType dtype, double alpha) {
  BRISK_CHECK(is_floating(dtype) || alpha == std::trunc(alpha), op_name(id), ": alpha ", alpha,
              " is not an integer, for ", dtype, " tensors (cast them to a floating dtype first)");
}

static Tensor binary(OpId id, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  auto [x, y] = promoted(a, b, op_name(id));
  check_alpha(id, x.dtype(), alpha);
  Tensor ins[2] = {x, y};
  Tensor out[1];
  call(id, ins, {.a = alpha}, out);
  return out[0];
}

// ---- neg(x) = -x
static void neg_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = neg(g0(c)); }
template <>
constexpr OpDef kDef<OpId::Neg>{.infer = same_as_input, .backward = neg_bw};
Tensor neg(const Tensor& x) { return unary(OpId::Neg, x); }

// ---- exp(x) = e^x; backward from the output
static void exp_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * c.outputs[0]; }
template <>
constexpr OpDef kDef<OpId::Exp>{
    .infer = same_as_input, .backward = exp_bw, .save_outputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor exp(const Tensor& x) { return unary(OpId::Exp, as_float(x)); }

// ---- log(x), natural
static void log_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / c.inputs[0]; }
template <>
constexpr OpDef kDef<OpId::Log>{
    .infer = same_as_input, .backward = log_bw, .save_inputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor log(const Tensor& x) { return unary(OpId::Log, as_float(x)); }

// ---- sqrt(x); backward from the output
static void sqrt_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / (c.outputs[0] * 2.0); }
template <>
constexpr OpDef kDef<OpId::Sqrt>{
    .infer = same_as_input, .backward = sqrt_bw, .save_outputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor sqrt(const Tensor& x) { return unary(OpId::Sqrt, as_float(x)); }

// ---- rsqrt(x) = 1 / sqrt(x); backward from the output: -y^3 / 2
static void rsqrt_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * (y * y * y) * -0.5;
}
template <>
constexpr OpDef kDef<OpId::Rsqrt>{
    .infer = same_as_input, .backward = rsqrt_bw, .save_outputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor rsqrt(const Tensor& x) { return unary(OpId::Rsqrt, as_float(x)); }

// ---- abs(x); abs(-0) = +0
static void abs_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * sign(c.inputs[0]); }
template <>
constexpr OpDef kDef<OpId::Abs>{.infer = same_as_input, .backward = abs_bw, .save_inputs = mask(0)};
Tensor abs(const Tensor& x) { return unary(OpId::Abs, x); }

// ---- sign(x) in {-1, 0, 1}; sign(NaN) = 0
// Piecewise constant: its gradient is zero everywhere (PyTorch's convention), even where the
// incoming gradient is NaN or infinite.
static void sign_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = zeros_like(g0(c)); }
template <>
constexpr OpDef kDef<OpId::Sign>{.infer = same_as_input, .backward = sign_bw};
Tensor sign(const Tensor& x) { return unary(OpId::Sign, x); }

// ---- relu(x) = max(x, 0), NaN passes; backward from the output by relu_backward(g, y), one
// pass (Decisions: fusions live in ops)
static void relu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::ReluBackward, {g0(c), c.outputs[0]});
}
template <>
constexpr OpDef kDef<OpId::Relu>{.infer = same_as_input, .backward = relu_bw, .save_outputs = mask(0)};
Tensor relu(const Tensor& x) { return unary(OpId::Relu, x); }

// relu_backward(g, y) = g where y > 0 (or NaN), else 0. Linear in g; its derivative in y is
// zero wherever it exists.
static void relu_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = call1(OpId::ReluBackward, {g0(c), c.inputs[1]});
}
template <>
constexpr OpDef kDef<OpId::ReluBackward>{
    .infer = binary_infer<OpId::ReluBackward>, .backward = relu_backward_bw, .save_inputs = mask(1)};

// ---- gelu(x), exact (erf) or tanh approximation (attrs.flag); backward by gelu_backward(g, x)
static void gelu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::GeluBackward, {g0(c), c.inputs[0]}, c.attrs);
}
template <>
constexpr OpDef kDef<OpId::Gelu>{.infer = same_as_input, .backward = gelu_bw, .save_inputs = mask(0)};
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  return unary(OpId::Gelu, as_float(x), {.flag = tanh_approximation});
}

// gelu_backward(g, x) = g * gelu'(x): linear in g; no second derivative in x.
static void gelu_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  BRISK_CHECK(!c.needs_grad(1), "gelu_backward: the second derivative with respect to the input is not implemented");
  gi[0] = call1(OpId::GeluBackward, {g0(c), c.inputs[1]}, c.attrs);
}
template <>
constexpr OpDef kDef<OpId::GeluBackward>{
    .infer = binary_infer<OpId::GeluBackward>, .backward = gelu_backward_bw, .save_inputs = mask(1)};

// ---- sigmoid(x) = 1 / (1 + e^-x); backward from the output
static void sigmoid_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * y * (1.0 - y);
}
template <>
constexpr OpDef kDef<OpId::Sigmoid>{.infer = same_as_input, .backward = sigmoid_bw, .save_outputs = mask(0)};
Tensor sigmoid(const Tensor& x) { return unary(OpId::Sigmoid, as_float(x)); }

// ---- tanh(x); backward from the output
static void tanh_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * (1.0 - y * y);
}
template <>
constexpr OpDef kDef<OpId::Tanh>{.infer = same_as_input, .backward = tanh_bw, .save_outputs = mask(0)};
Tensor tanh(const Tensor& x) { return unary(OpId::Tanh, as_float(x)); }

// ---- silu(x) = x * sigmoid(x)
static void silu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  Tensor s = sigmoid(x);
  gi[0] = g0(c) * s * (1.0 + x * (1.0 - s));
}
template <>
constexpr OpDef kDef<OpId::Silu>{.infer = same_as_input, .backward = silu_bw, .save_inputs = mask(0)};
Tensor silu(const Tensor& x) { return unary(OpId::Silu, as_float(x)); }

// ---- softplus(x, beta, threshold) = log1p(exp(beta x)) / beta, x where beta x > threshold
// (attrs a, b); its derivative is sigmoid(beta x), 1 in the linear region
static void softplus_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  Tensor bx = c.inputs[0] * c.attrs.a;
  gi[0] = where(gt(bx, scalar_like(c.attrs.b, bx)), g0(c), g0(c) * sigmoid(bx));
}
template <>
constexpr OpDef kDef<OpId::Softplus>{
    .infer = same_as_input, .backward = softplus_bw, .save_inputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary(OpId::Softplus, as_float(x), {.a = beta, .b = threshold});
}

// ---- sin, cos: each other's derivative
static void sin_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * cos(c.inputs[0]); }
template <>
constexpr OpDef kDef<OpId::Sin>{.infer = same_as_input, .backward = sin_bw, .save_inputs = mask(0)};
Tensor sin(const Tensor& x) { return unary(OpId::Sin, as_float(x)); }

static void cos_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = -(g0(c) * sin(c.inputs[0])); }
template <>
constexpr OpDef kDef<OpId::Cos>{.infer = same_as_input, .backward = cos_bw, .save_inputs = mask(0)};
Tensor cos(const Tensor& x) { return unary(OpId::Cos, as_float(x)); }

// ---- log1p(x) = log(1 + x), accurate near 0; derivative 1 / (1 + x)
static void log1p_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / (c.inputs[0] + 1.0); }
template <>
constexpr OpDef kDef<OpId::Log1p>{
    .infer = same_as_input, .backward = log1p_bw, .save_inputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor log1p(const Tensor& x) { return unary(OpId::Log1p, as_float(x)); }

// ---- log2(x); derivative 1 / (x ln 2), as PyTorch's
static void log2_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / (c.inputs[0] * 0.6931471805599453); }
template <>
constexpr OpDef kDef<OpId::Log2>{
    .infer = same_as_input, .backward = log2_bw, .save_inputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor log2(const Tensor& x) { return unary(OpId::Log2, as_float(x)); }

// ---- expm1(x) = e^x - 1, accurate near 0; derivative e^x = y + 1, from the output
static void expm1_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * (c.outputs[0] + 1.0); }
template <>
constexpr OpDef kDef<OpId::Expm1>{
    .infer = same_as_input, .backward = expm1_bw, .save_outputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor expm1(const Tensor& x) { return unary(OpId::Expm1, as_float(x)); }

// ---- erf(x); derivative 2 / sqrt(pi) e^(-x^2)
static void erf_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  gi[0] = g0(c) * exp(-(x * x)) * 1.1283791670955126;
}
template <>
constexpr OpDef kDef<OpId::Erf>{.infer = same_as_input, .backward = erf_bw, .save_inputs = mask(0)};
Tensor erf(const Tensor& x) { return unary(OpId::Erf, as_float(x)); }

// ---- reciprocal(x) = 1 / x; derivative -y^2, from the output
static void reciprocal_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = -(g0(c) * y * y);
}
template <>
constexpr OpDef kDef<OpId::Reciprocal>{
    .infer = same_as_input, .backward = reciprocal_bw, .save_outputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor reciprocal(const Tensor& x) { return unary(OpId::Reciprocal, as_float(x)); }

// ---- floor, ceil, trunc, round (half to even): step functions, gradient 0 everywhere (as
// PyTorch); on integer tensors a copy.
static void step_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = zeros_like(g0(c)); }
template <>
constexpr OpDef kDef<OpId::Floor>{.infer = same_as_input, .backward = step_bw};
template <>
constexpr OpDef kDef<OpId::Ceil>{.infer = same_as_input, .backward = step_bw};
template <>
constexpr OpDef kDef<OpId::Trunc>{.infer = same_as_input, .backward = step_bw};
template <>
constexpr OpDef kDef<OpId::Round>{.infer = same_as_input, .backward = step_bw};
static Tensor rounding(OpId id, const Tensor& x) {
  BRISK_CHECK(x.defined(), op_name(id), ": undefined input");
  return is_floating(x.dtype()) ? unary(id, x) : cast(x, x.dtype());
}
Tensor floor(const Tensor& x) { return rounding(OpId::Floor, x); }
Tensor ceil(const Tensor& x) { return rounding(OpId::Ceil, x); }
Tensor trunc(const Tensor& x) { return rounding(OpId::Trunc, x); }
Tensor round(const Tensor& x) { return rounding(OpId::Round, x); }

// ---- leaky_relu(x, slope) (attr a): slope where x <= 0
static void leaky_relu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  gi[0] = where(gt(x, scalar_like(0, x)), g0(c), g0(c) * c.attrs.a);
}
template <>
constexpr OpDef kDef<OpId::LeakyRelu>{.infer = same_as_input, .backward = leaky_relu_bw, .save_inputs = mask(0)};
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary(OpId::LeakyRelu, as_float(x), {.a = negative_slope});
}

// ---- elu(x, alpha) (attr a) = alpha (e^x - 1) where x <= 0; derivative y + alpha there
static void elu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  gi[0] = where(gt(x, scalar_like(0, x)), g0(c), g0(c) * (c.outputs[0] + c.attrs.a));
}
template <>
constexpr OpDef kDef<OpId::Elu>{
    .infer = same_as_input, .backward = elu_bw, .save_inputs = mask(0), .save_outputs = mask(0)};
Tensor elu(const Tensor& x, double alpha) { return unary(OpId::Elu, as_float(x), {.a = alpha}); }

// ---- hardsigmoid(x) = clamp(x / 6 + 1/2, 0, 1): derivative 1/6 strictly inside (-3, 3)
static Tensor inside_three(const Tensor& x) {
  return mul(cast(gt(x, scalar_like(-3, x)), x.dtype()), cast(lt(x, scalar_like(3, x)), x.dtype()));
}
static void hardsigmoid_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = g0(c) * inside_three(c.inputs[0]) * (1.0 / 6.0);
}
template <>
constexpr OpDef kDef<OpId::Hardsigmoid>{.infer = same_as_input, .backward = hardsigmoid_bw, .save_inputs = mask(0)};
Tensor hardsigmoid(const Tensor& x) { return unary(OpId::Hardsigmoid, as_float(x)); }

// ---- hardswish(x) = x * hardsigmoid(x): derivative 0 below -3, x / 3 + 1/2 on [-3, 3], 1
// above (PyTorch's hardswish_backward, bounds included in the middle piece)
static void hardswish_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  Tensor mid = x * (1.0 / 3.0) + 0.5;
  gi[0] = g0(c) * where(lt(x, scalar_like(-3, x)), zeros_like(x), where(gt(x, scalar_like(3, x)), ones_like(x), mid));
}
template <>
constexpr OpDef kDef<OpId::Hardswish>{.infer = same_as_input, .backward = hardswish_bw, .save_inputs = mask(0)};
Tensor hardswish(const Tensor& x) { return unary(OpId::Hardswish, as_float(x)); }

// ---- composites: mish, lerp, addcmul, addcdiv (gradients from their parts)
Tensor mish(const Tensor& x) { return x * tanh(softplus(x)); }
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) { return start + weight * (end - start); }
Tensor lerp(const Tensor& start, const Tensor& end, double weight) { return start + (end - start) * weight; }
Tensor addcmul(const Tensor& x, const Tensor& a, const Tensor& b, double value) { return x + a * b * value; }
Tensor addcdiv(const Tensor& x, const Tensor& a, const Tensor& b, double value) { return x + a / b * value; }

// ---- clamp(x, min, max) (attrs a, b; +-inf when absent); NaN passes
// The gradient passes where min <= x <= max (bounds included, as in PyTorch).
// clamp's backward: one clamp_backward pass, the same values as the two compares, two casts and
// two products it replaced (MobileNetV2's ReLU6 layers spent 12% of a training step there).
static void clamp_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::ClampBackward, {g0(c), c.inputs[0]}, c.attrs);
}
template <>
constexpr OpDef kDef<OpId::Clamp>{.infer = same_as_input, .backward = clamp_bw, .save_inputs = mask(0)};

// clamp_backward(g, x): linear in g (its gradient in g is itself applied to gg); zero in x.
static void clamp_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = call1(OpId::ClampBackward, {g0(c), c.inputs[1]}, c.attrs);
}
template <>
constexpr OpDef kDef<OpId::ClampBackward>{
    .infer = binary_infer<OpId::ClampBackward>, .backward = clamp_backward_bw, .save_inputs = mask(1)};
Tensor clamp(const Tensor& x, double min, double max) {
  BRISK_CHECK(!(min > max), "clamp: min ", min, " is greater than max ", max);
  auto bound = [](double v) { return std::isinf(v) || integral(v); };  // clamp_min's max is +inf
  if (x.defined() && !is_floating(x.dtype()) && !(bound(min) && bound(max))) {
    return unary(OpId::Clamp, cast(x, DType::F32), {.a = min, .b = max});  // Note [Scalar operands]
  }
  return unary(OpId::Clamp, x, {.a = min, .b = max});
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::numeric_limits<double>::infinity()); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, -std::numeric_limits<double>::infinity(), max); }

// ---- pow(x, e) for a number e (attrs.a); the special exponents take PyTorch's forms
static void pow_scalar_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  double e = c.attrs.a;
  const Tensor& x = c.inputs[0];
  gi[0] = e == 0 ? zeros_like(g0(c)) : g0(c) * (pow(x, e - 1) * e);  // PyTorch's order of operations
}
template <>
constexpr OpDef kDef<OpId::PowScalar>{
    .infer = same_as_input, .backward = pow_scalar_bw, .save_inputs = mask(0), .autocast = CastPolicy::Fp32};
Tensor pow(const Tensor& a, double exponent) { return unary(OpId::PowScalar, as_float(a), {.a = exponent}); }

// ---- cast(x, dtype) (attrs.dtype); also the plain copy of clone when the dtypes are equal
static void cast_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  out[0] = {in[0].sizes(), attrs.dtype};
}
static void cast_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = cast(g0(c), c.in_specs[0].dtype); }
template <>
constexpr OpDef kDef<OpId::Cast>{.infer = cast_infer, .backward = cast_bw};
Tensor cast(const Tensor& x, DType dtype) {
  BRISK_CHECK(x.defined(), "cast: undefined input");
  if (x.dtype() == dtype) return x;
  return call1(OpId::Cast, {x}, {.dtype = dtype});
}
Tensor clone(const Tensor& x) { return call1(OpId::Cast, {x}, {.dtype = x.dtype()}); }
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

// ---- fill: a new tensor of attrs.shape, dtype, device, every element attrs.a; the factories
static void fill_infer(std::span<const Tensor>, const Attrs& attrs, std::span<TensorSpec> out) {
  for (int64_t s : attrs.shape) BRISK_CHECK(s >= 0, "fill: negative size in shape ", attrs.shape);
  out[0] = {attrs.shape, attrs.dtype};
}
template <>
constexpr OpDef kDef<OpId::Fill>{.infer = fill_infer};
Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out[1];
  call(OpId::Fill, {}, {.shape = shape, .a = value, .dtype = dtype, .device = device}, out);
  return out[0];
}
Tensor empty(const Shape& shape, DType dtype, Device device) { return make_empty(shape, dtype, device); }
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.sizes(), value, t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return make_empty(t.sizes(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

// Note [Scalar operands]
// A number meets a tensor (x * 0.5, x + 1, x.add_(2)) as a 0-dim tensor of the tensor's dtype,
// so F16 * 0.5 stays F16 and I32 + 1 stays I32. A fractional or non-finite number with an
// integer or Bool tensor is made F32 instead, and promotion makes the result F32: I32 * 0.5
// is [-0.5, 1, 1.5] as in PyTorch, not the zeros a cast of 0.5 to I32 would give (the op
// checker's integer runs found that). PyTorch also makes I32 * 2.0 floating, because 2.0 is a
// Python float; brisk's numbers are doubles and cannot tell 2 from 2.0, so an integral number
// keeps the integer dtype. In place (x.mul_(0.5) on I32) the F32 result cannot be written into
// x: an error, as in PyTorch. Scalar attributes follow the same rule: a fractional alpha of
// add/sub on integer tensors is an error (PyTorch's too), and clamp with a fractional bound
// computes in F32 (as PyTorch promotes).

Tensor scalar_operand(double value, const Tensor& t) {
  BRISK_CHECK(t.defined(), "scalar operand: undefined tensor");
  const bool promote = !is_floating(t.dtype()) && !integral(value);
  return scalar_tensor(value, promote ? DType::F32 : t.dtype(), t.device());
}

// ---- add(a, b, alpha) = a + alpha * b (attrs.a)
static void add_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, c.attrs.a == 1 ? g0(c) : g0(c) * c.attrs.a);
}
template <>
constexpr OpDef kDef<OpId::Add>{.infer = binary_infer<OpId::Add>, .backward = add_bw, .autocast = CastPolicy::Promote};
Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary(OpId::Add, a, b, alpha); }

// ---- sub(a, b, alpha) = a - alpha * b (attrs.a)
static void sub_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, g0(c) * -c.attrs.a);
}
template <>
constexpr OpDef kDef<OpId::Sub>{.infer = binary_infer<OpId::Sub>, .backward = sub_bw, .autocast = CastPolicy::Promote};
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return binary(OpId::Sub, a, b, alpha); }

// ---- mul(a, b) = a * b
static void mul_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c) * c.inputs[1]);
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, g0(c) * c.inputs[0]);
}
template <>
constexpr OpDef kDef<OpId::Mul>{
    .infer = binary_infer<OpId::Mul>, .backward = mul_bw, .save_inputs = mask(0, 1), .autocast = CastPolicy::Promote};
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::Mul, a, b); }

// Note [Donated operands]
// GPT-2's residual adds (h = h + mlp(ln(h))) each allocated a fresh (B, T, C) result while
// their right operand, a temporary, died right after: ~74 adds a step. An operand given as an
// rvalue (the overloads of +, -, * in engine/tensor.h, as std::string's operator+ takes one)
// lends its buffer to the result when nothing else can observe it:
//  - the handle and the storage are held only by the operand (use counts 1): no view of it, no
//    other Tensor copy, and no node that saved it (a saved input or output keeps a handle on
//    the storage; exp's and tanh's backward read their output, written over it would be wrong);
//  - dense from offset 0 over its whole storage, from a device allocator (not from_blob's or
//    another library's memory, not pinned), on the current stream. A view passes only when its
//    base is gone (the storage count says no other handle is left): embedding's result, a
//    view of index_select's rows, is then a plain tensor in all but the flag;
//  - exactly the result's sizes, dtype and device: the other operand may broadcast into it,
//    it never broadcasts itself; promotion happened first (a cast is a fresh tensor only this
//    function holds, so it may be lent even when the caller kept its operand). Autocast leaves
//    add, sub and mul alone once the dtypes agree (their policy is Promote);
//  - not a leaf that requires grad, and not an input the op's backward reads while a node is
//    recorded (mul saves both inputs, so it donates only when nothing is recorded; add and sub
//    save none and donate under autograd too).
// The result is a new TensorImpl over the lent storage, passed to call() as a provided output:
// the kernel writes in place (the elementwise loops read each element before writing it at the
// same index, so out == in[0] or in[1] with one layout is safe on CPU and CUDA, as add_ already
// relies on), the storage's version is bumped, and record() gives the new handle the op's node
// as grad_fn while the node's input edge comes from the operand's own handle, still in ins[]:
// the graph is the one the allocating path builds. The operand's handle dies with the call,
// as the temporary would have (the caller's object is left empty). Were a saved output lent
// anyway, its node's version check would refuse the backward; the use counts keep that from
// happening (tests/test_donation.cpp fails without the storage's count). Nothing is lent while
// an op recorder runs (engine/trace.h): it keeps the inputs and would see a constant operand's
// values replaced by the result. The named form (h + x) never lends. brisk::add/sub/mul keep
// their one const& signature: an overload set would break code that takes their address. The
// library's own expressions lend as well wherever an operand is a temporary (backward
// formulas, losses). GPT-2 124M at 4 x 64: 25 fewer allocations a step (547 -> 522 in F32,
// 889 -> 864 under BF16 autocast; examples/bench/bench_gpt2.cpp --no-donate); the residual add
// itself takes 0.50-0.58x the allocating add's time at (4, 64, 768) and 0.68-0.69x at
// (8, 256, 768), with or without autograd (examples/bench/bench_residual.cpp): it writes into
// the buffer the branch just filled instead of a cold cached block.
namespace {
std::atomic<bool> g_donation{true};
}  // namespace
bool set_operand_donation(bool on) { return g_donation.exchange(on); }
bool operand_donation() { return g_donation.load(std::memory_order_relaxed); }

// Whether binary op Id may write its result into operand t (slot `slot`), which its caller gave
// up, against the other operand (Note [Donated operands]).
template <OpId Id>
static bool may_take(const Tensor& t, int slot, const Tensor& other, bool recording) {
  const TensorImpl& impl = *t.impl();
  const StorageImpl& st = *impl.storage;
  if (t.impl_ptr().use_count() != 1 || impl.storage.use_count() != 1) return false;
  if (impl.offset != 0 || t.numel() == 0 || !t.is_contiguous()) return false;
  if (!st.allocator || st.pinned || st.bytes != size_t(t.numel()) * t.element_size()) return false;
  if (t.dtype() != other.dtype() || t.device() != other.device()) return false;
  if (other.dim() > t.dim()) return false;
  for (int d = 1; d <= other.dim(); ++d) {
    const int64_t o = other.sizes()[other.dim() - d], n = t.sizes()[t.dim() - d];
    if (o != n && o != 1) return false;  // t would have to broadcast
  }
  if (t.requires_grad() && t.is_leaf()) return false;
  if (recording && ((kDef<Id>.save_inputs >> slot) & 1u)) return false;
  return st.stream == backend(t.device()).current_stream(t.device().index);
}

// binary() for operands the caller may have given up (a_given, b_given: it passed an rvalue).
template <OpId Id>
static Tensor binary_given(Tensor a, Tensor b, bool a_given, bool b_given, double alpha = 1.0) {
  std::pair<Tensor, Tensor> xy = promoted(a, b, op_name(Id));
  // A cast made by the promotion is a fresh tensor only this call holds, so it may be lent.
  a_given = a_given || xy.first.impl() != a.impl();
  b_given = b_given || xy.second.impl() != b.impl();
  a = Tensor();  // the promoted pair holds the only handles this call keeps
  b = Tensor();
  Tensor ins[2] = {std::move(xy.first), std::move(xy.second)};
  check_alpha(Id, ins[0].dtype(), alpha);
  Tensor out[1];
  if (operand_donation() && hooks::trace_op.load(std::memory_order_relaxed) == nullptr) {
    const bool recording = GradMode::enabled() && (ins[0].requires_grad() || ins[1].requires_grad());
    const Tensor* lent = a_given && may_take<Id>(ins[0], 0, ins[1], recording)   ? &ins[0]
                         : b_given && may_take<Id>(ins[1], 1, ins[0], recording) ? &ins[1]
                                                                                 : nullptr;
    if (lent) out[0] = make_view(lent->storage(), lent->sizes(), lent->strides(), 0, lent->dtype());
  }
  call(Id, ins, {.a = alpha}, out);
  return out[0];
}

// The operators: the same object given twice (x + std::move(x)) is read twice, never lent.
Tensor operator+(Tensor&& a, const Tensor& b) {
  return &a == &b ? add(a, b) : binary_given<OpId::Add>(std::move(a), b, true, false);
}
Tensor operator+(const Tensor& a, Tensor&& b) {
  return &a == &b ? add(a, b) : binary_given<OpId::Add>(a, std::move(b), false, true);
}
Tensor operator+(Tensor&& a, Tensor&& b) {
  return &a == &b ? add(a, b) : binary_given<OpId::Add>(std::move(a), std::move(b), true, true);
}
Tensor operator-(Tensor&& a, const Tensor& b) {
  return &a == &b ? sub(a, b) : binary_given<OpId::Sub>(std::move(a), b, true, false);
}
Tensor operator-(const Tensor& a, Tensor&& b) {
  return &a == &b ? sub(a, b) : binary_given<OpId::Sub>(a, std::move(b), false, true);
}
Tensor operator-(Tensor&& a, Tensor&& b) {
  return &a == &b ? sub(a, b) : binary_given<OpId::Sub>(std::move(a), std::move(b), true, true);
}
Tensor operator*(Tensor&& a, const Tensor& b) {
  return &a == &b ? mul(a, b) : binary_given<OpId::Mul>(std::move(a), b, true, false);
}
Tensor operator*(const Tensor& a, Tensor&& b) {
  return &a == &b ? mul(a, b) : binary_given<OpId::Mul>(a, std::move(b), false, true);
}
Tensor operator*(Tensor&& a, Tensor&& b) {
  return &a == &b ? mul(a, b) : binary_given<OpId::Mul>(std::move(a), std::move(b), true, true);
}

// ---- div(a, b) = a / b, true division (integers divide in F32)
static void div_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c) / b);
  // -g a / b^2 as (a / b) / b, as PyTorch: b * b underflows to 0 for tiny b, the quotients do not.
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, neg(g0(c)) * (a / b / b));
}
template <>
constexpr OpDef kDef<OpId::Div>{
    .infer = binary_infer<OpId::Div>, .backward = div_bw, .save_inputs = mask(0, 1), .autocast = CastPolicy::Promote};
Tensor div(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "div");
  return binary(OpId::Div, as_float(x), as_float(y));
}

// ---- pow(a, b) = a^b elementwise
// PyTorch's conventions: d/da = b a^(b-1), and 0 where b == 0 (also at a = 0, where
// 0 * 0^-1 would be NaN); d/db = a^b log a, and 0 where a == 0 and b >= 0 (the limit), while
// a == 0 with b < 0 keeps inf * -inf = -inf.
static void pow_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor& g = g0(c);
  if (c.needs_grad(0)) {
    Tensor d = g * (b * pow(a, b - 1.0));
    gi[0] = to_input(c, 0, masked_fill(d, eq(b, scalar_like(0, b)), 0.0));
  }
  if (c.needs_grad(1)) {
    Tensor base_zero = eq(a, scalar_like(0, a));
    Tensor limit = where(base_zero, ge(b, scalar_like(0, b)), base_zero);  // a == 0 and b >= 0
    gi[1] = to_input(c, 1, masked_fill(g * (pow(a, b) * log(a)), limit, 0.0));
  }
}
template <>
constexpr OpDef kDef<OpId::Pow>{
    .infer = binary_infer<OpId::Pow>, .backward = pow_bw, .save_inputs = mask(0, 1), .autocast = CastPolicy::Fp32};
Tensor pow(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "pow");
  return binary(OpId::Pow, as_float(x), as_float(y));
}

// ---- maximum(a, b), minimum(a, b); NaN propagates
// PyTorch's masks: a side gets the gradient unless it loses, half of it at a tie; where either
// side is NaN neither loses, so both get all of it (the NaN side and the other one).
static void minmax_bw(const BackwardCtx& c, std::span<Tensor> gi, bool is_max) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor& g = g0(c);
  Tensor half = where(eq(a, b), g * 0.5, g);
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, masked_fill(half, is_max ? lt(a, b) : gt(a, b), 0.0));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, masked_fill(half, is_max ? gt(a, b) : lt(a, b), 0.0));
}
static void maximum_bw(const BackwardCtx& c, std::span<Tensor> gi) { minmax_bw(c, gi, true); }
static void minimum_bw(const BackwardCtx& c, std::span<Tensor> gi) { minmax_bw(c, gi, false); }
template <>
constexpr OpDef kDef<OpId::Maximum>{.infer = binary_infer<OpId::Maximum>,
                                    .backward = maximum_bw,
                                    .save_inputs = mask(0, 1),
                                    .autocast = CastPolicy::Promote};
template <>
constexpr OpDef kDef<OpId::Minimum>{.infer = binary_infer<OpId::Minimum>,
                                    .backward = minimum_bw,
                                    .save_inputs = mask(0, 1),
                                    .autocast = CastPolicy::Promote};
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::Minimum, a, b); }

// ---- comparisons eq, ne, lt, le, gt, ge: Bool output, not differentiable
template <OpId Id>
static void compare_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  binary_infer<Id>(in, attrs, out);
  out[0].dtype = DType::Bool;
}
template <OpId Id>
static constexpr OpDef kCompareDef{.infer = compare_infer<Id>, .autocast = CastPolicy::Promote};
template <>
constexpr OpDef kDef<OpId::Eq> = kCompareDef<OpId::Eq>;
template <>
constexpr OpDef kDef<OpId::Ne> = kCompareDef<OpId::Ne>;
template <>
constexpr OpDef kDef<OpId::Lt> = kCompareDef<OpId::Lt>;
template <>
constexpr OpDef kDef<OpId::Le> = kCompareDef<OpId::Le>;
template <>
constexpr OpDef kDef<OpId::Gt> = kCompareDef<OpId::Gt>;
template <>
constexpr OpDef kDef<OpId::Ge> = kCompareDef<OpId::Ge>;
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpId::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpId::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpId::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpId::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpId::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpId::Ge, a, b); }

// ---- where(cond, a, b): a where cond (Bool), else b; all three broadcast
static void where_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == DType::Bool, "where: condition must be Bool, got ", in[0].str());
  BRISK_CHECK(in[1].dtype() == in[2].dtype(), "where: dtypes differ (", in[1].str(), ", ", in[2].str(), ")");
  out[0] = {broadcast_inputs(in, "where"), in[1].dtype()};
}
static void where_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& cond = c.inputs[0];
  Tensor zero = zeros_like(g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, where(cond, g0(c), zero));
  if (c.needs_grad(2)) gi[2] = to_input(c, 2, where(cond, zero, g0(c)));
}
template <>
constexpr OpDef kDef<OpId::Where>{.infer = where_infer,
                                  .backward = where_bw,
                                  .save_inputs = mask(0),     // cond
                                  .diff_inputs = mask(1, 2),  // not cond
                                  .autocast = CastPolicy::Promote};
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "where");
  return call1(OpId::Where, {cond, x, y});
}

// ---- masked_fill(x, mask, value): value (attrs.a) where mask (Bool, broadcasts to x), else x
static void masked_fill_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[1].dtype() == DType::Bool, "masked_fill: mask must be Bool, got ", in[1].str());
  Shape s = broadcast_shapes(in[0].sizes(), in[1].sizes(), "masked_fill");
  BRISK_CHECK(s == in[0].sizes(), "masked_fill: mask ", in[1].sizes(), " does not broadcast to input ", in[0].sizes());
  out[0] = {in[0].sizes(), in[0].dtype()};
}
static void masked_fill_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = masked_fill(g0(c), c.inputs[1], 0.0); }
template <>
constexpr OpDef kDef<OpId::MaskedFill>{.infer = masked_fill_infer,
                                       .backward = masked_fill_bw,
                                       .save_inputs = mask(1),   // the mask
                                       .diff_inputs = mask(0)};  // not the mask
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return call1(OpId::MaskedFill, {x, mask}, {.a = value});
}

// ---- composite ops: public functions over the ops above, no OpId, gradients from those ops
Tensor square(const Tensor& x) { return mul(x, x); }

// logsigmoid(x) = log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|), PyTorch's stable form (the
// softplus of a non-positive value is never in its linear region).
Tensor logsigmoid(const Tensor& x) {
  Tensor v = as_float(x);
  return minimum(v, scalar_like(0, v)) - softplus(neg(abs(v)));
}

namespace detail {

// Installs the OpDef of every op above: each op of ops.def with a kDef specialization here.
// A plain `if`: under -fsanitize=undefined GCC does not treat the function-pointer test as a
// constant expression.
void define_elementwise_ops() {
#define X(id, name, nin, nout) \
  if (kDef<OpId::id>.infer != nullptr) define(OpId::id, kDef<OpId::id>);
#include "engine/ops.def"
#undef X
}

}  // namespace detail

}  // namespace brisk
