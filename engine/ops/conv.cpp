// engine/ops/conv.cpp: the OpDefs of conv2d and its two backward ops (NCHW, PyTorch's
// semantics and output sizes), one block per op: inference with errors that name the op and the
// shapes, backward formula, OpDef row, and the call the other blocks use. Conv2d's gradients are
// conv2d_backward_input and conv2d_backward_weight, whose own gradients are written with the
// three conv ops again, so double backward works. Parameters: ConvParams (engine/op_params.h).
// Not here: the kernels (kernels/cpu/conv.cpp, kernels/cpu/conv_depthwise.cpp,
// kernels/cuda/conv.cu), the public forms with bias and conv1d (nn/functional_conv.cpp).
#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::check_4d;
using detail::check_floating;
using detail::checked_term;
using detail::define;
using detail::mask;

// The output sizes of conv2d for input sizes x (B, C, H, W) and weight sizes w (O, C / groups,
// kh, kw): ConvGeometry::infer, below.
Shape conv_output(const Shape& x, const Shape& w, const Attrs& attrs, const char* op) {
  return ConvGeometry::infer(x, w, ConvParams::from(attrs, op), op).y_sizes();
}

// The calls the backward formulas make; attrs carry the ConvParams of the forward op.
Tensor conv2d_op(const Tensor& x, const Tensor& w, const Attrs& attrs) { return call1(OpId::Conv2d, {x, w}, attrs); }
Tensor conv2d_backward_input(const Tensor& g, const Tensor& w, const Attrs& attrs, const Shape& x_sizes);
Tensor conv2d_backward_weight(const Tensor& g, const Tensor& x, const Attrs& attrs, const Shape& w_sizes);

// ---- conv2d: (x (B, C, H, W), w (O, C / groups, kh, kw)[, bias (O)]) -> y (B, O, Ho, Wo)
// The bias, when given, is the kernels' starting value of each output channel (they
// accumulate the products onto it: no separate pass to zero and no broadcast add after).
void conv2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() == 2 || in.size() == 3, "conv2d: expects (input, weight) or (input, weight, bias), got ",
              in.size(), " inputs");
  const Tensor &x = in[0], &w = in[1];
  check_floating(x, "conv2d");
  BRISK_CHECK(x.dtype() == w.dtype(), "conv2d: dtypes differ (input ", x.str(), ", weight ", w.str(), ")");
  const Shape y = conv_output(x.sizes(), w.sizes(), attrs, "conv2d");
  if (in.size() == 3) {
    const Tensor& b = in[2];
    BRISK_CHECK(b.dim() == 1 && b.size(0) == y[1], "conv2d: bias ", b.sizes(), " does not match the ", y[1],
                " output channels (output ", y, ")");
    BRISK_CHECK(b.dtype() == x.dtype(), "conv2d: dtypes differ (input ", x.str(), ", bias ", b.str(), ")");
  }
  out[0] = {y, x.dtype()};
}

// y = conv(x, w) + bias: gx = conv^T(g, w), gw = conv_w(g, x), gbias = g summed over (B, Ho, Wo).
void conv2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_backward_input(g, w, c.attrs, c.in_specs[0].sizes);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_weight(g, x, c.attrs, c.in_specs[1].sizes);
  if (c.in_specs.size() == 3 && c.needs_grad(2)) gi[2] = sum(g, {0, 2, 3});
}

const OpDef kConv2d{.infer = conv2d_infer,
                    .backward = conv2d_bw,
                    .save_inputs = mask(0, 1),  // x, w
                    .autocast = CastPolicy::Lower};

// ---- conv2d_backward_input: (grad (B, O, Ho, Wo), w) -> grad of x, sizes attrs.shape
void conv2d_backward_input_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "conv2d_backward_input";
  const Tensor &g = in[0], &w = in[1];
  check_floating(g, op);
  BRISK_CHECK(g.dtype() == w.dtype(), op, ": dtypes differ (grad ", g.str(), ", weight ", w.str(), ")");
  const Shape y = conv_output(attrs.shape, w.sizes(), attrs, op);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match the conv2d output ", y, " of input ",
              attrs.shape, " and weight ", w.sizes());
  out[0] = {attrs.shape, g.dtype()};
}

// gx = BI(g, w) is bilinear, and <BI(g, w), u> = <g, conv(u, w)>, so with the incoming u:
// d/dg = conv(u, w), d/dw = BW(g, u).
void conv2d_backward_input_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &g = c.inputs[0], &w = c.inputs[1], &u = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_op(u, w, c.attrs);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_weight(g, u, c.attrs, c.in_specs[1].sizes);
}

const OpDef kConv2dBackwardInput{
    .infer = conv2d_backward_input_infer, .backward = conv2d_backward_input_bw, .save_inputs = mask(0, 1)};  // grad, w

Tensor conv2d_backward_input(const Tensor& g, const Tensor& w, const Attrs& attrs, const Shape& x_sizes) {
  Attrs a = attrs;
  a.shape = x_sizes;
  return call1(OpId::Conv2dBackwardInput, {g, w}, a);
}

// ---- conv2d_backward_weight: (grad (B, O, Ho, Wo), x) -> grad of w, sizes attrs.shape
void conv2d_backward_weight_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "conv2d_backward_weight";
  const Tensor &g = in[0], &x = in[1];
  check_floating(g, op);
  BRISK_CHECK(g.dtype() == x.dtype(), op, ": dtypes differ (grad ", g.str(), ", input ", x.str(), ")");
  const Shape y = conv_output(x.sizes(), attrs.shape, attrs, op);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match the conv2d output ", y, " of input ",
              x.sizes(), " and weight ", attrs.shape);
  out[0] = {attrs.shape, g.dtype()};
}

// gw = BW(g, x), <BW(g, x), u> = <g, conv(x, u)>: d/dg = conv(x, u), d/dx = BI(g, u).
void conv2d_backward_weight_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &g = c.inputs[0], &x = c.inputs[1], &u = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_op(x, u, c.attrs);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_input(g, u, c.attrs, c.in_specs[1].sizes);
}

const OpDef kConv2dBackwardWeight{.infer = conv2d_backward_weight_infer,
                                  .backward = conv2d_backward_weight_bw,
                                  .save_inputs = mask(0, 1)};  // grad, x

Tensor conv2d_backward_weight(const Tensor& g, const Tensor& x, const Attrs& attrs, const Shape& w_sizes) {
  Attrs a = attrs;
  a.shape = w_sizes;
  return call1(OpId::Conv2dBackwardWeight, {g, x}, a);
}

}  // namespace

// Every check that names a user error lives here (Note [One conv geometry] in engine/op_params.h).
ConvGeometry ConvGeometry::infer(const Shape& x, const Shape& w, const ConvParams& p, const char* op) {
  check_4d(x, op, "input");
  check_4d(w, op, "weight");
  const Hw s = p.stride, pad = p.padding, d = p.dilation;
  BRISK_CHECK(s.h > 0 && s.w > 0, op, ": stride must be positive, got (", s.h, ", ", s.w, ")");
  BRISK_CHECK(pad.h >= 0 && pad.w >= 0, op, ": padding must be non-negative, got (", pad.h, ", ", pad.w, ")");
  BRISK_CHECK(d.h > 0 && d.w > 0, op, ": dilation must be positive, got (", d.h, ", ", d.w, ")");
  const int64_t groups = p.groups;
  BRISK_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
  BRISK_CHECK(x[1] % groups == 0, op, ": groups (", groups, ") must divide the input channels, input ", x);
  BRISK_CHECK(w[0] % groups == 0, op, ": groups (", groups, ") must divide the output channels, weight ", w);
  BRISK_CHECK(w[1] * groups == x[1], op, ": input ", x, " has ", x[1], " channels but weight ", w, " expects ",
              w[1] * groups, " (", w[1], " per group x ", groups, " groups)");
  const int64_t eff_h = checked_term(d.h, w[2] - 1, 1, op, "dilated kernel height");
  const int64_t eff_w = checked_term(d.w, w[3] - 1, 1, op, "dilated kernel width");
  const int64_t in_h = checked_term(pad.h, 2, x[2], op, "padded input height");
  const int64_t in_w = checked_term(pad.w, 2, x[3], op, "padded input width");
  BRISK_CHECK(w[2] > 0 && w[3] > 0 && eff_h <= in_h && eff_w <= in_w, op, ": kernel (", w[2], ", ", w[3],
              ") with dilation (", d.h, ", ", d.w, ") is larger than the padded input (", in_h, ", ", in_w, "); input ",
              x, ", weight ", w);
  return ConvGeometry(x, w, {x[0], w[0], (in_h - eff_h) / s.h + 1, (in_w - eff_w) / s.w + 1}, p);
}

namespace detail {

void define_conv_ops() {
  define(OpId::Conv2d, kConv2d);
  define(OpId::Conv2dBackwardInput, kConv2dBackwardInput);
  define(OpId::Conv2dBackwardWeight, kConv2dBackwardWeight);
}

}  // namespace detail

}  // namespace brisk
