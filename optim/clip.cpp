// optim/clip.cpp: gradient norms, clipping and the L1 penalty, written with tensor ops (so they
// run on any device); only the per-tensor norms come back to the host.
#include "optim/clip.h"

#include <cmath>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::optim {

namespace {

// The norm_type-norm of one tensor, computed in its dtype as PyTorch's torch.norm does.
double tensor_norm(const Tensor& g, double norm_type) {
  if (std::isinf(norm_type)) return amax(abs(g)).item<double>();
  if (norm_type == 1.0) return sum(abs(g)).item<double>();
  if (norm_type == 2.0) return std::sqrt(sum(g * g).item<double>());
  return std::pow(sum(pow(abs(g), norm_type)).item<double>(), 1.0 / norm_type);
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  BRISK_CHECK(norm_type > 0, "grad_norm: norm_type must be positive (or kInfNorm), got ", norm_type);
  NoGradGuard no_grad;
  std::vector<double> norms;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    norms.push_back(tensor_norm(g, norm_type));
  }
  if (norms.empty()) return 0.0;
  if (std::isinf(norm_type)) {
    double total = norms[0];
    for (double n : norms) total = std::isnan(n) || n > total ? n : total;
    return total;
  }
  double total = 0;
  for (double n : norms) total += std::pow(n, norm_type);
  return std::pow(total, 1.0 / norm_type);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  double total = grad_norm(params, norm_type);
  BRISK_CHECK(!(error_if_nonfinite && !std::isfinite(total)), "clip_grad_norm_: the total norm of order ", norm_type,
              " of the gradients is ", total,
              ", so it cannot be clipped (pass error_if_nonfinite = false to clip anyway)");
  double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;  // PyTorch multiplies by 1.0 here: nothing changes
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.mul_(coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  BRISK_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.copy_(clamp(g, -clip_value, clip_value));
  }
}

Tensor l1_penalty(const std::vector<Tensor>& params) {
  BRISK_CHECK(!params.empty(), "l1_penalty: no parameters");
  Tensor total;
  for (const Tensor& p : params) {
    Tensor term = sum(abs(p));
    total = total.defined() ? total + term : term;
  }
  return total;
}

}  // namespace brisk::optim
