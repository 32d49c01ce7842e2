// engine/ops/nn.cpp: OpDefs of the convolution and pooling ops (NCHW, PyTorch's semantics and
// output sizes): inference with errors that name the op and the shapes, and backward formulas.
// Conv2d's gradients are the ops Conv2dBackwardInput and Conv2dBackwardWeight, whose own
// gradients are written with the three conv ops again, so double backward works; pooling's
// gradients are *_backward ops whose own gradients are the forward op (or a gather).
// Not here: the kernels (kernels/cpu/conv.cpp), the public functional forms with bias, stride
// defaults and conv1d (nn/functional_conv.cpp).
#include <algorithm>

#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;

constexpr uint32_t kIn0 = 1, kIn1 = 2, kIn01 = 3, kOut1 = 2;

// attrs.geometry, named. See ops.def.
struct Geometry {
  int64_t sh, sw, ph, pw, dh, dw, kh, kw;
};

Geometry geometry(const Attrs& a, const char* op) {
  BRISK_CHECK(a.geometry.size() == 8, op, ": attrs.geometry must hold 8 values (stride_h, stride_w, pad_h, pad_w, ",
              "dil_h, dil_w, kernel_h, kernel_w), got ", a.geometry);
  const Shape& g = a.geometry;
  Geometry r{g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]};
  BRISK_CHECK(r.sh > 0 && r.sw > 0, op, ": stride must be positive, got (", r.sh, ", ", r.sw, ")");
  BRISK_CHECK(r.ph >= 0 && r.pw >= 0, op, ": padding must be non-negative, got (", r.ph, ", ", r.pw, ")");
  BRISK_CHECK(r.dh > 0 && r.dw > 0, op, ": dilation must be positive, got (", r.dh, ", ", r.dw, ")");
  return r;
}

// x * mul + add for a geometry value and a size, or an error naming the op: a user's padding
// or dilation near 2^63 must not wrap (see Note [Checked sizes] in engine/shape.h).
int64_t checked_term(int64_t x, int64_t mul, int64_t add, const char* op, const char* what) {
  int64_t r = 0;
  const bool ok = !__builtin_mul_overflow(x, mul, &r) && !__builtin_add_overflow(r, add, &r);
  BRISK_CHECK(ok, op, ": ", what, " (", x, " x ", mul, " + ", add, ") overflows 64 bits");
  return r;
}

void check_4d(const Shape& s, const char* op, const char* what) {
  BRISK_CHECK(s.size() == 4, op, ": ", what, " must be 4-D (B, C, H, W), got ", s);
}

void check_floating(const Tensor& t, const char* op) {
  BRISK_CHECK(is_floating(t.dtype()), op, ": expects a floating tensor, got ", t.str());
}

// ---- convolution
// The output sizes of conv2d for input sizes x (B, C, H, W) and weight sizes w (O, C / groups,
// kh, kw); every check that names a user error lives here.
Shape conv_output(const Shape& x, const Shape& w, const Attrs& attrs, const char* op) {
  check_4d(x, op, "input");
  check_4d(w, op, "weight");
  const Geometry g = geometry(attrs, op);
  const int64_t groups = attrs.dim;
  BRISK_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
  BRISK_CHECK(x[1] % groups == 0, op, ": groups (", groups, ") must divide the input channels, input ", x);
  BRISK_CHECK(w[0] % groups == 0, op, ": groups (", groups, ") must divide the output channels, weight ", w);
  BRISK_CHECK(w[1] * groups == x[1], op, ": input ", x, " has ", x[1], " channels but weight ", w, " expects ",
              w[1] * groups, " (", w[1], " per group x ", groups, " groups)");
  const int64_t eff_h = checked_term(g.dh, w[2] - 1, 1, op, "dilated kernel height");
  const int64_t eff_w = checked_term(g.dw, w[3] - 1, 1, op, "dilated kernel width");
  const int64_t in_h = checked_term(g.ph, 2, x[2], op, "padded input height");
  const int64_t in_w = checked_term(g.pw, 2, x[3], op, "padded input width");
  BRISK_CHECK(w[2] > 0 && w[3] > 0 && eff_h <= in_h && eff_w <= in_w, op, ": kernel (", w[2], ", ", w[3],
              ") with dilation (", g.dh, ", ", g.dw, ") is larger than the padded input (", in_h, ", ", in_w,
              "); input ", x, ", weight ", w);
  return {x[0], w[0], (in_h - eff_h) / g.sh + 1, (in_w - eff_w) / g.sw + 1};
}

// x (B, C, H, W), w (O, C / groups, kh, kw) -> y (B, O, Ho, Wo).
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

// (grad (B, O, Ho, Wo), w) -> grad of x, sizes attrs.shape.
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

// (grad (B, O, Ho, Wo), x) -> grad of w, sizes attrs.shape.
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

Tensor conv2d_op(const Tensor& x, const Tensor& w, const Attrs& attrs) { return call1(OpId::Conv2d, {x, w}, attrs); }

Tensor conv2d_backward_input(const Tensor& g, const Tensor& w, const Attrs& attrs, const Shape& x_sizes) {
  Attrs a = attrs;
  a.shape = x_sizes;
  return call1(OpId::Conv2dBackwardInput, {g, w}, a);
}

Tensor conv2d_backward_weight(const Tensor& g, const Tensor& x, const Attrs& attrs, const Shape& w_sizes) {
  Attrs a = attrs;
  a.shape = w_sizes;
  return call1(OpId::Conv2dBackwardWeight, {g, x}, a);
}

// y = conv(x, w) + bias: gx = conv^T(g, w), gw = conv_w(g, x), gbias = g summed over (B, Ho, Wo).
void conv2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_backward_input(g, w, c.attrs, c.in_specs[0].sizes);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_weight(g, x, c.attrs, c.in_specs[1].sizes);
  if (c.in_specs.size() == 3 && c.needs_grad(2)) gi[2] = sum(g, {0, 2, 3});
}

// gx = BI(g, w) is bilinear, and <BI(g, w), u> = <g, conv(u, w)>, so with the incoming u:
// d/dg = conv(u, w), d/dw = BW(g, u).
void conv2d_backward_input_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &g = c.inputs[0], &w = c.inputs[1], &u = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_op(u, w, c.attrs);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_weight(g, u, c.attrs, c.in_specs[1].sizes);
}

// gw = BW(g, x), <BW(g, x), u> = <g, conv(x, u)>: d/dg = conv(x, u), d/dx = BI(g, u).
void conv2d_backward_weight_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &g = c.inputs[0], &x = c.inputs[1], &u = c.grads[0];
  if (c.needs_grad(0)) gi[0] = conv2d_op(x, u, c.attrs);
  if (c.needs_grad(1)) gi[1] = conv2d_backward_input(g, u, c.attrs, c.in_specs[1].sizes);
}

// ---- pooling
// PyTorch's pooling output size: the last window must start inside the input or the left
// padding (ceil_mode can otherwise add a window that starts in the right padding).
int64_t pool_output(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode,
                    const char* op) {
  const int64_t padded = checked_term(pad, 2, in, op, "padded input size");
  const int64_t window = checked_term(dil, k - 1, 1, op, "dilated window size");
  const int64_t num = checked_term(1, padded - window, ceil_mode ? stride - 1 : 0, op, "output span");
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Shape pool_output(const Shape& x, const Attrs& attrs, const char* op, bool dilated) {
  check_4d(x, op, "input");
  const Geometry g = geometry(attrs, op);
  BRISK_CHECK(g.kh > 0 && g.kw > 0, op, ": kernel size must be positive, got (", g.kh, ", ", g.kw, ")");
  BRISK_CHECK(dilated || (g.dh == 1 && g.dw == 1), op, ": takes no dilation, got (", g.dh, ", ", g.dw, ")");
  BRISK_CHECK(g.ph <= g.kh / 2 && g.pw <= g.kw / 2, op, ": padding (", g.ph, ", ", g.pw,
              ") must be at most half the kernel size (", g.kh, ", ", g.kw, ")");
  const int64_t oh = pool_output(x[2], g.kh, g.ph, g.sh, g.dh, attrs.flag, op);
  const int64_t ow = pool_output(x[3], g.kw, g.pw, g.sw, g.dw, attrs.flag, op);
  BRISK_CHECK(oh > 0 && ow > 0, op, ": input ", x, " is too small for kernel (", g.kh, ", ", g.kw, "), padding (",
              g.ph, ", ", g.pw, "), dilation (", g.dh, ", ", g.dw, "): output would be (", oh, ", ", ow, ")");
  return {x[0], x[1], oh, ow};
}

// x (B, C, H, W) -> y (B, C, Ho, Wo), indices I64 (B, C, Ho, Wo) into each H * W plane.
void max_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "max_pool2d");
  const Shape y = pool_output(in[0].sizes(), attrs, "max_pool2d", true);
  out[0] = {y, in[0].dtype()};
  out[1] = {y, DType::I64};
}

// Checks that grad has the pooled sizes of attrs.shape; used by the pooling backward ops.
void check_pool_grad(const Tensor& g, const Attrs& attrs, const char* op, bool dilated) {
  check_floating(g, op);
  const Shape y = pool_output(attrs.shape, attrs, op, dilated);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match the pooled size ", y, " of input ",
              attrs.shape);
}

// (grad, indices) -> grad of x, sizes attrs.shape.
void max_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "max_pool2d_backward";
  check_pool_grad(in[0], attrs, op, true);
  BRISK_CHECK(in[1].dtype() == DType::I64 && in[1].sizes() == in[0].sizes(), op, ": indices must be I64 of the grad's ",
              "sizes ", in[0].sizes(), ", got ", in[1].str());
  out[0] = {attrs.shape, in[0].dtype()};
}

void avg_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "avg_pool2d");
  out[0] = {pool_output(in[0].sizes(), attrs, "avg_pool2d", false), in[0].dtype()};
}

void avg_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_pool_grad(in[0], attrs, "avg_pool2d_backward", false);
  out[0] = {attrs.shape, in[0].dtype()};
}

// x (B, C, H, W) -> (B, C, out_h, out_w), attrs.shape = (out_h, out_w).
Shape adaptive_output(const Shape& x, const Shape& size, const char* op) {
  check_4d(x, op, "input");
  BRISK_CHECK(size.size() == 2 && size[0] > 0 && size[1] > 0, op, ": output size must be two positive sizes, got ",
              size);
  BRISK_CHECK(x[2] > 0 && x[3] > 0, op, ": input ", x, " has an empty plane");
  return {x[0], x[1], size[0], size[1]};
}

void adaptive_avg_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "adaptive_avg_pool2d");
  out[0] = {adaptive_output(in[0].sizes(), attrs.shape, "adaptive_avg_pool2d"), in[0].dtype()};
}

// (grad (B, C, out_h, out_w)) -> grad of x, sizes attrs.shape.
void adaptive_avg_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "adaptive_avg_pool2d_backward";
  const Tensor& g = in[0];
  check_floating(g, op);
  check_4d(g.sizes(), op, "grad");
  const Shape y = adaptive_output(attrs.shape, {g.size(2), g.size(3)}, op);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match input ", attrs.shape);
  out[0] = {attrs.shape, g.dtype()};
}

Attrs with_shape(const Attrs& attrs, const Shape& shape) {
  Attrs a = attrs;
  a.shape = shape;
  return a;
}

// Only the values carry a gradient; the indices say where it goes.
void max_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& idx = c.outputs[1];
  const Tensor g = c.grads[0].defined() ? c.grads[0] : zeros(idx.sizes(), c.in_specs[0].dtype, c.device);
  gi[0] = call1(OpId::MaxPool2dBackward, {g, idx}, with_shape(c.attrs, c.in_specs[0].sizes));
}

// gx[idx] += g is linear in g; its adjoint reads u at the indices: a gather per plane.
void max_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& idx = c.inputs[1];
  const Shape& gs = c.in_specs[0].sizes;
  const Tensor u = reshape(c.grads[0], {gs[0], gs[1], -1});
  gi[0] = reshape(gather(u, 2, reshape(idx, {gs[0], gs[1], -1})), gs);
}

void avg_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AvgPool2dBackward, {c.grads[0]}, with_shape(c.attrs, c.in_specs[0].sizes));
}

// avg_pool2d_backward is the adjoint of avg_pool2d (a linear map), so its adjoint is the pool.
void avg_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AvgPool2d, {c.grads[0]}, c.attrs);
}

void adaptive_avg_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AdaptiveAvgPool2dBackward, {c.grads[0]}, with_shape(c.attrs, c.in_specs[0].sizes));
}

void adaptive_avg_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Shape& gs = c.in_specs[0].sizes;
  gi[0] = call1(OpId::AdaptiveAvgPool2d, {c.grads[0]}, with_shape(c.attrs, {gs[2], gs[3]}));
}

}  // namespace

namespace detail {

void define_nn_ops() {
  using P = CastPolicy;
  define(OpId::Conv2d, {.infer = conv2d_infer, .backward = conv2d_bw, .save_inputs = kIn01, .autocast = P::Lower});
  define(OpId::Conv2dBackwardInput,
         {.infer = conv2d_backward_input_infer, .backward = conv2d_backward_input_bw, .save_inputs = kIn01});
  define(OpId::Conv2dBackwardWeight,
         {.infer = conv2d_backward_weight_infer, .backward = conv2d_backward_weight_bw, .save_inputs = kIn01});
  define(OpId::MaxPool2d, {.infer = max_pool2d_infer, .backward = max_pool2d_bw, .save_outputs = kOut1});
  define(OpId::MaxPool2dBackward, {.infer = max_pool2d_backward_infer, .backward = max_pool2d_backward_bw,
                                   .save_inputs = kIn1, .diff_inputs = kIn0});
  define(OpId::AvgPool2d, {.infer = avg_pool2d_infer, .backward = avg_pool2d_bw});
  define(OpId::AvgPool2dBackward, {.infer = avg_pool2d_backward_infer, .backward = avg_pool2d_backward_bw});
  define(OpId::AdaptiveAvgPool2d, {.infer = adaptive_avg_pool2d_infer, .backward = adaptive_avg_pool2d_bw});
  define(OpId::AdaptiveAvgPool2dBackward,
         {.infer = adaptive_avg_pool2d_backward_infer, .backward = adaptive_avg_pool2d_backward_bw});
}

}  // namespace detail

}  // namespace brisk
