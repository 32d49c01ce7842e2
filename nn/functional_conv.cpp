// nn/functional_conv.cpp: the functional forms of linear, convolution (conv1d/2d and the
// transposed conv1d/2d) and pooling (max/avg 1-d and 2-d, adaptive avg/max 1-d and 2-d),
// declared in nn/functional.h: PyTorch's argument conventions (stride defaults to the kernel for
// pooling, 1-d forms as 2-d over a height of 1, unbatched inputs) turned into the attributes of
// the engine's ops, and the bias added here, outside the conv op. conv_transpose2d is
// conv2d_backward_input (Note [Transposed convolution]). linear is a composite: matmul with the
// transposed weight view (read in place by the GEMM, no copy) plus the bias.
// Not here: the ops themselves (engine/ops/conv.cpp, engine/ops/pool.cpp) and their kernels
// (kernels/cpu/conv.cpp, kernels/cpu/pool.cpp).
#include "engine/autocast.h"
#include "engine/dispatch.h"
#include "engine/op_params.h"
#include "nn/functional.h"

namespace brisk::nn::functional {

namespace {

// bias (O) in y's dtype (autocast may have lowered y), shaped to broadcast along y's dim `dim`.
Tensor bias_for(const Tensor& bias, const Tensor& y, int dim, const char* op) {
  BRISK_CHECK(bias.dim() == 1 && bias.size(0) == y.size(dim), op, ": bias ", bias.sizes(), " does not match the ",
              y.size(dim), " output features (output ", y.sizes(), ")");
  Tensor b = bias.dtype() == y.dtype() ? bias : autocast::cast_input(bias, y.dtype());  // cached under autocast
  Shape s = Shape::filled(y.dim(), 1);
  s[dim] = bias.size(0);
  return reshape(b, s);
}

Hw hw(Pair p) { return {p[0], p[1]}; }

}  // namespace

// x (*, in), weight (out, in) -> (*, out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  BRISK_CHECK(x.defined() && weight.defined(), "linear: undefined input or weight");
  BRISK_CHECK(weight.dim() == 2, "linear: weight must be 2-D (out, in), got ", weight.sizes());
  BRISK_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.sizes(), " does not have the ",
              weight.size(1), " features that weight ", weight.sizes(), " expects");
  // The weight is cast before the transpose so that autocast's cast cache sees the parameter.
  Tensor y = matmul(x, transpose(autocast::cast_for(OpId::Matmul, weight), 0, 1));
  if (bias.defined()) y = y + bias_for(bias, y, y.dim() - 1, "linear");
  return y;
}

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

}  // namespace brisk::nn::functional

// ==== begin: transposed convolution, 1-d and adaptive max pooling (issue 17, item 5) ==========

namespace brisk::nn::functional {

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

// (C, L) -> (1, C, L): the unbatched 1-d forms; `batched` says whether to squeeze back.
Tensor batch_1d(const Tensor& x, const char* op, bool& batched) {
  BRISK_CHECK(x.defined(), op, ": undefined input");
  BRISK_CHECK(x.dim() == 2 || x.dim() == 3, op, ": input must be 3-D (B, C, L) or 2-D (C, L), got ", x.sizes());
  batched = x.dim() == 3;
  return batched ? x : unsqueeze(x, 0);
}

Tensor unbatch(const Tensor& y, bool batched) { return batched ? y : squeeze(y, 0); }

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
  Tensor g = autocast::cast_for(OpId::Conv2d, x);
  if (extra_h > 0 || extra_w > 0) g = pad(g, {0, extra_w, 0, extra_h});
  Attrs a;
  ConvParams{.stride = hw(stride), .padding = hw(padding), .dilation = hw(dilation), .groups = groups}.store(a);
  a.shape = y_sizes;
  Tensor y = call1(OpId::Conv2dBackwardInput, {g, autocast::cast_for(OpId::Conv2d, weight)}, a);
  if (bias.defined()) y = y + bias_for(bias, y, 1, op);
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

}  // namespace brisk::nn::functional

// ==== end: transposed convolution, 1-d and adaptive max pooling ===============================
