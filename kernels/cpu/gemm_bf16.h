// kernels/cpu/gemm_bf16.h: the CPU GEMM on bfloat16 operands, c (F32) = a @ b, with F32
// accumulation. Three paths chosen at run time (Note [BF16 GEMM] in kernels/cpu/gemm_bf16.cpp):
// AMX tiles, AVX512-BF16 dot products (vdpbf16ps), and a fallback that converts to F32 and
// runs the F32 GEMM of kernels/cpu/gemm.h; plus a plain scalar reference for the tests.
// Used by the matmul kernel (kernels/cpu/gemm.cpp) and the conv kernels (kernels/cpu/conv.cpp).
// Not here: rounding the result to BF16 (callers round once), F16, batching and broadcasting.
#pragma once

#include <type_traits>

#include "engine/half.h"
#include "kernels/cpu/gemm.h"

namespace brisk::kernels::cpu {

// c = a @ b, or c += a @ b when `accumulate`. a: (M, K), b: (K, N), c: (M, N), in F32.
// The operand contract is gemm()'s (kernels/cpu/gemm.h): a and b need a unit stride in one
// dim (transposed views are read in place while packing), c needs one too and must not
// overlap them. threads: 0 picks as gemm_threads() does; 1 runs on the calling thread.
void gemm_bf16(MatrixRef<const BFloat16> a, MatrixRef<const BFloat16> b, MatrixRef<float> c, bool accumulate = false,
               int threads = 0);

// c = a @ b with b in F32, read as its BF16 rounding (BFloat16::from_float) while it is packed:
// the product gemm_bf16 gives for b rounded to BF16 first, without the rounded copy (autocast's
// mixed linear reads F32 weights this way: Note [Mixed linear] in kernels/cpu/gemm.cpp).
void gemm_bf16(MatrixRef<const BFloat16> a, MatrixRef<const float> b, MatrixRef<float> c, bool accumulate = false,
               int threads = 0);

// The same product as plain loops: each c[i, j] summed in F32 in k order. For tests.
void gemm_bf16_reference(MatrixRef<const BFloat16> a, MatrixRef<const BFloat16> b, MatrixRef<float> c,
                         bool accumulate = false);

// Which kernel gemm_bf16 runs. Auto takes the best one the CPU (and OS, for AMX) allows; asking
// for one it lacks takes the best one below it (Amx > Avx512 > Fallback). The environment
// variable BRISK_BF16_GEMM=auto|amx|avx512|fallback sets the starting value.
enum class Bf16GemmPath { Auto, Amx, Avx512, Fallback };

// Sets the path for the whole process (thread-safe; not meant to change during a product).
void set_bf16_gemm_path(Bf16GemmPath path);

// The path gemm_bf16 takes now, resolved (never Auto).
Bf16GemmPath bf16_gemm_path();

// Whether gemm_bf16 runs a native BF16 kernel (not the F32 fallback): callers that could
// stay in F32 (conv's im2col) choose their working dtype by it.
inline bool bf16_gemm_native() { return bf16_gemm_path() != Bf16GemmPath::Fallback; }

// "amx", "avx512" or "fallback" (for benchmarks and messages).
const char* bf16_gemm_path_name(Bf16GemmPath path);

// The GEMM for operands of T into results of Acc, for kernels templated on both: gemm() for
// float and double (Acc = T), gemm_bf16() for bfloat16 (Acc = float).
template <class T, class Acc>
void gemm_into(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<Acc> c, bool accumulate = false, int threads = 0) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(a, b, c, accumulate, threads);
  } else {
    gemm<T>(a, b, c, accumulate, threads);
  }
}

}  // namespace brisk::kernels::cpu
