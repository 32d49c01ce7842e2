// optim/adagrad.cpp: Adagrad's reference step (tensor ops), fused loop (raw F32/F64 CPU memory)
// and the hand-over of CUDA parameters to the backend's fused step (kernels/optim_step.h).
// See Note [Fused steps match the reference].
#include "optim/adagrad.h"

#include <algorithm>
#include <cmath>

#include "engine/functions.h"
#include "engine/grad_mode.h"
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

// The learning rate of a parameter at its step count t: lr / (1 + (t - 1) lr_decay).
double decayed_lr(const AdagradOptions& o, int64_t step) { return o.lr / (1 + double(step - 1) * o.lr_decay); }

// The reference: one parameter, PyTorch's _single_tensor_adagrad written with brisk ops.
void adagrad_reference(const AdagradOptions& o, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor p = param;
  Tensor g = o.maximize ? neg(grad) : grad;
  if (o.weight_decay != 0) g = g + p * o.weight_decay;
  double clr = decayed_lr(o, state.step);
  Tensor& sum = state.buffers["sum"];
  sum.add_(g * g);
  Tensor denom = sqrt(sum) + o.eps;
  p.add_(g / denom * -clr);
}

// One tensor's elements [begin, end): the reference's arithmetic, element by element, in
// blocks of three loops (sums, square roots, update). See Note [Square roots in fused loops].
template <class T>
void adagrad_kernel(const AdagradOptions& o, double clr, T* p, const T* g, T* sum, int64_t begin, int64_t end) {
  const T wd = T(o.weight_decay);
  const T eps = T(o.eps);
  const T neg_clr = T(-clr);
  T root[detail::kBlock];
  T grads[detail::kBlock];
  for (int64_t b = begin; b < end; b += detail::kBlock) {
    int64_t n = std::min(detail::kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = o.maximize ? -g[i] : g[i];
      if (o.weight_decay != 0) grad = grad + p[i] * wd;
      grads[j] = grad;
      T s = sum[i] + grad * grad;
      sum[i] = s;
      root[j] = s;
    }
    detail::sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T denom = root[j] + eps;
      p[i] = p[i] + grads[j] / denom * neg_clr;
    }
  }
}

template <class T>
void adagrad_fused(const AdagradOptions& o, const std::vector<Optimizer::Slot*>& slots) {
  std::vector<int64_t> numels;
  std::vector<double> clrs;
  for (Optimizer::Slot* s : slots) {
    numels.push_back(s->param.numel());
    clrs.push_back(decayed_lr(o, s->state->step));
  }
  detail::for_each_chunk(numels, [&](int64_t i, int64_t begin, int64_t end) {
    Optimizer::Slot& s = *slots[i];
    adagrad_kernel<T>(o, clrs[i], s.param.data<T>(), s.grad.data<T>(), s.state->buffers.at("sum").data<T>(), begin,
                      end);
  });
}

}  // namespace

void Adagrad::step_group(size_t g, std::vector<Slot>& slots) {
  const AdagradOptions& o = options(g);
  const kernels::AdagradHyper h{o.eps, o.weight_decay, o.maximize};
  std::vector<Slot*> f32;
  std::vector<Slot*> f64;
  detail::DeviceGroups on_device("Adagrad", kernels::num_buffers(h));
  for (Slot& s : slots) {
    s.state->step += 1;
    if (!s.state->buffers.count("sum")) {
      s.state->buffers["sum"] = full(s.param.sizes(), o.initial_accumulator_value, s.param.dtype(), s.param.device());
    }
    switch (detail::step_path(o.fused, s, kernels::has_fused_step(s.param.device().type, h))) {
      case detail::StepPath::Reference: adagrad_reference(o, s.param, s.grad, *s.state); break;
      case detail::StepPath::CpuLoop: (s.param.dtype() == DType::F32 ? f32 : f64).push_back(&s); break;
      case detail::StepPath::DeviceKernel:
        on_device.of(s.param).add(s.param, s.grad, {s.state->buffers.at("sum")}, decayed_lr(o, s.state->step));
        break;
    }
  }
  if (!f32.empty()) adagrad_fused<float>(o, f32);
  if (!f64.empty()) adagrad_fused<double>(o, f64);
  on_device.run(h);
}

}  // namespace brisk::optim
