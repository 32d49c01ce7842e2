// optim/optimizer.h: Optimizer, the base of SGD, Adam, AdamW, RMSprop and Adagrad: parameter
// groups (each with its own typed options), per-parameter state keyed by parameter NAME,
// zero_grad, and a state_dict made of tensors plus a map of scalars (so a training checkpoint
// can store it as safetensors: tensors + JSON metadata).
// Hyperparameters are also reachable by name (`get(group, "lr")`), as in PyTorch's group
// dicts; LR schedulers use that. Not here: the update rules (sgd.h, adam.h, ...).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "optim/option.h"

namespace brisk::optim {

// Same type as nn::NamedTensors (Module::named_parameters() passes straight in).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Scalars = std::map<std::string, double>;

// Saved counters (steps, epochs, group and parameter counts) travel as doubles in Scalars.
// scalar_count turns a value into an integer, or throws a brisk::Error naming `who` and the
// key when it is not a whole number within +-2^53 (NaN, inf, 1e300 or 2.5 from a corrupt file
// would otherwise be undefined behaviour in the cast). Each check_state_dict runs it on every
// counter its load_state_dict casts.
bool is_count_value(double value);
int64_t scalar_count(double value, const std::string& key, const char* who);

// An optimizer's saved state. Keys:
//   tensors: "state.<param name>.<buffer>" (exp_avg, exp_avg_sq, momentum_buffer, ...)
//   scalars: "state.<param name>.step", "state.<param name>.<number>" for the per-parameter
//            numbers an optimizer declares (NAdam's mu_product), "group.<i>.<option>" (lr, weight_decay, beta1, ...),
//            "group.<i>.<key>" for keys schedulers keep in a group (initial_lr),
//            "group.<i>.num_params", "num_groups".
struct OptimizerState {
  NamedTensors tensors{};
  Scalars scalars{};
};

// One parameter's state: how many updates it has had, its named buffers and the named numbers
// some optimizers keep per parameter (NAdam's running momentum product "mu_product").
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers{};
  Scalars numbers{};
};

// The parameters of one group and the extra keys schedulers store in it ("initial_lr").
struct ParamGroup {
  std::vector<std::string> names{};
  std::vector<Tensor> params{};
  Scalars extras{};
};

// Names "0", "1", ... for parameters given without names, counting on from `first`.
NamedTensors number_params(const std::vector<Tensor>& params, size_t first = 0);

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (frozen ones and those without a
  // gradient are skipped). Runs under NoGradGuard. Refused while stepping in backward.
  void step();
  virtual const char* name() const = 0;

  // Note [Stepping in backward] (optim/optimizer.cpp): with `on`, backward updates each
  // parameter as soon as its gradient is complete and then drops that gradient, so the whole
  // model's gradients are never held at once; step() and zero_grad() are not called. Off
  // again with `false` (also when the optimizer is destroyed). Not with GradScaler, gradient
  // clipping, accumulation over micro-batches or DDP: each needs every gradient before a step.
  void step_in_backward(bool on = true);
  bool steps_in_backward() const { return !backward_hooks_.empty(); }

  // Clears the gradients of all parameters: drops them (set_to_none) or fills them with 0.
  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  const ParamGroup& group(size_t g) const;
  size_t num_params() const;

  // Hyperparameters by name: the group's typed options ("lr", "momentum", "beta1", ...;
  // booleans read as 0/1) and the extra keys schedulers add ("initial_lr").
  bool has(size_t g, const std::string& key) const;
  double get(size_t g, const std::string& key) const;
  void set(size_t g, const std::string& key, double value);
  bool has_option(const std::string& key) const;  // an option of this optimizer (any group)
  double lr(size_t g) const { return get(g, "lr"); }
  void set_lr(size_t g, double lr) { set(g, "lr", lr); }

  // The state of one parameter (nullptr before its first update).
  const ParamState* state(const std::string& param_name) const;

  // F32 master weights (Note [Master weights] in optim/optimizer.cpp): with `on`, every F16 or
  // BF16 parameter is stepped through an F32 copy kept in its state ("master_weight") and
  // rounded back to the parameter after each step; its other state buffers are F32 too.
  void use_master_weights(bool on = true) { master_weights_ = on; }
  bool master_weights() const { return master_weights_; }

  // A parameter taking part in a step, as the update rules see it (grad cast to its dtype).
  // With master weights, `param` is the F32 master copy and `model_param` the 16-bit
  // parameter it is rounded back to (undefined otherwise).
  struct Slot {
    Tensor param;
    Tensor grad;
    ParamState* state;
    Tensor model_param;
  };

  OptimizerState state_dict() const;
  // Throws a brisk::Error naming the first bad key unless `state` is a state_dict of an
  // optimizer of this kind over parameters of the same names and groups: counts that match,
  // every option of every group present, no unexpected key, every buffer shaped like its
  // parameter. Changes nothing (a training checkpoint checks every part before loading any).
  void check_state_dict(const OptimizerState& state) const;
  // check_state_dict, then restores `state`; buffers are copied to each parameter's device and
  // dtype. A refused state leaves the optimizer as it was.
  void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer() = default;

  // The typed options of group g, one call per field: f(name, &double_field, nullptr) or
  // f(name, nullptr, &bool_field).
  using OptionVisitor = std::function<void(const char* key, double* number, bool* flag)>;
  virtual void visit_options(size_t g, const OptionVisitor& f) = 0;
  virtual void check_options(size_t g) const {}
  // The names of the per-parameter numbers (ParamState::numbers) this optimizer keeps; a
  // state_dict may hold only these besides "step".
  virtual std::vector<std::string> param_number_keys() const { return {}; }
  // The update rule: one step of group g's active parameters.
  virtual void step_group(size_t g, std::vector<Slot>& slots) = 0;
  void add_group(NamedTensors params);

  // The parameters of group g that take part in this step: requires grad, grad defined.
  std::vector<Slot> active_slots(size_t g);
  // Parameter i of group g as a slot; false when it does not take part (frozen, no gradient).
  bool slot_of(size_t g, size_t i, Slot& slot);

  std::vector<ParamGroup> groups_;
  std::unordered_map<std::string, ParamState> state_;

 private:
  // Whether parameter p steps through an F32 master copy.
  bool uses_master(const Tensor& p) const {
    return master_weights_ && (p.dtype() == DType::F16 || p.dtype() == DType::BF16);
  }
  bool master_weights_ = false;
  // One hook per parameter while stepping in backward (groups' order).
  std::vector<HookHandle> backward_hooks_{};
  void hook_for_backward(size_t g, size_t i);
  void step_one(size_t g, size_t i);
};

// The part of an optimizer that knows its options type: Options must offer
// `template <class F> void visit(F&& f)` calling f(name, field) for every field.
template <class Options>
class OptimizerWith : public Optimizer {
 public:
  const Options& defaults() const { return defaults_; }
  Options& options(size_t g) { return options_.at(g); }
  const Options& options(size_t g) const { return options_.at(g); }

  // Note [Group options inherit]
  // Adds parameters as a new group. Its options are the optimizer's (those it was built with)
  // except for the fields `options` sets: `add_param_group(biases, {.weight_decay = 0.0})`
  // keeps the optimizer's lr, betas and the rest, as PyTorch's param groups do. (Before, every
  // field not written fell back to the struct's default, so such a group silently trained at
  // another learning rate.)
  void add_param_group(NamedTensors params, const Options& options) {
    options_.push_back(inherit(options));
    try {
      check_options(options_.size() - 1);
      add_group(std::move(params));
    } catch (...) {
      options_.pop_back();  // a refused group leaves the optimizer as it was
      throw;
    }
  }
  void add_param_group(NamedTensors params) { add_param_group(std::move(params), defaults_); }
  void add_param_group(const std::vector<Tensor>& params, const Options& options) {
    add_param_group(number_params(params, num_params()), options);
  }
  void add_param_group(const std::vector<Tensor>& params) { add_param_group(params, defaults_); }

 protected:
  // The derived constructor adds the first group (virtual calls work only from there).
  explicit OptimizerWith(const Options& defaults) : defaults_(defaults) {}

  void visit_options(size_t g, const OptionVisitor& f) override {
    options_.at(g).visit([&](const char* key, auto& field) {
      using F = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<F, Option<bool>>) {
        f(key, nullptr, &field.ref());
      } else if constexpr (std::is_same_v<F, Option<double>>) {
        f(key, &field.ref(), nullptr);
      } else {
        static_assert(is_option<F>::value, "option fields are Option<double> or Option<bool>");
      }
    });
  }

  // defaults_ with the fields `group` sets (fields are visited in the same order in both).
  Options inherit(const Options& group) const {
    Options merged = defaults_;
    Options given = group;
    std::vector<void*> slots;
    merged.visit([&](const char*, auto& field) { slots.push_back(&field); });
    size_t i = 0;
    given.visit([&](const char*, auto& field) {
      using F = std::decay_t<decltype(field)>;
      if (field.is_set()) *static_cast<F*>(slots[i]) = field.get();
      ++i;
    });
    return merged;
  }

  Options defaults_;
  std::vector<Options> options_;
};

}  // namespace brisk::optim
