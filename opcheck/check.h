// opcheck/check.h: checking an op's kernels against its specs (opcheck/spec.h), for the test
// suite and for a researcher who replaced a kernel (engine/kernel_override.h). Link
// brisk::opcheck (find_package(brisk) provides it); no test framework is needed.
//
//   brisk::KernelOverride guard(brisk::op_id("relu"), brisk::DeviceType::CPU, my_relu, {brisk::DType::F32});
//   brisk::opcheck::CheckReport r = brisk::opcheck::check_op("relu", {.against_builtin = true});
//   std::printf("%s", r.str().c_str());  // what ran, and every failure with its case, dtype and layout
//   return r.ok() ? 0 : 1;
//
// What is checked, per spec that covers the op and per case (Note [Op checker] in check.cpp):
// the F64 result against the spec's plain reference; every dtype (the spec's floating ones, and
// I8/U8/I32/I64 where the op accepts them) against F64; every input layout against the same
// values dense, in every dtype; gradients by finite differences in F64; and, with
// against_builtin, the op as it runs now bit for bit against the built-in kernel.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kernel_override.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {

// How a check lays out an input with the same logical values (contiguous is the reference).
enum class Layout {
  Contiguous,
  Strided,     // every other element of the last dim of a wider buffer
  Transposed,  // the last two dims swapped in memory (dim >= 2)
  Permuted,    // all dims reversed in memory (dim >= 3)
  Offset,      // contiguous at a storage offset of 5 elements
  Expanded,    // stride 0 in the first dim of size > 1: its first slice broadcast (values change)
};
inline constexpr Layout kAllLayouts[] = {Layout::Contiguous, Layout::Strided, Layout::Transposed,
                                         Layout::Permuted,   Layout::Offset,  Layout::Expanded};
const char* layout_name(Layout layout);
// `t` in `layout`; `t` itself when the layout does not apply (a transposed 1-D tensor). For
// Expanded the values are those of the broadcast first slice.
Tensor in_layout(const Tensor& t, Layout layout);

struct CheckOptions {
  bool reference = true;         // F64 against the spec's plain reference (1e-9)
  bool dtypes = true;            // other dtypes against F64, within the spec's tolerances
  bool integers = true;          // I8, U8, I32, I64 where the op accepts them, exactly
  bool gradients = true;         // gradcheck in F64
  bool against_builtin = false;  // also: bit for bit against the built-in CPU kernel of the op
  std::vector<Layout> layouts = {std::begin(kAllLayouts), std::end(kAllLayouts)};
  int max_failures = 20;  // failures kept in the report (all are counted)
};

struct CheckFailure {
  std::string spec;    // "relu"
  std::string label;   // the case: "(3, 4)"
  std::string check;   // "reference", "dtype", "layout", "gradient", "built-in", "error"
  std::string dtype;   // "F32"
  std::string layout;  // "transposed" (or "" when not a layout check)
  std::string detail;  // the first differing element, got and expected, or the error
};

struct CheckReport {
  std::string op;           // what was checked: an op name, or a spec's name
  int specs = 0;            // specs run
  int cases = 0;            // cases run
  int64_t comparisons = 0;  // results compared
  int64_t failed = 0;       // comparisons that failed (failures holds the first max_failures)
  std::vector<CheckFailure> failures;
  std::vector<std::string> dtypes;   // dtypes checked
  std::vector<std::string> skipped;  // what could not run, and why ("I8: not accepted by abs")
  bool ok() const { return failed == 0 && comparisons > 0; }
  std::string str() const;  // a summary line, then one line per kept failure
};

// Every spec covering `op` (engine/ops.def's name, or its OpId). brisk::Error for an unknown op.
CheckReport check_op(std::string_view op, const CheckOptions& options = {});
CheckReport check_op(OpId op, const CheckOptions& options = {});
// One spec (against_builtin compares with the built-in kernels of every op the spec covers).
CheckReport check_spec(const OpSpec& spec, const CheckOptions& options = {});

// ---- A/B timing (warm-up, best of N, a thread sweep), for a replacement against the built-in.
struct TimingOptions {
  int warmup = 3;                 // runs of each before timing
  int reps = 20;                  // timed runs of each, interleaved (A B A B ...); the best counts
  std::vector<int> threads = {};  // thread counts to sweep (brisk::set_num_threads); empty: as now
};
struct TimingRow {
  int threads = 0;
  double a_us = 0, b_us = 0;                                     // best time of one run
  double speedup() const { return b_us > 0 ? a_us / b_us : 0; }  // > 1: b is faster
};
// Times `a` against `b`. Restores the thread count.
std::vector<TimingRow> time_ab(const std::function<void()>& a, const std::function<void()>& b,
                               const TimingOptions& options = {});
// Times `run` with the built-in CPU kernel of `op` (a) against the kernels installed now (b).
std::vector<TimingRow> time_against_builtin(OpId op, const std::function<void()>& run,
                                            const TimingOptions& options = {});
// A small table: threads, a, b, b's speedup.
std::string timing_table(const std::vector<TimingRow>& rows, std::string_view a_name = "built-in",
                         std::string_view b_name = "replacement");

}  // namespace brisk::opcheck
