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

// The i-th standard normal of stream (seed, offset): Box-Muller on lanes (2j, 2j+1) of
// counter offset + i / 2, so each counter yields two normals.
BRISK_INLINE float philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  Philox4 r = philox(seed, offset + i / 2);
  uint32_t a = r.v[(i % 2) * 2], b = r.v[(i % 2) * 2 + 1];
  float u1 = (float(a >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  float u2 = uniform_float(b);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
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
