// kernels/cuda/loops.cuh: the CUDA elementwise engine, the counterpart of kernels/cpu/loops.h:
// out[i] = f(in0[i], in1[i], ...) with the SAME functors (kernels/functors.h), NumPy
// broadcasting and any strides (up to kMaxDims dims, coalesced on the host). Two kernels per
// instantiation: a contiguous one (operands dense or scalar, 16-byte vector loads/stores when
// every pointer is aligned) and a strided one (per-element offsets from sizes and strides).
// 16-bit floats are read as float, computed in float and rounded once on store, as on the CPU.
// Also here: device helpers shared by the other kernel files (the error slot); block reductions
// are in kernels/cuda/block_reduce.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cuda/std/tuple>
#include <utility>

#include "engine/tensor.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

// ---- storage type <-> compute type
template <class T>
__device__ __forceinline__ compute_t<T> load_value(const T* p) {
  return static_cast<compute_t<T>>(*p);
}
template <>
__device__ __forceinline__ float load_value<Half>(const Half* p) {
  return __half2float(__ushort_as_half(p->bits));
}
template <>
__device__ __forceinline__ float load_value<BFloat16>(const BFloat16* p) {
  return __uint_as_float(uint32_t(p->bits) << 16);
}

// Rounds/converts a compute value to storage type T (Half: round to nearest even, like
// Half::from_float; BFloat16 uses the very same bit arithmetic as the CPU).
template <class T>
struct Store {
  template <class V>
  __device__ __forceinline__ static T to(V v) {
    return static_cast<T>(v);
  }
};
template <>
struct Store<Half> {
  template <class V>
  __device__ __forceinline__ static Half to(V v) {
    return Half::from_bits(__half_as_ushort(__float2half_rn(static_cast<float>(v))));
  }
};
template <>
struct Store<BFloat16> {
  template <class V>
  __device__ __forceinline__ static BFloat16 to(V v) {
    return BFloat16::from_bits(BFloat16::from_float(static_cast<float>(v)));
  }
};

// ---- launch configuration
inline constexpr int kBlock = 256;

inline unsigned grid_for(int64_t work_items, int block = kBlock) {
  int64_t blocks = (work_items + block - 1) / block;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t(1) << 16)));
}

// ---- offsets of N operands for a linear output index
template <int N>
struct OffsetCalc {
  int ndim = 0;
  bool small = true;  // every size and the element count fit in 32 bits: cheaper division
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  __device__ __forceinline__ void get(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (small) {
      uint32_t rem = uint32_t(i);
      for (int d = ndim - 1; d >= 0; --d) {
        uint32_t s = uint32_t(sizes[d]);
        uint32_t q = rem / s;
        int64_t idx = int64_t(rem - q * s);
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
        rem = q;
      }
    } else {
      int64_t rem = i;
      for (int d = ndim - 1; d >= 0; --d) {
        int64_t q = rem / sizes[d];
        int64_t idx = rem - q * sizes[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
        rem = q;
      }
    }
  }
};

// Offsets over `sizes` for N operands with the given strides (each of sizes' rank). Size-1
// dims are dropped and neighbours that are one run of memory for every operand are merged.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& sizes, const Shape* const* strides) {
  OffsetCalc<N> c;
  int n = 0;
  int64_t numel = 1;
  for (int d = 0; d < sizes.size(); ++d) {
    numel *= sizes[d];
    if (sizes[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < N && merge; ++k) merge = c.strides[k][n - 1] == (*strides[k])[d] * sizes[d];
    if (merge) {
      c.sizes[n - 1] *= sizes[d];
      for (int k = 0; k < N; ++k) c.strides[k][n - 1] = (*strides[k])[d];
      continue;
    }
    c.sizes[n] = sizes[d];
    for (int k = 0; k < N; ++k) c.strides[k][n] = (*strides[k])[d];
    ++n;
  }
  if (n == 0) {  // a single element
    n = 1;
    c.sizes[0] = 1;
    for (int k = 0; k < N; ++k) c.strides[k][0] = 0;
  }
  c.ndim = n;
  c.small = numel < (int64_t(1) << 31);
  return c;
}

// Strides of `t` broadcast to `sizes` (0 along broadcast dims), as the CPU's StridedIter.
inline Shape broadcast_strides(const Tensor& t, const Shape& sizes) {
  Shape st = Shape::filled(sizes.size(), 0);
  const int shift = sizes.size() - t.dim();
  for (int d = 0; d < sizes.size(); ++d) {
    const int td = d - shift;
    st[d] = (td < 0 || t.sizes()[td] == 1) ? 0 : t.strides()[td];
  }
  return st;
}

// operands[0] is the output; the others broadcast to its sizes.
template <int N>
OffsetCalc<N> make_offset_calc(const Tensor* const* operands) {
  const Shape& sizes = operands[0]->sizes();
  Shape st[N];
  const Shape* ptrs[N];
  for (int k = 0; k < N; ++k) {
    st[k] = broadcast_strides(*operands[k], sizes);
    ptrs[k] = &st[k];
  }
  return make_offset_calc<N>(sizes, ptrs);
}

// ---- the two kernels
template <class... In>
struct InPtrs {
  const void* p[sizeof...(In) > 0 ? sizeof...(In) : 1];
};

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Elements per thread in the contiguous kernel: 16 bytes of the widest operand (at most 8).
template <class Out, class... In>
constexpr int vec_size() {
  constexpr size_t widest = std::max({sizeof(Out), sizeof(In)...});
  return int(16 / widest) < 1 ? 1 : (int(16 / widest) > 8 ? 8 : int(16 / widest));
}

template <class T, int V>
__device__ __forceinline__ void load_vec(Vec<T, V>& r, const T* p, int64_t base, bool scalar) {
  if (scalar) {
    const T s = *p;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = s;
  } else {
    r = *reinterpret_cast<const Vec<T, V>*>(p + base);
  }
}

// One output element from per-operand offsets (off[0]: output).
template <class Out, class F, class... In, size_t... I>
__device__ __forceinline__ void apply_at(Out* out, const int64_t* off, const InPtrs<In...>& ins, F& f,
                                         std::index_sequence<I...>) {
  out[off[0]] = Store<Out>::to(f(load_value(static_cast<const In*>(ins.p[I]) + off[1 + I])...));
}

// VEC output elements starting at `base`; inputs are dense or scalars (bit k of scalar_mask).
template <int VEC, class Out, class F, class... In, size_t... I>
__device__ __forceinline__ void apply_vec(Out* out, int64_t base, const InPtrs<In...>& ins, uint32_t scalar_mask, F& f,
                                          std::index_sequence<I...>) {
  ::cuda::std::tuple<Vec<In, VEC>...> regs;
  (load_vec(::cuda::std::get<I>(regs), static_cast<const In*>(ins.p[I]), base, (scalar_mask >> I & 1u) != 0), ...);
  Vec<Out, VEC> res;
#pragma unroll
  for (int j = 0; j < VEC; ++j) res.v[j] = Store<Out>::to(f(load_value(&::cuda::std::get<I>(regs).v[j])...));
  *reinterpret_cast<Vec<Out, VEC>*>(out + base) = res;
}

template <class Out, class F, class... In, size_t... I>
__device__ __forceinline__ void apply_dense(Out* out, int64_t i, const InPtrs<In...>& ins, uint32_t scalar_mask, F& f,
                                            std::index_sequence<I...>) {
  out[i] = Store<Out>::to(f(load_value(static_cast<const In*>(ins.p[I]) + ((scalar_mask >> I & 1u) ? 0 : i))...));
}

// x: any layout; offsets from `calc`.
template <class Out, class F, class... In>
__global__ void strided_kernel(int64_t n, OffsetCalc<1 + sizeof...(In)> calc, Out* out, InPtrs<In...> ins, F f) {
  constexpr int N = 1 + sizeof...(In);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[N];
    calc.get(i, off);
    apply_at(out, off, ins, f, std::index_sequence_for<In...>{});
  }
}

// All operands dense with the output's numel, or scalars (bit k of scalar_mask: input k is one
// element). With `aligned`, each thread moves VEC elements per operand with one vector access.
template <int VEC, class Out, class F, class... In>
__global__ void contiguous_kernel(int64_t n, Out* out, InPtrs<In...> ins, uint32_t scalar_mask, bool aligned, F f) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x * VEC;
  for (int64_t base = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * VEC; base < n; base += step) {
    if (aligned && base + VEC <= n) {
      apply_vec<VEC>(out, base, ins, scalar_mask, f, std::index_sequence_for<In...>{});
    } else {
      for (int j = 0; j < VEC && base + j < n; ++j) {
        apply_dense(out, base + j, ins, scalar_mask, f, std::index_sequence_for<In...>{});
      }
    }
  }
}

// out = f(ins...) elementwise on out's device and current stream. `out` has the broadcast
// shape; Out and In... are the element types; f takes and returns compute types.
template <class Out, class... In, class F>
void launch_elementwise(const Tensor& out, std::array<const Tensor*, sizeof...(In)> ins, F f) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  std::array<const Tensor*, N> ops;
  ops[0] = &out;
  for (int k = 0; k + 1 < N; ++k) ops[k + 1] = ins[k];
  OffsetCalc<N> calc = make_offset_calc<N>(ops.data());
  InPtrs<In...> ptrs{};
  for (int k = 0; k + 1 < N; ++k) ptrs.p[k] = ins[k]->data_ptr();
  Out* o = static_cast<Out*>(out.data_ptr());

  bool dense = calc.ndim == 1 && calc.strides[0][0] == 1;
  uint32_t scalar_mask = 0;
  for (int k = 1; k < N && dense; ++k) {
    if (calc.strides[k][0] == 0) {
      scalar_mask |= 1u << (k - 1);
    } else {
      dense = calc.strides[k][0] == 1;
    }
  }
  if (dense) {
    constexpr int V = vec_size<Out, In...>();
    constexpr size_t sizes[N] = {sizeof(Out), sizeof(In)...};
    bool aligned = reinterpret_cast<uintptr_t>(o) % (sizeof(Out) * V) == 0;
    for (int k = 1; k < N; ++k) {
      if (!(scalar_mask >> (k - 1) & 1u)) {
        aligned = aligned && reinterpret_cast<uintptr_t>(ptrs.p[k - 1]) % (sizes[k] * V) == 0;
      }
    }
    contiguous_kernel<V, Out, F, In...>
        <<<grid_for((n + V - 1) / V), kBlock, 0, stream>>>(n, o, ptrs, scalar_mask, aligned, f);
  } else {
    strided_kernel<Out, F, In...><<<grid_for(n), kBlock, 0, stream>>>(n, calc, o, ptrs, f);
  }
  BRISK_CUDA_CHECK_LAUNCH();
}

// ---- integer ops: one kernel per functor for every integer dtype (and Bool)
// Note [Integer elementwise on CUDA]
// Integer tensors are rare on the GPU (indices, masks), so instead of one kernel per integer
// dtype, values are loaded as int64 with the dtype read at run time, computed in int64 and
// truncated on store. This gives the CPU's results (C++ computes narrow integers in int and
// truncates on store, so sums, products and negations agree modulo 2^bits), at a fraction of
// the compile time. Float dtypes keep their typed, vectorized kernels.
__device__ __forceinline__ int64_t load_int(const void* base, int64_t off, DType t) {
  switch (t) {
    case DType::I8: return static_cast<const int8_t*>(base)[off];
    case DType::U8: return static_cast<const uint8_t*>(base)[off];
    case DType::I32: return static_cast<const int32_t*>(base)[off];
    case DType::I64: return static_cast<const int64_t*>(base)[off];
    case DType::Bool: return static_cast<const bool*>(base)[off] ? 1 : 0;
    default: return 0;  // floats never reach here (the host checks)
  }
}

template <class V>
__device__ __forceinline__ void store_int(void* base, int64_t off, DType t, V v) {
  switch (t) {
    case DType::I8: static_cast<int8_t*>(base)[off] = static_cast<int8_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(base)[off] = static_cast<uint8_t>(v); break;
    case DType::I32: static_cast<int32_t*>(base)[off] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(base)[off] = static_cast<int64_t>(v); break;
    case DType::Bool: static_cast<bool*>(base)[off] = v != 0; break;
    default: break;
  }
}

template <int NIN>
struct IntOperands {
  const void* p[NIN];
  DType t[NIN];
};

template <class F, int NIN, size_t... I>
__device__ __forceinline__ auto apply_int(const IntOperands<NIN>& ins, const int64_t* off, F& f,
                                          std::index_sequence<I...>) {
  return f(load_int(ins.p[I], off[1 + I], ins.t[I])...);
}

template <class F, int NIN>
__global__ void int_kernel(int64_t n, OffsetCalc<1 + NIN> calc, void* out, DType out_type, IntOperands<NIN> ins, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1 + NIN];
    calc.get(i, off);
    store_int(out, off[0], out_type, apply_int(ins, off, f, std::make_index_sequence<NIN>{}));
  }
}

inline bool is_integral(DType t) { return !is_floating(t); }

// out = f(ins...) for integer/Bool operands (see Note [Integer elementwise on CUDA]).
template <int NIN, class F>
void launch_elementwise_int(const Tensor& out, std::array<const Tensor*, NIN> ins, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  std::array<const Tensor*, 1 + NIN> ops;
  ops[0] = &out;
  IntOperands<NIN> operands{};
  for (int k = 0; k < NIN; ++k) {
    ops[k + 1] = ins[k];
    operands.p[k] = ins[k]->data_ptr();
    operands.t[k] = ins[k]->dtype();
  }
  OffsetCalc<1 + NIN> calc = make_offset_calc<1 + NIN>(ops.data());
  int_kernel<F, NIN>
      <<<grid_for(n), kBlock, 0, stream_handle(device)>>>(n, calc, out.data_ptr(), out.dtype(), operands, f);
  BRISK_CUDA_CHECK_LAUNCH();
}

// ---- device helpers for the other kernel files

// Records an out-of-range index (see Note [Device errors]); the first error wins.
// The slot lives in mapped host memory: a plain read first keeps a kernel with many bad
// indices from sending one atomic per element over the bus once an error is recorded.
__device__ __forceinline__ void report_index_error(DeviceErrorSlot* slot, int op, int64_t index, int64_t bound) {
  if (*reinterpret_cast<volatile int*>(&slot->flag) != 0) return;
  if (atomicCAS(&slot->flag, 0, 1) == 0) {
    slot->op = op;
    slot->index = index;
    slot->bound = bound;
  }
}

// Dtype dispatch by element size, for kernels that only move bytes (copies, gathers).
template <class F>
decltype(auto) dispatch_by_size(size_t size, const char* op, F&& f) {
  switch (size) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
  }
  BRISK_FAIL(op, ": unsupported element size ", size);
}

}  // namespace brisk::kernels::cuda
