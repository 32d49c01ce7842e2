// kernels/cuda/reduce.cu: CUDA kernels of the reductions (sum, amax/amin, var, argmax/argmin),
// softmax/log_softmax and the fused cross-entropy forward and backward. The CPU reference is
// kernels/cpu/reduce.cpp: same plan (kept and reduced dims, each coalesced), same arithmetic
// (F16/BF16 in float, F64 in double, integers in int64, NaN wins in max/min, first index wins
// in argmax), so results agree up to summation order.
// Not here: inference, dims checking and backward formulas (engine/ops/reduce.cpp).
#include <algorithm>
#include <limits>

#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/reduce_plan.h"

namespace brisk::kernels::cuda {

namespace {

using kernels::Group;
using kernels::make_plan;
using kernels::reduce_mask;
using kernels::ReducePlan;

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
  int64_t off = 0;
  for (int d = g.n - 1; d >= 0; --d) {
    const int64_t q = r / g.size[d];
    off += (r - q * g.size[d]) * g.in[d];
    r = q;
  }
  return off;
}

// ---- reduction arithmetic: identity, step(acc, value, flat reduced index), combine, finish
template <class A>
struct SumOp {
  using Acc = A;
  __device__ A identity() const { return A(0); }
  __device__ A step(A acc, A v, int64_t) const { return acc + v; }
  __device__ A combine(A a, A b) const { return a + b; }
  template <class O>
  __device__ O finish(A a) const {
    return Store<O>::to(a);
  }
};

// max / min; NaN wins, as in PyTorch.
template <class A, bool IsMax>
struct ExtremumOp {
  using Acc = A;
  __device__ A identity() const {
    if constexpr (std::is_floating_point_v<A>) {
      return IsMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return IsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
    }
  }
  __device__ A step(A acc, A v, int64_t) const { return combine(acc, v); }
  __device__ A combine(A a, A b) const {
    if constexpr (IsMax) {
      return (b > a || b != b) ? b : a;
    } else {
      return (b < a || b != b) ? b : a;
    }
  }
  template <class O>
  __device__ O finish(A a) const {
    return Store<O>::to(a);
  }
};

// Welford's running mean and sum of squared deviations, in double, merged with Chan's formula.
struct WelfordAcc {
  double mean;
  double m2;
  double n;
};

struct VarOp {
  using Acc = WelfordAcc;
  double correction;
  __device__ Acc identity() const { return {0, 0, 0}; }
  __device__ Acc step(Acc a, double v, int64_t) const {
    const double n = a.n + 1;
    const double d = v - a.mean;
    const double mean = a.mean + d / n;
    return {mean, a.m2 + d * (v - mean), n};
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n;
    const double d = b.mean - a.mean;
    return {a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n), n};
  }
  template <class O>
  __device__ O finish(Acc a) const {
    const double divisor = fmax(0.0, a.n - correction);  // 0 gives NaN/Inf, as in PyTorch
    return Store<O>::to(a.m2 / divisor);
  }
};

// The first extreme element (smallest flat reduced index among ties); NaN counts as the
// extreme, as in PyTorch. index < 0: no element yet.
template <class A>
struct ArgAcc {
  A v;
  int64_t i;
};

template <class A, bool IsMax>
struct ArgOp {
  using Acc = ArgAcc<A>;
  __device__ Acc identity() const { return {A(0), -1}; }
  __device__ Acc step(Acc acc, A v, int64_t r) const { return combine(acc, Acc{v, r}); }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) {
      if (an && bn) return b.i < a.i ? b : a;
      return an ? a : b;
    }
    if (IsMax ? b.v > a.v : b.v < a.v) return b;
    if (b.v == a.v && b.i < a.i) return b;
    return a;
  }
  template <class O>
  __device__ O finish(Acc a) const {
    return O(a.i < 0 ? 0 : a.i);
  }
};

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
    if (a.red.n == 1) {
      const int64_t s = a.red.in[0];
      for (int64_t r = r0 + lane; r < r1; r += lanes) acc = op.step(acc, load_value(xo + r * s), r);
    } else {
      for (int64_t r = r0 + lane; r < r1; r += lanes) acc = op.step(acc, load_value(xo + red_offset(a.red, r)), r);
    }
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int lane_stride = a.row_mode ? 1 : blockDim.x;
  smem[tid] = acc;
  __syncthreads();
  for (int w = lanes / 2; w > 0; w /= 2) {  // lanes is a power of two
    if (lane < w) smem[tid] = op.combine(smem[tid], smem[tid + w * lane_stride]);
    __syncthreads();
  }
  if (lane == 0 && o < a.n_out) {
    if (gridDim.y == 1) {
      y[out_off] = op.template finish<O>(smem[tid]);
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
    y[out_off] = op.template finish<O>(acc);
  }
}

int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

// Reduces x (type T) into y (type O) with `op` over the plan.
template <class T, class O, class Op>
void run_reduce(const ReducePlan& p, const Tensor& x, const Tensor& y, Op op) {
  using A = typename Op::Acc;
  if (p.n_out == 0) return;
  const int device = y.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  ReduceArgs a{p.kept, p.red, p.n_out, p.n_red, std::max<int64_t>(p.n_red, 1), true};
  // Column mode when the kept dims are innermost in memory and the reduced ones are not.
  a.row_mode = !(p.kept.in[p.kept.n - 1] == 1 && p.red.in[p.red.n - 1] != 1);
  dim3 block;
  if (a.row_mode) {
    block.x = pow2_at_least(p.n_red, kBlock);
    block.y = kBlock / block.x;
  } else {
    block.y = pow2_at_least(p.n_red, 8);
    block.x = kBlock / block.y;
  }
  const int lanes = a.row_mode ? block.x : block.y;
  const int per_block = a.row_mode ? block.y : block.x;
  const int64_t blocks_x = (p.n_out + per_block - 1) / per_block;
  BRISK_CHECK(blocks_x < (int64_t(1) << 31), "reduce: too many outputs (", p.n_out, ")");
  int splits = 1;
  const int64_t target = int64_t(sm_count(device)) * 4;
  const int64_t min_per_split = int64_t(lanes) * 256;  // at least 256 elements per thread
  if (blocks_x < target && p.n_red >= 2 * min_per_split) {
    splits = int(std::min<int64_t>({(target + blocks_x - 1) / blocks_x, p.n_red / min_per_split, 65535}));
  }
  a.chunk = (std::max<int64_t>(p.n_red, 1) + splits - 1) / splits;
  const T* xp = static_cast<const T*>(x.data_ptr());
  O* yp = static_cast<O*>(y.data_ptr());
  Tensor partial;
  A* pp = nullptr;
  if (splits > 1) {
    partial = make_empty({int64_t(splits) * p.n_out * int64_t(sizeof(A))}, DType::U8, y.device());
    pp = static_cast<A*>(partial.data_ptr());
  }
  reduce_kernel<T, O, Op><<<dim3(unsigned(blocks_x), unsigned(splits)), block, 0, stream>>>(a, xp, yp, pp, op);
  BRISK_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    reduce_finish_kernel<O, Op><<<grid_for(p.n_out), kBlock, 0, stream>>>(a, splits, pp, yp, op);
    BRISK_CUDA_CHECK_LAUNCH();
  }
}

// ---- kernels: sum, amax/amin, var, argmax/argmin
template <class F>
void dispatch_integral(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::I8: return f(int8_t{});
    case DType::U8: return f(uint8_t{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::Bool: return f(bool{});
    default: BRISK_FAIL(op, ": unexpected dtype ", t);
  }
}

void sum_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), "sum"));
  if (is_floating(x.dtype())) {
    dispatch_float(x.dtype(), "sum", [&](auto tag) {
      using T = decltype(tag);
      run_reduce<T, T>(p, x, out[0], SumOp<compute_t<T>>{});
    });
  } else {
    dispatch_integral(x.dtype(), "sum", [&](auto tag) {  // integers and Bool sum to I64
      using T = decltype(tag);
      run_reduce<T, int64_t>(p, x, out[0], SumOp<int64_t>{});
    });
  }
}

template <bool IsMax>
void extremum_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* name = IsMax ? "amax" : "amin";
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), name));
  dispatch_all(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    run_reduce<T, T>(p, x, out[0], ExtremumOp<compute_t<T>, IsMax>{});
  });
}

void var_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const ReducePlan p = make_plan(x, out[0], reduce_mask(attrs.dims, x.dim(), "var"));
  dispatch_float(x.dtype(), "var", [&](auto tag) {
    using T = decltype(tag);
    run_reduce<T, T>(p, x, out[0], VarOp{attrs.a});
  });
}

template <bool IsMax>
void arg_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* name = IsMax ? "argmax" : "argmin";
  const Tensor& x = in[0];
  const uint32_t all = x.dim() == 0 ? 0u : (1u << x.dim()) - 1u;
  const uint32_t mask = attrs.flag ? all : (1u << wrap_dim(attrs.dim, x.dim(), name)) & all;
  const ReducePlan p = make_plan(x, out[0], mask);
  dispatch_numeric(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {  // dispatch_numeric rejects Bool at run time
      run_reduce<T, int64_t>(p, x, out[0], ArgOp<compute_t<T>, IsMax>{});
    }
  });
}

// ---- row kernels: softmax, log_softmax, cross-entropy
// A block of (bx, by) threads handles `by` rows at a time, bx threads per row (bx a power of
// two in [32, 256]). group_reduce combines the bx values of each row: shuffles within a warp,
// then shared memory across the row's warps. Every thread of the block calls it (rows past
// the end take part with neutral values), so __syncthreads is safe.
template <class A, class F>
__device__ A group_reduce(A v, F f) {
  __shared__ A smem[kBlock / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = f(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (blockDim.x == 32) return v;
  const int warps = blockDim.x / 32;
  A* s = smem + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  A r = s[0];
  for (int w = 1; w < warps; ++w) r = f(r, s[w]);
  return r;
}

struct MaxF {
  template <class A>
  __device__ A operator()(A a, A b) const {
    // std::max: a NaN operand may be skipped here (the CPU's row max lets NaN win), but a NaN
    // in a row makes its sum of exponentials NaN, so softmax and cross-entropy are NaN on both.
    return a < b ? b : a;
  }
};
struct SumF {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

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

// x: (rows, n) dense -> y: (rows, n) dense
template <class T, bool Log>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * n;
    A m = -std::numeric_limits<A>::infinity();
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = MaxF{}(m, A(load_value(xr + j)));
    }
    m = group_reduce(m, MaxF{});
    A s = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += std::exp(A(load_value(xr + j)) - m);
    }
    s = group_reduce(s, SumF{});
    if (!valid) continue;
    T* yr = y + row * n;
    if constexpr (Log) {
      const A log_s = std::log(s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = Store<T>::to(A(load_value(xr + j)) - m - log_s);
    } else {
      const A inv = A(1) / s;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = Store<T>::to(std::exp(A(load_value(xr + j)) - m) * inv);
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
    const int64_t base = o * n * inner + (c - o * inner);
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < n; ++j) m = MaxF{}(m, A(load_value(x + base + j * inner)));
    A s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(A(load_value(x + base + j * inner)) - m);
    if constexpr (Log) {
      const A log_s = std::log(s);
      for (int64_t j = 0; j < n; ++j) y[base + j * inner] = Store<T>::to(A(load_value(x + base + j * inner)) - m - log_s);
    } else {
      const A inv = A(1) / s;
      for (int64_t j = 0; j < n; ++j) {
        y[base + j * inner] = Store<T>::to(std::exp(A(load_value(x + base + j * inner)) - m) * inv);
      }
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

// Row max and log-sum-exp, reduced over the row's threads (all threads must call).
template <class T, class A = compute_t<T>>
__device__ void row_lse(const T* xr, int64_t c, bool valid, A& m, A& lse) {
  m = -std::numeric_limits<A>::infinity();
  if (valid) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = MaxF{}(m, A(load_value(xr + j)));
  }
  m = group_reduce(m, MaxF{});
  A s = 0;
  if (valid) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += std::exp(A(load_value(xr + j)) - m);
  }
  s = group_reduce(s, SumF{});
  lse = m + std::log(s);
}

// -> loss (N) in the compute type; with reduction None also y (N) with stride ys.
template <class T>
__global__ void ce_forward_kernel(CeArgs a, const T* x, compute_t<T>* loss, T* y, int64_t ys) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < a.n; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    int64_t t = 0;
    const bool valid = row < a.n && ce_row_used(a, row, t);
    const T* xr = x + (row < a.n ? row : 0) * a.c;
    A m, lse;
    row_lse(xr, a.c, valid, m, lse);
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

// Sum (or mean over the non-ignored rows) of the row losses, in double: one block.
template <class T>
__global__ void ce_reduce_kernel(CeArgs a, const compute_t<T>* loss, bool mean, T* y) {
  __shared__ double s_total[kBlock];
  __shared__ double s_count[kBlock];
  double total = 0, count = 0;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    total += double(loss[i]);
    count += a.target[i] != a.ignore ? 1 : 0;
  }
  s_total[threadIdx.x] = total;
  s_count[threadIdx.x] = count;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      s_total[threadIdx.x] += s_total[threadIdx.x + w];
      s_count[threadIdx.x] += s_count[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = Store<T>::to(mean ? s_total[0] / s_count[0] : s_total[0]);  // 0/0 = NaN
}

// Number of non-ignored rows (for the backward of a mean), one block.
__global__ void ce_count_kernel(CeArgs a, double* count) {
  __shared__ double s[kBlock];
  double c = 0;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) c += a.target[i] != a.ignore ? 1 : 0;
  s[threadIdx.x] = c;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = s[0];
}

// (grad g (N) with stride gs, or 0-dim with gs = 0; logits x (N, C)) -> dx (N, C) dense:
// dx = scale_i (softmax_i - (1 - eps) onehot(t_i) - eps / C), 0 on ignored rows,
// scale_i = g_i / valid rows (mean) or g_i.
template <class T>
__global__ void ce_backward_kernel(CeArgs a, const T* g, int64_t gs, const T* x, const double* count, T* dx) {
  using A = compute_t<T>;
  const A smooth = A(a.eps / double(a.c));
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < a.n; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    int64_t t = 0;
    const bool valid = row < a.n && ce_row_used(a, row, t);
    const T* xr = x + (row < a.n ? row : 0) * a.c;
    A m, lse;
    row_lse(xr, a.c, valid, m, lse);
    if (row >= a.n) continue;
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

CeArgs ce_args(const Tensor& logits, const Tensor& target, const Attrs& attrs, OpId op) {
  return CeArgs{logits.sizes()[0], logits.sizes()[1], target.data<int64_t>(), attrs.start, attrs.a,
                device_error_slot(logits.device().index), int(op)};
}

void cross_entropy_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor logits = dense(in[0]);
  const Tensor target = dense(in[1]);
  const Tensor& y = out[0];
  const CeArgs a = ce_args(logits, target, attrs, OpId::CrossEntropy);
  const int device = logits.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const bool none = attrs.reduction == Reduction::None;
    if (a.n == 0) {
      if (!none) {
        // No rows: an empty sum is 0, an empty mean 0/0 = NaN (the kernel reads no losses).
        ce_reduce_kernel<T><<<1, kBlock, 0, stream>>>(a, nullptr, attrs.reduction == Reduction::Mean,
                                                      static_cast<T*>(y.data_ptr()));
        BRISK_CUDA_CHECK_LAUNCH();
      }
      return;
    }
    Tensor loss = make_empty({a.n * int64_t(sizeof(A))}, DType::U8, y.device());
    A* lp = static_cast<A*>(loss.data_ptr());
    const RowConfig c = row_config(a.n, a.c);
    T* y_none = none ? static_cast<T*>(y.data_ptr()) : nullptr;
    const int64_t ys = none ? y.strides()[0] : 0;
    ce_forward_kernel<T><<<c.grid, c.block, 0, stream>>>(a, static_cast<const T*>(logits.data_ptr()), lp, y_none, ys);
    BRISK_CUDA_CHECK_LAUNCH();
    if (!none) {
      ce_reduce_kernel<T><<<1, kBlock, 0, stream>>>(a, lp, attrs.reduction == Reduction::Mean,
                                                    static_cast<T*>(y.data_ptr()));
      BRISK_CUDA_CHECK_LAUNCH();
    }
  });
}

void cross_entropy_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& grad = in[0];
  const Tensor logits = dense(in[1]);
  const Tensor target = dense(in[2]);
  DenseOut dx(out[0]);
  const CeArgs a = ce_args(logits, target, attrs, OpId::CrossEntropyBackward);
  if (a.n == 0 || a.c == 0) return;
  const int device = logits.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  Tensor count;
  if (attrs.reduction == Reduction::Mean) {
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
        count.defined() ? count.data<double>() : nullptr, static_cast<T*>(dx.dense.data_ptr()));
    BRISK_CUDA_CHECK_LAUNCH();
  });
  dx.finish();
}

}  // namespace

void register_reduce() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Sum, gpu, sum_kernel);
  register_kernel(OpId::Amax, gpu, extremum_kernel<true>);
  register_kernel(OpId::Amin, gpu, extremum_kernel<false>);
  register_kernel(OpId::Var, gpu, var_kernel);
  register_kernel(OpId::Argmax, gpu, arg_kernel<true>);
  register_kernel(OpId::Argmin, gpu, arg_kernel<false>);
  register_kernel(OpId::Softmax, gpu, softmax_kernel<false>);
  register_kernel(OpId::LogSoftmax, gpu, softmax_kernel<true>);
  register_kernel(OpId::CrossEntropy, gpu, cross_entropy_kernel);
  register_kernel(OpId::CrossEntropyBackward, gpu, cross_entropy_backward_kernel);
}

}  // namespace brisk::kernels::cuda
