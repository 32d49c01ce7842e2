// kernels/cpu/gemm_f32.h: brisk's own F32 GEMM: an AVX-512 register-blocked micro kernel with
// cache-blocked packing (the BLIS/Goto structure) and a 2-D thread split that shares the
// packed panels, chosen at run time by CPU features; Eigen's packed GEMM (kernels/cpu/gemm.cpp)
// is the fallback and can be forced (BRISK_GEMM=eigen, set_f32_gemm_path). Note [F32 GEMM]
// in kernels/cpu/gemm_f32.cpp. gemm<float>() (kernels/cpu/gemm.h) is the entry point callers use.
// Not here: F64 (Eigen, kernels/cpu/gemm.cpp), BF16 and int8 (gemm_bf16.h, gemm_i8.h),
// batching and broadcasting (the matmul kernel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace brisk::kernels::cpu {

// Which kernel gemm<float> runs. Auto takes the best one the CPU has (Avx512 > Eigen); asking
// for one it lacks takes Eigen. The environment variable BRISK_GEMM=auto|avx512|eigen sets the
// starting value.
enum class F32GemmPath { Auto, Avx512, Eigen };

// Sets the path for the whole process (thread-safe; not meant to change during a product).
void set_f32_gemm_path(F32GemmPath path);

// The path gemm<float> takes now, resolved (never Auto).
F32GemmPath f32_gemm_path();

// "avx512" or "eigen" (for benchmarks and messages).
const char* f32_gemm_path_name(F32GemmPath path);

// c (m, n), row-major with row stride ldc, = a @ b, or += when `accumulate`, with the AVX-512
// kernel (the caller has checked the CPU has it). a (m, k): element (i, p) at a[i * a_rs +
// p * a_cs]; b (k, n): (p, j) at b[p * b_rs + j * b_cs]; any strides (a unit one in either
// dim is packed with vector loads, others element by element). c must not overlap a or b.
// threads: the team size (1: the calling thread; callers pick it with gemm_threads()).
void gemm_f32_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, int threads);

// A right-hand operand b (k, n) packed once for many products a @ b with the AVX-512 kernel:
// a weight used at every step of a sequence (the recurrent W_hh of kernels/cpu/recurrent.cpp),
// which gemm_f32_avx512 would pack again at every call (Note [Packed B]). Holds its own
// buffer; b may be freed after construction. Only on a CPU with AVX-512 (f32_gemm_path()).
class PackedB {
 public:
  // b (k, n): element (p, j) at b[p * b_rs + j * b_cs], any strides.
  PackedB(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs);
  ~PackedB();
  PackedB(const PackedB&) = delete;
  PackedB& operator=(const PackedB&) = delete;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  // c (m, n), row stride ldc, (+)= a (m, k) @ b, a with any strides; threads: 0 picks (as
  // gemm_threads), 1 the calling thread. c must not overlap a.
  void multiply(int64_t m, const float* a, int64_t a_rs, int64_t a_cs, float* c, int64_t ldc, bool accumulate,
                int threads = 0) const;

 private:
  int64_t k_ = 0, n_ = 0, kc_ = 0, n_pad_ = 0;
  float* data_ = nullptr;  // every KC slice of b, each as the driver's packed panels
  size_t bytes_ = 0;
};

}  // namespace brisk::kernels::cpu
