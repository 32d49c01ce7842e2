// optim/clip.h: gradient utilities: clip_grad_norm_ and clip_grad_value_ (PyTorch's
// torch.nn.utils functions, same norms and clip coefficient), grad_norm (the norm alone),
// l1_penalty (a differentiable sum of |p| to add to a loss), and the gradient accumulation
// pattern (below). Not here: GradScaler's unscale (mixed precision) or the optimizers.
#pragma once

#include <limits>
#include <vector>

#include "engine/tensor.h"

namespace brisk::optim {

// Gradient accumulation needs no helper: gradients add up in .grad across backward calls.
//   opt.zero_grad();
//   for (int i = 0; i < N; ++i) (loss_fn(micro_batch[i]) / N).backward();
//   clip_grad_norm_(params, max_norm);  // optional, on the accumulated gradient
//   opt.step();
// gives the update of one batch N times larger, for a loss that is a mean over samples
// (tested in tests/test_optim.cpp). Divide by N, or the step sees N times the gradient.

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm of all gradients together, as if concatenated into one vector: the norm_type-norm
// of the per-tensor norms (norm_type = kInfNorm: the largest |g|). Parameters without a
// gradient are skipped; none gives 0.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

// Scales all gradients in place by min(1, max_norm / (total + 1e-6)) and returns the total
// norm (before clipping). error_if_nonfinite: a NaN or infinite total norm is an error
// (otherwise the gradients become NaN, as in PyTorch).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// sum over params of sum(|p|): differentiable (its gradient is sign(p)); add lambda * it to the
// loss for L1 regularization.
Tensor l1_penalty(const std::vector<Tensor>& params);

}  // namespace brisk::optim
