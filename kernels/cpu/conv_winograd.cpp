// kernels/cpu/conv_winograd.cpp: the Winograd F(2x2, 3x3) F32 convolution of kernels/cpu/conv.h
// (WinogradConv): 3x3 / padding 1 / stride 1 convs computed as 16 small matrix products in the
// transformed domain, 2.25x fewer multiply-adds than the direct sum. conv2d's forward, its input
// gradient (the same conv with the flipped, transposed weights) and its weight gradient (the
// adjoint of the forward's transforms) take it. Note [Winograd conv].
// Not here: the choice between this, the direct kernel and im2col + GEMM, and the threading over
// samples (kernels/cpu/conv.cpp).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

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

// Note [Winograd conv]
// F(2x2, 3x3) (Lavin & Gray, 2015): a 2x2 block of outputs of a 3x3 correlation is
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A,  summed over input channels,
// with d the 4x4 input tile around it (rows and columns -1 .. 2 of the block, zeros in the
// padding), g the 3x3 kernel, (.) the elementwise product and
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
// The sum over channels of the 16 elementwise products is 16 matrix products, one per position
// xi of the 4x4 transformed tile: M_xi (tiles, Co) = V_xi (tiles, Ci) @ U_xi (Ci, Co), 4 x 16 =
// 64 multiply-adds per channel pair and 2x2 outputs instead of 9 x 4 = 36 x 4 / 2.25.
// Layout: channels innermost and padded to multiples of 16 (Cp, Op), so every transform runs on
// vectors of 16 channels with no shuffles: the input plane is copied once per sample into a
// zero-padded channels-last grid (rows -1 .. 2 * tiles_h, the same for columns), V and M are
// [xi][tile][channel], U is [xi][Ci][Co] (transformed once per call). The products run on a
// micro kernel of MR tiles x NV vectors of 16 output channels (24 accumulators), the tiles'
// V entries broadcast, U's rows loaded; the outputs are inverse-transformed (with the bias)
// into a channels-last block and stored to NCHW. Tiles are processed in blocks of whole tile
// rows sized so that V, M and the output block stay in L2.
// Input gradient: the adjoint of a "same" 3x3 conv is the "same" conv with the weights flipped
// and transposed, so it is this forward with U built from w'(o, c, i, j) = w(c, o, 2 - i, 2 - j).
// Weight gradient: the adjoint of the forward's algebra. With dM = A dY A^T (the 2x2 output
// gradient tile spread to 4x4), dU_xi (Ci, Co) = sum over tiles V_xi^T dM_xi (the same micro
// kernel with the tiles as depth, no lane reductions) and dg = G^T dU G. Output tiles past the
// plane's edge (odd H or W) take a zero gradient, so they add nothing.
// Numbers: B and A have entries 0 and +-1, G halves; the error is that of a sum of a few more
// terms than the direct conv's (tests: against the F64 path at the direct kernel's tolerance).
// Against the direct kernel on the CNN's second layer (32 -> 64 channels, 14 x 14, batch 128,
// one thread): see the Performance history in docs/DECISIONS.md.

namespace {

constexpr int64_t kTile = 4;                // transformed tile side (2 outputs + 2 halo)
constexpr int64_t kXi = 16;                 // transformed positions per tile
constexpr int64_t kBlockBytes = 640 << 10;  // V + M + output block per tile block (L2)

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

std::atomic<bool>& winograd_enabled() {
  static std::atomic<bool> on{conv_kernels_from_env() == ConvKernels::All};
  return on;
}

// This thread's padded copies, transformed tiles and output block.
thread_local Workspace t_winograd;

// c rows r < rows (ldc apart), vectors v < NV at c + 16 v (+)= sum over k < kc of
// a[r * a_rs + k * a_ks] * b[k * ldb + 16 v ..]. Rows at or past `rows` read row rows - 1 (in
// bounds; their sums are dropped).
template <int MR, int NV>
__attribute__((target("avx512f"))) void wino_tile(int64_t kc, const float* a, int64_t a_rs, int64_t a_ks,
                                                  const float* b, int64_t ldb, float* c, int64_t ldc, int rows,
                                                  bool accumulate) {
  __m512 acc[MR][NV];
  int64_t roff[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    roff[r] = std::min(r, rows - 1) * a_rs;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate && r < rows ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[roff[r]]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += a_ks;
    b += ldb;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

template <int MR, int NV>
void wino_rows(int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb, float* c,
               int64_t ldc, bool accumulate) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    wino_tile<MR, NV>(k, a + r0 * a_rs, a_rs, a_ks, b, ldb, c + r0 * ldc, ldc, int(std::min<int64_t>(MR, m - r0)),
                      accumulate);
  }
}

// Rows per micro kernel for m rows: the candidate that pads m the least, the larger on a tie
// (49 tiles: 7, not 6 with 5 rows wasted; the weight gradient's 32 channels: 8 x 4 vectors, 32
// accumulators, 5.3 ms against 6.4 with 4 x 4 on the CNN's second layer, its depth being the
// tiles, long enough to pay for what GCC spills).
template <int... MRs>
int pick_rows(int64_t m) {
  int best = 0;
  int64_t best_rows = 0;
  for (const int mr : {MRs...}) {
    const int64_t rows = (m + mr - 1) / mr * mr;
    if (best == 0 || rows <= best_rows) best = mr, best_rows = rows;
  }
  return best;
}

// c (m, 16 * nvec), row stride ldc, (+)= a (m, k) @ b (k, 16 * nvec), a's (r, k) at
// a[r * a_rs + k * a_ks], b's row k at b + k * ldb: blocks of 64 columns, then one of 48, 32
// or 16, each in row blocks of pick_rows().
void wino_gemm(int64_t m, int64_t nvec, int64_t k, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t v0 = 0; v0 < nvec; v0 += 4) {
    const float* bb = b + 16 * v0;
    float* cc = c + 16 * v0;
#define BRISK_WINO_ROWS(MR, NV) \
  case MR: wino_rows<MR, NV>(m, k, a, a_rs, a_ks, bb, ldb, cc, ldc, accumulate); break
    switch (std::min<int64_t>(4, nvec - v0)) {
      case 4:
        switch (pick_rows<4, 5, 6, 7, 8>(m)) {
          BRISK_WINO_ROWS(4, 4);
          BRISK_WINO_ROWS(5, 4);
          BRISK_WINO_ROWS(6, 4);
          BRISK_WINO_ROWS(7, 4);
          default: wino_rows<8, 4>(m, k, a, a_rs, a_ks, bb, ldb, cc, ldc, accumulate);
        }
        break;
      case 3:
        switch (pick_rows<6, 7, 8>(m)) {
          BRISK_WINO_ROWS(6, 3);
          BRISK_WINO_ROWS(7, 3);
          default: wino_rows<8, 3>(m, k, a, a_rs, a_ks, bb, ldb, cc, ldc, accumulate);
        }
        break;
      case 2:
        switch (pick_rows<8, 10, 12, 14>(m)) {
          BRISK_WINO_ROWS(8, 2);
          BRISK_WINO_ROWS(10, 2);
          BRISK_WINO_ROWS(12, 2);
          default: wino_rows<14, 2>(m, k, a, a_rs, a_ks, bb, ldb, cc, ldc, accumulate);
        }
        break;
      default:
        switch (pick_rows<8, 12, 16>(m)) {
          BRISK_WINO_ROWS(8, 1);
          BRISK_WINO_ROWS(12, 1);
          default: wino_rows<16, 1>(m, k, a, a_rs, a_ks, bb, ldb, cc, ldc, accumulate);
        }
    }
#undef BRISK_WINO_ROWS
  }
}

// V[xi][t][cp] for the tiles of tile rows [ty0, ty1): the 16 vectors B^T d B of each tile and
// 16-channel vector, from the padded channels-last grid xp (row stride wp * cp).
__attribute__((target("avx512f"))) void input_transform(const float* xp, int64_t wp, int64_t cp, int64_t tw,
                                                        int64_t ty0, int64_t ty1, float* v) {
  const int64_t ntb = (ty1 - ty0) * tw, plane = ntb * cp;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    for (int64_t tx = 0; tx < tw; ++tx) {
      const float* d0 = xp + (2 * ty * wp + 2 * tx) * cp;
      float* out = v + ((ty - ty0) * tw + tx) * cp;
      for (int64_t c = 0; c < cp; c += 16) {
        __m512 t[4][4];
        for (int64_t j = 0; j < 4; ++j) {
          const __m512 r0 = _mm512_loadu_ps(d0 + (0 * wp + j) * cp + c),
                       r1 = _mm512_loadu_ps(d0 + (1 * wp + j) * cp + c);
          const __m512 r2 = _mm512_loadu_ps(d0 + (2 * wp + j) * cp + c),
                       r3 = _mm512_loadu_ps(d0 + (3 * wp + j) * cp + c);
          t[0][j] = _mm512_sub_ps(r0, r2);  // B^T d: the rows
          t[1][j] = _mm512_add_ps(r1, r2);
          t[2][j] = _mm512_sub_ps(r2, r1);
          t[3][j] = _mm512_sub_ps(r1, r3);
        }
        for (int64_t i = 0; i < 4; ++i) {  // (B^T d) B: the columns
          float* o = out + i * kTile * plane + c;
          _mm512_storeu_ps(o, _mm512_sub_ps(t[i][0], t[i][2]));
          _mm512_storeu_ps(o + plane, _mm512_add_ps(t[i][1], t[i][2]));
          _mm512_storeu_ps(o + 2 * plane, _mm512_sub_ps(t[i][2], t[i][1]));
          _mm512_storeu_ps(o + 3 * plane, _mm512_sub_ps(t[i][1], t[i][3]));
        }
      }
    }
  }
}

// The output block yb (rows 2 * (ty1 - ty0), 2 * tw columns, op channels, channels-last) from
// M[xi][t][op]: A^T m A of each tile and 16-channel vector, plus the bias (bp: op floats).
__attribute__((target("avx512f"))) void output_transform(const float* m, int64_t op, int64_t tw, int64_t ntb,
                                                         const float* bp, float* yb) {
  const int64_t plane = ntb * op, w2 = 2 * tw;
  for (int64_t t = 0; t < ntb; ++t) {
    const int64_t ty = t / tw, tx = t % tw;
    float* y0 = yb + (2 * ty * w2 + 2 * tx) * op;
    for (int64_t c = 0; c < op; c += 16) {
      const float* src = m + t * op + c;
      __m512 s0[4], s1[4];
      for (int64_t j = 0; j < 4; ++j) {  // A^T m: the rows
        const __m512 m0 = _mm512_loadu_ps(src + (0 * 4 + j) * plane), m1 = _mm512_loadu_ps(src + (1 * 4 + j) * plane);
        const __m512 m2 = _mm512_loadu_ps(src + (2 * 4 + j) * plane), m3 = _mm512_loadu_ps(src + (3 * 4 + j) * plane);
        s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 bias = _mm512_loadu_ps(bp + c);
      float* o = y0 + c;  // (A^T m) A: the columns
      _mm512_storeu_ps(o, _mm512_add_ps(bias, _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2])));
      _mm512_storeu_ps(o + op, _mm512_add_ps(bias, _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3])));
      _mm512_storeu_ps(o + w2 * op, _mm512_add_ps(bias, _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2])));
      _mm512_storeu_ps(o + (w2 + 1) * op, _mm512_add_ps(bias, _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3])));
    }
  }
}

// dM[xi][t][op] for the tiles of tile rows [ty0, ty1): A dy A^T of each 2x2 output-gradient
// tile, from the channels-last gradient grid gp (2 * tw columns, zeros past the plane).
__attribute__((target("avx512f"))) void grad_transform(const float* gp, int64_t op, int64_t tw, int64_t ty0,
                                                       int64_t ty1, float* dm) {
  const int64_t ntb = (ty1 - ty0) * tw, plane = ntb * op, w2 = 2 * tw;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    for (int64_t tx = 0; tx < tw; ++tx) {
      const float* g0 = gp + (2 * ty * w2 + 2 * tx) * op;
      float* out = dm + ((ty - ty0) * tw + tx) * op;
      for (int64_t c = 0; c < op; c += 16) {
        const __m512 e00 = _mm512_loadu_ps(g0 + c), e01 = _mm512_loadu_ps(g0 + op + c);
        const __m512 e10 = _mm512_loadu_ps(g0 + w2 * op + c), e11 = _mm512_loadu_ps(g0 + (w2 + 1) * op + c);
        // A dy: rows dy0, dy0 + dy1, dy0 - dy1, -dy1 (each a pair of columns)
        const __m512 r[4][2] = {{e00, e01},
                                {_mm512_add_ps(e00, e10), _mm512_add_ps(e01, e11)},
                                {_mm512_sub_ps(e00, e10), _mm512_sub_ps(e01, e11)},
                                {_mm512_sub_ps(zero, e10), _mm512_sub_ps(zero, e11)}};
        for (int64_t i = 0; i < 4; ++i) {  // (A dy) A^T: the same on the columns
          float* o = out + i * kTile * plane + c;
          _mm512_storeu_ps(o, r[i][0]);
          _mm512_storeu_ps(o + plane, _mm512_add_ps(r[i][0], r[i][1]));
          _mm512_storeu_ps(o + 2 * plane, _mm512_sub_ps(r[i][0], r[i][1]));
          _mm512_storeu_ps(o + 3 * plane, _mm512_sub_ps(zero, r[i][1]));
        }
      }
    }
  }
}

// A 16 x 16 transpose: dst row j (ds apart), lanes `store`, = column j of the src rows i < ni
// (ss apart, lanes `load`; rows past ni and lanes outside `load` read as zero), for j < nj.
__attribute__((target("avx512f"))) void transpose16(const float* src, int64_t ss, int ni, __mmask16 load, float* dst,
                                                    int64_t ds, int nj, __mmask16 store) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < ni ? _mm512_maskz_loadu_ps(load, src + i * ss) : _mm512_setzero_ps();
  for (int k = 0; k < 8; ++k) {  // pairs of rows, 32-bit interleave
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // quads of rows: r[4k + m] holds column 4L + m of rows 4k .. 4k + 3 in 128-bit lane L
    const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * k + 2]), d = _mm512_castps_pd(t[4 * k + 3]);
    r[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int m = 0; m < 4; ++m) {  // gather the four 128-bit lanes of each column
    const __m512 a = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88), b = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88),
                 d = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
    t[m] = _mm512_shuffle_f32x4(a, c, 0x88);
    t[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
    t[4 + m] = _mm512_shuffle_f32x4(b, d, 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
  for (int j = 0; j < nj; ++j) _mm512_mask_storeu_ps(dst + j * ds, store, t[j]);
}

// dst (rows, cols, cp) channels-last, zero outside: dst[(r0 + y, c0 + x, c)] = src plane c
// (strides sC, sH, sW) at (y, x) for c < C, y < H, x < W; channels C .. cp zero.
void to_channels_last(const float* src, int64_t sC, int64_t sH, int64_t sW, int64_t C, int64_t H, int64_t W,
                      int64_t rows, int64_t cols, int64_t cp, int64_t r0, int64_t c0, float* dst) {
  // the border only: every pixel inside is written whole (cp channels) below
  std::memset(dst, 0, sizeof(float) * size_t(r0 * cols * cp));
  std::memset(dst + (r0 + H) * cols * cp, 0, sizeof(float) * size_t((rows - r0 - H) * cols * cp));
  for (int64_t y = 0; y < H; ++y) {
    float* row = dst + (r0 + y) * cols * cp;
    std::memset(row, 0, sizeof(float) * size_t(c0 * cp));
    std::memset(row + (c0 + W) * cp, 0, sizeof(float) * size_t((cols - c0 - W) * cp));
  }
  if (sW != 1) {  // a strided view: element by element
    for (int64_t y = 0; y < H; ++y) {
      for (int64_t x = 0; x < W; ++x) {
        float* d = dst + ((r0 + y) * cols + c0 + x) * cp;
        const float* s = src + y * sH + x * sW;
        for (int64_t c = 0; c < C; ++c) d[c] = s[c * sC];
        for (int64_t c = C; c < cp; ++c) d[c] = 0;
      }
    }
    return;
  }
  // 16 channels x 16 pixels of a row at a time
  for (int64_t ch = 0; ch < cp; ch += 16) {
    const int nc = int(std::clamp<int64_t>(C - ch, 0, 16));
    for (int64_t y = 0; y < H; ++y) {
      for (int64_t x = 0; x < W; x += 16) {
        const int nx = int(std::min<int64_t>(16, W - x));
        transpose16(src + ch * sC + y * sH + x, sC, nc, first_lanes(nx), dst + ((r0 + y) * cols + c0 + x) * cp + ch, cp,
                    nx, 0xffff);
      }
    }
  }
}

// out (C, H, W) rows [y0, y1) = the channels-last block yb (rows from y0, w2 columns, cp
// channels), channels c < C.
void from_channels_last(const float* yb, int64_t w2, int64_t cp, int64_t C, int64_t H, int64_t W, int64_t y0,
                        int64_t y1, float* out) {
  for (int64_t ch = 0; ch < C; ch += 16) {
    const int nc = int(std::min<int64_t>(16, C - ch));
    for (int64_t y = y0; y < y1; ++y) {
      for (int64_t x = 0; x < W; x += 16) {
        const int nx = int(std::min<int64_t>(16, W - x));
        // lanes past the row land on the next rows' first pixels, written after this one (rows
        // and blocks run in order): only stores that would leave the plane are masked (a
        // masked store per row cost ~8% of the forward)
        const bool inside = (y * W + x + 16) <= H * W;
        transpose16(yb + ((y - y0) * w2 + x) * cp + ch, cp, nx, 0xffff, out + ch * H * W + y * W + x, H * W, nc,
                    inside ? __mmask16(0xffff) : first_lanes(nx));
      }
    }
  }
}

}  // namespace

void set_winograd_conv(bool enabled) { winograd_enabled().store(enabled); }
bool winograd_conv_enabled() { return winograd_enabled().load(); }

bool WinogradConv::fits(const Geometry& g) {
  if (!winograd_conv_enabled()) return false;
  if (f32_gemm_path() != F32GemmPath::Avx512) return false;  // the AVX-512 path (BRISK_GEMM=eigen: im2col)
  // Fewer channels than a vector pad too much (the CNN's first layer, 1 -> 32, stays direct);
  // planes under 4 x 4 waste most of each 2 x 2 output tile.
  if (g.Ci < 16 || g.Co < 16 || g.H < 4 || g.W < 4) return false;
  // one sample's buffers in floats, with room to spare in int64 and size_t (else the direct
  // kernel or im2col decide)
  const double grid = (double(g.H) + 4) * (double(g.W) + 4) * double(round16(std::max(g.Ci, g.Co)));
  return 2 * grid + double(kBlockBytes) < 0x1p44;
}

WinogradConv::WinogradConv(const Geometry& geo, const float* w, bool flipped) : g_(geo) {
  cp_ = round16(g_.Ci);
  op_ = round16(g_.Co);
  th_ = (g_.H + 1) / 2;
  tw_ = (g_.W + 1) / 2;
  // tile rows per block: V (16 cp) + M or dM (16 op) + the output block (4 op) floats per tile
  const int64_t per_tile = (kXi * (cp_ + op_) + 4 * op_) * int64_t(sizeof(float));
  rows_per_block_ = std::clamp<int64_t>(kBlockBytes / (per_tile * tw_), 1, th_);
  if (!w) return;
  u_.assign(size_t(kXi * cp_ * op_), 0.f);
  for (int64_t o = 0; o < g_.Co; ++o) {
    for (int64_t c = 0; c < g_.Ci; ++c) {
      float k[3][3];
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          // forward: w (Co, Ci, 3, 3); flipped: w (Ci, Co, 3, 3), taps reversed
          k[i][j] = flipped ? w[((c * g_.Co + o) * 3 + (2 - i)) * 3 + (2 - j)] : w[((o * g_.Ci + c) * 3 + i) * 3 + j];
        }
      }
      float gk[4][3];  // G g
      for (int64_t j = 0; j < 3; ++j) {
        gk[0][j] = k[0][j];
        gk[1][j] = 0.5f * (k[0][j] + k[1][j] + k[2][j]);
        gk[2][j] = 0.5f * (k[0][j] - k[1][j] + k[2][j]);
        gk[3][j] = k[2][j];
      }
      for (int64_t i = 0; i < 4; ++i) {  // (G g) G^T
        const float u[4] = {gk[i][0], 0.5f * (gk[i][0] + gk[i][1] + gk[i][2]), 0.5f * (gk[i][0] - gk[i][1] + gk[i][2]),
                            gk[i][2]};
        for (int64_t j = 0; j < 4; ++j) u_[size_t(((i * 4 + j) * cp_ + c) * op_ + o)] = u[j];
      }
    }
  }
}

int64_t WinogradConv::grid_floats() const { return (2 * th_ + 2) * (2 * tw_ + 2) * cp_; }

void WinogradConv::run(const float* in, int64_t sC, int64_t sH, int64_t sW, const float* bias, float* out) const {
  const int64_t hp = 2 * th_ + 2, wp = 2 * tw_ + 2, w2 = 2 * tw_;
  const int64_t max_tiles = rows_per_block_ * tw_;
  const int64_t n_grid = grid_floats(), n_v = kXi * max_tiles * cp_, n_m = kXi * max_tiles * op_,
                n_y = 4 * max_tiles * op_;
  float* grid = t_winograd.get<float>(n_grid + n_v + n_m + n_y + op_);
  float* v = grid + n_grid;
  float* m = v + n_v;
  float* yb = m + n_m;
  float* bp = yb + n_y;
  std::fill_n(bp, op_, 0.f);
  if (bias) std::copy_n(bias, g_.Co, bp);
  to_channels_last(in, sC, sH, sW, g_.Ci, g_.H, g_.W, hp, wp, cp_, 1, 1, grid);
  for (int64_t ty0 = 0; ty0 < th_; ty0 += rows_per_block_) {
    const int64_t ty1 = std::min(th_, ty0 + rows_per_block_), ntb = (ty1 - ty0) * tw_;
    input_transform(grid, wp, cp_, tw_, ty0, ty1, v);
    for (int64_t xi = 0; xi < kXi; ++xi) {
      // M_xi (ntb, op) = V_xi (ntb, cp) @ U_xi (cp, op)
      wino_gemm(ntb, op_ / 16, cp_, v + xi * ntb * cp_, cp_, 1, u_.data() + xi * cp_ * op_, op_, m + xi * ntb * op_,
                op_, false);
    }
    output_transform(m, op_, tw_, ntb, bp, yb);
    from_channels_last(yb, w2, op_, g_.Co, g_.H, g_.W, 2 * ty0, std::min(g_.H, 2 * ty1), out);
  }
}

void WinogradConv::weight_grad(const float* in, int64_t sB, int64_t sC, int64_t sH, int64_t sW, const float* g,
                               int64_t b0, int64_t b1, float* du) const {
  const int64_t hp = 2 * th_ + 2, wp = 2 * tw_ + 2, h2 = 2 * th_, w2 = 2 * tw_, HW = g_.H * g_.W;
  const int64_t max_tiles = rows_per_block_ * tw_;
  const int64_t n_grid = grid_floats(), n_g = h2 * w2 * op_, n_v = kXi * max_tiles * cp_, n_m = kXi * max_tiles * op_;
  float* grid = t_winograd.get<float>(n_grid + n_g + n_v + n_m);
  float* gg = grid + n_grid;
  float* v = gg + n_g;
  float* dm = v + n_v;
  for (int64_t b = b0; b < b1; ++b) {
    to_channels_last(in + b * sB, sC, sH, sW, g_.Ci, g_.H, g_.W, hp, wp, cp_, 1, 1, grid);
    to_channels_last(g + b * g_.Co * HW, HW, g_.W, 1, g_.Co, g_.H, g_.W, h2, w2, op_, 0, 0, gg);
    for (int64_t ty0 = 0; ty0 < th_; ty0 += rows_per_block_) {
      const int64_t ty1 = std::min(th_, ty0 + rows_per_block_), ntb = (ty1 - ty0) * tw_;
      input_transform(grid, wp, cp_, tw_, ty0, ty1, v);
      grad_transform(gg, op_, tw_, ty0, ty1, dm);
      for (int64_t xi = 0; xi < kXi; ++xi) {
        // dU_xi (cp, op) += V_xi^T (cp, ntb) @ dM_xi (ntb, op)
        wino_gemm(cp_, op_ / 16, ntb, v + xi * ntb * cp_, 1, cp_, dm + xi * ntb * op_, op_, du + xi * cp_ * op_, op_,
                  true);
      }
    }
  }
}

void WinogradConv::weight_grad_finish(const float* du, float* gw) const {
  for (int64_t o = 0; o < g_.Co; ++o) {
    for (int64_t c = 0; c < g_.Ci; ++c) {
      float d[4][4];
      for (int64_t xi = 0; xi < kXi; ++xi) d[xi / 4][xi % 4] = du[(xi * cp_ + c) * op_ + o];
      float gd[3][4];  // G^T dU
      for (int64_t j = 0; j < 4; ++j) {
        gd[0][j] = d[0][j] + 0.5f * (d[1][j] + d[2][j]);
        gd[1][j] = 0.5f * (d[1][j] - d[2][j]);
        gd[2][j] = 0.5f * (d[1][j] + d[2][j]) + d[3][j];
      }
      float* dst = gw + (o * g_.Ci + c) * 9;
      for (int64_t i = 0; i < 3; ++i) {  // (G^T dU) G
        dst[i * 3 + 0] = gd[i][0] + 0.5f * (gd[i][1] + gd[i][2]);
        dst[i * 3 + 1] = 0.5f * (gd[i][1] - gd[i][2]);
        dst[i * 3 + 2] = 0.5f * (gd[i][1] + gd[i][2]) + gd[i][3];
      }
    }
  }
}

}  // namespace brisk::kernels::cpu::conv

#pragma GCC diagnostic pop
