// kernels/cpu/elementwise.cpp: CPU kernels of the elementwise ops: each is the shared functor
// (kernels/functors.h) run by the strided loop engine (kernels/cpu/loops.h), dispatched on
// dtype. The ops of the elementwise list (kernels/functors.h) register through one template;
// cast, fill, where and masked_fill are written out below.
#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/functors.h"

namespace brisk::kernels::cpu {

namespace {

namespace F = ::brisk::functors;

// The kernel of one entry of the elementwise list (kernels/functors.h): its functor, built
// from the op's Attrs, run over out's dtype (an input's for comparisons) within its class.
template <class E>
void list_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const auto f = F::make<typename E::F>(attrs);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (E::dtypes == F::AnyToBool) {
      elementwise<bool, T, T>(out[0], {&in[0], &in[1]}, f);
    } else if constexpr (E::arity == 1) {
      elementwise<T, T>(out[0], {&in[0]}, f);
    } else {
      elementwise<T, T, T>(out[0], {&in[0], &in[1]}, f);
    }
  };
  if constexpr (E::dtypes == F::Float) {
    dispatch_float(out[0].dtype(), op_name(E::id), run);
  } else if constexpr (E::dtypes == F::Numeric) {
    dispatch_numeric(out[0].dtype(), op_name(E::id), run);
  } else {
    dispatch_all(in[0].dtype(), op_name(E::id), run);
  }
}

template <class... E>
void register_list(F::List<E...>) {
  (register_kernel(E::id, DeviceType::CPU, list_kernel<E>), ...);
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
  register_list(F::Kernels{});
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Cast, cpu, cast_kernel);
  register_kernel(OpId::Fill, cpu, fill_kernel);
  register_kernel(OpId::Where, cpu, where_kernel);
  register_kernel(OpId::MaskedFill, cpu, masked_fill_kernel);
}

}  // namespace brisk::kernels::cpu
