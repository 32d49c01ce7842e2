// engine/nonfinite.h: where the first Inf/NaN came from. Scopes name the code ops run in
// (nn::Module::operator() opens one per module, named by its path, "layer2.0.conv1", while
// scopes are tracked); NonfiniteWatch is the opt-in mode that checks every op's outputs in
// forward and every backward formula's gradients and records, without throwing, the first op
// that produced a non-finite value, with its scope and phase. Anomaly mode (grad_mode.h)
// throws instead and names the scope as well. See Note [Overflow provenance] in
// optim/grad_scaler.cpp for what the gradient scaler reports on its own.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tensor.h"

namespace brisk {

// ---- scopes: a thread-local stack of names (borrowed; the owner outlives the guard)
class ScopeGuard {
 public:
  explicit ScopeGuard(const std::string& name);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
};
// The innermost open scope's name, or "" outside every scope.
const std::string& current_scope();
// True while anomaly mode or a NonfiniteWatch is on for this thread: only then do modules
// open scopes and the tape record them (one branch per module call otherwise).
bool scopes_tracked();

// Whether every element of a floating tensor is finite (true for other dtypes). Any device
// and layout; used by the watch, anomaly mode and tests.
bool all_finite(const Tensor& t);

// ---- the watch
struct NonfiniteEvent {
  std::string op{};     // "conv2d", "matmul"; in backward the op whose formula ran
  std::string scope{};  // the module path, "" outside every module
  bool backward = false;
  std::string tensor{};  // the offending output or gradient, as Tensor::str()
  std::string inner{};   // in backward: the op inside the formula that produced it ("conv2d_backward_input")
  // "layer2.0.conv1 (conv2d backward)", or "conv2d forward" without a scope.
  std::string describe() const;
};

// While alive (one per thread at a time; nesting restores the outer one), every dispatched
// op's floating outputs and every backward formula's floating gradients are checked. The
// first non-finite one is recorded; later ones are counted. Costs one pass over each output
// (see examples/bench/bench_amp.cpp for the measured overhead).
class NonfiniteWatch {
 public:
  NonfiniteWatch();
  ~NonfiniteWatch();
  NonfiniteWatch(const NonfiniteWatch&) = delete;
  NonfiniteWatch& operator=(const NonfiniteWatch&) = delete;

  bool found() const { return count_ > 0; }
  const NonfiniteEvent& first() const { return first_; }
  int64_t count() const { return count_; }  // outputs found non-finite since the last reset
  void reset();

  // Used by dispatch and the backward engine.
  void report(const char* op, const std::string& scope, bool backward, const Tensor& t);

 private:
  NonfiniteWatch* prev_;
  NonfiniteEvent first_;
  int64_t count_ = 0;
};

namespace detail {
// The watch of this thread, or null.
NonfiniteWatch* active_watch();
// Runs the checks of anomaly mode (throws) and of the watch (records) on an op's outputs.
// Inside a BackwardScope the report names that node's op and scope, in the backward phase.
void check_outputs(const char* op, const std::string& scope, bool backward, std::span<const Tensor> out);

// Opened by the backward engine around one node's formula while scopes are tracked.
class BackwardScope {
 public:
  BackwardScope(const std::string& op, const std::string& scope);
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
  const std::string& op;
  const std::string& scope;

 private:
  BackwardScope* prev_;
};
}  // namespace detail

}  // namespace brisk
