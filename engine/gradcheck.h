// engine/gradcheck.h: brisk::gradcheck, finite differences against backward, public so that
// users can check their own ops and composite functions. Inputs that require grad must be
// F64 (the CPU F64 path is brisk's reference); the output may have any shape: it is reduced to
// a scalar by a fixed random projection, so one backward checks every input element.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace brisk {

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise = true;  // throw brisk::Error describing the first mismatch (else return false)
  uint64_t seed = 1234;
};

using TensorFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// True when, for every input that requires grad, d(<f(inputs), v>)/d(input) from backward
// matches central differences within atol + rtol * |numeric|. Does not change the inputs.
bool gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace brisk
