// compress/prune.h: nn::prune, PyTorch's torch.nn.utils.prune in C++: masks on a module's parameter
// with PyTorch's semantics and state_dict names, global pruning over several modules, custom
// masks, remove (make permanent), the gradual (cubic) sparsity schedule of Zhu and Gupta, and a
// per-module sparsity report. Not here: removing channels physically (compress/prune_channels.h).
//
//   nn::prune::l1_unstructured(*conv, "weight", 0.3);        // 30% of the entries, smallest |w|
//   nn::prune::ln_structured(*conv, "weight", 0.5, 2, 0);    // half the filters, smallest L2 norm
//   nn::prune::global_unstructured({{*conv, "weight"}, {*fc, "weight"}}, nn::prune::Method::L1, 0.8);
//   nn::prune::remove(*conv, "weight");                      // weight = weight_orig * weight_mask
//
// Note [Pruning as PyTorch does it]
// Pruning parameter `weight` of a module moves the parameter (the same tensor, so optimizers
// holding it keep working) to `weight_orig` and registers a buffer `weight_mask` (0/1, the
// parameter's dtype and device). `weight` becomes a derived tensor (Module::set_derived),
// weight_orig * weight_mask, recomputed before each forward in the caller's grad mode (PyTorch
// recomputes it in a forward pre-hook), so weight_orig.grad = grad * mask and the layer's
// forward reads `weight` as before. state_dict: a pruned Linear has "bias", "weight_orig",
// "weight_mask", in PyTorch's order. Pruning again composes as PyTorch's PruningContainer: the
// new method sees the current effective weight, restricted to what is still alive (entries
// whose mask is 1 for unstructured methods, channels with a nonzero mask for structured ones),
// and `amount` counts within that. All state lives in the module (the mask is the history).
//
// Note [Pruning ties]
// PyTorch selects with torch.topk, whose order among equal values is unspecified. brisk sorts
// stably: among entries of equal |w| (or channels of equal norm), the one with the lower flat
// index (channel index) is pruned first. The PyTorch parity tests use tie-free data.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/random.h"
#include "nn/module.h"

namespace brisk::nn::prune {

// How much to prune, as PyTorch's `amount`: a double is a fraction in [0, 1] of the entries (or
// channels) still alive, rounded half to even as Python's round(); an integer is a count. As in
// PyTorch, 1 means one entry and 1.0 means all of them.
class Amount {
 public:
  Amount(double fraction) : fraction_(fraction) {}  // NOLINT(google-explicit-constructor)
  template <std::integral I>
  Amount(I count) : count_(int64_t(count)), is_count_(true) {}  // NOLINT(google-explicit-constructor)
  bool is_count() const { return is_count_; }
  double fraction() const { return fraction_; }
  int64_t count() const { return count_; }
  // The number of the n alive entries to prune; a brisk::Error naming fn when the amount is
  // outside [0, 1], negative, or a count above n.
  int64_t to_prune(int64_t n, const char* fn) const;
  std::string str() const;

 private:
  double fraction_ = 0;
  int64_t count_ = 0;
  bool is_count_ = false;
};

// ---- local pruning of parameter `name` of module m (errors: m has no such parameter, bad
// amount, bad dim). importance_scores (optional, the parameter's shape) replace |w| in the
// ranking, as PyTorch's importance_scores argument.
void identity(Module& m, const std::string& name);  // an all-ones mask
void random_unstructured(Module& m, const std::string& name, Amount amount, Generator* gen = nullptr);
void l1_unstructured(Module& m, const std::string& name, Amount amount, const Tensor& importance_scores = {});
// Prunes whole slices along dim (dim 0 of a conv weight: output channels) with the smallest
// Ln norm over the other dims; n > 0 (1, 2, ...) or infinity.
void ln_structured(Module& m, const std::string& name, Amount amount, double n, int64_t dim,
                   const Tensor& importance_scores = {});
void random_structured(Module& m, const std::string& name, Amount amount, int64_t dim, Generator* gen = nullptr);
// mask: the parameter's shape, 0 = pruned (composed with an existing mask by multiplication).
void custom_from_mask(Module& m, const std::string& name, const Tensor& mask);

// ---- global pruning: ranks the entries of several parameters together.
struct Param {
  Param(Module& m, std::string n) : module(&m), name(std::move(n)) {}
  Param(const ModulePtr& m, std::string n) : module(m.get()), name(std::move(n)) {}
  Module* module = nullptr;
  std::string name{};
};
enum class Method { L1, Random };  // the unstructured methods PyTorch's global_unstructured accepts
void global_unstructured(const std::vector<Param>& params, Method method, Amount amount, Generator* gen = nullptr);

// ---- state
// Makes the pruning of `name` permanent: weight_orig (the same tensor) becomes parameter
// `name` again holding weight_orig * weight_mask; the mask and the derived tensor go. An error
// when `name` is not pruned.
void remove(Module& m, const std::string& name);
bool is_pruned(Module& m);                                 // m or any submodule has a pruned parameter
bool is_pruned(const Module& m, const std::string& name);  // this parameter of m
// The tensor forward sees: weight_orig * weight_mask when pruned, else the parameter.
Tensor effective(Module& m, const std::string& name);
// The mask of a pruned parameter; an all-ones tensor when not pruned.
Tensor mask(Module& m, const std::string& name);

// ---- report
struct SparsityRow {
  std::string module{};     // "features.0" ("" for the root)
  std::string parameter{};  // "weight"
  int64_t elements = 0;
  int64_t zeros = 0;  // zeros of the effective tensor (pruned or not)
  bool pruned = false;
  double sparsity() const { return elements == 0 ? 0.0 : double(zeros) / double(elements); }
};
struct SparsityReport {
  std::vector<SparsityRow> rows{};
  int64_t elements() const;
  int64_t zeros() const;
  double sparsity() const;
  std::string str() const;  // a table, one row per (module, parameter), and a total
};
// Every module's parameters with one of these names (pruned or not), depth first.
SparsityReport sparsity_report(Module& model, const std::vector<std::string>& names = {"weight"});

// ---- gradual pruning (Zhu and Gupta, "To prune, or not to prune", 2017)
// s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3 at t = t0, t0 + dt, ..., t0 + n dt; 0 before
// t0 (dense), s_f after.
struct CubicSchedule {
  double initial_sparsity = 0.0;  // s_i
  double final_sparsity = 0.9;    // s_f
  int64_t begin_step = 0;         // t0
  int64_t num_steps = 10;         // n pruning steps
  int64_t frequency = 1;          // dt: training steps between pruning steps
  double sparsity_at(int64_t step) const;
  bool is_pruning_step(int64_t step) const;
  void check() const;  // 0 <= s_i <= s_f <= 1, n >= 1, dt >= 1, t0 >= 0
};

// Call step(t) once per training step: at the schedule's pruning steps it prunes (L1, masks
// only ever grow) so that the masked entries reach round(target * entries), half to even, over all the
// parameters together (global) or in each parameter alone.
class GradualPruner {
 public:
  GradualPruner(std::vector<Param> params, CubicSchedule schedule, bool global = true);
  bool step(int64_t step);  // true when it pruned at this step
  // Masked entries / entries over the parameters (the mask's zeros, not accidental zeros).
  double sparsity() const;
  const CubicSchedule& schedule() const { return schedule_; }

 private:
  std::vector<Param> params_;
  CubicSchedule schedule_;
  bool global_;
};

}  // namespace brisk::nn::prune
