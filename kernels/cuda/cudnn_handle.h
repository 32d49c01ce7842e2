// kernels/cuda/cudnn_handle.h: what the cuDNN kernels (kernels/cuda/conv.cu, norm.cu) share:
// the table of the cuDNN functions brisk calls (CudnnApi, opened on first use by cudnn() in
// kernels/cuda/dynload.cpp: see Note [Lazy CUDA libraries]), BRISK_CUDNN_CHECK (a failed cuDNN
// call becomes brisk::Error naming the call and cuDNN's message), the handle per thread and
// device bound to brisk's current stream, and the cuDNN data type of a brisk dtype. Only for
// builds with cuDNN (BRISK_WITH_CUDNN); only brisk's own sources see cudnn.h.
// Not here: algorithm choice and descriptors (conv.cu), the cuBLAS handles (matmul.cu).
#pragma once

#include <cudnn.h>

// The retry rules of conv.cu follow cuDNN 9's status numbering (and its
// CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED); older headers would not compile there.
static_assert(CUDNN_MAJOR >= 9, "brisk's CUDA kernels need cuDNN 9 or newer (set CUDNN_ROOT)");

#include "engine/dtype.h"
#include "engine/error.h"
#include "kernels/cuda/dynload.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

// The cuDNN functions brisk calls, one X(name) each (see Note [Lazy CUDA libraries]). All of
// them are exported by libcudnn.so.9 itself, which loads its sub-libraries (ops, cnn, graph,
// engines) as it needs them.
#define BRISK_CUDNN_FUNCTIONS(X)                    \
  X(cudnnGetErrorString)                            \
  X(cudnnGetVersion)                                \
  X(cudnnCreate)                                    \
  X(cudnnSetStream)                                 \
  X(cudnnCreateTensorDescriptor)                    \
  X(cudnnDestroyTensorDescriptor)                   \
  X(cudnnSetTensor4dDescriptor)                     \
  X(cudnnCreateFilterDescriptor)                    \
  X(cudnnDestroyFilterDescriptor)                   \
  X(cudnnSetFilter4dDescriptor)                     \
  X(cudnnCreateConvolutionDescriptor)               \
  X(cudnnDestroyConvolutionDescriptor)              \
  X(cudnnSetConvolution2dDescriptor)                \
  X(cudnnSetConvolutionGroupCount)                  \
  X(cudnnSetConvolutionMathType)                    \
  X(cudnnGetConvolutionForwardAlgorithm_v7)         \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)    \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)  \
  X(cudnnGetConvolutionForwardWorkspaceSize)        \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)   \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
  X(cudnnConvolutionForward)                        \
  X(cudnnConvolutionBackwardData)                   \
  X(cudnnConvolutionBackwardFilter)                 \
  X(cudnnDeriveBNTensorDescriptor)                  \
  X(cudnnBatchNormalizationForwardTraining)         \
  X(cudnnBatchNormalizationForwardInference)

struct CudnnApi {
  BRISK_CUDNN_FUNCTIONS(BRISK_DYNLOAD_MEMBER)
};

namespace detail {
[[noreturn]] inline void cudnn_fail(cudnnStatus_t status, const char* call, const char* file, int line) {
  BRISK_FAIL("cuDNN error: ", call, " failed with ", cudnn().cudnnGetErrorString(status), " (", int(status), ") [",
             file, ":", line, "]");
}
}  // namespace detail

#define BRISK_CUDNN_CHECK(call)                                                                   \
  do {                                                                                            \
    cudnnStatus_t brisk_cudnn_status_ = (call);                                                   \
    if (__builtin_expect(brisk_cudnn_status_ != CUDNN_STATUS_SUCCESS, 0)) {                       \
      ::brisk::kernels::cuda::detail::cudnn_fail(brisk_cudnn_status_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

// The calling thread's cuDNN handle on `device` (the caller holds a DeviceGuard for it), set
// to the thread's current stream. One handle per thread and device, as for cuBLAS (a handle
// must not be used by two threads at once); leaked at thread exit on purpose, as in matmul.cu
// (destroying it after the driver shut down would crash).
inline cudnnHandle_t cudnn_handle(int device, const char* op) {
  constexpr int kMaxHandleDevices = 64;
  thread_local cudnnHandle_t handles[kMaxHandleDevices] = {};
  BRISK_CHECK(device >= 0 && device < kMaxHandleDevices, op, ": device index ", device, " is too large");
  cudnnHandle_t& h = handles[device];
  if (!h) BRISK_CUDNN_CHECK(cudnn().cudnnCreate(&h));
  BRISK_CUDNN_CHECK(cudnn().cudnnSetStream(h, stream_handle(device)));
  return h;
}

inline cudnnDataType_t cudnn_type(DType t, const char* op) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: BRISK_FAIL(op, ": no cuDNN type for dtype ", t, " (floating dtypes only)");
  }
}

}  // namespace brisk::kernels::cuda
