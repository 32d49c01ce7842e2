// optim/adam.cpp: Adam's and AdamW's reference step (tensor ops), fused loop (raw F32/F64 CPU
// memory) and the hand-over of CUDA parameters to the backend's fused step
// (kernels/optim_step.h). The two optimizers share everything but where weight decay enters.
// See Note [Fused steps match the reference].
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "optim/multi_tensor.h"

namespace brisk::optim {

namespace {

// The hyperparameters of one group, Adam's or AdamW's, as every path takes them.
using kernels::AdamHyper;

template <class Options>
AdamHyper hyper_of(const Options& o, bool decoupled) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.maximize, decoupled};
}

template <class Options>
void check_adam_options(const char* name, const Options& o) {
  BRISK_CHECK(o.lr >= 0, name, ": invalid learning rate ", o.lr);
  BRISK_CHECK(o.eps >= 0, name, ": invalid eps ", o.eps);
  BRISK_CHECK(o.beta1 >= 0 && o.beta1 < 1, name, ": invalid beta1 ", o.beta1);
  BRISK_CHECK(o.beta2 >= 0 && o.beta2 < 1, name, ": invalid beta2 ", o.beta2);
  BRISK_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay);
}

// Bias corrections of one parameter at its step count.
struct AdamStepScalars {
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

AdamStepScalars step_scalars(const AdamHyper& h, int64_t step) {
  double bias_correction1 = 1 - std::pow(h.beta1, double(step));
  double bias_correction2 = 1 - std::pow(h.beta2, double(step));
  return {h.lr / bias_correction1, std::sqrt(bias_correction2)};
}

// Creates the moment buffers of a parameter at its first step (zeros, dense).
void init_state(const AdamHyper& h, const Tensor& param, ParamState& state) {
  if (state.buffers.count("exp_avg")) return;
  state.buffers["exp_avg"] = zeros(param.sizes(), param.dtype(), param.device());
  state.buffers["exp_avg_sq"] = zeros(param.sizes(), param.dtype(), param.device());
  if (h.amsgrad) state.buffers["max_exp_avg_sq"] = zeros(param.sizes(), param.dtype(), param.device());
}

// The reference: one parameter, PyTorch's _single_tensor_adam(w) written with brisk ops.
void adam_reference(const AdamHyper& h, const Tensor& param, const Tensor& grad, ParamState& state) {
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
  AdamStepScalars s = step_scalars(h, state.step);
  Tensor second_moment = exp_avg_sq;
  if (h.amsgrad) {
    Tensor& max_exp_avg_sq = state.buffers["max_exp_avg_sq"];
    max_exp_avg_sq.copy_(maximum(max_exp_avg_sq, exp_avg_sq));
    second_moment = max_exp_avg_sq;
  }
  Tensor denom = sqrt(second_moment) / s.bias_correction2_sqrt + h.eps;
  p.add_(exp_avg / denom * -s.step_size);
}

// One tensor's elements [begin, end): the reference's arithmetic, element by element, in
// blocks of three loops (moments, square roots, update). See Note [Square roots in fused loops].
// vmax is null without amsgrad.
template <class T, bool kAmsgrad>
void adam_kernel(const AdamHyper& h, const AdamStepScalars& s, T* p, const T* g, T* m, T* v, T* vmax, int64_t begin,
                 int64_t end) {
  const T wd = T(h.weight_decay);
  const T decay = T(1 - h.lr * h.weight_decay);
  const T beta1 = T(h.beta1);
  const T one_minus_beta1 = T(1 - h.beta1);
  const T beta2 = T(h.beta2);
  const T one_minus_beta2 = T(1 - h.beta2);
  const T bias_correction2_sqrt = T(s.bias_correction2_sqrt);
  const T eps = T(h.eps);
  const T neg_step_size = T(-s.step_size);
  const bool l2 = h.weight_decay != 0 && !h.decoupled;
  const bool decoupled = h.weight_decay != 0 && h.decoupled;
  T root[detail::kBlock];
  for (int64_t b = begin; b < end; b += detail::kBlock) {
    int64_t n = std::min(detail::kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = h.maximize ? -g[i] : g[i];
      if (l2) grad = grad + p[i] * wd;
      T exp_avg = m[i] * beta1 + grad * one_minus_beta1;
      T exp_avg_sq = v[i] * beta2 + grad * grad * one_minus_beta2;
      m[i] = exp_avg;
      v[i] = exp_avg_sq;
      T second_moment = exp_avg_sq;
      if constexpr (kAmsgrad) {
        second_moment = detail::maximum(vmax[i], exp_avg_sq);
        vmax[i] = second_moment;
      }
      root[j] = second_moment;
    }
    detail::sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T param = decoupled ? p[i] * decay : p[i];
      T denom = root[j] / bias_correction2_sqrt + eps;
      p[i] = param + m[i] / denom * neg_step_size;
    }
  }
}

template <class T>
void adam_fused(const AdamHyper& h, const std::vector<Optimizer::Slot*>& slots) {
  std::vector<int64_t> numels;
  std::vector<AdamStepScalars> scalars;
  for (Optimizer::Slot* s : slots) {
    numels.push_back(s->param.numel());
    scalars.push_back(step_scalars(h, s->state->step));
  }
  detail::for_each_chunk(numels, [&](int64_t i, int64_t begin, int64_t end) {
    Optimizer::Slot& s = *slots[i];
    auto& buffers = s.state->buffers;
    T* vmax = h.amsgrad ? buffers.at("max_exp_avg_sq").data<T>() : nullptr;
    T* p = s.param.data<T>();
    const T* g = s.grad.data<T>();
    T* m = buffers.at("exp_avg").data<T>();
    T* v = buffers.at("exp_avg_sq").data<T>();
    if (vmax) {
      adam_kernel<T, true>(h, scalars[i], p, g, m, v, vmax, begin, end);
    } else {
      adam_kernel<T, false>(h, scalars[i], p, g, m, v, vmax, begin, end);
    }
  });
}

// One group's step: fused loops and kernels for what they can take, the reference for the rest.
void adam_group_step(const AdamHyper& h, bool fused, std::vector<Optimizer::Slot>& slots) {
  std::vector<Optimizer::Slot*> f32;
  std::vector<Optimizer::Slot*> f64;
  detail::DeviceGroups on_device(h.decoupled ? "AdamW" : "Adam", kernels::num_buffers(h));
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
    switch (detail::step_path(fused, s, kernels::has_fused_step(s.param.device().type, h))) {
      case detail::StepPath::Reference: adam_reference(h, s.param, s.grad, *s.state); break;
      case detail::StepPath::CpuLoop: (s.param.dtype() == DType::F32 ? f32 : f64).push_back(&s); break;
      case detail::StepPath::DeviceKernel: {
        auto& b = s.state->buffers;
        AdamStepScalars k = step_scalars(h, s.state->step);
        kernels::FusedGroup& group = on_device.of(s.param);
        if (h.amsgrad) {
          group.add(s.param, s.grad, {b.at("exp_avg"), b.at("exp_avg_sq"), b.at("max_exp_avg_sq")}, k.step_size,
                    k.bias_correction2_sqrt);
        } else {
          group.add(s.param, s.grad, {b.at("exp_avg"), b.at("exp_avg_sq")}, k.step_size, k.bias_correction2_sqrt);
        }
        break;
      }
    }
  }
  if (!f32.empty()) adam_fused<float>(h, f32);
  if (!f64.empty()) adam_fused<double>(h, f64);
  on_device.run(h);
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
