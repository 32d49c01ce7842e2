// kernels/cuda/amp.cu: the CUDA kernel of amp_unscale, the gradient scaler's fused unscale
// (Note [Fused unscale] in kernels/cpu/amp.cpp): one launch over all of the call's gradients
// (one dtype). A table of (address, element count) per tensor travels in device memory; block
// row y takes tensor y (grid-stride over its elements along x), and the op's per-tensor flag
// (Bool, on the device) is raised by any thread that meets a non-finite value.
// Not here: the op's checks (engine/ops/optim.cpp), the scaler (optim/grad_scaler.cpp), the CPU
// pass (kernels/cpu/amp.cpp).
#include <cstdint>
#include <vector>

#include "engine/functions.h"
#include "engine/half.h"
#include "engine/op.h"
#include "kernels/cuda/register.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerTensor = 256;
constexpr int kMaxTensorsPerLaunch = 65535;  // grid.y limit

template <class T>
struct MathOf {
  using type = float;
};
template <>
struct MathOf<double> {
  using type = double;
};

// table: 2 int64 per tensor (address, numel); found: one flag per tensor.
template <class T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const int64_t* table, bool* found, float inv_scale, bool scale) {
  using M = typename MathOf<T>::type;
  const int t = blockIdx.y;
  T* p = reinterpret_cast<T*>(table[2 * t]);
  const int64_t n = table[2 * t + 1];
  const M inv = M(inv_scale);
  bool bad = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const M v = M(p[i]);
    bad |= !::isfinite(v);  // the device function, not brisk::isfinite(Tensor)
    if (scale) p[i] = T(v * inv);
  }
  if (bad) found[t] = true;  // every writer stores the same value
}

template <class T>
void launch(std::span<const Tensor> grads, float inv_scale, bool* found) {
  const Device device = grads[0].device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = stream_handle(device.index);
  for (size_t first = 0; first < grads.size(); first += kMaxTensorsPerLaunch) {
    const size_t count = std::min(grads.size() - first, size_t(kMaxTensorsPerLaunch));
    std::vector<int64_t> host(2 * count);
    int64_t largest = 0;
    for (size_t i = 0; i < count; ++i) {
      host[2 * i] = int64_t(reinterpret_cast<uintptr_t>(grads[first + i].data_ptr()));
      host[2 * i + 1] = grads[first + i].numel();
      largest = std::max(largest, host[2 * i + 1]);
    }
    if (largest == 0) continue;
    // The table is freed to the stream-ordered cache after the launch: work queued later on
    // this stream, which alone may reuse it, runs after the kernel.
    const Tensor table = from_data(host.data(), {int64_t(2 * count)}, device);
    const int64_t blocks = std::min<int64_t>((largest + kThreads - 1) / kThreads, kMaxBlocksPerTensor);
    const dim3 grid{unsigned(blocks), unsigned(count)};
    unscale_kernel<T>
        <<<grid, kThreads, 0, stream>>>(table.data<int64_t>(), found + first, inv_scale, inv_scale != 1.0f);
    BRISK_CUDA_CHECK_LAUNCH();
  }
}

void unscale(std::span<const Tensor> grads, std::span<Tensor> out, const Attrs& attrs) {
  if (grads.empty()) return;
  const float inv_scale = float(attrs.a);
  bool* found = out[0].data<bool>();
  {
    DeviceGuard guard(grads[0].device().index);
    BRISK_CUDA_CHECK(cudaMemsetAsync(found, 0, grads.size(), stream_handle(grads[0].device().index)));
  }
  switch (grads[0].dtype()) {
    case DType::F32: return launch<float>(grads, inv_scale, found);
    case DType::F64: return launch<double>(grads, inv_scale, found);
    case DType::F16: return launch<Half>(grads, inv_scale, found);
    case DType::BF16: return launch<BFloat16>(grads, inv_scale, found);
    default: BRISK_FAIL("amp_unscale: no CUDA kernel for gradients of dtype ", grads[0].dtype());
  }
}

}  // namespace

void register_amp() { register_kernel(OpId::AmpUnscale, DeviceType::CUDA, unscale); }

}  // namespace brisk::kernels::cuda
