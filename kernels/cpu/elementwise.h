// kernels/cpu/elementwise.h: the CPU kernel of one entry of the elementwise list
// (kernels/functors.h) and the registrar of a part of that list. The list is registered from
// three files, one per entry kind (Note [Elementwise files]), so that its instantiations
// compile in parallel.
// Not here: the loop engine (kernels/cpu/loops.h), the functors (kernels/functors.h).
#pragma once

#include <span>

#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/functors.h"

namespace brisk::kernels::cpu::detail {

// Note [Elementwise files]
// Each (op, dtype) pair of the list instantiates the strided loop engine several times (dense
// and broadcast inner loops per operand, the strided and the tiled walks), vectorized at -O3:
// about 1,000 loops in all. In one file that took 124 s to compile (ASan: 140 s), the longest
// step of the build by far, and one core did it while the other waited. The kernels are
// registered from elementwise_unary.cpp, elementwise_binary.cpp and compare.cpp (by entry
// kind, as kernels/cuda/elementwise.cu and kernels/cuda/compare.cu split them), and cast and
// fill from elementwise.cpp.

// The kernel of one entry: its functor, built from the op's Attrs, run over out's dtype (an
// input's for comparisons) within the entry's dtype class.
template <class E>
void list_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  namespace F = ::brisk::functors;
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

// Registers the entries of the list for which Keep<E>::value holds.
template <template <class> class Keep, class... E>
void register_entries(functors::List<E...>) {
  auto one = []<class Entry>(Entry*) {
    if constexpr (Keep<Entry>::value) register_kernel(Entry::id, DeviceType::CPU, list_kernel<Entry>);
  };
  (one(static_cast<E*>(nullptr)), ...);
}

}  // namespace brisk::kernels::cpu::detail
