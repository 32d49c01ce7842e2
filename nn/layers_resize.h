// nn/layers_resize.h: the layers of transposed convolution, padding, resizing and the extra
// pooling forms, with PyTorch's names, arguments, defaults, parameter names and init:
// ConvTranspose1d/2d (weight (C_in, C_out / groups, k...), bias (C_out)), MaxPool1d, AvgPool1d,
// AdaptiveMaxPool1d/2d, AdaptiveAvgPool1d, Upsample, PixelShuffle, PixelUnshuffle, and the
// padding layers (ZeroPad2d, ConstantPad1d/2d, ReflectionPad1d/2d, ReplicationPad1d/2d,
// CircularPad1d/2d). Each forward is its functional form (nn/functional.h).
// Not here: Conv3d and the other 3-d layers (brisk has none), the 2-d pools and Conv1d/2d
// (nn/layers.h).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/functional.h"
#include "nn/module.h"

namespace brisk::nn {

using functional::Pair;

// PyTorch's ConvTranspose2d arguments after the kernel size, in its order.
struct ConvTransposeOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  Pair dilation{1, 1};
};

// Parameters weight (C_in, C_out / groups, kh, kw) and bias (C_out), PyTorch's default init
// (fan_in = C_out / groups * kh * kw, as PyTorch computes it from this layout).
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, ConvTransposeOptions options = {});
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTransposeOptions options = {})
      : ConvTranspose2d(in_channels, out_channels, Pair{kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& x) override;
  // PyTorch's forward(input, output_size): the output_padding that gives (H_out, W_out), which
  // must lie within stride - 1 of the smallest output size.
  Tensor forward(const Tensor& x, Pair output_size);
  int64_t in_channels, out_channels;
  Pair kernel_size;
  ConvTransposeOptions options;
};

// Parameters weight (C_in, C_out / groups, k) and bias (C_out).
class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, bool bias = true,
                  int64_t dilation = 1);
  Tensor forward(const Tensor& x) override;
  int64_t stride, padding, output_padding, groups, dilation;
};

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                     int64_t dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);  // PyTorch's return_indices = True
  int64_t kernel;
  std::optional<int64_t> stride;
  int64_t padding, dilation;
  bool ceil_mode;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  int64_t kernel;
  std::optional<int64_t> stride;
  int64_t padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Pair output_size);
  explicit AdaptiveMaxPool2d(int64_t size) : AdaptiveMaxPool2d(Pair{size, size}) {}
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);  // indices into each H * W plane
  Pair output_size;
};

class AdaptiveMaxPool1d : public Module {
 public:
  explicit AdaptiveMaxPool1d(int64_t output_size);
  Tensor forward(const Tensor& x) override;
  int64_t output_size;
};

class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size);
  Tensor forward(const Tensor& x) override;
  int64_t output_size;
};

// torch.nn.Upsample: interpolate with fixed options, e.g.
// Upsample({.scale_factor = {2}, .mode = "bilinear", .align_corners = false}).
class Upsample : public Module {
 public:
  explicit Upsample(functional::InterpolateOptions options);
  Tensor forward(const Tensor& x) override;
  functional::InterpolateOptions options;
};

class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override;
  int64_t upscale_factor;
};

class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override;
  int64_t downscale_factor;
};

// The padding layers: functional::pad with a fixed padding list (last dim first), mode and
// value. The 1-d forms take (left, right), the 2-d forms (left, right, top, bottom); one
// integer pads every side.
class Pad : public Module {
 public:
  Pad(std::string type_name, std::vector<int64_t> padding, std::string mode, double value = 0.0);
  Tensor forward(const Tensor& x) override;
  std::vector<int64_t> padding;
  std::string mode;
  double value;
};

class ZeroPad2d : public Pad {
 public:
  explicit ZeroPad2d(std::array<int64_t, 4> p) : Pad("ZeroPad2d", {p.begin(), p.end()}, "constant") {}
  explicit ZeroPad2d(int64_t p) : ZeroPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
};

class ConstantPad1d : public Pad {
 public:
  ConstantPad1d(Pair p, double value) : Pad("ConstantPad1d", {p[0], p[1]}, "constant", value) {}
  ConstantPad1d(int64_t p, double value) : ConstantPad1d(Pair{p, p}, value) {}
};

class ConstantPad2d : public Pad {
 public:
  ConstantPad2d(std::array<int64_t, 4> p, double value)
      : Pad("ConstantPad2d", {p.begin(), p.end()}, "constant", value) {}
  ConstantPad2d(int64_t p, double value) : ConstantPad2d(std::array<int64_t, 4>{p, p, p, p}, value) {}
};

class ReflectionPad1d : public Pad {
 public:
  explicit ReflectionPad1d(Pair p) : Pad("ReflectionPad1d", {p[0], p[1]}, "reflect") {}
  explicit ReflectionPad1d(int64_t p) : ReflectionPad1d(Pair{p, p}) {}
};

class ReflectionPad2d : public Pad {
 public:
  explicit ReflectionPad2d(std::array<int64_t, 4> p) : Pad("ReflectionPad2d", {p.begin(), p.end()}, "reflect") {}
  explicit ReflectionPad2d(int64_t p) : ReflectionPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
};

class ReplicationPad1d : public Pad {
 public:
  explicit ReplicationPad1d(Pair p) : Pad("ReplicationPad1d", {p[0], p[1]}, "replicate") {}
  explicit ReplicationPad1d(int64_t p) : ReplicationPad1d(Pair{p, p}) {}
};

class ReplicationPad2d : public Pad {
 public:
  explicit ReplicationPad2d(std::array<int64_t, 4> p) : Pad("ReplicationPad2d", {p.begin(), p.end()}, "replicate") {}
  explicit ReplicationPad2d(int64_t p) : ReplicationPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
};

class CircularPad1d : public Pad {
 public:
  explicit CircularPad1d(Pair p) : Pad("CircularPad1d", {p[0], p[1]}, "circular") {}
  explicit CircularPad1d(int64_t p) : CircularPad1d(Pair{p, p}) {}
};

class CircularPad2d : public Pad {
 public:
  explicit CircularPad2d(std::array<int64_t, 4> p) : Pad("CircularPad2d", {p.begin(), p.end()}, "circular") {}
  explicit CircularPad2d(int64_t p) : CircularPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
};

}  // namespace brisk::nn
