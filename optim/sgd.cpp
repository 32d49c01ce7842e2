// optim/sgd.cpp: SGD's reference step (tensor ops), its fused loop (raw F32/F64 CPU memory),
// and the hand-over of CUDA parameters to the backend's fused step (kernels/optim_step.h).
// See Note [Fused steps match the reference].
#include "optim/sgd.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"
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

// One tensor's elements [begin, end): the reference's arithmetic, element by element. The
// options are read into plain locals first and the momentum cases are separate loops: reading
// SGDOptions' Option<> fields inside the loop kept it scalar, 3.4 ns per element (34 ms for 10M
// floats, 5x the reference step's tensor ops; bench_optim).
template <class T>
void sgd_kernel(const kernels::SgdHyper& h, T* p, const T* g, T* buf, bool first, int64_t begin, int64_t end) {
  const T wd = T(h.weight_decay), momentum = T(h.momentum), one_minus_dampening = T(1 - h.dampening);
  const T neg_lr = T(-h.lr);
  const bool maximize = h.maximize, decay = h.weight_decay != 0, nesterov = h.nesterov;
  auto direction = [&](int64_t i) {
    T d = maximize ? -g[i] : g[i];
    if (decay) d = d + p[i] * wd;
    return d;
  };
  if (h.momentum == 0) {
    for (int64_t i = begin; i < end; ++i) p[i] = p[i] + direction(i) * neg_lr;
  } else if (first) {
    for (int64_t i = begin; i < end; ++i) {
      const T d = direction(i);
      buf[i] = d;
      p[i] = p[i] + (nesterov ? d + d * momentum : d) * neg_lr;
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const T d = direction(i);
      const T b = buf[i] * momentum + d * one_minus_dampening;
      buf[i] = b;
      p[i] = p[i] + (nesterov ? d + b * momentum : b) * neg_lr;
    }
  }
}

template <class T>
void sgd_fused(const SGDOptions& o, const kernels::SgdHyper& h, const std::vector<Optimizer::Slot*>& slots) {
  std::vector<int64_t> numels;
  std::vector<bool> first;
  for (Optimizer::Slot* s : slots) {
    numels.push_back(s->param.numel());
    bool fresh = o.momentum != 0 && !s->state->buffers.count("momentum_buffer");
    if (fresh) s->state->buffers["momentum_buffer"] = empty_like(s->param);
    first.push_back(fresh);
  }
  detail::for_each_chunk(numels, [&](int64_t i, int64_t begin, int64_t end) {
    Optimizer::Slot& s = *slots[i];
    T* buf = o.momentum != 0 ? s.state->buffers["momentum_buffer"].data<T>() : nullptr;
    sgd_kernel<T>(h, s.param.data<T>(), s.grad.data<T>(), buf, first[i], begin, end);
  });
}

}  // namespace

void SGD::step_group(size_t g, std::vector<Slot>& slots) {
  const SGDOptions& o = options(g);
  const kernels::SgdHyper h{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.maximize};
  std::vector<Slot*> f32;
  std::vector<Slot*> f64;
  detail::DeviceGroups on_device("SGD", kernels::num_buffers(h));
  for (Slot& s : slots) {
    s.state->step += 1;
    switch (detail::step_path(o.fused, s, kernels::has_fused_step(s.param.device().type, h))) {
      case detail::StepPath::Reference: sgd_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::CpuLoop: (s.param.dtype() == DType::F32 ? f32 : f64).push_back(&s); break;
      case detail::StepPath::DeviceKernel:
        if (o.momentum == 0) {
          on_device.of(s.param).add(s.param, s.grad, {});
        } else {
          bool fresh = !s.state->buffers.count("momentum_buffer");
          if (fresh) s.state->buffers["momentum_buffer"] = empty_like(s.param);
          on_device.of(s.param).add(s.param, s.grad, {s.state->buffers["momentum_buffer"]}, fresh ? 1 : 0);
        }
        break;
    }
  }
  if (!f32.empty()) sgd_fused<float>(o, h, f32);
  if (!f64.empty()) sgd_fused<double>(o, h, f64);
  on_device.run(h);
}

}  // namespace brisk::optim
