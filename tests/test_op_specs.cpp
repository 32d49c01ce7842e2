// tests/test_op_specs.cpp: runs the op conformance table (tests/op_spec.h) on the CPU.
#include <doctest/doctest.h>

#include <set>

#include "tests/op_spec.h"

using namespace brisk;
using namespace brisk::test;

namespace {

std::vector<Tensor> with_dtype(const std::vector<Tensor>& in, DType t) {
  std::vector<Tensor> out;
  for (const Tensor& x : in) out.push_back(is_floating(x.dtype()) ? cast(x, t) : x);
  return out;
}

std::string where(const OpSpec& s, const OpCase& c) { return s.name + " [" + c.label + "]"; }

template <class Body>
void for_each_case(Body&& body) {
  for (const OpSpec& spec : op_specs()) {
    for (const OpCase& c : spec.cases()) {
      INFO(where(spec, c));
      try {
        body(spec, c);
      } catch (const std::exception& e) {
        FAIL_CHECK(where(spec, c) << " threw: " << e.what());
      }
    }
  }
}

}  // namespace

TEST_CASE("op specs: every op in ops.def is covered by a spec") {
  std::set<int> covered;
  for (const OpSpec& s : op_specs()) {
    for (OpId id : s.covers) covered.insert(int(id));
  }
  for (int i = 0; i < kNumOps; ++i) {
    CHECK_MESSAGE(covered.count(i), "op " << std::string(op_name(OpId(i))) << " has no spec in tests/specs_*.cpp");
  }
}

TEST_CASE("op specs: forward in F64 matches the plain reference") {
  for_each_case([](const OpSpec& spec, const OpCase& c) {
    if (!spec.reference) return;
    Tensor got = spec.fn(c.inputs);
    Tensor want = spec.reference(c.inputs);
    REQUIRE_MESSAGE(got.sizes() == want.sizes(), "shape ", got.sizes(), " vs reference ", want.sizes());
    CHECK_MESSAGE(allclose(cast(got, DType::F64), cast(want, DType::F64), 1e-9, 1e-9), "got ", got, "\nwant ", want);
  });
}

TEST_CASE("op specs: non-contiguous inputs give the same result as contiguous ones") {
  for_each_case([](const OpSpec& spec, const OpCase& c) {
    Tensor dense = spec.fn(c.inputs);
    std::vector<Tensor> strided;
    for (const Tensor& x : c.inputs) strided.push_back(noncontiguous(x));
    Tensor got = spec.fn(strided);
    CHECK_MESSAGE(allclose(cast(got, DType::F64), cast(dense, DType::F64), 1e-12, 1e-12), "strided ", got, "\ndense ",
                  dense);
  });
}

TEST_CASE("op specs: other dtypes match F64 within their tolerance") {
  for_each_case([](const OpSpec& spec, const OpCase& c) {
    Tensor want = spec.fn(c.inputs);
    for (DType t : spec.dtypes) {
      INFO("dtype " << dtype_name(t));
      Tensor got = spec.fn(with_dtype(c.inputs, t));
      double tol = tolerance(spec, t);
      CHECK_MESSAGE(allclose(cast(got, DType::F64), cast(want, DType::F64), tol, tol), dtype_name(t), " ", got,
                    "\nF64 ", want);
    }
  });
}

TEST_CASE("op specs: gradients match finite differences in F64") {
  for_each_case([](const OpSpec& spec, const OpCase& c) {
    if (!spec.grad) return;
    std::vector<Tensor> in;
    bool any = false;
    for (const Tensor& x : c.inputs) {
      in.push_back(leaf(x));
      any = any || in.back().requires_grad();
    }
    if (!any) return;
    CHECK(gradcheck(spec.fn, in, spec.gradcheck_options));
  });
}
