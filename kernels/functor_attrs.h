// kernels/functor_attrs.h: builds each functor from the op's Attrs (the one place that knows
// which Attrs field feeds which functor member), shared by the CPU and CUDA kernels.
#pragma once

#include "engine/op.h"
#include "kernels/functors.h"

namespace brisk::functors {

template <class F>
F make(const Attrs&) {
  return F{};
}
template <> inline Add make<Add>(const Attrs& a) { return Add{a.a}; }
template <> inline Sub make<Sub>(const Attrs& a) { return Sub{a.a}; }
template <> inline Clamp make<Clamp>(const Attrs& a) { return Clamp{a.a, a.b}; }
template <> inline PowScalar make<PowScalar>(const Attrs& a) { return PowScalar{a.a}; }
template <> inline Gelu make<Gelu>(const Attrs& a) { return Gelu{a.flag}; }
template <> inline GeluBackward make<GeluBackward>(const Attrs& a) { return GeluBackward{a.flag}; }
template <> inline MaskedFill make<MaskedFill>(const Attrs& a) { return MaskedFill{a.a}; }
template <> inline Constant make<Constant>(const Attrs& a) { return Constant{a.a}; }

}  // namespace brisk::functors
