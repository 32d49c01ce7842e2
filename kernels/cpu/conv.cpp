// kernels/cpu/conv.cpp: CPU kernels of conv2d and its two backward ops. Conv lowers to GEMM
// (Note [CPU conv]): im2col of one sample into a cached per-thread workspace, then the GEMM of
// kernels/cpu/gemm.h; stride-1 F32 convs go to the direct kernel of kernels/cpu/conv_direct.cpp
// where it fits, depthwise convs to the direct loops of kernels/cpu/conv_depthwise.cpp.
// F32/F64 run natively; BF16 runs im2col in BF16 and the BF16 GEMM of kernels/cpu/gemm_bf16.h
// into F32 where that GEMM is native, else (and F16 always) through F32; results rounded once.
// Not here: shapes, checks and backward formulas (engine/ops/conv.cpp); pooling
// (kernels/cpu/pool.cpp); reference loops for the tests (opcheck/specs_nn.cpp); the CUDA kernels
// (cuDNN, kernels/cuda/conv.cu).
#include "kernels/cpu/conv.h"

#include <omp.h>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"

namespace brisk::kernels::cpu {

// Note [CPU conv]
// Stride-1 "same" F32 convs on the AVX-512 path (3x3 / padding 1 and the like, the CNN's) skip
// what follows in all three ops: DirectConv (Note [Direct conv], kernels/cpu/conv_direct.cpp)
// reads the input from row-padded copies, with no im2col, no col2im and no packed B panel.
// Of those, 3x3 / padding 1 convs with at least 16 input and output channels (the CNN's second
// layer; not its first, 1 -> 32) take the Winograd F(2x2, 3x3) kernel instead (Note [Winograd
// conv], kernels/cpu/conv_winograd.cpp), 2.25x fewer multiply-adds, in all three ops, where the
// batch runs on one thread or shares out by samples.
// Everything else lowers to GEMM as follows.
// conv2d for one sample and group is a matrix product: y (Og, Ho*Wo) = w (Og, K) @ col
// (K, Ho*Wo), where K = Cg*kh*kw and col (im2col) holds, for each weight tap, the input
// pixels that tap meets (zeros in the padding). The backward ops are the two other products:
// gcol = w^T @ g, scattered back by col2im (the adjoint of im2col), and gw += g @ col^T.
// Threads: a batch that covers the OpenMP threads is shared out in whole samples (each
// sample's GEMMs run on its thread; the weight gradient is summed per thread and reduced at
// the end); a smaller batch runs sample by sample with each GEMM split across the threads.
// The columns live in a per-thread workspace from cpu_allocator(), kept between calls, so a
// training step allocates nothing per sample. A 1x1 / stride 1 / unpadded conv skips im2col:
// the input plane already is its col matrix. Depthwise convs (one input channel per group)
// skip GEMM altogether: direct loops over each plane and tap beat a GEMM per channel (Note
// [Depthwise conv] in kernels/cpu/conv_depthwise.cpp).
// BF16 (where gemm_bf16 is native, Note [BF16 GEMM] in kernels/cpu/gemm_bf16.cpp): the
// kernels are templated on the operand type T and the result type Acc: x, w, g and the im2col
// columns stay BF16 (half the bytes to copy), the GEMMs sum into F32 (y, the gradients, and
// backward-input's gcol), rounded to BF16 once at the end. Depthwise BF16 convs stay in F32.

namespace {

using namespace conv;

// This thread's share of a weight gradient.
thread_local Workspace t_partial;

// out (n) = the sum over a team of `team` threads of what add(b0, b1, acc) adds into a zeroed
// acc (n) for samples [b0, b1) of B: each thread sums its share of the samples into its own
// partial (thread 0, the caller, into out), then each adds up one slice of the partials.
template <class Acc, class F>
void sum_over_threads(int team, int64_t B, int64_t n, Acc* out, F&& add) {
  std::vector<Acc*> partial(size_t(team), nullptr);
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num(), size = omp_get_num_threads();
    Acc* acc = t == 0 ? out : t_partial.get<Acc>(n);
    partial[size_t(t)] = acc;
    std::fill(acc, acc + n, Acc(0));
    add(B * t / size, B * (t + 1) / size, acc);
#pragma omp barrier
    const int64_t lo = n * t / size, hi = n * (t + 1) / size;
    for (int s = 1; s < size; ++s) {
      const Acc* src = partial[size_t(s)];
      for (int64_t i = lo; i < hi; ++i) out[i] += src[i];
    }
  }
}

// Note: rows are short (14 pixels in the Fashion-MNIST CNN), so these loops avoid a library
// call per row (memcpy per row cost a third of the conv) and copy a tap's rows as one run
// where flat_rows() allows, zeroing the padding columns afterwards.

// The kernel taps a conv's columns hold, in the order of the weight's (kh, kw) grid: all of
// them, or (live) only those that meet the input at some output pixel (Note [Live taps]).
struct ColumnTaps {
  std::vector<Tap> tap;
  std::vector<int64_t> index;  // each tap's position i * kw + j in the grid
  int64_t size() const { return int64_t(tap.size()); }
};

ColumnTaps column_taps(const Conv& p, bool live_only) {
  ColumnTaps t;
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) {
      const Tap tap(p, i, j);
      if (live_only && (tap.oh_lo == tap.oh_hi || tap.lo == tap.hi)) continue;
      t.tap.push_back(tap);
      t.index.push_back(i * p.kw + j);
    }
  }
  return t;
}

// col (Cg * taps, Ho*Wo) of one sample and group, row c * taps.size() + l for channel c and
// tap l, rows `ld` apart (P, or wider where the columns of several samples sit side by side).
// x: the group's first channel, strides (sC, sH, sW).
template <class T>
void im2col(const T* x, int64_t sC, int64_t sH, int64_t sW, const Conv& p, const ColumnTaps& taps, T* col, int64_t ld) {
  const int64_t P = p.P(), Wo = p.Wo, L = taps.size();
  const bool flat = flat_rows(p) && sW == 1 && sH == p.W;
  for (int64_t c = 0; c < p.Cg; ++c) {
    for (int64_t l = 0; l < L; ++l) {
      const Tap& t = taps.tap[size_t(l)];
      T* row = col + (c * L + l) * ld;
      for (int64_t k = 0; k < t.oh_lo * Wo; ++k) row[k] = T(0);
      for (int64_t k = t.oh_hi * Wo; k < P; ++k) row[k] = T(0);
      const int64_t n = t.oh_hi - t.oh_lo;
      if (n == 0) continue;
      T* r = row + t.oh_lo * Wo;
      const T* src = x + c * sC + (t.oh_lo * p.sh + t.off_h) * sH;  // the input row of output row oh_lo
      // flat only where the tap meets some column: with lo == hi (a kernel wider than the
      // padded row reaches) the run would start outside the input
      if (flat && t.lo < t.hi) {
        const T* s = src + t.off_w;
        for (int64_t k = t.lo; k < (n - 1) * Wo + t.hi; ++k) r[k] = s[k];
        for (int64_t q = 0; q < n; ++q) {
          for (int64_t ow = 0; ow < t.lo; ++ow) r[q * Wo + ow] = T(0);
          for (int64_t ow = t.hi; ow < Wo; ++ow) r[q * Wo + ow] = T(0);
        }
        continue;
      }
      for (int64_t q = 0; q < n; ++q, r += Wo, src += p.sh * sH) {
        for (int64_t ow = 0; ow < t.lo; ++ow) r[ow] = T(0);
        if (p.sw == 1 && sW == 1) {
          const T* s = src + t.off_w;
          for (int64_t ow = t.lo; ow < t.hi; ++ow) r[ow] = s[ow];
        } else {
          for (int64_t ow = t.lo; ow < t.hi; ++ow) r[ow] = src[(ow * p.sw + t.off_w) * sW];
        }
        for (int64_t ow = t.hi; ow < Wo; ++ow) r[ow] = T(0);
      }
    }
  }
}

// The adjoint of im2col: x (Cg, H, W) dense += col (Cg * taps, Ho*Wo), rows `ld` apart,
// scattered back. The padding entries of col are overwritten (zeroed) on the flat path.
template <class T>
void col2im(T* col, const Conv& p, const ColumnTaps& taps, T* x, int64_t ld) {
  const int64_t Wo = p.Wo, L = taps.size();
  const bool flat = flat_rows(p);
  for (int64_t c = 0; c < p.Cg; ++c) {
    for (int64_t l = 0; l < L; ++l) {
      const Tap& t = taps.tap[size_t(l)];
      const int64_t n = t.oh_hi - t.oh_lo;
      if (n == 0) continue;
      T* r = col + (c * L + l) * ld + t.oh_lo * Wo;
      T* dst = x + (c * p.H + t.oh_lo * p.sh + t.off_h) * p.W;  // the input row of output row oh_lo
      if (flat && t.lo < t.hi) {                                // (as in im2col: else the run would write outside gx)
        for (int64_t q = 0; q < n; ++q) {
          for (int64_t ow = 0; ow < t.lo; ++ow) r[q * Wo + ow] = T(0);
          for (int64_t ow = t.hi; ow < Wo; ++ow) r[q * Wo + ow] = T(0);
        }
        T* d = dst + t.off_w;
        for (int64_t k = t.lo; k < (n - 1) * Wo + t.hi; ++k) d[k] += r[k];
        continue;
      }
      for (int64_t q = 0; q < n; ++q, r += Wo, dst += p.sh * p.W) {
        if (p.sw == 1) {
          T* d = dst + t.off_w;
          for (int64_t ow = t.lo; ow < t.hi; ++ow) d[ow] += r[ow];
        } else {
          for (int64_t ow = t.lo; ow < t.hi; ++ow) dst[ow * p.sw + t.off_w] += r[ow];
        }
      }
    }
  }
}

// Whether the GEMM path folds the batch into N (Note [Batch-folded conv]), and whether a
// foldable conv skips the direct and Winograd kernels for it: planes under kTinyPlane pixels,
// or under kSmallPlane with a weight too big to stay in cache across the samples (those
// kernels work sample by sample, and Winograd's transformed weights are 16 * C * O floats).
constexpr int64_t kFoldPixels = 1024;
constexpr int64_t kTinyPlane = 16, kSmallPlane = 256, kCachedWeight = 128 * 128;
bool batch_folded(const Conv& p) { return p.P() < kFoldPixels && p.B > 1 && !p.depthwise(); }
bool small_foldable(const Conv& p) {
  return batch_folded(p) && (p.P() < kTinyPlane || (p.P() < kSmallPlane && p.C * p.O >= kCachedWeight));
}

// The DirectConv problem of conv p's forward and weight gradient, or (input_grad) of its input
// gradient, the adjoint "same" conv from g to gx; nullopt where the direct kernel does not
// take it (strided, dilated, grouped or 1x1 here; DirectConv::fits decides the rest).
std::optional<DirectConv::Geometry> direct_geometry(const Conv& p, bool input_grad) {
  if (small_foldable(p)) return std::nullopt;  // Note [Batch-folded conv]
  if (p.groups != 1 || p.sh != 1 || p.sw != 1 || p.dh != 1 || p.dw != 1 || p.pointwise()) return std::nullopt;
  const DirectConv::Geometry geo =
      input_grad ? DirectConv::Geometry{p.O, p.Ho, p.Wo, p.C, p.kh, p.kw, p.kh - 1 - p.ph, p.kw - 1 - p.pw, p.H, p.W}
                 : DirectConv::Geometry{p.C, p.H, p.W, p.O, p.kh, p.kw, p.ph, p.pw, p.Ho, p.Wo};
  if (!DirectConv::fits(geo)) return std::nullopt;
  return geo;
}

// Whether the batch is shared out in whole samples (else samples run one after the other,
// each GEMM split across the threads).
bool per_sample(int64_t B, int nt) { return nt > 1 && (B % nt == 0 || B >= 4 * nt); }

// The WinogradConv problem of conv p's forward and weight gradient, or (input_grad) of its
// input gradient: 3x3, padding 1, stride 1, ungrouped, where WinogradConv::fits and the batch
// runs on one thread or shares out in whole samples (smaller batches take the direct kernel,
// which splits each sample across the threads).
std::optional<WinogradConv::Geometry> winograd_geometry(const Conv& p, bool input_grad) {
  const bool shape = p.groups == 1 && p.kh == 3 && p.kw == 3 && p.sh == 1 && p.sw == 1 && p.dh == 1 && p.dw == 1 &&
                     p.ph == 1 && p.pw == 1;
  if (!shape || small_foldable(p)) return std::nullopt;
  const int nt = conv_threads(p.macs());
  if (nt > 1 && !per_sample(p.B, nt)) return std::nullopt;
  const WinogradConv::Geometry geo =
      input_grad ? WinogradConv::Geometry{p.O, p.C, p.H, p.W} : WinogradConv::Geometry{p.C, p.O, p.H, p.W};
  if (!WinogradConv::fits(geo)) return std::nullopt;
  return geo;
}

// Runs body(b, gemm_threads) for every sample b (see Note [CPU conv]).
template <class F>
void for_each_sample(int64_t B, double macs, F&& body) {
  const int nt = conv_threads(macs);
  if (per_sample(B, nt)) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < B; ++b) body(b, 1);
    return;
  }
  for (int64_t b = 0; b < B; ++b) body(b, nt > 1 ? 0 : 1);  // 0: the GEMM picks its threads
}

// The col matrix (K, Ho*Wo) of sample b, group g: the input itself for a pointwise conv,
// else im2col into `cols`.
template <class T>
MatrixRef<const T> columns(const Input<T>& x, const Conv& p, const ColumnTaps& taps, bool direct, int64_t b, int64_t g,
                           T* cols) {
  const T* xg = x.data + b * x.sB + g * p.Cg * x.sC;
  if (direct) return {xg, p.K(), p.P(), x.sC, 1};
  if constexpr (std::is_same_v<T, BFloat16>) {  // copied as raw bits: BFloat16(0) would round a float per entry
    im2col(reinterpret_cast<const uint16_t*>(xg), x.sC, x.sH, x.sW, p, taps, reinterpret_cast<uint16_t*>(cols), p.P());
  } else {
    im2col(xg, x.sC, x.sH, x.sW, p, taps, cols, p.P());
  }
  return {cols, p.K(), p.P(), p.P(), 1};
}

// ---- the batch-folded GEMM path (Note [Batch-folded conv])
// Note [Batch-folded conv]
// On small output planes (the late stages of a ResNet: 8x8 down to 1x1 pixels) a GEMM per
// sample is a thin product: N = Ho*Wo is 64 to 1 columns, so each call packs the whole weight
// matrix again for a handful of columns and the kernel runs far from its peak (ResNet-18's
// 512-channel convs on 1x1 planes reached 3% of peak as 32 matrix-vector products). Below
// kFoldPixels output pixels per plane the GEMM path folds a chunk of samples into the GEMM's N:
// the columns of nb samples sit side by side in one (K, nb*P) matrix, so forward is one
// y (Og, nb*P) = w (Og, K) @ cols product (then scattered to (B, O, P) with the bias), the input
// gradient one gcols = w^T @ g (g gathered to (O, nb*P)), col2im per sample, and the weight
// gradient one gw += g (Og, nb*P) @ cols^T per chunk, split over the GEMM's threads with no
// per-thread partial sums. Chunks hold at most kFoldElems column entries. im2col, gathers and
// scatters share out samples across the threads. Planes under kTinyPlane pixels, and planes
// under kSmallPlane whose weight is past kCachedWeight, take this path even where the direct
// or Winograd kernel would fit: those kernels work sample by sample and reached 6-15% of peak
// there (ResNet-18 at 32x32, one thread, Xeon with AMX: training step 542 -> 169 ms, inference
// 277 -> 62 ms; at 224x224 the 7x7 and 14x14 planes of 256-512 channels: 628 -> 392 ms).
constexpr int64_t kFoldElems = int64_t(1) << 22;

// Scratch of the folded path besides the columns: the (O, nb*P) output or gathered gradient.
thread_local Workspace t_fold;

// Samples per chunk: as many as keep the columns within kFoldElems (at least one).
int64_t fold_chunk(const Conv& p) {
  return std::clamp<int64_t>(kFoldElems / std::max<int64_t>(1, p.K() * p.P()), 1, p.B);
}

// Runs body(i) for i in [0, n), shared out across the threads when the conv is big enough.
template <class F>
void for_each_index(int64_t n, double macs, F&& body) {
  const int nt = conv_threads(macs);
  if (nt > 1 && n > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Note [Live taps]
// On planes smaller than the kernel's reach some taps meet only padding: a 3x3 / padding 1
// conv on 1x1 planes (ResNet's last stage at 32x32 inputs) reads the input through its centre
// tap alone, so 8 of every 9 rows of its columns are zeros and 8/9 of its GEMM multiplies
// them. The folded path keeps only the live taps: the columns hold Cg * L rows, the weight is
// gathered to (O, Cg * L) for forward and input gradient, and the weight gradient is computed
// at (O, Cg * L) and scattered back with zeros for the dead taps (their true gradient: their
// columns are all zero).

// The folded path's operands over the live taps: the taps and, where some are dead, the
// weight gathered to (O, Cg * L).
template <class T>
struct LiveWeight {
  ColumnTaps taps;
  int64_t K = 0;  // Cg * L
  std::vector<T> gathered;
  const T* w = nullptr;  // (O, K): the weight itself when every tap is live
  LiveWeight(const Conv& p, const T* weight) : taps(column_taps(p, true)), K(p.Cg * taps.size()), w(weight) {
    if (taps.size() == p.kh * p.kw || !weight) return;
    const int64_t L = taps.size(), KK = p.kh * p.kw;
    gathered.resize(size_t(p.O * K));
    for (int64_t o = 0; o < p.O; ++o) {
      for (int64_t c = 0; c < p.Cg; ++c) {
        for (int64_t l = 0; l < L; ++l) {
          gathered[size_t(o * K + c * L + l)] = weight[(o * p.Cg + c) * KK + taps.index[size_t(l)]];
        }
      }
    }
    w = gathered.data();
  }
};

// cols (K, nb*P) = the columns of samples [b0, b0 + nb), group g, over `taps`, side by side.
template <class T>
void im2col_chunk(const Input<T>& x, const Conv& p, const ColumnTaps& taps, int64_t b0, int64_t nb, int64_t g,
                  T* cols) {
  const int64_t P = p.P(), ld = nb * P;
  for_each_index(nb, p.macs(), [&](int64_t i) {
    const T* xg = x.data + (b0 + i) * x.sB + g * p.Cg * x.sC;
    if constexpr (std::is_same_v<T, BFloat16>) {  // raw bits, as in columns()
      im2col(reinterpret_cast<const uint16_t*>(xg), x.sC, x.sH, x.sW, p, taps,
             reinterpret_cast<uint16_t*>(cols + i * P), ld);
    } else {
      im2col(xg, x.sC, x.sH, x.sW, p, taps, cols + i * P, ld);
    }
  });
}

// out (O, nb*P) = g (B, O, P) dense for samples [b0, b0 + nb), channel-major.
template <class T>
void gather_chunk(const T* g, const Conv& p, int64_t b0, int64_t nb, T* out) {
  const int64_t P = p.P(), ld = nb * P;
  for_each_index(nb, p.macs(), [&](int64_t i) {
    const T* src = g + (b0 + i) * p.O * P;
    for (int64_t o = 0; o < p.O; ++o) std::copy_n(src + o * P, P, out + o * ld + i * P);
  });
}

template <class T, class Acc>
void conv_forward_folded(const Input<T>& x, const T* w, const Acc* bias, Acc* y, const Conv& p) {
  const LiveWeight<T> live(p, w);
  const int64_t K = live.K, P = p.P(), chunk = fold_chunk(p);
  if (K == 0) {  // no input channel or no live tap: y is the bias (the columns would be empty)
    for (int64_t i = 0; i < p.B * p.O; ++i) std::fill_n(y + i * P, P, bias ? bias[i % p.O] : Acc(0));
    return;
  }
  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t nb = std::min(chunk, p.B - b0), N = nb * P;
    T* cols = t_cols.get<T>(K * N);
    Acc* out = t_fold.get<Acc>(p.O * N);
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col_chunk(x, p, live.taps, b0, nb, g, cols);
      gemm_into<T, Acc>({live.w + g * p.Og * K, p.Og, K, K, 1}, {cols, K, N, N, 1}, {out + g * p.Og * N, p.Og, N, N, 1},
                        false, 0);
    }
    for_each_index(nb, p.macs(), [&](int64_t i) {
      Acc* dst = y + (b0 + i) * p.O * P;
      for (int64_t o = 0; o < p.O; ++o) {
        const Acc* src = out + o * N + i * P;
        const Acc add = bias ? bias[o] : Acc(0);
        for (int64_t k = 0; k < P; ++k) dst[o * P + k] = src[k] + add;
      }
    });
  }
}

template <class T, class Acc>
void conv_backward_input_folded(const T* g, const T* w, Acc* gx, const Conv& p) {
  const LiveWeight<T> live(p, w);
  const int64_t K = live.K, P = p.P(), HW = p.H * p.W, chunk = fold_chunk(p);
  std::fill(gx, gx + p.B * p.C * HW, Acc(0));
  if (K == 0) return;  // nothing reaches the input
  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t nb = std::min(chunk, p.B - b0), N = nb * P;
    T* gg = t_fold.get<T>(p.O * N);
    Acc* cols = t_cols.get<Acc>(K * N);
    gather_chunk(g, p, b0, nb, gg);
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      // gcols (K, N) = w[group]^T (K, Og) @ g[group] (Og, N)
      gemm_into<T, Acc>({live.w + grp * p.Og * K, K, p.Og, 1, K}, {gg + grp * p.Og * N, p.Og, N, N, 1},
                        {cols, K, N, N, 1}, false, 0);
      for_each_index(nb, p.macs(), [&](int64_t i) {
        col2im(cols + i * P, p, live.taps, gx + ((b0 + i) * p.C + grp * p.Cg) * HW, N);
      });
    }
  }
}

template <class T, class Acc>
void conv_backward_weight_folded(const T* g, const Input<T>& x, Acc* gw, const Conv& p) {
  const LiveWeight<T> live(p, nullptr);
  const int64_t K = live.K, P = p.P(), chunk = fold_chunk(p), L = live.taps.size(), KK = p.kh * p.kw;
  // The live taps' gradient (O, K): gw itself when every tap is live.
  std::vector<Acc> gathered(L == KK ? 0 : size_t(p.O * K));
  Acc* gl = L == KK ? gw : gathered.data();
  std::fill(gl, gl + p.O * K, Acc(0));
  if (K == 0) {  // every weight entry meets only padding (or there is none)
    std::fill(gw, gw + p.O * p.Cg * KK, Acc(0));
    return;
  }
  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t nb = std::min(chunk, p.B - b0), N = nb * P;
    T* gg = t_fold.get<T>(p.O * N);
    T* cols = t_cols.get<T>(K * N);
    gather_chunk(g, p, b0, nb, gg);
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      im2col_chunk(x, p, live.taps, b0, nb, grp, cols);
      // gw[group] (Og, K) += g[group] (Og, N) @ cols^T (N, K)
      gemm_into<T, Acc>({gg + grp * p.Og * N, p.Og, N, N, 1}, {cols, N, K, 1, N}, {gl + grp * p.Og * K, p.Og, K, K, 1},
                        true, 0);
    }
  }
  if (L == KK) return;
  std::fill(gw, gw + p.O * p.Cg * KK, Acc(0));
  for (int64_t o = 0; o < p.O; ++o) {
    for (int64_t c = 0; c < p.Cg; ++c) {
      for (int64_t l = 0; l < L; ++l) gw[(o * p.Cg + c) * KK + live.taps.index[size_t(l)]] = gl[o * K + c * L + l];
    }
  }
}

// y (B, O, Ho, Wo) dense = conv(x (B, C, H, W) any strides, w (O, Cg, kh, kw) dense).
// x, w: T; bias, y: Acc.
template <class T, class Acc = T>
void conv_forward(const Tensor& x_t, const Tensor& w_t, const Acc* bias, const Tensor& y_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* w = static_cast<const T*>(w_t.data_ptr());
  Acc* y = static_cast<Acc*>(y_t.data_ptr());
  const int64_t K = p.K(), P = p.P();
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    if (const auto geo = winograd_geometry(p, false)) {  // Note [Winograd conv]
      const WinogradConv conv(*geo, w, false);
      for_each_sample(p.B, p.macs(),
                      [&](int64_t b, int) { conv.run(x.data + b * x.sB, x.sC, x.sH, x.sW, bias, y + b * p.O * P); });
      return;
    }
    if (const auto geo = direct_geometry(p, false)) {
      const DirectConv conv(*geo, w, false);
      for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
        conv.run(x.data + b * x.sB, x.sC, x.sH, x.sW, bias, y + b * p.O * P, threads);
      });
      return;
    }
  }
  if (batch_folded(p)) {
    conv_forward_folded<T, Acc>(x, w, bias, y, p);
    return;
  }
  const bool direct = p.pointwise() && x.planes_dense(p);
  const ColumnTaps taps = column_taps(p, false);
  for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
    T* cols = direct ? nullptr : t_cols.get<T>(K * P);
    if (bias) {  // the GEMM below accumulates onto the bias
      for (int64_t o = 0; o < p.O; ++o) std::fill_n(y + (b * p.O + o) * P, P, bias[o]);
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      // y[b, group g] (Og, P) (+)= w[group g] (Og, K) @ col (K, P)
      gemm_into<T, Acc>({w + g * p.Og * K, p.Og, K, K, 1}, columns(x, p, taps, direct, b, g, cols),
                        {y + (b * p.O + g * p.Og) * P, p.Og, P, P, 1}, bias != nullptr, threads);
    }
  });
}

// gx (B, C, H, W) dense = conv^T(g (B, O, Ho, Wo) dense, w (O, Cg, kh, kw) dense).
// g, w: T; gx and the columns: Acc.
template <class T, class Acc = T>
void conv_backward_input(const Tensor& g_t, const Tensor& w_t, const Tensor& gx_t, const Conv& p) {
  const T* g = static_cast<const T*>(g_t.data_ptr());
  const T* w = static_cast<const T*>(w_t.data_ptr());
  Acc* gx = static_cast<Acc*>(gx_t.data_ptr());
  const int64_t K = p.K(), P = p.P(), HW = p.H * p.W;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    // gx = conv(g padded by (kh - 1 - ph, kw - 1 - pw), w flipped and transposed): Note [Direct conv]
    if (const auto geo = winograd_geometry(p, true)) {
      const WinogradConv conv(*geo, w, true);
      for_each_sample(p.B, p.macs(),
                      [&](int64_t b, int) { conv.run(g + b * p.O * P, P, p.Wo, 1, nullptr, gx + b * p.C * HW); });
      return;
    }
    if (const auto geo = direct_geometry(p, true)) {
      const DirectConv conv(*geo, w, true);
      for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
        conv.run(g + b * p.O * P, P, p.Wo, 1, nullptr, gx + b * p.C * HW, threads);
      });
      return;
    }
  }
  if (batch_folded(p)) {
    conv_backward_input_folded<T, Acc>(g, w, gx, p);
    return;
  }
  const bool direct = p.pointwise();  // then P == HW and gcol is the gradient plane itself
  const ColumnTaps taps = column_taps(p, false);
  for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
    Acc* gxb = gx + b * p.C * HW;
    Acc* cols = direct ? nullptr : t_cols.get<Acc>(K * P);
    if (!direct) std::fill(gxb, gxb + p.C * HW, Acc(0));
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      Acc* gx_g = gxb + grp * p.Cg * HW;
      // gcol (K, P) = w[group]^T (K, Og) @ g[b, group] (Og, P)
      gemm_into<T, Acc>({w + grp * p.Og * K, K, p.Og, 1, K}, {g + (b * p.O + grp * p.Og) * P, p.Og, P, P, 1},
                        {direct ? gx_g : cols, K, P, P, 1}, false, threads);
      if (!direct) col2im(cols, p, taps, gx_g, P);
    }
  });
}

// gw (O, C, 3, 3) dense = the weight gradient through the Winograd transforms (Note [Winograd
// conv]): the threads' transformed gradients summed, then transformed back once.
void winograd_backward_weight(const Input<float>& x, const float* g, float* gw, const Conv& p,
                              const WinogradConv& conv) {
  const int nt = conv_threads(p.macs()), team = per_sample(p.B, nt) ? nt : 1;
  std::vector<float> du(size_t(conv.transformed_size()));
  sum_over_threads(team, p.B, conv.transformed_size(), du.data(), [&](int64_t b0, int64_t b1, float* acc) {
    conv.weight_grad(x.data, x.sB, x.sC, x.sH, x.sW, g, b0, b1, acc);
  });
  conv.weight_grad_finish(du.data(), gw);
}

// gw (O, Cg, kh, kw) dense = sum over b of g[b] (Og, P) @ col[b]^T (P, K), per group.
// g (B, O, Ho, Wo) dense; x (B, C, H, W) any strides. g, x and the columns: T; gw: Acc.
template <class T, class Acc = T>
void conv_backward_weight(const Tensor& g_t, const Tensor& x_t, const Tensor& gw_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* g = static_cast<const T*>(g_t.data_ptr());
  Acc* gw = static_cast<Acc*>(gw_t.data_ptr());
  const int64_t K = p.K(), P = p.P(), n_w = p.O * K;
  const bool direct = p.pointwise() && x.planes_dense(p);
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    if (const auto geo = winograd_geometry(p, false)) {
      winograd_backward_weight(x, g, gw, p, WinogradConv(*geo, nullptr, false));
      return;
    }
  }
  // The direct kernel (Note [Direct conv]) where it fits: no im2col, no packing.
  std::optional<DirectConv> direct_conv;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    if (const auto geo = direct_geometry(p, false)) direct_conv.emplace(*geo, nullptr, false);
  }
  if (!direct_conv && batch_folded(p)) {
    conv_backward_weight_folded<T, Acc>(g, x, gw, p);
    return;
  }
  const ColumnTaps taps = column_taps(p, false);
  // acc (O, K) += the products of samples [b0, b1).
  auto add_samples = [&](int64_t b0, int64_t b1, Acc* acc, int threads) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
      if (direct_conv) {
        direct_conv->weight_grad(x.data, x.sB, x.sC, x.sH, x.sW, g, b0, b1, acc);
        return;
      }
    }
    T* cols = direct ? nullptr : t_cols.get<T>(K * P);
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t grp = 0; grp < p.groups; ++grp) {
        const MatrixRef<const T> col = columns(x, p, taps, direct, b, grp, cols);
        const MatrixRef<const T> col_t{col.data, P, K, 1, col.row_stride};
        gemm_into<T, Acc>({g + (b * p.O + grp * p.Og) * P, p.Og, P, P, 1}, col_t, {acc + grp * p.Og * K, p.Og, K, K, 1},
                          true, threads);
      }
    }
  };
  const int nt = conv_threads(p.macs());
  if (!per_sample(p.B, nt)) {  // (the direct kernel then runs on one thread)
    std::fill(gw, gw + n_w, Acc(0));
    add_samples(0, p.B, gw, nt > 1 ? 0 : 1);
    return;
  }
  sum_over_threads(nt, p.B, n_w, gw, [&](int64_t b0, int64_t b1, Acc* acc) { add_samples(b0, b1, acc, 1); });
}

// Whether a conv with output `out` runs in BF16 through gemm_bf16 (see Note [CPU conv]).
bool native_bf16(const Tensor& out, const Shape& x, const Shape& w, const Shape& y, const ConvParams& params) {
  return out.dtype() == DType::BF16 && bf16_gemm_native() && !Conv(x, w, y, params).depthwise();
}

// `t` as a BF16 tensor: itself when it is one (any strides), else a converted dense copy.
Tensor as_bf16(const Tensor& t) { return t.dtype() == DType::BF16 ? t : dense(t, DType::BF16); }

// (x, w[, bias]) -> y
void conv2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvParams params = ConvParams::from(attrs);
  if (native_bf16(out[0], in[0].sizes(), in[1].sizes(), out[0].sizes(), params)) {
    const Tensor x = as_bf16(in[0]), w = dense(in[1], DType::BF16);  // strided x is read in place
    const Tensor b = in.size() == 3 ? dense(in[2], DType::F32) : Tensor();
    const DenseOut y(out[0], DType::F32);
    const Conv p(x.sizes(), w.sizes(), y.dense.sizes(), params);
    conv_forward<BFloat16, float>(x, w, b.defined() ? static_cast<const float*>(b.data_ptr()) : nullptr, y.dense, p);
    y.finish();
    return;
  }
  const DType wt = work_dtype(out[0].dtype());
  const Tensor x = in[0].dtype() == wt ? in[0] : dense(in[0], wt);  // strided x is read in place
  const Tensor w = dense(in[1], wt);
  const Tensor b = in.size() == 3 ? dense(in[2], wt) : Tensor();  // optional bias (O)
  const DenseOut y(out[0], wt);
  const Conv p(x.sizes(), w.sizes(), y.dense.sizes(), params);
  if (p.depthwise()) {
    depthwise_forward(x, w, b, y.dense, p);
  } else {
    dispatch_work(wt, [&](auto tag) {
      using T = decltype(tag);
      conv_forward<T>(x, w, b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr, y.dense, p);
    });
  }
  y.finish();
}

// (grad, w) -> gx
void conv2d_backward_input_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvParams params = ConvParams::from(attrs, "conv2d_backward_input");
  if (native_bf16(out[0], out[0].sizes(), in[1].sizes(), in[0].sizes(), params)) {
    const Tensor g = dense(in[0], DType::BF16), w = dense(in[1], DType::BF16);
    const DenseOut gx(out[0], DType::F32);
    conv_backward_input<BFloat16, float>(g, w, gx.dense, Conv(gx.dense.sizes(), w.sizes(), g.sizes(), params));
    gx.finish();
    return;
  }
  const DType wt = work_dtype(out[0].dtype());
  const Tensor g = dense(in[0], wt), w = dense(in[1], wt);
  const DenseOut gx(out[0], wt);
  const Conv p(gx.dense.sizes(), w.sizes(), g.sizes(), params);
  if (p.depthwise()) {
    depthwise_backward_input(g, w, gx.dense, p);
  } else {
    dispatch_work(wt, [&](auto tag) { conv_backward_input<decltype(tag)>(g, w, gx.dense, p); });
  }
  gx.finish();
}

// (grad, x) -> gw
void conv2d_backward_weight_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvParams params = ConvParams::from(attrs, "conv2d_backward_weight");
  if (native_bf16(out[0], in[1].sizes(), out[0].sizes(), in[0].sizes(), params)) {
    const Tensor g = dense(in[0], DType::BF16), x = as_bf16(in[1]);  // strided x is read in place
    const DenseOut gw(out[0], DType::F32);
    conv_backward_weight<BFloat16, float>(g, x, gw.dense, Conv(x.sizes(), gw.dense.sizes(), g.sizes(), params));
    gw.finish();
    return;
  }
  const DType wt = work_dtype(out[0].dtype());
  const Tensor g = dense(in[0], wt);
  const Tensor x = in[1].dtype() == wt ? in[1] : dense(in[1], wt);  // strided x is read in place
  const DenseOut gw(out[0], wt);
  const Conv p(x.sizes(), gw.dense.sizes(), g.sizes(), params);
  if (p.depthwise()) {
    depthwise_backward_weight(g, x, gw.dense, p);
  } else {
    dispatch_work(wt, [&](auto tag) { conv_backward_weight<decltype(tag)>(g, x, gw.dense, p); });
  }
  gw.finish();
}

}  // namespace

void register_conv() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Conv2d, cpu, conv2d_kernel);
  register_kernel(OpId::Conv2dBackwardInput, cpu, conv2d_backward_input_kernel);
  register_kernel(OpId::Conv2dBackwardWeight, cpu, conv2d_backward_weight_kernel);
}

}  // namespace brisk::kernels::cpu
