// kernels/cpu/recurrent.cpp: CPU kernels of lstm_sequence, gru_sequence and their backward ops
// (engine/ops/recurrent.cpp): one layer and direction of an LSTM or GRU over a whole sequence,
// F32 and F64. Note [Fused recurrent layers].
// Not here: the input projection x W_ih^T (one matmul over the sequence, by nn/recurrent.cpp),
// the per-step composite path that other devices and options take (nn/recurrent.cpp).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/op.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"

#ifdef BRISK_WITH_MVEC
// glibc's libmvec: the AVX-512 variants of expf and tanhf (4 ulp at most), which GCC would call
// itself for `#pragma omp simd` loops under -ffast-math.
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_tanhf(__m512 x);
#endif

namespace brisk::kernels::cpu {

// Note [Fused recurrent layers]
// An LSTM or GRU layer built from engine ops runs, per time step, a GEMM for the input
// projection, a GEMM for the recurrent one and a dozen elementwise ops (gate slices, sigmoid,
// tanh, products, sums), each allocating its output and each recording an autograd node; the
// LSTM language model of bench_models spent 28% of its training step in `add` alone and ran
// 3x PyTorch's time. The fused form (cuDNN's and PyTorch's shape of it):
//   - nn/recurrent.cpp projects the whole input sequence at once, gx = x W_ih^T + b (one
//     matmul of (T * B, in)), and calls one op per layer and direction;
//   - forward: per step one GEMM adds h W_hh^T into that step's gate rows, then one pass over
//     the rows applies the gates (sigmoid / tanh through glibc's vector expf / tanhf where the
//     CPU has AVX-512) and writes c and h. It keeps the activated gates and c for backward;
//   - backward: per step (in reverse) one pass turns dh, dc into the gate gradients, and one
//     GEMM takes them back through W_hh to dh of the step before; the weight gradient is one
//     GEMM over the whole sequence at the end (d gates^T @ the previous hidden states), as is
//     the input projection's (by the matmul's own backward).
// No allocation per step; the rows of a step share out across the threads when there are
// enough of them. The GRU is the same with gates (r, z, n) and its reset gate scaling the
// hidden part of n: n = tanh(gx_n + r * (h W_hn^T + b_hn)), so b_hh enters the op and that
// hidden part is saved.

namespace {

template <class T>
T sigmoid1(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

#ifdef BRISK_WITH_MVEC
__attribute__((target("avx512f"))) void sigmoid_avx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
}

__attribute__((target("avx512f"))) void tanh_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_tanhf(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

bool vector_math() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

// y[i] = sigmoid(x[i]) / tanh(x[i]) for i < n (x == y allowed).
template <class T>
void sigmoid_n(const T* x, T* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if constexpr (std::is_same_v<T, float>) {
    if (vector_math()) return sigmoid_avx512(x, y, n);
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid1(x[i]);
}

template <class T>
void tanh_n(const T* x, T* y, int64_t n) {
#ifdef BRISK_WITH_MVEC
  if constexpr (std::is_same_v<T, float>) {
    if (vector_math()) return tanh_avx512(x, y, n);
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

thread_local Workspace t_row;  // for_rows' scratch row

// Runs body(b, tmp) for the B rows of a step, tmp a scratch row of H elements per thread;
// shared out across the threads when the step has enough elements.
template <class T, class F>
void for_rows(int64_t B, int64_t H, F&& body) {
  const bool split = B > 1 && B * H >= 8192 && omp_get_max_threads() > 1 && !omp_in_parallel();
#pragma omp parallel if (split)
  {
    T* tmp = t_row.get<T>(H);  // kept per thread across steps: no allocation per step
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) body(b, tmp);
  }
}

// The weight of the per-step product, c (m, N) (+)= a (m, K) @ b (K, N): packed once for the
// whole sequence where F32 runs brisk's AVX-512 GEMM (Note [Packed B] in gemm_f32.cpp), else
// handed to gemm() at each step.
template <class T>
class StepWeight {
 public:
  StepWeight(int64_t K, int64_t N, const T* b, int64_t b_rs, int64_t b_cs) : K_(K), N_(N), b_{b, K, N, b_rs, b_cs} {
    if constexpr (std::is_same_v<T, float>) {
      if (f32_gemm_path() == F32GemmPath::Avx512) packed_ = std::make_unique<PackedB>(K, N, b, b_rs, b_cs);
    }
  }
  // a (m, K) dense, c (m, N) dense.
  void multiply(const T* a, int64_t m, T* c, bool accumulate) const {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_) return packed_->multiply(m, a, K_, 1, c, N_, accumulate);
    }
    gemm<T>({a, m, K_, K_, 1}, b_, {c, m, N_, N_, 1}, accumulate, 0);
  }

 private:
  int64_t K_, N_;
  MatrixRef<const T> b_;
  std::unique_ptr<PackedB> packed_;
};

// The step order: step s runs time t(s); the step before s reads the state step s - 1 wrote.
struct Order {
  int64_t T;
  bool reverse;
  int64_t t(int64_t s) const { return reverse ? T - 1 - s : s; }
};

// dw (G * H, H) = sum over t of dgates[t]^T (G * H, B) @ h_prev[t] (B, H), where h_prev is
// y of the step before (or h0 at the first step): two GEMMs over the whole sequence.
template <class T>
void recurrent_weight_grad(const T* dgates, const T* y, const T* h0, int64_t T_, int64_t B, int64_t H, int64_t GH,
                           bool reverse, T* dw) {
  if (T_ == 0) {  // an empty sequence: no gradient reaches W_hh
    std::fill_n(dw, GH * H, T(0));
    return;
  }
  const int64_t first = reverse ? T_ - 1 : 0;  // the step that reads h0
  bool acc = false;
  if (T_ > 1) {
    // forward: dgates[1..T) with y[0..T-1); reverse: dgates[0..T-1) with y[1..T)
    const T* dg = dgates + (reverse ? 0 : B * GH);
    const T* hp = y + (reverse ? B * H : 0);
    gemm<T>({dg, GH, (T_ - 1) * B, 1, GH}, {hp, (T_ - 1) * B, H, H, 1}, {dw, GH, H, H, 1}, false, 0);
    acc = true;
  }
  gemm<T>({dgates + first * B * GH, GH, B, 1, GH}, {h0, B, H, H, 1}, {dw, GH, H, H, 1}, acc, 0);
}

// ---- LSTM
// (gx, w_hh, h0, c0) -> (y, c, gates)
template <class T>
void lstm_forward(std::span<const Tensor> in, std::span<Tensor> out, bool reverse) {
  const DType dt = in[0].dtype();
  const Tensor gx = dense(in[0]), w_t = dense(in[1]), h0_t = dense(in[2]), c0_t = dense(in[3]);
  const DenseOut y_o(out[0], dt), c_o(out[1], dt), g_o(out[2], dt);
  const int64_t T_ = gx.size(0), B = gx.size(1), H = gx.size(2) / 4, G = 4 * H;
  const T* w = static_cast<const T*>(w_t.data_ptr());
  T* gates = static_cast<T*>(g_o.dense.data_ptr());
  T* y = static_cast<T*>(y_o.dense.data_ptr());
  T* cs = static_cast<T*>(c_o.dense.data_ptr());
  std::copy_n(static_cast<const T*>(gx.data_ptr()), T_ * B * G, gates);
  const T* h_prev = static_cast<const T*>(h0_t.data_ptr());
  const T* c_prev = static_cast<const T*>(c0_t.data_ptr());
  const Order order{T_, reverse};
  const StepWeight<T> w_ht(H, G, w, 1, H);  // W_hh^T (H, 4H)
  for (int64_t s = 0; s < T_; ++s) {
    const int64_t t = order.t(s);
    T* g = gates + t * B * G;
    w_ht.multiply(h_prev, B, g, true);  // += h W_hh^T
    T* yt = y + t * B * H;
    T* ct = cs + t * B * H;
    for_rows<T>(B, H, [&](int64_t b, T*) {
      T* a = g + b * G;  // i, f, g, o
      sigmoid_n(a, a, 2 * H);
      tanh_n(a + 2 * H, a + 2 * H, H);
      sigmoid_n(a + 3 * H, a + 3 * H, H);
      const T* cp = c_prev + b * H;
      T* c = ct + b * H;
      T* h = yt + b * H;
      for (int64_t j = 0; j < H; ++j) c[j] = a[H + j] * cp[j] + a[j] * a[2 * H + j];
      tanh_n(c, h, H);
      for (int64_t j = 0; j < H; ++j) h[j] *= a[3 * H + j];
    });
    h_prev = yt;
    c_prev = ct;
  }
  for (const DenseOut* o : {&y_o, &c_o, &g_o}) o->finish();
}

// (gy, gc, gates, c, y, w_hh, h0, c0) -> (d gx, d w_hh, d h0, d c0)
template <class T>
void lstm_backward(std::span<const Tensor> in, std::span<Tensor> out, bool reverse) {
  const DType dt = in[2].dtype();
  Tensor d[8];
  for (size_t i = 0; i < 8; ++i) d[i] = dense(in[i]);
  const DenseOut dgx_o(out[0], dt), dw_o(out[1], dt), dh0_o(out[2], dt), dc0_o(out[3], dt);
  const int64_t T_ = d[2].size(0), B = d[2].size(1), H = d[2].size(2) / 4, G = 4 * H;
  auto ptr = [&](int i) { return static_cast<const T*>(d[i].data_ptr()); };
  const T *gy = ptr(0), *gc = ptr(1), *gates = ptr(2), *cs = ptr(3), *y = ptr(4), *w = ptr(5), *h0 = ptr(6),
          *c0 = ptr(7);
  T* dgx = static_cast<T*>(dgx_o.dense.data_ptr());
  T* dh = static_cast<T*>(dh0_o.dense.data_ptr());  // carried dh, dc: end as d h0, d c0
  T* dc = static_cast<T*>(dc0_o.dense.data_ptr());
  std::fill_n(dh, B * H, T(0));
  std::fill_n(dc, B * H, T(0));
  const Order order{T_, reverse};
  const StepWeight<T> w_n(G, H, w, H, 1);  // W_hh (4H, H)
  for (int64_t s = T_ - 1; s >= 0; --s) {
    const int64_t t = order.t(s);
    const T* cp_all = s > 0 ? cs + order.t(s - 1) * B * H : c0;
    for_rows<T>(B, H, [&](int64_t b, T* tc) {
      const T* a = gates + (t * B + b) * G;
      const T* c = cs + (t * B + b) * H;
      const T* cp = cp_all + b * H;
      const T* gyt = gy + (t * B + b) * H;
      const T* gct = gc + (t * B + b) * H;
      T* dg = dgx + (t * B + b) * G;
      T* dhb = dh + b * H;
      T* dcb = dc + b * H;
      tanh_n(c, tc, H);
      for (int64_t j = 0; j < H; ++j) {
        const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        const T dht = dhb[j] + gyt[j];
        const T dct = dcb[j] + gct[j] + dht * o * (T(1) - tc[j] * tc[j]);
        dg[j] = dct * g * i * (T(1) - i);
        dg[H + j] = dct * cp[j] * f * (T(1) - f);
        dg[2 * H + j] = dct * i * (T(1) - g * g);
        dg[3 * H + j] = dht * tc[j] * o * (T(1) - o);
        dcb[j] = dct * f;
      }
    });
    w_n.multiply(dgx + t * B * G, B, dh, false);  // dh_prev = dg W_hh
  }
  recurrent_weight_grad(dgx, y, h0, T_, B, H, G, reverse, static_cast<T*>(dw_o.dense.data_ptr()));
  for (const DenseOut* o : {&dgx_o, &dw_o, &dh0_o, &dc0_o}) o->finish();
}

// ---- GRU
// (gx, w_hh, b_hh, h0) -> (y, saved: r, z, n, h W_hn^T + b_hn)
template <class T>
void gru_forward(std::span<const Tensor> in, std::span<Tensor> out, bool reverse) {
  const DType dt = in[0].dtype();
  const Tensor gx_t = dense(in[0]), w_t = dense(in[1]), b_t = dense(in[2]), h0_t = dense(in[3]);
  const DenseOut y_o(out[0], dt), s_o(out[1], dt);
  const int64_t T_ = gx_t.size(0), B = gx_t.size(1), H = gx_t.size(2) / 3, G = 3 * H;
  const T* gx = static_cast<const T*>(gx_t.data_ptr());
  const T* w = static_cast<const T*>(w_t.data_ptr());
  const T* bias = static_cast<const T*>(b_t.data_ptr());
  T* y = static_cast<T*>(y_o.dense.data_ptr());
  T* saved = static_cast<T*>(s_o.dense.data_ptr());
  std::vector<T> gh(size_t(B * G));
  const T* h_prev = static_cast<const T*>(h0_t.data_ptr());
  const Order order{T_, reverse};
  const StepWeight<T> w_ht(H, G, w, 1, H);  // W_hh^T (H, 3H)
  for (int64_t s = 0; s < T_; ++s) {
    const int64_t t = order.t(s);
    for (int64_t b = 0; b < B; ++b) std::copy_n(bias, G, gh.data() + b * G);
    w_ht.multiply(h_prev, B, gh.data(), true);  // += h W_hh^T
    T* yt = y + t * B * H;
    for_rows<T>(B, H, [&](int64_t b, T*) {
      const T* x = gx + (t * B + b) * G;
      const T* hh = gh.data() + b * G;
      const T* hp = h_prev + b * H;
      T* sv = saved + (t * B + b) * 4 * H;  // r, z, n, hn
      T* h = yt + b * H;
      for (int64_t j = 0; j < 2 * H; ++j) sv[j] = x[j] + hh[j];
      sigmoid_n(sv, sv, 2 * H);
      for (int64_t j = 0; j < H; ++j) {
        sv[3 * H + j] = hh[2 * H + j];
        sv[2 * H + j] = x[2 * H + j] + sv[j] * hh[2 * H + j];
      }
      tanh_n(sv + 2 * H, sv + 2 * H, H);
      for (int64_t j = 0; j < H; ++j) {
        const T n = sv[2 * H + j];
        h[j] = n + sv[H + j] * (hp[j] - n);
      }
    });
    h_prev = yt;
  }
  for (const DenseOut* o : {&y_o, &s_o}) o->finish();
}

// (gy, saved, y, w_hh, h0) -> (d gx, d w_hh, d b_hh, d h0)
template <class T>
void gru_backward(std::span<const Tensor> in, std::span<Tensor> out, bool reverse) {
  const DType dt = in[1].dtype();
  Tensor d[5];
  for (size_t i = 0; i < 5; ++i) d[i] = dense(in[i]);
  const DenseOut dgx_o(out[0], dt), dw_o(out[1], dt), db_o(out[2], dt), dh0_o(out[3], dt);
  const int64_t T_ = d[1].size(0), B = d[1].size(1), H = d[1].size(2) / 4, G = 3 * H;
  auto ptr = [&](int i) { return static_cast<const T*>(d[i].data_ptr()); };
  const T *gy = ptr(0), *saved = ptr(1), *y = ptr(2), *w = ptr(3), *h0 = ptr(4);
  T* dgx = static_cast<T*>(dgx_o.dense.data_ptr());
  T* dh = static_cast<T*>(dh0_o.dense.data_ptr());
  std::fill_n(dh, B * H, T(0));
  Tensor dgh_t = make_empty({T_, B, G}, dt, Device::cpu());  // gradient of h W_hh^T + b_hh per step
  T* dgh = static_cast<T*>(dgh_t.data_ptr());
  const Order order{T_, reverse};
  const StepWeight<T> w_n(G, H, w, H, 1);  // W_hh (3H, H)
  for (int64_t s = T_ - 1; s >= 0; --s) {
    const int64_t t = order.t(s);
    const T* hp_all = s > 0 ? y + order.t(s - 1) * B * H : h0;
    for_rows<T>(B, H, [&](int64_t b, T*) {
      const T* sv = saved + (t * B + b) * 4 * H;
      const T* hp = hp_all + b * H;
      const T* gyt = gy + (t * B + b) * H;
      T* dx = dgx + (t * B + b) * G;
      T* dhh = dgh + (t * B + b) * G;
      T* dhb = dh + b * H;
      for (int64_t j = 0; j < H; ++j) {
        const T r = sv[j], z = sv[H + j], n = sv[2 * H + j], hn = sv[3 * H + j];
        const T dht = dhb[j] + gyt[j];
        const T dn = dht * (T(1) - z) * (T(1) - n * n);
        const T dz = dht * (hp[j] - n) * z * (T(1) - z);
        const T dr = dn * hn * r * (T(1) - r);
        dx[j] = dhh[j] = dr;
        dx[H + j] = dhh[H + j] = dz;
        dx[2 * H + j] = dn;
        dhh[2 * H + j] = dn * r;
        dhb[j] = dht * z;
      }
    });
    w_n.multiply(dgh + t * B * G, B, dh, true);  // += dgh W_hh
  }
  recurrent_weight_grad(dgh, y, h0, T_, B, H, G, reverse, static_cast<T*>(dw_o.dense.data_ptr()));
  T* db = static_cast<T*>(db_o.dense.data_ptr());
  std::fill_n(db, G, T(0));
  for (int64_t r = 0; r < T_ * B; ++r) {
    for (int64_t j = 0; j < G; ++j) db[j] += dgh[r * G + j];
  }
  for (const DenseOut* o : {&dgx_o, &dw_o, &db_o, &dh0_o}) o->finish();
}

// The kernels: F32 or F64 (inference admits only those); attrs.flag = reverse.
void lstm_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  in[0].dtype() == DType::F64 ? lstm_forward<double>(in, out, attrs.flag) : lstm_forward<float>(in, out, attrs.flag);
}
void lstm_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  in[2].dtype() == DType::F64 ? lstm_backward<double>(in, out, attrs.flag) : lstm_backward<float>(in, out, attrs.flag);
}
void gru_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  in[0].dtype() == DType::F64 ? gru_forward<double>(in, out, attrs.flag) : gru_forward<float>(in, out, attrs.flag);
}
void gru_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  in[1].dtype() == DType::F64 ? gru_backward<double>(in, out, attrs.flag) : gru_backward<float>(in, out, attrs.flag);
}

}  // namespace

void register_recurrent() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::LstmSequence, cpu, lstm_kernel);
  register_kernel(OpId::LstmSequenceBackward, cpu, lstm_backward_kernel);
  register_kernel(OpId::GruSequence, cpu, gru_kernel);
  register_kernel(OpId::GruSequenceBackward, cpu, gru_backward_kernel);
}

}  // namespace brisk::kernels::cpu
