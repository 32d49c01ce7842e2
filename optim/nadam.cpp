// optim/nadam.cpp: NAdam's step, PyTorch's _single_tensor_nadam written with brisk tensor ops.
#include "optim/nadam.h"

#include <cmath>

#include "engine/functions.h"

namespace brisk::optim {

NAdam::NAdam(NamedTensors params, const NAdamOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

NAdam::NAdam(const std::vector<Tensor>& params, const NAdamOptions& options) : NAdam(number_params(params), options) {}

void NAdam::check_options(size_t g) const {
  const NAdamOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "NAdam: invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, "NAdam: invalid eps ", o.eps);
  BRISK_CHECK(o.beta1 >= 0 && o.beta1 < 1, "NAdam: invalid beta1 ", o.beta1);
  BRISK_CHECK(o.beta2 >= 0 && o.beta2 < 1, "NAdam: invalid beta2 ", o.beta2);
  BRISK_CHECK(o.weight_decay >= 0, "NAdam: invalid weight_decay ", o.weight_decay);
  BRISK_CHECK(o.momentum_decay >= 0, "NAdam: invalid momentum_decay ", o.momentum_decay);
}

void NAdam::step_group(size_t g, std::vector<Slot>& slots) {
  const NAdamOptions& o = options(g);
  for (Slot& s : slots) {
    ParamState& state = *s.state;
    state.step += 1;
    if (!state.buffers.count("exp_avg")) {
      state.buffers["exp_avg"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
      state.buffers["exp_avg_sq"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
    }
    if (!state.numbers.count("mu_product")) state.numbers["mu_product"] = 1.0;
    Tensor p = s.param;
    Tensor grad = o.maximize ? neg(s.grad) : s.grad;
    const double t = double(state.step);
    const double bias_correction2 = 1 - std::pow(o.beta2, t);
    if (o.weight_decay != 0) {
      if (o.decoupled_weight_decay) {
        p.mul_(1 - o.lr * o.weight_decay);
      } else {
        grad = grad + p * o.weight_decay;
      }
    }
    const double mu = o.beta1 * (1.0 - 0.5 * std::pow(0.96, t * o.momentum_decay));
    const double mu_next = o.beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * o.momentum_decay));
    double& mu_product = state.numbers["mu_product"];
    mu_product *= mu;
    const double mu_product_next = mu_product * mu_next;
    Tensor& exp_avg = state.buffers["exp_avg"];
    Tensor& exp_avg_sq = state.buffers["exp_avg_sq"];
    exp_avg.copy_(lerp(exp_avg, grad, 1 - o.beta1));
    exp_avg_sq.mul_(o.beta2).add_(grad * grad * (1 - o.beta2));
    Tensor denom = sqrt(exp_avg_sq / bias_correction2) + o.eps;
    p.add_(grad / denom * (-o.lr * (1.0 - mu) / (1.0 - mu_product)));
    p.add_(exp_avg / denom * (-o.lr * mu_next / (1.0 - mu_product_next)));
  }
}

}  // namespace brisk::optim
