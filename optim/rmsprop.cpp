// optim/rmsprop.cpp: RMSprop's reference step (tensor ops) and the hand-over of the parameters
// that take the fused step to the fused_rmsprop op (engine/ops/optim.cpp).
// See Note [Fused steps are ops] and Note [Fused steps match the reference].
#include "optim/rmsprop.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "optim/multi_tensor.h"

namespace brisk::optim {

RMSprop::RMSprop(NamedTensors params, const RMSpropOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

RMSprop::RMSprop(const std::vector<Tensor>& params, const RMSpropOptions& options)
    : RMSprop(number_params(params), options) {}

void RMSprop::check_options(size_t g) const {
  const RMSpropOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "RMSprop: invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, "RMSprop: invalid eps ", o.eps);
  BRISK_CHECK(o.momentum >= 0, "RMSprop: invalid momentum ", o.momentum);
  BRISK_CHECK(o.weight_decay >= 0, "RMSprop: invalid weight_decay ", o.weight_decay);
  BRISK_CHECK(o.alpha >= 0, "RMSprop: invalid alpha ", o.alpha);
}

namespace {

// Creates the buffers a parameter needs (zeros, dense) when it first needs them.
void init_state(const RMSpropOptions& o, const Tensor& param, ParamState& state) {
  auto need = [&](const char* key) {
    if (!state.buffers.count(key)) state.buffers[key] = zeros(param.sizes(), param.dtype(), param.device());
  };
  need("square_avg");
  if (o.momentum > 0) need("momentum_buffer");
  if (o.centered) need("grad_avg");
}

// The reference: one parameter, PyTorch's _single_tensor_rmsprop written with brisk ops.
void rmsprop_reference(const RMSpropOptions& o, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor p = param;
  Tensor g = o.maximize ? neg(grad) : grad;
  if (o.weight_decay != 0) g = g + p * o.weight_decay;
  Tensor& square_avg = state.buffers["square_avg"];
  square_avg.mul_(o.alpha).add_(g * g * (1 - o.alpha));
  Tensor avg;
  if (o.centered) {
    Tensor& grad_avg = state.buffers["grad_avg"];
    grad_avg.mul_(o.alpha).add_(g * (1 - o.alpha));
    avg = sqrt(square_avg - grad_avg * grad_avg) + o.eps;
  } else {
    avg = sqrt(square_avg) + o.eps;
  }
  if (o.momentum > 0) {
    Tensor& buf = state.buffers["momentum_buffer"];
    buf.mul_(o.momentum).add_(g / avg);
    p.add_(buf * -o.lr);
  } else {
    p.add_(g / avg * -o.lr);
  }
}

}  // namespace

void RMSprop::step_group(size_t g, std::vector<Slot>& slots) {
  const RMSpropOptions& o = options(g);
  const RmspropParams h{.lr = o.lr,
                        .alpha = o.alpha,
                        .eps = o.eps,
                        .weight_decay = o.weight_decay,
                        .momentum = o.momentum,
                        .centered = o.centered,
                        .maximize = o.maximize};
  detail::FusedCalls calls;
  for (Slot& s : slots) {
    s.state->step += 1;
    init_state(o, s.param, *s.state);
    switch (detail::step_path(o.fused, s, OpId::FusedRmsprop)) {
      case detail::StepPath::Reference: rmsprop_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::Fused: {
        // Lists in RmspropParams' order: square_avg, grad_avg, momentum_buffer.
        auto& b = s.state->buffers;
        const bool momentum = o.momentum > 0;
        if (o.centered && momentum) {
          calls.add(s.param, s.grad, {b.at("square_avg"), b.at("grad_avg"), b.at("momentum_buffer")}, 0);
        } else if (o.centered) {
          calls.add(s.param, s.grad, {b.at("square_avg"), b.at("grad_avg")}, 0);
        } else if (momentum) {
          calls.add(s.param, s.grad, {b.at("square_avg"), b.at("momentum_buffer")}, 0);
        } else {
          calls.add(s.param, s.grad, {b.at("square_avg")}, 0);
        }
        break;
      }
    }
  }
  for (const detail::FusedCalls::Call& c : calls.calls()) {
    // The lists after square_avgs: grad_avgs when centered, then momentum_buffers.
    const std::vector<Tensor>& grad_avgs = o.centered ? c.lists[3] : c.lists[4];
    const std::vector<Tensor>& momentum_buffers = o.centered ? c.lists[4] : c.lists[3];
    fused_rmsprop_(c.lists[0], c.lists[1], c.lists[2], grad_avgs, momentum_buffers, h);
  }
}

}  // namespace brisk::optim
