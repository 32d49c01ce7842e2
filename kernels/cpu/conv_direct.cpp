// kernels/cpu/conv_direct.cpp: the direct F32 convolution of kernels/cpu/conv.h (DirectConv):
// stride-1 undilated convs computed from a zero-padded copy of each input plane with an
// AVX-512 micro kernel that reads its B operand straight from that copy, so there is no im2col
// matrix and no packed B panel. conv2d's forward and its input gradient (a conv of the output
// gradient with the flipped, transposed weights) take it. Note [Direct conv].
// Not here: the choice between this and im2col + GEMM, and the threading over samples
// (kernels/cpu/conv.cpp); the weight gradient (im2col + GEMM, kernels/cpu/conv.cpp).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm_f32.h"

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports once they are inlined here (false positives, as in gemm_f32.cpp).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace brisk::kernels::cpu::conv {

// Note [Direct conv]
// A stride-1 conv reads, for output pixel (oh, ow) and tap (c, i, j), input (oh + i - ph,
// ow + j - pw). Copy each input plane into a zero-padded grid of G columns (G a multiple of
// 16, at least Wo + kw - 1) and Ho + kh rows: then output grid position q = oh * G + ow meets
// grid element q + i * G + j of its channel, so for every tap the 16 outputs of one vector read
// 16 consecutive grid elements. The product y (Co, grid) = w (Co, K) @ B (K, grid) has as B's
// row k = (c, i, j) the grid itself shifted by off[k] = c * plane + i * G + j: the micro
// kernel (8 output channels x 48 grid positions in 24 zmm accumulators, as the GEMM's, Note
// [F32 GEMM]) loads its three B vectors from base + off[k] instead of from a packed panel.
// Positions ow >= Wo are computed and never stored; each vector lies in one output row (G is a
// multiple of 16), so its store is one masked store of the row's valid lanes. The waste is
// 1 - Wo / G: 12.5% at Wo = 14 (G = 16) and Wo = 28 (G = 32); problems wasting more than 15%
// go to im2col + GEMM (fits()).
// The weights are packed once per call into panels [Co / 8][K][8] (zero rows past Co); the
// input gradient uses the same kernel with w'(c, o, i, j) = w(o, c, kh - 1 - i, kw - 1 - j)
// and padding kh - 1 - ph (so it needs ph <= kh - 1), and writes every element of gx, so gx is
// never zeroed and there is no col2im.
// Depth: channels run in chunks of at most kMaxK taps; the first chunk starts each output at
// the bias (or zero), later ones load the partial sums back (masked, valid lanes only).
// Order: strips of 48 grid positions outside, output-channel panels inside: a strip's B
// elements stay in L1 while the packed weights stream from L2 (prefetched as in the GEMM).
// Threads: one sample on one thread when the batch is shared out by samples (conv.cpp), else the
// strips of each sample across the team (the padded copy made first, by the calling thread).

namespace {

constexpr int kMR = 8;           // output channels per micro kernel
constexpr int kNV = 3;           // vectors of 16 grid positions per micro kernel
constexpr int kNR = 16 * kNV;    // grid positions per micro kernel
constexpr int64_t kMaxK = 1024;  // taps per depth chunk (a 32 KiB weight micro-panel)

__mmask16 first_lanes(int64_t n) {
  if (n <= 0) return 0;
  if (n >= 16) return 0xffff;
  return __mmask16((1u << n) - 1);
}

// out rows r < rows, vector v: out + r * plane_out + dst[v] (mask[v] lanes) (+)= the product of
// ap [kc][8] and the B rows base + off[k]. Starts from the stored values (accumulate), else the
// bias (null: zero).
template <int NV>
__attribute__((target("avx512f"))) void direct_tile(int64_t kc, const float* ap, const float* base, const int32_t* off,
                                                    float* out, int64_t plane_out, const int64_t* dst,
                                                    const __mmask16* mask, int rows, const float* bias,
                                                    bool accumulate) {
  __m512 acc[kMR][NV];
  for (int r = 0; r < kMR; ++r) {
    for (int v = 0; v < NV; ++v) {
      if (r >= rows) {
        acc[r][v] = _mm512_setzero_ps();
      } else if (accumulate) {
        acc[r][v] = _mm512_maskz_loadu_ps(mask[v], out + r * plane_out + dst[v]);
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
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + r * plane_out + dst[v], mask[v], acc[r][v]);
  }
}

int64_t grid_width(int64_t Wo, int64_t kw) { return 16 * ((Wo + kw - 1 + 15) / 16); }

std::atomic<bool>& direct_enabled() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("BRISK_CONV");
    return !(v && std::string_view(v) == "im2col");
  }()};
  return on;
}

}  // namespace

void set_direct_conv(bool enabled) { direct_enabled().store(enabled); }
bool direct_conv_enabled() { return direct_enabled().load(); }

bool DirectConv::fits(const Geometry& g) {
  if (!direct_conv_enabled()) return false;
  if (f32_gemm_path() != F32GemmPath::Avx512) return false;  // the AVX-512 path (BRISK_GEMM=eigen: im2col)
  if (g.kh * g.kw < 2 || g.Co < kMR || g.ph < 0 || g.pw < 0) return false;
  if (g.Ho != g.H + 2 * g.ph - g.kh + 1 || g.Wo != g.W + 2 * g.pw - g.kw + 1 || g.Ho < 1 || g.Wo < 1) return false;
  const int64_t G = grid_width(g.Wo, g.kw);
  if (double(g.Wo) < 0.85 * double(G)) return false;
  // offsets are int32: the padded copy of one sample must stay well below 2^31 elements
  return double(g.Ci) * double(g.Ho + g.kh) * double(G) < double(1 << 30);
}

DirectConv::DirectConv(const Geometry& geo, const float* w, bool flipped) : g_(geo) {
  G_ = grid_width(g_.Wo, g_.kw);
  plane_ = (g_.Ho + g_.kh) * G_;
  const int64_t taps = g_.kh * g_.kw, K = g_.Ci * taps, panels = (g_.Co + kMR - 1) / kMR;
  packed_.resize(size_t(panels * K * kMR));
  // panel p, tap k = (c, i, j), lane r: the weight from input channel c to output channel 8p + r.
  for (int64_t p = 0; p < panels; ++p) {
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
  off_.resize(size_t(K));
  for (int64_t c = 0; c < g_.Ci; ++c) {
    for (int64_t i = 0; i < g_.kh; ++i) {
      for (int64_t j = 0; j < g_.kw; ++j) off_[size_t((c * g_.kh + i) * g_.kw + j)] = int32_t(c * plane_ + i * G_ + j);
    }
  }
}

void DirectConv::run(const float* in, int64_t sC, int64_t sH, int64_t sW, const float* bias, float* out,
                     int threads) const {
  const Geometry& g = g_;
  // the zero-padded grid of every input channel, plus one vector of slack
  float* grid = t_cols.get<float>(g.Ci * plane_ + 16);
  std::memset(grid, 0, sizeof(float) * size_t(g.Ci * plane_ + 16));
  for (int64_t c = 0; c < g.Ci; ++c) {
    for (int64_t h = 0; h < g.H; ++h) {
      float* row = grid + c * plane_ + (h + g.ph) * G_ + g.pw;
      const float* src = in + c * sC + h * sH;
      if (sW == 1) {
        std::memcpy(row, src, sizeof(float) * size_t(g.W));
      } else {
        for (int64_t x = 0; x < g.W; ++x) row[x] = src[x * sW];
      }
    }
  }
  const int64_t taps = g.kh * g.kw, K = g.Ci * taps, HoWo = g.Ho * g.Wo;
  const int64_t n_grid = g.Ho * G_, strips = (n_grid + kNR - 1) / kNR, panels = (g.Co + kMR - 1) / kMR;
  const int64_t chunk_c = std::max<int64_t>(1, kMaxK / taps);  // input channels per depth chunk
  auto strip = [&](int64_t s) {
    const int64_t q0 = s * kNR;
    const int nv = int(std::min<int64_t>(kNV, (n_grid - q0) / 16));
    int64_t dst[kNV] = {0, 0, 0};
    __mmask16 mask[kNV] = {0, 0, 0};
    for (int v = 0; v < nv; ++v) {
      const int64_t q = q0 + 16 * v, oh = q / G_, ow = q % G_;
      dst[v] = oh * g.Wo + ow;
      mask[v] = first_lanes(g.Wo - ow);
    }
    for (int64_t c0 = 0; c0 < g.Ci; c0 += chunk_c) {
      const int64_t k0 = c0 * taps, kc = std::min(chunk_c, g.Ci - c0) * taps;
      for (int64_t p = 0; p < panels; ++p) {
        const float* ap = packed_.data() + p * K * kMR + k0 * kMR;
        float* o = out + p * kMR * HoWo;
        const int rows = int(std::min<int64_t>(kMR, g.Co - p * kMR));
        const float* b = bias ? bias + p * kMR : nullptr;
        const bool acc = c0 > 0;
        const int32_t* offs = off_.data() + k0;
        if (nv == 3) {
          direct_tile<3>(kc, ap, grid + q0, offs, o, HoWo, dst, mask, rows, b, acc);
        } else if (nv == 2) {
          direct_tile<2>(kc, ap, grid + q0, offs, o, HoWo, dst, mask, rows, b, acc);
        } else {
          direct_tile<1>(kc, ap, grid + q0, offs, o, HoWo, dst, mask, rows, b, acc);
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

}  // namespace brisk::kernels::cpu::conv

#pragma GCC diagnostic pop
