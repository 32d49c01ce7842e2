// kernels/cpu/elementwise_binary.cpp: CPU kernels of the elementwise list's Binary entries
// (kernels/functors.h): add, sub, mul, div, pow, maximum, minimum and the activation backwards.
// Not here: unary entries (kernels/cpu/elementwise_unary.cpp), comparisons
// (kernels/cpu/compare.cpp), cast and fill (kernels/cpu/elementwise.cpp).
#include "kernels/cpu/elementwise.h"

namespace brisk::kernels::cpu {

namespace {
template <class E>
struct IsBinary : std::bool_constant<E::arity == 2 && E::dtypes != functors::AnyToBool> {};
}  // namespace

void register_elementwise_binary() { detail::register_entries<IsBinary>(functors::Kernels{}); }

}  // namespace brisk::kernels::cpu
