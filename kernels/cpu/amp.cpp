// kernels/cpu/amp.cpp: the CPU kernel of amp_unscale, the gradient scaler's fused unscale
// (Note [Fused unscale]): one pass per gradient, vectorized, OpenMP over chunks of a large tensor.
// Not here: the op's checks (engine/ops/optim.cpp), the scaler (optim/grad_scaler.cpp), the
// CUDA kernel (kernels/cuda/amp.cu).
#include <cmath>

#include "engine/half.h"
#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

// Note [Fused unscale]
// PyTorch's _amp_foreach_non_finite_check_and_unscale_, element by element: a value v is
// non-finite when !isfinite(v) before scaling; the stored result is v * inv_scale computed in
// float (double for F64) and rounded once to the tensor's dtype, or v itself when inv_scale is
// exactly 1. Every element is written whatever is found (the optimizer step is what gets
// skipped). The inputs are dense gradients of one floating dtype on one device (the scaler
// groups them); attrs.a is inv_scale, an F32 value; the output found[i] is true when tensor i
// held a non-finite value. On CUDA the flags stay on the device: the scaler's one copy back is
// the one host sync of a scaler step.

// Compute type of a gradient dtype: float for 16-bit and F32, double for F64.
template <class T>
using Math = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Elements [begin, end) of p scaled in place; returns whether any was non-finite. The flag is
// an OR of comparisons, so the loop stays branch-free and vectorizes.
template <class T>
bool unscale_range(T* p, int64_t begin, int64_t end, Math<T> inv, bool scale) {
  int bad = 0;
  for (int64_t i = begin; i < end; ++i) {
    const Math<T> v = Math<T>(p[i]);
    bad |= !std::isfinite(v);
    if (scale) p[i] = T(v * inv);
  }
  return bad != 0;
}

template <class T>
bool unscale_tensor(const Tensor& g, float inv_scale) {
  T* p = static_cast<T*>(g.data_ptr());
  const int64_t n = g.numel();
  const bool scale = inv_scale != 1.0f;
  const Math<T> inv = Math<T>(inv_scale);
  const int nt = threads_for(n);
  if (nt <= 1) return unscale_range(p, 0, n, inv, scale);
  int bad = 0;
#pragma omp parallel for num_threads(nt) reduction(| : bad)
  for (int t = 0; t < nt; ++t) {
    bad |= unscale_range(p, n * t / nt, n * (t + 1) / nt, inv, scale);
  }
  return bad != 0;
}

void unscale(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const float inv_scale = float(attrs.a);
  bool* found = out[0].data<bool>();
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& g = in[i];
    bool bad = false;
    switch (g.dtype()) {
      case DType::F32: bad = unscale_tensor<float>(g, inv_scale); break;
      case DType::F64: bad = unscale_tensor<double>(g, inv_scale); break;
      case DType::F16: bad = unscale_tensor<Half>(g, inv_scale); break;
      case DType::BF16: bad = unscale_tensor<BFloat16>(g, inv_scale); break;
      default: BRISK_FAIL("amp_unscale: grads[", i, "] is ", g.str(), " (floating dtypes only)");
    }
    found[i] = bad;
  }
}

}  // namespace

void register_amp() { register_kernel(OpId::AmpUnscale, DeviceType::CPU, unscale); }

}  // namespace brisk::kernels::cpu
