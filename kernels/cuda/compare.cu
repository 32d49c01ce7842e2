// kernels/cuda/compare.cu: CUDA kernels of the comparisons (Bool output), where and
// masked_fill, through the shared functors and the generic launcher (kernels/cuda/loops.cuh).
// Comparisons are typed for the float dtypes and int64-based for integers and Bool (Note
// [Integer elementwise on CUDA]); where and masked_fill only move bytes, so they dispatch on
// element size. Kept apart from elementwise.cu so the two compile in parallel.
#include <cstring>

#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/functor_attrs.h"

namespace brisk::kernels::cuda {

namespace {

namespace F = ::brisk::functors;

// Bool output, inputs of one dtype (any).
template <OpId Id, class Fn>
void compare(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType t = in[0].dtype();
  if (is_integral(t)) return launch_elementwise_int<2>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  dispatch_float(t, op_name(Id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<bool, T, T>(out[0], {&in[0], &in[1]}, F::make<Fn>(attrs));
  });
}

// (cond Bool, x, y) -> x where cond else y; any dtype (moved as raw bits).
void where_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  dispatch_by_size(out[0].element_size(), "where", [&](auto tag) {
    using U = decltype(tag);
    launch_elementwise<U, bool, U, U>(out[0], {&in[0], &in[1], &in[2]}, F::Where{});
  });
}

template <class U>
struct MaskedFillBits {
  U bits;
  __device__ U operator()(U x, bool m) const { return m ? bits : x; }
};

// (x, mask Bool) -> x with `a` where mask; the value converts on the host as on the CPU.
void masked_fill_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  uint64_t bits = 0;
  dispatch_all(out[0].dtype(), "masked_fill", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(static_cast<compute_t<T>>(attrs.a));
    std::memcpy(&bits, &v, sizeof(T));
  });
  dispatch_by_size(out[0].element_size(), "masked_fill", [&](auto tag) {
    using U = decltype(tag);
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    launch_elementwise<U, U, bool>(out[0], {&in[0], &in[1]}, MaskedFillBits<U>{v});
  });
}

}  // namespace

void register_compare() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Eq, gpu, compare<OpId::Eq, F::Eq>);
  register_kernel(OpId::Ne, gpu, compare<OpId::Ne, F::Ne>);
  register_kernel(OpId::Lt, gpu, compare<OpId::Lt, F::Lt>);
  register_kernel(OpId::Le, gpu, compare<OpId::Le, F::Le>);
  register_kernel(OpId::Gt, gpu, compare<OpId::Gt, F::Gt>);
  register_kernel(OpId::Ge, gpu, compare<OpId::Ge, F::Ge>);
  register_kernel(OpId::Where, gpu, where_kernel);
  register_kernel(OpId::MaskedFill, gpu, masked_fill_kernel);
}

}  // namespace brisk::kernels::cuda
