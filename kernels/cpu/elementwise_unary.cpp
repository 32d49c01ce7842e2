// kernels/cpu/elementwise_unary.cpp: CPU kernels of the elementwise list's Unary entries
// (kernels/functors.h): neg, exp, the activations, rounding, clamp, pow by a scalar, ...
// Not here: binary entries (kernels/cpu/elementwise_binary.cpp), comparisons
// (kernels/cpu/compare.cpp), cast and fill (kernels/cpu/elementwise.cpp).
#include "kernels/cpu/elementwise.h"

namespace brisk::kernels::cpu {

namespace {
template <class E>
struct IsUnary : std::bool_constant<E::arity == 1> {};
}  // namespace

void register_elementwise_unary() { detail::register_entries<IsUnary>(functors::Kernels{}); }

}  // namespace brisk::kernels::cpu
