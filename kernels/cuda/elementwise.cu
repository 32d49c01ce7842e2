// kernels/cuda/elementwise.cu: CUDA kernels of the unary and binary ops of the elementwise list
// (kernels/functors.h), cast and fill: each list entry is its shared functor run by the
// generic launcher (kernels/cuda/loops.cuh), dispatched on dtype like the CPU
// (kernels/cpu/elementwise.cpp). Ops that only move bytes (same-dtype copies, fill) dispatch
// on element size to keep code small. Not here: comparisons, where, masked_fill (compare.cu).
#include <cstring>

#include "engine/backend.h"
#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/functors.h"

namespace brisk::kernels::cuda {

namespace {

namespace F = ::brisk::functors;

// The kernel of one Unary or Binary entry of the elementwise list (kernels/functors.h): its
// functor, built from the op's Attrs, over out's dtype (integers: see Note [Integer
// elementwise on CUDA]).
template <class E>
void list_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  static_assert(E::dtypes != F::AnyToBool, "comparisons are registered by compare.cu");
  const auto f = F::make<typename E::F>(attrs);
  const DType t = out[0].dtype();
  if constexpr (E::dtypes == F::Numeric) {
    BRISK_CHECK(t != DType::Bool, op_name(E::id), ": no kernel for dtype Bool");
    if (is_integral(t)) {
      if constexpr (E::arity == 1)
        return launch_elementwise_int<1>(out[0], {&in[0]}, f);
      else
        return launch_elementwise_int<2>(out[0], {&in[0], &in[1]}, f);
    }
  }
  dispatch_float(t, op_name(E::id), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (E::arity == 1) {
      launch_elementwise<T, T>(out[0], {&in[0]}, f);
    } else {
      launch_elementwise<T, T, T>(out[0], {&in[0], &in[1]}, f);
    }
  });
}

// Registers the list's Unary and Binary entries (its comparisons are compare.cu's).
template <class E>
void register_entry() {
  if constexpr (E::dtypes != F::AnyToBool) register_kernel(E::id, DeviceType::CUDA, list_kernel<E>);
}
template <class... E>
void register_list(F::List<E...>) {
  (register_entry<E>(), ...);
}

// ---- casts between dtypes that are not both floating: one kernel, dtypes read at run time.
// A value travels as double (floating source) or int64 (integer or Bool source) and is then
// converted exactly as the CPU's Out(compute_t<In>) conversion does.
struct DynValue {
  bool is_float;
  double d;
  int64_t i;
};

__device__ __forceinline__ DynValue load_dyn(const void* base, int64_t off, DType t) {
  switch (t) {
    case DType::F32: return {true, double(static_cast<const float*>(base)[off]), 0};
    case DType::F64: return {true, static_cast<const double*>(base)[off], 0};
    case DType::F16: return {true, double(load_value(static_cast<const Half*>(base) + off)), 0};
    case DType::BF16: return {true, double(load_value(static_cast<const BFloat16*>(base) + off)), 0};
    case DType::I8: return {false, 0, static_cast<const int8_t*>(base)[off]};
    case DType::U8: return {false, 0, static_cast<const uint8_t*>(base)[off]};
    case DType::I32: return {false, 0, static_cast<const int32_t*>(base)[off]};
    case DType::I64: return {false, 0, static_cast<const int64_t*>(base)[off]};
    case DType::Bool: return {false, 0, static_cast<const bool*>(base)[off] ? 1 : 0};
  }
  return {false, 0, 0};
}

template <class T>
__device__ __forceinline__ void store_as(void* base, int64_t off, DynValue v) {
  // Floats convert from float (the compute type of F32/F16/BF16 sources) unless wider.
  static_cast<T*>(base)[off] = v.is_float ? Store<T>::to(v.d) : Store<T>::to(v.i);
}

__device__ __forceinline__ void store_dyn(void* base, int64_t off, DType t, DynValue v) {
  switch (t) {
    case DType::F32: store_as<float>(base, off, v); break;
    case DType::F64: store_as<double>(base, off, v); break;
    case DType::F16: store_as<Half>(base, off, v); break;
    case DType::BF16: store_as<BFloat16>(base, off, v); break;
    case DType::I8: store_as<int8_t>(base, off, v); break;
    case DType::U8: store_as<uint8_t>(base, off, v); break;
    case DType::I32: store_as<int32_t>(base, off, v); break;
    case DType::I64: store_as<int64_t>(base, off, v); break;
    case DType::Bool: static_cast<bool*>(base)[off] = v.is_float ? v.d != 0 : v.i != 0; break;
  }
}

// y = cast(x): any layout, dtypes chosen at run time.
__global__ void dynamic_cast_kernel(int64_t n, OffsetCalc<2> calc, void* y, DType yt, const void* x, DType xt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    calc.get(i, off);
    store_dyn(y, off[0], yt, load_dyn(x, off[1], xt));
  }
}

void cast_any(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  const Tensor* ops[2] = {&dst, &src};
  OffsetCalc<2> calc = make_offset_calc<2>(ops);
  dynamic_cast_kernel<<<grid_for(n), kBlock, 0, stream_handle(dst.device().index)>>>(
      n, calc, dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype());
  BRISK_CUDA_CHECK_LAUNCH();
}

void cast_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) { copy_into(out[0], in[0]); }

// Writes the same bits to every element (the value is converted on the host, as the CPU does).
template <class U>
struct ConstBits {
  U bits;
  __device__ U operator()() const { return bits; }
};

void fill_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  uint64_t bits = 0;
  dispatch_all(y.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(F::scalar_as<compute_t<T>>(attrs.a));
    std::memcpy(&bits, &v, sizeof(T));
  });
  if (bits == 0 && y.is_contiguous()) {
    backend(y.device()).memset(y.data_ptr(), 0, size_t(y.numel()) * y.element_size(), y.device());
    return;
  }
  dispatch_by_size(y.element_size(), "fill", [&](auto tag) {
    using U = decltype(tag);
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    launch_elementwise<U>(y, {}, ConstBits<U>{v});
  });
}

}  // namespace

// ---- helpers shared by the CUDA kernels (kernels/cuda/runtime.h)
void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    dispatch_by_size(dst.element_size(), "copy", [&](auto tag) {
      using U = decltype(tag);
      launch_elementwise<U, U>(dst, {&src}, F::Identity{});
    });
  } else if (is_floating(dst.dtype()) && is_floating(src.dtype())) {
    dispatch_float(dst.dtype(), "cast", [&](auto out_tag) {
      using O = decltype(out_tag);
      dispatch_float(src.dtype(), "cast", [&](auto in_tag) {
        using I = decltype(in_tag);
        if constexpr (!std::is_same_v<O, I>) launch_elementwise<O, I>(dst, {&src}, F::Identity{});
      });
    });
  } else {
    cast_any(dst, src);
  }
}

Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = make_empty(t.sizes(), t.dtype(), t.device());
  copy_into(c, t);
  return c;
}

void zero_(const Tensor& t) {
  Attrs attrs;
  attrs.a = 0;
  Tensor out[1] = {t};
  fill_kernel({}, out, attrs);
}

void register_elementwise() {
  register_list(F::Kernels{});
  register_kernel(OpId::Cast, DeviceType::CUDA, cast_kernel);
  register_kernel(OpId::Fill, DeviceType::CUDA, fill_kernel);
}

}  // namespace brisk::kernels::cuda
