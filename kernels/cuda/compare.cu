// kernels/cuda/compare.cu: CUDA kernels of the comparisons (Bool output; the Compare entries
// of the elementwise list in kernels/functors.h), where and masked_fill, through the shared
// functors and the generic launcher (kernels/cuda/loops.cuh). Comparisons are typed for the
// float dtypes and int64-based for integers and Bool (Note [Integer elementwise on CUDA]);
// where and masked_fill only move bytes, so they dispatch on element size. Kept apart from
// elementwise.cu so the two compile in parallel.
#include <cstring>

#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/functors.h"

namespace brisk::kernels::cuda {

namespace {

namespace F = ::brisk::functors;

// The kernel of one Compare entry of the elementwise list (kernels/functors.h): Bool output,
// inputs of one dtype (any).
template <class E>
void list_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const auto f = F::make<typename E::F>(attrs);
  const DType t = in[0].dtype();
  if (is_integral(t)) return launch_elementwise_int<2>(out[0], {&in[0], &in[1]}, f);
  dispatch_float(t, op_name(E::id), [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<bool, T, T>(out[0], {&in[0], &in[1]}, f);
  });
}

// Registers the list's Compare entries (the others are elementwise.cu's).
template <class E>
void register_entry() {
  if constexpr (E::dtypes == F::AnyToBool) register_kernel(E::id, DeviceType::CUDA, list_kernel<E>);
}
template <class... E>
void register_list(F::List<E...>) {
  (register_entry<E>(), ...);
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
    T v = static_cast<T>(F::scalar_as<compute_t<T>>(attrs.a));
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
  register_list(F::Kernels{});
  register_kernel(OpId::Where, DeviceType::CUDA, where_kernel);
  register_kernel(OpId::MaskedFill, DeviceType::CUDA, masked_fill_kernel);
}

}  // namespace brisk::kernels::cuda
