// kernels/cpu/pool.cpp: CPU kernels of the pooling ops and their backward ops: max_pool2d
// (values and flat argmax per plane, with a tight path for the common 2x2 / stride 2 pool),
// avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d (values and flat argmax), and
// resample2d (pad / interpolate's separable 2-tap map) with its backward. Direct loops over
// dense planes, OpenMP over planes; 16-bit floats compute in float and round once. Windows
// come from kernels/pool_window.h, shared with the CUDA kernels, which these are the
// reference for.
// Not here: output sizes, checks and backward formulas (engine/ops/pool.cpp); reference loops
// for the tests (opcheck/specs_nn.cpp, opcheck/specs_resize.cpp); the CUDA kernels
// (kernels/cuda/pool.cu).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/half.h"
#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"
#include "kernels/pool_window.h"

namespace brisk::kernels::cpu {

namespace {

// Ceiling of n / d for d > 0 and any sign of n.
int64_t ceil_div(int64_t n, int64_t d) { return n >= 0 ? (n + d - 1) / d : -((-n) / d); }

int64_t window_work(const PoolProblem& p) { return p.planes * p.Ho * p.Wo * p.kh * p.kw; }

// Runs body(plane) for every plane, over the OpenMP threads when the work is large.
template <class F>
void for_each_plane(int64_t planes, int64_t work, F&& body) {
  const int nt = threads_for(work);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t i = 0; i < planes; ++i) body(i);
}

template <class T>
const T* cdata(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mdata(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---- max pooling
// Max pooling's rules: NaN wins, and the first of equal maxima (in window order), as in PyTorch.

// Whether the plane pool is 2x2 / stride 2 / unpadded / undilated with windows inside the input.
bool two_by_two(const PoolProblem& p) {
  return p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 && p.dh == 1 && p.dw == 1 &&
         2 * p.Ho <= p.H && 2 * p.Wo <= p.W;
}

// One plane of a 2x2 / stride 2 pool. Branch-free selects (v != v is isnan) and sizes in
// locals, so that the compiler vectorizes the row.
template <class T>
void max_pool_plane_2x2(const T* xp, T* yp, int64_t* ip, const PoolProblem& p) {
  using A = compute_t<T>;
  const int64_t W = p.W, Wo = p.Wo;
  for (int64_t oh = 0; oh < p.Ho; ++oh) {
    const T* r0 = xp + 2 * oh * W;
    const T* r1 = r0 + W;
    T* yr = yp + oh * Wo;
    int64_t* ir = ip + oh * Wo;
    const int64_t at = 2 * oh * W;
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const A v0 = A(r0[2 * ow]), v1 = A(r0[2 * ow + 1]), v2 = A(r1[2 * ow]), v3 = A(r1[2 * ow + 1]);
      A best = v0;
      int64_t off = 0;
      bool take = v1 > best || v1 != v1;
      best = take ? v1 : best;
      off = take ? 1 : off;
      take = v2 > best || v2 != v2;
      best = take ? v2 : best;
      off = take ? W : off;
      take = v3 > best || v3 != v3;
      best = take ? v3 : best;
      off = take ? W + 1 : off;
      yr[ow] = T(best);
      ir[ow] = at + 2 * ow + off;
    }
  }
}

// GCC 12's AVX-512 shift intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once inlined (a false positive, as in kernels/cpu/gemm_bf16.cpp).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// One BF16 plane of a 2x2 / stride 2 pool with AVX-512: 16 outputs per step, a masked step for
// a short row (the Fashion-MNIST CNN's rows are 14 and 7 wide, all remainder for a scalar or
// auto-vectorized loop). Each horizontal pair of inputs is one 32-bit lane: its halves shifted
// into floats are compared as the scalar kernel compares (NaN wins, the first of equal values
// wins), and the winner's bits are copied, never rounded. Same results as max_pool_plane_2x2.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void max_pool_plane_2x2_bf16_avx512(const BFloat16* xp,
                                                                                         BFloat16* yp, int64_t* ip,
                                                                                         const PoolProblem& p) {
  const int64_t W = p.W, Wo = p.Wo;
  const __m512i hi_mask = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i lane = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t oh = 0; oh < p.Ho; ++oh) {
    const uint16_t* r0 = reinterpret_cast<const uint16_t*>(xp) + 2 * oh * W;
    const uint16_t* r1 = r0 + W;
    uint16_t* yr = reinterpret_cast<uint16_t*>(yp) + oh * Wo;
    int64_t* ir = ip + oh * Wo;
    for (int64_t ow = 0; ow < Wo; ow += 16) {
      const int n = int(std::min<int64_t>(16, Wo - ow));
      const __mmask16 m = __mmask16((1u << n) - 1u);
      const __m512i w0 = _mm512_maskz_loadu_epi32(m, r0 + 2 * ow), w1 = _mm512_maskz_loadu_epi32(m, r1 + 2 * ow);
      const __m512i b0 = _mm512_srli_epi32(_mm512_slli_epi32(w0, 16), 16), b1 = _mm512_srli_epi32(w0, 16);
      const __m512i b2 = _mm512_srli_epi32(_mm512_slli_epi32(w1, 16), 16), b3 = _mm512_srli_epi32(w1, 16);
      const __m512 v0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)),
                   v1 = _mm512_castsi512_ps(_mm512_and_si512(w0, hi_mask));
      const __m512 v2 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)),
                   v3 = _mm512_castsi512_ps(_mm512_and_si512(w1, hi_mask));
      __m512 best = v0;
      __m512i raw = b0, off = _mm512_setzero_si512();
      // A lambda does not inherit its function's target: it names it (BRISK_NATIVE=OFF builds).
      auto take = [&](__m512 v, __m512i bits, int32_t o) __attribute__((target("avx512f,avx512bw,avx512vl"))) {
        const __mmask16 t = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, t, v);
        raw = _mm512_mask_mov_epi32(raw, t, bits);
        off = _mm512_mask_mov_epi32(off, t, _mm512_set1_epi32(o));
      };
      take(v1, b1, 1);
      take(v2, b2, int32_t(W));
      take(v3, b3, int32_t(W) + 1);
      _mm256_mask_storeu_epi16(yr + ow, m, _mm512_cvtepi32_epi16(raw));
      const __m512i idx32 =
          _mm512_add_epi32(_mm512_add_epi32(lane, off), _mm512_set1_epi32(int32_t(2 * oh * W + 2 * ow)));
      _mm512_mask_storeu_epi64(ir + ow, __mmask8(m & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(idx32)));
      _mm512_mask_storeu_epi64(ir + ow + 8, __mmask8(m >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(idx32, 1)));
    }
  }
}

// One F32 plane of a 2x2 / stride 2 pool with AVX-512: 16 outputs per step (a masked step for a
// short row), the even and odd columns of two input rows gathered by permutes from 32 loaded
// floats, then compared as max_pool_plane_2x2 compares (NaN wins, the first of equal values
// wins). Same results as max_pool_plane_2x2<float>; the auto-vectorized loop ran 4x slower
// (its stride-2 loads), 6.0 vs ~1.5 ms on (128, 32, 28, 28) on one thread.
__attribute__((target("avx512f"))) void max_pool_plane_2x2_f32_avx512(const float* xp, float* yp, int64_t* ip,
                                                                      const PoolProblem& p) {
  const int64_t W = p.W, Wo = p.Wo;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t oh = 0; oh < p.Ho; ++oh) {
    const float* r0 = xp + 2 * oh * W;
    const float* r1 = r0 + W;
    float* yr = yp + oh * Wo;
    int64_t* ir = ip + oh * Wo;
    for (int64_t ow = 0; ow < Wo; ow += 16) {
      const int n = int(std::min<int64_t>(16, Wo - ow));  // outputs; 2n inputs per row
      const __mmask16 m = __mmask16((1u << n) - 1u);
      const __mmask16 lo = __mmask16(n >= 8 ? 0xffffu : (1u << (2 * n)) - 1u);
      const __mmask16 hi = __mmask16(n > 8 ? (1u << (2 * n - 16)) - 1u : 0u);
      const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
      const __m512 c0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), c1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
      const __m512 v0 = _mm512_permutex2var_ps(a0, even, a1), v1 = _mm512_permutex2var_ps(a0, odd, a1);
      const __m512 v2 = _mm512_permutex2var_ps(c0, even, c1), v3 = _mm512_permutex2var_ps(c0, odd, c1);
      __m512 best = v0;
      __m512i off = _mm512_setzero_si512();
      auto take = [&](__m512 v, int32_t o) __attribute__((target("avx512f"))) {
        const __mmask16 t = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, t, v);
        off = _mm512_mask_mov_epi32(off, t, _mm512_set1_epi32(o));
      };
      take(v1, 1);
      take(v2, int32_t(W));
      take(v3, int32_t(W) + 1);
      _mm512_mask_storeu_ps(yr + ow, m, best);
      const __m512i idx32 =
          _mm512_add_epi32(_mm512_add_epi32(even, off), _mm512_set1_epi32(int32_t(2 * oh * W + 2 * ow)));
      _mm512_mask_storeu_epi64(ir + ow, __mmask8(m & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(idx32)));
      _mm512_mask_storeu_epi64(ir + ow + 8, __mmask8(m >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(idx32, 1)));
    }
  }
}
#pragma GCC diagnostic pop

bool has_avx512f() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

bool has_avx512bw() {
  static const bool ok =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return ok;
}

// One plane of any max pool: each window's taps from the first inside the input.
template <class T>
void max_pool_plane(const T* xp, T* yp, int64_t* ip, const PoolProblem& p) {
  using A = compute_t<T>;
  for (int64_t oh = 0; oh < p.Ho; ++oh) {
    const int64_t hs = oh * p.sh - p.ph;
    const int64_t i0 = hs < 0 ? ceil_div(-hs, p.dh) : 0;  // first tap inside the input
    for (int64_t ow = 0; ow < p.Wo; ++ow) {
      const int64_t ws = ow * p.sw - p.pw;
      const int64_t j0 = ws < 0 ? ceil_div(-ws, p.dw) : 0;
      A best = -std::numeric_limits<A>::infinity();
      int64_t bi = -1;
      for (int64_t i = i0; i < p.kh; ++i) {
        const int64_t ih = hs + i * p.dh;
        if (ih >= p.H) break;
        for (int64_t j = j0; j < p.kw; ++j) {
          const int64_t iw = ws + j * p.dw;
          if (iw >= p.W) break;
          const A v = A(xp[ih * p.W + iw]);
          if (bi < 0 || v > best || std::isnan(v)) best = v, bi = ih * p.W + iw;
        }
      }
      yp[oh * p.Wo + ow] = T(best);
      ip[oh * p.Wo + ow] = std::max<int64_t>(bi, 0);
    }
  }
}

// y, indices (planes, Ho, Wo) = max over each window of x (planes, H, W).
template <class T>
void max_pool_forward(const T* x, T* y, int64_t* idx, const PoolProblem& p) {
  const bool fast = two_by_two(p);
  for_each_plane(p.planes, window_work(p), [&](int64_t plane) {
    const T* xp = x + plane * p.H * p.W;
    T* yp = y + plane * p.Ho * p.Wo;
    int64_t* ip = idx + plane * p.Ho * p.Wo;
    // int32 window offsets in the vector kernels: planes below 2^31 elements.
    const bool vector = fast && p.H * p.W < (int64_t(1) << 31);
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (vector && has_avx512bw()) return max_pool_plane_2x2_bf16_avx512(xp, yp, ip, p);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (vector && has_avx512f()) return max_pool_plane_2x2_f32_avx512(xp, yp, ip, p);
    }
    fast ? max_pool_plane_2x2(xp, yp, ip, p) : max_pool_plane(xp, yp, ip, p);
  });
}

// gx (planes, H, W) = 0, then gx[indices] += g. Returns false when an index is out of range.
template <class T>
bool max_pool_backward(const T* g, const int64_t* idx, T* gx, const PoolProblem& p) {
  using A = compute_t<T>;
  const int64_t HW = p.H * p.W, P = p.Ho * p.Wo;
  bool bad = false;
  const int nt = threads_for(p.planes * (HW + P));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1) reduction(|| : bad)
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    T* gp = gx + plane * HW;
    const T* gy = g + plane * P;
    const int64_t* ip = idx + plane * P;
    std::fill(gp, gp + HW, T(0));
    for (int64_t o = 0; o < P; ++o) {
      const int64_t k = ip[o];
      if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(HW)) {
        bad = true;
        continue;
      }
      gp[k] = T(A(gp[k]) + A(gy[o]));
    }
  }
  return !bad;
}

// ---- average pooling, fixed and adaptive windows
// window(p, oh, ow) is avg_window or adaptive_window (kernels/pool_window.h).

// y (planes, Ho, Wo) = mean of each window of x (planes, H, W); an empty window gives 0.
template <class T, class Window>
void mean_pool_forward(const T* x, T* y, const PoolProblem& p, int64_t work, Window window) {
  using A = compute_t<T>;
  for_each_plane(p.planes, work, [&](int64_t plane) {
    const T* xp = x + plane * p.H * p.W;
    T* yp = y + plane * p.Ho * p.Wo;
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const PoolWindow win = window(p, oh, ow);
        A sum = 0;
        for (int64_t ih = win.hs; ih < win.he; ++ih) {
          for (int64_t iw = win.ws; iw < win.we; ++iw) sum += A(xp[ih * p.W + iw]);
        }
        yp[oh * p.Wo + ow] = win.empty() ? T(0) : T(sum / A(win.divisor));
      }
    }
  });
}

// gx (planes, H, W) = each g spread evenly over its window (the adjoint of mean_pool_forward).
template <class T, class Window>
void mean_pool_backward(const T* g, T* gx, const PoolProblem& p, int64_t work, Window window) {
  using A = compute_t<T>;
  for_each_plane(p.planes, work, [&](int64_t plane) {
    T* gp = gx + plane * p.H * p.W;
    const T* gy = g + plane * p.Ho * p.Wo;
    std::fill(gp, gp + p.H * p.W, T(0));
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const PoolWindow win = window(p, oh, ow);
        if (win.empty()) continue;
        const A share = A(gy[oh * p.Wo + ow]) / A(win.divisor);
        for (int64_t ih = win.hs; ih < win.he; ++ih) {
          for (int64_t iw = win.ws; iw < win.we; ++iw) gp[ih * p.W + iw] = T(A(gp[ih * p.W + iw]) + share);
        }
      }
    }
  });
}

int64_t adaptive_work(const PoolProblem& p) { return p.planes * std::max(p.H * p.W, p.Ho * p.Wo); }

// y, indices (planes, Ho, Wo) = max over each adaptive window of x (planes, H, W), with max
// pooling's rules (NaN wins, the first of equal maxima in row-major window order), as
// PyTorch's CPU kernel.
template <class T>
void adaptive_max_pool_forward(const T* x, T* y, int64_t* idx, const PoolProblem& p) {
  using A = compute_t<T>;
  for_each_plane(p.planes, adaptive_work(p), [&](int64_t plane) {
    const T* xp = x + plane * p.H * p.W;
    T* yp = y + plane * p.Ho * p.Wo;
    int64_t* ip = idx + plane * p.Ho * p.Wo;
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const PoolWindow win = adaptive_window(p, oh, ow);  // never empty: H, W >= 1
        A best = A(xp[win.hs * p.W + win.ws]);
        int64_t bi = win.hs * p.W + win.ws;
        for (int64_t ih = win.hs; ih < win.he; ++ih) {
          for (int64_t iw = win.ws; iw < win.we; ++iw) {
            const A v = A(xp[ih * p.W + iw]);
            if (v > best || std::isnan(v)) best = v, bi = ih * p.W + iw;
          }
        }
        yp[oh * p.Wo + ow] = T(best);
        ip[oh * p.Wo + ow] = bi;
      }
    }
  });
}

// The two window rules as function objects, so that the loops above inline them.
constexpr auto kAvgWindow = [](const PoolProblem& p, int64_t oh, int64_t ow) { return avg_window(p, oh, ow); };
constexpr auto kAdaptiveWindow = [](const PoolProblem& p, int64_t oh, int64_t ow) {
  return adaptive_window(p, oh, ow);
};

// ---- kernels

// x -> (y, indices)
void max_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0]);
  const DenseOut y(out[0]), idx(out[1], DType::I64);
  const PoolProblem p = pool_problem(x.sizes(), y.dense.sizes(), PoolParams::from(attrs, "max_pool2d"));
  dispatch_float(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward<T>(cdata<T>(x), mdata<T>(y.dense), mdata<int64_t>(idx.dense), p);
  });
  y.finish();
  idx.finish();
}

// (grad, indices) -> gx
void max_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0]), idx = dense(in[1], DType::I64);
  const DenseOut gx(out[0]);
  const PoolProblem p = pool_problem(gx.dense.sizes(), g.sizes(), PoolParams::from(attrs, "max_pool2d_backward"));
  const bool ok = dispatch_float(g.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    return max_pool_backward<T>(cdata<T>(g), cdata<int64_t>(idx), mdata<T>(gx.dense), p);
  });
  BRISK_CHECK(ok, "max_pool2d_backward: an index is outside its plane of ", p.H, " x ", p.W, " (indices ", idx.str(),
              ")");
  gx.finish();
}

void avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0]);
  const DenseOut y(out[0]);
  const PoolProblem p = pool_problem(x.sizes(), y.dense.sizes(), PoolParams::from(attrs, "avg_pool2d"));
  dispatch_float(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    mean_pool_forward<T>(cdata<T>(x), mdata<T>(y.dense), p, window_work(p), kAvgWindow);
  });
  y.finish();
}

void avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0]);
  const DenseOut gx(out[0]);
  const PoolProblem p = pool_problem(gx.dense.sizes(), g.sizes(), PoolParams::from(attrs, "avg_pool2d_backward"));
  dispatch_float(g.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    mean_pool_backward<T>(cdata<T>(g), mdata<T>(gx.dense), p, window_work(p), kAvgWindow);
  });
  gx.finish();
}

void adaptive_avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = dense(in[0]);
  const DenseOut y(out[0]);
  const PoolProblem p = adaptive_problem(x.sizes(), y.dense.sizes());
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    mean_pool_forward<T>(cdata<T>(x), mdata<T>(y.dense), p, adaptive_work(p), kAdaptiveWindow);
  });
  y.finish();
}

void adaptive_avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor g = dense(in[0]);
  const DenseOut gx(out[0]);
  const PoolProblem p = adaptive_problem(gx.dense.sizes(), g.sizes());
  dispatch_float(g.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    mean_pool_backward<T>(cdata<T>(g), mdata<T>(gx.dense), p, adaptive_work(p), kAdaptiveWindow);
  });
  gx.finish();
}

// x -> (y, indices)
void adaptive_max_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = dense(in[0]);
  const DenseOut y(out[0]), idx(out[1], DType::I64);
  const PoolProblem p = adaptive_problem(x.sizes(), y.dense.sizes());
  dispatch_float(x.dtype(), "adaptive_max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    adaptive_max_pool_forward<T>(cdata<T>(x), mdata<T>(y.dense), mdata<int64_t>(idx.dense), p);
  });
  y.finish();
  idx.finish();
}

// ---- resample2d: y[p, i, j] = sum over a, b of wh[i, a] ww[j, b] x[p, ih[i, a], iw[j, b]]
// (engine/ops/pool.cpp). Planes p over the OpenMP threads. one_tap: every second weight is 0
// (pads, nearest): one read per output. The backward scatters each plane's gradient in output
// order (each thread owns whole planes: no races, and the sum order is fixed).

struct Tables {
  const int64_t *ih, *iw;
  int64_t Ho, Wo;
  bool one_tap;
};

// Throws before any write when an index is outside [0, n).
void check_table(const Tensor& idx, int64_t n, const char* op, const char* axis) {
  const int64_t* p = cdata<int64_t>(idx);
  for (int64_t k = 0; k < idx.numel(); ++k)
    BRISK_CHECK(p[k] >= 0 && p[k] < n, op, ": ", axis, " index ", p[k], " is outside [0, ", n, ")");
}

template <class A>
bool all_one_tap(const A* wh, const A* ww, int64_t Ho, int64_t Wo) {
  for (int64_t i = 0; i < Ho; ++i)
    if (wh[2 * i + 1] != A(0) || wh[2 * i] != A(1)) return false;
  for (int64_t j = 0; j < Wo; ++j)
    if (ww[2 * j + 1] != A(0) || ww[2 * j] != A(1)) return false;
  return true;
}

template <class T>
void resample_forward(const T* x, T* y, int64_t planes, int64_t H, int64_t W, const Tables& t, const compute_t<T>* wh,
                      const compute_t<T>* ww) {
  using A = compute_t<T>;
  for_each_plane(planes, planes * t.Ho * t.Wo * (t.one_tap ? 1 : 4), [&](int64_t plane) {
    const T* xp = x + plane * H * W;
    T* yp = y + plane * t.Ho * t.Wo;
    for (int64_t i = 0; i < t.Ho; ++i) {
      const T* r0 = xp + t.ih[2 * i] * W;
      T* yr = yp + i * t.Wo;
      if (t.one_tap) {
        for (int64_t j = 0; j < t.Wo; ++j) yr[j] = r0[t.iw[2 * j]];
        continue;
      }
      const T* r1 = xp + t.ih[2 * i + 1] * W;
      const A h0 = wh[2 * i], h1 = wh[2 * i + 1];
      for (int64_t j = 0; j < t.Wo; ++j) {
        const int64_t j0 = t.iw[2 * j], j1 = t.iw[2 * j + 1];
        const A w0 = ww[2 * j], w1 = ww[2 * j + 1];
        // PyTorch's order: h0 * (w0 * x00 + w1 * x01) + h1 * (w0 * x10 + w1 * x11)
        yr[j] = T(h0 * (w0 * A(r0[j0]) + w1 * A(r0[j1])) + h1 * (w0 * A(r1[j0]) + w1 * A(r1[j1])));
      }
    }
  });
}

// gx (planes, H, W) = 0, then every output's gradient added to the taps it read.
template <class T>
void resample_backward(const T* g, T* gx, int64_t planes, int64_t H, int64_t W, const Tables& t, const compute_t<T>* wh,
                       const compute_t<T>* ww) {
  using A = compute_t<T>;
  for_each_plane(planes, planes * (H * W + t.Ho * t.Wo * 4), [&](int64_t plane) {
    const T* gp = g + plane * t.Ho * t.Wo;
    T* xp = gx + plane * H * W;
    if constexpr (std::is_same_v<T, A>) {
      std::fill(xp, xp + H * W, T(0));
      for (int64_t i = 0; i < t.Ho; ++i) {
        const T* gr = gp + i * t.Wo;
        for (int a = 0; a < (t.one_tap ? 1 : 2); ++a) {
          T* r = xp + t.ih[2 * i + a] * W;
          const A h = wh[2 * i + a];
          for (int64_t j = 0; j < t.Wo; ++j) {
            for (int b = 0; b < (t.one_tap ? 1 : 2); ++b) r[t.iw[2 * j + b]] += h * ww[2 * j + b] * gr[j];
          }
        }
      }
    } else {  // 16-bit: sum the plane in float, round once
      std::vector<A> acc(size_t(H * W), A(0));
      for (int64_t i = 0; i < t.Ho; ++i) {
        const T* gr = gp + i * t.Wo;
        for (int a = 0; a < (t.one_tap ? 1 : 2); ++a) {
          A* r = acc.data() + t.ih[2 * i + a] * W;
          const A h = wh[2 * i + a];
          for (int64_t j = 0; j < t.Wo; ++j) {
            for (int b = 0; b < (t.one_tap ? 1 : 2); ++b) r[t.iw[2 * j + b]] += h * ww[2 * j + b] * A(gr[j]);
          }
        }
      }
      for (int64_t k = 0; k < H * W; ++k) xp[k] = T(acc[size_t(k)]);
    }
  });
}

// Runs the forward (backward = false: in[0] is x, out is y) or the backward (in[0] is grad,
// out is gx) over dense planes.
void resample_kernel(std::span<const Tensor> in, std::span<Tensor> out, bool backward, const char* op) {
  const Tensor src = dense(in[0]);
  const DenseOut dst(out[0]);
  const Shape& xs = backward ? dst.dense.sizes() : src.sizes();
  const int64_t H = xs[xs.size() - 2], W = xs[xs.size() - 1];
  const int64_t planes = H * W == 0 ? 0 : xs.numel() / (H * W);
  const Tensor ih = dense(in[1]), iw = dense(in[3]);
  check_table(ih, H, op, "row");
  check_table(iw, W, op, "column");
  Tables t{cdata<int64_t>(ih), cdata<int64_t>(iw), ih.size(0), iw.size(0), false};
  dispatch_float(src.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const Tensor wh = dense(in[2]), ww = dense(in[4]);  // A: F32, or F64 for F64
    const A* pwh = cdata<A>(wh);
    const A* pww = cdata<A>(ww);
    t.one_tap = all_one_tap(pwh, pww, t.Ho, t.Wo);
    if (planes == 0 || dst.dense.numel() == 0) {
      if (backward) std::fill_n(mdata<T>(dst.dense), dst.dense.numel(), T(0));
      return;
    }
    if (backward) {
      resample_backward<T>(cdata<T>(src), mdata<T>(dst.dense), planes, H, W, t, pwh, pww);
    } else {
      resample_forward<T>(cdata<T>(src), mdata<T>(dst.dense), planes, H, W, t, pwh, pww);
    }
  });
  dst.finish();
}

void resample2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  resample_kernel(in, out, false, "resample2d");
}

void resample2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  resample_kernel(in, out, true, "resample2d_backward");
}

}  // namespace

void register_pool() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::MaxPool2d, cpu, max_pool2d_kernel);
  register_kernel(OpId::MaxPool2dBackward, cpu, max_pool2d_backward_kernel);
  register_kernel(OpId::AvgPool2d, cpu, avg_pool2d_kernel);
  register_kernel(OpId::AvgPool2dBackward, cpu, avg_pool2d_backward_kernel);
  register_kernel(OpId::AdaptiveAvgPool2d, cpu, adaptive_avg_pool2d_kernel);
  register_kernel(OpId::AdaptiveAvgPool2dBackward, cpu, adaptive_avg_pool2d_backward_kernel);
  register_kernel(OpId::AdaptiveMaxPool2d, cpu, adaptive_max_pool2d_kernel);
  register_kernel(OpId::Resample2d, cpu, resample2d_kernel);
  register_kernel(OpId::Resample2dBackward, cpu, resample2d_backward_kernel);
}

}  // namespace brisk::kernels::cpu
