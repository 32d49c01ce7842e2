// engine/ops/pool.cpp: the OpDefs of the pooling ops (NCHW, PyTorch's semantics and output
// sizes): max_pool2d, avg_pool2d, adaptive_avg_pool2d and their *_backward ops, and
// adaptive_max_pool2d, one block per op: inference with errors that name the op and the shapes,
// backward formula, OpDef row. Each forward op's gradient is its *_backward op, whose own
// gradient is the forward op (or, for max pooling, a gather); adaptive_max_pool2d's gradient is
// a scatter_add. Also resample2d and its backward (a separable 2-tap map of the last two dims,
// which pad and interpolate use). Parameters: PoolParams (engine/op_params.h); adaptive pooling
// reads only its output size, attrs.shape.
// Not here: the kernels (kernels/cpu/pool.cpp, kernels/cuda/pool.cu), the public forms with
// stride defaults (nn/functional_conv.cpp).
#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::check_4d;
using detail::check_floating;
using detail::checked_term;
using detail::define;
using detail::mask;

// PyTorch's pooling output size along one axis: the last window must start inside the input
// or the left padding (ceil_mode can otherwise add a window that starts in the right padding).
int64_t pool_output(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode, const char* op) {
  const int64_t padded = checked_term(pad, 2, in, op, "padded input size");
  const int64_t window = checked_term(dil, k - 1, 1, op, "dilated window size");
  const int64_t num = checked_term(1, padded - window, ceil_mode ? stride - 1 : 0, op, "output span");
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The pooled sizes of x (B, C, H, W); every check that names a user error lives here.
Shape pool_output(const Shape& x, const Attrs& attrs, const char* op, bool dilated) {
  check_4d(x, op, "input");
  const PoolParams p = PoolParams::from(attrs, op);
  const Hw k = p.kernel, s = p.stride, pad = p.padding, d = p.dilation;
  BRISK_CHECK(s.h > 0 && s.w > 0, op, ": stride must be positive, got (", s.h, ", ", s.w, ")");
  BRISK_CHECK(pad.h >= 0 && pad.w >= 0, op, ": padding must be non-negative, got (", pad.h, ", ", pad.w, ")");
  BRISK_CHECK(d.h > 0 && d.w > 0, op, ": dilation must be positive, got (", d.h, ", ", d.w, ")");
  BRISK_CHECK(k.h > 0 && k.w > 0, op, ": kernel size must be positive, got (", k.h, ", ", k.w, ")");
  BRISK_CHECK(dilated || (d.h == 1 && d.w == 1), op, ": takes no dilation, got (", d.h, ", ", d.w, ")");
  BRISK_CHECK(pad.h <= k.h / 2 && pad.w <= k.w / 2, op, ": padding (", pad.h, ", ", pad.w,
              ") must be at most half the kernel size (", k.h, ", ", k.w, ")");
  const int64_t oh = pool_output(x[2], k.h, pad.h, s.h, d.h, p.ceil_mode, op);
  const int64_t ow = pool_output(x[3], k.w, pad.w, s.w, d.w, p.ceil_mode, op);
  BRISK_CHECK(oh > 0 && ow > 0, op, ": input ", x, " is too small for kernel (", k.h, ", ", k.w, "), padding (", pad.h,
              ", ", pad.w, "), dilation (", d.h, ", ", d.w, "): output would be (", oh, ", ", ow, ")");
  return {x[0], x[1], oh, ow};
}

// Checks that grad has the pooled sizes of attrs.shape; used by the pooling backward ops.
void check_pool_grad(const Tensor& g, const Attrs& attrs, const char* op, bool dilated) {
  check_floating(g, op);
  const Shape y = pool_output(attrs.shape, attrs, op, dilated);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match the pooled size ", y, " of input ",
              attrs.shape);
}

// The forward op's attrs with attrs.shape = `shape` (a backward op's input sizes).
Attrs with_shape(const Attrs& attrs, const Shape& shape) {
  Attrs a = attrs;
  a.shape = shape;
  return a;
}

// ---- max_pool2d: x (B, C, H, W) -> y (B, C, Ho, Wo), indices I64 (B, C, Ho, Wo) into each
// H * W plane
void max_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "max_pool2d");
  const Shape y = pool_output(in[0].sizes(), attrs, "max_pool2d", true);
  out[0] = {y, in[0].dtype()};
  out[1] = {y, DType::I64};
}

// Only the values carry a gradient; the indices say where it goes.
void max_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& idx = c.outputs[1];
  const Tensor g = c.grads[0].defined() ? c.grads[0] : zeros(idx.sizes(), c.in_specs[0].dtype, c.device);
  gi[0] = call1(OpId::MaxPool2dBackward, {g, idx}, with_shape(c.attrs, c.in_specs[0].sizes));
}

const OpDef kMaxPool2d{.infer = max_pool2d_infer, .backward = max_pool2d_bw, .save_outputs = mask(1)};  // indices

// ---- max_pool2d_backward: (grad, indices) -> grad of x, sizes attrs.shape
void max_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "max_pool2d_backward";
  check_pool_grad(in[0], attrs, op, true);
  BRISK_CHECK(in[1].dtype() == DType::I64 && in[1].sizes() == in[0].sizes(), op, ": indices must be I64 of the grad's ",
              "sizes ", in[0].sizes(), ", got ", in[1].str());
  out[0] = {attrs.shape, in[0].dtype()};
}

// gx[idx] += g is linear in g; its adjoint reads u at the indices: a gather per plane.
void max_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& idx = c.inputs[1];
  const Shape& gs = c.in_specs[0].sizes;
  const Tensor u = reshape(c.grads[0], {gs[0], gs[1], -1});
  gi[0] = reshape(gather(u, 2, reshape(idx, {gs[0], gs[1], -1})), gs);
}

const OpDef kMaxPool2dBackward{.infer = max_pool2d_backward_infer,
                               .backward = max_pool2d_backward_bw,
                               .save_inputs = mask(1),   // indices
                               .diff_inputs = mask(0)};  // grad

// ---- avg_pool2d: x (B, C, H, W) -> y (B, C, Ho, Wo)
void avg_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "avg_pool2d");
  out[0] = {pool_output(in[0].sizes(), attrs, "avg_pool2d", false), in[0].dtype()};
}

void avg_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AvgPool2dBackward, {c.grads[0]}, with_shape(c.attrs, c.in_specs[0].sizes));
}

const OpDef kAvgPool2d{.infer = avg_pool2d_infer, .backward = avg_pool2d_bw};

// ---- avg_pool2d_backward: (grad) -> grad of x, sizes attrs.shape
void avg_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_pool_grad(in[0], attrs, "avg_pool2d_backward", false);
  out[0] = {attrs.shape, in[0].dtype()};
}

// avg_pool2d_backward is the adjoint of avg_pool2d (a linear map), so its adjoint is the pool.
void avg_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AvgPool2d, {c.grads[0]}, c.attrs);
}

const OpDef kAvgPool2dBackward{.infer = avg_pool2d_backward_infer, .backward = avg_pool2d_backward_bw};

// ---- adaptive_avg_pool2d: x (B, C, H, W) -> (B, C, out_h, out_w), attrs.shape = (out_h, out_w)
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

void adaptive_avg_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = call1(OpId::AdaptiveAvgPool2dBackward, {c.grads[0]}, with_shape(c.attrs, c.in_specs[0].sizes));
}

const OpDef kAdaptiveAvgPool2d{.infer = adaptive_avg_pool2d_infer, .backward = adaptive_avg_pool2d_bw};

// ---- adaptive_avg_pool2d_backward: (grad (B, C, out_h, out_w)) -> grad of x, sizes attrs.shape
void adaptive_avg_pool2d_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = "adaptive_avg_pool2d_backward";
  const Tensor& g = in[0];
  check_floating(g, op);
  check_4d(g.sizes(), op, "grad");
  const Shape y = adaptive_output(attrs.shape, {g.size(2), g.size(3)}, op);
  BRISK_CHECK(g.sizes() == y, op, ": grad ", g.sizes(), " does not match input ", attrs.shape);
  out[0] = {attrs.shape, g.dtype()};
}

void adaptive_avg_pool2d_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Shape& gs = c.in_specs[0].sizes;
  gi[0] = call1(OpId::AdaptiveAvgPool2d, {c.grads[0]}, with_shape(c.attrs, {gs[2], gs[3]}));
}

const OpDef kAdaptiveAvgPool2dBackward{.infer = adaptive_avg_pool2d_backward_infer,
                                       .backward = adaptive_avg_pool2d_backward_bw};

// ---- adaptive_max_pool2d: x (B, C, H, W) -> y (B, C, out_h, out_w), indices I64 of the same
// sizes into each H * W plane; windows as adaptive_avg_pool2d's (kernels/pool_window.h)
void adaptive_max_pool2d_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  check_floating(in[0], "adaptive_max_pool2d");
  const Shape y = adaptive_output(in[0].sizes(), attrs.shape, "adaptive_max_pool2d");
  out[0] = {y, in[0].dtype()};
  out[1] = {y, DType::I64};
}

// Only the values carry a gradient, to the element each index names: gx = 0, then
// gx[plane, idx] += g, a scatter_add over the flattened planes (no backward op of its own: the
// windows do not matter once the indices are known, and scatter_add runs on every backend and
// has its own gradient, a gather).
void adaptive_max_pool2d_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& idx = c.outputs[1];
  const Shape& xs = c.in_specs[0].sizes;
  const Tensor g = c.grads[0].defined() ? c.grads[0] : zeros(idx.sizes(), c.in_specs[0].dtype, c.device);
  const Tensor flat_zero = zeros({xs[0], xs[1], xs[2] * xs[3]}, c.in_specs[0].dtype, c.device);
  const Shape planes{xs[0], xs[1], -1};
  gi[0] = reshape(scatter_add(flat_zero, 2, reshape(idx, planes), reshape(g, planes)), xs);
}

const OpDef kAdaptiveMaxPool2d{
    .infer = adaptive_max_pool2d_infer, .backward = adaptive_max_pool2d_bw, .save_outputs = mask(1)};  // indices

// ---- resample2d: (x (*, H, W), ih (Ho, 2), wh (Ho, 2), iw (Wo, 2), ww (Wo, 2)) -> y (*, Ho, Wo)
// y[.., i, j] = sum over taps a, b in {0, 1} of wh[i, a] * ww[j, b] * x[.., ih[i, a], iw[j, b]].
// One pass for a separable map of the last two dims, given as tables made on the host by
// nn/functional_resize.cpp (see Note [Resizing through resample2d] there). Linear in x, so its
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

}  // namespace

namespace detail {

void define_pool_ops() {
  define(OpId::MaxPool2d, kMaxPool2d);
  define(OpId::MaxPool2dBackward, kMaxPool2dBackward);
  define(OpId::AvgPool2d, kAvgPool2d);
  define(OpId::AvgPool2dBackward, kAvgPool2dBackward);
  define(OpId::AdaptiveAvgPool2d, kAdaptiveAvgPool2d);
  define(OpId::AdaptiveAvgPool2dBackward, kAdaptiveAvgPool2dBackward);
  define(OpId::AdaptiveMaxPool2d, kAdaptiveMaxPool2d);
  define(OpId::Resample2d, kResample2d);
  define(OpId::Resample2dBackward, kResample2dBackward);
}

}  // namespace detail

}  // namespace brisk
