// kernels/cpu/attention.cpp: the CPU kernels of the fused attention op and its backward op
// (F32, F64 and BF16), FlashAttention-2's scheme on tiles of queries and keys, with a
// transposed-tile AVX-512 micro kernel for the F32 forward.
// Not here: the OpDefs and the public function (engine/ops/attention.cpp), the GEMMs
// (kernels/cpu/gemm.h, kernels/cpu/gemm_bf16.h).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/op.h"
#include "engine/random.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/vmath.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports once they are inlined here (a false positive, as in
// kernels/cpu/gemm_f32.cpp).
#pragma GCC diagnostic push
#ifndef __clang__  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace brisk::kernels::cpu {

// Note [Fused attention]
// softmax(q k^T * scale + mask) v without the (T, S) matrix of scores (FlashAttention-2, Dao
// 2023). Each work item is one (leading index n, block of kBq query rows): for each block of kBk
// keys it computes the scores tile with one GEMM, masks it (causal, Bool, additive), and folds
// it into a running row maximum m, a running sum l of exp(score - m) and an output accumulator
// O (rescaled by exp(m_old - m_new) when the maximum grows), O += P v_tile with a second GEMM;
// at the end out = O / l and lse = m + log(l) is saved for backward. Key blocks wholly above the
// causal diagonal are skipped. Dropout drops entries of P (not of l), scaled by 1 / (1 - p),
// with the uniform of score (n, i, j) taken from element (n T + i) S + j of the op's Philox
// stream, so backward regenerates the same mask.
// Backward, per n (FlashAttention-2's): D_i = rowsum(dout_i * out_i); for each key block and
// each query block under it, recompute P = exp(S - lse), then dv += P_drop^T dout,
// dP = dout v^T (times the dropout mask), dS = P * (dP - D) * scale, dq += dS k, dk += dS^T q:
// five GEMMs per tile, memory O(tile), nothing of size (T, S) stored.
// The work items share the threads (forward: n x query blocks; backward: n); each runs its
// GEMMs on its own thread. A row whose keys are all masked gives NaN (0 / 0), as the math form;
// no keys at all (S = 0) give zeros, as the math form's empty product.
//
// BF16. q, k, v (and gout) stay BF16; the tile products go through gemm_bf16
// (kernels/cpu/gemm_bf16.h: AMX where the CPU and OS allow it, else vdpbf16ps, else the F32
// fallback) with F32 results, so the scores, the running max and sum, the output accumulator
// O and lse are F32 (lse is an F32 output: attention_infer). P is rounded to BF16 once per tile
// to be the left operand of P v (as PyTorch's CPU flash kernel does), and out = O / l is
// rounded once. Backward likewise: P and dS are rounded to BF16 as operands of their products,
// dq, dk and dv are summed in F32 scratch per n and rounded once at the end. An additive mask
// may be BF16 or F32 (the public function passes F32). Operands without a unit stride in either
// of their last two dims (an expanded gout) are made dense first: the BF16 GEMM packs only such
// operands. Error against F64: about 1e-2 of the largest output (the inputs' own rounding,
// 2^-9, dominates; opcheck/specs_attention.cpp, tests/test_attention.cpp).
//
// The F32 tile kernel. On a CPU with AVX-512 (and without dropout) F32 runs forward_item_f32 /
// backward_item_f32 instead of gemm<float> per tile: perf showed the GEMM's packing (A and B
// panels, with 16x16 transposes for q k^T) at ~24% of the forward at T = 2048, repeated for
// every tile. The tiles are transposed instead: S^T = k_j (q_i * scale)^T, the query rows in
// the vector lanes. Then (1) every product is a small "broadcast one operand in place, load the
// other in rows" kernel (tile_kernel: 6 rows x 64 columns of c, or 8 x 48, in 24 zmm
// accumulators) that needs no packing: k and v are read in place with their strides (k_j's
// rows broadcast for S^T, v_j's for O^T += v_j^T P^T), and only q * scale is transposed, once
// per work item (forward), or q, k and dout copied and transposed once per n (backward, whose
// five products per tile all take this form: S^T, dv += P^T dout, dP^T = v dout^T,
// dk += dS^T q, dq += dS k); (2) the online softmax works on whole vectors: the running max,
// sum and rescale factor of 16 queries at once, two passes over the tile (the max; then the
// shift, exp and sums) instead of row-by-row scalar bookkeeping; (3) the causal mask of a
// diagonal tile is a contiguous fill per key row. The exp is vmath::exp_sum's, which keeps
// libmvec on its fast path for the -inf of masked scores (vmath::exp sends every vector holding
// one down its scalar path: 27% of the forward until noticed). Transposed copies are laid out
// with a row stride off multiples of 4 KiB (at T = 2048 their rows, 8 KiB apart, shared L1
// sets and slowed the backward's products by half). BRISK_ATTENTION=gemm (read at each call)
// runs the GEMM tiles instead, which examples/bench/bench_attention.cpp times as "before";
// BRISK_GEMM=eigen turns both AVX-512 paths off. F64, BF16 and dropout keep the GEMM tiles
// (a transposed BF16 forward through gemm_bf16 measured 10-20% slower: it packs transposed
// views slowly). Measured (bench_attention, head size 64, causal, T = 256-2048, medians of
// 3 runs on the shared 2-vCPU Xeon): F32 forward 0.74-0.93 and forward + backward 0.81-0.91
// of the GEMM tiles' time, 0.73-0.99 and 0.68-0.97 of PyTorch 2.15's; BF16 0.40-0.59 of the
// old path (F32 on converted inputs), forward 1.0-2.4x PyTorch's AMX kernel, forward +
// backward 0.39-1.0x (docs/performance.md).

namespace {

constexpr int64_t kBq = 128;  // query rows per tile
constexpr int64_t kBk = 128;  // keys per tile

// What a kernel on storage type T sums in: T itself for F32 and F64, F32 for BF16.
template <class T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<BFloat16> {
  using type = float;
};
template <class T>
using acc_t = typename AccOf<T>::type;

// Offsets (elements) of each leading index of an (*, R, C) tensor, and its row / column strides.
struct Layout {
  std::vector<int64_t> base{};
  int64_t rs = 0, cs = 0;
};

Layout layout_of(const Tensor& t) {
  const int64_t lead = t.dim() - 2;
  int64_t n = 1;
  for (int64_t d = 0; d < lead; ++d) n *= t.size(d);
  Layout l;
  l.base.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = lead - 1; d >= 0; --d) {
      off += (rem % t.size(d)) * t.stride(d);
      rem /= t.size(d);
    }
    l.base[size_t(i)] = off;
  }
  l.rs = t.stride(-2);
  l.cs = t.stride(-1);
  return l;
}

// p[j] = exp(p[j] - m) for j < n; returns their sum.
template <class A>
A exp_row(A* p, A m, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    return vmath::exp_sum(p, m, p, n);
  } else {
    A sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      p[j] = std::exp(p[j] - m);
      sum += p[j];
    }
    return sum;
  }
}

// A thread's dropout scratch: a row of uniforms and its keep flags.
struct DropRow {
  std::vector<float> u = std::vector<float>(size_t(kBk));
  std::vector<uint8_t> keep = std::vector<uint8_t>(size_t(kBk));
  const uint8_t* draw(uint64_t seed, uint64_t offset, uint64_t first, int64_t cols, double p) {
    philox_uniforms(seed, offset, first, cols, u.data());
    for (int64_t j = 0; j < cols; ++j) keep[size_t(j)] = double(u[size_t(j)]) >= p;
    return keep.data();
  }
};

// What every tile needs to know. T: the storage type of q, k, v and out; A (acc_t<T>): the
// type of scores, softmax statistics, accumulators and lse.
template <class T>
struct Problem {
  using A = acc_t<T>;
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const void* mask = nullptr;  // Bool, T or A, expanded to (*, T, S); null: none
  bool mask_in_acc = false;    // an additive mask stored in A (an F32 mask with BF16 q), else in T
  Layout lq{}, lk{}, lv{}, lm{};
  int64_t N = 0, T_ = 0, S = 0, D = 0, Dv = 0;
  A scale = 0;
  bool causal = false, additive = false;
  int64_t shift = 0;  // causal: query i attends keys j <= i + shift
  double p = 0;       // dropout
  uint64_t seed = 0, offset = 0;

  A mask_add(int64_t off) const {
    return mask_in_acc ? static_cast<const A*>(mask)[off] : A(static_cast<const T*>(mask)[off]);
  }
};

// Masks scores (query i, keys j0 .. j0 + cols) of item n: x[j * stride] is score (i, j0 + j),
// already scaled; adds the additive mask, puts -inf where a Bool mask or (if `causal`)
// causality forbids.
template <class T>
void mask_scores(const Problem<T>& P, int64_t n, int64_t i, int64_t j0, int64_t cols, acc_t<T>* x, int64_t stride,
                 bool causal) {
  using A = acc_t<T>;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  if (P.mask) {
    const int64_t off = P.lm.base[size_t(n)] + i * P.lm.rs + j0 * P.lm.cs;
    if (P.additive) {
      for (int64_t j = 0; j < cols; ++j) x[j * stride] += P.mask_add(off + j * P.lm.cs);
    } else {
      const bool* m = static_cast<const bool*>(P.mask) + off;
      for (int64_t j = 0; j < cols; ++j)
        if (!m[j * P.lm.cs]) x[j * stride] = neg_inf;
    }
  }
  if (causal) {
    for (int64_t j = std::max<int64_t>(0, i + P.shift + 1 - j0); j < cols; ++j) x[j * stride] = neg_inf;
  }
}

// The scores tile s (rows x cols, row stride kBk) of queries i0.. and keys j0.. of item n:
// q k^T * scale, masked (-inf where not attended), summed in A.
template <class T>
void scores_tile(const Problem<T>& P, int64_t n, int64_t i0, int64_t rows, int64_t j0, int64_t cols, acc_t<T>* s) {
  using A = acc_t<T>;
  const MatrixRef<const T> qm{P.q + P.lq.base[size_t(n)] + i0 * P.lq.rs, rows, P.D, P.lq.rs, P.lq.cs};
  const MatrixRef<const T> kt{P.k + P.lk.base[size_t(n)] + j0 * P.lk.rs, P.D, cols, P.lk.cs, P.lk.rs};
  gemm_into<T, A>(qm, kt, MatrixRef<A>{s, rows, cols, kBk, 1}, false, 1);
  for (int64_t r = 0; r < rows; ++r) {
    A* row = s + r * kBk;
    const A scale = P.scale;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] *= scale;
    if (P.mask || P.causal) mask_scores(P, n, i0 + r, j0, cols, row, 1, P.causal);
  }
}

// Whether the key block j0.. lies wholly above the causal diagonal of query rows i0..i0+rows-1.
template <class T>
bool above_diagonal(const Problem<T>& P, int64_t i0, int64_t rows, int64_t j0) {
  return P.causal && j0 > i0 + rows - 1 + P.shift;
}

// dst[r * ld + j] = src[r * ld + j] rounded to T, for r < rows, j < cols (BF16's operands of
// the second product).
template <class T, class A>
void round_tile(const A* src, T* dst, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const A* s = src + r * ld;
    T* d = dst + r * ld;
    if constexpr (std::is_same_v<T, BFloat16>) {
      for (int64_t j = 0; j < cols; ++j) d[j].bits = BFloat16::from_float(s[j]);
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = T(s[j]);
    }
  }
}

// One work item with the GEMMs of kernels/cpu/gemm.h / gemm_bf16.h: (n, queries i0..).
template <class T>
void forward_item(const Problem<T>& P, int64_t n, int64_t i0, T* out, acc_t<T>* lse, std::vector<acc_t<T>>& work,
                  std::vector<T>& narrow, DropRow& drop) {
  using A = acc_t<T>;
  constexpr bool kNarrow = !std::is_same_v<T, A>;
  const int64_t rows = std::min(kBq, P.T_ - i0);
  work.assign(size_t(kBq * kBk + kBq * P.Dv + 2 * kBq), A(0));
  if constexpr (kNarrow) narrow.resize(size_t(kBq * kBk));
  A* s = work.data();
  A* o = s + kBq * kBk;
  A* m = o + kBq * P.Dv;
  A* l = m + kBq;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  std::fill(m, m + rows, neg_inf);
  const A keep_scale = A(1.0 / (1.0 - P.p));
  for (int64_t j0 = 0; j0 < P.S; j0 += kBk) {
    if (above_diagonal(P, i0, rows, j0)) break;
    const int64_t cols = std::min(kBk, P.S - j0);
    scores_tile(P, n, i0, rows, j0, cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      A* row = s + r * kBk;
      // (A NaN score makes the row NaN through exp below, whatever the max.)
      A mx = neg_inf;
      if constexpr (std::is_same_v<A, float>) {
        mx = vmath::max(row, cols);
      } else {
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, row[j]);
      }
      const A m_new = std::max(m[r], mx);
      if (m_new == neg_inf) {  // nothing attended so far: no weight
        std::fill(row, row + cols, A(0));
        continue;
      }
      const A alpha = std::exp(m[r] - m_new);
      l[r] = l[r] * alpha + exp_row(row, m_new, cols);
      m[r] = m_new;
      if (alpha != A(1)) {
        A* orow = o + r * P.Dv;
        for (int64_t d = 0; d < P.Dv; ++d) orow[d] *= alpha;
      }
      if (P.p > 0) {
        const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * P.T_ + i0 + r) * P.S + j0), cols, P.p);
        for (int64_t j = 0; j < cols; ++j) row[j] = keep[j] ? row[j] * keep_scale : A(0);
      }
    }
    const T* pm = nullptr;
    if constexpr (kNarrow) {
      round_tile(s, narrow.data(), rows, cols, kBk);
      pm = narrow.data();
    } else {
      pm = s;
    }
    const MatrixRef<const T> vm{P.v + P.lv.base[size_t(n)] + j0 * P.lv.rs, cols, P.Dv, P.lv.rs, P.lv.cs};
    gemm_into<T, A>(MatrixRef<const T>{pm, rows, cols, kBk, 1}, vm, MatrixRef<A>{o, rows, P.Dv, P.Dv, 1}, true, 1);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const A inv = A(1) / l[r];  // 0 / 0 = NaN for a row with nothing attended, as the math form
    T* dst = out + ((n * P.T_) + i0 + r) * P.Dv;
    for (int64_t d = 0; d < P.Dv; ++d) dst[d] = T(o[r * P.Dv + d] * inv);
    lse[n * P.T_ + i0 + r] = m[r] + std::log(l[r]);
  }
}

// ---- the F32 forward on transposed tiles (Note [Fused attention], "The F32 tile kernel")

// c (MR, 16 NV) (+)= a (MR, kd) @ b (kd, 16 NV): a read in place, element (i, p) at
// a[i * a_rs + p * a_cs] (broadcast), b in rows of ldb floats; cols: the columns of c kept
// (the rest of the last vector is computed but not stored).
template <int MR, int NV>
__attribute__((target("avx512f"))) void tile_kernel(int64_t kd, const float* a, int64_t a_rs, int64_t a_cs,
                                                    const float* b, int64_t ldb, float* c, int64_t ldc, int cols,
                                                    bool accumulate) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kd; ++p) {
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + p * ldb + 16 * v);
    const float* ap = a + p * a_cs;
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      const __mmask16 lanes = first_lanes(cols - 16 * v);
      float* cp = c + r * ldc + 16 * v;
      const __m512 x = accumulate ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(lanes, cp)) : acc[r][v];
      _mm512_mask_storeu_ps(cp, lanes, x);
    }
  }
}

// The rows of one strip of c, MR at a time, then the rest.
template <int MR, int NV>
void tile_rows(int64_t m, int64_t kd, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
               int64_t ldc, int cols, bool accumulate) {
  int64_t i = 0;
  for (; i + MR <= m; i += MR)
    tile_kernel<MR, NV>(kd, a + i * a_rs, a_rs, a_cs, b, ldb, c + i * ldc, ldc, cols, accumulate);
  a += i * a_rs;
  c += i * ldc;
  switch (m - i) {  // (never MR or more)
    case 1: tile_kernel<1, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 2: tile_kernel<2, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 3: tile_kernel<3, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 4: tile_kernel<4, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 5: tile_kernel<5, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 6: tile_kernel<6, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    case 7: tile_kernel<7, NV>(kd, a, a_rs, a_cs, b, ldb, c, ldc, cols, accumulate); break;
    default: break;
  }
}

// c (m, n) (+)= a (m, kd) @ b (kd, n), n a multiple of 16, b's rows padded to whole vectors:
// strips of columns (outer: the strip of b stays in L1) over the rows of a (inner). Strips of
// 64 (6 rows x 4 vectors: 24 FMAs per 10 loads) where n is a multiple of 64 (head size 64, 128
// queries), else of up to 48 (8 x 3), cut evenly (n = 64 as 48 + 16 ran its last strip at 8
// FMAs per 9 loads).
void tile_gemm(int64_t m, int64_t n, int64_t kd, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (n % 64 == 0) {
    for (int64_t j = 0; j < n; j += 64) tile_rows<6, 4>(m, kd, a, a_rs, a_cs, b + j, ldb, c + j, ldc, 64, accumulate);
    return;
  }
  const int64_t strips = (n + 47) / 48, width = ((n + strips - 1) / strips + 15) / 16 * 16;
  for (int64_t j = 0; j < n; j += width) {
    const int w = int(std::min<int64_t>(width, n - j));
    if (w > 32) {
      tile_rows<8, 3>(m, kd, a, a_rs, a_cs, b + j, ldb, c + j, ldc, w, accumulate);
    } else if (w > 16) {
      tile_rows<8, 2>(m, kd, a, a_rs, a_cs, b + j, ldb, c + j, ldc, w, accumulate);
    } else {
      tile_rows<8, 1>(m, kd, a, a_rs, a_cs, b + j, ldb, c + j, ldc, w, accumulate);
    }
  }
}

// One online-softmax step over the transposed scores st (cols rows of nr lanes, row stride
// kBq; lane r is query r): the running max m and sum l (nr lanes) take the tile in, alpha gets
// the factor for the accumulator's old columns, and st becomes P^T. Two passes over the rows
// (the max; then shift, exp and the sums), each with its nr / 16 vectors in registers.
// shift: nr lanes of scratch.
__attribute__((target("avx512f"))) void softmax_columns(float* st, int64_t cols, int64_t nr, float* m, float* l,
                                                        float* alpha, float* shift) {
  constexpr int kV = int(kBq / 16);
  const int nv = int(nr / 16);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 acc[kV];
  for (int v = 0; v < kV; ++v) acc[v] = neg_inf;
  for (int64_t j = 0; j < cols; ++j) {
    const float* row = st + j * kBq;
    for (int v = 0; v < nv; ++v) acc[v] = _mm512_max_ps(acc[v], _mm512_loadu_ps(row + 16 * v));
  }
  for (int v = 0; v < nv; ++v) {
    const __m512 m_old = _mm512_loadu_ps(m + 16 * v);
    const __m512 m_new = _mm512_max_ps(m_old, acc[v]);
    // A lane with nothing attended so far shifts by 0: its exp(-inf) stay 0 and its alpha is 0.
    const __mmask16 none = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ);
    const __m512 sh = _mm512_mask_blend_ps(none, m_new, _mm512_setzero_ps());
    _mm512_storeu_ps(m + 16 * v, m_new);
    _mm512_storeu_ps(shift + 16 * v, sh);
    _mm512_storeu_ps(alpha + 16 * v, _mm512_sub_ps(m_old, sh));
    acc[v] = _mm512_setzero_ps();
  }
  // (exp_sum, not exp: its exp sends the -inf of masked scores down the fast path.)
  vmath::exp_sum(alpha, 0.0f, alpha, nr);
  for (int64_t j = 0; j < cols; ++j) {
    float* row = st + j * kBq;
    for (int v = 0; v < nv; ++v)
      _mm512_storeu_ps(row + 16 * v, _mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), _mm512_loadu_ps(shift + 16 * v)));
    vmath::exp_sum(row, 0.0f, row, nr);
    for (int v = 0; v < nv; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(row + 16 * v));
  }
  for (int v = 0; v < nv; ++v) {
    const __m512 a = _mm512_loadu_ps(alpha + 16 * v);
    _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * v), a, acc[v]));
  }
}

// Whether the F32 forward runs the transposed tiles: AVX-512 (as brisk's F32 GEMM decides it,
// so BRISK_GEMM=eigen turns both off) unless BRISK_ATTENTION=gemm asks for the GEMM tiles
// (read at each call, so that examples/bench/bench_attention.cpp times both in one run).
bool f32_tiles_transposed() {
  const char* e = std::getenv("BRISK_ATTENTION");
  return !(e && std::string_view(e) == "gemm") && f32_gemm_path() == F32GemmPath::Avx512;
}

// forward_item for F32 without dropout on a CPU with AVX-512: the same tiles, transposed.
void forward_item_f32(const Problem<float>& P, int64_t n, int64_t i0, float* out, float* lse,
                      std::vector<float>& work) {
  const int64_t rows = std::min(kBq, P.T_ - i0), nr = (rows + 15) / 16 * 16, D = P.D, Dv = P.Dv;
  work.assign(size_t(D * kBq + kBk * kBq + Dv * kBq + 5 * kBq), 0.0f);
  float* qt = work.data();     // q^T * scale: [D][kBq], queries past `rows` zero
  float* st = qt + D * kBq;    // S^T, then P^T: [key][kBq]
  float* ot = st + kBk * kBq;  // O^T: [Dv][kBq]
  float* m = ot + Dv * kBq;
  float* l = m + kBq;
  float* alpha = l + kBq;
  float* shift = alpha + kBq;
  std::fill(m, m + kBq, -std::numeric_limits<float>::infinity());
  // The scale goes into q once (exact for the default 1 / sqrt(D) at D = 4^k; else an ulp from
  // scaling the dot products, as PyTorch's math, which scales q and k).
  const float* q = P.q + P.lq.base[size_t(n)] + i0 * P.lq.rs;
  for (int64_t d = 0; d < D; ++d) {
    float* dst = qt + d * kBq;
    const float* src = q + d * P.lq.cs;
    for (int64_t r = 0; r < rows; ++r) dst[r] = src[r * P.lq.rs] * P.scale;
  }
  const float* kn = P.k + P.lk.base[size_t(n)];
  const float* vn = P.v + P.lv.base[size_t(n)];
  for (int64_t j0 = 0; j0 < P.S; j0 += kBk) {
    if (above_diagonal(P, i0, rows, j0)) break;
    const int64_t cols = std::min(kBk, P.S - j0);
    // S^T (cols, nr) = k_j (cols, D) @ (q^T * scale) (D, nr): k read in place.
    tile_gemm(cols, nr, D, kn + j0 * P.lk.rs, P.lk.rs, P.lk.cs, qt, kBq, st, kBq, false);
    if (P.mask) {
      for (int64_t r = 0; r < rows; ++r) mask_scores(P, n, i0 + r, j0, cols, st + r, kBq, false);
    }
    if (P.causal) {  // key j0 + j is above the diagonal for the queries r < j0 + j - shift - i0
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t hidden = std::min(nr, j0 + j - P.shift - i0);
        if (hidden > 0) std::fill(st + j * kBq, st + j * kBq + hidden, -std::numeric_limits<float>::infinity());
      }
    }
    softmax_columns(st, cols, nr, m, l, alpha, shift);
    for (int64_t d = 0; d < Dv; ++d) {
      float* row = ot + d * kBq;
#pragma omp simd
      for (int64_t r = 0; r < nr; ++r) row[r] *= alpha[r];
    }
    // O^T (Dv, nr) += v_j^T (Dv, cols) @ P^T (cols, nr): v read in place.
    tile_gemm(Dv, nr, cols, vn + j0 * P.lv.rs, P.lv.cs, P.lv.rs, st, kBq, ot, kBq, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / l[r];  // 0 / 0 = NaN for a row with nothing attended, as the math form
    float* dst = out + (n * P.T_ + i0 + r) * Dv;
    for (int64_t d = 0; d < Dv; ++d) dst[d] = ot[d * kBq + r] * inv;
    lse[n * P.T_ + i0 + r] = m[r] + std::log(l[r]);
  }
}

template <class T>
Problem<T> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Attrs& attrs) {
  using A = acc_t<T>;
  Problem<T> P{};
  P.q = static_cast<const T*>(q.data_ptr());
  P.k = static_cast<const T*>(k.data_ptr());
  P.v = static_cast<const T*>(v.data_ptr());
  P.mask = mask ? mask->data_ptr() : nullptr;
  P.mask_in_acc = mask && mask->dtype() != DType::Bool && mask->dtype() != q.dtype();
  P.lq = layout_of(q);
  P.lk = layout_of(k);
  P.lv = layout_of(v);
  if (mask) P.lm = layout_of(*mask);
  P.N = int64_t(P.lq.base.size());
  P.T_ = q.size(-2);
  P.S = k.size(-2);
  P.D = q.size(-1);
  P.Dv = v.size(-1);
  P.scale = A(attrs.b);
  P.causal = attrs.flag;
  P.shift = attrs.start;
  P.additive = attrs.flag2;
  P.p = attrs.a;
  P.seed = attrs.seed;
  P.offset = attrs.offset;
  return P;
}

// A GEMM operand: t itself where one of its last two dims has unit stride, else a dense copy
// (the BF16 GEMM packs only such operands; gout is often an expanded scalar with strides 0).
Tensor operand(const Tensor& t) {
  if (t.dim() < 2 || t.stride(-1) == 1 || t.stride(-2) == 1 || t.numel() == 0) return t;
  return t.contiguous();
}

// Runs f(T{}) for the kernels' storage type of dtype dt.
template <class F>
void with_storage_type(DType dt, F&& f) {
  switch (dt) {
    case DType::F64: f(double{}); break;
    case DType::BF16: f(BFloat16{}); break;
    default: f(float{}); break;
  }
}

// in: q, k, v[, mask] -> out[0] (*, T, Dv), out[1] lse (*, T); both fresh and dense.
void attention_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  with_storage_type(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const Tensor q = operand(in[0]), k = operand(in[1]), v = operand(in[2]);
    const Problem<T> P = problem_of<T>(q, k, v, in.size() == 4 ? &in[3] : nullptr, attrs);
    T* o = static_cast<T*>(out[0].data_ptr());
    A* lse = static_cast<A*>(out[1].data_ptr());
    const int64_t blocks = (P.T_ + kBq - 1) / kBq, items = P.N * blocks;
    if (items == 0) return;
    if (P.S == 0) {  // no keys: an empty sum, zeros, as the math form's (T, 0) @ (0, Dv)
      std::fill(o, o + P.N * P.T_ * P.Dv, T(0.0f));
      std::fill(lse, lse + P.N * P.T_, -std::numeric_limits<A>::infinity());
      return;
    }
    bool transposed = false;
    if constexpr (std::is_same_v<T, float>) transposed = P.p == 0 && f32_tiles_transposed();
    const int nt = int(std::min<int64_t>(items, omp_in_parallel() ? 1 : omp_get_max_threads()));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      std::vector<A> work;
      std::vector<T> narrow;
      DropRow drop;
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < items; ++it) {
        const int64_t n = it / blocks, i0 = (it % blocks) * kBq;
        if constexpr (std::is_same_v<T, float>) {
          if (transposed) {
            forward_item_f32(P, n, i0, o, lse, work);
            continue;
          }
        }
        forward_item(P, n, i0, o, lse, work, narrow, drop);
      }
    }
  });
}

template <class T>
void backward_item(const Problem<T>& P, int64_t n, const T* gout, const Layout& lg, const T* outp, const acc_t<T>* lse,
                   T* dq, T* dk, T* dv, std::vector<acc_t<T>>& work, std::vector<T>& narrow, DropRow& drop) {
  using A = acc_t<T>;
  constexpr bool kNarrow = !std::is_same_v<T, A>;
  const int64_t T_ = P.T_, S = P.S, D = P.D, Dv = P.Dv;
  // BF16 sums dq, dk and dv in F32 scratch and rounds once at the end.
  const int64_t acc_elems = kNarrow ? T_ * D + S * D + S * Dv : 0;
  work.assign(size_t(3 * kBq * kBk + T_ + acc_elems), A(0));
  if constexpr (kNarrow) narrow.resize(size_t(2 * kBq * kBk));
  A* s = work.data();         // scores, then P
  A* pd = s + kBq * kBk;      // P with dropout applied
  A* ds = pd + kBq * kBk;     // dP, then dS
  A* delta = ds + kBq * kBk;  // D_i = rowsum(dout_i * out_i)
  const T* go_n = gout + lg.base[size_t(n)];
  for (int64_t i = 0; i < T_; ++i) {
    A acc = 0;
    const T* o = outp + (n * T_ + i) * Dv;
    for (int64_t d = 0; d < Dv; ++d) acc += A(go_n[i * lg.rs + d * lg.cs]) * A(o[d]);
    delta[i] = acc;
  }
  A *dq_n = nullptr, *dk_n = nullptr, *dv_n = nullptr;
  if constexpr (kNarrow) {
    dq_n = delta + T_;
    dk_n = dq_n + T_ * D;
    dv_n = dk_n + S * D;
  } else {
    dq_n = dq + n * T_ * D;
    dk_n = dk + n * S * D;
    dv_n = dv + n * S * Dv;
    std::fill(dq_n, dq_n + T_ * D, A(0));
    std::fill(dk_n, dk_n + S * D, A(0));
    std::fill(dv_n, dv_n + S * Dv, A(0));
  }
  const A keep_scale = A(1.0 / (1.0 - P.p));
  for (int64_t j0 = 0; j0 < S; j0 += kBk) {
    const int64_t cols = std::min(kBk, S - j0);
    const MatrixRef<const T> kj{P.k + P.lk.base[size_t(n)] + j0 * P.lk.rs, cols, D, P.lk.rs, P.lk.cs};
    const MatrixRef<const T> vjt{P.v + P.lv.base[size_t(n)] + j0 * P.lv.rs, Dv, cols, P.lv.cs, P.lv.rs};
    for (int64_t i0 = 0; i0 < T_; i0 += kBq) {
      const int64_t rows = std::min(kBq, T_ - i0);
      if (above_diagonal(P, i0, rows, j0)) continue;
      scores_tile(P, n, i0, rows, j0, cols, s);
      for (int64_t r = 0; r < rows; ++r) {
        A* row = s + r * kBk;
        exp_row(row, lse[n * T_ + i0 + r], cols);  // P = exp(S - lse)
        A* prow = pd + r * kBk;
        if (P.p > 0) {
          const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * T_ + i0 + r) * S + j0), cols, P.p);
          for (int64_t j = 0; j < cols; ++j) prow[j] = keep[j] ? row[j] * keep_scale : A(0);
        }
      }
      const A* pdrop = P.p > 0 ? pd : s;
      const T* pdrop_t = nullptr;  // P_drop as the products' operand
      if constexpr (kNarrow) {
        round_tile(pdrop, narrow.data(), rows, cols, kBk);
        pdrop_t = narrow.data();
      } else {
        pdrop_t = pdrop;
      }
      const MatrixRef<const T> go{go_n + i0 * lg.rs, rows, Dv, lg.rs, lg.cs};
      // dv_j += P_drop^T dout_i
      gemm_into<T, A>(MatrixRef<const T>{pdrop_t, cols, rows, 1, kBk}, go,
                      MatrixRef<A>{dv_n + j0 * Dv, cols, Dv, Dv, 1}, true, 1);
      // dP = dout_i v_j^T (times the mask), dS = P (dP - D_i) scale
      gemm_into<T, A>(go, vjt, MatrixRef<A>{ds, rows, cols, kBk, 1}, false, 1);
      for (int64_t r = 0; r < rows; ++r) {
        A* dsrow = ds + r * kBk;
        const A* prow = s + r * kBk;
        const A di = delta[i0 + r];
        if (P.p > 0) {
          const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * T_ + i0 + r) * S + j0), cols, P.p);
          for (int64_t j = 0; j < cols; ++j) dsrow[j] = keep[j] ? dsrow[j] * keep_scale : A(0);
        }
        const A scale = P.scale;
        // A masked score has P = 0: no gradient, even where dP is not finite.
        for (int64_t j = 0; j < cols; ++j) dsrow[j] = prow[j] == A(0) ? A(0) : prow[j] * (dsrow[j] - di) * scale;
      }
      const T* ds_t = nullptr;
      if constexpr (kNarrow) {
        round_tile(ds, narrow.data() + kBq * kBk, rows, cols, kBk);
        ds_t = narrow.data() + kBq * kBk;
      } else {
        ds_t = ds;
      }
      // dq_i += dS k_j; dk_j += dS^T q_i
      gemm_into<T, A>(MatrixRef<const T>{ds_t, rows, cols, kBk, 1}, kj, MatrixRef<A>{dq_n + i0 * D, rows, D, D, 1},
                      true, 1);
      const MatrixRef<const T> qi{P.q + P.lq.base[size_t(n)] + i0 * P.lq.rs, rows, D, P.lq.rs, P.lq.cs};
      gemm_into<T, A>(MatrixRef<const T>{ds_t, cols, rows, 1, kBk}, qi, MatrixRef<A>{dk_n + j0 * D, cols, D, D, 1},
                      true, 1);
    }
  }
  if constexpr (kNarrow) {
    round_tile(dq_n, dq + n * T_ * D, 1, T_ * D, 0);
    round_tile(dk_n, dk + n * S * D, 1, S * D, 0);
    round_tile(dv_n, dv + n * S * Dv, 1, S * Dv, 0);
  }
}

// backward_item for F32 without dropout on a CPU with AVX-512, on transposed tiles as the
// forward: per n, q * scale and dout are transposed once ([D][T], [Dv][T]) and q, k and dout
// copied with rows padded to whole vectors; each tile then runs five tile_gemm products with
// the query rows in vector lanes (S^T = k q^T, dv += P^T dout, dP^T = v dout^T,
// dk += dS^T q, dq += dS k), and the softmax's P^T = exp(S^T - lse) and dS^T = P^T (dP^T - D)
// scale work on whole vectors. dq, dk and dv are summed in padded F32 scratch, copied out at
// the end.
__attribute__((target("avx512f"))) void backward_item_f32(const Problem<float>& P, int64_t n, const float* gout,
                                                          const Layout& lg, const float* outp, const float* lse,
                                                          float* dq, float* dk, float* dv, std::vector<float>& work) {
  const int64_t T_ = P.T_, S = P.S, D = P.D, Dv = P.Dv;
  const int64_t Tp = (T_ + 15) / 16 * 16, Dp = (D + 15) / 16 * 16, Dvp = (Dv + 15) / 16 * 16;
  // The transposed copies' row stride: not a multiple of 4 KiB, whose rows would all fall in
  // the same L1 sets (T = 2048: 8 KiB apart; the S^T and dP^T products slowed by half).
  const int64_t ldt = Tp + 16;
  const int64_t sizes[] = {D * ldt, Dv * ldt, Tp * Dp,   S * Dp,    Tp * Dvp, Tp * Dp,
                           S * Dp,  S * Dvp,  kBk * kBq, kBk * kBq, Tp,       Tp};
  int64_t total = 0;
  for (int64_t z : sizes) total += z;
  work.assign(size_t(total), 0.0f);
  float* qst = work.data();        // q^T * scale [D][ldt]
  float* gt = qst + D * ldt;       // dout^T [Dv][ldt]
  float* qp = gt + Dv * ldt;       // q [Tp][Dp]
  float* kp = qp + Tp * Dp;        // k [S][Dp]
  float* gp = kp + S * Dp;         // dout [Tp][Dvp]
  float* dqa = gp + Tp * Dvp;      // dq [Tp][Dp]
  float* dka = dqa + Tp * Dp;      // dk [S][Dp]
  float* dva = dka + S * Dp;       // dv [S][Dvp]
  float* st = dva + S * Dvp;       // S^T, then P^T: [key][kBq]
  float* dst = st + kBk * kBq;     // dP^T, then dS^T
  float* lse_n = dst + kBk * kBq;  // lse of n; +inf past T (P = 0 there)
  float* delta = lse_n + Tp;       // D_i = rowsum(dout_i * out_i); 0 past T
  const float* qn = P.q + P.lq.base[size_t(n)];
  const float* kn = P.k + P.lk.base[size_t(n)];
  const float* vn = P.v + P.lv.base[size_t(n)];
  const float* gn = gout + lg.base[size_t(n)];
  for (int64_t i = 0; i < T_; ++i) {
    for (int64_t d = 0; d < D; ++d) {
      const float x = qn[i * P.lq.rs + d * P.lq.cs];
      qp[i * Dp + d] = x;
      qst[d * ldt + i] = x * P.scale;
    }
    float acc = 0;
    const float* o = outp + (n * T_ + i) * Dv;
    for (int64_t d = 0; d < Dv; ++d) {
      const float g = gn[i * lg.rs + d * lg.cs];
      gp[i * Dvp + d] = g;
      gt[d * ldt + i] = g;
      acc += g * o[d];
    }
    delta[i] = acc;
    lse_n[i] = lse[n * T_ + i];
  }
  for (int64_t i = T_; i < Tp; ++i) lse_n[i] = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < S; ++j) {
    for (int64_t d = 0; d < D; ++d) kp[j * Dp + d] = kn[j * P.lk.rs + d * P.lk.cs];
  }
  const __m512 scale = _mm512_set1_ps(P.scale), zero = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < S; j0 += kBk) {
    const int64_t cols = std::min(kBk, S - j0);
    for (int64_t i0 = 0; i0 < T_; i0 += kBq) {
      const int64_t rows = std::min(kBq, T_ - i0), nr = (rows + 15) / 16 * 16;
      if (above_diagonal(P, i0, rows, j0)) continue;
      // S^T (cols, nr) = k_j (q_i * scale)^T, masked; P^T = exp(S^T - lse)
      tile_gemm(cols, nr, D, kp + j0 * Dp, Dp, 1, qst + i0, ldt, st, kBq, false);
      if (P.mask) {
        for (int64_t r = 0; r < rows; ++r) mask_scores(P, n, i0 + r, j0, cols, st + r, kBq, false);
      }
      if (P.causal) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t hidden = std::min(nr, j0 + j - P.shift - i0);
          if (hidden > 0) std::fill(st + j * kBq, st + j * kBq + hidden, -std::numeric_limits<float>::infinity());
        }
      }
      for (int64_t j = 0; j < cols; ++j) {
        float* row = st + j * kBq;
        for (int64_t r = 0; r < nr; r += 16)
          _mm512_storeu_ps(row + r, _mm512_sub_ps(_mm512_loadu_ps(row + r), _mm512_loadu_ps(lse_n + i0 + r)));
        vmath::exp_sum(row, 0.0f, row, nr);  // (exp_sum: -inf and large negatives on the fast path)
      }
      // dv_j += P^T dout_i
      tile_gemm(cols, Dvp, nr, st, kBq, 1, gp + i0 * Dvp, Dvp, dva + j0 * Dvp, Dvp, true);
      // dP^T = v_j dout_i^T; dS^T = P^T (dP^T - D) scale (0 where P = 0, even if dP is not finite)
      tile_gemm(cols, nr, Dv, vn + j0 * P.lv.rs, P.lv.rs, P.lv.cs, gt + i0, ldt, dst, kBq, false);
      for (int64_t j = 0; j < cols; ++j) {
        const float* prow = st + j * kBq;
        float* drow = dst + j * kBq;
        for (int64_t r = 0; r < nr; r += 16) {
          const __m512 p = _mm512_loadu_ps(prow + r);
          const __m512 ds = _mm512_mul_ps(
              _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(drow + r), _mm512_loadu_ps(delta + i0 + r))), scale);
          const __mmask16 live = _mm512_cmp_ps_mask(p, zero, _CMP_NEQ_UQ);
          _mm512_storeu_ps(drow + r, _mm512_maskz_mov_ps(live, ds));
        }
      }
      // dk_j += dS^T q_i; dq_i += dS k_j
      tile_gemm(cols, Dp, nr, dst, kBq, 1, qp + i0 * Dp, Dp, dka + j0 * Dp, Dp, true);
      tile_gemm(rows, Dp, cols, dst, 1, kBq, kp + j0 * Dp, Dp, dqa + i0 * Dp, Dp, true);
    }
  }
  for (int64_t i = 0; i < T_; ++i) std::copy(dqa + i * Dp, dqa + i * Dp + D, dq + (n * T_ + i) * D);
  for (int64_t j = 0; j < S; ++j) {
    std::copy(dka + j * Dp, dka + j * Dp + D, dk + (n * S + j) * D);
    std::copy(dva + j * Dvp, dva + j * Dvp + Dv, dv + (n * S + j) * Dv);
  }
}

// in: gout, q, k, v, out, lse[, mask] -> dq, dk, dv (fresh and dense).
void attention_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  with_storage_type(in[1].dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const Tensor q = operand(in[1]), k = operand(in[2]), v = operand(in[3]), g = operand(in[0]);
    const Problem<T> P = problem_of<T>(q, k, v, in.size() == 7 ? &in[6] : nullptr, attrs);
    const Tensor o = in[4].contiguous(), lse = in[5].contiguous();
    const Layout lg = layout_of(g);
    const T* go = static_cast<const T*>(g.data_ptr());
    T* dq = static_cast<T*>(out[0].data_ptr());
    T* dk = static_cast<T*>(out[1].data_ptr());
    T* dv = static_cast<T*>(out[2].data_ptr());
    if (P.S == 0 || P.T_ == 0) {
      std::fill(dq, dq + P.N * P.T_ * P.D, T(0.0f));
      std::fill(dk, dk + P.N * P.S * P.D, T(0.0f));
      std::fill(dv, dv + P.N * P.S * P.Dv, T(0.0f));
      return;
    }
    bool transposed = false;
    if constexpr (std::is_same_v<T, float>) transposed = P.p == 0 && f32_tiles_transposed();
    const int nt = int(std::min<int64_t>(P.N, omp_in_parallel() ? 1 : omp_get_max_threads()));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      std::vector<A> work;
      std::vector<T> narrow;
      DropRow drop;
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < P.N; ++n) {
        if constexpr (std::is_same_v<T, float>) {
          if (transposed) {
            backward_item_f32(P, n, go, lg, static_cast<const T*>(o.data_ptr()), static_cast<const A*>(lse.data_ptr()),
                              dq, dk, dv, work);
            continue;
          }
        }
        backward_item(P, n, go, lg, static_cast<const T*>(o.data_ptr()), static_cast<const A*>(lse.data_ptr()), dq, dk,
                      dv, work, narrow, drop);
      }
    }
  });
}

}  // namespace

void register_attention() {
  register_kernel(OpId::Attention, DeviceType::CPU, attention_kernel);
  register_kernel(OpId::AttentionBackward, DeviceType::CPU, attention_backward_kernel);
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
