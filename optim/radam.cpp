// optim/radam.cpp: RAdam's step, PyTorch's _single_tensor_radam written with brisk tensor ops.
#include "optim/radam.h"

#include <cmath>

#include "engine/functions.h"

namespace brisk::optim {

RAdam::RAdam(NamedTensors params, const RAdamOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

RAdam::RAdam(const std::vector<Tensor>& params, const RAdamOptions& options) : RAdam(number_params(params), options) {}

void RAdam::check_options(size_t g) const {
  const RAdamOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "RAdam: invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, "RAdam: invalid eps ", o.eps);
  BRISK_CHECK(o.beta1 >= 0 && o.beta1 < 1, "RAdam: invalid beta1 ", o.beta1);
  BRISK_CHECK(o.beta2 >= 0 && o.beta2 < 1, "RAdam: invalid beta2 ", o.beta2);
  BRISK_CHECK(o.weight_decay >= 0, "RAdam: invalid weight_decay ", o.weight_decay);
}

void RAdam::step_group(size_t g, std::vector<Slot>& slots) {
  const RAdamOptions& o = options(g);
  for (Slot& s : slots) {
    ParamState& state = *s.state;
    state.step += 1;
    if (!state.buffers.count("exp_avg")) {
      state.buffers["exp_avg"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
      state.buffers["exp_avg_sq"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
    }
    Tensor p = s.param;
    Tensor grad = o.maximize ? neg(s.grad) : s.grad;
    if (o.weight_decay != 0) {
      if (o.decoupled_weight_decay) {
        p.mul_(1 - o.lr * o.weight_decay);
      } else {
        grad = grad + p * o.weight_decay;
      }
    }
    Tensor& exp_avg = state.buffers["exp_avg"];
    Tensor& exp_avg_sq = state.buffers["exp_avg_sq"];
    exp_avg.copy_(lerp(exp_avg, grad, 1 - o.beta1));
    exp_avg_sq.mul_(o.beta2).add_(grad * grad * (1 - o.beta2));
    const double t = double(state.step);
    const double bias_correction1 = 1 - std::pow(o.beta1, t);
    const double bias_correction2 = 1 - std::pow(o.beta2, t);
    Tensor bias_corrected_exp_avg = exp_avg / bias_correction1;
    const double rho_inf = 2 / (1 - o.beta2) - 1;
    const double rho_t = rho_inf - 2 * t * std::pow(o.beta2, t) / bias_correction2;
    if (rho_t > 5.0) {
      const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      Tensor adaptive_lr = reciprocal(sqrt(exp_avg_sq) + o.eps) * std::sqrt(bias_correction2);
      p.sub_(bias_corrected_exp_avg * o.lr * adaptive_lr * rect);
    } else {
      p.sub_(bias_corrected_exp_avg * o.lr);
    }
  }
}

}  // namespace brisk::optim
