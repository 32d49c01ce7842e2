// kernels/cpu/attention.cpp: the CPU kernels of the fused attention op and its backward op
// (F32 and F64), FlashAttention-2's scheme on tiles of queries and keys.
// Not here: the OpDefs and the public function (engine/ops/attention.cpp), the GEMM
// (kernels/cpu/gemm.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/op.h"
#include "engine/random.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/vmath.h"

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

namespace {

constexpr int64_t kBq = 128;  // query rows per tile
constexpr int64_t kBk = 128;  // keys per tile

// Offsets (elements) of each leading index of an (*, R, C) tensor, and its row / column strides.
struct Layout {
  std::vector<int64_t> base;
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
template <class T>
T exp_row(T* p, T m, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return vmath::exp_sum(p, m, p, n);
  } else {
    T sum = 0;
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

// What every tile needs to know.
template <class T>
struct Problem {
  const T *q, *k, *v;
  const void* mask;  // Bool or T, expanded to (*, T, S); null: none
  Layout lq, lk, lv, lm;
  int64_t N, T_, S, D, Dv;
  T scale;
  bool causal, additive;
  int64_t shift;  // causal: query i attends keys j <= i + shift
  double p;       // dropout
  uint64_t seed, offset;
};

// The scores tile s (rows x cols, row stride kBk) of queries i0.. and keys j0.. of item n:
// q k^T * scale, masked (-inf where not attended).
template <class T>
void scores_tile(const Problem<T>& P, int64_t n, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* s) {
  const MatrixRef<const T> qm{P.q + P.lq.base[size_t(n)] + i0 * P.lq.rs, rows, P.D, P.lq.rs, P.lq.cs};
  const MatrixRef<const T> kt{P.k + P.lk.base[size_t(n)] + j0 * P.lk.rs, P.D, cols, P.lk.cs, P.lk.rs};
  gemm<T>(qm, kt, MatrixRef<T>{s, rows, cols, kBk, 1}, false, 1);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t shift = P.shift;  // query i attends keys j <= i + shift when causal
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * kBk;
    const T scale = P.scale;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] *= scale;
    const int64_t i = i0 + r;
    if (P.mask) {
      const int64_t off = P.lm.base[size_t(n)] + i * P.lm.rs + j0 * P.lm.cs;
      if (P.additive) {
        const T* m = static_cast<const T*>(P.mask) + off;
        for (int64_t j = 0; j < cols; ++j) row[j] += m[j * P.lm.cs];
      } else {
        const bool* m = static_cast<const bool*>(P.mask) + off;
        for (int64_t j = 0; j < cols; ++j)
          if (!m[j * P.lm.cs]) row[j] = neg_inf;
      }
    }
    if (P.causal) {
      for (int64_t j = std::max<int64_t>(0, i + shift + 1 - j0); j < cols; ++j) row[j] = neg_inf;
    }
  }
}

// Whether the key block j0.. lies wholly above the causal diagonal of query rows i0..i0+rows-1.
template <class T>
bool above_diagonal(const Problem<T>& P, int64_t i0, int64_t rows, int64_t j0) {
  return P.causal && j0 > i0 + rows - 1 + P.shift;
}

template <class T>
void forward_item(const Problem<T>& P, int64_t n, int64_t i0, T* out, T* lse, std::vector<T>& work, DropRow& drop) {
  const int64_t rows = std::min(kBq, P.T_ - i0);
  work.assign(size_t(kBq * kBk + kBq * P.Dv + 2 * kBq), T(0));
  T* s = work.data();
  T* o = s + kBq * kBk;
  T* m = o + kBq * P.Dv;
  T* l = m + kBq;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::fill(m, m + rows, neg_inf);
  const T keep_scale = T(1.0 / (1.0 - P.p));
  for (int64_t j0 = 0; j0 < P.S; j0 += kBk) {
    if (above_diagonal(P, i0, rows, j0)) break;
    const int64_t cols = std::min(kBk, P.S - j0);
    scores_tile(P, n, i0, rows, j0, cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * kBk;
      // (A NaN score makes the row NaN through exp below, whatever the max.)
      T mx = neg_inf;
      if constexpr (std::is_same_v<T, float>) {
        mx = vmath::max(row, cols);
      } else {
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, row[j]);
      }
      const T m_new = std::max(m[r], mx);
      if (m_new == neg_inf) {  // nothing attended so far: no weight
        std::fill(row, row + cols, T(0));
        continue;
      }
      const T alpha = std::exp(m[r] - m_new);
      l[r] = l[r] * alpha + exp_row(row, m_new, cols);
      m[r] = m_new;
      if (alpha != T(1)) {
        T* orow = o + r * P.Dv;
        for (int64_t d = 0; d < P.Dv; ++d) orow[d] *= alpha;
      }
      if (P.p > 0) {
        const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * P.T_ + i0 + r) * P.S + j0), cols, P.p);
        for (int64_t j = 0; j < cols; ++j) row[j] = keep[j] ? row[j] * keep_scale : T(0);
      }
    }
    const MatrixRef<const T> vm{P.v + P.lv.base[size_t(n)] + j0 * P.lv.rs, cols, P.Dv, P.lv.rs, P.lv.cs};
    gemm<T>(MatrixRef<const T>{s, rows, cols, kBk, 1}, vm, MatrixRef<T>{o, rows, P.Dv, P.Dv, 1}, true, 1);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[r];  // 0 / 0 = NaN for a row with nothing attended, as the math form
    T* dst = out + ((n * P.T_) + i0 + r) * P.Dv;
    for (int64_t d = 0; d < P.Dv; ++d) dst[d] = o[r * P.Dv + d] * inv;
    lse[n * P.T_ + i0 + r] = m[r] + std::log(l[r]);
  }
}

template <class T>
Problem<T> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Attrs& attrs) {
  Problem<T> P{};
  P.q = static_cast<const T*>(q.data_ptr());
  P.k = static_cast<const T*>(k.data_ptr());
  P.v = static_cast<const T*>(v.data_ptr());
  P.mask = mask ? mask->data_ptr() : nullptr;
  P.lq = layout_of(q);
  P.lk = layout_of(k);
  P.lv = layout_of(v);
  if (mask) P.lm = layout_of(*mask);
  P.N = int64_t(P.lq.base.size());
  P.T_ = q.size(-2);
  P.S = k.size(-2);
  P.D = q.size(-1);
  P.Dv = v.size(-1);
  P.scale = T(attrs.b);
  P.causal = attrs.flag;
  P.shift = attrs.start;
  P.additive = attrs.flag2;
  P.p = attrs.a;
  P.seed = attrs.seed;
  P.offset = attrs.offset;
  return P;
}

// in: q, k, v[, mask] -> out[0] (*, T, Dv), out[1] lse (*, T); both fresh and dense.
void attention_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool f64 = in[0].dtype() == DType::F64;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const Problem<T> P = problem_of<T>(in[0], in[1], in[2], in.size() == 4 ? &in[3] : nullptr, attrs);
    T* o = static_cast<T*>(out[0].data_ptr());
    T* lse = static_cast<T*>(out[1].data_ptr());
    const int64_t blocks = (P.T_ + kBq - 1) / kBq, items = P.N * blocks;
    if (items == 0) return;
    if (P.S == 0) {  // no keys: an empty sum, zeros, as the math form's (T, 0) @ (0, Dv)
      std::fill(o, o + P.N * P.T_ * P.Dv, T(0));
      std::fill(lse, lse + P.N * P.T_, -std::numeric_limits<T>::infinity());
      return;
    }
    const int nt = int(std::min<int64_t>(items, omp_in_parallel() ? 1 : omp_get_max_threads()));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      std::vector<T> work;
      DropRow drop;
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < items; ++it) forward_item(P, it / blocks, (it % blocks) * kBq, o, lse, work, drop);
    }
  };
  if (f64) {
    run(double{});
  } else {
    run(float{});
  }
}

template <class T>
void backward_item(const Problem<T>& P, int64_t n, const T* gout, const Layout& lg, const T* outp, const T* lse, T* dq,
                   T* dk, T* dv, std::vector<T>& work, DropRow& drop) {
  const int64_t T_ = P.T_, S = P.S, D = P.D, Dv = P.Dv;
  work.assign(size_t(3 * kBq * kBk + T_), T(0));
  T* s = work.data();         // scores, then P
  T* pd = s + kBq * kBk;      // P with dropout applied
  T* ds = pd + kBq * kBk;     // dP, then dS
  T* delta = ds + kBq * kBk;  // D_i = rowsum(dout_i * out_i)
  const T* go_n = gout + lg.base[size_t(n)];
  for (int64_t i = 0; i < T_; ++i) {
    T acc = 0;
    const T* o = outp + (n * T_ + i) * Dv;
    for (int64_t d = 0; d < Dv; ++d) acc += go_n[i * lg.rs + d * lg.cs] * o[d];
    delta[i] = acc;
  }
  T* dq_n = dq + n * T_ * D;
  T* dk_n = dk + n * S * D;
  T* dv_n = dv + n * S * Dv;
  std::fill(dq_n, dq_n + T_ * D, T(0));
  std::fill(dk_n, dk_n + S * D, T(0));
  std::fill(dv_n, dv_n + S * Dv, T(0));
  const T keep_scale = T(1.0 / (1.0 - P.p));
  for (int64_t j0 = 0; j0 < S; j0 += kBk) {
    const int64_t cols = std::min(kBk, S - j0);
    const MatrixRef<const T> kj{P.k + P.lk.base[size_t(n)] + j0 * P.lk.rs, cols, D, P.lk.rs, P.lk.cs};
    const MatrixRef<const T> vjt{P.v + P.lv.base[size_t(n)] + j0 * P.lv.rs, Dv, cols, P.lv.cs, P.lv.rs};
    for (int64_t i0 = 0; i0 < T_; i0 += kBq) {
      const int64_t rows = std::min(kBq, T_ - i0);
      if (above_diagonal(P, i0, rows, j0)) continue;
      scores_tile(P, n, i0, rows, j0, cols, s);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = s + r * kBk;
        exp_row(row, lse[n * T_ + i0 + r], cols);  // P = exp(S - lse)
        T* prow = pd + r * kBk;
        if (P.p > 0) {
          const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * T_ + i0 + r) * S + j0), cols, P.p);
          for (int64_t j = 0; j < cols; ++j) prow[j] = keep[j] ? row[j] * keep_scale : T(0);
        }
      }
      const T* pdrop = P.p > 0 ? pd : s;
      const MatrixRef<const T> go{go_n + i0 * lg.rs, rows, Dv, lg.rs, lg.cs};
      // dv_j += P_drop^T dout_i
      gemm<T>(MatrixRef<const T>{pdrop, cols, rows, 1, kBk}, go, MatrixRef<T>{dv_n + j0 * Dv, cols, Dv, Dv, 1}, true,
              1);
      // dP = dout_i v_j^T (times the mask), dS = P (dP - D_i) scale
      gemm<T>(go, vjt, MatrixRef<T>{ds, rows, cols, kBk, 1}, false, 1);
      for (int64_t r = 0; r < rows; ++r) {
        T* dsrow = ds + r * kBk;
        const T* prow = s + r * kBk;
        const T di = delta[i0 + r];
        if (P.p > 0) {
          const uint8_t* keep = drop.draw(P.seed, P.offset, uint64_t((n * T_ + i0 + r) * S + j0), cols, P.p);
          for (int64_t j = 0; j < cols; ++j) dsrow[j] = keep[j] ? dsrow[j] * keep_scale : T(0);
        }
        const T scale = P.scale;
        // A masked score has P = 0: no gradient, even where dP is not finite.
        for (int64_t j = 0; j < cols; ++j) dsrow[j] = prow[j] == T(0) ? T(0) : prow[j] * (dsrow[j] - di) * scale;
      }
      // dq_i += dS k_j; dk_j += dS^T q_i
      gemm<T>(MatrixRef<const T>{ds, rows, cols, kBk, 1}, kj, MatrixRef<T>{dq_n + i0 * D, rows, D, D, 1}, true, 1);
      const MatrixRef<const T> qi{P.q + P.lq.base[size_t(n)] + i0 * P.lq.rs, rows, D, P.lq.rs, P.lq.cs};
      gemm<T>(MatrixRef<const T>{ds, cols, rows, 1, kBk}, qi, MatrixRef<T>{dk_n + j0 * D, cols, D, D, 1}, true, 1);
    }
  }
}

// in: gout, q, k, v, out, lse[, mask] -> dq, dk, dv (fresh and dense).
void attention_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool f64 = in[1].dtype() == DType::F64;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const Problem<T> P = problem_of<T>(in[1], in[2], in[3], in.size() == 7 ? &in[6] : nullptr, attrs);
    const Tensor o = in[4].contiguous(), lse = in[5].contiguous();
    const Layout lg = layout_of(in[0]);
    const T* go = static_cast<const T*>(in[0].data_ptr());
    T* dq = static_cast<T*>(out[0].data_ptr());
    T* dk = static_cast<T*>(out[1].data_ptr());
    T* dv = static_cast<T*>(out[2].data_ptr());
    if (P.S == 0 || P.T_ == 0) {
      std::fill(dq, dq + P.N * P.T_ * P.D, T(0));
      std::fill(dk, dk + P.N * P.S * P.D, T(0));
      std::fill(dv, dv + P.N * P.S * P.Dv, T(0));
      return;
    }
    const int nt = int(std::min<int64_t>(P.N, omp_in_parallel() ? 1 : omp_get_max_threads()));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      std::vector<T> work;
      DropRow drop;
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < P.N; ++n)
        backward_item(P, n, go, lg, static_cast<const T*>(o.data_ptr()), static_cast<const T*>(lse.data_ptr()), dq, dk,
                      dv, work, drop);
    }
  };
  if (f64) {
    run(double{});
  } else {
    run(float{});
  }
}

}  // namespace

void register_attention() {
  register_kernel(OpId::Attention, DeviceType::CPU, attention_kernel);
  register_kernel(OpId::AttentionBackward, DeviceType::CPU, attention_backward_kernel);
}

}  // namespace brisk::kernels::cpu
