// engine/random.h: Philox-4x32-10, the counter-based generator behind rand, randn and dropout.
// A stream is (seed, offset): element i of an op draws from counter (offset + i / 4), lane
// i % 4, so the CPU and CUDA kernels produce the same numbers for the same seed, whatever the
// threading. Generator hands out offsets; its state saves and restores (checkpoints).
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/macros.h"

namespace brisk {

struct Philox4 {
  uint32_t v[4];
};

// Philox-4x32-10 (Salmon et al., SC'11): counter (c0..c3) under key (k0, k1).
BRISK_INLINE Philox4 philox(uint64_t seed, uint64_t counter, uint64_t subsequence = 0) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32);
  uint32_t c2 = uint32_t(subsequence), c3 = uint32_t(subsequence >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__clang__)
#pragma GCC unroll 10  // unrolled, a loop over counters vectorizes (kernels/cpu/random.cpp)
#endif
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from 24 random bits; uniform double from 53 bits of two words.
BRISK_INLINE float uniform_float(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }

// The i-th uniform of stream (seed, offset) in [0, 1).
BRISK_INLINE float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  Philox4 r = philox(seed, offset + i / 4);
  return uniform_float(r.v[i % 4]);
}

// Note [Box-Muller everywhere alike]
// Box-Muller needs a logarithm and a cosine. The C library's logf / cosf differ between glibc,
// CUDA and glibc's vector library by an ulp or two, so brisk computes both with its own
// branch-free float code below: IEEE adds, multiplies, one division and explicit fmaf, whose
// results are the same on every device, scalar or vectorized. The CPU kernel runs it 16 lanes
// at a time and the CUDA kernel per thread, and both give philox_normal's bits.
// Accuracy against the double-precision functions, over every input the generator can give
// (u = k / 2^24): box_muller_log within 1.7 ulp, box_muller_cos2pi within 7.6e-8 absolute
// (tests/test_random.cpp).

// The float's bits and back (memcpy: defined behaviour, and a register move once compiled).
BRISK_INLINE uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  __builtin_memcpy(&b, &x, sizeof b);
  return b;
#endif
}
BRISK_INLINE float bits_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  __builtin_memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// log(x) for x in [2^-24, 1] (Box-Muller's u1): x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, as an odd series to s^9.
BRISK_INLINE float box_muller_log(float x) {
  const uint32_t bits = float_bits(x);
  // Shift the split point to sqrt(1/2): mantissas at or above it keep exponent e, below it
  // borrow one (m doubles).
  const uint32_t shifted = bits - 0x3F3504F3u;  // bits of sqrt(1/2)
  const int32_t e = int32_t(shifted) >> 23;
  const float m = bits_float(bits - (uint32_t(e) << 23));  // in [sqrt(1/2), sqrt(2))
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = fmaf(s2, 0.11111111f, 0.14285715f);  // 1/9, 1/7
  p = fmaf(s2, p, 0.2f);
  p = fmaf(s2, p, 0.33333334f);
  const float log_m = fmaf(2.0f * s * s2, p, 2.0f * s);
  return fmaf(float(e), 0.69314718f, log_m);
}

// cos(2 pi u) for u in [0, 1): t = u folded to [0, 1/2] by symmetry, then to [0, 1/4] with a
// sign, then cos on [0, 1/8] and sin of the complement on (1/8, 1/4], both Taylor
// polynomials on arguments below pi/4. Every fold is exact for u = k / 2^24.
BRISK_INLINE float box_muller_cos2pi(float u) {
  const float t = u > 0.5f ? 1.0f - u : u;   // cos(2 pi u) = cos(2 pi (1 - u))
  const float a = t > 0.25f ? 0.5f - t : t;  // cos(2 pi t) = -cos(2 pi (1/2 - t))
  const float sign = t > 0.25f ? -1.0f : 1.0f;
  const bool near = a <= 0.125f;
  const float x = 6.28318531f * (near ? a : 0.25f - a);  // in [0, pi / 4]
  const float x2 = x * x;
  // cos x = 1 - x^2/2 + x^4/24 - x^6/720 + x^8/40320
  float c = fmaf(x2, 2.4801587e-5f, -1.3888889e-3f);
  c = fmaf(x2, c, 4.1666668e-2f);
  c = fmaf(x2, c, -0.5f);
  c = fmaf(x2, c, 1.0f);
  // sin x = x - x^3/6 + x^5/120 - x^7/5040 + x^9/362880
  float s = fmaf(x2, 2.7557319e-6f, -1.9841270e-4f);
  s = fmaf(x2, s, 8.3333333e-3f);
  s = fmaf(x2, s, -0.16666667f);
  s = fmaf(x * x2, s, x);
  return sign * (near ? c : s);
}

// The standard normal from two uniform lanes a, b: u1 = (a >> 8 + 1) / 2^24 in (0, 1],
// u2 = (b >> 8) / 2^24 in [0, 1).
BRISK_INLINE float box_muller(uint32_t a, uint32_t b) {
  const float u1 = (float(a >> 8) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = uniform_float(b);
  return sqrtf(-2.0f * box_muller_log(u1)) * box_muller_cos2pi(u2);
}

// The i-th standard normal of stream (seed, offset): Box-Muller on lanes (2j, 2j+1) of
// counter offset + i / 2, so each counter yields two normals.
BRISK_INLINE float philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  Philox4 r = philox(seed, offset + i / 2);
  return box_muller(r.v[(i % 2) * 2], r.v[(i % 2) * 2 + 1]);
}

// Hands out (seed, offset) streams. One default generator per process; not thread-safe by
// design (data-loader workers derive per-sample seeds instead, see data/).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eedULL) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves counters for `n` draws (4 per counter, rounded up) and returns the first.
  uint64_t reserve(uint64_t n) {
    uint64_t start = offset_;
    offset_ += (n + 3) / 4 + 1;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace brisk
