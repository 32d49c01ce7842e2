// kernels/cpu/lanes.h: the AVX-512 lane mask the CPU micro kernels use for a row's last, partial
// vector (internal to kernels/cpu). Plain integer code: callable without AVX-512 target
// attributes. Not here: the kernels themselves (gemm_f32.cpp, gemm_bf16.cpp, conv_direct.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace brisk::kernels::cpu {

// The first n of a zmm register's 16 float lanes (n clamped to [0, 16]).
inline __mmask16 first_lanes(int64_t n) {
  if (n <= 0) return 0;
  if (n >= 16) return 0xffff;
  return __mmask16((1u << n) - 1);
}

}  // namespace brisk::kernels::cpu
