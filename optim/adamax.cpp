// optim/adamax.cpp: Adamax's step, PyTorch's _single_tensor_adamax written with brisk tensor ops.
#include "optim/adamax.h"

#include <cmath>

#include "engine/functions.h"

namespace brisk::optim {

Adamax::Adamax(NamedTensors params, const AdamaxOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

Adamax::Adamax(const std::vector<Tensor>& params, const AdamaxOptions& options)
    : Adamax(number_params(params), options) {}

void Adamax::check_options(size_t g) const {
  const AdamaxOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "Adamax: invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, "Adamax: invalid eps ", o.eps);
  BRISK_CHECK(o.beta1 >= 0 && o.beta1 < 1, "Adamax: invalid beta1 ", o.beta1);
  BRISK_CHECK(o.beta2 >= 0 && o.beta2 < 1, "Adamax: invalid beta2 ", o.beta2);
  BRISK_CHECK(o.weight_decay >= 0, "Adamax: invalid weight_decay ", o.weight_decay);
}

void Adamax::step_group(size_t g, std::vector<Slot>& slots) {
  const AdamaxOptions& o = options(g);
  for (Slot& s : slots) {
    ParamState& state = *s.state;
    state.step += 1;
    if (!state.buffers.count("exp_avg")) {
      state.buffers["exp_avg"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
      state.buffers["exp_inf"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
    }
    Tensor p = s.param;
    Tensor grad = o.maximize ? neg(s.grad) : s.grad;
    if (o.weight_decay != 0) grad = grad + p * o.weight_decay;
    Tensor& exp_avg = state.buffers["exp_avg"];
    Tensor& exp_inf = state.buffers["exp_inf"];
    exp_avg.copy_(lerp(exp_avg, grad, 1 - o.beta1));
    exp_inf.copy_(maximum(exp_inf * o.beta2, abs(grad) + o.eps));
    const double clr = o.lr / (1 - std::pow(o.beta1, double(state.step)));
    p.add_(exp_avg / exp_inf * -clr);
  }
}

}  // namespace brisk::optim
