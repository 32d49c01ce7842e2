// kernels/cuda/reduce.cu: the CUDA reduction engine and the kernels on it: the list of
// kernels/reduce_ops.h (sum, nansum, amax/amin, argmax/argmin, registered from the same list
// as the CPU's) and var run its ops over one kernel; softmax, log_softmax, logsumexp and the
// fused cross-entropy forward and backward share one row-wise log-sum-exp (row_lse). The CPU
// reference is kernels/cpu/reduce.cpp: same plan (kept and reduced dims, each coalesced), same
// arithmetic (F16/BF16 in float, F64 in double, integers in int64, NaN wins in max/min, first
// index wins in argmax), so results agree up to summation order.
// Not here: inference, dims checking and backward formulas (engine/ops/reduce.cpp); block
// reductions (kernels/cuda/block_reduce.cuh).
#include <algorithm>
#include <limits>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/reduce_ops.h"
#include "kernels/reduce_plan.h"

namespace brisk::kernels::cuda {

namespace {

using kernels::Group;
using kernels::make_plan;
using kernels::reduce_mask;
using kernels::ReducePlan;
using kernels::RowLse;

// The plan (kernels/reduce_plan.h) is made on the host and passed to kernels by value.

__device__ __forceinline__ void kept_offsets(const Group& g, int64_t o, int64_t& in_off, int64_t& out_off) {
  in_off = 0;
  out_off = 0;
  for (int d = g.n - 1; d >= 0; --d) {
    const int64_t q = o / g.size[d];
    const int64_t k = o - q * g.size[d];
    in_off += k * g.in[d];
    out_off += k * g.out[d];
    o = q;
  }
}

__device__ __forceinline__ int64_t red_offset(const Group& g, int64_t r) {
  if (g.n == 1) return r * g.in[0];
  int64_t off = 0;
  for (int d = g.n - 1; d >= 0; --d) {
    const int64_t q = r / g.size[d];
    off += (r - q * g.size[d]) * g.in[d];
    r = q;
  }
  return off;
}

// ---- the reduction kernel
// Each output is reduced by `lanes` threads: along x when the reduced dims are innermost in
// memory (row mode: consecutive lanes read consecutive elements), along y otherwise (column
// mode: consecutive threads own consecutive outputs, so each step reads one coalesced row).
// Long reductions with few outputs also split the reduced range over blockIdx.y; those
// partial accumulators are combined in split order by reduce_finish_kernel (deterministic).
struct ReduceArgs {
  Group kept, red;
  int64_t n_out, n_red;
  int64_t chunk;  // reduced elements per split (blockIdx.y)
  bool row_mode;
};

template <class T, class O, class Op>
__global__ void reduce_kernel(ReduceArgs a, const T* x, O* y, typename Op::Acc* partial, Op op) {
  using A = typename Op::Acc;
  using V = typename Op::Value;
  __shared__ alignas(16) unsigned char smem_raw[kBlock * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  const int lanes = a.row_mode ? blockDim.x : blockDim.y;
  const int lane = a.row_mode ? threadIdx.x : threadIdx.y;
  const int per_block = a.row_mode ? blockDim.y : blockDim.x;
  const int64_t o = int64_t(blockIdx.x) * per_block + (a.row_mode ? threadIdx.y : threadIdx.x);
  const int64_t r0 = int64_t(blockIdx.y) * a.chunk;
  const int64_t r1 = r0 + a.chunk < a.n_red ? r0 + a.chunk : a.n_red;
  A acc = op.identity();
  int64_t in_off = 0, out_off = 0;
  if (o < a.n_out) {
    kept_offsets(a.kept, o, in_off, out_off);
    const T* xo = x + in_off;
    const Op op_o = op.at(o);
    for (int64_t r = r0 + lane; r < r1; r += lanes) acc = op_o.step(acc, V(load_value(xo + red_offset(a.red, r))), r);
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  smem[tid] = acc;
  lanes_reduce(smem, tid, lane, lanes, a.row_mode ? 1 : blockDim.x, op);
  if (lane == 0 && o < a.n_out) {
    if (gridDim.y == 1) {
      y[out_off] = Store<O>::to(op.finish(smem[tid]));
    } else {
      partial[int64_t(blockIdx.y) * a.n_out + o] = smem[tid];
    }
  }
}

// partial: (splits, n_out) -> y
template <class O, class Op>
__global__ void reduce_finish_kernel(ReduceArgs a, int splits, const typename Op::Acc* partial, O* y, Op op) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < a.n_out; o += int64_t(gridDim.x) * blockDim.x) {
    typename Op::Acc acc = partial[o];
    for (int s = 1; s < splits; ++s) acc = op.combine(acc, partial[int64_t(s) * a.n_out + o]);
    int64_t in_off, out_off;
    kept_offsets(a.kept, o, in_off, out_off);
    y[out_off] = Store<O>::to(op.finish(acc));
  }
}

int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

// The launch shape of a plan: lanes per output, splits of the reduced range.
struct ReduceLaunch {
  ReduceArgs args;
  dim3 block;
  int64_t blocks_x;
  int splits;
};

ReduceLaunch reduce_launch(const ReducePlan& p, int device) {
  ReduceLaunch l{{p.kept, p.red, p.n_out, p.n_red, std::max<int64_t>(p.n_red, 1), true}, dim3(), 0, 1};
  // Column mode when the kept dims are innermost in memory and the reduced ones are not.
  l.args.row_mode = !(p.kept.in[p.kept.n - 1] == 1 && p.red.in[p.red.n - 1] != 1);
  if (l.args.row_mode) {
    l.block.x = pow2_at_least(p.n_red, kBlock);
    l.block.y = kBlock / l.block.x;
  } else {
    l.block.y = pow2_at_least(p.n_red, 8);
    l.block.x = kBlock / l.block.y;
  }
  const int lanes = l.args.row_mode ? l.block.x : l.block.y;
  const int per_block = l.args.row_mode ? l.block.y : l.block.x;
  l.blocks_x = (p.n_out + per_block - 1) / per_block;
  BRISK_CHECK(l.blocks_x < (int64_t(1) << 31), "reduce: too many outputs (", p.n_out, ")");
  const int64_t target = int64_t(sm_count(device)) * 4;
  const int64_t min_per_split = int64_t(lanes) * 256;  // at least 256 elements per thread
  if (l.blocks_x < target && p.n_red >= 2 * min_per_split) {
    l.splits = int(std::min<int64_t>({(target + l.blocks_x - 1) / l.blocks_x, p.n_red / min_per_split, 65535}));
  }
  l.args.chunk = (std::max<int64_t>(p.n_red, 1) + l.splits - 1) / l.splits;
  return l;
}

// Reduces x (type T) into y (type O, at the plan's output offsets) with `op` on `device`.
template <class T, class O, class Op>
void run_reduce(const ReducePlan& p, const T* x, O* y, int device, Op op) {
  using A = typename Op::Acc;
  if (p.n_out == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  const ReduceLaunch l = reduce_launch(p, device);
  Tensor partial;
  A* pp = nullptr;
  if (l.splits > 1) {
    partial = make_empty({int64_t(l.splits) * p.n_out * int64_t(sizeof(A))}, DType::U8, Device::cuda(device));
    pp = static_cast<A*>(partial.data_ptr());
  }
  const dim3 grid(unsigned(l.blocks_x), unsigned(l.splits));
  reduce_kernel<T, O, Op><<<grid, l.block, 0, stream>>>(l.args, x, y, pp, op);
  BRISK_CUDA_CHECK_LAUNCH();
  if (l.splits > 1) {
    reduce_finish_kernel<O, Op><<<grid_for(p.n_out), kBlock, 0, stream>>>(l.args, l.splits, pp, y, op);
    BRISK_CUDA_CHECK_LAUNCH();
  }
}

// Runs `op` over x's dims in `mask` into out, rounding each finished value to O.
template <class T, class O, class Op>
void reduce_into(const Tensor& x, const Tensor& out, uint32_t mask, Op op) {
  const ReducePlan p = make_plan(x, out, mask);
  run_reduce(p, static_cast<const T*>(x.data_ptr()), static_cast<O*>(out.data_ptr()), out.device().index, op);
}

// ---- kernels: the list of one-pass reductions (kernels/reduce_ops.h, the same as the CPU's),
// then var
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
  (register_kernel(E::id, DeviceType::CUDA, list_kernel<E>), ...);
}

// Two passes, as on the CPU: each output's mean (MeanOp, into a flat buffer), then the squared
// deviations from it.
void var_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), "var"));
  const int device = out[0].device().index;
  dispatch_float(x.dtype(), "var", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    Tensor means = make_empty({std::max<int64_t>(p.n_out, 1) * int64_t(sizeof(A))}, DType::U8, out[0].device());
    A* mp = static_cast<A*>(means.data_ptr());
    run_reduce(kernels::with_flat_output(p), xp, mp, device, kernels::MeanOp<A>{{}, A(p.n_red)});
    const A divisor = A(std::max(0.0, double(p.n_red) - attrs.a));
    run_reduce(p, xp, static_cast<T*>(out[0].data_ptr()), device, kernels::SquaredDeviationOp<A>{mp, A(0), divisor});
  });
}

// ---- the row-wise log-sum-exp: max (ExtremumOp: NaN wins, as on the CPU), then the sum of
// exp(x - max), over a row of n elements read by load(j). Grouped: the block's x threads
// share each row and every thread of the block must call it (rows past the end with valid =
// false); else one thread reads its whole row.
template <bool Grouped, class A, class Load>
__device__ RowLse<A> row_lse(const Load& load, int64_t n, bool valid) {
  const kernels::ExtremumOp<A, true> max_op;
  const int64_t lane = Grouped ? threadIdx.x : 0;
  const int64_t lanes = Grouped ? blockDim.x : 1;
  A m = max_op.identity();
  if (valid) {
    for (int64_t j = lane; j < n; j += lanes) m = max_op.combine(m, load(j));
  }
  if constexpr (Grouped) m = group_reduce(m, [max_op](A a, A b) { return max_op.combine(a, b); });
  A s = 0;
  if (valid) {
    for (int64_t j = lane; j < n; j += lanes) s += std::exp(load(j) - m);
  }
  if constexpr (Grouped) s = group_reduce(s, SumF{});
  return {m, s};
}

struct RowConfig {
  dim3 block;
  unsigned grid;
};

RowConfig row_config(int64_t rows, int64_t cols) {
  RowConfig c;
  c.block.x = std::max(32, pow2_at_least(cols, kBlock));
  c.block.y = kBlock / c.block.x;
  c.grid = grid_for(rows, int(c.block.y));
  return c;
}

// ---- softmax / log_softmax
// The output of one element from its row's statistics.
template <bool Log, class A>
__device__ __forceinline__ A softmax_value(A x, const RowLse<A>& r, A log_s, A inv) {
  if constexpr (Log) {
    return x - r.max - log_s;
  } else {
    return std::exp(x - r.max) * inv;
  }
}

// x: (rows, n) dense -> y: (rows, n) dense; a group of threads per row
template <class T, bool Log>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * n;
    const RowLse<A> r = row_lse<true, A>([xr](int64_t j) { return A(load_value(xr + j)); }, n, valid);
    if (!valid) continue;
    T* yr = y + row * n;
    const A log_s = std::log(r.sum);
    const A inv = A(1) / r.sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = Store<T>::to(softmax_value<Log>(A(load_value(xr + j)), r, log_s, inv));
    }
  }
}

// x: (outer, n, inner) dense, softmax over n -> y: same; one thread per (outer, inner) column
template <class T, bool Log>
__global__ void softmax_cols_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using A = compute_t<T>;
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner;
    const T* xc = x + o * n * inner + (c - o * inner);
    const RowLse<A> r = row_lse<false, A>([xc, inner](int64_t j) { return A(load_value(xc + j * inner)); }, n, true);
    T* yc = y + (xc - x);
    const A log_s = std::log(r.sum);
    const A inv = A(1) / r.sum;
    for (int64_t j = 0; j < n; ++j) {
      yc[j * inner] = Store<T>::to(softmax_value<Log>(A(load_value(xc + j * inner)), r, log_s, inv));
    }
  }
}

template <bool Log>
void softmax_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* name = Log ? "log_softmax" : "softmax";
  if (in[0].numel() == 0) return;
  const Tensor x = dense(in[0]);
  DenseOut y(out[0]);
  int64_t outer = 1, n = 1, inner = 1;
  if (x.dim() > 0) {
    const int d = wrap_dim(attrs.dim, x.dim(), name);
    n = x.sizes()[d];
    for (int k = 0; k < d; ++k) outer *= x.sizes()[k];
    for (int k = d + 1; k < x.dim(); ++k) inner *= x.sizes()[k];
  }
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.dense.data_ptr());
    if (inner == 1) {
      const RowConfig c = row_config(outer, n);
      softmax_rows_kernel<T, Log><<<c.grid, c.block, 0, stream>>>(xp, yp, outer, n);
    } else {
      softmax_cols_kernel<T, Log><<<grid_for(outer * inner), kBlock, 0, stream>>>(xp, yp, outer, n, inner);
    }
    BRISK_CUDA_CHECK_LAUNCH();
  });
  y.finish();
}

// ---- logsumexp over the plan's reduced dims: a group of threads per output when the reduced
// elements are innermost in memory, else one thread per output (neighbouring threads then
// read neighbouring columns).
template <class T, bool Grouped>
__global__ void logsumexp_kernel(Group kept, Group red, int64_t n_out, int64_t n_red, const T* x, T* y) {
  using A = compute_t<T>;
  const int64_t per_block = Grouped ? blockDim.y : blockDim.x;
  for (int64_t base = int64_t(blockIdx.x) * per_block; base < n_out; base += int64_t(gridDim.x) * per_block) {
    const int64_t o = base + (Grouped ? threadIdx.y : threadIdx.x);
    const bool valid = o < n_out;
    int64_t in_off = 0, out_off = 0;
    if (valid) kept_offsets(kept, o, in_off, out_off);
    const T* xo = x + in_off;
    auto load = [xo, red](int64_t j) { return A(load_value(xo + red_offset(red, j))); };
    const RowLse<A> r = row_lse<Grouped, A>(load, n_red, valid);
    if (valid && (!Grouped || threadIdx.x == 0)) y[out_off] = Store<T>::to(r.logsumexp());
  }
}

void logsumexp_cuda_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), "logsumexp"));
  if (p.n_out == 0) return;
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  const bool grouped = p.red.in[p.red.n - 1] == 1;
  dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out[0].data_ptr());
    if (grouped) {
      const RowConfig c = row_config(p.n_out, p.n_red);
      logsumexp_kernel<T, true><<<c.grid, c.block, 0, stream>>>(p.kept, p.red, p.n_out, p.n_red, xp, yp);
    } else {
      logsumexp_kernel<T, false><<<grid_for(p.n_out), kBlock, 0, stream>>>(p.kept, p.red, p.n_out, p.n_red, xp, yp);
    }
    BRISK_CUDA_CHECK_LAUNCH();
  });
}

// ---- cross-entropy, fused with log_softmax. logits (N, C) dense, target I64 (N) dense.
// loss_i = lse_i - (1 - eps) x_i[t_i] - (eps / C) sum_c x_i[c], 0 where t_i == ignore_index.
// A target outside [0, C) is reported through the error slot (Note [Device errors]) and its
// row counts as ignored.
struct CeArgs {
  int64_t n, c;
  const int64_t* target;
  int64_t ignore;
  double eps;
  DeviceErrorSlot* slot;
  int op;
};

__device__ __forceinline__ bool ce_row_used(const CeArgs& a, int64_t row, int64_t& t) {
  t = a.target[row];
  if (t == a.ignore) return false;
  if (t < 0 || t >= a.c) {
    if (threadIdx.x == 0) report_index_error(a.slot, a.op, t, a.c);
    return false;
  }
  return true;
}

// -> loss (N) in the compute type, every row's logsumexp lse_out (N, dense; ignored rows too,
// as the CPU kernel); with reduction None also y (N) with stride ys.
template <class T>
__global__ void ce_forward_kernel(CeArgs a, const T* x, compute_t<T>* loss, compute_t<T>* lse_out, T* y, int64_t ys) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < a.n; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    int64_t t = 0;
    const bool valid = row < a.n && ce_row_used(a, row, t);
    const T* xr = x + (row < a.n ? row : 0) * a.c;
    const A lse = row_lse<true, A>([xr](int64_t j) { return A(load_value(xr + j)); }, a.c, row < a.n).lse();
    if (row < a.n && threadIdx.x == 0) lse_out[row] = lse;
    A sx = 0;
    if (a.eps > 0) {
      if (valid) {
        for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) sx += A(load_value(xr + j));
      }
      sx = group_reduce(sx, SumF{});
    }
    if (row >= a.n || threadIdx.x != 0) continue;
    A l = 0;
    if (valid) {
      l = lse - A(1 - a.eps) * A(load_value(xr + t));
      if (a.eps > 0) l -= A(a.eps / double(a.c)) * sx;
    }
    loss[row] = l;
    if (y) y[row * ys] = Store<T>::to(l);
  }
}

// Sum of the row losses (none when loss is nullptr) and the number of non-ignored rows, in
// double, over one block.
template <class A>
__device__ void ce_totals(const CeArgs& a, const A* loss, double& total, double& count) {
  total = 0;
  count = 0;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    if (loss) total += double(loss[i]);
    count += a.target[i] != a.ignore ? 1 : 0;
  }
  total = group_reduce(total, SumF{});
  count = group_reduce(count, SumF{});
}

// Sum (or mean over the non-ignored rows) of the row losses: one block.
template <class T>
__global__ void ce_reduce_kernel(CeArgs a, const compute_t<T>* loss, bool mean, T* y) {
  double total, count;
  ce_totals(a, loss, total, count);
  if (threadIdx.x == 0) y[0] = Store<T>::to(mean ? total / count : total);  // 0/0 = NaN
}

// Number of non-ignored rows (for the backward of a mean): one block.
__global__ void ce_count_kernel(CeArgs a, double* count) {
  double total, n;
  ce_totals<float>(a, nullptr, total, n);
  if (threadIdx.x == 0) *count = n;
}

// (grad g (N) with stride gs, or 0-dim with gs = 0; logits x (N, C)) -> dx (N, C) dense:
// dx = scale_i (softmax_i - (1 - eps) onehot(t_i) - eps / C), 0 on ignored rows,
// scale_i = g_i / valid rows (mean) or g_i.
// lse: the forward's (N, dense; Note [Cross-entropy saves the logsumexp]), so one pass per row.
template <class T>
__global__ void ce_backward_kernel(CeArgs a, const T* g, int64_t gs, const T* x, const compute_t<T>* lse_in,
                                   const double* count, T* dx) {
  using A = compute_t<T>;
  const A smooth = A(a.eps / double(a.c));
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < a.n; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    int64_t t = 0;
    const bool valid = row < a.n && ce_row_used(a, row, t);
    const T* xr = x + (row < a.n ? row : 0) * a.c;
    if (row >= a.n) continue;
    const A lse = lse_in[row];
    T* dr = dx + row * a.c;
    if (!valid) {
      for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) dr[j] = Store<T>::to(A(0));
      continue;
    }
    const A scale = A(load_value(g + row * gs)) / A(count ? *count : 1.0);
    for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
      A p = std::exp(A(load_value(xr + j)) - lse) - smooth;
      if (j == t) p -= A(1 - a.eps);
      dr[j] = Store<T>::to(scale * p);
    }
  }
}

CeArgs ce_args(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p, OpId op) {
  return CeArgs{logits.sizes()[0],
                logits.sizes()[1],
                target.data<int64_t>(),
                p.ignore_index,
                p.label_smoothing,
                device_error_slot(logits.device().index),
                int(op)};
}

void cross_entropy_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor logits = dense(in[0]);
  const Tensor target = dense(in[1]);
  const Tensor& y = out[0];
  DenseOut lse(out[1]);
  const CrossEntropyParams params = CrossEntropyParams::from(attrs);
  const CeArgs a = ce_args(logits, target, params, OpId::CrossEntropy);
  const int device = logits.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const bool none = params.reduction == Reduction::None;
    const bool mean = params.reduction == Reduction::Mean;
    T* yp = static_cast<T*>(y.data_ptr());
    if (a.n == 0) {
      if (!none) {
        // No rows: an empty sum is 0, an empty mean 0/0 = NaN (the kernel reads no losses).
        ce_reduce_kernel<T><<<1, kBlock, 0, stream>>>(a, nullptr, mean, yp);
        BRISK_CUDA_CHECK_LAUNCH();
      }
      return;
    }
    Tensor loss = make_empty({a.n * int64_t(sizeof(A))}, DType::U8, y.device());
    A* lp = static_cast<A*>(loss.data_ptr());
    const RowConfig c = row_config(a.n, a.c);
    const int64_t ys = none ? y.strides()[0] : 0;
    ce_forward_kernel<T><<<c.grid, c.block, 0, stream>>>(a, static_cast<const T*>(logits.data_ptr()), lp,
                                                         static_cast<A*>(lse.dense.data_ptr()), none ? yp : nullptr,
                                                         ys);
    BRISK_CUDA_CHECK_LAUNCH();
    if (!none) {
      ce_reduce_kernel<T><<<1, kBlock, 0, stream>>>(a, lp, mean, yp);
      BRISK_CUDA_CHECK_LAUNCH();
    }
  });
  lse.finish();
}

void cross_entropy_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& grad = in[0];
  const Tensor logits = dense(in[1]);
  const Tensor target = dense(in[2]);
  const Tensor lse = dense(in[3]);
  DenseOut dx(out[0]);
  const CrossEntropyParams params = CrossEntropyParams::from(attrs);
  const CeArgs a = ce_args(logits, target, params, OpId::CrossEntropyBackward);
  if (a.n == 0 || a.c == 0) return;
  const int device = logits.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  Tensor count;
  if (params.reduction == Reduction::Mean) {
    count = make_empty({1}, DType::F64, logits.device());
    ce_count_kernel<<<1, kBlock, 0, stream>>>(a, count.data<double>());
    BRISK_CUDA_CHECK_LAUNCH();
  }
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t gs = grad.dim() == 1 ? grad.strides()[0] : 0;
    const RowConfig c = row_config(a.n, a.c);
    ce_backward_kernel<T><<<c.grid, c.block, 0, stream>>>(
        a, static_cast<const T*>(grad.data_ptr()), gs, static_cast<const T*>(logits.data_ptr()),
        static_cast<const compute_t<T>*>(lse.data_ptr()), count.defined() ? count.data<double>() : nullptr,
        static_cast<T*>(dx.dense.data_ptr()));
    BRISK_CUDA_CHECK_LAUNCH();
  });
  dx.finish();
}

}  // namespace

void register_reduce() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_reductions(kernels::Reductions{});
  register_kernel(OpId::Var, gpu, var_kernel);
  register_kernel(OpId::Softmax, gpu, softmax_kernel<false>);
  register_kernel(OpId::LogSoftmax, gpu, softmax_kernel<true>);
  register_kernel(OpId::Logsumexp, gpu, logsumexp_cuda_kernel);
  register_kernel(OpId::CrossEntropy, gpu, cross_entropy_kernel);
  register_kernel(OpId::CrossEntropyBackward, gpu, cross_entropy_backward_kernel);
}

}  // namespace brisk::kernels::cuda
