// optim/rmsprop.cpp: RMSprop's reference step (tensor ops), fused loop (raw F32/F64 CPU memory)
// and the hand-over of CUDA parameters to the backend's fused step (kernels/optim_step.h).
// See Note [Fused steps match the reference].
#include "optim/rmsprop.h"

#include <algorithm>
#include <cmath>

#include "engine/functions.h"
#include "engine/grad_mode.h"
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

// One tensor's elements [begin, end): the reference's arithmetic, element by element, in
// blocks of three loops (averages, square roots, update). See Note [Square roots in fused
// loops]. grad_avg is null unless centered, buf null without momentum.
template <class T, bool kCentered, bool kMomentum>
void rmsprop_kernel(const RMSpropOptions& o, T* p, const T* g, T* square_avg, T* grad_avg, T* buf, int64_t begin,
                    int64_t end) {
  const T wd = T(o.weight_decay);
  const T alpha = T(o.alpha);
  const T one_minus_alpha = T(1 - o.alpha);
  const T eps = T(o.eps);
  const T momentum = T(o.momentum);
  const T neg_lr = T(-o.lr);
  T root[detail::kBlock];
  T grads[detail::kBlock];
  for (int64_t b = begin; b < end; b += detail::kBlock) {
    int64_t n = std::min(detail::kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = o.maximize ? -g[i] : g[i];
      if (o.weight_decay != 0) grad = grad + p[i] * wd;
      grads[j] = grad;
      T sq = square_avg[i] * alpha + grad * grad * one_minus_alpha;
      square_avg[i] = sq;
      if constexpr (kCentered) {
        T ga = grad_avg[i] * alpha + grad * one_minus_alpha;
        grad_avg[i] = ga;
        root[j] = sq - ga * ga;
      } else {
        root[j] = sq;
      }
    }
    detail::sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T avg = root[j] + eps;
      if constexpr (kMomentum) {
        T bb = buf[i] * momentum + grads[j] / avg;
        buf[i] = bb;
        p[i] = p[i] + bb * neg_lr;
      } else {
        p[i] = p[i] + grads[j] / avg * neg_lr;
      }
    }
  }
}

template <class T>
void rmsprop_fused(const RMSpropOptions& o, const std::vector<Optimizer::Slot*>& slots) {
  std::vector<int64_t> numels;
  for (Optimizer::Slot* s : slots) numels.push_back(s->param.numel());
  detail::for_each_chunk(numels, [&](int64_t i, int64_t begin, int64_t end) {
    Optimizer::Slot& s = *slots[i];
    auto& buffers = s.state->buffers;
    T* grad_avg = o.centered ? buffers.at("grad_avg").data<T>() : nullptr;
    T* buf = o.momentum > 0 ? buffers.at("momentum_buffer").data<T>() : nullptr;
    T* p = s.param.data<T>();
    const T* g = s.grad.data<T>();
    T* sq = buffers.at("square_avg").data<T>();
    if (grad_avg && buf) {
      rmsprop_kernel<T, true, true>(o, p, g, sq, grad_avg, buf, begin, end);
    } else if (grad_avg) {
      rmsprop_kernel<T, true, false>(o, p, g, sq, grad_avg, buf, begin, end);
    } else if (buf) {
      rmsprop_kernel<T, false, true>(o, p, g, sq, grad_avg, buf, begin, end);
    } else {
      rmsprop_kernel<T, false, false>(o, p, g, sq, grad_avg, buf, begin, end);
    }
  });
}

}  // namespace

void RMSprop::step_group(size_t g, std::vector<Slot>& slots) {
  const RMSpropOptions& o = options(g);
  const kernels::RmspropHyper h{o.lr, o.alpha, o.eps, o.weight_decay, o.momentum, o.centered, o.maximize};
  std::vector<Slot*> f32;
  std::vector<Slot*> f64;
  detail::DeviceGroups on_device("RMSprop", kernels::num_buffers(h));
  for (Slot& s : slots) {
    s.state->step += 1;
    init_state(o, s.param, *s.state);
    switch (detail::step_path(o.fused, s, kernels::has_fused_step(s.param.device().type, h))) {
      case detail::StepPath::Reference: rmsprop_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::CpuLoop: (s.param.dtype() == DType::F32 ? f32 : f64).push_back(&s); break;
      case detail::StepPath::DeviceKernel: {
        // Buffers in the order of kernels::RmspropHyper: square_avg, grad_avg, momentum_buffer.
        auto& b = s.state->buffers;
        kernels::FusedGroup& group = on_device.of(s.param);
        const bool momentum = o.momentum > 0;
        if (o.centered && momentum) {
          group.add(s.param, s.grad, {b.at("square_avg"), b.at("grad_avg"), b.at("momentum_buffer")});
        } else if (o.centered) {
          group.add(s.param, s.grad, {b.at("square_avg"), b.at("grad_avg")});
        } else if (momentum) {
          group.add(s.param, s.grad, {b.at("square_avg"), b.at("momentum_buffer")});
        } else {
          group.add(s.param, s.grad, {b.at("square_avg")});
        }
        break;
      }
    }
  }
  if (!f32.empty()) rmsprop_fused<float>(o, f32);
  if (!f64.empty()) rmsprop_fused<double>(o, f64);
  on_device.run(h);
}

}  // namespace brisk::optim
