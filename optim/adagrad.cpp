// optim/adagrad.cpp: Adagrad's reference step (tensor ops) and the hand-over of the parameters
// that take the fused step to the fused_adagrad op (engine/ops/optim.cpp).
// See Note [Fused steps are ops] and Note [Fused steps match the reference].
#include "optim/adagrad.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "optim/multi_tensor.h"

namespace brisk::optim {

Adagrad::Adagrad(NamedTensors params, const AdagradOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

Adagrad::Adagrad(const std::vector<Tensor>& params, const AdagradOptions& options)
    : Adagrad(number_params(params), options) {}

void Adagrad::check_options(size_t g) const {
  const AdagradOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "Adagrad: invalid learning rate ", o.lr);
  BRISK_CHECK(o.lr_decay >= 0, "Adagrad: invalid lr_decay ", o.lr_decay);
  BRISK_CHECK(o.weight_decay >= 0, "Adagrad: invalid weight_decay ", o.weight_decay);
  BRISK_CHECK(o.initial_accumulator_value >= 0, "Adagrad: invalid initial_accumulator_value ",
              o.initial_accumulator_value);
  BRISK_CHECK(o.eps >= 0, "Adagrad: invalid eps ", o.eps);
}

namespace {

// The hyperparameters of a group, as both paths take them.
AdagradParams hyper_of(const AdagradOptions& o) {
  return {.lr = o.lr, .lr_decay = o.lr_decay, .eps = o.eps, .weight_decay = o.weight_decay, .maximize = o.maximize};
}

// The reference: one parameter, PyTorch's _single_tensor_adagrad written with brisk ops.
void adagrad_reference(const AdagradOptions& o, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor p = param;
  Tensor g = o.maximize ? neg(grad) : grad;
  if (o.weight_decay != 0) g = g + p * o.weight_decay;
  double clr = hyper_of(o).decayed_lr(state.step);
  Tensor& sum = state.buffers["sum"];
  sum.add_(g * g);
  Tensor denom = sqrt(sum) + o.eps;
  p.add_(g / denom * -clr);
}

}  // namespace

void Adagrad::step_group(size_t g, std::vector<Slot>& slots) {
  const AdagradOptions& o = options(g);
  detail::FusedCalls calls;
  for (Slot& s : slots) {
    s.state->step += 1;
    if (!s.state->buffers.count("sum")) {
      s.state->buffers["sum"] = full(s.param.sizes(), o.initial_accumulator_value, s.param.dtype(), s.param.device());
    }
    switch (detail::step_path(o.fused, s, OpId::FusedAdagrad)) {
      case detail::StepPath::Reference: adagrad_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::Fused: calls.add(s.param, s.grad, {s.state->buffers.at("sum")}, s.state->step); break;
    }
  }
  for (const detail::FusedCalls::Call& c : calls.calls()) {
    fused_adagrad_(c.lists[0], c.lists[1], c.lists[2], c.per_param, hyper_of(o));
  }
}

}  // namespace brisk::optim
