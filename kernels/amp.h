// kernels/amp.h: the interface between optim::GradScaler and the backends' fused unscale: one
// pass over a list of gradients of one dtype on one device that multiplies every element by
// 1/scale in place and says which tensors held a non-finite value. A registry holds one
// function per device type, set by the backend at init.
// Not here: the scaler's policy (optim/grad_scaler.cpp), the kernels (kernels/cpu/amp.cpp,
// kernels/cuda/amp.cu).
#pragma once

#include <cstdint>
#include <span>

#include "engine/tensor.h"

namespace brisk::kernels {

// Note [Fused unscale]
// PyTorch's _amp_foreach_non_finite_check_and_unscale_, element by element: a value v is
// non-finite when !isfinite(v) before scaling; the stored result is v * inv_scale computed in
// float (double for F64) and rounded once to the tensor's dtype, or v itself when inv_scale is
// exactly 1. Every element is written whatever is found (the optimizer step is what gets
// skipped). `grads`: dense tensors, all of one floating dtype and one device (the scaler groups
// them); found[i] is set to 1 when tensor i held a non-finite value and left alone otherwise.
// The function returns once `found` is filled (on CUDA: after the launches, one copy back and a
// stream synchronize, the one host sync of a scaler step).
using UnscaleFn = void (*)(std::span<const Tensor> grads, float inv_scale, uint8_t* found);

inline UnscaleFn& unscale_fn(DeviceType t) {
  static UnscaleFn table[kNumDeviceTypes] = {};
  return table[int(t)];
}

}  // namespace brisk::kernels
