// nn/layers_extra.cpp: RMSNorm, InstanceNorm2d, Dropout2d and PReLU (nn/layers_extra.h).
// Not here: BatchNorm, LayerNorm, GroupNorm and the other core layers (nn/layers.cpp).
#include "nn/layers_extra.h"

#include "engine/grad_mode.h"
#include "nn/functional.h"

namespace brisk::nn {

namespace F = functional;

// ---- RMSNorm

RMSNorm::RMSNorm(Shape shape, std::optional<double> e, bool affine)
    : Module("RMSNorm"), normalized_shape(shape), eps(e) {
  BRISK_CHECK(!eps || *eps >= 0, "RMSNorm: eps must be non-negative, got ", *eps);
  if (affine) register_parameter("weight", ones(shape));
}

// x (*, normalized_shape) -> x * rsqrt(mean(x^2 over normalized_shape) + eps) * weight: the
// rms_norm op (engine/ops/norm.cpp).
Tensor RMSNorm::forward(const Tensor& x) {
  BRISK_CHECK(x.defined(), "RMSNorm: undefined input");
  const int64_t k = normalized_shape.size();
  bool fits = x.dim() >= k;
  for (int64_t i = 0; fits && i < k; ++i) fits = x.size(x.dim() - k + i) == normalized_shape[i];
  BRISK_CHECK(fits, "RMSNorm: input ", x.sizes(), " does not end in normalized_shape ", normalized_shape);
  return rms_norm(x, normalized_shape, maybe_parameter("weight"), eps);
}

// ---- InstanceNorm2d

InstanceNorm2d::InstanceNorm2d(int64_t n, double e, double m, bool affine, bool track)
    : Module("InstanceNorm2d"), num_features(n), eps(e), momentum(m) {
  BRISK_CHECK(n > 0, "InstanceNorm2d: num_features must be positive, got ", n);
  if (affine) {
    register_parameter("weight", ones({n}));
    register_parameter("bias", zeros({n}));
  }
  if (track) {
    register_buffer("running_mean", zeros({n}));
    register_buffer("running_var", ones({n}));
    register_buffer("num_batches_tracked", zeros({}, DType::I64));
  }
}

// x (B, C, H, W) -> each (b, c) plane normalized over its H * W values, then weight / bias (C)
Tensor InstanceNorm2d::forward(const Tensor& input) {
  BRISK_CHECK(input.defined(), "InstanceNorm2d: undefined input");
  BRISK_CHECK(input.dim() == 3 || input.dim() == 4, "InstanceNorm2d: expected input (B, C, H, W) or (C, H, W), got ",
              input.sizes());
  const Tensor x = input.dim() == 3 ? input.unsqueeze(0) : input;
  BRISK_CHECK(x.size(1) == num_features, "InstanceNorm2d: input ", input.sizes(), " has ", x.size(1),
              " channels, expected num_features ", num_features);
  Tensor running_mean = maybe_buffer("running_mean");
  Tensor running_var = maybe_buffer("running_var");
  const Tensor w = maybe_parameter("weight");
  const Tensor b = maybe_parameter("bias");
  Tensor y;
  if (running_mean.defined() && !is_training()) {
    y = F::batch_norm(x, running_mean, running_var, w, b, /*training=*/false, momentum, eps);
  } else {
    y = F::group_norm(x, num_features, w, b, eps);  // one group per channel: per-instance statistics
    const int64_t n = x.size(2) * x.size(3);
    if (running_mean.defined() && x.size(0) > 0 && n > 1) {
      // As PyTorch (which runs batch_norm on a (1, B * C, H, W) view with the running stats
      // repeated B times, then averages them back): the batch mean of the per-instance
      // statistics, the variance unbiased, mixed in with momentum.
      NoGradGuard no_grad;
      const Tensor xd = x.detach();
      const Tensor inst_mean = mean(xd, {2, 3});   // (B, C)
      const Tensor inst_var = var(xd, {2, 3}, 1);  // (B, C), unbiased
      running_mean.copy_(running_mean * (1.0 - momentum) + mean(inst_mean, {0}) * momentum);
      running_var.copy_(running_var * (1.0 - momentum) + mean(inst_var, {0}) * momentum);
    }
  }
  return input.dim() == 3 ? y.squeeze(0) : y;
}

// ---- Dropout2d

Dropout2d::Dropout2d(double p) : Module("Dropout2d"), p(p) {
  BRISK_CHECK(p >= 0 && p <= 1, "Dropout2d: p must be in [0, 1], got ", p);
}

// x (B, C, H, W) * mask (B, C, 1, 1) of 0 and 1 / (1 - p)
Tensor Dropout2d::forward(const Tensor& x) {
  BRISK_CHECK(x.defined(), "Dropout2d: undefined input");
  BRISK_CHECK(x.dim() == 3 || x.dim() == 4, "Dropout2d: expected input (B, C, H, W) or (C, H, W), got ", x.sizes());
  if (!is_training() || p == 0) return x;
  // (B, C, 1, 1), or (N, C, 1) for a 3-D input, read as (N, C, L) as PyTorch 2.x does.
  Shape mask_shape = Shape::filled(x.dim(), 1);
  mask_shape[0] = x.size(0);
  mask_shape[1] = x.size(1);
  const Tensor mask = brisk::dropout(ones(mask_shape, x.dtype(), x.device()), p, true);
  return x * mask;
}

// ---- PReLU

PReLU::PReLU(int64_t n, double init) : Module("PReLU"), num_parameters(n) {
  BRISK_CHECK(n > 0, "PReLU: num_parameters must be positive, got ", n);
  register_parameter("weight", full({n}, init));
}

// x (B, C, *) or (C); weight (1) or (C) broadcast over the channel dim
Tensor PReLU::forward(const Tensor& x) {
  BRISK_CHECK(x.defined(), "PReLU: undefined input");
  Tensor w = parameter("weight");
  if (num_parameters > 1) {
    BRISK_CHECK(x.dim() >= 1, "PReLU: a 0-dim input takes num_parameters 1, not ", num_parameters);
    const int64_t ch = x.dim() == 1 ? 0 : 1;
    BRISK_CHECK(x.size(ch) == num_parameters, "PReLU: input ", x.sizes(), " has ", x.size(ch), " channels in dim ", ch,
                ", expected num_parameters ", num_parameters);
    Shape s = Shape::filled(x.dim() - ch, 1);
    s[0] = num_parameters;
    w = w.reshape(s);  // (C, 1, ..., 1)
  } else if (x.dim() == 0) {
    w = w.reshape({});
  }
  return where(gt(x, scalar_tensor(0.0, x.dtype(), x.device())), x, w * x);
}

}  // namespace brisk::nn
