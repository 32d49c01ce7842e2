// kernels/cpu/random.cpp: CPU kernels of arange, rand, randn, dropout, bernoulli and
// multinomial. Element i depends
// only on (seed, offset, i) (see Note [Random streams] in engine/ops/random.cpp), so the
// OpenMP split never changes a value and the CUDA kernels reproduce them.
// Outputs are the fresh dense tensors dispatch allocates.
// Not here: the generator and Philox itself (engine/random.h).
#include "engine/random.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

template <class F>
void parallel_for(int64_t n, F f) {
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// ---- Philox over a block of counters. The AVX-512 path runs 16 counters per vector: a
// 32 x 32 -> 64-bit product per lane is two vpmuludq (even and odd lanes) and blends, where
// the compiler's own vectorization of the scalar code picks the slower vpmullq. Integer
// arithmetic: the same bits as philox() in engine/random.h (tests/test_random.cpp).
constexpr int kBlock = 64;  // counters per block (a multiple of 16)

struct HiLo {
  __m512i hi, lo;
};

// GCC 12 warns that the undefined vector some AVX-512 intrinsics start from "may be used
// uninitialized" once inlined (GCC bug 105593); the warning is about the headers, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The high and low 32 bits of a[i] * b[i] per lane.
__attribute__((target("avx512f"))) inline HiLo mul_hi_lo(__m512i a, __m512i b) {
  const __m512i even = _mm512_mul_epu32(a, b);                        // lanes 0, 2, ... as u64
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b);  // lanes 1, 3, ... as u64
  return {_mm512_mask_blend_epi32(__mmask16(0xAAAA), _mm512_srli_epi64(even, 32), odd),
          _mm512_mask_blend_epi32(__mmask16(0xAAAA), even, _mm512_slli_epi64(odd, 32))};
}

__attribute__((target("avx512f"))) void philox_block_avx512(uint64_t seed, uint64_t counter, int m,
                                                            uint32_t (*r)[kBlock]) {
  const __m512i mul0 = _mm512_set1_epi32(int(0xD2511F53u)), mul1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  for (int j = 0; j < m; j += 16) {
    // Counters counter + j .. + 15 as (low, high) 32-bit halves.
    alignas(64) uint32_t lo_c[16], hi_c[16];
    for (int l = 0; l < 16; ++l) {
      const uint64_t c = counter + uint64_t(j + l);
      lo_c[l] = uint32_t(c);
      hi_c[l] = uint32_t(c >> 32);
    }
    __m512i c0 = _mm512_load_si512(lo_c), c1 = _mm512_load_si512(hi_c);
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const HiLo p0 = mul_hi_lo(c0, mul0), p1 = mul_hi_lo(c2, mul1);
      const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(p1.hi, c1), _mm512_set1_epi32(int(k0)));
      const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(p0.hi, c3), _mm512_set1_epi32(int(k1)));
      c1 = p1.lo;
      c3 = p0.lo;
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm512_store_si512(r[0] + j, c0);
    _mm512_store_si512(r[1] + j, c1);
    _mm512_store_si512(r[2] + j, c2);
    _mm512_store_si512(r[3] + j, c3);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// r[l][j] = lane l of philox(seed, counter + j) for j < m.
void philox_block(uint64_t seed, uint64_t counter, int m, uint32_t (*r)[kBlock]) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return philox_block_avx512(seed, counter, m, r);  // computes whole vectors past m: harmless
  for (int j = 0; j < m; ++j) {
    const Philox4 p = philox(seed, counter + uint64_t(j));
    for (int l = 0; l < 4; ++l) r[l][j] = p.v[l];
  }
}

}  // namespace

void philox_uniforms(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u) {
  // Whole counters cover [first rounded down to 4, first + n); the partial ones at the ends are
  // computed in full and trimmed.
  alignas(64) uint32_t r[4][kBlock];
  uint64_t e = first;
  int64_t done = 0;
  while (done < n) {
    const uint64_t counter = e / 4;
    const int64_t left = n - done + int64_t(e % 4);
    const int m = int(std::min<int64_t>(kBlock, (left + 3) / 4));
    philox_block(seed, offset + counter, m, r);
    for (int64_t k = int64_t(e % 4); k < 4 * int64_t(m) && done < n; ++k, ++done, ++e)
      u[done] = uniform_float(r[k % 4][k / 4]);
  }
}

namespace {

// Runs over the Philox counters of n values, L values per counter, in blocks of kBlock
// counters split over the threads: lanes(r, z, j) turns the counter's words r[0..4)[j] into its
// L values z[0..L)[j] (a loop the compiler vectorizes: Box-Muller is branch-free float code),
// then put(i, v) takes value i. The values are those of the scalar definitions in
// engine/random.h, bit for bit (tests/test_random.cpp).
template <int L, class Lanes, class Put>
void by_counters(int64_t n, uint64_t seed, uint64_t offset, Lanes lanes, Put put) {
  const int64_t counters = (n + L - 1) / L;
  const int64_t blocks = (counters + kBlock - 1) / kBlock;
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    alignas(64) uint32_t r[4][kBlock];
    alignas(64) float z[L][kBlock];
    const int64_t c0 = block * kBlock;
    const int m = int(std::min<int64_t>(kBlock, counters - c0));
    philox_block(seed, offset + uint64_t(c0), m, r);
#pragma omp simd
    for (int j = 0; j < m; ++j) lanes(r, z, j);
    const int64_t first = L * c0;
    const int64_t count = std::min<int64_t>(int64_t(L) * m, n - first);
    if (count == int64_t(L) * m) {  // whole counters: lanes interleave (vectorized with shuffles)
#pragma omp simd
      for (int j = 0; j < m; ++j) {
#pragma GCC unroll 4
        for (int l = 0; l < L; ++l) put(first + int64_t(L) * j + l, z[l][j]);
      }
    } else {
      for (int64_t k = 0; k < count; ++k) put(first + k, z[k % L][k / L]);
    }
  }
}

// Calls f(i, u) for i in [0, n) with u = philox_uniform(seed, offset, i).
template <class F>
void for_each_uniform(int64_t n, uint64_t seed, uint64_t offset, F f) {
  by_counters<4>(
      n, seed, offset,
      [](const uint32_t(*r)[kBlock], float(*z)[kBlock], int j) {
        z[0][j] = uniform_float(r[0][j]);
        z[1][j] = uniform_float(r[1][j]);
        z[2][j] = uniform_float(r[2][j]);
        z[3][j] = uniform_float(r[3][j]);
      },
      f);
}

// Calls f(i, z) for i in [0, n) with z = philox_normal(seed, offset, i).
template <class F>
void for_each_normal(int64_t n, uint64_t seed, uint64_t offset, F f) {
  by_counters<2>(
      n, seed, offset,
      [](const uint32_t(*r)[kBlock], float(*z)[kBlock], int j) {
        z[0][j] = box_muller(r[0][j], r[1][j]);
        z[1][j] = box_muller(r[2][j], r[3][j]);
      },
      f);
}

// v * scale + shift rounded once: in double for F64, in float (then to T) otherwise.
template <class T>
T affine(float v, double scale, double shift) {
  if constexpr (std::is_same_v<T, double>) {
    return std::fma(double(v), scale, shift);
  } else {
    return T(std::fmaf(v, float(scale), float(shift)));
  }
}

void check_dense(const Tensor& t, const char* op) {
  BRISK_CHECK(t.is_contiguous(), op, ": the output must be contiguous, got strides ", t.strides());
}

// out: (n) with out[i] = start + i * step
void arange_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "arange");
  const double start = attrs.a;
  const double step = attrs.b;
  dispatch_numeric(out[0].dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    parallel_for(out[0].numel(), [=](int64_t i) { p[i] = T(compute_t<T>(std::fma(double(i), step, start))); });
  });
}

// out: any shape, uniform in [a, b)
void rand_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "rand");
  const double low = attrs.a;
  const double scale = attrs.b - attrs.a;
  dispatch_float(out[0].dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    for_each_uniform(out[0].numel(), attrs.seed, attrs.offset,
                     [=](int64_t i, float u) { p[i] = affine<T>(u, scale, low); });
  });
}

// out: any shape, normal with mean a and std b
void randn_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "randn");
  const double mean = attrs.a;
  const double stddev = attrs.b;
  const uint64_t seed = attrs.seed;
  const uint64_t offset = attrs.offset;
  dispatch_float(out[0].dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    for_each_normal(out[0].numel(), seed, offset, [=](int64_t i, float z) { p[i] = affine<T>(z, stddev, mean); });
  });
}

// x: any shape -> y: x's shape, keep: Bool of x's shape
void dropout_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  const Tensor& keep = out[1];
  check_dense(keep, "dropout");
  const double p = attrs.a;
  bool* k = static_cast<bool*>(keep.data_ptr());
  for_each_uniform(keep.numel(), attrs.seed, attrs.offset, [=](int64_t i, float u) { k[i] = double(u) >= p; });
  dispatch_float(y.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C scale = C(1.0 / (1.0 - p));
    elementwise<T, T, bool>(y, {&x, &keep}, [scale](C v, bool kept) { return kept ? v * scale : C(0); });
  });
}

// p: any shape (dense) -> out: p's shape and dtype, 1 where u_i < p_i
void bernoulli_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& p = in[0];
  check_dense(p, "bernoulli");
  check_dense(out[0], "bernoulli");
  dispatch_float(p.dtype(), "bernoulli", [&](auto tag) {
    using T = decltype(tag);
    const T* pp = static_cast<const T*>(p.data_ptr());
    T* o = static_cast<T*>(out[0].data_ptr());
    const int64_t n = p.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v = double(detail::load(pp + i));
      BRISK_CHECK(v >= 0 && v <= 1, "bernoulli: p must be in [0, 1], got ", v, " at element ", i, " of ", p.str());
    }
    for_each_uniform(n, attrs.seed, attrs.offset,
                     [=](int64_t i, float u) { o[i] = T(double(u) < double(detail::load(pp + i)) ? 1.0f : 0.0f); });
  });
}

// Uniform double in [0, 1) from 53 bits of lanes 0 and 1 of one Philox counter.
double philox_uniform_double(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox(seed, counter);
  const uint64_t bits = (uint64_t(r.v[0]) << 21) ^ (uint64_t(r.v[1]) >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * 0x1p-53;
}

// The weights of row r as doubles, checked as torch.multinomial checks them.
std::vector<double> multinomial_row(const Tensor& w, int64_t r, int64_t samples, bool replacement) {
  const int64_t c = w.size(-1);
  std::vector<double> row(static_cast<size_t>(c));
  dispatch_float(w.dtype(), "multinomial", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(w.data_ptr()) + r * c;
    for (int64_t j = 0; j < c; ++j) row[size_t(j)] = double(detail::load(p + j));
  });
  int64_t positive = 0;
  double total = 0;
  for (int64_t j = 0; j < c; ++j) {
    const double v = row[size_t(j)];
    BRISK_CHECK(std::isfinite(v) && v >= 0, "multinomial: weights must be finite and non-negative, got ", v,
                " at (row ", r, ", column ", j, ") of ", w.str());
    positive += v > 0;
    total += v;
  }
  BRISK_CHECK(total > 0, "multinomial: row ", r, " of weights ", w.str(), " sums to 0");
  BRISK_CHECK(replacement || positive >= samples, "multinomial: row ", r, " of weights ", w.str(), " has ", positive,
              " non-zero weights, fewer than num_samples = ", samples, " drawn without replacement");
  return row;
}

// One row's samples into o[0, samples); see Note [Random streams] in engine/ops/random.cpp.
void multinomial_draw(const std::vector<double>& w, int64_t samples, bool replacement, uint64_t seed,
                      uint64_t first_counter, int64_t* o) {
  const int64_t c = int64_t(w.size());
  if (replacement) {
    std::vector<double> cdf(w.size());
    std::partial_sum(w.begin(), w.end(), cdf.begin());
    int64_t last = c - 1;  // the last positive weight: where rounding at the top end lands
    while (w[size_t(last)] == 0) --last;
    for (int64_t d = 0; d < samples; ++d) {
      const double x = philox_uniform_double(seed, first_counter + uint64_t(d)) * cdf.back();
      const int64_t j = std::upper_bound(cdf.begin(), cdf.end(), x) - cdf.begin();
      o[d] = std::min(j, last);
    }
    return;
  }
  std::vector<double> key(w.size());
  for (int64_t j = 0; j < c; ++j) {
    const double u = philox_uniform_double(seed, first_counter + uint64_t(j));
    key[size_t(j)] = w[size_t(j)] > 0 ? -std::log1p(-u) / w[size_t(j)] : HUGE_VAL;
  }
  std::vector<int64_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + samples, order.end(), [&](int64_t a, int64_t b) {
    return key[size_t(a)] < key[size_t(b)] || (key[size_t(a)] == key[size_t(b)] && a < b);
  });
  std::copy(order.begin(), order.begin() + samples, o);
}

// w: (C) or (R, C) dense -> out I64 (S) or (R, S). Rows are checked first (errors are thrown
// outside the parallel loop), then drawn in parallel, each from its own counters.
void multinomial_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& w = in[0];
  check_dense(w, "multinomial");
  check_dense(out[0], "multinomial");
  const int64_t rows = w.dim() == 2 ? w.size(0) : 1;
  const int64_t samples = attrs.start;
  const bool replacement = attrs.flag;
  const uint64_t per_row = uint64_t(replacement ? samples : w.size(-1));
  std::vector<std::vector<double>> weights;
  for (int64_t r = 0; r < rows; ++r) weights.push_back(multinomial_row(w, r, samples, replacement));
  int64_t* o = static_cast<int64_t*>(out[0].data_ptr());
  const uint64_t seed = attrs.seed, offset = attrs.offset;
  const int nt = threads_for(rows * int64_t(per_row), 4096);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    multinomial_draw(weights[size_t(r)], samples, replacement, seed, offset + uint64_t(r) * per_row, o + r * samples);
  }
}

}  // namespace

void register_random() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Arange, cpu, arange_kernel);
  register_kernel(OpId::Rand, cpu, rand_kernel);
  register_kernel(OpId::Randn, cpu, randn_kernel);
  register_kernel(OpId::Dropout, cpu, dropout_kernel);
  register_kernel(OpId::Bernoulli, cpu, bernoulli_kernel);
  register_kernel(OpId::Multinomial, cpu, multinomial_kernel);
}

}  // namespace brisk::kernels::cpu
