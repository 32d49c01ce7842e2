// kernels/cpu/compare.cpp: CPU kernels of the elementwise list's Compare entries
// (kernels/functors.h: eq, ne, lt, le, gt, ge; Bool out), and of where and masked_fill.
// Not here: the list's arithmetic entries (kernels/cpu/elementwise_unary.cpp,
// kernels/cpu/elementwise_binary.cpp); Note [Elementwise files] in kernels/cpu/elementwise.h.
#include "kernels/cpu/elementwise.h"

namespace brisk::kernels::cpu {

namespace {

namespace F = ::brisk::functors;

template <class E>
struct IsCompare : std::bool_constant<E::dtypes == F::AnyToBool> {};

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

}  // namespace

void register_compare() {
  detail::register_entries<IsCompare>(F::Kernels{});
  register_kernel(OpId::Where, DeviceType::CPU, where_kernel);
  register_kernel(OpId::MaskedFill, DeviceType::CPU, masked_fill_kernel);
}

}  // namespace brisk::kernels::cpu
