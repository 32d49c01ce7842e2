// engine/ops/conv.cpp: the OpDefs of conv2d and its two backward ops (NCHW, PyTorch's
// semantics and output sizes), one block per op: inference with errors that name the op and the
// shapes, backward formula, OpDef row, and the call the other blocks use. Conv2d's gradients are
// conv2d_backward_input and conv2d_backward_weight, whose own gradients are written with the
// three conv ops again, so double backward works. Parameters: ConvParams (engine/op_params.h).
// Then the public forms: conv2d, conv1d, conv_transpose2d and conv_transpose1d (Note
// [Transposed convolution]).
// Not here: the kernels (kernels/cpu/conv.cpp, kernels/cpu/conv_depthwise.cpp,
// kernels/cuda/conv.cu).
#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::batch_1d;
using detail::check_4d;
using detail::check_floating;
using detail::checked_term;
using detail::define;
using detail::hw;
using detail::mask;
using detail::unbatch;

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

// Lower under autocast as conv2d: it is also conv_transpose2d's forward.
const OpDef kConv2dBackwardInput{.infer = conv2d_backward_input_infer,
                                 .backward = conv2d_backward_input_bw,
                                 .save_inputs = mask(0, 1),  // grad, w
                                 .autocast = CastPolicy::Lower};

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

// ==== the public forms (engine/functions.h): PyTorch's argument conventions (1-d forms as 2-d
// over a height of 1, unbatched inputs) turned into the ops' attributes.

namespace {

// Note [Transposed convolution]
// conv_transpose2d(x, w) is the gradient of conv2d with respect to its input: with conv2d's
// weight layout (O, C / groups, kh, kw) read as (C_in, C_out / groups, kh, kw), PyTorch's
// transposed weight layout is exactly conv2d_backward_input's operand, so the op is
// conv2d_backward_input(g = x, w) with the output sizes as its `shape`, and no new kernel:
// every backend that has conv2d's backward has it (cuDNN's backward-data on CUDA), and its
// gradients (conv2d for x, conv2d_backward_weight for w) and double backward come with it.
// conv2d_backward_input requires conv2d of the output sizes to give x's sizes. That holds
// whenever output_padding < stride (conv2d's floor division absorbs it); PyTorch also allows
// output_padding < dilation with output_padding >= stride, where conv2d of the output gives
// x's size + e rows (e = output_padding / stride). Those e extra rows of "g" meet only outputs
// that no x row meets, so x is padded with e zero rows (and columns) at the end: the same sum.

// The output size of a transposed conv along one axis, (in - 1) * stride - 2 * pad + dil *
// (k - 1) + out_pad + 1, or an error when a term overflows 64 bits (see Note [Checked sizes] in
// engine/shape.h).
int64_t transposed_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t out_pad, int64_t dil,
                        const Shape& xs, const Shape& ws) {
  int64_t a = 0, b = 0, p2 = 0, r = 0;
  const bool bad = __builtin_mul_overflow(in - 1, stride, &a) || __builtin_mul_overflow(dil, k - 1, &b) ||
                   __builtin_mul_overflow(pad, 2, &p2) || __builtin_add_overflow(a, b, &r) ||
                   __builtin_sub_overflow(r, p2, &r) || __builtin_add_overflow(r, out_pad + 1, &r);
  BRISK_CHECK(!bad, "conv_transpose2d: the output size of input ", xs, " and weight ", ws, " overflows 64 bits");
  return r;
}

// conv2d's output size along one axis for input size n.
int64_t conv_size(int64_t n, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (n + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

}  // namespace

// x (B, C, H, W), weight (O, C / groups, kh, kw) -> (B, O, Ho, Wo).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  BRISK_CHECK(x.defined() && weight.defined(), "conv2d: undefined input or weight");
  BRISK_CHECK(x.dim() != 5, "conv2d: input ", x.sizes(), " is 5-D; brisk has no conv3d (3-D convolution is not ",
              "implemented), conv2d takes (B, C, H, W)");
  Attrs a;
  ConvParams{.stride = hw(stride), .padding = hw(padding), .dilation = hw(dilation), .groups = groups}.store(a);
  if (!bias.defined()) return call1(OpId::Conv2d, {x, weight}, a);
  // The op starts each output channel at its bias (see conv2d_infer in engine/ops/conv.cpp).
  return call1(OpId::Conv2d, {x, weight, bias.dtype() == x.dtype() ? bias : cast(bias, x.dtype())}, a);
}

// x (B, C, L), weight (O, C / groups, k) -> (B, O, Lo): conv2d over (B, C, 1, L).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  BRISK_CHECK(x.defined() && weight.defined(), "conv1d: undefined input or weight");
  BRISK_CHECK(x.dim() == 3, "conv1d: input must be 3-D (B, C, L), got ", x.sizes());
  BRISK_CHECK(weight.dim() == 3, "conv1d: weight must be 3-D (O, C / groups, k), got ", weight.sizes());
  Tensor y = conv2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return squeeze(y, 2);
}

// x (B, C_in, H, W), weight (C_in, C_out / groups, kh, kw) -> (B, C_out, Ho, Wo).
// See Note [Transposed convolution].
Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  const char* op = "conv_transpose2d";
  BRISK_CHECK(x_in.defined() && weight.defined(), op, ": undefined input or weight");
  BRISK_CHECK(x_in.dim() != 5, op, ": input ", x_in.sizes(), " is 5-D; brisk has no conv_transpose3d (3-D ",
              "convolution is not implemented), conv_transpose2d takes (B, C_in, H, W)");
  BRISK_CHECK(x_in.dim() == 4 || x_in.dim() == 3, op, ": input must be 4-D (B, C_in, H, W) or 3-D (C_in, H, W), got ",
              x_in.sizes());
  BRISK_CHECK(weight.dim() == 4, op, ": weight must be 4-D (C_in, C_out / groups, kh, kw), got ", weight.sizes());
  BRISK_CHECK(is_floating(x_in.dtype()) && x_in.dtype() == weight.dtype(), op,
              ": input and weight must have one floating dtype, got input ", x_in.str(), ", weight ", weight.str());
  const bool batched = x_in.dim() == 4;
  const Tensor x = batched ? x_in : unsqueeze(x_in, 0);
  const Shape& xs = x.sizes();
  const Shape& ws = weight.sizes();
  BRISK_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
  BRISK_CHECK(ws[0] == xs[1], op, ": input ", xs, " has ", xs[1], " channels but weight ", ws, " (C_in, C_out / ",
              "groups, kh, kw) expects ", ws[0]);
  BRISK_CHECK(xs[1] % groups == 0, op, ": groups (", groups, ") must divide the input channels, input ", xs);
  BRISK_CHECK(xs[2] > 0 && xs[3] > 0, op, ": input ", xs, " has an empty plane");
  for (int i = 0; i < 2; ++i) {
    const char* axis = i == 0 ? "height" : "width";
    BRISK_CHECK(stride[i] > 0, op, ": stride must be positive, got (", stride[0], ", ", stride[1], ")");
    BRISK_CHECK(padding[i] >= 0, op, ": padding must be non-negative, got (", padding[0], ", ", padding[1], ")");
    BRISK_CHECK(dilation[i] > 0, op, ": dilation must be positive, got (", dilation[0], ", ", dilation[1], ")");
    BRISK_CHECK(output_padding[i] >= 0 && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]), op,
                ": output_padding (", output_padding[0], ", ", output_padding[1], ") must be non-negative and ",
                "smaller than either stride (", stride[0], ", ", stride[1], ") or dilation (", dilation[0], ", ",
                dilation[1], "), ", axis, " fails");
  }
  int64_t c_out = 0;
  BRISK_CHECK(!__builtin_mul_overflow(ws[1], groups, &c_out), op, ": output channels ", ws[1], " x ", groups,
              " groups overflow 64 bits");
  const Shape y_sizes{xs[0], c_out,
                      transposed_size(xs[2], ws[2], stride[0], padding[0], output_padding[0], dilation[0], xs, ws),
                      transposed_size(xs[3], ws[3], stride[1], padding[1], output_padding[1], dilation[1], xs, ws)};
  BRISK_CHECK(y_sizes[2] > 0 && y_sizes[3] > 0 && ws[2] > 0 && ws[3] > 0, op, ": input ", xs, " with weight ", ws,
              ", stride (", stride[0], ", ", stride[1], "), padding (", padding[0], ", ", padding[1],
              ") gives an empty output ", y_sizes);
  // Extra zero rows / columns where output_padding >= stride (Note [Transposed convolution]).
  const int64_t extra_h = conv_size(y_sizes[2], ws[2], stride[0], padding[0], dilation[0]) - xs[2];
  const int64_t extra_w = conv_size(y_sizes[3], ws[3], stride[1], padding[1], dilation[1]) - xs[3];
  Tensor g = x;
  if (extra_h > 0 || extra_w > 0) g = pad(g, {0, extra_w, 0, extra_h});
  Attrs a;
  ConvParams{.stride = hw(stride), .padding = hw(padding), .dilation = hw(dilation), .groups = groups}.store(a);
  a.shape = y_sizes;
  Tensor y = call1(OpId::Conv2dBackwardInput, {g, weight}, a);
  if (bias.defined()) {
    BRISK_CHECK(bias.dim() == 1 && bias.size(0) == y.size(1), op, ": bias ", bias.sizes(), " does not match the ",
                y.size(1), " output channels (output ", y.sizes(), ")");
    y = y + reshape(bias.dtype() == y.dtype() ? bias : cast(bias, y.dtype()), {1, y.size(1), 1, 1});
  }
  return unbatch(y, batched);
}

// x (B, C_in, L), weight (C_in, C_out / groups, k) -> (B, C_out, Lo): conv_transpose2d over H = 1.
Tensor conv_transpose1d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  bool batched = true;
  const Tensor x = batch_1d(x_in, "conv_transpose1d", batched);
  BRISK_CHECK(weight.defined() && weight.dim() == 3, "conv_transpose1d: weight must be 3-D (C_in, C_out / groups, k), ",
              "got ", weight.defined() ? weight.sizes() : Shape{});
  Tensor y = conv_transpose2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, {1, stride}, {0, padding},
                              {0, output_padding}, groups, {1, dilation});
  return unbatch(squeeze(y, 2), batched);
}

}  // namespace brisk
