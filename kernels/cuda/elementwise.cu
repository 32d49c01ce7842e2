// kernels/cuda/elementwise.cu: CUDA kernels of the unary and binary arithmetic ops, cast and
// fill: each is the shared functor (kernels/functors.h) run by the generic launcher
// (kernels/cuda/loops.cuh), dispatched on dtype like the CPU (kernels/cpu/elementwise.cpp).
// Float-only math covers F32/F64/F16/BF16; arithmetic covers every numeric dtype. Ops that
// only move bytes (same-dtype copies, fill) dispatch on element size to keep code small.
// Not here: comparisons, where, masked_fill (compare.cu).
#include <cstring>

#include "engine/backend.h"
#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/functor_attrs.h"

namespace brisk::kernels::cuda {

namespace {

namespace F = ::brisk::functors;

// out = f(x) for floating dtypes.
template <OpId Id, class Fn>
void unary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<T, T>(out[0], {&in[0]}, F::make<Fn>(attrs));
  });
}

// out = f(x) for every numeric dtype (integers: see Note [Integer elementwise on CUDA]).
template <OpId Id, class Fn>
void unary_numeric(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType t = out[0].dtype();
  BRISK_CHECK(t != DType::Bool, op_name(Id), ": no kernel for dtype Bool");
  if (is_integral(t)) return launch_elementwise_int<1>(out[0], {&in[0]}, F::make<Fn>(attrs));
  dispatch_float(t, op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<T, T>(out[0], {&in[0]}, F::make<Fn>(attrs));
  });
}

template <OpId Id, class Fn>
void binary_numeric(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType t = out[0].dtype();
  BRISK_CHECK(t != DType::Bool, op_name(Id), ": no kernel for dtype Bool");
  if (is_integral(t)) return launch_elementwise_int<2>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  dispatch_float(t, op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<T, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
}

template <OpId Id, class Fn>
void binary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<T, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
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
    T v = static_cast<T>(static_cast<compute_t<T>>(attrs.a));
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
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Neg, gpu, unary_numeric<OpId::Neg, F::Neg>);
  register_kernel(OpId::Exp, gpu, unary_float<OpId::Exp, F::Exp>);
  register_kernel(OpId::Log, gpu, unary_float<OpId::Log, F::Log>);
  register_kernel(OpId::Sqrt, gpu, unary_float<OpId::Sqrt, F::Sqrt>);
  register_kernel(OpId::Rsqrt, gpu, unary_float<OpId::Rsqrt, F::Rsqrt>);
  register_kernel(OpId::Abs, gpu, unary_numeric<OpId::Abs, F::Abs>);
  register_kernel(OpId::Sign, gpu, unary_numeric<OpId::Sign, F::Sign>);
  register_kernel(OpId::Relu, gpu, unary_numeric<OpId::Relu, F::Relu>);
  register_kernel(OpId::Gelu, gpu, unary_float<OpId::Gelu, F::Gelu>);
  register_kernel(OpId::ReluBackward, gpu, binary_float<OpId::ReluBackward, F::ReluBackward>);
  register_kernel(OpId::GeluBackward, gpu, binary_float<OpId::GeluBackward, F::GeluBackward>);
  register_kernel(OpId::Sigmoid, gpu, unary_float<OpId::Sigmoid, F::Sigmoid>);
  register_kernel(OpId::Tanh, gpu, unary_float<OpId::Tanh, F::Tanh>);
  register_kernel(OpId::Silu, gpu, unary_float<OpId::Silu, F::Silu>);
  register_kernel(OpId::Clamp, gpu, unary_numeric<OpId::Clamp, F::Clamp>);
  register_kernel(OpId::PowScalar, gpu, unary_float<OpId::PowScalar, F::PowScalar>);
  register_kernel(OpId::Cast, gpu, cast_kernel);
  register_kernel(OpId::Fill, gpu, fill_kernel);
  register_kernel(OpId::Add, gpu, binary_numeric<OpId::Add, F::Add>);
  register_kernel(OpId::Sub, gpu, binary_numeric<OpId::Sub, F::Sub>);
  register_kernel(OpId::Mul, gpu, binary_numeric<OpId::Mul, F::Mul>);
  register_kernel(OpId::Div, gpu, binary_numeric<OpId::Div, F::Div>);
  register_kernel(OpId::Pow, gpu, binary_float<OpId::Pow, F::Pow>);
  register_kernel(OpId::Maximum, gpu, binary_numeric<OpId::Maximum, F::Maximum>);
  register_kernel(OpId::Minimum, gpu, binary_numeric<OpId::Minimum, F::Minimum>);
}

}  // namespace brisk::kernels::cuda
