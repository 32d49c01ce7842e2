// kernels/cpu/gemm_bf16.cpp: the BF16 GEMM of kernels/cpu/gemm_bf16.h: run-time path choice,
// packing into the pair-interleaved layouts the BF16 instructions read, an AMX tile kernel, an
// AVX512-BF16 (vdpbf16ps) register-blocked kernel, the cache-blocked driver and thread split
// around them, the convert-to-F32 fallback and the scalar reference. Note [BF16 GEMM].
// Not here: rounding to BF16 and batching (the matmul kernel, kernels/cpu/gemm.cpp), the F32
// GEMM (kernels/cpu/gemm.cpp).
#include "kernels/cpu/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "engine/allocator.h"
#include "engine/error.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/scratch.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports once they are inlined here (a false positive, as in gemm.cpp).
#pragma GCC diagnostic push
#ifndef __clang__  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace brisk::kernels::cpu {

// Note [BF16 GEMM]
// c (F32) = a (BF16) @ b (BF16), summed in F32. Both native kernels multiply pairs along K:
// vdpbf16ps adds a[2p] * b[2p] + a[2p+1] * b[2p+1] into each F32 lane, and AMX's tdpbf16ps does
// the same for a 16x32 A tile against a 16-pair x 16-column B tile. So both share one packing:
//   B panel (kc, nc): sub-panels of 16 columns, each [pair p][column j][2]: one 64-byte row per
//     pair (the "VNNI" layout); the AVX512 kernel loads a row as a vector, AMX loads 16 rows as
//     a tile.
//   A block (mc, kc): blocks of 16 rows, each cut in groups of 32 k (16 pairs) laid out
//     [row][32 k]: an AMX tile; the AVX512 kernel broadcasts one row's pair (4 bytes) at a time.
// Rows are padded to 32, columns to 32 and k to groups of 32 with zeros, so the kernels never
// test an edge inside their loops; only the writes to c are masked (AVX512) or staged through a
// 32x32 buffer (AMX). Odd K is a pair whose second half is zero.
// Blocking (Goto's): for each NC columns and KC depth, pack B (L2); for each MC rows pack A;
// then the micro kernels sweep 32-column (AMX, 2x2 tiles = 32x32 of c) or 48-column (AVX512,
// 8 rows x 3 vectors = 24 accumulators) strips of B kept in L1 over the rows of A.
// Threads: as gemm.cpp's (Note [CPU GEMM]): gemm_threads() decides, and a large product is cut
// along its larger output dim into one slab per thread, each packing its own panels into a
// per-thread workspace from cpu_allocator() that is kept between calls.
// Dispatch: AMX where the CPU has amx-bf16 and Linux grants the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM, once per process); else vdpbf16ps where the CPU has avx512bf16; else
// the fallback: a and b converted to F32 and the F32 GEMM. The native code is compiled with
// target attributes, so a build without -march=native (BRISK_NATIVE=OFF) still has it.
// Measured (Intel Xeon with AMX, 2 vCPU, examples/bench/bench_amp.cpp): vdpbf16ps
// retires one instruction every 2 cycles there (~105 GFLOP/s per core, half the F32 FMA peak
// of ~210), so that kernel cannot beat the F32 GEMM on this CPU and AMX carries the goal; on
// CPUs where vdpbf16ps issues as fast as FMA (Zen 4/5) the AVX512 kernel is the fast one.
// GFLOP/s, square n, c = a @ b row-major, median of 3-9 calls, OMP_NUM_THREADS=2, one quiet run
// (a busy second vCPU drags every 2-thread row down, F32 included):
//   n     threads   F32 GEMM   BF16 AMX   BF16 AVX512   BF16 fallback   AMX / F32
//   512   2         206        857        157           175             4.2
//   1024  2         199        1036       151           230             5.2
//   2048  2         249        1129       161           229             4.5
//   512   1         136        824        96            128             6.1
//   1024  1         134        675        87            125             5.1
//   2048  1         128        520        86            123             4.1
// AMX from L1 alone peaks near 2400 GFLOP/s per core here, so packing and the F32 c traffic
// (one load and store of c per KC block) bound it, not the tiles. In the Fashion-MNIST CNN
// (batch 128, one thread, CPU time per training step) BF16 autocast went from 72 ms (the
// fallback, as before this kernel) to 47 ms against 58 ms in F32; the rest of that step is
// max pooling, ReLU and dtype conversions outside this GEMM.

namespace {

// ---- path choice

constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an XSAVE feature
constexpr int kXfeatureXtiledata = 18;     // the AMX tile data

// CPU features read with CPUID directly (leaf 7): GCC and clang do not agree on the names
// __builtin_cpu_supports takes (clang 14 knows no "amx-tile"), and these are a few bits.
// avx512bf16: leaf 7 subleaf 1, EAX bit 5 (with AVX-512F: leaf 7 subleaf 0, EBX bit 16);
// amx-bf16 and amx-tile: leaf 7 subleaf 0, EDX bits 22 and 24.
bool cpuid7(unsigned subleaf, unsigned regs[4]) {
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, subleaf, regs[0], regs[1], regs[2], regs[3]);
  return true;
}

bool cpu_has_avx512bf16() {
  unsigned r0[4], r1[4];
  return cpuid7(0, r0) && (r0[1] >> 16 & 1u) && cpuid7(1, r1) && (r1[0] >> 5 & 1u);
}

// AMX needs the CPU feature and the kernel's permission for this process (asked once).
bool amx_available() {
  static const bool ok = [] {
    unsigned r[4];
    const bool cpu = cpuid7(0, r) && (r[3] >> 22 & 1u) && (r[3] >> 24 & 1u);
    return cpu && cpu_has_avx512bf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

Bf16GemmPath path_from_env() {
  const char* v = std::getenv("BRISK_BF16_GEMM");
  if (!v) return Bf16GemmPath::Auto;
  const std::string_view s(v);
  if (s == "amx") return Bf16GemmPath::Amx;
  if (s == "avx512") return Bf16GemmPath::Avx512;
  if (s == "fallback") return Bf16GemmPath::Fallback;
  return Bf16GemmPath::Auto;
}

std::atomic<int>& requested_path() {
  static std::atomic<int> path{int(path_from_env())};
  return path;
}

// ---- per-thread packing buffers

thread_local Workspace t_pack;     // packed A and B panels
thread_local Workspace t_convert;  // the fallback's F32 copies

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// A BF16 matrix as the packers read it: element (i, j) at data[i * rs + j * cs], with rs == 1
// or cs == 1 (a size-1 dim's stride is normalized to 1).
struct Operand {
  const uint16_t* data;
  int64_t rs, cs;

  const uint16_t* at(int64_t i, int64_t j) const { return data + i * rs + j * cs; }
};

// An F32 matrix read as its BF16 rounding (BFloat16::from_float) while it is packed: the
// weights of autocast's mixed linear (Note [Mixed linear] in kernels/cpu/gemm.cpp).
struct OperandF32 {
  const float* data;
  int64_t rs, cs;

  const float* at(int64_t i, int64_t j) const { return data + i * rs + j * cs; }
};

template <class M>
void unit_strides(const M& m, int64_t& rs, int64_t& cs, const char* name) {
  if (m.col_stride == 1 || m.cols == 1) {
    rs = m.row_stride, cs = 1;
  } else if (m.row_stride == 1 || m.rows == 1) {
    rs = 1, cs = m.col_stride;
  } else {
    BRISK_FAIL("gemm_bf16: operand ", name, " (", m.rows, ", ", m.cols, ") has strides (", m.row_stride, ", ",
               m.col_stride, "); one of them must be 1 (copy it to a dense matrix first)");
  }
}

OperandF32 operand(const MatrixRef<const float>& m, const char* name) {
  OperandF32 o{m.data, 0, 0};
  unit_strides(m, o.rs, o.cs, name);
  return o;
}

Operand operand(const MatrixRef<const BFloat16>& m, const char* name) {
  const uint16_t* d = reinterpret_cast<const uint16_t*>(m.data);
  if (m.col_stride == 1 || m.cols == 1) return {d, m.row_stride, 1};
  if (m.row_stride == 1 || m.rows == 1) return {d, 1, m.col_stride};
  BRISK_FAIL("gemm_bf16: operand ", name, " (", m.rows, ", ", m.cols, ") has strides (", m.row_stride, ", ",
             m.col_stride, "); one of them must be 1 (copy it to a dense matrix first)");
}

// ---- packing (layouts in Note [BF16 GEMM]); kg: groups of 32 k in the block

constexpr int64_t kGroup = 512;  // elements in one (16 rows or pairs) x 32 k group

// a (mc, kc) -> blocks of 16 rows x kg groups x [16 rows][32 k], rows padded to 32.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_a(Operand a, int64_t mc, int64_t kc, int64_t kg,
                                                                 uint16_t* out) {
  const int64_t blocks = round_up(mc, 32) / 16;
  for (int64_t ib = 0; ib < blocks; ++ib) {
    for (int64_t g = 0; g < kg; ++g) {
      uint16_t* dst = out + (ib * kg + g) * kGroup;
      const int64_t k0 = g * 32, n = std::clamp<int64_t>(kc - k0, 0, 32);
      for (int64_t r = 0; r < 16; ++r) {
        const int64_t i = ib * 16 + r;
        uint16_t* row = dst + r * 32;
        if (i >= mc || n == 0) {
          _mm512_storeu_si512(row, _mm512_setzero_si512());
        } else if (a.cs == 1) {
          const __mmask32 mask = n == 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
          _mm512_storeu_si512(row, _mm512_maskz_loadu_epi16(mask, a.at(i, k0)));
        } else {
          const uint16_t* src = a.at(i, k0);
          for (int64_t t = 0; t < n; ++t) row[t] = src[t * a.cs];
          for (int64_t t = n; t < 32; ++t) row[t] = 0;
        }
      }
    }
  }
}

// pack_a for a column-major a (rs == 1, as a transposed view): for each pair of k, the 16 rows'
// pairs are built from two contiguous loads and scattered into the 16 tile rows.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_a_cols(Operand a, int64_t mc, int64_t kc, int64_t kg,
                                                                      uint16_t* out) {
  const int64_t blocks = round_up(mc, 32) / 16;
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(64));  // byte offsets of the tile rows
  for (int64_t ib = 0; ib < blocks; ++ib) {
    const int64_t i = ib * 16, nrows = std::clamp<int64_t>(mc - i, 0, 16);
    const __mmask16 mask = nrows == 16 ? __mmask16(0xffff) : __mmask16((1u << nrows) - 1);
    for (int64_t g = 0; g < kg; ++g) {
      uint16_t* dst = out + (ib * kg + g) * kGroup;
      for (int64_t q = 0; q < 16; ++q) {
        const int64_t k = g * 32 + 2 * q;
        __m512i v = _mm512_setzero_si512();
        if (nrows > 0 && k < kc) {
          v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, a.at(i, k)));
          if (k + 1 < kc) {
            const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, a.at(i, k + 1)));
            v = _mm512_or_si512(v, _mm512_slli_epi32(hi, 16));
          }
        }
        _mm512_i32scatter_epi32(dst + 2 * q, rows, v, 1);
      }
    }
  }
}

// One packed B row: the pairs (b[k, j], b[k+1, j]) of columns [j, j + ncols) (ncols <= 16),
// b[k+1, .] read as zero when has_next is false.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b_pair(Operand b, int64_t k, int64_t j, int64_t ncols,
                                                                      bool has_next, uint16_t* dst) {
  if (b.cs == 1) {
    const __mmask16 mask = ncols == 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, b.at(k, j)));
    const __m512i hi =
        has_next ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, b.at(k + 1, j))) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    return;
  }
  // rs == 1: each column's pair is adjacent in memory: one gather of 16 pairs (its byte
  // offsets in 32 bits). The last, odd k reads one element per column, as scalars.
  if (has_next && b.cs < (int64_t(1) << 26)) {
    const __mmask16 mask = ncols == 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
    const __m512i cols = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(int(b.cs * 2)));
    _mm512_storeu_si512(dst, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, cols, b.at(k, j), 1));
    return;
  }
  int64_t t = 0;
  for (; t < ncols; ++t) {
    const uint16_t* src = b.at(k, j + t);
    dst[2 * t] = src[0];
    dst[2 * t + 1] = has_next ? src[1] : 0;
  }
  for (; t < 16; ++t) dst[2 * t] = dst[2 * t + 1] = 0;
}

// 16 floats -> their BF16 bits (BFloat16::from_float: nearest even, NaN made quiet), each in
// the low half of its 32-bit lane. Integer arithmetic, not vcvtneps2bf16, which flushes
// subnormals to zero.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i bf16_lanes(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet);
}

// pack_b_pair for an F32 b, rounded to BF16 on the way.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b_pair(OperandF32 b, int64_t k, int64_t j, int64_t ncols,
                                                                      bool has_next, uint16_t* dst) {
  if (b.cs == 1) {
    const __mmask16 mask = ncols == 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
    const __m512i lo = bf16_lanes(_mm512_maskz_loadu_ps(mask, b.at(k, j)));
    const __m512i hi = has_next ? bf16_lanes(_mm512_maskz_loadu_ps(mask, b.at(k + 1, j))) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    return;
  }
  // rs == 1 with several columns takes pack_b_f32_cols; what is left (one column, or cs == 1 with
  // one row) is read element by element.
  int64_t t = 0;
  for (; t < ncols; ++t) {
    const float* src = b.at(k, j + t);
    dst[2 * t] = BFloat16::from_float(src[0]);
    dst[2 * t + 1] = has_next ? BFloat16::from_float(src[b.rs]) : 0;
  }
  for (; t < 16; ++t) dst[2 * t] = dst[2 * t + 1] = 0;
}

// 16 lanes of BF16 bits (bf16_lanes) -> 8 pairs: lanes 2q and 2q + 1 folded into 32 bits.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i fold_pairs(__m512i bits) {
  return _mm512_cvtepi64_epi32(
      _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi64(0xffff)), _mm512_srli_epi64(bits, 16)));
}

// pack_b for an F32 b read down its columns (rs == 1: an (n, k) weight read as its transpose,
// linear's forward): for 16 columns x 32 k at a time, each column's 32 floats are loaded as
// two vectors, rounded and folded into 16 pairs, and the 16 x 16 block of pairs is transposed
// in registers into 16 packed rows. (A gather of 64-bit pairs per packed row took 16% of GPT-2's
// BF16 step.)
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b_f32_cols(OperandF32 b, int64_t kc, int64_t nc,
                                                                          int64_t kg, uint16_t* out) {
  const int64_t subs = round_up(nc, 32) / 16;
  for (int64_t s = 0; s < subs; ++s) {
    const int64_t j = s * 16, ncols = std::clamp<int64_t>(nc - j, 0, 16);
    uint16_t* panel = out + s * kg * kGroup;
    for (int64_t g = 0; g < kg; ++g) {
      const int64_t k0 = g * 32, nk = std::clamp<int64_t>(kc - k0, 0, 32);
      __m512i rows[16];
      for (int64_t t = 0; t < 16; ++t) {
        if (t >= ncols || nk == 0) {
          rows[t] = _mm512_setzero_si512();
          continue;
        }
        const float* src = b.at(k0, j + t);  // 32 k of column j + t, contiguous
        const __m256i lo = fold_pairs(bf16_lanes(_mm512_maskz_loadu_ps(first_lanes(nk), src)));
        const __m256i hi = fold_pairs(bf16_lanes(_mm512_maskz_loadu_ps(first_lanes(nk - 16), src + 16)));
        rows[t] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      __m512 lanes[16];  // the pairs as 32-bit lanes: the float transpose moves bits only
      for (int t = 0; t < 16; ++t) lanes[t] = _mm512_castsi512_ps(rows[t]);
      transpose_16x16(lanes);
      for (int64_t q = 0; q < 16; ++q) _mm512_storeu_ps(panel + (g * 16 + q) * 32, lanes[q]);
    }
  }
}

// b (kc, nc) -> sub-panels of 16 columns x (16 * kg) pairs x [16 columns][2], columns padded
// to 32.
template <class BOperand>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b(BOperand b, int64_t kc, int64_t nc, int64_t kg,
                                                                 uint16_t* out) {
  if constexpr (std::is_same_v<BOperand, OperandF32>) {
    if (b.rs == 1 && b.cs != 1) return pack_b_f32_cols(b, kc, nc, kg, out);
  }
  const int64_t subs = round_up(nc, 32) / 16, pairs = kg * 16;
  for (int64_t s = 0; s < subs; ++s) {
    const int64_t j = s * 16, ncols = std::clamp<int64_t>(nc - j, 0, 16);
    uint16_t* panel = out + s * kg * kGroup;
    for (int64_t p = 0; p < pairs; ++p) {
      uint16_t* dst = panel + p * 32;
      if (ncols == 0 || 2 * p >= kc) {
        _mm512_storeu_si512(dst, _mm512_setzero_si512());
      } else {
        pack_b_pair(b, 2 * p, j, ncols, 2 * p + 1 < kc, dst);
      }
    }
  }
}

// ---- the AVX512-BF16 micro kernel: c (rows <= 8, cols <= 16 * NV) (+)= A rows x B strip

__mmask16 col_mask(int cols, int v) { return first_lanes(cols - 16 * v); }

// ap: 8 rows of a packed A block (row stride 32, group stride kGroup); bp: NV sub-panels,
// bs elements apart; kp pairs.
template <int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void micro_dot(const uint16_t* ap, const uint16_t* bp,
                                                                               int64_t bs, int64_t kp, float* c,
                                                                               int64_t ldc, int rows, int cols,
                                                                               bool load_c) {
  __m512 acc[8][NV];
  for (int r = 0; r < 8; ++r) {
    for (int v = 0; v < NV; ++v) {
      acc[r][v] =
          load_c && r < rows ? _mm512_maskz_loadu_ps(col_mask(cols, v), c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < kp; ++p) {
    const uint16_t* a = ap + (p >> 4) * kGroup + (p & 15) * 2;
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bp + v * bs + p * 32);
    for (int r = 0; r < 8; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * 32, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, col_mask(cols, v), acc[r][v]);
  }
}

// ---- the AMX micro kernel: c (rows <= 32, cols <= 32) (+)= 2 A blocks x 2 B sub-panels.
// Tiles 0-3: c (2x2 of 16x16 F32); 4, 5: A (16 rows x 32 k); 6, 7: B (16 pairs x 16 columns).

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void amx_release() { _tile_release(); }

// ap: the first of two A blocks (the second as elements later); bp: the first of two
// sub-panels (the second bs elements later); kg groups of 32 k.
__attribute__((target("amx-tile,amx-bf16"))) void micro_amx(const uint16_t* ap, int64_t as, const uint16_t* bp,
                                                            int64_t bs, int64_t kg, float* c, int64_t ldc, int rows,
                                                            int cols, bool load_c) {
  alignas(64) float buf[32 * 32];
  const bool direct = rows == 32 && cols == 32;
  float* cp = direct ? c : buf;
  const int64_t ld = direct ? ldc : 32;
  if (!direct && load_c) {
    for (int r = 0; r < 32; ++r) {
      for (int j = 0; j < 32; ++j) buf[r * 32 + j] = r < rows && j < cols ? c[r * ldc + j] : 0.0f;
    }
  }
  if (load_c) {
    _tile_loadd(0, cp, ld * 4);
    _tile_loadd(1, cp + 16, ld * 4);
    _tile_loadd(2, cp + 16 * ld, ld * 4);
    _tile_loadd(3, cp + 16 * ld + 16, ld * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t g = 0; g < kg; ++g) {
    _tile_loadd(4, ap + g * kGroup, 64);
    _tile_loadd(5, ap + as + g * kGroup, 64);
    _tile_loadd(6, bp + g * kGroup, 64);
    _tile_loadd(7, bp + bs + g * kGroup, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, cp, ld * 4);
  _tile_stored(1, cp + 16, ld * 4);
  _tile_stored(2, cp + 16 * ld, ld * 4);
  _tile_stored(3, cp + 16 * ld + 16, ld * 4);
  if (!direct) {
    for (int r = 0; r < rows; ++r) std::copy(buf + r * 32, buf + r * 32 + cols, c + r * ldc);
  }
}

// ---- the blocked driver

struct Blocking {
  int64_t mc, kc, nc;
};

// KC is a multiple of 32 (whole groups); see Note [BF16 GEMM].
constexpr Blocking kAmxBlocking{256, 512, 512};
constexpr Blocking kDotBlocking{192, 256, 480};

// c (mc, nc) (+)= packed A block @ packed B panel, kg groups / kp pairs deep.
void run_block(Bf16GemmPath path, const uint16_t* ap, const uint16_t* bp, int64_t mc, int64_t nc, int64_t kg,
               int64_t kp, float* c, int64_t ldc, bool load_c) {
  const int64_t stride = kg * kGroup;  // between A blocks and between B sub-panels
  if (path == Bf16GemmPath::Amx) {
    for (int64_t jr = 0; jr < nc; jr += 32) {
      for (int64_t ir = 0; ir < mc; ir += 32) {
        micro_amx(ap + (ir / 16) * stride, stride, bp + (jr / 16) * stride, stride, kg, c + ir * ldc + jr, ldc,
                  int(std::min<int64_t>(32, mc - ir)), int(std::min<int64_t>(32, nc - jr)), load_c);
      }
    }
    return;
  }
  for (int64_t jr = 0; jr < nc; jr += 48) {
    const int cols = int(std::min<int64_t>(48, nc - jr));
    const uint16_t* b = bp + (jr / 16) * stride;
    for (int64_t ir = 0; ir < mc; ir += 8) {
      const uint16_t* a = ap + (ir / 16) * stride + (ir % 16) * 32;
      const int rows = int(std::min<int64_t>(8, mc - ir));
      float* cb = c + ir * ldc + jr;
      if (cols > 32) {
        micro_dot<3>(a, b, stride, kp, cb, ldc, rows, cols, load_c);
      } else if (cols > 16) {
        micro_dot<2>(a, b, stride, kp, cb, ldc, rows, cols, load_c);
      } else {
        micro_dot<1>(a, b, stride, kp, cb, ldc, rows, cols, load_c);
      }
    }
  }
}

// c (m, n), row-major with row stride ldc, (+)= a (m, k) @ b (k, n) on the calling thread.
template <class BOperand>
void gemm_native_serial(Bf16GemmPath path, int64_t m, int64_t n, int64_t k, Operand a, BOperand b, float* c,
                        int64_t ldc, bool accumulate) {
  const Blocking bl = path == Bf16GemmPath::Amx ? kAmxBlocking : kDotBlocking;
  const int64_t kc_max = std::min(bl.kc, round_up(k, 32)), kg_max = kc_max / 32;
  const int64_t a_elems = round_up(std::min(bl.mc, m), 32) * kg_max * 32;
  const int64_t b_elems = round_up(std::min(bl.nc, n), 32) * kg_max * 32;
  uint16_t* ap = static_cast<uint16_t*>(t_pack.get(size_t(a_elems + b_elems) * sizeof(uint16_t)));
  uint16_t* bp = ap + a_elems;
  if (path == Bf16GemmPath::Amx) amx_configure();
  for (int64_t jc = 0; jc < n; jc += bl.nc) {
    const int64_t nc = std::min(bl.nc, n - jc);
    for (int64_t pc = 0; pc < k; pc += bl.kc) {
      const int64_t kc = std::min(bl.kc, k - pc), kg = ceil_div(kc, 32);
      pack_b(BOperand{b.at(pc, jc), b.rs, b.cs}, kc, nc, kg, bp);
      for (int64_t ic = 0; ic < m; ic += bl.mc) {
        const int64_t mc = std::min(bl.mc, m - ic);
        const Operand block{a.at(ic, pc), a.rs, a.cs};
        if (a.cs == 1) {
          pack_a(block, mc, kc, kg, ap);
        } else {
          pack_a_cols(block, mc, kc, kg, ap);
        }
        run_block(path, ap, bp, mc, nc, kg, ceil_div(kc, 2), c + ic * ldc + jc, ldc, accumulate || pc > 0);
      }
    }
  }
  if (path == Bf16GemmPath::Amx) amx_release();
}

// Zeroes rows [0, m) x cols [0, n) of a row-major c.
void zero(float* c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
}

// The native product, split across threads as gemm.cpp does (Note [CPU GEMM]).
template <class BOperand>
void gemm_native(Bf16GemmPath path, int64_t m, int64_t n, int64_t k, Operand a, BOperand b, float* c, int64_t ldc,
                 bool accumulate, int threads) {
  const int nt = threads > 0 ? threads : gemm_threads(m, n, k);
  if (nt <= 1) {
    gemm_native_serial(path, m, n, k, a, b, c, ldc, accumulate);
    return;
  }
  const bool split_n = n > m;
  const int64_t extent = split_n ? n : m;
  // Whole micro kernel strips: 32 rows, 32 (AMX) or 48 (AVX512) columns.
  const int64_t align = split_n && path == Bf16GemmPath::Avx512 ? 48 : 32;
  const int64_t chunk = round_up(ceil_div(extent, nt), align);
  const int slabs = int(ceil_div(extent, chunk));
#pragma omp parallel for num_threads(slabs) schedule(static, 1)
  for (int s = 0; s < slabs; ++s) {
    const int64_t lo = s * chunk, len = std::min(extent, lo + chunk) - lo;
    if (split_n) {
      gemm_native_serial(path, m, len, k, a, BOperand{b.at(0, lo), b.rs, b.cs}, c + lo, ldc, accumulate);
    } else {
      gemm_native_serial(path, len, n, k, {a.at(lo, 0), a.rs, a.cs}, b, c + lo * ldc, ldc, accumulate);
    }
  }
}

// ---- the fallback: a and b converted to dense F32, then the F32 GEMM

void to_f32(OperandF32 x, int64_t rows, int64_t cols, float* out) {  // rounded to BF16 first
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = float(BFloat16(*x.at(i, j)));
  }
}

void to_f32(Operand x, int64_t rows, int64_t cols, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = float(BFloat16::from_bits(*x.at(i, j)));
  }
}

template <class BOperand>
void gemm_fallback(int64_t m, int64_t n, int64_t k, Operand a, BOperand b, MatrixRef<float> c, bool accumulate,
                   int threads) {
  float* a32 = static_cast<float*>(t_convert.get(size_t(m * k + n * k) * sizeof(float)));
  float* b32 = a32 + m * k;
  to_f32(a, m, k, a32);
  to_f32(b, k, n, b32);
  gemm<float>({a32, m, k, k, 1}, {b32, k, n, n, 1}, c, accumulate, threads);
}

MatrixRef<const BFloat16> transposed(const MatrixRef<const BFloat16>& m) {
  return {m.data, m.cols, m.rows, m.col_stride, m.row_stride};
}

}  // namespace

void set_bf16_gemm_path(Bf16GemmPath path) { requested_path().store(int(path)); }

Bf16GemmPath bf16_gemm_path() {
  const auto want = Bf16GemmPath(requested_path().load());
  if ((want == Bf16GemmPath::Auto || want == Bf16GemmPath::Amx) && amx_available()) return Bf16GemmPath::Amx;
  if (want != Bf16GemmPath::Fallback && cpu_has_avx512bf16()) return Bf16GemmPath::Avx512;
  return Bf16GemmPath::Fallback;
}

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  switch (path) {
    case Bf16GemmPath::Auto: return "auto";
    case Bf16GemmPath::Amx: return "amx";
    case Bf16GemmPath::Avx512: return "avx512";
    case Bf16GemmPath::Fallback: return "fallback";
  }
  return "?";
}

namespace {

// c (row-major) (+)= a @ b for a BF16 b or an F32 b read as its BF16 rounding.
template <class BMatrix>
void gemm_row_major(MatrixRef<const BFloat16> a, BMatrix b, MatrixRef<float> c, bool accumulate, int threads) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const int64_t ldc = m == 1 ? n : c.row_stride;
  const Operand oa = operand(a, "a");
  const auto ob = operand(b, "b");
  if (k == 0) {
    if (!accumulate) zero(c.data, m, n, ldc);
    return;
  }
  const Bf16GemmPath path = bf16_gemm_path();
  if (path == Bf16GemmPath::Fallback) {
    gemm_fallback(m, n, k, oa, ob, {c.data, m, n, ldc, 1}, accumulate, threads);
    return;
  }
  gemm_native(path, m, n, k, oa, ob, c.data, ldc, accumulate, threads);
}

template <class BMatrix>
void check_sizes(MatrixRef<const BFloat16> a, BMatrix b, MatrixRef<float> c) {
  BRISK_CHECK(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows, "gemm_bf16: sizes do not match: (", a.rows,
              ", ", a.cols, ") @ (", b.rows, ", ", b.cols, ") -> (", c.rows, ", ", c.cols, ")");
}

bool column_major(MatrixRef<float> c) {
  if (c.col_stride == 1 || c.cols == 1) return false;
  BRISK_CHECK(c.row_stride == 1 || c.rows == 1, "gemm_bf16: the output (", c.rows, ", ", c.cols, ") has strides (",
              c.row_stride, ", ", c.col_stride, "); one of them must be 1");
  return true;
}

}  // namespace

void gemm_bf16(MatrixRef<const BFloat16> a, MatrixRef<const BFloat16> b, MatrixRef<float> c, bool accumulate,
               int threads) {
  check_sizes(a, b, c);
  if (c.rows == 0 || c.cols == 0) return;
  if (column_major(c)) {  // the row-major c^T = b^T a^T
    gemm_bf16(transposed(b), transposed(a), {c.data, c.cols, c.rows, c.col_stride, c.row_stride}, accumulate, threads);
    return;
  }
  gemm_row_major(a, b, c, accumulate, threads);
}

void gemm_bf16(MatrixRef<const BFloat16> a, MatrixRef<const float> b, MatrixRef<float> c, bool accumulate,
               int threads) {
  check_sizes(a, b, c);
  if (c.rows == 0 || c.cols == 0) return;
  if (column_major(c)) {  // b would become the A operand: round it into a BF16 copy instead
    std::vector<BFloat16> b16(size_t(b.rows * b.cols));
    for (int64_t i = 0; i < b.rows; ++i) {
      for (int64_t j = 0; j < b.cols; ++j)
        b16[size_t(i * b.cols + j)] = BFloat16(b.data[i * b.row_stride + j * b.col_stride]);
    }
    gemm_bf16(a, MatrixRef<const BFloat16>{b16.data(), b.rows, b.cols, b.cols, 1}, c, accumulate, threads);
    return;
  }
  gemm_row_major(a, b, c, accumulate, threads);
}

void gemm_bf16_reference(MatrixRef<const BFloat16> a, MatrixRef<const BFloat16> b, MatrixRef<float> c,
                         bool accumulate) {
  BRISK_CHECK(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows, "gemm_bf16_reference: sizes do not match: (",
              a.rows, ", ", a.cols, ") @ (", b.rows, ", ", b.cols, ") -> (", c.rows, ", ", c.cols, ")");
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) {
      float* out = c.data + i * c.row_stride + j * c.col_stride;
      float s = accumulate ? *out : 0.0f;
      for (int64_t p = 0; p < a.cols; ++p) {
        s += float(a.data[i * a.row_stride + p * a.col_stride]) * float(b.data[p * b.row_stride + j * b.col_stride]);
      }
      *out = s;
    }
  }
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
