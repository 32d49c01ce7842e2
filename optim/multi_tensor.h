// optim/multi_tensor.h: what the optimizers share around the fused steps: which path each
// parameter takes (the tensor-op reference, or its optimizer's fused-step op: dense tensors of
// one F32/F64 dtype on one device whose device type has a kernel for the op), and the lists of
// tensors gathered for the op calls, one call per (device, dtype).
// Not here: the update formulas' references (each optimizer's .cpp), the ops and their kernels
// (engine/ops/optim.cpp, kernels/cpu/optim.cpp, kernels/cuda/optim.cu; Note [Fused steps are
// ops]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "engine/kernel_override.h"
#include "engine/op.h"
#include "engine/tensor.h"
#include "optim/optimizer.h"

namespace brisk::optim::detail {

// A fused step reads and writes raw memory: dense, of the given dtype and device.
inline bool fusable(const Tensor& t, DType dtype, Device device) {
  return t.defined() && t.device() == device && t.dtype() == dtype && t.is_contiguous();
}

enum class StepPath { Reference, Fused };

// Where one parameter's update runs. The fused step (op `op`) takes F32/F64 parameters whose
// gradient and state buffers (created before this call) are dense, of the parameter's dtype and
// device, on a device type with a kernel for the op. Everything else, F16/BF16 included (their
// reference rounds to 16 bits after every op, which a fused F32-math kernel would not
// reproduce; brisk keeps parameters and optimizer state in F32 under mixed precision anyway),
// takes the reference step.
inline StepPath step_path(bool fused, const Optimizer::Slot& s, OpId op) {
  const DType dt = s.param.dtype();
  const Device device = s.param.device();
  if (!fused || (dt != DType::F32 && dt != DType::F64)) return StepPath::Reference;
  const DeviceType type = device.type;
  if (!op_def(op).kernels[int(type)] && !is_kernel_replaced(op, type)) return StepPath::Reference;
  bool ok = fusable(s.param, dt, device) && fusable(s.grad, dt, device);
  for (const auto& [key, buffer] : s.state->buffers) ok = ok && fusable(buffer, dt, device);
  return ok ? StepPath::Fused : StepPath::Reference;
}

// Most lists a fused step takes: params, grads and up to three state buffers (Adam with
// amsgrad, RMSprop centered with momentum).
inline constexpr int kMaxLists = 5;

// The parameters of one optimizer group that take the fused step, gathered into one call per
// (device, dtype), each with its integer of attrs.per_param (its step count; SGD's fresh flag).
class FusedCalls {
 public:
  struct Call {
    Device device{};
    DType dtype = DType::F32;
    std::vector<Tensor> lists[kMaxLists]{};  // params, grads, buffers; unused ones empty
    std::vector<int64_t> per_param{};
  };

  void add(const Tensor& param, const Tensor& grad, std::initializer_list<Tensor> buffers, int64_t per_param) {
    Call& c = of(param);
    c.lists[0].push_back(param);
    c.lists[1].push_back(grad);
    int k = 2;
    for (const Tensor& b : buffers) c.lists[k++].push_back(b);
    c.per_param.push_back(per_param);
  }
  const std::vector<Call>& calls() const { return calls_; }

 private:
  Call& of(const Tensor& param) {
    for (Call& c : calls_) {
      if (c.device == param.device() && c.dtype == param.dtype()) return c;
    }
    return calls_.emplace_back(Call{param.device(), param.dtype(), {}, {}});
  }
  std::vector<Call> calls_;
};

}  // namespace brisk::optim::detail
