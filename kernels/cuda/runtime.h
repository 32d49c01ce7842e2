// kernels/cuda/runtime.h: internal helpers shared by the CUDA kernels and the backend: the
// checks that turn CUDA and cuBLAS failures into brisk::Error (BRISK_CUDA_CHECK,
// BRISK_CUBLAS_CHECK), the current cudaStream_t, per-device properties, the device error slot
// (Note [Device errors]) and a few tensor helpers the kernels share (dense copies on device).
// Host code only (compiles with g++ or nvcc); device-side helpers are in kernels/cuda/loops.cuh.
// Not public: users include kernels/cuda/cuda.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"

namespace brisk::kernels::cuda {

namespace detail {
[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void cublas_fail(int status, const char* call, const char* file, int line);
}  // namespace detail

// BRISK_CUDA_CHECK(cudaMalloc(&p, n)): throws brisk::Error naming the call, the error code and
// CUDA's message, and clears CUDA's (non-sticky) last error.
#define BRISK_CUDA_CHECK(call)                                                          \
  do {                                                                                  \
    cudaError_t brisk_err_ = (call);                                                    \
    if (__builtin_expect(brisk_err_ != cudaSuccess, 0)) {                               \
      ::brisk::kernels::cuda::detail::cuda_fail(brisk_err_, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a kernel launch: reports a bad launch configuration (or an earlier asynchronous error).
#define BRISK_CUDA_CHECK_LAUNCH() BRISK_CUDA_CHECK(cudaGetLastError())

// BRISK_CUBLAS_CHECK(cublasLtMatmul(...)): CUBLAS_STATUS_SUCCESS is 0 in cuBLAS and cuBLASLt.
#define BRISK_CUBLAS_CHECK(call)                                                             \
  do {                                                                                       \
    int brisk_status_ = static_cast<int>(call);                                              \
    if (__builtin_expect(brisk_status_ != 0, 0)) {                                           \
      ::brisk::kernels::cuda::detail::cublas_fail(brisk_status_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

// The calling thread's current stream on `device`.
cudaStream_t stream_handle(int device);
// Multiprocessors of `device` (cached).
int sm_count(int device);
// The caching allocator of `device`.
Allocator& device_allocator(int device);
// Throws brisk::Error naming `what` when the calling thread is capturing a CUDA graph on
// `device` (kernels/cuda/graph.cpp, Note [CUDA graphs]).
void check_not_capturing(int device, const char* what);

// Note [Device errors]
// A kernel that meets an out-of-range index (index_select, gather, scatter_add, index_add,
// cross_entropy targets) skips that element and records the first such error in a small
// per-device slot of mapped, pinned host memory. The host reads the slot whenever it waits
// for the device (synchronize, device-to-host copies, hence every item() and to_vector())
// and throws brisk::Error naming the op, the index and the bound. This costs no per-op
// synchronization (which would stall the pipeline) and avoids device-side asserts (which
// poison the CUDA context for the rest of the process). The error surfaces at the next
// synchronization point, not at the op that caused it.
struct DeviceErrorSlot {
  int flag;       // 0: no error; set to 1 by the first failing thread (atomicCAS)
  int op;         // OpId of the failing op
  int64_t index;  // the offending index
  int64_t bound;  // the size it must be below
};
// Device-side address of `device`'s slot (valid in kernels).
DeviceErrorSlot* device_error_slot(int device);
// Throws brisk::Error when a kernel on `device` recorded an error since the last check, and
// clears the slot. Call only after synchronizing with the device.
void check_device_errors(int device);

// ---- tensor helpers (kernels/cuda/elementwise.cu)
// Copies src into dst (same sizes, any strides and dtypes) on dst's device.
void copy_into(const Tensor& dst, const Tensor& src);
// `t` itself when dense, else a dense copy on the same device.
Tensor dense(const Tensor& t);
// Sets every element of `t` (any strides) to zero.
void zero_(const Tensor& t);

// An output a kernel writes densely: `out` itself when dense, else a scratch tensor that
// finish() copies back into it.
struct DenseOut {
  Tensor target, dense;
  explicit DenseOut(const Tensor& out)
      : target(out), dense(out.is_contiguous() ? out : make_empty(out.sizes(), out.dtype(), out.device())) {}
  void finish() {
    if (dense.impl() != target.impl()) copy_into(target, dense);
  }
};

}  // namespace brisk::kernels::cuda
