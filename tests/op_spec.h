// tests/op_spec.h: the op conformance table. Every op in engine/ops.def is covered by at least
// one OpSpec (a coverage test enforces it). One runner (test_op_specs.cpp) checks each spec's
// cases: forward against a plain reference in F64, non-contiguous inputs against contiguous
// ones, other dtypes against F64 within per-dtype tolerances, and gradcheck in F64. The CUDA
// tests run the same table against the CPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "brisk.h"

namespace brisk::test {

struct OpCase {
  std::string label;           // what the case exercises: "broadcast (3, 1) with (4)"
  std::vector<Tensor> inputs;  // on the CPU; floating inputs in F64
};

struct OpSpec {
  std::string name;
  std::vector<OpId> covers;  // ops this spec exercises (for the coverage test)
  TensorFn fn;               // the op through the public API
  std::function<std::vector<OpCase>()> cases;
  // Expected F64 output computed without brisk ops (plain loops over to_vector values);
  // nullptr when `fn` is itself checked otherwise (say, against PyTorch data).
  TensorFn reference;
  bool grad = true;                          // gradcheck the floating inputs in F64
  std::vector<DType> dtypes = {DType::F32};  // also run in these, compare with F64
  bool cuda = true;                          // run in the CUDA-vs-CPU test
  double tol_f32 = 1e-5, tol_half = 1e-2;
  GradcheckOptions gradcheck_options = {};
};

// The registry; spec files add to it with a static REGISTER_SPECS block.
std::vector<OpSpec>& op_specs();
struct SpecRegistrar {
  explicit SpecRegistrar(void (*add)(std::vector<OpSpec>&)) { add(op_specs()); }
};
#define BRISK_SPEC_CAT2(a, b) a##b
#define BRISK_SPEC_CAT(a, b) BRISK_SPEC_CAT2(a, b)
#define REGISTER_SPECS(fn) static ::brisk::test::SpecRegistrar BRISK_SPEC_CAT(spec_registrar_, __LINE__)(fn)

// ---- helpers for writing specs
// Deterministic values in [lo, hi) (F64 CPU), from a seed.
Tensor uniform_values(const Shape& shape, double lo = -1, double hi = 1, uint64_t seed = 1, DType dtype = DType::F64);
// Same values, non-contiguous layout (every other element of a wider buffer).
Tensor noncontiguous(const Tensor& t);
// Requires grad on a copy of `t` when it is floating.
Tensor leaf(const Tensor& t);
// Integer tensor from values.
Tensor ints(const std::vector<int64_t>& values, const Shape& shape);
// Reference for elementwise ops: broadcasts the inputs (any dtypes, read as double) and
// applies f to each element tuple; result dtype `out`.
Tensor map_reference(const std::vector<Tensor>& inputs, const std::function<double(const std::vector<double>&)>& f,
                     DType out = DType::F64);
// Tolerance for comparing dtype `t` with the F64 result.
double tolerance(const OpSpec& spec, DType t);

}  // namespace brisk::test
