// kernels/cuda/index.cu: CUDA kernels of cat, slice_backward, index_select, index_add, gather
// and scatter_add. As on the CPU (kernels/cpu/index.cpp) two loops do the indexing: a gather
// (out[o, j, i] = x[o, index[o, j, i], i]) and a scatter-add (out[o, index[o, j, i], i] +=
// src[o, j, i]); index_select and index_add are those loops with the 1-D index broadcast
// along the other dims. Scatter-adds use atomicAdd, so repeated indices add up in no fixed
// order (F32 results may differ from the CPU's in the last bits). An index out of range is
// skipped and reported at the next synchronization (Note [Device errors] in runtime.h).
#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"

namespace brisk::kernels::cuda {

namespace {

// ---- atomic adds for every numeric dtype
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  // Two's complement: an unsigned 64-bit add is the signed one, wrapping like the CPU's.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Narrow types: compare-and-swap on the aligned 32-bit word that holds the value. `add`
// maps the old bits of the value to the new ones.
template <class Bits, class F>
__device__ __forceinline__ void atomic_update_narrow(Bits* p, F add) {
  static_assert(sizeof(Bits) < 4);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
  const unsigned shift = unsigned(addr & 3) * 8;
  const unsigned mask = ((1u << (8 * sizeof(Bits))) - 1u) << shift;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const Bits cur = Bits((assumed & mask) >> shift);
    const unsigned next = (unsigned(add(cur)) << shift) & mask;
    old = atomicCAS(word, assumed, (assumed & ~mask) | next);
  } while (assumed != old);
}

__device__ __forceinline__ void atomic_add(int8_t* p, int8_t v) {
  atomic_update_narrow(reinterpret_cast<uint8_t*>(p), [v](uint8_t b) { return uint8_t(int8_t(b) + v); });
}
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {
  atomic_update_narrow(p, [v](uint8_t b) { return uint8_t(b + v); });
}
__device__ __forceinline__ void atomic_add(Half* p, Half v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
  atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
#else
  atomic_update_narrow(&p->bits, [v](uint16_t b) { return Half(float(Half::from_bits(b)) + float(v)).bits; });
#endif
}
__device__ __forceinline__ void atomic_add(BFloat16* p, BFloat16 v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
#else
  atomic_update_narrow(&p->bits, [v](uint16_t b) { return BFloat16(float(BFloat16::from_bits(b)) + float(v)).bits; });
#endif
}

// ---- the two loops
// out: sizes S; x read over S with its dim-`dim` stride replaced by the index; index read over S.
// Offsets: [out, x without dim, index].
template <class U, class I>
__global__ void gather_kernel(int64_t n, OffsetCalc<3> calc, U* out, const U* x, const I* index, int64_t along,
                              int64_t size, DeviceErrorSlot* slot, int op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    calc.get(i, off);
    const int64_t k = int64_t(index[off[2]]);
    if (k < 0 || k >= size) {
      report_index_error(slot, op, k, size);
      out[off[0]] = U(0);
      continue;
    }
    out[off[0]] = x[off[1] + k * along];
  }
}

// src: sizes S; out written at S's positions with dim `dim` replaced by the index.
// Offsets: [src, out without dim, index].
template <class T, class I>
__global__ void scatter_add_kernel(int64_t n, OffsetCalc<3> calc, T* out, const T* src, const I* index, int64_t along,
                                   int64_t size, DeviceErrorSlot* slot, int op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    calc.get(i, off);
    const int64_t k = int64_t(index[off[2]]);
    if (k < 0 || k >= size) {
      report_index_error(slot, op, k, size);
      continue;
    }
    atomic_add(out + off[1] + k * along, src[off[0]]);
  }
}

template <class F>
void dispatch_index(DType t, const char* op, F&& f) {
  if (t == DType::I64) return f(int64_t{});
  if (t == DType::I32) return f(int32_t{});
  BRISK_FAIL(op, ": index must be I64 or I32, got ", t);
}

Shape without_dim(const Shape& strides, int dim) {
  Shape s = strides;
  s[dim] = 0;
  return s;
}

// out[p] = x[p with p[dim] = index[p]] for every position p of out (index read over out's sizes).
void gather_into(const Tensor& out, const Tensor& x, const Tensor& index, int dim, OpId op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  const Shape xs = without_dim(x.strides(), dim);
  const Shape* strides[3] = {&out.strides(), &xs, &index.strides()};
  const OffsetCalc<3> calc = make_offset_calc<3>(out.sizes(), strides);
  dispatch_index(index.dtype(), op_name(op), [&](auto itag) {
    using I = decltype(itag);
    dispatch_by_size(out.element_size(), op_name(op), [&](auto tag) {
      using U = decltype(tag);
      gather_kernel<U, I><<<grid_for(n), kBlock, 0, stream_handle(device)>>>(
          n, calc, static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()),
          static_cast<const I*>(index.data_ptr()), x.strides()[dim], x.sizes()[dim], device_error_slot(device),
          int(op));
      BRISK_CUDA_CHECK_LAUNCH();
    });
  });
}

// out[p with p[dim] = index[p]] += src[p] for every position p of src (index read over src's sizes).
void scatter_add_into(const Tensor& out, const Tensor& src, const Tensor& index, int dim, OpId op) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  const Shape os = without_dim(out.strides(), dim);
  const Shape* strides[3] = {&src.strides(), &os, &index.strides()};
  const OffsetCalc<3> calc = make_offset_calc<3>(src.sizes(), strides);
  dispatch_index(index.dtype(), op_name(op), [&](auto itag) {
    using I = decltype(itag);
    dispatch_numeric(out.dtype(), op_name(op), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>) {  // dispatch_numeric rejects Bool at run time
        scatter_add_kernel<T, I><<<grid_for(n), kBlock, 0, stream_handle(device)>>>(
            n, calc, static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()),
            static_cast<const I*>(index.data_ptr()), out.strides()[dim], out.sizes()[dim], device_error_slot(device),
            int(op));
        BRISK_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

// The index ops read a 0-dim tensor as (1).
Tensor as_1d(const Tensor& t) {
  if (t.dim() > 0) return t;
  return make_view(t.storage(), {1}, {1}, t.offset(), t.dtype());
}

// `index` (0-D or 1-D) broadcast over `sizes`: it varies along `dim` only.
Tensor index_along(const Tensor& index, const Shape& sizes, int dim) {
  Shape strides = Shape::filled(sizes.size(), 0);
  strides[dim] = index.dim() == 1 ? index.strides()[0] : 0;
  return make_view(index.storage(), sizes, strides, index.offset(), index.dtype());
}

// ---- kernels
// out: (..., sum of n_t, ...); each input is copied into its window of out along dim.
void cat_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  const int d = int(attrs.dim);
  int64_t start = 0;
  for (const Tensor& t : in) {
    if (t.numel() == 0) continue;  // also the skipped legacy (0) tensors
    Tensor window = make_view(y.storage(), t.sizes(), y.strides(), y.offset() + start * y.strides()[d], y.dtype());
    copy_into(window, t);
    start += t.sizes()[d];
  }
}

// grad: the slice's sizes -> out: zeros of the input's sizes with grad in the sliced window
void slice_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& y = out[0];
  zero_(y);
  if (in[0].numel() == 0) return;
  Shape sizes = y.sizes(), strides = y.strides();
  const int d = int(a.dim);
  sizes[d] = in[0].sizes()[d];
  strides[d] *= a.step;
  Tensor window = make_view(y.storage(), sizes, strides, y.offset() + a.start * y.strides()[d], y.dtype());
  copy_into(window, in[0]);
}

// x: (..., N, ...), index: (K) -> out: (..., K, ...)
void index_select_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor y = as_1d(out[0]);
  const int d = int(attrs.dim);
  gather_into(y, x, index_along(in[1], y.sizes(), d), d, OpId::IndexSelect);
}

// x: (..., N, ...), index: (K), src: (..., K, ...) -> out: x with src's rows added at index
void index_add_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor src = as_1d(in[2]);
  const Tensor y = as_1d(out[0]);
  const int d = int(attrs.dim);
  BRISK_CHECK(y.dtype() != DType::Bool, "index_add: no kernel for dtype Bool");
  if (y.data_ptr() != x.data_ptr() || y.strides() != x.strides()) copy_into(y, x);  // else in place
  scatter_add_into(y, src, index_along(in[1], src.sizes(), d), d, OpId::IndexAdd);
}

// x: (..., N, ...), index: (..., K, ...) -> out: index's shape
void gather_op_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  gather_into(as_1d(out[0]), as_1d(in[0]), as_1d(in[1]), int(attrs.dim), OpId::Gather);
}

// x: (..., N, ...), index: (..., K, ...), src at least index's size -> out: x's shape
void scatter_add_op_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor index = as_1d(in[1]);
  const Tensor src = as_1d(in[2]);
  const Tensor y = as_1d(out[0]);
  BRISK_CHECK(y.dtype() != DType::Bool, "scatter_add: no kernel for dtype Bool");
  copy_into(y, x);
  // src is read over index's sizes (it may be larger).
  Tensor window = make_view(src.storage(), index.sizes(), src.strides(), src.offset(), src.dtype());
  scatter_add_into(y, window, index, int(attrs.dim), OpId::ScatterAdd);
}

}  // namespace

void register_index() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Cat, gpu, cat_kernel);
  register_kernel(OpId::SliceBackward, gpu, slice_backward_kernel);
  register_kernel(OpId::IndexSelect, gpu, index_select_kernel);
  register_kernel(OpId::IndexAdd, gpu, index_add_kernel);
  register_kernel(OpId::Gather, gpu, gather_op_kernel);
  register_kernel(OpId::ScatterAdd, gpu, scatter_add_op_kernel);
}

}  // namespace brisk::kernels::cuda
