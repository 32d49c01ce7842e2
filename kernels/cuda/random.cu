// kernels/cuda/random.cu: CUDA kernels of arange, rand, randn and dropout, computing exactly
// what Note [Random streams] (engine/ops/random.cpp) specifies and the CPU kernels
// (kernels/cpu/random.cpp) compute: element i depends only on (seed, offset, i), through the
// same Philox functions (engine/random.h). arange, rand and dropout match the CPU bit for bit
// (integer Philox, exact float scaling, one explicit fma); randn goes through logf/cosf, whose
// CUDA versions may differ from glibc's by an ulp or two, so its values match to ~1e-6.
#include "engine/op.h"
#include "engine/random.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"

namespace brisk::kernels::cuda {

namespace {

void check_dense(const Tensor& t, const char* op) {
  BRISK_CHECK(t.is_contiguous(), op, ": the output must be contiguous, got strides ", t.strides());
}

// v * scale + shift rounded once: in double for F64, in float (then to T) otherwise.
template <class T>
__device__ __forceinline__ T affine(float v, double scale, double shift) {
  if constexpr (std::is_same_v<T, double>) {
    return fma(double(v), scale, shift);
  } else {
    return Store<T>::to(fmaf(v, float(scale), float(shift)));
  }
}

// out: (n) with out[i] = fma(i, step, start) converted to T
template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = Store<T>::to(compute_t<T>(fma(double(i), step, start)));
  }
}

// out: (n) uniform in [low, low + scale); one Philox call per counter serves four elements.
template <class T>
__global__ void rand_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double scale, double low) {
  const int64_t counters = (n + 3) / 4;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < counters; c += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox(seed, offset + uint64_t(c));
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * c + lane;
      if (i < n) out[i] = affine<T>(uniform_float(r.v[lane]), scale, low);
    }
  }
}

// out: (n) normal with mean `mean` and std `stddev`
template <class T>
__global__ void randn_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double stddev, double mean) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = affine<T>(philox_normal(seed, offset, uint64_t(i)), stddev, mean);
  }
}

// keep: (n) Bool, keep[i] = u_i >= p
__global__ void dropout_mask_kernel(bool* keep, int64_t n, uint64_t seed, uint64_t offset, double p) {
  const int64_t counters = (n + 3) / 4;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < counters; c += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox(seed, offset + uint64_t(c));
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * c + lane;
      if (i < n) keep[i] = double(uniform_float(r.v[lane])) >= p;
    }
  }
}

struct DropoutApply {
  double scale;  // 1 / (1 - p), rounded to the compute type as on the CPU
  template <class C>
  __device__ C operator()(C v, bool kept) const {
    return kept ? v * C(scale) : C(0);
  }
};

void arange_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  check_dense(y, "arange");
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device().index);
  dispatch_numeric(y.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      arange_kernel<T><<<grid_for(n), kBlock, 0, stream_handle(y.device().index)>>>(static_cast<T*>(y.data_ptr()), n,
                                                                                    attrs.a, attrs.b);
      BRISK_CUDA_CHECK_LAUNCH();
    }
  });
}

void rand_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  check_dense(y, "rand");
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device().index);
  dispatch_float(y.dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    rand_kernel<T><<<grid_for((n + 3) / 4), kBlock, 0, stream_handle(y.device().index)>>>(
        static_cast<T*>(y.data_ptr()), n, attrs.seed, attrs.offset, attrs.b - attrs.a, attrs.a);
    BRISK_CUDA_CHECK_LAUNCH();
  });
}

void randn_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  check_dense(y, "randn");
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device().index);
  dispatch_float(y.dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    randn_kernel<T><<<grid_for(n), kBlock, 0, stream_handle(y.device().index)>>>(
        static_cast<T*>(y.data_ptr()), n, attrs.seed, attrs.offset, attrs.b, attrs.a);
    BRISK_CUDA_CHECK_LAUNCH();
  });
}

// x: any shape -> y: x's shape, keep: Bool of x's shape
void dropout_op(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& keep = out[1];
  check_dense(keep, "dropout");
  const int64_t n = keep.numel();
  if (n == 0) return;
  DeviceGuard guard(keep.device().index);
  dropout_mask_kernel<<<grid_for((n + 3) / 4), kBlock, 0, stream_handle(keep.device().index)>>>(
      static_cast<bool*>(keep.data_ptr()), n, attrs.seed, attrs.offset, attrs.a);
  BRISK_CUDA_CHECK_LAUNCH();
  dispatch_float(out[0].dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    launch_elementwise<T, T, bool>(out[0], {&in[0], &keep}, DropoutApply{double(C(1.0 / (1.0 - attrs.a)))});
  });
}

}  // namespace

void register_random() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Arange, gpu, arange_op);
  register_kernel(OpId::Rand, gpu, rand_op);
  register_kernel(OpId::Randn, gpu, randn_op);
  register_kernel(OpId::Dropout, gpu, dropout_op);
}

}  // namespace brisk::kernels::cuda
