// kernels/cpu/elementwise.cpp: CPU kernels of cast and fill, written out (not entries of the
// elementwise list: cast converts between any two dtypes, fill has no input).
// Not here: the list's unary entries (kernels/cpu/elementwise_unary.cpp), binary ones
// (kernels/cpu/elementwise_binary.cpp), comparisons, where and masked_fill
// (kernels/cpu/compare.cpp); Note [Elementwise files] in kernels/cpu/elementwise.h.
#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/functors.h"

namespace brisk::kernels::cpu {

namespace {

namespace F = ::brisk::functors;

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
    const compute_t<T> v = F::scalar_as<compute_t<T>>(attrs.a);
    elementwise<T>(out[0], {}, [v]() { return v; });
  });
}

}  // namespace

void register_elementwise() {
  register_kernel(OpId::Cast, DeviceType::CPU, cast_kernel);
  register_kernel(OpId::Fill, DeviceType::CPU, fill_kernel);
}

}  // namespace brisk::kernels::cpu
