// tests/test_op_specs.cpp: runs the op conformance table (opcheck/spec.h) on the CPU through
// brisk::opcheck's checker (opcheck/check.h): one test per kind of check, so a failure names it.
#include <doctest/doctest.h>

#include <set>

#include "opcheck/check.h"

using namespace brisk;
using namespace brisk::opcheck;

namespace {

// Runs every spec with only the checks `options` leaves on; each failing spec is one failure
// with the checker's report (its cases, dtypes and layouts).
void check_table(CheckOptions options) {
  int64_t comparisons = 0;
  for (const OpSpec& spec : op_specs()) {
    CheckReport r = check_spec(spec, options);
    comparisons += r.comparisons;
    CHECK_MESSAGE(r.failed == 0, r.str());
  }
  CHECK(comparisons > 0);
}

}  // namespace

TEST_CASE("op specs: every op in ops.def is covered by a spec") {
  std::set<int> covered;
  for (const OpSpec& s : op_specs()) {
    for (OpId id : s.covers) covered.insert(int(id));
  }
  for (int i = 0; i < kNumOps; ++i) {
    CHECK_MESSAGE(covered.count(i), "op " << std::string(op_name(OpId(i))) << " has no spec in opcheck/specs_*.cpp");
  }
}

TEST_CASE("op specs: forward in F64 matches the plain reference, other dtypes match F64") {
  check_table({.gradients = false, .layouts = {}});
}

TEST_CASE("op specs: every layout gives the same result as the same values dense, in every dtype") {
  check_table({.reference = false, .gradients = false});
}

TEST_CASE("op specs: gradients match finite differences in F64") {
  check_table({.reference = false, .dtypes = false, .integers = false, .layouts = {}});
}
