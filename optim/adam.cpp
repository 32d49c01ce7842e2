// optim/adam.cpp: Adam's and AdamW's reference step (tensor ops) and the hand-over of the
// parameters that take the fused step to the fused_adam / fused_adamw ops (engine/ops/optim.cpp).
// The two optimizers share everything but where weight decay enters.
// See Note [Fused steps are ops] and Note [Fused steps match the reference].
#include "optim/adam.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "optim/multi_tensor.h"

namespace brisk::optim {

namespace {

// The hyperparameters of one group, Adam's or AdamW's, as both paths take them.
template <class Options>
AdamParams hyper_of(const Options& o, bool decoupled) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize,
          .decoupled = decoupled};
}

template <class Options>
void check_adam_options(const char* name, const Options& o) {
  BRISK_CHECK(o.lr >= 0, name, ": invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, name, ": invalid eps ", o.eps);
  BRISK_CHECK(o.beta1 >= 0 && o.beta1 < 1, name, ": invalid beta1 ", o.beta1);
  BRISK_CHECK(o.beta2 >= 0 && o.beta2 < 1, name, ": invalid beta2 ", o.beta2);
  BRISK_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay);
}

// Creates the moment buffers of a parameter at its first step (zeros, dense).
void init_state(const AdamParams& h, const Tensor& param, ParamState& state) {
  if (state.buffers.count("exp_avg")) return;
  state.buffers["exp_avg"] = zeros(param.sizes(), param.dtype(), param.device());
  state.buffers["exp_avg_sq"] = zeros(param.sizes(), param.dtype(), param.device());
  if (h.amsgrad) state.buffers["max_exp_avg_sq"] = zeros(param.sizes(), param.dtype(), param.device());
}

// The reference: one parameter, PyTorch's _single_tensor_adam(w) written with brisk ops.
void adam_reference(const AdamParams& h, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor p = param;
  Tensor g = h.maximize ? neg(grad) : grad;
  if (h.weight_decay != 0) {
    if (h.decoupled) {
      p.mul_(1 - h.lr * h.weight_decay);
    } else {
      g = g + p * h.weight_decay;
    }
  }
  Tensor& exp_avg = state.buffers["exp_avg"];
  Tensor& exp_avg_sq = state.buffers["exp_avg_sq"];
  exp_avg.mul_(h.beta1).add_(g * (1 - h.beta1));
  exp_avg_sq.mul_(h.beta2).add_(g * g * (1 - h.beta2));
  Tensor second_moment = exp_avg_sq;
  if (h.amsgrad) {
    Tensor& max_exp_avg_sq = state.buffers["max_exp_avg_sq"];
    max_exp_avg_sq.copy_(maximum(max_exp_avg_sq, exp_avg_sq));
    second_moment = max_exp_avg_sq;
  }
  Tensor denom = sqrt(second_moment) / h.bias_correction2_sqrt(state.step) + h.eps;
  p.add_(exp_avg / denom * -h.step_size(state.step));
}

// One group's step: the fused op for what it can take, the reference for the rest.
void adam_group_step(const AdamParams& h, bool fused, std::vector<Optimizer::Slot>& slots) {
  const OpId op = h.decoupled ? OpId::FusedAdamw : OpId::FusedAdam;
  detail::FusedCalls calls;
  for (Optimizer::Slot& s : slots) {
    // Its bias corrections are host scalars of the step count: a captured graph would replay
    // the captured step's values forever (Note [CUDA graphs] in kernels/cuda/graph.cpp).
    const Device dev = s.param.device();
    BRISK_CHECK(!dev.is_cuda() || !backend(dev).is_capturing(dev.index), h.decoupled ? "AdamW" : "Adam",
                ": the step cannot be captured in a CUDA graph on ", dev.str(),
                " (its bias corrections change every step); capture forward and backward and step outside "
                "the graph, or use SGD");
    s.state->step += 1;
    init_state(h, s.param, *s.state);
    if (h.amsgrad && !s.state->buffers.count("max_exp_avg_sq")) {  // amsgrad switched on later
      s.state->buffers["max_exp_avg_sq"] = zeros(s.param.sizes(), s.param.dtype(), s.param.device());
    }
    auto& b = s.state->buffers;
    switch (detail::step_path(fused, s, op)) {
      case detail::StepPath::Reference: adam_reference(h, s.param, s.grad, *s.state); break;
      case detail::StepPath::Fused:
        if (h.amsgrad) {
          calls.add(s.param, s.grad, {b.at("exp_avg"), b.at("exp_avg_sq"), b.at("max_exp_avg_sq")}, s.state->step);
        } else {
          calls.add(s.param, s.grad, {b.at("exp_avg"), b.at("exp_avg_sq")}, s.state->step);
        }
        break;
    }
  }
  for (const detail::FusedCalls::Call& c : calls.calls()) {
    fused_adam_(c.lists[0], c.lists[1], c.lists[2], c.lists[3], c.lists[4], c.per_param, h);
  }
}

}  // namespace

Adam::Adam(NamedTensors params, const AdamOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& options) : Adam(number_params(params), options) {}

void Adam::check_options(size_t g) const { check_adam_options("Adam", options(g)); }

void Adam::step_group(size_t g, std::vector<Slot>& slots) {
  adam_group_step(hyper_of(options(g), /*decoupled=*/false), options(g).fused, slots);
}

AdamW::AdamW(NamedTensors params, const AdamWOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options) : AdamW(number_params(params), options) {}

void AdamW::check_options(size_t g) const { check_adam_options("AdamW", options(g)); }

void AdamW::step_group(size_t g, std::vector<Slot>& slots) {
  adam_group_step(hyper_of(options(g), /*decoupled=*/true), options(g).fused, slots);
}

}  // namespace brisk::optim
