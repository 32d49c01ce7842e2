// nn/layers_extra.h: small layers PyTorch users reach for next to the transformer blocks:
// RMSNorm (PyTorch 2.4+), InstanceNorm2d, Dropout2d and PReLU, with PyTorch's arguments,
// defaults, parameter / buffer names and init. Written with engine ops and nn/functional.h.
// Not here: InstanceNorm1d / 3d, Dropout1d / 3d, AlphaDropout.
#pragma once

#include <optional>

#include "nn/module.h"

namespace brisk::nn {

// y = x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight. eps
// std::nullopt (PyTorch's None) is the machine epsilon of x's dtype (torch.finfo(dtype).eps).
// Parameter weight (normalized_shape), ones, when elementwise_affine.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  explicit RMSNorm(int64_t normalized_dim, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(Shape{normalized_dim}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  std::optional<double> eps;
};

// Normalizes each (sample, channel) plane of x (B, C, H, W) or unbatched (C, H, W) over its
// H * W values (biased variance), as torch.nn.InstanceNorm2d. affine: weight (ones) and bias
// (zeros) of shape (C). track_running_stats: buffers running_mean, running_var,
// num_batches_tracked updated in training (the mean over the batch of the per-instance
// statistics, unbiased variance, momentum as BatchNorm) and used in eval. Unlike PyTorch, which
// only warns when affine and track_running_stats are both off, a channel count different from
// num_features is an error.
class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false);
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  double eps, momentum;
};

// Zeroes whole channels: each (sample, channel) plane of x (B, C, H, W) is kept with
// probability 1 - p and scaled by 1 / (1 - p), in training; the identity in eval. A 3-D input
// is read as (N, C, L) (each row of L values dropped whole), as PyTorch 2.x does (it warns
// that a later release will read it as an unbatched (C, H, W)).
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

// y = x if x > 0 else weight * x; weight (num_parameters), init 0.25: one slope shared by all
// channels, or one per channel (num_parameters = C, the channels in dim 1, or dim 0 of a 1-D
// input), as torch.nn.PReLU.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  int64_t num_parameters;
};

}  // namespace brisk::nn
