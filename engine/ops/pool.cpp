// engine/ops/pool.cpp: the OpDefs of the pooling ops (NCHW, PyTorch's semantics and output
// sizes): max_pool2d, avg_pool2d, adaptive_avg_pool2d and their *_backward ops, and
// adaptive_max_pool2d, one block per op: inference with errors that name the op and the shapes,
// backward formula, OpDef row. Each forward op's gradient is its *_backward op, whose own
// gradient is the forward op (or, for max pooling, a gather); adaptive_max_pool2d's gradient is
// a scatter_add. Parameters: PoolParams (engine/op_params.h); adaptive pooling
// reads only its output size, attrs.shape.
// Then the public forms of pooling (max, average, adaptive; 1-d and 2-d).
// Not here: the kernels (kernels/cpu/pool.cpp, kernels/cuda/pool.cu), pad and interpolate
// over resample2d (engine/ops/resize.cpp).
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
using detail::with_shape;

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
}

}  // namespace detail

// ==== the public forms (engine/functions.h): stride defaults to the kernel (PyTorch's), 1-d
// forms as 2-d over a height of 1, unbatched inputs.

namespace {

// The checks of a 1-d pooling window, named after the 1-d op (the 2-d op would name (1, k)).
void check_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode,
                  const char* op) {
  BRISK_CHECK(kernel > 0, op, ": kernel_size must be positive, got ", kernel);
  BRISK_CHECK(stride > 0, op, ": stride must be positive, got ", stride);
  BRISK_CHECK(dilation > 0, op, ": dilation must be positive, got ", dilation);
  BRISK_CHECK(padding >= 0 && padding <= kernel / 2, op, ": padding must be in [0, kernel_size / 2] = [0, ", kernel / 2,
              "], got ", padding);
  const int64_t L = x.size(-1), span = L + 2 * padding - dilation * (kernel - 1) - 1;
  int64_t out = (span >= 0 ? (span + (ceil_mode ? stride - 1 : 0)) / stride : -1) + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= L + padding) --out;
  BRISK_CHECK(out > 0, op, ": input ", x.sizes(), " of length ", L, " is too small for kernel_size ", kernel,
              " with padding ", padding, " and dilation ", dilation, " (output length ", out, ")");
}

}  // namespace

// x (B, C, H, W) -> (B, C, Ho, Wo).
Tensor max_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride, Pair padding, Pair dilation,
                  bool ceil_mode) {
  return max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode).first;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel, std::optional<Pair> stride,
                                                  Pair padding, Pair dilation, bool ceil_mode) {
  BRISK_CHECK(x.defined(), "max_pool2d: undefined input");
  Attrs a;
  PoolParams{.kernel = hw(kernel),
             .stride = hw(stride.value_or(kernel)),
             .padding = hw(padding),
             .dilation = hw(dilation),
             .ceil_mode = ceil_mode}
      .store(a);
  const Tensor in[1] = {x};
  Tensor out[2];  // values, indices (backward reads the indices)
  call(OpId::MaxPool2d, in, a, out);
  return {out[0], out[1]};
}

Tensor avg_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride, Pair padding, bool ceil_mode,
                  bool count_include_pad) {
  BRISK_CHECK(x.defined(), "avg_pool2d: undefined input");
  Attrs a;
  PoolParams{.kernel = hw(kernel),
             .stride = hw(stride.value_or(kernel)),
             .padding = hw(padding),
             .ceil_mode = ceil_mode,
             .count_include_pad = count_include_pad}
      .store(a);
  return call1(OpId::AvgPool2d, {x}, a);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  BRISK_CHECK(x.defined(), "adaptive_avg_pool2d: undefined input");
  Attrs a;
  a.shape = {output_size[0], output_size[1]};
  return call1(OpId::AdaptiveAvgPool2d, {x}, a);
}

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x_in, int64_t kernel, std::optional<int64_t> stride,
                                                  int64_t padding, int64_t dilation, bool ceil_mode) {
  bool batched = true;
  const Tensor x = batch_1d(x_in, "max_pool1d", batched);
  const int64_t s = stride.value_or(kernel);
  check_pool1d(x, kernel, s, padding, dilation, ceil_mode, "max_pool1d");
  auto [y, idx] =
      max_pool2d_with_indices(unsqueeze(x, 2), {1, kernel}, Pair{1, s}, {0, padding}, {1, dilation}, ceil_mode);
  return {unbatch(squeeze(y, 2), batched), unbatch(squeeze(idx, 2), batched)};  // H = 1: a flat index is along L
}

Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding, int64_t dilation,
                  bool ceil_mode) {
  return max_pool1d_with_indices(x, kernel, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool1d(const Tensor& x_in, int64_t kernel, std::optional<int64_t> stride, int64_t padding, bool ceil_mode,
                  bool count_include_pad) {
  bool batched = true;
  const Tensor x = batch_1d(x_in, "avg_pool1d", batched);
  const int64_t s = stride.value_or(kernel);
  check_pool1d(x, kernel, s, padding, 1, ceil_mode, "avg_pool1d");
  Tensor y = avg_pool2d(unsqueeze(x, 2), {1, kernel}, Pair{1, s}, {0, padding}, ceil_mode, count_include_pad);
  return unbatch(squeeze(y, 2), batched);
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x_in, Pair output_size) {
  const char* op = "adaptive_max_pool2d";
  BRISK_CHECK(x_in.defined(), op, ": undefined input");
  BRISK_CHECK(x_in.dim() == 4 || x_in.dim() == 3, op, ": input must be 4-D (B, C, H, W) or 3-D (C, H, W), got ",
              x_in.sizes());
  const bool batched = x_in.dim() == 4;
  Attrs a;
  a.shape = {output_size[0], output_size[1]};
  const Tensor in[1] = {batched ? x_in : unsqueeze(x_in, 0)};
  Tensor out[2];  // values, indices (backward reads the indices)
  call(OpId::AdaptiveMaxPool2d, in, a, out);
  return {unbatch(out[0], batched), unbatch(out[1], batched)};
}

Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size).first;
}

Tensor adaptive_avg_pool1d(const Tensor& x_in, int64_t output_size) {
  bool batched = true;
  const Tensor x = batch_1d(x_in, "adaptive_avg_pool1d", batched);
  BRISK_CHECK(output_size > 0, "adaptive_avg_pool1d: output_size must be positive, got ", output_size);
  return unbatch(squeeze(adaptive_avg_pool2d(unsqueeze(x, 2), {1, output_size}), 2), batched);
}

Tensor adaptive_max_pool1d(const Tensor& x_in, int64_t output_size) {
  bool batched = true;
  const Tensor x = batch_1d(x_in, "adaptive_max_pool1d", batched);
  BRISK_CHECK(output_size > 0, "adaptive_max_pool1d: output_size must be positive, got ", output_size);
  return unbatch(squeeze(adaptive_max_pool2d(unsqueeze(x, 2), {1, output_size}), 2), batched);
}

}  // namespace brisk
