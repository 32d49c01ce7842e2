// kernels/cpu/gemm_i8.cpp: the int8 GEMM of kernels/cpu/gemm_i8.h: packing of b (weights, once)
// and a (per call), the AVX512-VNNI (vpdpbusd) register-blocked kernel with its fused epilogue,
// the plain loops over the same packed layout, the thread split, run-time path choice by CPUID,
// and the unpacked scalar references. Note [Int8 GEMM].
// Not here: quantization parameters (compress/quantize.cpp), AMX tiles (not yet), CUDA
// (kernels/cuda/gemm_i8.cu).
#include "kernels/cpu/gemm_i8.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "engine/error.h"
#include "kernels/cpu/scratch.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports once inlined (a false positive, as in gemm.cpp).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace brisk::kernels::cpu {

// Note [Int8 GEMM]
// c = (a - zp) @ b with a u8 (M, K), b s8 (K, N), c int32. vpdpbusd multiplies 4 unsigned bytes
// of a by 4 signed bytes of b and adds the four products into each int32 lane, so
//   b is packed once (pack_i8) in panels of 16 columns, each row of a panel holding k4..k4+3 of
//     the 16 columns (64 bytes, one vector); K is padded to 4 and N to 16 with zeros;
//   a is packed per call into rows of kp bytes (zeros past K), so one row's 4 bytes at k4 are a
//     broadcast; s8 activations are shifted by +128 while packing (gemm_s8s8).
// The zero point never enters the inner loop: (a - zp) @ b = a @ b - zp * col_sum(b), with
// col_sum computed at pack time (the s8 path uses zp = 128). vpdpbusd (not vpdpbusds) wraps
// instead of saturating, so every result is exact modulo 2^32; products of |a| <= 255 and
// |b| <= 128 over K < 2^16 never wrap.
// The micro kernel keeps MR x NV accumulators (8 rows x 3 vectors = 48 columns, 24 registers)
// over the whole K (no K blocking: K of a Linear or a conv's Cin*kh*kw is at most a few
// thousand, so the 48-column strip of b, K*48 bytes, stays in L2), then applies the epilogue
// from registers: the correction, and for F32 outputs the scale per column, the bias and ReLU,
// with one fused multiply-add so that the plain reference (std::fma) gives the same bits.
// Threads: the product is cut into tasks of 64 rows x one strip; consecutive tasks share a strip
// (its b stays in cache) and OpenMP's static schedule hands each thread a run of them.
// Dispatch: VNNI where CPUID says avx512f, avx512bw and avx512vnni (leaf 7: EBX bits 16 and 30,
// ECX bit 11), read directly as gemm_bf16.cpp does (clang 14 lacks some feature names); the
// code is compiled with target attributes, so a build without -march=native still has it.
// The accumulators are named variables, not an array: GCC 12 kept an array of __m512i on the
// stack and spilled all 24 every k step (5x slower).
// Measured (Intel Xeon with AVX512-VNNI, 2 vCPU, examples/bench/bench_int8.cpp, quiet run),
// GOP/s with int32 output against brisk's F32 GEMM (GFLOP/s) on square n:
//   n     threads   F32     int8   int8 / F32
//   512   2         245     868    3.5
//   1024  2         256     922    3.6
//   2048  2         244     817    3.3
//   1024  1         131     531    4.1
// vpdpbusd does 64 multiply-adds per instruction against 16 for an F32 FMA, so 4x is the
// ceiling at equal issue rate; the strip of b read from L2 (no K blocking) costs the rest.
// AMX-INT8 (tdpbusd) would go further on CPUs that have it; not done yet.

namespace {

constexpr int64_t kMr = 8;   // rows per micro tile
constexpr int64_t kNv = 3;   // 16-column vectors per micro tile
constexpr int64_t kMc = 64;  // rows per task
constexpr double kParallelMacs = 2.0 * 64 * 64 * 64;

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

bool cpu_has_vnni() {
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  unsigned r[4];
  __cpuid_count(7, 0, r[0], r[1], r[2], r[3]);
  return (r[1] >> 16 & 1u) && (r[1] >> 30 & 1u) && (r[2] >> 11 & 1u);
}

I8GemmPath path_from_env() {
  const char* v = std::getenv("BRISK_I8_GEMM");
  if (!v) return I8GemmPath::Auto;
  const std::string_view s(v);
  if (s == "vnni") return I8GemmPath::Vnni;
  if (s == "plain") return I8GemmPath::Plain;
  return I8GemmPath::Auto;
}

std::atomic<int>& requested_path() {
  static std::atomic<int> path{int(path_from_env())};
  return path;
}

thread_local Workspace t_a;       // packed a
thread_local Workspace t_consts;  // zp * col_sum, combined scales, bias (padded to np)

// Everything a task needs, computed once per call.
struct Problem {
  int64_t m, n, kp, np;
  const uint8_t* a;           // packed (m, kp)
  const int8_t* b;            // packed panels
  const int32_t* zp_col_sum;  // (np)
  // int32 output
  int32_t* c = nullptr;
  int64_t c_rs = 0;
  // F32 output
  const float* scale = nullptr;  // (np): a_scale * col_scale[j]
  const float* bias = nullptr;   // (np), zeros when absent
  bool relu = false;
  float* out = nullptr;
  int64_t out_rs = 0, out_cs = 1;
};

// ---- the VNNI kernel

#define BRISK_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// One 16-column vector of row i of the result: the correction, then int32 or the F32 epilogue.
BRISK_VNNI inline void vnni_store(const Problem& p, int64_t i, int64_t panel, __m512i acc) {
  const int64_t j0 = panel * 16;
  const int64_t cols = std::min<int64_t>(16, p.n - j0);
  if (cols <= 0) return;
  const __mmask16 mask = __mmask16((1u << cols) - 1u);
  acc = _mm512_sub_epi32(acc, _mm512_loadu_si512(p.zp_col_sum + j0));
  if (p.c) {
    _mm512_mask_storeu_epi32(p.c + i * p.c_rs + j0, mask, acc);
    return;
  }
  __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(p.scale + j0), _mm512_loadu_ps(p.bias + j0));
  if (p.relu) y = _mm512_max_ps(y, _mm512_setzero_ps());
  float* dst = p.out + i * p.out_rs + j0 * p.out_cs;
  if (p.out_cs == 1) {
    _mm512_mask_storeu_ps(dst, mask, y);
  } else {
    alignas(64) float tmp[16];
    _mm512_store_ps(tmp, y);
    for (int64_t j = 0; j < cols; ++j) dst[j * p.out_cs] = tmp[j];
  }
}

// MR rows x NV vectors of accumulators as named variables (GCC spills an array of __m512i to
// the stack on every step), over the whole K, then stored.
// clang-format off
template <int MR, int NV>
BRISK_VNNI void vnni_tile(const Problem& p, int64_t i0, int64_t panel0) {
  const __m512i z = _mm512_setzero_si512();
#define BRISK_ACC(r) __m512i c##r##0 = z, c##r##1 = z, c##r##2 = z;
  BRISK_ACC(0) BRISK_ACC(1) BRISK_ACC(2) BRISK_ACC(3) BRISK_ACC(4) BRISK_ACC(5) BRISK_ACC(6) BRISK_ACC(7)
#undef BRISK_ACC
  const uint8_t* a = p.a + i0 * p.kp;
  const int64_t kp = p.kp;
  const int64_t panel_bytes = kp * 16;
  const int8_t* b = p.b + panel0 * panel_bytes;
  for (int64_t k = 0; k < kp; k += 4) {
    const __m512i b0 = _mm512_loadu_si512(b + k * 16);
    const __m512i b1 = NV > 1 ? _mm512_loadu_si512(b + panel_bytes + k * 16) : z;
    const __m512i b2 = NV > 2 ? _mm512_loadu_si512(b + 2 * panel_bytes + k * 16) : z;
#define BRISK_ROW(r)                                                      \
  if constexpr (MR > r) {                                                 \
    int32_t word;                                                         \
    std::memcpy(&word, a + r * kp + k, 4);                                \
    const __m512i av = _mm512_set1_epi32(word);                           \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0);                       \
    if constexpr (NV > 1) c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1); \
    if constexpr (NV > 2) c##r##2 = _mm512_dpbusd_epi32(c##r##2, av, b2); \
  }
    BRISK_ROW(0) BRISK_ROW(1) BRISK_ROW(2) BRISK_ROW(3) BRISK_ROW(4) BRISK_ROW(5) BRISK_ROW(6) BRISK_ROW(7)
#undef BRISK_ROW
  }
#define BRISK_STORE(r)                                                \
  if constexpr (MR > r) {                                             \
    vnni_store(p, i0 + r, panel0, c##r##0);                           \
    if constexpr (NV > 1) vnni_store(p, i0 + r, panel0 + 1, c##r##1); \
    if constexpr (NV > 2) vnni_store(p, i0 + r, panel0 + 2, c##r##2); \
  }
  BRISK_STORE(0) BRISK_STORE(1) BRISK_STORE(2) BRISK_STORE(3) BRISK_STORE(4) BRISK_STORE(5) BRISK_STORE(6)
  BRISK_STORE(7)
#undef BRISK_STORE
}
// clang-format on

using TileFn = void (*)(const Problem&, int64_t, int64_t);

template <int MR>
constexpr TileFn pick_nv(int nv) {
  return nv == 1 ? vnni_tile<MR, 1> : nv == 2 ? vnni_tile<MR, 2> : vnni_tile<MR, 3>;
}

TileFn vnni_tile_for(int64_t rows, int64_t nv) {
  static constexpr TileFn table[kMr][kNv] = {
      {pick_nv<1>(1), pick_nv<1>(2), pick_nv<1>(3)}, {pick_nv<2>(1), pick_nv<2>(2), pick_nv<2>(3)},
      {pick_nv<3>(1), pick_nv<3>(2), pick_nv<3>(3)}, {pick_nv<4>(1), pick_nv<4>(2), pick_nv<4>(3)},
      {pick_nv<5>(1), pick_nv<5>(2), pick_nv<5>(3)}, {pick_nv<6>(1), pick_nv<6>(2), pick_nv<6>(3)},
      {pick_nv<7>(1), pick_nv<7>(2), pick_nv<7>(3)}, {pick_nv<8>(1), pick_nv<8>(2), pick_nv<8>(3)},
  };
  return table[rows - 1][nv - 1];
}

// ---- the plain kernel: the same tile in scalar loops over the packed layout

void plain_tile(const Problem& p, int64_t i0, int64_t rows, int64_t panel0, int64_t nv) {
  const int64_t panel_bytes = p.kp * 16;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* a = p.a + (i0 + r) * p.kp;
    for (int64_t v = 0; v < nv; ++v) {
      const int8_t* b = p.b + (panel0 + v) * panel_bytes;
      uint32_t acc[16] = {};  // unsigned: wraps as vpdpbusd does
      for (int64_t k = 0; k < p.kp; k += 4) {
        for (int64_t jj = 0; jj < 16; ++jj) {
          for (int64_t kk = 0; kk < 4; ++kk) acc[jj] += uint32_t(int32_t(a[k + kk]) * int32_t(b[k * 16 + jj * 4 + kk]));
        }
      }
      const int64_t j0 = (panel0 + v) * 16;
      const int64_t cols = std::min<int64_t>(16, p.n - j0);
      for (int64_t jj = 0; jj < cols; ++jj) {
        const int32_t s = int32_t(acc[jj] - uint32_t(p.zp_col_sum[j0 + jj]));
        if (p.c) {
          p.c[(i0 + r) * p.c_rs + j0 + jj] = s;
        } else {
          float y = std::fma(float(s), p.scale[j0 + jj], p.bias[j0 + jj]);
          if (p.relu) y = std::max(y, 0.0f);
          p.out[(i0 + r) * p.out_rs + (j0 + jj) * p.out_cs] = y;
        }
      }
    }
  }
}

int pick_threads(int threads, double macs) {
  if (threads > 0) return threads;
  if (omp_in_parallel() || macs < kParallelMacs) return 1;
  return omp_get_max_threads();
}

// Packs a (any strides) into rows of kp bytes, adding `shift` (128 for s8 inputs) mod 256.
template <class T>
uint8_t* pack_a(MatrixRef<const T> a, int64_t kp, uint8_t shift) {
  uint8_t* dst = t_a.get<uint8_t>(std::max<int64_t>(1, a.rows * kp));
  for (int64_t i = 0; i < a.rows; ++i) {
    uint8_t* row = dst + i * kp;
    const T* src = a.data + i * a.row_stride;
    if (a.col_stride == 1 && shift == 0) {
      std::memcpy(row, src, size_t(a.cols));
    } else {
      for (int64_t k = 0; k < a.cols; ++k) row[k] = uint8_t(uint8_t(src[k * a.col_stride]) + shift);
    }
    std::memset(row + a.cols, 0, size_t(kp - a.cols));
  }
  return dst;
}

void run(Problem& p, int threads) {
  const int64_t panels = p.np / 16;
  const int64_t strips = (panels + kNv - 1) / kNv;
  const int64_t mblocks = (p.m + kMc - 1) / kMc;
  const int64_t tasks = strips * mblocks;
  const bool vnni = i8_gemm_path() == I8GemmPath::Vnni;
  const int nt = int(std::min<int64_t>(pick_threads(threads, double(p.m) * double(p.n) * double(p.kp)), tasks));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t panel0 = (t / mblocks) * kNv;
    const int64_t nv = std::min<int64_t>(kNv, panels - panel0);
    const int64_t i_end = std::min<int64_t>(p.m, (t % mblocks + 1) * kMc);
    for (int64_t i = (t % mblocks) * kMc; i < i_end; i += kMr) {
      const int64_t rows = std::min<int64_t>(kMr, i_end - i);
      if (vnni) {
        vnni_tile_for(rows, nv)(p, i, panel0);
      } else {
        plain_tile(p, i, rows, panel0, nv);
      }
    }
  }
}

void check_a(int64_t m, int64_t k, const PackedI8Ref& b, const char* fn) {
  BRISK_CHECK(!b.empty() || b.k == 0 || b.n == 0, fn, ": b is not packed (call pack_i8)");
  BRISK_CHECK(k == b.k, fn, ": inner sizes differ, a (", m, ", ", k, ") @ b (", b.k, ", ", b.n, ")");
}

// The per-call constants (padded to np): zp * col_sum and, for F32 outputs, scales and bias.
Problem problem(const uint8_t* a, int64_t m, int32_t zp, const PackedI8Ref& b, const I8Epilogue* e) {
  const int64_t np = b.np;
  char* buf = static_cast<char*>(t_consts.get(size_t(std::max<int64_t>(np, 1)) * 12));
  auto* corr = reinterpret_cast<int32_t*>(buf);
  auto* scale = reinterpret_cast<float*>(buf + np * 4);
  auto* bias = reinterpret_cast<float*>(buf + np * 8);
  for (int64_t j = 0; j < np; ++j) {
    corr[j] = int32_t(uint32_t(zp) * uint32_t(b.col_sum[j]));  // wraps as the kernel does
    scale[j] = (e && j < b.n) ? e->a_scale * e->col_scale[j] : 0.0f;
    bias[j] = (e && e->bias && j < b.n) ? e->bias[j] : 0.0f;
  }
  Problem p{.m = m, .n = b.n, .kp = b.kp, .np = np, .a = a, .b = b.data, .zp_col_sum = corr};
  p.scale = scale;
  p.bias = bias;
  return p;
}

}  // namespace

int64_t packed_i8_kp(int64_t k) { return round_up(std::max<int64_t>(k, 1), 4); }
int64_t packed_i8_np(int64_t n) { return round_up(std::max<int64_t>(n, 1), 16); }

void pack_i8_into(MatrixRef<const int8_t> b, int8_t* data, int32_t* col_sum) {
  BRISK_CHECK(b.rows >= 0 && b.cols >= 0, "pack_i8: bad sizes (", b.rows, ", ", b.cols, ")");
  BRISK_CHECK(b.rows < (int64_t(1) << 24), "pack_i8: K = ", b.rows, " too large for int32 accumulation");
  const int64_t kp = packed_i8_kp(b.rows), np = packed_i8_np(b.cols);
  std::fill(data, data + kp * np, int8_t(0));
  std::fill(col_sum, col_sum + np, 0);
  for (int64_t j = 0; j < b.cols; ++j) {
    int8_t* panel = data + (j / 16) * kp * 16 + (j % 16) * 4;
    int32_t sum = 0;
    for (int64_t k = 0; k < b.rows; ++k) {
      const int8_t v = b.data[k * b.row_stride + j * b.col_stride];
      panel[(k / 4) * 64 + k % 4] = v;
      sum += v;
    }
    col_sum[j] = sum;
  }
}

PackedI8 pack_i8(MatrixRef<const int8_t> b) {
  BRISK_CHECK(b.rows >= 0 && b.cols >= 0, "pack_i8: bad sizes (", b.rows, ", ", b.cols, ")");
  PackedI8 p;
  p.k = b.rows;
  p.n = b.cols;
  p.kp = packed_i8_kp(b.rows);
  p.np = packed_i8_np(b.cols);
  p.data.resize(size_t(p.kp * p.np));
  p.col_sum.resize(size_t(p.np));
  pack_i8_into(b, p.data.data(), p.col_sum.data());
  return p;
}

void gemm_u8s8(MatrixRef<const uint8_t> a, int32_t a_zero_point, const PackedI8Ref& b, MatrixRef<int32_t> c,
               int threads) {
  check_a(a.rows, a.cols, b, "gemm_u8s8");
  BRISK_CHECK(c.rows == a.rows && c.cols == b.n && c.col_stride == 1, "gemm_u8s8: c must be (", a.rows, ", ", b.n,
              ") with unit column stride, got (", c.rows, ", ", c.cols, ") col stride ", c.col_stride);
  if (a.rows == 0 || b.n == 0) return;
  Problem p = problem(pack_a(a, b.kp, 0), a.rows, a_zero_point, b, nullptr);
  p.c = c.data;
  p.c_rs = c.row_stride;
  run(p, threads);
}

void gemm_u8s8(MatrixRef<const uint8_t> a, int32_t a_zero_point, const PackedI8Ref& b, const I8Epilogue& e,
               int threads) {
  check_a(a.rows, a.cols, b, "gemm_u8s8");
  BRISK_CHECK(e.out.rows == a.rows && e.out.cols == b.n, "gemm_u8s8: out must be (", a.rows, ", ", b.n, "), got (",
              e.out.rows, ", ", e.out.cols, ")");
  BRISK_CHECK(e.col_scale || b.n == 0, "gemm_u8s8: the epilogue needs col_scale");
  if (a.rows == 0 || b.n == 0) return;
  Problem p = problem(pack_a(a, b.kp, 0), a.rows, a_zero_point, b, &e);
  p.relu = e.relu;
  p.out = e.out.data;
  p.out_rs = e.out.row_stride;
  p.out_cs = e.out.col_stride;
  run(p, threads);
}

void gemm_s8s8(MatrixRef<const int8_t> a, const PackedI8Ref& b, MatrixRef<int32_t> c, int threads) {
  check_a(a.rows, a.cols, b, "gemm_s8s8");
  BRISK_CHECK(c.rows == a.rows && c.cols == b.n && c.col_stride == 1, "gemm_s8s8: c must be (", a.rows, ", ", b.n,
              ") with unit column stride, got (", c.rows, ", ", c.cols, ") col stride ", c.col_stride);
  if (a.rows == 0 || b.n == 0) return;
  Problem p = problem(pack_a(a, b.kp, 128), a.rows, 128, b, nullptr);
  p.c = c.data;
  p.c_rs = c.row_stride;
  run(p, threads);
}

// ---- references

namespace {
template <class A, class F>
void reference_loops(MatrixRef<const A> a, int32_t zp, MatrixRef<const int8_t> b, F&& store) {
  BRISK_CHECK(a.cols == b.rows, "gemm_i8_reference: inner sizes differ, (", a.rows, ", ", a.cols, ") @ (", b.rows, ", ",
              b.cols, ")");
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t j = 0; j < b.cols; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < a.cols; ++k) {
        acc += (int64_t(a.data[i * a.row_stride + k * a.col_stride]) - zp) *
               int64_t(b.data[k * b.row_stride + j * b.col_stride]);
      }
      store(i, j, int32_t(uint32_t(uint64_t(acc))));
    }
  }
}
}  // namespace

void gemm_u8s8_reference(MatrixRef<const uint8_t> a, int32_t a_zero_point, MatrixRef<const int8_t> b,
                         MatrixRef<int32_t> c) {
  reference_loops(a, a_zero_point, b,
                  [&](int64_t i, int64_t j, int32_t v) { c.data[i * c.row_stride + j * c.col_stride] = v; });
}

void gemm_u8s8_reference(MatrixRef<const uint8_t> a, int32_t a_zero_point, MatrixRef<const int8_t> b,
                         const I8Epilogue& e) {
  reference_loops(a, a_zero_point, b, [&](int64_t i, int64_t j, int32_t v) {
    float y = std::fma(float(v), e.a_scale * e.col_scale[j], e.bias ? e.bias[j] : 0.0f);
    if (e.relu) y = std::max(y, 0.0f);
    e.out.data[i * e.out.row_stride + j * e.out.col_stride] = y;
  });
}

void gemm_s8s8_reference(MatrixRef<const int8_t> a, MatrixRef<const int8_t> b, MatrixRef<int32_t> c) {
  reference_loops(a, 0, b, [&](int64_t i, int64_t j, int32_t v) { c.data[i * c.row_stride + j * c.col_stride] = v; });
}

// ---- activation helpers

namespace {
BRISK_VNNI void quantize_u8_avx512(const float* x, int64_t n, float inv, int32_t zp, int32_t qmin, int32_t qmax,
                                   uint8_t* q) {
  // Clamped in F32 first (a value past the range stays past it), so the int32 conversion of
  // huge values cannot wrap; rounding to nearest even as nearbyint.
  const __m512 inv_v = _mm512_set1_ps(inv);
  const __m512 lo = _mm512_set1_ps(float(qmin - zp - 1)), hi = _mm512_set1_ps(float(qmax - zp + 1));
  const __m512i zp_v = _mm512_set1_epi32(zp), qmin_v = _mm512_set1_epi32(qmin), qmax_v = _mm512_set1_epi32(qmax);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv_v), lo), hi);
    __m512i r = _mm512_add_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp_v);
    r = _mm512_min_epi32(_mm512_max_epi32(r, qmin_v), qmax_v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(r));
  }
  for (; i < n; ++i) {
    const float v = std::min(std::max(x[i] * inv, float(qmin - zp - 1)), float(qmax - zp + 1));
    q[i] = uint8_t(std::clamp<int32_t>(zp + int32_t(std::nearbyint(v)), qmin, qmax));
  }
}
}  // namespace

void quantize_u8(const float* x, int64_t n, float scale, int32_t zp, int32_t qmin, int32_t qmax, uint8_t* q) {
  const float inv = 1.0f / scale;
  static const bool avx512 = cpu_has_vnni();
  if (avx512) {
    quantize_u8_avx512(x, n, inv, zp, qmin, qmax, q);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::min(std::max(x[i] * inv, float(qmin - zp - 1)), float(qmax - zp + 1));
    q[i] = uint8_t(std::clamp<int32_t>(zp + int32_t(std::nearbyint(v)), qmin, qmax));
  }
}

void min_max(const float* x, int64_t n, float& lo, float& hi) {
  float a = INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {  // vectorized by the compiler (fmin/fmax semantics)
    a = std::fmin(a, x[i]);
    b = std::fmax(b, x[i]);
  }
  lo = a;
  hi = b;
}

// ---- path choice

void set_i8_gemm_path(I8GemmPath path) { requested_path().store(int(path)); }

I8GemmPath i8_gemm_path() {
  static const bool vnni = cpu_has_vnni();
  const auto want = I8GemmPath(requested_path().load());
  if (want == I8GemmPath::Plain) return I8GemmPath::Plain;
  return vnni ? I8GemmPath::Vnni : I8GemmPath::Plain;
}

const char* i8_gemm_path_name(I8GemmPath path) {
  switch (path) {
    case I8GemmPath::Auto: return "auto";
    case I8GemmPath::Vnni: return "vnni";
    case I8GemmPath::Plain: return "plain";
  }
  return "?";
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
