// engine/gradcheck.h: brisk::gradcheck, finite differences against backward, public so that
// users can check their own ops and composite functions. Inputs that require grad must be
// F64 (the CPU F64 path is brisk's reference); the output may have any shape: it is reduced to
// a scalar by a fixed random projection, so one backward checks every input element. With
// `jacobians` on, the full numeric and analytic Jacobians are built and compared instead (one
// backward per output element). gradgradcheck checks second derivatives the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace brisk {

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise = true;  // throw brisk::Error listing the mismatches (else return false)
  uint64_t seed = 1234;
  int64_t max_reported = 10;  // mismatching elements listed in the report and the error
  bool jacobians = false;     // build and compare the full Jacobians (kept in the report)
};

struct GradcheckMismatch {
  size_t input = 0;             // position in the inputs given
  int64_t element = 0;          // flat (row-major) index into that input
  int64_t output = -1;          // flat index into the output (Jacobian mode); -1: the projected check
  double analytic = 0;          // from backward
  double numeric = 0;           // from central differences
  std::string element_index{};  // the element as an index, "[1, 2]"
  std::string output_index{};   // likewise for the output element (Jacobian mode)
};

struct GradcheckReport {
  std::string check = "gradcheck";  // or "gradgradcheck": names the check in str()
  bool ok = true;
  int64_t checked = 0;                          // values compared
  int64_t num_mismatches = 0;                   // all of them
  std::vector<GradcheckMismatch> mismatches{};  // the first max_reported
  // Jacobian mode: per input that requires grad (in order), (output numel, input numel) F64.
  std::vector<Tensor> numeric_jacobians{}, analytic_jacobians{};
  std::string str() const;  // a summary line, then one line per listed mismatch
};

using TensorFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// True when, for every input that requires grad, d(<f(inputs), v>)/d(input) from backward
// matches central differences within atol + rtol * |numeric|. Does not change the inputs.
bool gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
// The same check, returning what it found instead of raising.
GradcheckReport gradcheck_report(const TensorFn& f, const std::vector<Tensor>& inputs,
                                 const GradcheckOptions& options = {});

// Second derivatives (PyTorch's gradgradcheck): gradcheck of
//   (inputs, v) -> d<f(inputs), v>/d(inputs)
// for a fixed random F64 grad_output v, with respect to the inputs and v. f's output must be
// F64. Needs a backward made of differentiable ops (create_graph).
bool gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
GradcheckReport gradgradcheck_report(const TensorFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

}  // namespace brisk
