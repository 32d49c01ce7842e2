// kernels/scan_ops.h: the scans' arithmetic, written once for every backend: each scan is a
// BRISK_HD struct (identity, step) that the CPU kernel (kernels/cpu/scan.cpp) and the CUDA
// kernel (kernels/cuda/scan.cu) both run along every line, and THE list of scans (at the end)
// that both backends register. See Note [Scan contract].
// Not here: how lines are found and walked (the backends), inference and backward
// (engine/ops/scan.cpp), argsort (not a scan).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "engine/macros.h"
#include "engine/op.h"

namespace brisk::kernels {

// Note [Scan contract]
// A scan op is a small struct template over its accumulator A with
//   A identity() const;         the scan before the first element
//   A step(A acc, A v) const;   acc with the next element v appended, left to right
// all const and BRISK_HD. A backend walks each line in order, starting from identity(), and
// writes every step's value rounded to the element type, so both backends add in the same
// order and give the same bits. The accumulator is scan_acc_t: double for every floating
// dtype and int64 for integers, as PyTorch's CPU kernels accumulate.
template <class T>
using scan_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

template <class A>
struct CumsumOp {
  BRISK_INLINE A identity() const { return A(0); }
  BRISK_INLINE A step(A acc, A v) const { return acc + v; }
};

template <class A>
struct CumprodOp {
  BRISK_INLINE A identity() const { return A(1); }
  BRISK_INLINE A step(A acc, A v) const { return acc * v; }
};

// log(exp(acc) + exp(v)) without overflow: max + log1p(exp(min - max)). NaN propagates; an
// infinite pair of one sign is that infinity (where min - max would be NaN), as
// torch.logcumsumexp.
template <class A>
struct LogcumsumexpOp {
  BRISK_INLINE A identity() const { return -std::numeric_limits<A>::infinity(); }
  BRISK_INLINE A step(A acc, A v) const {
    if (acc != acc || v != v) return acc + v;
    const A hi = acc < v ? v : acc;
    const A lo = acc < v ? acc : v;
    if (lo == hi && (hi == std::numeric_limits<A>::infinity() || hi == -std::numeric_limits<A>::infinity())) return hi;
    return hi + std::log1p(std::exp(lo - hi));
  }
};

// ---- THE list of scans, registered by both backends from this one place (register_scans in
// kernels/cpu/scan.cpp and kernels/cuda/scan.cu). An entry names the op, its scan struct and
// the dtypes it has kernels for:
//   Scan<op, ScanOp, dtypes>
// Float: F32, F64, F16, BF16. Numeric: every dtype but Bool (the public functions cast
// integers to I64 first).
enum class ScanDtypes { Float, Numeric };
template <OpId Id, template <class> class ScanOp, ScanDtypes Dtypes>
struct Scan {
  static constexpr OpId id = Id;
  template <class A>
  using Op = ScanOp<A>;
  static constexpr ScanDtypes dtypes = Dtypes;
};
template <class... E>
struct ScanList {};

// clang-format off
using Scans = ScanList<
    Scan<OpId::Cumsum, CumsumOp, ScanDtypes::Numeric>,
    Scan<OpId::Cumprod, CumprodOp, ScanDtypes::Numeric>,
    Scan<OpId::Logcumsumexp, LogcumsumexpOp, ScanDtypes::Float>>;
// clang-format on

}  // namespace brisk::kernels
