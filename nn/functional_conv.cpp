// nn/functional_conv.cpp: the functional forms of linear, convolution and pooling (declared in
// nn/functional.h): PyTorch's argument conventions (stride defaults to the kernel for pooling,
// conv1d as conv2d over a height of 1) turned into the attributes of the engine's ops, and the
// bias added here, outside the conv op. linear is a composite: matmul with the transposed
// weight view (read in place by the GEMM, no copy) plus the bias.
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
  BRISK_CHECK(x.defined(), "max_pool2d: undefined input");
  Attrs a;
  PoolParams{.kernel = hw(kernel),
             .stride = hw(stride.value_or(kernel)),
             .padding = hw(padding),
             .dilation = hw(dilation),
             .ceil_mode = ceil_mode}
      .store(a);
  const Tensor in[1] = {x};
  Tensor out[2];  // values, indices (the indices only serve backward)
  call(OpId::MaxPool2d, in, a, out);
  return out[0];
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
