// kernels/cpu/elementwise.cpp: CPU kernels of the elementwise ops: each is the shared functor
// (kernels/functors.h) run by the strided loop engine (kernels/cpu/loops.h), dispatched on
// dtype. Float-only math covers F32/F64/F16/BF16; arithmetic covers every numeric dtype.
#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/functor_attrs.h"

namespace brisk::kernels::cpu {

namespace {

namespace F = ::brisk::functors;

// out = f(x) for floating dtypes.
template <OpId Id, class Fn>
void unary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, T>(out[0], {&in[0]}, F::make<Fn>(attrs));
  });
}

// out = f(x) for every numeric dtype.
template <OpId Id, class Fn>
void unary_numeric(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_numeric(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, T>(out[0], {&in[0]}, F::make<Fn>(attrs));
  });
}

template <OpId Id, class Fn>
void binary_numeric(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_numeric(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
}

template <OpId Id, class Fn>
void binary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
}

// Bool output, inputs of any dtype (equal).
template <OpId Id, class Fn>
void compare(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_all(in[0].dtype(), op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    elementwise<bool, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
}

void where_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  dispatch_all(out[0].dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, bool, T, T>(out[0], {&in[0], &in[1], &in[2]}, F::Where{});
  });
}

void masked_fill_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_all(out[0].dtype(), "masked_fill", [&](auto tag) {
    using T = decltype(tag);
    elementwise<T, T, bool>(out[0], {&in[0], &in[1]}, F::make<F::MaskedFill>(attrs));
  });
}

void cast_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  dispatch_all(out[0].dtype(), "cast", [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_all(in[0].dtype(), "cast", [&](auto in_tag) {
      using I = decltype(in_tag);
      elementwise<O, I>(out[0], {&in[0]}, F::Identity{});
    });
  });
}

void fill_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  dispatch_all(out[0].dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    const double v = attrs.a;
    elementwise<T>(out[0], {}, [v]() { return static_cast<compute_t<T>>(v); });
  });
}

}  // namespace

void register_elementwise() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Neg, cpu, unary_numeric<OpId::Neg, F::Neg>);
  register_kernel(OpId::Exp, cpu, unary_float<OpId::Exp, F::Exp>);
  register_kernel(OpId::Log, cpu, unary_float<OpId::Log, F::Log>);
  register_kernel(OpId::Sqrt, cpu, unary_float<OpId::Sqrt, F::Sqrt>);
  register_kernel(OpId::Rsqrt, cpu, unary_float<OpId::Rsqrt, F::Rsqrt>);
  register_kernel(OpId::Abs, cpu, unary_numeric<OpId::Abs, F::Abs>);
  register_kernel(OpId::Sign, cpu, unary_numeric<OpId::Sign, F::Sign>);
  register_kernel(OpId::Relu, cpu, unary_numeric<OpId::Relu, F::Relu>);
  register_kernel(OpId::Gelu, cpu, unary_float<OpId::Gelu, F::Gelu>);
  register_kernel(OpId::ReluBackward, cpu, binary_float<OpId::ReluBackward, F::ReluBackward>);
  register_kernel(OpId::GeluBackward, cpu, binary_float<OpId::GeluBackward, F::GeluBackward>);
  register_kernel(OpId::Sigmoid, cpu, unary_float<OpId::Sigmoid, F::Sigmoid>);
  register_kernel(OpId::Tanh, cpu, unary_float<OpId::Tanh, F::Tanh>);
  register_kernel(OpId::Silu, cpu, unary_float<OpId::Silu, F::Silu>);
  register_kernel(OpId::Clamp, cpu, unary_numeric<OpId::Clamp, F::Clamp>);
  register_kernel(OpId::PowScalar, cpu, unary_float<OpId::PowScalar, F::PowScalar>);
  register_kernel(OpId::Cast, cpu, cast_kernel);
  register_kernel(OpId::Fill, cpu, fill_kernel);
  register_kernel(OpId::Add, cpu, binary_numeric<OpId::Add, F::Add>);
  register_kernel(OpId::Sub, cpu, binary_numeric<OpId::Sub, F::Sub>);
  register_kernel(OpId::Mul, cpu, binary_numeric<OpId::Mul, F::Mul>);
  register_kernel(OpId::Div, cpu, binary_numeric<OpId::Div, F::Div>);
  register_kernel(OpId::Pow, cpu, binary_float<OpId::Pow, F::Pow>);
  register_kernel(OpId::Maximum, cpu, binary_numeric<OpId::Maximum, F::Maximum>);
  register_kernel(OpId::Minimum, cpu, binary_numeric<OpId::Minimum, F::Minimum>);
  register_kernel(OpId::Eq, cpu, compare<OpId::Eq, F::Eq>);
  register_kernel(OpId::Ne, cpu, compare<OpId::Ne, F::Ne>);
  register_kernel(OpId::Lt, cpu, compare<OpId::Lt, F::Lt>);
  register_kernel(OpId::Le, cpu, compare<OpId::Le, F::Le>);
  register_kernel(OpId::Gt, cpu, compare<OpId::Gt, F::Gt>);
  register_kernel(OpId::Ge, cpu, compare<OpId::Ge, F::Ge>);
  register_kernel(OpId::Where, cpu, where_kernel);
  register_kernel(OpId::MaskedFill, cpu, masked_fill_kernel);
}

}  // namespace brisk::kernels::cpu
