// kernels/cuda/gemm_i8.h: the CUDA int8 GEMM through cuBLASLt (kernels/cuda/gemm_i8.cu):
// c (M, N) int32 = a (M, K) s8 @ b^T with b (N, K) s8, all row-major on one device (b laid out
// as a Linear's weight). Compiled in CUDA builds only; the CPU int8 GEMM is
// kernels/cpu/gemm_i8.h. Not here: scales, zero points and the F32 epilogue (callers apply
// them), u8 activations (shift them to s8 first: q - 128, with zp - 128).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace brisk::kernels::cuda {

// K must be a multiple of 4 (cuBLASLt's int8 alignment); pointers 16-byte aligned.
void gemm_s8s8_i32(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, int device,
                   cudaStream_t stream);

}  // namespace brisk::kernels::cuda
