// kernels/cpu/reduce.cpp: the CPU reduction engine and the kernels on it: the list of
// kernels/reduce_ops.h (sum, nansum, amax/amin, argmax/argmin) and var run its ops over one
// engine (Note [Reduction plan]); softmax, log_softmax, logsumexp and the fused cross-entropy
// forward and backward share one row-wise log-sum-exp (row_lse). Sums are pairwise over blocks
// so that F32 sums of millions of elements stay accurate, and results do not depend on the
// number of threads. F16/BF16 compute in float, F64 in double, integers in int64.
// Not here: the ops' arithmetic (kernels/reduce_ops.h), inference, dims checking and backward
// formulas (engine/ops/reduce.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/vmath.h"
#include "kernels/reduce_ops.h"
#include "kernels/reduce_plan.h"

namespace brisk::kernels::cpu {

namespace {

using kernels::Group;
using kernels::make_plan;
using kernels::reduce_mask;
using kernels::ReducePlan;
using kernels::RowLse;

constexpr int kLanes = 16;            // independent accumulators of a run (one zmm of floats)
constexpr int64_t kLeaf = 1024;       // elements reduced directly before pairwise combining
constexpr int64_t kRowLeaf = 64;      // rows reduced directly in the row-wise path
constexpr int64_t kTile = 64;         // kept columns per row-wise work item
constexpr int64_t kChunk = 1 << 16;   // reduced elements per parallel chunk (few outputs)
constexpr int64_t kChunkRows = 1024;  // rows per parallel chunk in the row-wise path
constexpr int64_t kFewOutputs = 8;    // below this many outputs, split the reduced dims instead

template <class A, class T>
BRISK_INLINE A load_as(const T* p) {
  return static_cast<A>(static_cast<compute_t<T>>(*p));
}

// Note [Reduction plan]
// The input's dims split into two groups: kept (they index the output) and reduced. Each group
// drops size-1 dims and merges neighbours that are one run of memory, so a contiguous input
// reduced over its last dims becomes (outputs, run) and over its first dims (rows, columns).
// Two paths then cover everything:
//   inner: the reduced group is innermost (or the input is strided): each output reduces its
//          elements pairwise, with kLanes accumulators over the innermost run (vectorizable);
//   rows:  the kept group's innermost dim is contiguous and the reduced one is not: whole rows
//          are accumulated into kTile columns at a time, vectorized over the columns, never
//          striding through memory per element.
// Parallelism goes over outputs, or over fixed chunks of the reduced elements when there are
// few outputs; chunk partials combine pairwise, so results do not depend on the thread count.
// The op (Note [Reduction contract] in kernels/reduce_ops.h) sees each element with its flat
// reduced index, so argmax keeps its index in the accumulator on both paths.
// Input and output offsets of flat (row-major) index i over the first `n` dims of group g.
BRISK_INLINE void offsets(const Group& g, int n, int64_t i, int64_t& in_off, int64_t& out_off) {
  in_off = 0;
  out_off = 0;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t k = i % g.size[d];
    i /= g.size[d];
    in_off += k * g.in[d];
    out_off += k * g.out[d];
  }
}

BRISK_INLINE int64_t in_offset(const Group& g, int64_t i) {
  int64_t off = 0;
  for (int d = g.n - 1; d >= 0; --d) {
    off += (i % g.size[d]) * g.in[d];
    i /= g.size[d];
  }
  return off;
}

template <class Op>
typename Op::Acc combine_pairwise(typename Op::Acc* parts, int64_t n, const Op& op) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t i = 0; i + w < n; i += 2 * w) parts[i] = op.combine(parts[i], parts[i + w]);
  }
  return parts[0];
}

// ---- inner path
// Accumulates q[0], q[s], ..., q[(n-1)s], the reduced elements r0, r0 + 1, ..., into the lanes
// (lane l takes every kLanes-th element).
template <class T, class Op>
BRISK_INLINE void accumulate_run(typename Op::Acc* lanes, const T* q, int64_t n, int64_t s, const Op& op, int64_t r0) {
  using V = typename Op::Value;
  int64_t i = 0;
  // `omp simd` lets GCC vectorize the NaN-aware max/min lanes too (plain sums vectorize anyway).
  if (s == 1) {
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) lanes[l] = op.step(lanes[l], load_as<V>(q + i + l), r0 + i + l);
    }
  } else {
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) lanes[l] = op.step(lanes[l], load_as<V>(q + (i + l) * s), r0 + i + l);
    }
  }
  // Fewer than kLanes are left; `l < kLanes` says so to GCC, whose -Wstringop-overflow cannot see it.
  for (int l = 0; l < kLanes && i < n; ++i, ++l) lanes[l] = op.step(lanes[l], load_as<V>(q + i * s), r0 + i);
}

// Reduces the elements [b, e) (flat, row-major) of group r, starting at x, with the op of one
// output.
template <class T, class Op>
typename Op::Acc reduce_span(const Group& r, const T* x, int64_t b, int64_t e, const Op& op) {
  using A = typename Op::Acc;
  if (e - b > kLeaf) {
    const int64_t mid = b + (e - b) / 2;
    return op.combine(reduce_span(r, x, b, mid, op), reduce_span(r, x, mid, e, op));
  }
  A lanes[kLanes];
  std::fill(lanes, lanes + kLanes, op.identity());
  const int last = r.n - 1;
  const int64_t inner = r.size[last];
  for (int64_t pos = b; pos < e;) {
    const int64_t n = std::min(inner - pos % inner, e - pos);
    accumulate_run(lanes, x + in_offset(r, pos), n, r.in[last], op, pos);
    pos += n;
  }
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] = op.combine(lanes[l], lanes[l + w]);
  }
  return lanes[0];
}

template <class T, class Op, class Store>
void reduce_inner(const ReducePlan& p, const T* x, const Op& op, const Store& store) {
  using A = typename Op::Acc;
  if (p.n_out < kFewOutputs && p.n_red >= 2 * kChunk) {
    // Few long reductions (a sum of everything): chunks of each one in parallel.
    const int64_t n_chunks = (p.n_red + kChunk - 1) / kChunk;
    auto parts = std::make_unique<A[]>(size_t(n_chunks));
    const int nt = threads_for(p.n_red);
    for (int64_t o = 0; o < p.n_out; ++o) {
      int64_t in_off, out_off;
      offsets(p.kept, p.kept.n, o, in_off, out_off);
      const Op op_o = op.at(o);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
      for (int64_t c = 0; c < n_chunks; ++c) {
        parts[c] = reduce_span(p.red, x + in_off, c * kChunk, std::min(p.n_red, (c + 1) * kChunk), op_o);
      }
      store(o, out_off, op.finish(combine_pairwise(parts.get(), n_chunks, op)));
    }
    return;
  }
  const int nt = threads_for(p.n_out * p.n_red);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t o = 0; o < p.n_out; ++o) {
    int64_t in_off, out_off;
    offsets(p.kept, p.kept.n, o, in_off, out_off);
    store(o, out_off, op.finish(reduce_span(p.red, x + in_off, 0, p.n_red, op.at(o))));
  }
}

// ---- rows path
// Reduces rows [b, e) of group r into acc[0, w): w contiguous columns starting at x, whose
// first column is output o0.
template <class T, class Op>
void reduce_rows_span(const Group& r, const T* x, int64_t w, int64_t b, int64_t e, const Op& op, int64_t o0,
                      typename Op::Acc* acc) {
  using A = typename Op::Acc;
  using V = typename Op::Value;
  if (e - b > kRowLeaf) {
    const int64_t mid = b + (e - b) / 2;
    reduce_rows_span(r, x, w, b, mid, op, o0, acc);
    A tmp[kTile];
    reduce_rows_span(r, x, w, mid, e, op, o0, tmp);
    for (int64_t j = 0; j < w; ++j) acc[j] = op.combine(acc[j], tmp[j]);
    return;
  }
  for (int64_t j = 0; j < w; ++j) acc[j] = op.identity();
  for (int64_t i = b; i < e; ++i) {
    const T* q = x + in_offset(r, i);
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) acc[j] = op.at(o0 + j).step(acc[j], load_as<V>(q + j), i);
  }
}

template <class T, class Op, class Store>
void reduce_rows(const ReducePlan& p, const T* x, const Op& op, const Store& store) {
  using A = typename Op::Acc;
  const Group& k = p.kept;
  const int last = k.n - 1;
  const int64_t cols = k.size[last];
  const int64_t tiles = (cols + kTile - 1) / kTile;
  const int64_t items = (p.n_out / cols) * tiles;
  // Work item -> input of its first column, its width, its first output, its output offset.
  struct Item {
    const T* x;
    int64_t w, o0, out_off;
  };
  auto item_at = [&](int64_t item) {
    const int64_t outer = item / tiles;
    const int64_t j0 = (item % tiles) * kTile;
    int64_t in_off, out_off;
    offsets(k, last, outer, in_off, out_off);
    return Item{x + in_off + j0, std::min(kTile, cols - j0), outer * cols + j0, out_off + j0 * k.out[last]};
  };
  auto finish = [&](const Item& it, const A* acc) {
    for (int64_t j = 0; j < it.w; ++j) store(it.o0 + j, it.out_off + j * k.out[last], op.finish(acc[j]));
  };
  if (items < kFewOutputs && p.n_red >= 2 * kChunkRows) {
    // Few column tiles over many rows: chunks of rows in parallel, then pairwise.
    const int64_t n_chunks = (p.n_red + kChunkRows - 1) / kChunkRows;
    auto parts = std::make_unique<A[]>(size_t(n_chunks * kTile));
    for (int64_t item = 0; item < items; ++item) {
      const Item it = item_at(item);
      const int nt = threads_for(p.n_red * it.w);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
      for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t e = std::min(p.n_red, (c + 1) * kChunkRows);
        reduce_rows_span(p.red, it.x, it.w, c * kChunkRows, e, op, it.o0, parts.get() + c * kTile);
      }
      for (int64_t w = 1; w < n_chunks; w *= 2) {
        for (int64_t c = 0; c + w < n_chunks; c += 2 * w) {
          A* a = parts.get() + c * kTile;
          const A* b = parts.get() + (c + w) * kTile;
          for (int64_t j = 0; j < it.w; ++j) a[j] = op.combine(a[j], b[j]);
        }
      }
      finish(it, parts.get());
    }
    return;
  }
  const int nt = threads_for(p.n_out * p.n_red);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const Item it = item_at(item);
    A acc[kTile];
    reduce_rows_span(p.red, it.x, it.w, 0, p.n_red, op, it.o0, acc);
    finish(it, acc);
  }
}

// Runs `op` over the plan; store(o, out_offset, value) receives each output's finished value,
// o being the flat (row-major) output index.
template <class T, class Op, class Store>
void reduce(const ReducePlan& p, const T* x, const Op& op, const Store& store) {
  if (p.n_out == 0) return;
  if (p.n_red == 0) {  // nothing to reduce: the identity (sum of nothing = 0)
    for (int64_t o = 0; o < p.n_out; ++o) {
      int64_t in_off, out_off;
      offsets(p.kept, p.kept.n, o, in_off, out_off);
      store(o, out_off, op.finish(op.identity()));
    }
    return;
  }
  const bool rows = p.kept.in[p.kept.n - 1] == 1 && p.red.in[p.red.n - 1] != 1;
  if (rows) {
    reduce_rows(p, x, op, store);
  } else {
    reduce_inner(p, x, op, store);
  }
}

// Runs `op` over x's dims in `mask` into out[0], rounding each finished value to O.
template <class T, class O, class Op>
void reduce_into(const Tensor& x, const Tensor& out, uint32_t mask, const Op& op) {
  const ReducePlan p = make_plan(x, out, mask);
  O* y = static_cast<O*>(out.data_ptr());
  auto store = [y](int64_t, int64_t off, auto v) { y[off] = static_cast<O>(v); };
  reduce(p, static_cast<const T*>(x.data_ptr()), op, store);
}

// ---- kernels: the list of one-pass reductions (kernels/reduce_ops.h), then var
// The kernel of one entry: its op struct for the input's element type, over the engine.
template <class E>
void list_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const char* name = op_name(E::id);
  const uint32_t mask = kernels::entry_mask(E::dims, x.dim(), attrs, name);
  kernels::dispatch_reduce<E::dtypes>(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    using Op = typename E::template Op<T>;
    reduce_into<T, kernels::ReduceOut<Op, T>>(x, out[0], mask, Op{});
  });
}

template <class... E>
void register_reductions(kernels::ReduceList<E...>) {
  (register_kernel(E::id, DeviceType::CPU, list_kernel<E>), ...);
}

// Two passes: the mean of each output (MeanOp), then the squared deviations from it.
void var_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const uint32_t mask = reduce_mask(attrs.dims, x.dim(), "var");
  const ReducePlan p = make_plan(x, out[0], mask);
  dispatch_float(x.dtype(), "var", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    auto mean = std::make_unique<A[]>(size_t(std::max<int64_t>(p.n_out, 1)));
    reduce(p, static_cast<const T*>(x.data_ptr()), kernels::MeanOp<A>{{}, A(p.n_red)},
           [&](int64_t o, int64_t, A m) { mean[o] = m; });
    const A divisor = A(std::max(0.0, double(p.n_red) - attrs.a));
    reduce_into<T, T>(x, out[0], mask, kernels::SquaredDeviationOp<A>{mean.get(), A(0), divisor});
  });
}

// ---- the row-wise log-sum-exp: max (NaN wins), then the sum of exp(x - max) in element order
// over the row x[0], x[s], ..., x[(n-1)s]; sink(i, e) sees every exponential (softmax keeps
// them). Softmax, log_softmax, logsumexp and cross-entropy (forward and backward) start here.
struct NoSink {
  template <class A>
  BRISK_INLINE void operator()(int64_t, A) const {}
};

// The row's maximum (NaN wins).
template <class T>
BRISK_INLINE compute_t<T> row_max(const T* x, int64_t n, int64_t s) {
  Group row;
  row.add(n, s, 0);
  row.finish();
  return reduce_span(row, x, 0, n, kernels::ExtremumOp<compute_t<T>, true>{});
}

template <class T, class Sink = NoSink>
BRISK_INLINE RowLse<compute_t<T>> row_lse(const T* x, int64_t n, int64_t s, const Sink& sink = {}) {
  using A = compute_t<T>;
  const A m = row_max(x, n, s);
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Sink, NoSink>) {
    if (s == 1) return {m, vmath::exp_sum(x, m, nullptr, n)};  // dense F32: 16 lanes at a time
  }
  A sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const A e = std::exp(load_as<A>(x + i * s) - m);
    sink(i, e);
    sum += e;
  }
  return {m, sum};
}

// ---- softmax / log_softmax over one dim: x (rows, n) with any strides
// Passes over a row: row_lse, then the output. Dense rows take constant strides so that the
// loops vectorize.
template <bool Log, bool Dense, class T>
void softmax_row(const T* x, int64_t sx, T* y, int64_t sy, int64_t n) {
  using A = compute_t<T>;
  if constexpr (Dense) {
    sx = 1;
    sy = 1;
  }
  if constexpr (!Log && Dense && std::is_same_v<T, float>) {
    const float sum = vmath::exp_sum(x, row_max(x, n, 1), y, n);
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    return;
  }
  if constexpr (!Log && std::is_same_v<T, A>) {
    // Full-precision output: store exp once, then scale.
    const RowLse<A> r = row_lse(x, n, sx, [y, sy](int64_t i, A e) { y[i * sy] = e; });
    const A inv = A(1) / r.sum;
    for (int64_t i = 0; i < n; ++i) y[i * sy] *= inv;
    return;
  }
  const RowLse<A> r = row_lse(x, n, sx);
  if constexpr (Log) {
    const A log_s = std::log(r.sum);
    for (int64_t i = 0; i < n; ++i) y[i * sy] = static_cast<T>(load_as<A>(x + i * sx) - r.max - log_s);
  } else {
    const A inv = A(1) / r.sum;
    for (int64_t i = 0; i < n; ++i) y[i * sy] = static_cast<T>(std::exp(load_as<A>(x + i * sx) - r.max) * inv);
  }
}

template <bool Log>
void softmax_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* name = Log ? "log_softmax" : "softmax";
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  if (x.numel() == 0) return;
  const int d = wrap_dim(attrs.dim, x.dim(), name);
  const bool scalar = x.dim() == 0;  // a 0-dim tensor is one row of one element
  const int64_t n = scalar ? 1 : x.sizes()[d];
  const int64_t sx = scalar ? 0 : x.strides()[d];
  const int64_t sy = scalar ? 0 : y.strides()[d];
  const ReducePlan p = make_plan(x, y, scalar ? 0u : 1u << d);
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    const bool dense = sx == 1 && sy == 1;
    const int nt = threads_for(p.n_out * n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t row = 0; row < p.n_out; ++row) {
      int64_t xo, yo;
      offsets(p.kept, p.kept.n, row, xo, yo);
      if (dense) {
        softmax_row<Log, true>(xp + xo, 1, yp + yo, 1, n);
      } else {
        softmax_row<Log, false>(xp + xo, sx, yp + yo, sy, n);
      }
    }
  });
}

// ---- logsumexp over dims: one row_lse per output. An output whose elements are not one
// strided run (dims that do not merge) is gathered into a per-thread buffer first.
void logsumexp_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), "logsumexp"));
  if (p.n_out == 0) return;
  dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* y = static_cast<T*>(out[0].data_ptr());
    const bool run = p.red.n == 1;
    const int nt = threads_for(p.n_out * p.n_red);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      std::vector<A> gathered(run ? 0 : size_t(p.n_red));
#pragma omp for schedule(static)
      for (int64_t o = 0; o < p.n_out; ++o) {
        int64_t in_off, out_off;
        offsets(p.kept, p.kept.n, o, in_off, out_off);
        RowLse<A> r;
        if (run) {
          r = row_lse(xp + in_off, p.n_red, p.red.in[0]);
        } else {
          for (int64_t i = 0; i < p.n_red; ++i) gathered[size_t(i)] = load_as<A>(xp + in_off + in_offset(p.red, i));
          r = row_lse(gathered.data(), p.n_red, 1);
        }
        y[out_off] = static_cast<T>(r.logsumexp());
      }
    }
  });
}

// ---- cross-entropy, fused with log_softmax. logits (N, C), target I64 (N).
// loss_i = lse_i - (1 - eps) x_i[t_i] - (eps / C) sum_c x_i[c]  (label smoothing eps), 0 where
// t_i == ignore_index; Mean divides the sum by the number of non-ignored rows.
struct CeRows {
  int64_t n, c;
  int64_t row_stride, col_stride;
  const int64_t* target;
  int64_t target_stride;
  CrossEntropyParams params;

  int64_t t(int64_t i) const { return target[i * target_stride]; }
  bool ignored(int64_t i) const { return t(i) == params.ignore_index; }
};

CeRows ce_rows(const Tensor& logits, const Tensor& target, const Attrs& a, const char* op) {
  CeRows r{logits.sizes()[0],      logits.sizes()[1],   logits.strides()[0],        logits.strides()[1],
           target.data<int64_t>(), target.strides()[0], CrossEntropyParams::from(a)};
  // Checked here, before the parallel loops (which cannot throw).
  const int64_t ignore = r.params.ignore_index;
  for (int64_t i = 0; i < r.n; ++i) {
    const int64_t t = r.t(i);
    BRISK_CHECK(t == ignore || (t >= 0 && t < r.c), op, ": target index ", t, " (row ", i, ") is out of range for ",
                r.c, " classes (C = ", r.c, ", ignore_index = ", ignore, ")");
  }
  return r;
}

int64_t count_valid(const CeRows& r) {
  int64_t v = 0;
  for (int64_t i = 0; i < r.n; ++i) v += r.ignored(i) ? 0 : 1;
  return v;
}

// The loss of row i (not ignored), given the row's logsumexp.
template <class T, class A = compute_t<T>>
A ce_row_loss(const CeRows& r, const T* row, int64_t t, A lse) {
  const double eps = r.params.label_smoothing;
  A l = lse - A(1 - eps) * load_as<A>(row + t * r.col_stride);
  if (eps > 0) {
    A s = 0;
    for (int64_t j = 0; j < r.c; ++j) s += load_as<A>(row + j * r.col_stride);
    l -= A(eps / double(r.c)) * s;
  }
  return l;
}

void cross_entropy_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& logits = in[0];
  const CeRows r = ce_rows(logits, in[1], attrs, "cross_entropy");
  const Reduction reduction = r.params.reduction;
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* x = static_cast<const T*>(logits.data_ptr());
    A* lse = static_cast<A*>(out[1].data_ptr());  // dense (N), allocated by dispatch
    const int64_t ls = out[1].strides()[0];
    std::vector<A> loss(size_t(r.n));
    const int nt = threads_for(r.n * r.c);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < r.n; ++i) {
      const T* row = x + i * r.row_stride;
      const A l = row_lse(row, r.c, r.col_stride).lse();
      lse[i * ls] = l;
      loss[i] = r.ignored(i) ? A(0) : ce_row_loss(r, row, r.t(i), l);
    }
    T* y = static_cast<T*>(out[0].data_ptr());
    if (reduction == Reduction::None) {
      const int64_t ys = out[0].dim() == 1 ? out[0].strides()[0] : 0;
      for (int64_t i = 0; i < r.n; ++i) y[i * ys] = static_cast<T>(loss[i]);
      return;
    }
    double total = 0;  // N row losses: summed in double, serially (deterministic)
    for (int64_t i = 0; i < r.n; ++i) total += double(loss[i]);
    if (reduction == Reduction::Mean) total /= double(count_valid(r));  // 0/0 = NaN, as PyTorch
    y[0] = static_cast<T>(total);
  });
}

// (grad, logits, target, lse) -> dlogits (N, C) = scale_i (softmax_i - (1 - eps) onehot(t_i) - eps / C),
// zero on ignored rows; scale_i = grad_i (None), grad (Sum), grad / valid rows (Mean).
void cross_entropy_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& grad = in[0];
  const Tensor& logits = in[1];
  const Tensor& dx = out[0];
  const CeRows r = ce_rows(logits, in[2], attrs, "cross_entropy_backward");
  const int64_t valid = r.params.reduction == Reduction::Mean ? count_valid(r) : 1;
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* x = static_cast<const T*>(logits.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    const int64_t gs = grad.dim() == 1 ? grad.strides()[0] : 0;
    const A* lse_in = static_cast<const A*>(in[3].data_ptr());  // the forward's (Note [Cross-entropy
    const int64_t ls = in[3].strides()[0];                      // saves the logsumexp])
    T* d = static_cast<T*>(dx.data_ptr());
    const int64_t ds0 = dx.strides()[0];
    const int64_t ds1 = dx.strides()[1];
    const double eps = r.params.label_smoothing;
    const A smooth = A(eps / double(r.c));
    const int nt = threads_for(r.n * r.c);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < r.n; ++i) {
      T* drow = d + i * ds0;
      if (r.ignored(i)) {
        for (int64_t j = 0; j < r.c; ++j) drow[j * ds1] = T(0);
        continue;
      }
      const T* row = x + i * r.row_stride;
      const A lse = lse_in[i * ls];
      const A scale = load_as<A>(g + i * gs) / A(valid);
      const int64_t t = r.t(i);
      if constexpr (std::is_same_v<T, float>) {
        if (r.col_stride == 1 && ds1 == 1) {  // dense F32: scale exp(x - lse) 16 lanes at a time
          vmath::exp_affine(row, lse, scale, drow, r.c);
          if (smooth != A(0)) {
            for (int64_t j = 0; j < r.c; ++j) drow[j] -= scale * smooth;
          }
          drow[t] -= scale * A(1 - eps);
          continue;
        }
      }
      for (int64_t j = 0; j < r.c; ++j) {
        A p = std::exp(load_as<A>(row + j * r.col_stride) - lse) - smooth;
        if (j == t) p -= A(1 - eps);
        drow[j * ds1] = static_cast<T>(scale * p);
      }
    }
  });
}

}  // namespace

void register_reduce() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_reductions(kernels::Reductions{});
  register_kernel(OpId::Var, cpu, var_kernel);
  register_kernel(OpId::Softmax, cpu, softmax_kernel<false>);
  register_kernel(OpId::LogSoftmax, cpu, softmax_kernel<true>);
  register_kernel(OpId::Logsumexp, cpu, logsumexp_kernel);
  register_kernel(OpId::CrossEntropy, cpu, cross_entropy_kernel);
  register_kernel(OpId::CrossEntropyBackward, cpu, cross_entropy_backward_kernel);
}

}  // namespace brisk::kernels::cpu
