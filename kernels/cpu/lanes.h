// kernels/cpu/lanes.h: the AVX-512 lane mask the CPU micro kernels use for a row's last, partial
// vector (plain integer code: callable without AVX-512 target attributes), and the 16x16
// register transpose their packers share (internal to kernels/cpu). Not here: the kernels themselves (gemm_f32.cpp,
// gemm_bf16.cpp, conv_direct.cpp).
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

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized and -Wuninitialized report once inlined (false positives, as in
// kernels/cpu/gemm_f32.cpp); the warnings point here, so they are silenced here.
#pragma GCC diagnostic push
#ifndef __clang__  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// r[t][q] -> r[q][t] for a 16x16 block of floats, in registers (4 shuffle stages).
__attribute__((target("avx512f"))) inline void transpose_16x16(__m512 r[16]) {
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    const __m512 t0 = _mm512_unpacklo_ps(r[4 * g], r[4 * g + 1]);
    const __m512 t1 = _mm512_unpackhi_ps(r[4 * g], r[4 * g + 1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
    const __m512 t3 = _mm512_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
    // u[4g + c], 128-bit lane l: column 4l + c of rows 4g .. 4g + 3
    u[4 * g] = _mm512_shuffle_ps(t0, t2, 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t0, t2, 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t1, t3, 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
  }
}

#pragma GCC diagnostic pop

}  // namespace brisk::kernels::cpu
