// kernels/cpu/gemm_f32.cpp: the F32 GEMM of kernels/cpu/gemm_f32.h: run-time path choice, the
// AVX-512 micro kernel (8 rows x 48 columns of c in 24 zmm accumulators), the packing routines
// (row-major, column-major and general strides; 16x16 in-register transposes for the operands
// that arrive across their panel layout), and the cache-blocked driver with its 2-D thread
// split over shared packed panels. Note [F32 GEMM].
// Not here: the Eigen fallback, GEMV and the checks of gemm<float> (kernels/cpu/gemm.cpp).
#include "kernels/cpu/gemm_f32.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/scratch.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized and -Wuninitialized report once they are inlined here (false
// positives, as in gemm.cpp).
#pragma GCC diagnostic push
#ifndef __clang__  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace brisk::kernels::cpu {

// Note [F32 GEMM]
// c (M, N) (+)= a (M, K) @ b (K, N), row-major c, in the Goto/BLIS structure:
//   for each NC columns (jc) and KC depth (pc): pack the B panel (KC x NC) into sub-panels of
//     NR = 48 columns, [k][48] each (three zmm vectors per k);
//     for each chunk of rows (ic): pack the A block into micro-panels of MR = 8 rows,
//       [k][8] each; then the micro kernel sweeps the NR strips (jr, outer) and MR panels
//       (ir, inner): a B micro-panel (KC x 48) is reused from L1 while the A block streams
//       from L2 (prefetched 8 k ahead), and each c tile is loaded and stored once per KC slice.
// The micro kernel keeps 8 x 3 zmm accumulators, loads three B vectors and broadcasts 8 A
// values per k: 24 FMAs against 11 loads, so the two FMA ports are the limit. Measured from L1
// (one thread, CPU time, FMA peak ~214 GFLOP/s): 14x32 180, 12x32 172, 8x48 189, 6x64 179
// GFLOP/s; with the A block streaming from L2 and c rows 4 KiB apart (ldc = 1024) 14x32 fell to
// 138-144 while 12x32, 8x48 and 6x64 kept 167-177: 14 rows of c at one L1 set overflow its 12
// ways. In the whole GEMM (bench_matmul --cpu-time, one thread, two runs) 8x48 beat 12x32 by
// 3-10% at n = 256-2048 and on the MLP's products and matched 6x64, which lost on AB^T. With
// MR = 8, M = 128 is 16 whole panels; N = 256 and 784 end in a 16-column strip, which runs a
// one-vector kernel (and 17-32 columns a two-vector one), so no FMA is spent on padding there.
// Edges: packing pads A to whole micro-panels and B to whole sub-panels with zeros, so the
// kernel never tests an edge in its loop; only its loads and stores of c are masked. beta is 0
// or 1: the first KC slice stores (no zeroing pass over c) unless the caller accumulates.
// Operands: each packing routine reads a unit-stride dim with vector loads (the panel layout's
// direction directly, the other through 16x16 in-register transposes), and any other strides
// element by element, so transposed views are never copied first.
// Blocking (this CPU: 48 KiB L1d, 2 MiB L2 per core): KC = 256 (balanced: K = 784 runs as
// 4 x 196), MC = 672 rows (an A block of 672 KiB in L2), NC = 4096 (the B panel, in L3).
// Threads (one OpenMP team): all threads pack each B panel and A chunk together (each its
// share of the sub-panels), meet at one barrier, then each computes its own 2-D tile of c:
// the chunk's grid of MR x NR tiles is cut tm x tn ways (tm * tn = threads), the shape with the
// fewest tiles per thread (rows on a tie). Panels are double-buffered, so one barrier per
// packing step is enough: a buffer is rewritten only two steps later, after every thread has
// passed the barrier that ended its last use. A product whose packed A and B fit in 6 MiB (the
// MLP's, n <= 512) is packed whole, every KC slice at once, so it meets at one barrier in all.
// (Each thread packing its own tile's panels instead, with no barrier, measured 10-25% slower on
// the MLP's products at 2 threads.)
// Each barrier and the fork cost a futex wake-up with OMP_WAIT_POLICY=passive, which is why
// gemm<float> keeps products below 2 * 128^3 multiply-adds on one thread (gemm.cpp).
// Buffers come from the calling thread's workspace (cpu_allocator(), kept between calls),
// never a malloc per call. With 2 threads each entry of c is summed in the same order as with
// one (the KC slices do not depend on the split), so results are bitwise equal.
// Dispatch: __builtin_cpu_supports("avx512f") (which also checks the OS saves zmm state); the
// code is compiled with target attributes, so a build without -march=native still has it and
// a CPU without AVX-512 never runs it (Eigen instead).
// Measured (examples/bench/bench_matmul.cpp, shared 2-vCPU Xeon, best of repeated batches):
// 60-72% of the FMA peak on one thread, 0.8-1.2x torch.mm (MKL) of the same run; see the
// README for a table. Not reached yet: MKL's ~78% at n = 2048 and on the MLP's K = 128-256
// products, where packing B for only 128 rows of A costs ~10%.

namespace {

// ---- path choice

F32GemmPath path_from_env() {
  const char* v = std::getenv("BRISK_GEMM");
  if (!v) return F32GemmPath::Auto;
  const std::string_view s(v);
  if (s == "avx512") return F32GemmPath::Avx512;
  if (s == "eigen") return F32GemmPath::Eigen;
  return F32GemmPath::Auto;
}

std::atomic<int>& requested_path() {
  static std::atomic<int> path{int(path_from_env())};
  return path;
}

bool cpu_has_avx512() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return ok;
}

// ---- blocking

constexpr int kMR = 8;         // rows of c per micro kernel
constexpr int kNV = 3;         // zmm vectors of 16 columns per micro kernel row
constexpr int kNR = 16 * kNV;  // columns of c per micro kernel
constexpr int64_t kKC = 256;
constexpr int64_t kMC = 672;  // rows of an A block: 672 KiB at KC = 256
constexpr int64_t kNC = 4096;
// Packed A and B elements below which a product is packed whole, in one step (one barrier
// instead of one per KC slice): 1.5 M floats, 6 MiB.
constexpr int64_t kWholeElems = int64_t(3) << 19;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

thread_local Workspace t_panels;  // the packed panels of the products this thread leads

// ---- the micro kernel: c (rows <= MR, cols <= 16 * NV) (+)= A micro-panel @ B micro-panel.
// ap: [kc][MR]; bp: [kc][BS], of which the first 16 * NV columns are used (NV = 1 runs the
// left half of a 32-column sub-panel whose right half is all padding).

template <int MR, int NV, int BS = 16 * NV>
__attribute__((target("avx512f"))) void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c,
                                                     int64_t ldc, int rows, int cols, bool load_c) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int r = 0; r < MR; ++r) {
    if (r < rows) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(ap + 8 * MR), _MM_HINT_T0);  // A streams from L2
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += MR;
    bp += BS;
  }
  if (rows == MR && cols == 16 * NV) {
    for (int r = 0; r < MR; ++r) {
      for (int v = 0; v < NV; ++v) {
        float* cp = c + r * ldc + 16 * v;
        const __m512 x = load_c ? _mm512_add_ps(acc[r][v], _mm512_loadu_ps(cp)) : acc[r][v];
        _mm512_storeu_ps(cp, x);
      }
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = first_lanes(cols - 16 * v);
      float* cp = c + r * ldc + 16 * v;
      const __m512 x = load_c ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask, cp)) : acc[r][v];
      _mm512_mask_storeu_ps(cp, mask, x);
    }
  }
}

// ---- packing

// A strided matrix: element (i, j) at data[i * rs + j * cs].
struct Strided {
  const float* data;
  int64_t rs, cs;
  const float* at(int64_t i, int64_t j) const { return data + i * rs + j * cs; }
};

// Sub-panel s of b (kc, nc): columns [s * NR, s * NR + NR) -> out [kc][NR], zero past nc.
__attribute__((target("avx512f"))) void pack_b_panel(Strided b, int64_t kc, int64_t nc, int64_t s, float* out) {
  const int64_t j0 = s * kNR;
  if (b.cs == 1) {  // rows of b are rows of the panel
    __mmask16 mask[kNV];
    for (int v = 0; v < kNV; ++v) mask[v] = first_lanes(nc - j0 - 16 * v);
    for (int64_t p = 0; p < kc; ++p) {
      for (int v = 0; v < kNV; ++v) {
        _mm512_storeu_ps(out + p * kNR + 16 * v, _mm512_maskz_loadu_ps(mask[v], b.at(p, j0 + 16 * v)));
      }
    }
  } else if (b.rs == 1) {  // columns of b are contiguous: 16 columns x 16 k at a time, transposed
    for (int v = 0; v < kNV; ++v) {
      const int64_t jv = j0 + 16 * v, ncols = std::clamp<int64_t>(nc - jv, 0, 16);
      for (int64_t p0 = 0; p0 < kc; p0 += 16) {
        const int64_t nk = std::min<int64_t>(16, kc - p0);
        const __mmask16 kmask = first_lanes(nk);
        __m512 r[16];
        for (int t = 0; t < 16; ++t) {
          r[t] = t < ncols ? _mm512_maskz_loadu_ps(kmask, b.at(p0, jv + t)) : _mm512_setzero_ps();
        }
        transpose_16x16(r);
        for (int64_t q = 0; q < nk; ++q) _mm512_storeu_ps(out + (p0 + q) * kNR + 16 * v, r[q]);
      }
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t j = 0; j < kNR; ++j) out[p * kNR + j] = j0 + j < nc ? *b.at(p, j0 + j) : 0.0f;
    }
  }
}

// Micro-panel ip of a (mc, kc): rows [ip * MR, ip * MR + MR) -> out [kc][MR], zero past mc.
__attribute__((target("avx512f"))) void pack_a_panel(Strided a, int64_t mc, int64_t kc, int64_t ip, float* out) {
  const int64_t i0 = ip * kMR, nrows = std::min<int64_t>(kMR, mc - i0);
  const __mmask16 lanes = first_lanes(kMR);
  if (a.rs == 1) {  // columns of a are rows of the panel
    const __mmask16 rmask = first_lanes(nrows);
    for (int64_t p = 0; p < kc; ++p) {
      _mm512_mask_storeu_ps(out + p * kMR, lanes, _mm512_maskz_loadu_ps(rmask, a.at(i0, p)));
    }
  } else if (a.cs == 1) {  // rows of a are contiguous: MR rows x 16 k at a time, transposed
    for (int64_t p0 = 0; p0 < kc; p0 += 16) {
      const int64_t nk = std::min<int64_t>(16, kc - p0);
      const __mmask16 kmask = first_lanes(nk);
      __m512 r[16];
      for (int t = 0; t < 16; ++t) {
        r[t] = t < nrows ? _mm512_maskz_loadu_ps(kmask, a.at(i0 + t, p0)) : _mm512_setzero_ps();
      }
      transpose_16x16(r);
      for (int64_t q = 0; q < nk; ++q) _mm512_mask_storeu_ps(out + (p0 + q) * kMR, lanes, r[q]);
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t r = 0; r < kMR; ++r) out[p * kMR + r] = r < nrows ? *a.at(i0 + r, p) : 0.0f;
    }
  }
}

// ---- the blocked driver

struct Problem {
  int64_t m, n, k;
  Strided a, b;
  float* c;
  int64_t ldc;
  bool accumulate;
};

// Step sizes and the shared panels: double-buffered steps, or (whole) every KC slice of A and
// B packed at once.
struct Plan {
  int64_t kc, nc, mc;        // steps along K, N and M (mc: rows packed per step, all threads)
  bool whole;                // A and B packed whole, in one step
  int64_t b_elems, a_elems;  // one buffer each (whole: all slices)
  float* b_buf[2];
  float* a_buf[2];
};

Plan make_plan(const Problem& pr, int threads) {
  Plan plan{};
  plan.kc = ceil_div(pr.k, ceil_div(pr.k, kKC));
  plan.nc = round_up(ceil_div(pr.n, ceil_div(pr.n, kNC)), kNR);
  plan.mc = std::min(round_up(pr.m, kMR), kMC * threads);
  const int64_t n_pad = round_up(std::min(plan.nc, round_up(pr.n, kNR)), kNR);
  const int64_t m_pad = round_up(plan.mc, kMR);
  plan.whole = plan.nc >= pr.n && plan.mc >= pr.m && pr.k * (n_pad + m_pad) <= kWholeElems;
  plan.b_elems = round_up((plan.whole ? pr.k : plan.kc) * n_pad, 16);  // 64-byte aligned buffers
  plan.a_elems = round_up((plan.whole ? pr.k : plan.kc) * m_pad, 16);
  const int buffers = plan.whole ? 1 : 2;
  float* ws = t_panels.get<float>(buffers * (plan.b_elems + plan.a_elems));
  plan.b_buf[0] = ws;
  plan.b_buf[1] = ws + (buffers - 1) * plan.b_elems;
  plan.a_buf[0] = ws + buffers * plan.b_elems;
  plan.a_buf[1] = plan.a_buf[0] + (buffers - 1) * plan.a_elems;
  return plan;
}

// [lo, hi) of part `i` when `count` items are cut into `parts` nearly equal parts.
std::pair<int64_t, int64_t> share(int64_t count, int parts, int i) {
  return {count * i / parts, count * (i + 1) / parts};
}

// The rows-by-columns cut of an (mp, np) tile grid over `threads`: tm with the fewest tiles
// per thread, rows on a tie.
int row_parts(int64_t mp, int64_t np, int threads) {
  int best = 1;
  int64_t best_cost = -1;
  for (int tm = threads; tm >= 1; --tm) {
    if (threads % tm != 0) continue;
    const int tn = threads / tm;
    const int64_t cost = ceil_div(mp, tm) * ceil_div(np, tn);
    if (best_cost < 0 || cost < best_cost) {
      best = tm;
      best_cost = cost;
    }
  }
  return best;
}

// This thread's tile of c[ic:ic+mc, jc:jc+nc] (+)= packed A block @ packed B panel, kc deep.
void compute_tile(const Problem& pr, const float* ap, const float* bp, int64_t ic, int64_t mc, int64_t jc, int64_t nc,
                  int64_t kc, bool load_c, int tid, int threads) {
  const int64_t mp = ceil_div(mc, kMR), np = ceil_div(nc, kNR);
  const int tm = row_parts(mp, np, threads), tn = threads / tm;
  const auto [i_lo, i_hi] = share(mp, tm, tid / tn);
  const auto [j_lo, j_hi] = share(np, tn, tid % tn);
  for (int64_t jr = j_lo; jr < j_hi; ++jr) {
    const int cols = int(std::min<int64_t>(kNR, nc - jr * kNR));
    for (int64_t ir = i_lo; ir < i_hi; ++ir) {
      const int rows = int(std::min<int64_t>(kMR, mc - ir * kMR));
      const float* a = ap + ir * kc * kMR;
      const float* b = bp + jr * kc * kNR;
      float* c = pr.c + (ic + ir * kMR) * pr.ldc + jc + jr * kNR;
      // A narrow last strip (N = 256 and 784 end in 16 columns, N = 10, conv's N = 9) runs
      // only the vectors it needs.
      if (cols > 32) {
        micro_kernel<kMR, kNV>(kc, a, b, c, pr.ldc, rows, cols, load_c);
      } else if (cols > 16) {
        micro_kernel<kMR, 2, kNR>(kc, a, b, c, pr.ldc, rows, cols, load_c);
      } else {
        micro_kernel<kMR, 1, kNR>(kc, a, b, c, pr.ldc, rows, cols, load_c);
      }
    }
  }
}

// The whole product packed in one step: every KC slice of B (slice at element pc * n_pad) and
// of A (at pc * m_pad), one barrier, then each thread's tile slice by slice.
void run_whole(const Problem& pr, const Plan& plan, int tid, int threads) {
  const int64_t np = ceil_div(pr.n, kNR), mp = ceil_div(pr.m, kMR);
  const int64_t n_pad = np * kNR, m_pad = mp * kMR;
  const int64_t slices = ceil_div(pr.k, plan.kc);
  for (int64_t item = tid; item < slices * (np + mp); item += threads) {
    const int64_t q = item / (np + mp), r = item % (np + mp);
    const int64_t pc = q * plan.kc, kc = std::min(plan.kc, pr.k - pc);
    if (r < np) {
      pack_b_panel({pr.b.at(pc, 0), pr.b.rs, pr.b.cs}, kc, pr.n, r, plan.b_buf[0] + pc * n_pad + r * kc * kNR);
    } else {
      const int64_t ip = r - np;
      pack_a_panel({pr.a.at(0, pc), pr.a.rs, pr.a.cs}, pr.m, kc, ip, plan.a_buf[0] + pc * m_pad + ip * kc * kMR);
    }
  }
  if (threads > 1) {
#pragma omp barrier
  }
  for (int64_t pc = 0; pc < pr.k; pc += plan.kc) {
    const int64_t kc = std::min(plan.kc, pr.k - pc);
    compute_tile(pr, plan.a_buf[0] + pc * m_pad, plan.b_buf[0] + pc * n_pad, 0, pr.m, 0, pr.n, kc,
                 pr.accumulate || pc > 0, tid, threads);
  }
}

// One thread's part of the whole product (tid of `threads`; the team calls it together).
void run_team(const Problem& pr, const Plan& plan, int tid, int threads) {
  if (plan.whole) {
    run_whole(pr, plan, tid, threads);
    return;
  }
  int64_t b_step = 0, a_step = 0;
  for (int64_t jc = 0; jc < pr.n; jc += plan.nc) {
    const int64_t nc = std::min(plan.nc, pr.n - jc), np = ceil_div(nc, kNR);
    for (int64_t pc = 0; pc < pr.k; pc += plan.kc) {
      const int64_t kc = std::min(plan.kc, pr.k - pc);
      float* bp = plan.b_buf[b_step++ & 1];
      const Strided b_block{pr.b.at(pc, jc), pr.b.rs, pr.b.cs};
      for (int64_t s = tid; s < np; s += threads) pack_b_panel(b_block, kc, nc, s, bp + s * kc * kNR);
      for (int64_t ic = 0; ic < pr.m; ic += plan.mc) {
        const int64_t mc = std::min(plan.mc, pr.m - ic), mp = ceil_div(mc, kMR);
        float* ap = plan.a_buf[a_step++ & 1];
        const Strided a_block{pr.a.at(ic, pc), pr.a.rs, pr.a.cs};
        for (int64_t i = tid; i < mp; i += threads) pack_a_panel(a_block, mc, kc, i, ap + i * kc * kMR);
        if (threads > 1) {
#pragma omp barrier
        }
        compute_tile(pr, ap, bp, ic, mc, jc, nc, kc, pr.accumulate || pc > 0, tid, threads);
      }
    }
  }
}

}  // namespace

// Note [Packed B]
// A recurrent layer multiplies the same W_hh^T (H, 4H) by a new (B, H) state at every step:
// with B = 32 the product is thin and packing the 4 MiB of B costs as much as its FMAs, step
// after step. PackedB packs every KC slice of b once, in the layout run_whole() builds
// (slice pc at pc * n_pad, sub-panel r of it at r * kc * NR), and multiply() packs only A, in
// chunks of up to MC * threads rows, then runs the same tiles; the sums are the same as
// gemm_f32_avx512's, slice by slice. (Measured: see Note [Fused recurrent layers].)
PackedB::PackedB(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs)
    : k_(k), n_(n), kc_(k > 0 ? ceil_div(k, ceil_div(k, kKC)) : 1), n_pad_(round_up(n, kNR)) {
  bytes_ = size_t(round_up(std::max<int64_t>(k * n_pad_, 1), 16)) * sizeof(float);
  data_ = static_cast<float*>(cpu_allocator().allocate(bytes_));
  const int64_t np = ceil_div(n, kNR);
  for (int64_t pc = 0; pc < k; pc += kc_) {
    const int64_t kc = std::min(kc_, k - pc);
    for (int64_t r = 0; r < np; ++r)
      pack_b_panel({b + pc * b_rs, b_rs, b_cs}, kc, n, r, data_ + pc * n_pad_ + r * kc * kNR);
  }
}

PackedB::~PackedB() { cpu_allocator().deallocate(data_, bytes_); }

void PackedB::multiply(int64_t m, const float* a, int64_t a_rs, int64_t a_cs, float* c, int64_t ldc, bool accumulate,
                       int threads) const {
  if (m == 0 || n_ == 0) return;
  if (k_ == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n_, 0.0f);
    }
    return;
  }
  if (threads <= 0) threads = omp_in_parallel() ? 1 : gemm_threads(m, n_, k_);
  const Problem pr{m, n_, k_, {a, a_rs, a_cs}, {nullptr, 0, 0}, c, ldc, accumulate};
  const int64_t mc_max = std::min(round_up(m, kMR), kMC * threads);
  float* abuf = t_panels.get<float>(round_up(k_ * mc_max, 16));
  auto run = [&](int tid, int team) {
    for (int64_t ic = 0; ic < m; ic += mc_max) {
      const int64_t mc = std::min(mc_max, m - ic), mp = ceil_div(mc, kMR), m_pad = mp * kMR;
      const int64_t slices = ceil_div(k_, kc_);
      for (int64_t item = tid; item < slices * mp; item += team) {
        const int64_t pc = (item / mp) * kc_, ip = item % mp, kc = std::min(kc_, k_ - pc);
        pack_a_panel({pr.a.at(ic, pc), pr.a.rs, pr.a.cs}, mc, kc, ip, abuf + pc * m_pad + ip * kc * kMR);
      }
      if (team > 1) {
#pragma omp barrier
      }
      for (int64_t pc = 0; pc < k_; pc += kc_) {
        const int64_t kc = std::min(kc_, k_ - pc);
        compute_tile(pr, abuf + pc * m_pad, data_ + pc * n_pad_, ic, mc, 0, n_, kc, accumulate || pc > 0, tid, team);
      }
      if (team > 1) {  // the next chunk repacks abuf
#pragma omp barrier
      }
    }
  };
  if (threads == 1) {
    run(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  run(omp_get_thread_num(), omp_get_num_threads());
}

void set_f32_gemm_path(F32GemmPath path) { requested_path().store(int(path)); }

F32GemmPath f32_gemm_path() {
  const auto want = F32GemmPath(requested_path().load());
  if (want != F32GemmPath::Eigen && cpu_has_avx512()) return F32GemmPath::Avx512;
  return F32GemmPath::Eigen;
}

const char* f32_gemm_path_name(F32GemmPath path) {
  switch (path) {
    case F32GemmPath::Auto: return "auto";
    case F32GemmPath::Avx512: return "avx512";
    case F32GemmPath::Eigen: return "eigen";
  }
  return "?";
}

void gemm_f32_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, int threads) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  const Problem pr{m, n, k, {a, a_rs, a_cs}, {b, b_rs, b_cs}, c, ldc, accumulate};
  threads = std::max(threads, 1);
  const Plan plan = make_plan(pr, threads);
  if (threads == 1) {
    run_team(pr, plan, 0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  run_team(pr, plan, omp_get_thread_num(), omp_get_num_threads());
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
