// engine/ops/elementwise.cpp: OpDefs and public functions of the elementwise ops: inference
// (NumPy broadcasting), backward formulas written with ordinary ops (so they run on every
// device and differentiate again), and the autocast policy, one op per few lines.
#include <cmath>
#include <limits>

#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;

// ---- inference
void same_as_input(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  out[0] = {in[0].sizes(), in[0].dtype()};
}

Shape broadcast_inputs(std::span<const Tensor> in, const char* op) {
  Shape s = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].sizes(), op);
  return s;
}

template <OpId Id>
void binary_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == in[1].dtype(), op_name(Id), ": dtypes differ (", in[0].str(), ", ", in[1].str(), ")");
  out[0] = {broadcast_inputs(in, op_name(Id)), in[0].dtype()};
}

template <OpId Id>
void compare_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  binary_infer<Id>(in, attrs, out);
  out[0].dtype = DType::Bool;
}

void where_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == DType::Bool, "where: condition must be Bool, got ", in[0].str());
  BRISK_CHECK(in[1].dtype() == in[2].dtype(), "where: dtypes differ (", in[1].str(), ", ", in[2].str(), ")");
  out[0] = {broadcast_inputs(in, "where"), in[1].dtype()};
}

void masked_fill_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in[1].dtype() == DType::Bool, "masked_fill: mask must be Bool, got ", in[1].str());
  Shape s = broadcast_shapes(in[0].sizes(), in[1].sizes(), "masked_fill");
  BRISK_CHECK(s == in[0].sizes(), "masked_fill: mask ", in[1].sizes(), " does not broadcast to input ",
              in[0].sizes());
  out[0] = {in[0].sizes(), in[0].dtype()};
}

void cast_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  out[0] = {in[0].sizes(), attrs.dtype};
}

void fill_infer(std::span<const Tensor>, const Attrs& attrs, std::span<TensorSpec> out) {
  for (int64_t s : attrs.shape) BRISK_CHECK(s >= 0, "fill: negative size in shape ", attrs.shape);
  out[0] = {attrs.shape, attrs.dtype};
}

void gelu_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  binary_infer<OpId::GeluBackward>(in, attrs, out);
}
void relu_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  binary_infer<OpId::ReluBackward>(in, attrs, out);
}

// ---- helpers for backward formulas
const Tensor& g0(const BackwardCtx& c) { return c.grads[0]; }
Tensor scalar_like(double v, const Tensor& t) { return scalar_tensor(v, t.dtype(), t.device()); }
// The gradient of a broadcast input is summed back to the input's shape.
Tensor to_input(const BackwardCtx& c, int i, const Tensor& g) { return sum_to(g, c.in_specs[size_t(i)].sizes); }

// ---- backward formulas (grads g, inputs x/a/b, output y)
void neg_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = neg(g0(c)); }
void exp_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * c.outputs[0]; }
void log_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / c.inputs[0]; }
void sqrt_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) / (c.outputs[0] * 2.0); }
void rsqrt_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * (y * y * y) * -0.5;
}
void abs_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = g0(c) * sign(c.inputs[0]); }
// sign is piecewise constant: its gradient is zero everywhere (PyTorch's convention), even where
// the incoming gradient is NaN or infinite.
void sign_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = zeros_like(g0(c)); }
void relu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::ReluBackward, {g0(c), c.outputs[0]});
}
// Linear in the incoming gradient; the derivative in y is zero wherever it exists.
void relu_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = call1(OpId::ReluBackward, {g0(c), c.inputs[1]});
}
void gelu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::GeluBackward, {g0(c), c.inputs[0]}, c.attrs);
}
void gelu_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  BRISK_CHECK(!c.needs_grad(1), "gelu_backward: the second derivative with respect to the input is not implemented");
  gi[0] = call1(OpId::GeluBackward, {g0(c), c.inputs[1]}, c.attrs);  // linear in the incoming gradient
}
void sigmoid_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * y * (1.0 - y);
}
void tanh_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  gi[0] = g0(c) * (1.0 - y * y);
}
void silu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  Tensor s = sigmoid(x);
  gi[0] = g0(c) * s * (1.0 + x * (1.0 - s));
}
void clamp_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  // The gradient passes where lo <= x <= hi (bounds included, as in PyTorch).
  const Tensor& x = c.inputs[0];
  Tensor keep = cast(ge(x, scalar_like(c.attrs.a, x)), x.dtype()) * cast(le(x, scalar_like(c.attrs.b, x)), x.dtype());
  gi[0] = g0(c) * keep;
}
void pow_scalar_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  double e = c.attrs.a;
  const Tensor& x = c.inputs[0];
  gi[0] = e == 0 ? zeros_like(g0(c)) : g0(c) * (pow(x, e - 1) * e);  // PyTorch's order of operations
}
void cast_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = cast(g0(c), c.in_specs[0].dtype); }
void add_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, c.attrs.a == 1 ? g0(c) : g0(c) * c.attrs.a);
}
void sub_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, g0(c) * -c.attrs.a);
}
void mul_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c) * c.inputs[1]);
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, g0(c) * c.inputs[0]);
}
void div_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, g0(c) / b);
  // -g a / b^2 as (a / b) / b, as PyTorch: b * b underflows to 0 for tiny b, the quotients do not.
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, neg(g0(c)) * (a / b / b));
}
// PyTorch's conventions: d/da = b a^(b-1), and 0 where b == 0 (also at a = 0, where
// 0 * 0^-1 would be NaN); d/db = a^b log a, and 0 where a == 0 and b >= 0 (the limit), while
// a == 0 with b < 0 keeps inf * -inf = -inf.
void pow_bw(const BackwardCtx& c, std::span<Tensor> gi) {
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
// PyTorch's masks: a side gets the gradient unless it loses, half of it at a tie; where either
// side is NaN neither loses, so both get all of it (the NaN side and the other one).
void minmax_bw(const BackwardCtx& c, std::span<Tensor> gi, bool is_max) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor& g = g0(c);
  Tensor half = where(eq(a, b), g * 0.5, g);
  if (c.needs_grad(0)) gi[0] = to_input(c, 0, masked_fill(half, is_max ? lt(a, b) : gt(a, b), 0.0));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, masked_fill(half, is_max ? gt(a, b) : lt(a, b), 0.0));
}
void maximum_bw(const BackwardCtx& c, std::span<Tensor> gi) { minmax_bw(c, gi, true); }
void minimum_bw(const BackwardCtx& c, std::span<Tensor> gi) { minmax_bw(c, gi, false); }
void where_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& cond = c.inputs[0];
  Tensor zero = zeros_like(g0(c));
  if (c.needs_grad(1)) gi[1] = to_input(c, 1, where(cond, g0(c), zero));
  if (c.needs_grad(2)) gi[2] = to_input(c, 2, where(cond, zero, g0(c)));
}
void masked_fill_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = masked_fill(g0(c), c.inputs[1], 0.0); }

constexpr uint32_t kIn0 = 1, kIn1 = 2, kIn01 = 3, kIn2 = 4, kOut0 = 1;

}  // namespace

namespace detail {

void define_elementwise_ops() {
  using P = CastPolicy;
  auto unary = [](OpId id, BackwardFn bw, uint32_t save_in, uint32_t save_out, P policy) {
    define(id, {.infer = same_as_input, .backward = bw, .save_inputs = save_in, .save_outputs = save_out,
                .autocast = policy});
  };
  unary(OpId::Neg, neg_bw, 0, 0, P::None);
  unary(OpId::Exp, exp_bw, 0, kOut0, P::Fp32);
  unary(OpId::Log, log_bw, kIn0, 0, P::Fp32);
  unary(OpId::Sqrt, sqrt_bw, 0, kOut0, P::Fp32);
  unary(OpId::Rsqrt, rsqrt_bw, 0, kOut0, P::Fp32);
  unary(OpId::Abs, abs_bw, kIn0, 0, P::None);
  unary(OpId::Sign, sign_bw, 0, 0, P::None);
  unary(OpId::Relu, relu_bw, 0, kOut0, P::None);
  unary(OpId::Gelu, gelu_bw, kIn0, 0, P::None);
  unary(OpId::Sigmoid, sigmoid_bw, 0, kOut0, P::None);
  unary(OpId::Tanh, tanh_bw, 0, kOut0, P::None);
  unary(OpId::Silu, silu_bw, kIn0, 0, P::None);
  unary(OpId::Clamp, clamp_bw, kIn0, 0, P::None);
  unary(OpId::PowScalar, pow_scalar_bw, kIn0, 0, P::Fp32);
  define(OpId::ReluBackward, {.infer = relu_backward_infer, .backward = relu_backward_bw, .save_inputs = kIn1});
  define(OpId::GeluBackward, {.infer = gelu_backward_infer, .backward = gelu_backward_bw, .save_inputs = kIn1});
  define(OpId::Cast, {.infer = cast_infer, .backward = cast_bw});
  define(OpId::Fill, {.infer = fill_infer});

  auto binary = [](OpId id, InferFn infer, BackwardFn bw, uint32_t save_in, P policy) {
    define(id, {.infer = infer, .backward = bw, .save_inputs = save_in, .autocast = policy});
  };
  binary(OpId::Add, binary_infer<OpId::Add>, add_bw, 0, P::Promote);
  binary(OpId::Sub, binary_infer<OpId::Sub>, sub_bw, 0, P::Promote);
  binary(OpId::Mul, binary_infer<OpId::Mul>, mul_bw, kIn01, P::Promote);
  binary(OpId::Div, binary_infer<OpId::Div>, div_bw, kIn01, P::Promote);
  binary(OpId::Pow, binary_infer<OpId::Pow>, pow_bw, kIn01, P::Fp32);
  binary(OpId::Maximum, binary_infer<OpId::Maximum>, maximum_bw, kIn01, P::Promote);
  binary(OpId::Minimum, binary_infer<OpId::Minimum>, minimum_bw, kIn01, P::Promote);
  binary(OpId::Eq, compare_infer<OpId::Eq>, nullptr, 0, P::Promote);
  binary(OpId::Ne, compare_infer<OpId::Ne>, nullptr, 0, P::Promote);
  binary(OpId::Lt, compare_infer<OpId::Lt>, nullptr, 0, P::Promote);
  binary(OpId::Le, compare_infer<OpId::Le>, nullptr, 0, P::Promote);
  binary(OpId::Gt, compare_infer<OpId::Gt>, nullptr, 0, P::Promote);
  binary(OpId::Ge, compare_infer<OpId::Ge>, nullptr, 0, P::Promote);
  define(OpId::Where, {.infer = where_infer, .backward = where_bw, .save_inputs = kIn0, .diff_inputs = kIn1 | kIn2,
                       .autocast = P::Promote});
  define(OpId::MaskedFill,
         {.infer = masked_fill_infer, .backward = masked_fill_bw, .save_inputs = kIn1, .diff_inputs = kIn0});
}

}  // namespace detail

// ---- public functions
namespace {

// Brings two operands to their common dtype (PyTorch's promotion) before a binary op.
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, const char* op) {
  BRISK_CHECK(a.defined() && b.defined(), op, ": undefined input");
  if (a.dtype() == b.dtype()) return {a, b};
  DType t = promote_types(a.dtype(), b.dtype());
  return {a.dtype() == t ? a : cast(a, t), b.dtype() == t ? b : cast(b, t)};
}

// Float-only math on an integer tensor computes in F32, as in PyTorch.
Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : cast(x, DType::F32); }

Tensor binary(OpId id, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  auto [x, y] = promoted(a, b, op_name(id));
  Attrs attrs;
  attrs.a = alpha;
  Tensor ins[2] = {x, y};
  Tensor out[1];
  call(id, ins, attrs, out);
  return out[0];
}

Tensor unary(OpId id, const Tensor& x, const Attrs& attrs = {}) { return call1(id, {x}, attrs); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary(OpId::Add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return binary(OpId::Sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "div");
  return binary(OpId::Div, as_float(x), as_float(y));  // true division
}
Tensor pow(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "pow");
  return binary(OpId::Pow, as_float(x), as_float(y));
}
Tensor pow(const Tensor& a, double exponent) {
  Attrs attrs;
  attrs.a = exponent;
  return unary(OpId::PowScalar, as_float(a), attrs);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::Minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpId::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpId::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpId::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpId::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpId::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpId::Ge, a, b); }

Tensor neg(const Tensor& x) { return unary(OpId::Neg, x); }
Tensor exp(const Tensor& x) { return unary(OpId::Exp, as_float(x)); }
Tensor log(const Tensor& x) { return unary(OpId::Log, as_float(x)); }
Tensor sqrt(const Tensor& x) { return unary(OpId::Sqrt, as_float(x)); }
Tensor rsqrt(const Tensor& x) { return unary(OpId::Rsqrt, as_float(x)); }
Tensor abs(const Tensor& x) { return unary(OpId::Abs, x); }
Tensor sign(const Tensor& x) { return unary(OpId::Sign, x); }
Tensor square(const Tensor& x) { return mul(x, x); }
Tensor relu(const Tensor& x) { return unary(OpId::Relu, x); }
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  Attrs attrs;
  attrs.flag = tanh_approximation;
  return unary(OpId::Gelu, as_float(x), attrs);
}
Tensor sigmoid(const Tensor& x) { return unary(OpId::Sigmoid, as_float(x)); }
Tensor tanh(const Tensor& x) { return unary(OpId::Tanh, as_float(x)); }
Tensor silu(const Tensor& x) { return unary(OpId::Silu, as_float(x)); }
Tensor clamp(const Tensor& x, double min, double max) {
  BRISK_CHECK(!(min > max), "clamp: min ", min, " is greater than max ", max);
  Attrs attrs;
  attrs.a = min;
  attrs.b = max;
  return unary(OpId::Clamp, x, attrs);
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::numeric_limits<double>::infinity()); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, -std::numeric_limits<double>::infinity(), max); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b, "where");
  return call1(OpId::Where, {cond, x, y});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Attrs attrs;
  attrs.a = value;
  return call1(OpId::MaskedFill, {x, mask}, attrs);
}
Tensor cast(const Tensor& x, DType dtype) {
  BRISK_CHECK(x.defined(), "cast: undefined input");
  if (x.dtype() == dtype) return x;
  Attrs attrs;
  attrs.dtype = dtype;
  return call1(OpId::Cast, {x}, attrs);
}
Tensor clone(const Tensor& x) {
  Attrs attrs;
  attrs.dtype = x.dtype();
  return call1(OpId::Cast, {x}, attrs);
}
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

// ---- factories
Tensor empty(const Shape& shape, DType dtype, Device device) { return make_empty(shape, dtype, device); }
Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Attrs attrs;
  attrs.shape = shape;
  attrs.dtype = dtype;
  attrs.device = device;
  attrs.a = value;
  Tensor out[1];
  call(OpId::Fill, {}, attrs, out);
  return out[0];
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.sizes(), value, t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return make_empty(t.sizes(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

}  // namespace brisk
