// kernels/cuda/attention.cu: brisk's own CUDA kernels of the fused attention op and its
// backward op (F32 and F64), the readable reference of Note [Fused attention]
// (kernels/cpu/attention.cpp) on the GPU: one thread per query row (forward, dq) or key row
// (dk, dv), an online softmax over the keys, nothing of size (T, S) stored. Results as the CPU
// kernels: out, lse = m + log(l); causal (query i attends keys j <= i + attrs.start), Bool and
// additive masks, dropout from the op's Philox stream with the uniform of score (n, i, j) at
// element (n T + i) S + j (engine/random.h's philox_uniform, the same bits as the CPU's). Any
// strides: each operand's leading dims are decomposed in the kernel (no host arrays, so the
// kernels can be captured in a CUDA graph). Head sizes up to kMaxHead (the per-thread
// accumulators); larger ones take the math form (engine/ops/attention.cpp).
// Not here: the OpDefs and when the fused op runs (engine/ops/attention.cpp).
#include <cmath>
#include <limits>

#include "engine/op.h"
#include "engine/random.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"

namespace brisk::kernels::cuda {

namespace {

constexpr int kMaxHead = 256;  // D and Dv (kept in sync with engine/ops/attention.cpp)
constexpr int kMaxLead = 6;    // leading dims of q, k, v, the mask
constexpr int kRowsPerBlock = 64;

// Element (n, r, c) of an (*, R, C) operand: p[offset(n) + r rs + c cs].
template <class P>
struct Operand {
  P* p = nullptr;
  int nd = 0;  // leading dims
  int64_t size[kMaxLead] = {}, stride[kMaxLead] = {};
  int64_t rs = 0, cs = 0;

  __device__ int64_t offset(int64_t n) const {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      off += (n % size[d]) * stride[d];
      n /= size[d];
    }
    return off;
  }
  __device__ P* row(int64_t n, int64_t r) const { return p + offset(n) + r * rs; }
};

template <class P>
Operand<P> operand(const Tensor& t) {
  Operand<P> o;
  o.p = static_cast<P*>(t.data_ptr());
  o.nd = t.dim() - 2;
  BRISK_CHECK(o.nd <= kMaxLead, "attention (CUDA): more than ", kMaxLead, " leading dims in ", t.str());
  for (int d = 0; d < o.nd; ++d) {
    o.size[d] = t.size(d);
    o.stride[d] = t.stride(d);
  }
  o.rs = t.stride(-2);
  o.cs = t.stride(-1);
  return o;
}

template <class A>
struct Problem {
  Operand<const A> q, k, v, go;
  Operand<const void> mask;  // Bool or A; p null: none
  int64_t N, T, S, D, Dv;
  A scale;
  bool causal, additive;
  int64_t shift;
  double p;
  uint64_t seed, offset;

  // The masked, scaled score of query i and key j of item n (-inf where not attended).
  __device__ A score(int64_t n, int64_t i, int64_t j, const A* qi) const {
    if (causal && j > i + shift) return -std::numeric_limits<A>::infinity();
    const A* kj = k.row(n, j);
    A s = 0;
    for (int64_t d = 0; d < D; ++d) s += qi[d * q.cs] * kj[d * k.cs];
    s *= scale;
    if (mask.p) {
      const int64_t at = mask.offset(n) + i * mask.rs + j * mask.cs;
      if (additive) {
        s += static_cast<const A*>(mask.p)[at];
      } else if (!static_cast<const bool*>(mask.p)[at]) {
        s = -std::numeric_limits<A>::infinity();
      }
    }
    return s;
  }
  // The dropout keep flag of score (n, i, j).
  __device__ bool keep(int64_t n, int64_t i, int64_t j) const {
    return double(philox_uniform(seed, offset, uint64_t((n * T + i) * S + j))) >= p;
  }
};

template <class A>
Problem<A> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Attrs& attrs) {
  Problem<A> P{};
  P.q = operand<const A>(q);
  P.k = operand<const A>(k);
  P.v = operand<const A>(v);
  if (mask) P.mask = operand<const void>(*mask);
  P.N = 1;
  for (int64_t d = 0; d < q.dim() - 2; ++d) P.N *= q.size(d);
  P.T = q.size(-2);
  P.S = k.size(-2);
  P.D = q.size(-1);
  P.Dv = v.size(-1);
  BRISK_CHECK(P.D <= kMaxHead && P.Dv <= kMaxHead, "attention (CUDA): head sizes up to ", kMaxHead, ", got q ", q.str(),
              " and v ", v.str());
  P.scale = A(attrs.b);
  P.causal = attrs.flag;
  P.shift = attrs.start;
  P.additive = attrs.flag2;
  P.p = attrs.a;
  P.seed = attrs.seed;
  P.offset = attrs.offset;
  return P;
}

// ---- forward: thread (n, i) folds keys j = 0.. into a running max m, sum l and accumulator o.
template <class A>
__global__ void attention_forward_kernel(Problem<A> P, A* out, A* lse) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= P.N * P.T) return;
  const int64_t n = row / P.T, i = row % P.T;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  const A* qi = P.q.row(n, i);
  A o[kMaxHead];
  for (int64_t d = 0; d < P.Dv; ++d) o[d] = 0;
  A m = neg_inf, l = 0;
  const A keep_scale = A(1.0 / (1.0 - P.p));
  const int64_t end = P.causal && i + P.shift + 1 < P.S ? i + P.shift + 1 : P.S;
  for (int64_t j = 0; j < end; ++j) {
    const A s = P.score(n, i, j, qi);
    if (s == neg_inf) continue;     // not attended: no weight
    const A m_new = s > m ? s : m;  // a NaN score keeps m and makes l NaN below
    const A alpha = m == neg_inf ? A(0) : exp(m - m_new);
    const A e = exp(s - m_new);
    l = l * alpha + e;
    const A w = P.p > 0 ? (P.keep(n, i, j) ? e * keep_scale : A(0)) : e;
    const A* vj = P.v.row(n, j);
    for (int64_t d = 0; d < P.Dv; ++d) o[d] = o[d] * alpha + w * vj[d * P.v.cs];
    m = m_new;
  }
  A* dst = out + row * P.Dv;
  if (P.S == 0) {  // no keys: zeros, as the math form's empty product
    for (int64_t d = 0; d < P.Dv; ++d) dst[d] = 0;
    lse[row] = neg_inf;
    return;
  }
  const A inv = A(1) / l;  // 0 / 0 = NaN for a row with nothing attended, as the math form
  for (int64_t d = 0; d < P.Dv; ++d) dst[d] = o[d] * inv;
  lse[row] = m + log(l);
}

// ---- backward (FlashAttention-2's formulas, Note [Fused attention]): delta_i = rowsum(dout_i *
// out_i); with P = exp(S - lse), dP = dout v^T (times the dropout mask), dS = P (dP - delta)
// scale: dq_i = sum_j dS_ij k_j; dk_j = sum_i dS_ij q_i; dv_j = sum_i P_drop_ij dout_i.
template <class A>
__global__ void attention_delta_kernel(Problem<A> P, const A* out, A* delta) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= P.N * P.T) return;
  const A* go = P.go.row(row / P.T, row % P.T);
  const A* o = out + row * P.Dv;
  A acc = 0;
  for (int64_t d = 0; d < P.Dv; ++d) acc += go[d * P.go.cs] * o[d];
  delta[row] = acc;
}

// dS of score (n, i, j) given P = exp(s - lse_i) and dout_i (the dropout mask applied to dP).
template <class A>
__device__ A score_grad(const Problem<A>& P, int64_t n, int64_t i, int64_t j, A prob, const A* go, A di) {
  if (prob == A(0)) return A(0);  // a masked score: no gradient, even where dP is not finite
  const A* vj = P.v.row(n, j);
  A dp = 0;
  for (int64_t d = 0; d < P.Dv; ++d) dp += go[d * P.go.cs] * vj[d * P.v.cs];
  if (P.p > 0) dp = P.keep(n, i, j) ? dp * A(1.0 / (1.0 - P.p)) : A(0);
  return prob * (dp - di) * P.scale;
}

// dq: thread (n, i) over the keys.
template <class A>
__global__ void attention_dq_kernel(Problem<A> P, const A* lse, const A* delta, A* dq) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= P.N * P.T) return;
  const int64_t n = row / P.T, i = row % P.T;
  const A* qi = P.q.row(n, i);
  const A* go = P.go.row(n, i);
  A acc[kMaxHead];
  for (int64_t d = 0; d < P.D; ++d) acc[d] = 0;
  const int64_t end = P.causal && i + P.shift + 1 < P.S ? i + P.shift + 1 : P.S;
  for (int64_t j = 0; j < end; ++j) {
    const A s = P.score(n, i, j, qi);
    const A ds = score_grad(P, n, i, j, exp(s - lse[row]), go, delta[row]);
    if (ds == A(0)) continue;
    const A* kj = P.k.row(n, j);
    for (int64_t d = 0; d < P.D; ++d) acc[d] += ds * kj[d * P.k.cs];
  }
  for (int64_t d = 0; d < P.D; ++d) dq[row * P.D + d] = acc[d];
}

// dk, dv: thread (n, j) over the queries.
template <class A>
__global__ void attention_dkv_kernel(Problem<A> P, const A* lse, const A* delta, A* dk, A* dv) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= P.N * P.S) return;
  const int64_t n = col / P.S, j = col % P.S;
  A gk[kMaxHead], gv[kMaxHead];
  for (int64_t d = 0; d < P.D; ++d) gk[d] = 0;
  for (int64_t d = 0; d < P.Dv; ++d) gv[d] = 0;
  const A keep_scale = A(1.0 / (1.0 - P.p));
  const int64_t first = P.causal && j - P.shift > 0 ? j - P.shift : 0;  // queries with j <= i + shift
  for (int64_t i = first; i < P.T; ++i) {
    const A* qi = P.q.row(n, i);
    const A* go = P.go.row(n, i);
    const int64_t r = n * P.T + i;
    const A prob = exp(P.score(n, i, j, qi) - lse[r]);
    const A pd = P.p > 0 ? (P.keep(n, i, j) ? prob * keep_scale : A(0)) : prob;
    for (int64_t d = 0; d < P.Dv; ++d) gv[d] += pd * go[d * P.go.cs];
    const A ds = score_grad(P, n, i, j, prob, go, delta[r]);
    if (ds == A(0)) continue;
    for (int64_t d = 0; d < P.D; ++d) gk[d] += ds * qi[d * P.q.cs];
  }
  for (int64_t d = 0; d < P.D; ++d) dk[col * P.D + d] = gk[d];
  for (int64_t d = 0; d < P.Dv; ++d) dv[col * P.Dv + d] = gv[d];
}

unsigned blocks_for(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// in: q, k, v[, mask] -> out (*, T, Dv), lse (*, T); F32 or F64 (16-bit inputs are converted by
// the public function).
void attention_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  DenseOut o(out[0]), lse(out[1]);
  const int device = in[0].device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  auto run = [&](auto tag) {
    using A = decltype(tag);
    const Problem<A> P = problem_of<A>(in[0], in[1], in[2], in.size() == 4 ? &in[3] : nullptr, attrs);
    if (P.N * P.T == 0) return;
    attention_forward_kernel<A><<<blocks_for(P.N * P.T), kRowsPerBlock, 0, stream>>>(
        P, static_cast<A*>(o.dense.data_ptr()), static_cast<A*>(lse.dense.data_ptr()));
    BRISK_CUDA_CHECK_LAUNCH();
  };
  if (in[0].dtype() == DType::F64) {
    run(double{});
  } else {
    run(float{});
  }
  o.finish();
  lse.finish();
}

// in: gout, q, k, v, out, lse[, mask] -> dq, dk, dv.
void attention_backward_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  DenseOut dq(out[0]), dk(out[1]), dv(out[2]);
  const int device = in[1].device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  const Tensor o = dense(in[4]), lse = dense(in[5]);
  auto run = [&](auto tag) {
    using A = decltype(tag);
    Problem<A> P = problem_of<A>(in[1], in[2], in[3], in.size() == 7 ? &in[6] : nullptr, attrs);
    P.go = operand<const A>(in[0]);
    if (P.N * P.T > 0) {
      Tensor delta = make_empty({P.N * P.T}, in[1].dtype(), in[1].device());
      A* dp = static_cast<A*>(delta.data_ptr());
      attention_delta_kernel<A>
          <<<blocks_for(P.N * P.T), kRowsPerBlock, 0, stream>>>(P, static_cast<const A*>(o.data_ptr()), dp);
      BRISK_CUDA_CHECK_LAUNCH();
      attention_dq_kernel<A><<<blocks_for(P.N * P.T), kRowsPerBlock, 0, stream>>>(
          P, static_cast<const A*>(lse.data_ptr()), dp, static_cast<A*>(dq.dense.data_ptr()));
      BRISK_CUDA_CHECK_LAUNCH();
      if (P.N * P.S > 0) {
        attention_dkv_kernel<A><<<blocks_for(P.N * P.S), kRowsPerBlock, 0, stream>>>(
            P, static_cast<const A*>(lse.data_ptr()), dp, static_cast<A*>(dk.dense.data_ptr()),
            static_cast<A*>(dv.dense.data_ptr()));
        BRISK_CUDA_CHECK_LAUNCH();
      }
    } else {  // no queries: no gradient reaches the keys and values
      zero_(dk.dense);
      zero_(dv.dense);
    }
  };
  if (in[1].dtype() == DType::F64) {
    run(double{});
  } else {
    run(float{});
  }
  dq.finish();
  dk.finish();
  dv.finish();
}

}  // namespace

void register_attention() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Attention, gpu, attention_cuda);
  register_kernel(OpId::AttentionBackward, gpu, attention_backward_cuda);
}

}  // namespace brisk::kernels::cuda
