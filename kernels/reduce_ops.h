// kernels/reduce_ops.h: the reductions' arithmetic, written once for every backend: each op is
// a BRISK_HD struct (accumulator, identity, step, combine, finish) that the CPU engine
// (kernels/cpu/reduce.cpp) and the CUDA engine (kernels/cuda/reduce.cu) both run, THE list of
// one-pass reductions (at the end) that both backends register, and the finishing rule of a
// row's log-sum-exp that softmax, log_softmax, cross-entropy and logsumexp share. See Note
// [Reduction contract].
// Not here: how elements are walked and grouped (the engines, over kernels/reduce_plan.h),
// loading and rounding of 16-bit dtypes (the backends' load/store), inference and backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "engine/dtype.h"
#include "engine/macros.h"
#include "engine/op.h"

namespace brisk::kernels {

// Note [Reduction contract]
// A reduction op is a small struct of plain values with
//   using Value = V;                      the element type step takes: the compute type
//                                         (float for F32/F16/BF16, double for F64, int64 for
//                                         sums of integers)
//   using Acc = ...;                      the accumulator (a value, or a value and an index)
//   Acc identity() const;                 the accumulator of no elements
//   Acc step(Acc acc, V v, int64_t r);    acc with element v added; r is v's flat (row-major)
//                                         index among the elements its output reduces
//   Acc combine(Acc a, Acc b);            two partial accumulators merged; a holds the earlier
//                                         elements when the engine knows it, but ops whose result
//                                         depends on order (argmax ties) decide by index instead
//   finish(Acc acc);                      the output value in the compute type; the backend
//                                         rounds it to the output dtype
//   Op at(int64_t o);                     the op for output o (per-output data: var's mean)
// all const and BRISK_HD, so both engines run the same struct. An engine may group elements any
// way it likes (lanes, pairwise trees, thread blocks, split chunks), so for a given engine the
// op fixes the arithmetic and the engine the summation order; the CPU's order is documented in
// Note [Reduction plan] (kernels/cpu/reduce.cpp) and is what bit-exact tests see.

template <class A>
BRISK_INLINE bool is_nan_value(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// sum
template <class A>
struct SumOp {
  using Value = A;
  using Acc = A;
  BRISK_INLINE Acc identity() const { return A(0); }
  BRISK_INLINE Acc step(Acc acc, A v, int64_t) const { return add(acc, v); }
  BRISK_INLINE Acc combine(Acc a, Acc b) const { return add(a, b); }
  BRISK_INLINE A finish(Acc a) const { return a; }
  BRISK_INLINE SumOp at(int64_t) const { return *this; }
  // Integer sums wrap around in two's complement, as PyTorch's do (signed overflow would be
  // undefined behaviour); floating sums are plain adds.
  BRISK_INLINE static A add(A a, A b) {
    if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
      return A(std::make_unsigned_t<A>(a) + std::make_unsigned_t<A>(b));
    } else {
      return a + b;
    }
  }
};

// nansum: NaN elements count as zero, as torch.nansum (integers have none). Partials are
// combined as sums: inf + -inf is NaN, as theirs.
template <class A>
struct NansumOp : SumOp<A> {
  BRISK_INLINE A step(A acc, A v, int64_t) const { return is_nan_value(v) ? acc : SumOp<A>::add(acc, v); }
  BRISK_INLINE NansumOp at(int64_t) const { return *this; }
};

// The sum divided by each output's element count (var's first pass).
template <class A>
struct MeanOp : SumOp<A> {
  A count;
  BRISK_INLINE A finish(A a) const { return a / count; }
  BRISK_INLINE MeanOp at(int64_t) const { return *this; }
};

// amax / amin: NaN wins, as in PyTorch (and as the row max of softmax and log-sum-exp).
template <class A, bool IsMax>
struct ExtremumOp {
  using Value = A;
  using Acc = A;
  BRISK_INLINE Acc identity() const {
    if constexpr (std::is_floating_point_v<A>) {
      return IsMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return IsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
    }
  }
  BRISK_INLINE Acc step(Acc acc, A v, int64_t) const { return combine(acc, v); }
  BRISK_INLINE Acc combine(Acc a, Acc b) const {
    if constexpr (IsMax) {
      return (b > a || is_nan_value(b)) ? b : a;
    } else {
      return (b < a || is_nan_value(b)) ? b : a;
    }
  }
  BRISK_INLINE A finish(Acc a) const { return a; }
  BRISK_INLINE ExtremumOp at(int64_t) const { return *this; }
};

// var's second pass: squared deviations from each output's mean (computed by MeanOp first;
// exact where the one-pass sum(x^2) - n mean^2 cancels), divided by n - correction.
template <class A>
struct SquaredDeviationOp {
  using Value = A;
  using Acc = A;
  const A* means;  // one per output, flat (row-major) output order
  A mean;          // this output's (set by at)
  A divisor;       // n - correction, clamped at 0: 0 gives NaN/Inf, as in PyTorch
  BRISK_INLINE Acc identity() const { return A(0); }
  BRISK_INLINE Acc step(Acc acc, A v, int64_t) const {
    const A d = v - mean;
    return acc + d * d;
  }
  BRISK_INLINE Acc combine(Acc a, Acc b) const { return a + b; }
  BRISK_INLINE A finish(Acc a) const { return a / divisor; }
  BRISK_INLINE SquaredDeviationOp at(int64_t o) const { return {means, means[o], divisor}; }
};

// argmax / argmin: the first extreme element (smallest reduced index among ties); NaN counts
// as the extreme, the first NaN winning, as in PyTorch. index < 0: no element yet.
template <class A>
struct ArgAcc {
  A value;
  int64_t index;
};

template <class A, bool IsMax>
struct ArgOp {
  using Value = A;
  using Acc = ArgAcc<A>;
  BRISK_INLINE Acc identity() const { return {A(0), -1}; }
  BRISK_INLINE Acc step(Acc acc, A v, int64_t r) const { return combine(acc, Acc{v, r}); }
  BRISK_INLINE Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = is_nan_value(a.value), b_nan = is_nan_value(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return b.index < a.index ? b : a;
      return a_nan ? a : b;
    }
    if (IsMax ? b.value > a.value : b.value < a.value) return b;
    if (b.value == a.value && b.index < a.index) return b;
    return a;
  }
  BRISK_INLINE int64_t finish(Acc a) const { return a.index < 0 ? 0 : a.index; }
  BRISK_INLINE ArgOp at(int64_t) const { return *this; }
};

// ---- a row's log-sum-exp
// Every backend computes a row's statistics in two passes, max (ExtremumOp, NaN wins) then
// the sum of exp(x - max) in element order; softmax, log_softmax, cross-entropy and logsumexp
// all start from them. The value of the log-sum-exp differs only at infinite maxima:
template <class A>
struct RowLse {
  A max;  // NaN if the row has one; -inf for an empty row
  A sum;  // sum of exp(x - max)

  // m + log(s): cross-entropy's, where an infinite logit gives NaN as in PyTorch.
  BRISK_INLINE A lse() const { return max + std::log(sum); }
  // torch.logsumexp's: an infinite max is the result (every element -inf gives -inf, a +inf
  // gives +inf, where x - max would be NaN); NaN propagates through the max.
  BRISK_INLINE A logsumexp() const {
    return (max == std::numeric_limits<A>::infinity() || max == -std::numeric_limits<A>::infinity()) ? max : lse();
  }
};

// ---- THE list of one-pass reductions, registered by both backends from this one place
// (register_reductions in kernels/cpu/reduce.cpp and kernels/cuda/reduce.cu). An entry names
// the op, the op struct for an input element type T, the input dtypes it has kernels for and
// where its reduced dims come from:
//   Reduce<op, OpFor, dtypes, dims>
// OpFor<T> is the struct of Note [Reduction contract]. The output element is T when finish()
// gives a floating value (16-bit inputs round back to their dtype) and finish()'s type
// otherwise: int64 for sums of integers (as torch.sum), the integer itself for max/min of
// integers, int64 for arg indices (ReduceOut). Not here: var (two passes over a buffer of
// means), softmax, log_softmax, logsumexp and cross-entropy (row-wise, per backend).
enum class ReduceDtypes { Float, Numeric, All };
enum class ReduceDims {
  List,       // attrs.dims (empty: all dims): reduce_mask (kernels/reduce_plan.h)
  OneOrFlat,  // attrs.dim, or every dim with attrs.flag: arg_mask (kernels/reduce_plan.h)
};
template <OpId Id, template <class> class OpFor, ReduceDtypes Dtypes, ReduceDims Dims>
struct Reduce {
  static constexpr OpId id = Id;
  template <class T>
  using Op = OpFor<T>;
  static constexpr ReduceDtypes dtypes = Dtypes;
  static constexpr ReduceDims dims = Dims;
};
template <class... E>
struct ReduceList {};

// Sums accumulate in the compute type for floating inputs and in int64 for integers and Bool.
template <class T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;
template <class Op>
using finish_t = decltype(std::declval<const Op&>().finish(std::declval<typename Op::Acc>()));
template <class Op, class T>
using ReduceOut = std::conditional_t<std::is_floating_point_v<finish_t<Op>>, T, finish_t<Op>>;

// Calls f(T{}) for the input dtype t within the entry's dtype class (never with bool for
// Numeric, so that ops without a Bool form need not compile for it).
template <ReduceDtypes D, class F>
void dispatch_reduce(DType t, const char* op, F&& f) {
  if constexpr (D == ReduceDtypes::Float) {
    dispatch_float(t, op, f);
  } else if constexpr (D == ReduceDtypes::Numeric) {
    dispatch_numeric(t, op, [&](auto tag) {
      if constexpr (!std::is_same_v<decltype(tag), bool>) f(tag);
    });
  } else {
    dispatch_all(t, op, f);
  }
}

template <class T>
using Sum = SumOp<sum_acc_t<T>>;
template <class T>
using Nansum = NansumOp<sum_acc_t<T>>;
template <class T>
using Amax = ExtremumOp<compute_t<T>, true>;
template <class T>
using Amin = ExtremumOp<compute_t<T>, false>;
template <class T>
using Argmax = ArgOp<compute_t<T>, true>;
template <class T>
using Argmin = ArgOp<compute_t<T>, false>;

// clang-format off
using Reductions = ReduceList<
    Reduce<OpId::Sum, Sum, ReduceDtypes::All, ReduceDims::List>,
    Reduce<OpId::Nansum, Nansum, ReduceDtypes::All, ReduceDims::List>,
    Reduce<OpId::Amax, Amax, ReduceDtypes::All, ReduceDims::List>,
    Reduce<OpId::Amin, Amin, ReduceDtypes::All, ReduceDims::List>,
    Reduce<OpId::Argmax, Argmax, ReduceDtypes::Numeric, ReduceDims::OneOrFlat>,
    Reduce<OpId::Argmin, Argmin, ReduceDtypes::Numeric, ReduceDims::OneOrFlat>>;
// clang-format on

}  // namespace brisk::kernels
