// kernels/cpu/vmath.cpp: kernels/cpu/vmath.h, and the dense F32 and BF16 fast paths of the gelu,
// gelu_backward, exp, tanh and sigmoid kernels (registered over the elementwise list's, which
// they fall back to for other dtypes and layouts).
#include "kernels/cpu/vmath.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "engine/functions.h"
#include "engine/op.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/functors.h"

#ifdef BRISK_WITH_MVEC
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_erff(__m512 x);
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_tanhf(__m512 x);
#endif

namespace brisk::kernels::cpu::vmath {

namespace {

#ifdef BRISK_WITH_MVEC
bool vector_math() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

__attribute__((target("avx512f"))) float hsum(__m512 v) {
  alignas(64) float lanes[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it, bug 105593)
  _mm512_store_ps(lanes, v);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// exp(d) per lane. libmvec leaves its fast path for a vector with any lane out of its range
// (-inf from a masked score, a large negative difference) and recomputes lanes with the scalar
// expf: those lanes (d < -87.3, where expf is below the smallest normal float) go in as -87.3
// and come out as 0, so the fast path always runs. NaN lanes are left to expf.
__attribute__((target("avx512f"))) __m512 exp_ps(__m512 d) {
  const __m512 low = _mm512_set1_ps(-87.3f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(d, low, _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(__mmask16(~tiny), _ZGVeN16v_expf(_mm512_mask_mov_ps(d, tiny, low)));
}

__attribute__((target("avx512f"))) float exp_sum_avx512(const float* x, float shift, float* y, int64_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    if (y) _mm512_mask_storeu_ps(y + i, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  return hsum(sum);
}

__attribute__((target("avx512f"))) void exp_affine_avx512(const float* x, float shift, float scale, float* y,
                                                          int64_t n) {
  const __m512 s = _mm512_set1_ps(shift), k = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(e, k));
  }
}

__attribute__((target("avx512f"))) float max_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = first_lanes(n - i);
    m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, m);
  float best = lanes[0];
  for (float v : lanes) best = v > best ? v : best;
  return best;
}

// y = exp(x), tanh(x), sigmoid(x) lane by lane (masked tail). Plain loops, not a template
// over lambdas: a lambda's function-pointer thunk is not built for AVX-512, and returning a
// __m512 from it changes the ABI (GCC's -Wpsabi in the portable builds).
__attribute__((target("avx512f"))) void exp_avx512(const float* x, float* y, int64_t n) {
  // libmvec's own expf on every lane: its slow path keeps the subnormal results (no clamp here)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_expf(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

__attribute__((target("avx512f"))) void tanh_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_tanhf(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// 1 / (1 + exp(-x)); exp_ps's flush below -87.3 gives exactly 1 where the result rounds to 1.
__attribute__((target("avx512f"))) void sigmoid_avx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, x + i)));
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
}

// The same formulas as functors::Gelu / GeluBackward, lane by lane.
__attribute__((target("avx512f"))) void gelu_avx512(const float* x, float* y, int64_t n, bool tanh_form) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 k = _mm512_set1_ps(0.7978845608028654f), c = _mm512_set1_ps(0.044715f);
  const __m512 r2 = _mm512_set1_ps(0.7071067811865476f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 t;
    if (tanh_form) {
      const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(c, v), _mm512_mul_ps(v, v));
      t = _ZGVeN16v_tanhf(_mm512_mul_ps(k, _mm512_add_ps(v, cube)));
    } else {
      t = _ZGVeN16v_erff(_mm512_mul_ps(v, r2));
    }
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, t)));
  }
}

__attribute__((target("avx512f"))) void gelu_backward_avx512(const float* g, const float* x, float* dx, int64_t n,
                                                             bool tanh_form) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 k = _mm512_set1_ps(0.7978845608028654f), c = _mm512_set1_ps(0.044715f);
  const __m512 c3 = _mm512_set1_ps(float(3 * 0.044715)), r2 = _mm512_set1_ps(0.7071067811865476f);
  const __m512 minus_half = _mm512_set1_ps(-0.5f), inv_sqrt_2pi = _mm512_set1_ps(0.3989422804014327f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i), gv = _mm512_maskz_loadu_ps(m, g + i);
    __m512 d;
    if (tanh_form) {
      const __m512 x2 = _mm512_mul_ps(v, v);
      const __m512 inner = _mm512_mul_ps(k, _mm512_add_ps(v, _mm512_mul_ps(_mm512_mul_ps(c, v), x2)));
      const __m512 th = _ZGVeN16v_tanhf(inner);
      const __m512 dinner = _mm512_mul_ps(k, _mm512_add_ps(one, _mm512_mul_ps(c3, x2)));
      const __m512 a = _mm512_mul_ps(half, _mm512_add_ps(one, th));
      const __m512 b =
          _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_sub_ps(one, _mm512_mul_ps(th, th))), dinner);
      d = _mm512_add_ps(a, b);
    } else {
      const __m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, _ZGVeN16v_erff(_mm512_mul_ps(v, r2))));
      const __m512 pdf = _mm512_mul_ps(_ZGVeN16v_expf(_mm512_mul_ps(_mm512_mul_ps(minus_half, v), v)), inv_sqrt_2pi);
      d = _mm512_add_ps(cdf, _mm512_mul_ps(v, pdf));
    }
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(gv, d));
  }
}
#endif

}  // namespace

float exp_sum(const float* x, float shift, float* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return exp_sum_avx512(x, shift, y, n);
#endif
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    if (y) y[i] = e;
    sum += e;
  }
  return sum;
}

void exp_affine(const float* x, float shift, float scale, float* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return exp_affine_avx512(x, shift, scale, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift) * scale;
}

float max(const float* x, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return max_avx512(x, n);
#endif
  float best = -INFINITY;
  for (int64_t i = 0; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

void exp(const float* x, float* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return exp_avx512(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void tanh(const float* x, float* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return tanh_avx512(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void sigmoid(const float* x, float* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return sigmoid_avx512(x, y, n);
#endif
  const functors::Sigmoid f;
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

void gelu(const float* x, float* y, int64_t n, bool tanh_form) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return gelu_avx512(x, y, n, tanh_form);
#endif
  const functors::Gelu f{tanh_form};
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

void gelu_backward(const float* g, const float* x, float* dx, int64_t n, bool tanh_form) {
#ifdef BRISK_WITH_MVEC
  if (vector_math()) return gelu_backward_avx512(g, x, dx, n, tanh_form);
#endif
  const functors::GeluBackward f{tanh_form};
  for (int64_t i = 0; i < n; ++i) dx[i] = f(g[i], x[i]);
}

}  // namespace brisk::kernels::cpu::vmath

namespace brisk::kernels::cpu {

namespace {

bool dense_f32(const Tensor& t, const Tensor& like) {
  return t.dtype() == DType::F32 && t.is_contiguous() && t.sizes() == like.sizes();
}

// Every operand dense, of `like`'s sizes and of dtype `dt`.
bool dense_all(std::initializer_list<const Tensor*> ts, const Tensor& like, DType dt) {
  for (const Tensor* t : ts)
    if (t->dtype() != dt || !t->is_contiguous() || t->sizes() != like.sizes()) return false;
  return true;
}

// Runs body(first, count) over chunks of n elements, split across the threads.
template <class F>
void chunks(int64_t n, F body) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t parts = (n + kChunk - 1) / kChunk;
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t c = 0; c < parts; ++c) body(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// Note [BF16 through F32 blocks]
// Dense BF16 operands go through the F32 functions a block at a time: each block is widened
// exactly into a buffer on the stack, computed in F32 and rounded once on store, which is
// what the elementwise list does element by element for 16-bit floats (kernels/cpu/loops.h),
// so the results are its results up to the F32 functions' last-bit differences. The list's
// scalar loop took 26 ns an element for the tanh GELU (GPT-2's MLP under BF16 autocast: 190 ms
// of a 1340 ms step for the forward and as much again for the backward); this runs at the F32
// path's speed.
constexpr int64_t kBlock = 256;

void widen(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = float(src[j]);
}

void narrow(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j].bits = BFloat16::from_float(src[j]);
}

// y = f(x) (f(x, y, n) over F32 rows), x and y dense BF16 of n elements, threaded.
template <class F>
void bf16_unary(const Tensor& x, const Tensor& y, F f) {
  const auto* xp = static_cast<const BFloat16*>(x.data_ptr());
  auto* yp = static_cast<BFloat16*>(y.data_ptr());
  chunks(y.numel(), [&](int64_t first, int64_t count) {
    float xf[kBlock], yf[kBlock];
    for (int64_t i = first; i < first + count; i += kBlock) {
      const int64_t m = std::min(kBlock, first + count - i);
      widen(xp + i, xf, m);
      f(xf, yf, m);
      narrow(yf, yp + i, m);
    }
  });
}

// The elementwise list's kernels, for dtypes and layouts other than dense F32 and BF16.
KernelFn g_gelu_fallback = nullptr, g_gelu_backward_fallback = nullptr;
KernelFn g_exp_fallback = nullptr, g_tanh_fallback = nullptr, g_sigmoid_fallback = nullptr;

// x -> y for exp, tanh, sigmoid: F32 through vmath whatever the layout (a strided input or
// output goes through a dense copy, so a result never depends on the layout), dense BF16
// through F32 blocks; other dtypes and strided BF16 through the elementwise kernel.
template <KernelFn* Fallback, void (*F)(const float*, float*, int64_t)>
void unary_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  if (dense_all({&in[0], &out[0]}, out[0], DType::BF16)) return bf16_unary(in[0], out[0], F);
  if (in[0].dtype() != DType::F32 || out[0].dtype() != DType::F32 || in[0].sizes() != out[0].sizes())
    return (*Fallback)(in, out, attrs);
  const Tensor x = in[0].is_contiguous() ? in[0] : in[0].contiguous();
  const bool direct = out[0].is_contiguous();
  Tensor y = direct ? out[0] : empty(out[0].sizes(), DType::F32);
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(y.data_ptr());
  chunks(y.numel(), [&](int64_t i, int64_t n) { F(xp + i, yp + i, n); });
  if (!direct) out[0].copy_(y);
}

// x -> y: dense F32 through vmath, dense BF16 through F32 blocks.
void gelu_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool tanh_form = attrs.flag;
  if (dense_all({&in[0], &out[0]}, out[0], DType::BF16)) {
    return bf16_unary(in[0], out[0], [&](const float* x, float* y, int64_t n) { vmath::gelu(x, y, n, tanh_form); });
  }
  if (!dense_f32(in[0], out[0]) || !dense_f32(out[0], out[0])) return g_gelu_fallback(in, out, attrs);
  const float* x = static_cast<const float*>(in[0].data_ptr());
  float* y = static_cast<float*>(out[0].data_ptr());
  chunks(out[0].numel(), [&](int64_t i, int64_t n) { vmath::gelu(x + i, y + i, n, tanh_form); });
}

// (grad, x) -> dx: dense F32 through vmath, dense BF16 through F32 blocks.
void gelu_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool tanh_form = attrs.flag;
  if (dense_all({&in[0], &in[1], &out[0]}, out[0], DType::BF16)) {
    const auto* g = static_cast<const BFloat16*>(in[0].data_ptr());
    const auto* x = static_cast<const BFloat16*>(in[1].data_ptr());
    auto* dx = static_cast<BFloat16*>(out[0].data_ptr());
    chunks(out[0].numel(), [&](int64_t first, int64_t count) {
      float gf[kBlock], xf[kBlock], df[kBlock];
      for (int64_t i = first; i < first + count; i += kBlock) {
        const int64_t m = std::min(kBlock, first + count - i);
        widen(g + i, gf, m);
        widen(x + i, xf, m);
        vmath::gelu_backward(gf, xf, df, m, tanh_form);
        narrow(df, dx + i, m);
      }
    });
    return;
  }
  if (!dense_f32(in[0], out[0]) || !dense_f32(in[1], out[0]) || !dense_f32(out[0], out[0]))
    return g_gelu_backward_fallback(in, out, attrs);
  const float* g = static_cast<const float*>(in[0].data_ptr());
  const float* x = static_cast<const float*>(in[1].data_ptr());
  float* dx = static_cast<float*>(out[0].data_ptr());
  chunks(out[0].numel(), [&](int64_t i, int64_t n) { vmath::gelu_backward(g + i, x + i, dx + i, n, tanh_form); });
}

}  // namespace

// Called after the elementwise registrars: keeps their kernels as the fallbacks.
void register_vmath() {
  g_gelu_fallback = op_def(OpId::Gelu).kernels[int(DeviceType::CPU)];
  g_gelu_backward_fallback = op_def(OpId::GeluBackward).kernels[int(DeviceType::CPU)];
  BRISK_CHECK(g_gelu_fallback && g_gelu_backward_fallback, "register_vmath: the elementwise kernels come first");
  register_kernel(OpId::Gelu, DeviceType::CPU, gelu_kernel);
  register_kernel(OpId::GeluBackward, DeviceType::CPU, gelu_backward_kernel);
  g_exp_fallback = op_def(OpId::Exp).kernels[int(DeviceType::CPU)];
  g_tanh_fallback = op_def(OpId::Tanh).kernels[int(DeviceType::CPU)];
  g_sigmoid_fallback = op_def(OpId::Sigmoid).kernels[int(DeviceType::CPU)];
  BRISK_CHECK(g_exp_fallback && g_tanh_fallback && g_sigmoid_fallback,
              "register_vmath: the elementwise kernels come first");
  register_kernel(OpId::Exp, DeviceType::CPU, unary_kernel<&g_exp_fallback, vmath::exp>);
  register_kernel(OpId::Tanh, DeviceType::CPU, unary_kernel<&g_tanh_fallback, vmath::tanh>);
  register_kernel(OpId::Sigmoid, DeviceType::CPU, unary_kernel<&g_sigmoid_fallback, vmath::sigmoid>);
}

}  // namespace brisk::kernels::cpu
