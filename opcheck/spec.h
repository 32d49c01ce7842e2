// opcheck/spec.h: the op conformance table (brisk::opcheck, Note [Op checker] in
// opcheck/check.cpp). Every op in engine/ops.def is covered by at least one OpSpec
// (tests/test_op_specs.cpp enforces it): the op through the public API, cases of inputs, and a
// plain-loop F64 reference. opcheck/check.h runs the checks (reference, layouts, dtypes,
// gradients, a replacement against the built-in kernel); tests/test_cuda.cpp runs the same
// table on CUDA against the CPU. Spec files are opcheck/specs_<family>.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/gradcheck.h"
#include "engine/op.h"
#include "engine/tensor.h"

namespace brisk::opcheck {

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
  // Also run in I8, U8, I32 and I64 (floating inputs rounded to small integers) wherever the
  // op accepts them, and compare exactly with F64 on the same values (docs/KERNELS.md, Dtypes).
  bool integers = true;
  // The op may refuse a layout that its dense twin passes (view needs compatible strides): a
  // refusal is then not a failure, a wrong result still is.
  bool rejects_layouts = false;
  double tol_f32 = 1e-5, tol_half = 1e-2;
  GradcheckOptions gradcheck_options = {};
};

// The table, built on first use (thread-safe) by the add_<family>_specs functions of the spec
// files, in a fixed order.
const std::vector<OpSpec>& op_specs();
// The specs whose `covers` lists `op` (empty when none).
std::vector<const OpSpec*> specs_for(OpId op);

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
// Matrices for linear-algebra cases (the last two dims): transpose, identity, random entries
// plus n on the diagonal (far from singular), X X^T + n I (symmetric positive-definite), and
// the symmetric part (a + a^T) / 2.
Tensor mT(const Tensor& x);
Tensor eye_like(int64_t n);
Tensor well_conditioned(const Shape& shape, uint64_t seed);
Tensor spd(const Shape& shape, uint64_t seed);
Tensor sym(const Tensor& a);
// The reductions and label smoothings every cross-entropy spec runs (cross_entropy and
// linear_cross_entropy).
struct CrossEntropyVariant {
  std::string name{};
  Reduction reduction = Reduction::Mean;
  double eps = 0;
};
const std::vector<CrossEntropyVariant>& cross_entropy_variants();

}  // namespace brisk::opcheck
