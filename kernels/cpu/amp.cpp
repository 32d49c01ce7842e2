// kernels/cpu/amp.cpp: the CPU fused unscale (kernels/amp.h, Note [Fused unscale]): one pass
// per gradient, vectorized, OpenMP over chunks of a large tensor.
// Not here: the scaler (optim/grad_scaler.cpp).
#include "kernels/amp.h"

#include <cmath>

#include "engine/half.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

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

void unscale(std::span<const Tensor> grads, float inv_scale, uint8_t* found) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    bool bad = false;
    switch (g.dtype()) {
      case DType::F32: bad = unscale_tensor<float>(g, inv_scale); break;
      case DType::F64: bad = unscale_tensor<double>(g, inv_scale); break;
      case DType::F16: bad = unscale_tensor<Half>(g, inv_scale); break;
      case DType::BF16: bad = unscale_tensor<BFloat16>(g, inv_scale); break;
      default: BRISK_FAIL("unscale: gradient ", i, " is ", g.str(), " (floating dtypes only)");
    }
    if (bad) found[i] = 1;
  }
}

}  // namespace

void register_amp() { unscale_fn(DeviceType::CPU) = unscale; }

}  // namespace brisk::kernels::cpu
