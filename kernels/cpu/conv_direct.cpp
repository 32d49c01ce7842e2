// kernels/cpu/conv_direct.cpp: the direct F32 convolution of kernels/cpu/conv.h (DirectConv):
// stride-1 "same" convs computed from row-padded copies of each input plane by AVX-512 micro
// kernels that read their B operand straight from those copies, so there is no im2col matrix,
// no col2im and no packed B panel. conv2d's forward, its input gradient (a "same" conv of the
// output gradient with the flipped, transposed weights) and its weight gradient take it.
// Note [Direct conv].
// Not here: the choice between this and im2col + GEMM and the threading over samples
// (kernels/cpu/conv.cpp); the lane masks (kernels/cpu/lanes.h).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/lanes.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports once they are inlined here (false positives, as in gemm_f32.cpp).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace brisk::kernels::cpu::conv {

// Note [Direct conv]
// A stride-1 "same" conv (odd kernel, padding (kh - 1) / 2 and (kw - 1) / 2, so Ho = H and
// Wo = W) reads, for output pixel q = oh * W + ow and tap (c, i, j), input element
// q + (i - ph) * W + (j - pw) of channel c, as long as the column ow + j - pw stays inside
// [0, W): output and input planes share one row stride. Where it leaves (ow < pw - j, or
// ow >= W + pw - j), the flat index wraps onto the neighbouring row's last (first) columns,
// which that tap never reads legitimately (2 * pw < kw). So keep kw copies of the input, rows
// padded with ph zero rows above and below, copy j with exactly those wrapped-onto columns
// zeroed: then every tap reads, for 16 consecutive outputs, 16 consecutive elements of one
// copy, whatever the row boundaries. The product y (Co, H * W) = w (Co, K) @ B (K, H * W) has
// as B's row k = (c, i, j) copy j shifted by off[k]; the micro kernel (8 output channels x 48
// outputs in 24 zmm accumulators, as the GEMM's, Note [F32 GEMM]) loads its three B vectors
// from base + off[k] instead of from a packed panel. No lane is wasted but the last vector's
// tail, outputs are stored dense (one masked store at the plane's end), nothing is zeroed.
// (A first version padded columns into a grid of 16-multiple width instead: 12.5% of the
// lanes wasted at widths 14 and 28.)
// The weights are packed once per call into panels [Co / 8][K][8] (zero rows past Co); the
// input gradient uses the same kernel with w'(c, o, i, j) = w(o, c, kh - 1 - i, kw - 1 - j)
// (a "same" conv's adjoint is a "same" conv with the flipped, transposed weights) and writes
// every element of gx, so gx is never zeroed and there is no col2im.
// Depth: channels run in chunks of at most kMaxK taps; the first chunk starts each output at
// the bias (or zero), later ones load the partial sums back.
// Order: strips of 48 outputs outside, output-channel panels inside: a strip's B elements stay
// in L1 while the packed weights stream from L2 (prefetched as in the GEMM).
// Weight gradient: gw[o][k] = sum over samples and outputs q of g[o][q] * B[k][q], B read from
// the same copies of the input. The micro kernel runs 6 output channels x 4 taps, vectorized
// over q with one accumulator of 16 partial sums each, over 4 samples at a time (their copies,
// ~0.6 MiB for the CNN's second layer, in L2), then sums the lanes into gw: 10 loads per 24
// FMAs (GCC, left alone, folded the g loads into the FMAs: 28 loads, 18 ms instead of 11.7).
// Against im2col + GEMM: 1.2 vs 3.2 ms for the CNN's first layer (9 taps: a GEMM 9 columns
// wide), 11.7 vs 12.6 ms for its second (288 taps).
// Threads: one sample on one thread when the batch is shared out by samples (conv.cpp), else the
// strips of each sample across the team (the copies made first, by the calling thread).

namespace {

constexpr int kMR = 8;           // output channels per micro kernel
constexpr int kNV = 3;           // vectors of 16 outputs per micro kernel
constexpr int kNR = 16 * kNV;    // outputs per micro kernel
constexpr int64_t kMaxK = 1024;  // taps per depth chunk (a 32 KiB weight micro-panel)
constexpr int kWgradBlock = 4;   // samples whose copies the weight gradient keeps at once (L2)
constexpr int kWgradRows = 6;    // weight-gradient rows per micro kernel (output channels)
constexpr int kWgradTaps = 4;    // weight-gradient columns per micro kernel (6 x 4 accumulators)

// out rows r < rows (plane_out apart), vector v at out + 16 v (mask[v] lanes) (+)= the product
// of ap [kc][8] and the B rows base + off[k]. Starts from the stored values (accumulate), else
// the bias (null: zero).
template <int NV>
__attribute__((target("avx512f"))) void direct_tile(int64_t kc, const float* ap, const float* base, const int64_t* off,
                                                    float* out, int64_t plane_out, const __mmask16* mask, int rows,
                                                    const float* bias, bool accumulate) {
  __m512 acc[kMR][NV];
  for (int r = 0; r < kMR; ++r) {
    for (int v = 0; v < NV; ++v) {
      if (r >= rows) {
        acc[r][v] = _mm512_setzero_ps();
      } else if (accumulate) {
        acc[r][v] = _mm512_maskz_loadu_ps(mask[v], out + r * plane_out + 16 * v);
      } else {
        acc[r][v] = bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
      }
    }
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(ap + 8 * kMR), _MM_HINT_T0);
    const float* b = base + off[k];
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    for (int r = 0; r < kMR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += kMR;
  }
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + r * plane_out + 16 * v, mask[v], acc[r][v]);
  }
}

// gw rows r < rows (ldgw apart), columns t < NK (+)= over samples s < nb, outputs q < n:
// g_s[r * n + q] * (copies_s + off[t])[q]. Rows at or past `rows` read row rows - 1 (in bounds;
// their sums are dropped). Each lane keeps its own partial sum until the end. (Written with
// constant loop bounds and a lambda so that GCC keeps acc in registers: array-of-pointer
// versions spilled every accumulator.)
template <int NK>
__attribute__((target("avx512f"))) void wgrad_tile(int nb, const float* const* g_s, const float* const* copies_s,
                                                   const int64_t* off, int64_t n, int rows, float* gw, int64_t ldgw) {
  constexpr int MR = kWgradRows;
  __m512 acc[MR][NK];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < NK; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t full = n - n % 16, last = rows - 1;
  const __mmask16 tail = first_lanes(n % 16);
  for (int s = 0; s < nb; ++s) {
    const float* g0 = g_s[s];
    const float* c0 = copies_s[s];
    // one multiply-add step over outputs q .. q + 15, g and B read under mask m: past n, B
    // holds other planes' values, and 0 * inf there would put a NaN into a finite sum
    auto step = [&](int64_t q, __mmask16 m) __attribute__((always_inline, target("avx512f"))) {
      __m512 bv[NK];
#pragma GCC unroll 8
      for (int t = 0; t < NK; ++t) bv[t] = _mm512_maskz_loadu_ps(m, c0 + off[t] + q);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        __m512 gv = _mm512_maskz_loadu_ps(m, g0 + std::min<int64_t>(r, last) * n + q);
        asm("" : "+v"(gv));  // keep gv in a register: folded into each FMA it is loaded NK times
#pragma GCC unroll 8
        for (int t = 0; t < NK; ++t) acc[r][t] = _mm512_fmadd_ps(gv, bv[t], acc[r][t]);
      }
    };
    for (int64_t q = 0; q < full; q += 16) step(q, 0xffff);
    if (tail) step(full, tail);
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {  // constant bounds keep acc in registers (a runtime one spilled it)
    if (r > last) break;
#pragma GCC unroll 8
    for (int t = 0; t < NK; ++t) gw[r * ldgw + t] += _mm512_reduce_add_ps(acc[r][t]);
  }
}

std::atomic<bool>& direct_enabled() {
  static std::atomic<bool> on{conv_kernels_from_env() != ConvKernels::Im2col};
  return on;
}

}  // namespace

ConvKernels conv_kernels_from_env() {
  const char* v = std::getenv("BRISK_CONV");
  if (v && std::string_view(v) == "im2col") return ConvKernels::Im2col;
  if (v && std::string_view(v) == "direct") return ConvKernels::Direct;
  return ConvKernels::All;
}

void set_direct_conv(bool enabled) { direct_enabled().store(enabled); }
bool direct_conv_enabled() { return direct_enabled().load(); }

bool DirectConv::fits(const Geometry& g) {
  if (!direct_conv_enabled()) return false;
  if (f32_gemm_path() != F32GemmPath::Avx512) return false;     // the AVX-512 path (BRISK_GEMM=eigen: im2col)
  if (g.kh * g.kw < 2 || g.Co < kMR || g.Ci < 1) return false;  // (no input channel: the kernel writes nothing)
  const bool same = g.kh % 2 == 1 && g.kw % 2 == 1 && 2 * g.ph == g.kh - 1 && 2 * g.pw == g.kw - 1;
  if (!same || g.Ho != g.H || g.Wo != g.W || g.H < 1 || g.W < 1) return false;
  // the copies of a block of samples (kw * copy_ floats each) in int64 with room to spare;
  // beyond, im2col + GEMM (whose allocation then reports the size)
  const double copy = double(g.Ci) * double(g.H + 2 * g.ph) * double(g.W) + double(2 * g.pw + 16);
  const double copies = double(kWgradBlock) * double(g.kw) * copy;
  return copies < 0x1p50;
}

DirectConv::DirectConv(const Geometry& geo, const float* w, bool flipped) : g_(geo) {
  plane_ = (g_.H + 2 * g_.ph) * g_.W;
  lead_ = g_.pw;
  copy_ = lead_ + g_.Ci * plane_ + 16 + g_.pw;  // lead-in, the planes, one vector of slack and the last wrap
  const int64_t taps = g_.kh * g_.kw, K = g_.Ci * taps, panels = (g_.Co + kMR - 1) / kMR;
  if (w) packed_.resize(size_t(panels * K * kMR));
  // panel p, tap k = (c, i, j), lane r: the weight from input channel c to output channel 8p + r.
  for (int64_t p = 0; w && p < panels; ++p) {
    float* dst = packed_.data() + p * K * kMR;
    for (int64_t c = 0; c < g_.Ci; ++c) {
      for (int64_t i = 0; i < g_.kh; ++i) {
        for (int64_t j = 0; j < g_.kw; ++j) {
          const int64_t k = (c * g_.kh + i) * g_.kw + j;
          for (int64_t r = 0; r < kMR; ++r) {
            const int64_t o = p * kMR + r;
            float v = 0;
            if (o < g_.Co) {
              // forward: w (Co, Ci, kh, kw); flipped: w (Ci, Co, kh, kw), taps reversed
              v = flipped ? w[((c * g_.Co + o) * g_.kh + (g_.kh - 1 - i)) * g_.kw + (g_.kw - 1 - j)]
                          : w[((o * g_.Ci + c) * g_.kh + i) * g_.kw + j];
            }
            dst[k * kMR + r] = v;
          }
        }
      }
    }
  }
  // tap (c, i, j) reads copy j from output q's position, moved by i rows and j - pw columns
  off_.resize(size_t(K));
  for (int64_t c = 0; c < g_.Ci; ++c) {
    for (int64_t i = 0; i < g_.kh; ++i) {
      for (int64_t j = 0; j < g_.kw; ++j) {
        off_[size_t((c * g_.kh + i) * g_.kw + j)] = j * copy_ + lead_ + c * plane_ + i * g_.W + (j - g_.pw);
      }
    }
  }
}

void DirectConv::make_copies(const float* in, int64_t sC, int64_t sH, int64_t sW, float* copies) const {
  const Geometry& g = g_;
  // kw copies of the row-padded input; copy j has the columns its tap only reaches by wrapping
  // zeroed: [W + j - pw, W) for j < pw, [0, j - pw) for j > pw (Note [Direct conv]). Copy pw
  // is built plane by plane (one memcpy per plane of a dense input: a call per row cost a
  // sixth of the conv), the others copied from it whole and their columns zeroed.
  float* base = copies + g.pw * copy_;
  const int64_t HW = g.H * g.W, pad = g.ph * g.W;
  std::memset(base, 0, sizeof(float) * size_t(lead_ + pad));
  for (int64_t c = 0; c < g.Ci; ++c) {
    float* plane = base + lead_ + c * plane_ + pad;
    const float* src = in + c * sC;
    if (sW == 1 && (sH == g.W || g.H == 1)) {
      std::memcpy(plane, src, sizeof(float) * size_t(HW));
    } else {
      for (int64_t h = 0; h < g.H; ++h) {
        for (int64_t x = 0; x < g.W; ++x) plane[h * g.W + x] = src[h * sH + x * sW];
      }
    }
    // the bottom padding rows, the next plane's top ones (and after the last plane the slack)
    const int64_t gap = c + 1 < g.Ci ? 2 * pad : copy_ - (lead_ + g.Ci * plane_ - pad);
    std::memset(plane + HW, 0, sizeof(float) * size_t(gap));
  }
  for (int64_t j = 0; j < g.kw; ++j) {
    if (j == g.pw) continue;
    float* cp = copies + j * copy_;
    std::memcpy(cp, base, sizeof(float) * size_t(copy_));
    // clamped: a kernel wider than twice the input (pw >= W) zeroes whole copies
    const int64_t lo = j < g.pw ? std::max<int64_t>(0, g.W + j - g.pw) : 0;
    const int64_t hi = j < g.pw ? g.W : std::min(g.W, j - g.pw);
    for (int64_t c = 0; c < g.Ci; ++c) {
      float* plane = cp + lead_ + c * plane_ + pad;
      for (int64_t h = 0; h < g.H; ++h) {
        for (int64_t x = lo; x < hi; ++x) plane[h * g.W + x] = 0;
      }
    }
  }
}

void DirectConv::run(const float* in, int64_t sC, int64_t sH, int64_t sW, const float* bias, float* out,
                     int threads) const {
  const Geometry& g = g_;
  float* copies = t_cols.get<float>(g.kw * copy_);
  make_copies(in, sC, sH, sW, copies);
  const int64_t taps = g.kh * g.kw, K = g.Ci * taps, N = g.H * g.W;
  const int64_t strips = (N + kNR - 1) / kNR, panels = (g.Co + kMR - 1) / kMR;
  const int64_t chunk_c = std::max<int64_t>(1, kMaxK / taps);  // input channels per depth chunk
  auto strip = [&](int64_t s) {
    const int64_t q0 = s * kNR;
    const int nv = int(std::min<int64_t>(kNV, (N - q0 + 15) / 16));
    __mmask16 mask[kNV] = {0, 0, 0};
    for (int v = 0; v < nv; ++v) mask[v] = first_lanes(N - q0 - 16 * v);
    for (int64_t c0 = 0; c0 < g.Ci; c0 += chunk_c) {
      const int64_t k0 = c0 * taps, kc = std::min(chunk_c, g.Ci - c0) * taps;
      for (int64_t p = 0; p < panels; ++p) {
        const float* ap = packed_.data() + p * K * kMR + k0 * kMR;
        float* o = out + p * kMR * N + q0;
        const int rows = int(std::min<int64_t>(kMR, g.Co - p * kMR));
        const float* b = bias ? bias + p * kMR : nullptr;
        const bool acc = c0 > 0;
        const int64_t* offs = off_.data() + k0;
        if (nv == 3) {
          direct_tile<3>(kc, ap, copies + q0, offs, o, N, mask, rows, b, acc);
        } else if (nv == 2) {
          direct_tile<2>(kc, ap, copies + q0, offs, o, N, mask, rows, b, acc);
        } else {
          direct_tile<1>(kc, ap, copies + q0, offs, o, N, mask, rows, b, acc);
        }
      }
    }
  };
  const int nt = threads == 0 ? omp_get_max_threads() : 1;
  if (nt <= 1 || strips < 2) {
    for (int64_t s = 0; s < strips; ++s) strip(s);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t s = 0; s < strips; ++s) strip(s);
}

void DirectConv::weight_grad(const float* in, int64_t sB, int64_t sC, int64_t sH, int64_t sW, const float* g,
                             int64_t b0, int64_t b1, float* gw) const {
  const Geometry& geo = g_;
  const int64_t taps = geo.kh * geo.kw, K = geo.Ci * taps, N = geo.H * geo.W;
  const int64_t panels = (geo.Co + kWgradRows - 1) / kWgradRows, per_sample = geo.kw * copy_;
  float* copies = t_cols.get<float>(kWgradBlock * per_sample);
  for (int64_t b = b0; b < b1; b += kWgradBlock) {
    const int nb = int(std::min<int64_t>(kWgradBlock, b1 - b));
    const float* copy_s[kWgradBlock];
    for (int s = 0; s < nb; ++s) {
      make_copies(in + (b + s) * sB, sC, sH, sW, copies + s * per_sample);
      copy_s[s] = copies + s * per_sample;
    }
    for (int64_t p = 0; p < panels; ++p) {
      const int rows = int(std::min<int64_t>(kWgradRows, geo.Co - p * kWgradRows));
      const float* g_s[kWgradBlock];
      for (int s = 0; s < nb; ++s) g_s[s] = g + ((b + s) * geo.Co + p * kWgradRows) * N;
      float* gw_p = gw + p * kWgradRows * K;
      for (int64_t k0 = 0; k0 < K; k0 += kWgradTaps) {
        const int64_t* offs = off_.data() + k0;
        switch (std::min<int64_t>(kWgradTaps, K - k0)) {
          case 4: wgrad_tile<4>(nb, g_s, copy_s, offs, N, rows, gw_p + k0, K); break;
          case 3: wgrad_tile<3>(nb, g_s, copy_s, offs, N, rows, gw_p + k0, K); break;
          case 2: wgrad_tile<2>(nb, g_s, copy_s, offs, N, rows, gw_p + k0, K); break;
          default: wgrad_tile<1>(nb, g_s, copy_s, offs, N, rows, gw_p + k0, K);
        }
      }
    }
  }
}

}  // namespace brisk::kernels::cpu::conv

#pragma GCC diagnostic pop
