// kernels/cpu/gemm.h: brisk's CPU GEMM, c = a @ b on strided float/double matrices. F32 runs
// brisk's own AVX-512 kernel where the CPU has it (kernels/cpu/gemm_f32.h, Note [F32 GEMM]),
// else, and for F64 and vector products, Eigen's packed GEMM kernel with its workspace cached
// per thread from cpu_allocator() and brisk's own OpenMP split (Note [CPU GEMM] in gemm.cpp).
// Used by the matmul kernel and by any kernel that lowers to a matrix product (conv as
// im2col + GEMM).
// Not here: 16-bit floats and integers (the matmul kernel converts or loops), batching and
// broadcasting (the matmul kernel), autograd (engine/ops/linalg.cpp). No Eigen in this header.
#pragma once

#include <cstdint>

namespace brisk::kernels::cpu {

// A (rows, cols) matrix: element (i, j) lives at data[i * row_stride + j * col_stride].
template <class T>
struct MatrixRef {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// c = a @ b, or c += a @ b when `accumulate`. a: (M, K), b: (K, N), c: (M, N).
// a and b may have any strides: a unit stride in one dim (a transposed view) is read in place
// while packing, anything else is packed element by element (F32 kernel) or copied densely
// first (Eigen). c needs a unit stride in one dim and must not overlap a or b. threads: 0 picks
// (all OpenMP threads for a large product, one for a small one or inside a parallel region);
// 1 runs on the calling thread.
template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, bool accumulate = false, int threads = 0);

extern template void gemm<float>(MatrixRef<const float>, MatrixRef<const float>, MatrixRef<float>, bool, int);
extern template void gemm<double>(MatrixRef<const double>, MatrixRef<const double>, MatrixRef<double>, bool, int);

// Threads gemm() would use for an (M, N, K) product when left to pick (brisk's F32 kernel
// keeps products below 2 * 128^3 multiply-adds on one thread; see Note [F32 GEMM]).
int gemm_threads(int64_t m, int64_t n, int64_t k);

}  // namespace brisk::kernels::cpu
