// nn/layers_resize.cpp: the transposed-convolution, padding, resizing and extra pooling layers
// (nn/layers_resize.h).
// Not here: the functional forms they call (engine/ops/conv.cpp, engine/ops/pool.cpp, engine/ops/resize.cpp).
#include "nn/layers_resize.h"

#include "nn/init.h"

namespace brisk::nn {

namespace F = functional;

// ---- transposed convolution

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Pair k, ConvTransposeOptions opt)
    : Module("ConvTranspose2d"), in_channels(in), out_channels(out), kernel_size(k), options(opt) {
  BRISK_CHECK(in > 0 && out > 0 && k[0] > 0 && k[1] > 0, "ConvTranspose2d: channels and kernel size must be positive, ",
              "got in_channels ", in, ", out_channels ", out, ", kernel_size (", k[0], ", ", k[1], ")");
  BRISK_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0, "ConvTranspose2d: groups ", opt.groups,
              " must divide in_channels ", in, " and out_channels ", out);
  Tensor& w = register_parameter("weight", empty({in, out / opt.groups, k[0], k[1]}));
  Tensor b = opt.bias ? empty({out}) : Tensor();
  init::linear_default_(w, b);  // fans from dims 1.. of this layout, as PyTorch's reset_parameters
  if (opt.bias) register_parameter("bias", b);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return F::conv_transpose2d(x, parameter("weight"), maybe_parameter("bias"), options.stride, options.padding,
                             options.output_padding, options.groups, options.dilation);
}

// PyTorch's _output_padding: the output size must lie in [smallest, smallest + stride - 1].
Tensor ConvTranspose2d::forward(const Tensor& x, Pair output_size) {
  BRISK_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), "ConvTranspose2d: input must be 4-D (B, C_in, H, W) or ",
              "3-D (C_in, H, W), got ", x.defined() ? x.sizes() : Shape{});
  Pair output_padding{0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.size(x.dim() - 2 + i);
    const int64_t smallest =
        (in - 1) * options.stride[i] - 2 * options.padding[i] + options.dilation[i] * (kernel_size[i] - 1) + 1;
    const int64_t largest = smallest + options.stride[i] - 1;
    BRISK_CHECK(output_size[i] >= smallest && output_size[i] <= largest, "ConvTranspose2d: requested output size (",
                output_size[0], ", ", output_size[1], ") is not reachable from input ", x.sizes(), ": ",
                i == 0 ? "height" : "width", " must be in [", smallest, ", ", largest, "]");
    output_padding[i] = output_size[i] - smallest;
  }
  return F::conv_transpose2d(x, parameter("weight"), maybe_parameter("bias"), options.stride, options.padding,
                             output_padding, options.groups, options.dilation);
}

ConvTranspose1d::ConvTranspose1d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t op, int64_t g,
                                 bool bias, int64_t d)
    : Module("ConvTranspose1d"), stride(s), padding(p), output_padding(op), groups(g), dilation(d) {
  BRISK_CHECK(in > 0 && out > 0 && k > 0, "ConvTranspose1d: channels and kernel size must be positive, got ",
              "in_channels ", in, ", out_channels ", out, ", kernel_size ", k);
  BRISK_CHECK(g > 0 && in % g == 0 && out % g == 0, "ConvTranspose1d: groups ", g, " must divide in_channels ", in,
              " and out_channels ", out);
  Tensor& w = register_parameter("weight", empty({in, out / g, k}));
  Tensor b = bias ? empty({out}) : Tensor();
  init::linear_default_(w, b);
  if (bias) register_parameter("bias", b);
}

Tensor ConvTranspose1d::forward(const Tensor& x) {
  return F::conv_transpose1d(x, parameter("weight"), maybe_parameter("bias"), stride, padding, output_padding, groups,
                             dilation);
}

// ---- pooling

MaxPool1d::MaxPool1d(int64_t k, std::optional<int64_t> s, int64_t p, int64_t d, bool c)
    : Module("MaxPool1d"), kernel(k), stride(s), padding(p), dilation(d), ceil_mode(c) {}
Tensor MaxPool1d::forward(const Tensor& x) { return F::max_pool1d(x, kernel, stride, padding, dilation, ceil_mode); }
std::pair<Tensor, Tensor> MaxPool1d::forward_with_indices(const Tensor& x) {
  return F::max_pool1d_with_indices(x, kernel, stride, padding, dilation, ceil_mode);
}

AvgPool1d::AvgPool1d(int64_t k, std::optional<int64_t> s, int64_t p, bool c, bool cip)
    : Module("AvgPool1d"), kernel(k), stride(s), padding(p), ceil_mode(c), count_include_pad(cip) {}
Tensor AvgPool1d::forward(const Tensor& x) {
  return F::avg_pool1d(x, kernel, stride, padding, ceil_mode, count_include_pad);
}

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Pair size) : Module("AdaptiveMaxPool2d"), output_size(size) {}
Tensor AdaptiveMaxPool2d::forward(const Tensor& x) { return F::adaptive_max_pool2d(x, output_size); }
std::pair<Tensor, Tensor> AdaptiveMaxPool2d::forward_with_indices(const Tensor& x) {
  return F::adaptive_max_pool2d_with_indices(x, output_size);
}

AdaptiveMaxPool1d::AdaptiveMaxPool1d(int64_t size) : Module("AdaptiveMaxPool1d"), output_size(size) {}
Tensor AdaptiveMaxPool1d::forward(const Tensor& x) { return F::adaptive_max_pool1d(x, output_size); }

AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t size) : Module("AdaptiveAvgPool1d"), output_size(size) {}
Tensor AdaptiveAvgPool1d::forward(const Tensor& x) { return F::adaptive_avg_pool1d(x, output_size); }

// ---- resizing and padding

Upsample::Upsample(F::InterpolateOptions o) : Module("Upsample"), options(std::move(o)) {}
Tensor Upsample::forward(const Tensor& x) { return F::interpolate(x, options); }

PixelShuffle::PixelShuffle(int64_t r) : Module("PixelShuffle"), upscale_factor(r) {}
Tensor PixelShuffle::forward(const Tensor& x) { return F::pixel_shuffle(x, upscale_factor); }

PixelUnshuffle::PixelUnshuffle(int64_t r) : Module("PixelUnshuffle"), downscale_factor(r) {}
Tensor PixelUnshuffle::forward(const Tensor& x) { return F::pixel_unshuffle(x, downscale_factor); }

Pad::Pad(std::string type_name, std::vector<int64_t> p, std::string m, double v)
    : Module(std::move(type_name)), padding(std::move(p)), mode(std::move(m)), value(v) {}
Tensor Pad::forward(const Tensor& x) { return F::pad(x, padding, mode, value); }

}  // namespace brisk::nn
