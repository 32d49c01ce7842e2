// optim/sgd.cpp: SGD's reference step (tensor ops) and the hand-over of the parameters that
// take the fused step to the fused_sgd op (engine/ops/optim.cpp).
// See Note [Fused steps are ops] and Note [Fused steps match the reference].
#include "optim/sgd.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "optim/multi_tensor.h"

namespace brisk::optim {

SGD::SGD(NamedTensors params, const SGDOptions& options) : OptimizerWith(options) {
  add_param_group(std::move(params), options);
}

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& options) : SGD(number_params(params), options) {}

void SGD::check_options(size_t g) const {
  const SGDOptions& o = options(g);
  BRISK_CHECK(o.lr >= 0, "SGD: invalid learning rate ", o.lr);
  BRISK_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum);
  BRISK_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay);
  BRISK_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening 0");
}

namespace {

// The reference: one parameter, PyTorch's _single_tensor_sgd written with brisk ops.
void sgd_reference(const SGDOptions& o, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor d = o.maximize ? neg(grad) : grad;
  if (o.weight_decay != 0) d = d + param * o.weight_decay;
  if (o.momentum != 0) {
    Tensor& buf = state.buffers["momentum_buffer"];
    if (!buf.defined()) {
      buf = d.contiguous().clone();
    } else {
      buf.mul_(o.momentum).add_(d * (1 - o.dampening));
    }
    d = o.nesterov ? d + buf * o.momentum : buf;
  }
  Tensor p = param;
  p.add_(d * -o.lr);
}

}  // namespace

void SGD::step_group(size_t g, std::vector<Slot>& slots) {
  const SGDOptions& o = options(g);
  const SgdParams h{.lr = o.lr,
                    .momentum = o.momentum,
                    .dampening = o.dampening,
                    .weight_decay = o.weight_decay,
                    .nesterov = o.nesterov,
                    .maximize = o.maximize};
  detail::FusedCalls calls;  // per parameter: 1 where its momentum buffer is fresh
  for (Slot& s : slots) {
    s.state->step += 1;
    switch (detail::step_path(o.fused, s, OpId::FusedSgd)) {
      case detail::StepPath::Reference: sgd_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::Fused:
        if (o.momentum == 0) {
          calls.add(s.param, s.grad, {}, 0);
        } else {
          const bool fresh = !s.state->buffers.count("momentum_buffer");
          if (fresh) s.state->buffers["momentum_buffer"] = empty_like(s.param);
          calls.add(s.param, s.grad, {s.state->buffers["momentum_buffer"]}, fresh ? 1 : 0);
        }
        break;
    }
  }
  for (const detail::FusedCalls::Call& c : calls.calls()) {
    const std::vector<int64_t> none;
    fused_sgd_(c.lists[0], c.lists[1], c.lists[2], o.momentum != 0 ? c.per_param : none, h);
  }
}

}  // namespace brisk::optim
