// kernels/cuda/amp.cu: the CUDA fused unscale (kernels/amp.h, Note [Fused unscale]): one launch
// per dtype over all of its gradients. A table of (address, element count) per tensor travels
// in device memory; block row y takes tensor y (grid-stride over its elements along x), and a
// per-tensor flag is raised by any thread that meets a non-finite value. The flags come back
// with one device-to-host copy, which synchronizes the stream.
// Not here: the scaler (optim/grad_scaler.cpp), the CPU pass (kernels/cpu/amp.cpp).
#include <cstdint>
#include <vector>

#include "engine/functions.h"
#include "engine/half.h"
#include "kernels/amp.h"
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

// table: 2 int64 per tensor (address, numel); found: one int32 flag per tensor.
template <class T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const int64_t* table, int32_t* found, float inv_scale, bool scale) {
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
  if (bad) found[t] = 1;  // every writer stores the same value
}

template <class T>
void launch(std::span<const Tensor> grads, float inv_scale, uint8_t* found) {
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
    const Tensor table = from_data(host.data(), {int64_t(2 * count)}, device);
    const Tensor flags = zeros({int64_t(count)}, DType::I32, device);
    const int64_t blocks = std::min<int64_t>((largest + kThreads - 1) / kThreads, kMaxBlocksPerTensor);
    const dim3 grid{unsigned(blocks), unsigned(count)};
    unscale_kernel<T>
        <<<grid, kThreads, 0, stream>>>(table.data<int64_t>(), flags.data<int32_t>(), inv_scale, inv_scale != 1.0f);
    BRISK_CUDA_CHECK_LAUNCH();
    const std::vector<int32_t> back = flags.to_vector<int32_t>();  // waits for the stream
    for (size_t i = 0; i < count; ++i) {
      if (back[i]) found[first + i] = 1;
    }
  }
}

void unscale(std::span<const Tensor> grads, float inv_scale, uint8_t* found) {
  if (grads.empty()) return;
  switch (grads[0].dtype()) {
    case DType::F32: return launch<float>(grads, inv_scale, found);
    case DType::F64: return launch<double>(grads, inv_scale, found);
    case DType::F16: return launch<Half>(grads, inv_scale, found);
    case DType::BF16: return launch<BFloat16>(grads, inv_scale, found);
    default: BRISK_FAIL("unscale: no CUDA kernel for gradients of dtype ", grads[0].dtype());
  }
}

}  // namespace

void register_amp() { unscale_fn(DeviceType::CUDA) = unscale; }

}  // namespace brisk::kernels::cuda
