// optim/optimizer.cpp: the Optimizer base: groups, options by name, zero_grad, and the
// state_dict with its side-effect-free check (check_state_dict, which load_state_dict runs
// first, so a refused state changes nothing). Not here: the update rules (sgd.cpp, adam.cpp,
// ...) or where a state is stored (train/checkpoint.cpp).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::optim {

bool is_count_value(double value) {
  constexpr double kMax = 9007199254740992.0;  // 2^53: every integer up to it is a double
  return std::isfinite(value) && value == std::floor(value) && std::fabs(value) <= kMax;
}

int64_t scalar_count(double value, const std::string& key, const char* who) {
  BRISK_CHECK(is_count_value(value), who, ": load_state_dict: key '", key, "' is ", value, ", not a whole number");
  return int64_t(value);
}

NamedTensors number_params(const std::vector<Tensor>& params, size_t first) {
  NamedTensors out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(first + i), params[i]);
  return out;
}

void Optimizer::add_group(NamedTensors params) {
  BRISK_CHECK(!params.empty(), name(), ": a parameter group needs at least one parameter");
  ParamGroup group;
  for (auto& [param_name, t] : params) {
    BRISK_CHECK(t.defined(), name(), ": parameter '", param_name, "' is undefined");
    BRISK_CHECK(is_floating(t.dtype()), name(), ": parameter '", param_name, "' has dtype ", t.dtype(),
                " (floating dtypes only)");
    BRISK_CHECK(param_name.find_first_of(" \t\n") == std::string::npos, name(), ": parameter name '", param_name,
                "' contains white space");
    for (const ParamGroup& other : groups_) {
      for (size_t i = 0; i < other.params.size(); ++i) {
        BRISK_CHECK(other.names[i] != param_name, name(), ": parameter name '", param_name, "' appears in two groups");
        BRISK_CHECK(other.params[i].impl() != t.impl(), name(), ": parameter '", param_name,
                    "' is already in a group (as '", other.names[i], "')");
      }
    }
    for (size_t i = 0; i < group.params.size(); ++i) {
      BRISK_CHECK(group.names[i] != param_name, name(), ": parameter name '", param_name, "' appears twice");
      BRISK_CHECK(group.params[i].impl() != t.impl(), name(), ": parameter '", param_name, "' appears twice (also as '",
                  group.names[i], "')");
    }
    group.names.push_back(param_name);
    group.params.push_back(t);
  }
  groups_.push_back(std::move(group));
  if (steps_in_backward()) {  // a group added while stepping in backward steps there too
    for (size_t i = 0; i < groups_.back().params.size(); ++i) hook_for_backward(groups_.size() - 1, i);
  }
}

const ParamGroup& Optimizer::group(size_t g) const {
  BRISK_CHECK(g < groups_.size(), name(), ": group ", g, " out of range (", groups_.size(), " groups)");
  return groups_[g];
}

size_t Optimizer::num_params() const {
  size_t n = 0;
  for (const ParamGroup& g : groups_) n += g.params.size();
  return n;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) p.zero_grad(set_to_none);
  }
}

bool Optimizer::has(size_t g, const std::string& key) const {
  if (group(g).extras.count(key)) return true;
  bool found = false;
  const_cast<Optimizer*>(this)->visit_options(g, [&](const char* k, double*, bool*) { found = found || key == k; });
  return found;
}

double Optimizer::get(size_t g, const std::string& key) const {
  auto it = group(g).extras.find(key);
  if (it != group(g).extras.end()) return it->second;
  double value = NAN;
  bool found = false;
  const_cast<Optimizer*>(this)->visit_options(g, [&](const char* k, double* number, bool* flag) {
    if (key != k) return;
    found = true;
    value = number ? *number : double(*flag);
  });
  BRISK_CHECK(found, name(), ": group ", g, " has no option '", key, "'");
  return value;
}

void Optimizer::set(size_t g, const std::string& key, double value) {
  group(g);  // range check
  bool found = false;
  visit_options(g, [&](const char* k, double* number, bool* flag) {
    if (key != k) return;
    found = true;
    if (number) {
      *number = value;
    } else {
      *flag = value != 0;
    }
  });
  // Not validated (PyTorch checks options only when a group is added): a schedule may drive
  // the lr through values no user would pass, such as OneCycleLR's overshoot below zero.
  if (!found) groups_[g].extras[key] = value;  // a key of the caller's (schedulers keep initial_lr here)
}

bool Optimizer::has_option(const std::string& key) const {
  if (groups_.empty()) return false;
  bool found = false;
  const_cast<Optimizer*>(this)->visit_options(0, [&](const char* k, double*, bool*) { found = found || key == k; });
  return found;
}

const ParamState* Optimizer::state(const std::string& param_name) const {
  auto it = state_.find(param_name);
  return it == state_.end() ? nullptr : &it->second;
}

// Note [Master weights]
// A model converted whole to BF16 loses every update smaller than half a BF16 ulp of its weight
// (2^-9 relative): lr * grad rounds away and training stalls. With use_master_weights(), the
// step runs on an F32 copy of each 16-bit parameter, kept in its state as "master_weight" (so
// it is in state_dict() and in training checkpoints), with the gradient cast to F32 and every
// state buffer created in F32; the parameter then receives the copy rounded once. The copy is
// made from the parameter at its first step (and again if a state without it is loaded).
bool Optimizer::slot_of(size_t g, size_t i, Slot& slot) {
  ParamGroup& group = groups_.at(g);
  const Tensor& p = group.params.at(i);
  if (!p.requires_grad()) return false;  // frozen
  Tensor grad = p.grad();
  if (!grad.defined()) return false;
  BRISK_CHECK(grad.sizes() == p.sizes() && grad.device() == p.device(), name(), ": gradient of '", group.names[i],
              "' is ", grad.str(), " but the parameter is ", p.str());
  ParamState* state = &state_[group.names[i]];
  if (uses_master(p)) {
    Tensor& master = state->buffers["master_weight"];
    if (!master.defined()) master = cast(p, DType::F32).contiguous();
    slot = {master, grad.dtype() == DType::F32 ? grad : cast(grad, DType::F32), state, p};
    return true;
  }
  if (grad.dtype() != p.dtype()) grad = cast(grad, p.dtype());
  slot = {p, grad, state, Tensor()};
  return true;
}

std::vector<Optimizer::Slot> Optimizer::active_slots(size_t g) {
  std::vector<Slot> slots;
  for (size_t i = 0; i < groups_.at(g).params.size(); ++i) {
    Slot s{};
    if (slot_of(g, i, s)) slots.push_back(std::move(s));
  }
  return slots;
}

Optimizer::~Optimizer() { step_in_backward(false); }

// Note [Stepping in backward]
// The optimizer-in-backward recipe (PyTorch's tutorial "How to save memory by fusing the
// optimizer step into the backward pass"): a post-accumulate-grad hook on every parameter runs
// the group's update rule on that parameter alone as soon as autograd has finished its
// gradient (a leaf's AccumulateGrad runs once per backward, after every use has sent its
// part), then drops the gradient. Peak memory loses the gradients of the whole model (GPT-2
// 124M in F32: 0.5 GB of the 2 GB that weights, gradients and AdamW state take) but keeps the
// largest one in flight. The update is the one step() makes: the same rule, state, step count
// and master weights; the fused ops run once per parameter instead of once per group.
// Updating a weight in place during backward is safe because every node that saved it has
// run by then (each use is an edge into its accumulator); a second backward through a
// retained graph meets the version check, as any in-place change would. What needs all
// gradients before stepping (unscaling and inf checks, clipping by the total norm, summing
// micro-batches, DDP's averaging) cannot be combined with it; step() refuses while it is on.
void Optimizer::step_in_backward(bool on) {
  for (HookHandle& h : backward_hooks_) h.remove();
  backward_hooks_.clear();
  if (!on) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) hook_for_backward(g, i);
  }
}

void Optimizer::hook_for_backward(size_t g, size_t i) {
  const Tensor& p = groups_[g].params[i];
  if (!p.requires_grad() || !p.is_leaf()) {
    backward_hooks_.emplace_back();  // keeps one handle per parameter
    return;
  }
  backward_hooks_.push_back(p.register_post_accumulate_grad_hook([this, g, i](Tensor&) { step_one(g, i); }));
}

void Optimizer::step_one(size_t g, size_t i) {
  NoGradGuard no_grad;
  Slot s{};
  if (!slot_of(g, i, s)) return;
  std::vector<Slot> slots{s};
  step_group(g, slots);
  if (s.model_param.defined()) s.model_param.copy_(s.param);  // rounded once
  slots.clear();
  s = Slot{};
  groups_[g].params[i].zero_grad(/*set_to_none=*/true);
}

void Optimizer::step() {
  BRISK_CHECK(!steps_in_backward(), name(),
              ": step() while stepping in backward (step_in_backward(true)): backward has already updated the "
              "parameters; call step_in_backward(false) first to step here");
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<Slot> slots = active_slots(g);
    step_group(g, slots);
    for (Slot& s : slots) {
      if (s.model_param.defined()) s.model_param.copy_(s.param);  // rounded once
    }
  }
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  out.scalars["num_groups"] = double(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    out.scalars[prefix + "num_params"] = double(groups_[g].params.size());
    const_cast<Optimizer*>(this)->visit_options(g, [&](const char* k, double* number, bool* flag) {
      out.scalars[prefix + k] = number ? *number : double(*flag);
    });
    for (const auto& [k, v] : groups_[g].extras) out.scalars[prefix + k] = v;
    for (const std::string& param_name : groups_[g].names) {
      auto it = state_.find(param_name);
      if (it == state_.end()) continue;
      std::string state_prefix = "state." + param_name + ".";
      out.scalars[state_prefix + "step"] = double(it->second.step);
      for (const auto& [k, v] : it->second.numbers) out.scalars[state_prefix + k] = v;
      for (const auto& [buffer, t] : it->second.buffers) out.tensors.emplace_back(state_prefix + buffer, t);
    }
  }
  return out;
}

namespace {

std::unordered_map<std::string, const Tensor*> params_by_name(const std::vector<ParamGroup>& groups) {
  std::unordered_map<std::string, const Tensor*> params;
  for (const ParamGroup& group : groups) {
    for (size_t i = 0; i < group.params.size(); ++i) params[group.names[i]] = &group.params[i];
  }
  return params;
}

// The parameter name of "state.<param>.<entry>", or "" when the key is not of that form.
std::string state_param(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6) return "";
  return key.substr(6, dot - 6);
}

// Whether "group.<g>.<key>" names a group below `groups` (g in decimal digits).
bool is_group_key(const std::string& key, size_t groups) {
  const size_t dot = key.find('.', 6);
  if (key.rfind("group.", 0) != 0 || dot == std::string::npos) return false;
  const std::string g = key.substr(6, dot - 6);
  if (g.empty() || g.size() > 9 || g.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoull(g) < groups;
}

}  // namespace

void Optimizer::check_state_dict(const OptimizerState& state) const {
  const Scalars& s = state.scalars;
  auto need = [&](const std::string& key) {
    auto it = s.find(key);
    BRISK_CHECK(it != s.end(), name(), ": load_state_dict: key '", key, "' is missing");
    return it->second;
  };
  const int64_t num_groups = scalar_count(need("num_groups"), "num_groups", name());
  BRISK_CHECK(num_groups == int64_t(groups_.size()), name(), ": load_state_dict: key 'num_groups': the state has ",
              num_groups, " parameter groups, the optimizer ", groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "group." + std::to_string(g) + ".";
    const int64_t n = scalar_count(need(prefix + "num_params"), prefix + "num_params", name());
    BRISK_CHECK(n == int64_t(groups_[g].params.size()), name(), ": load_state_dict: key '", prefix, "num_params' is ",
                n, " but group ", g, " has ", groups_[g].params.size(), " parameters");
    // Every option (not the schedulers' extras, which a state may or may not have).
    const_cast<Optimizer*>(this)->visit_options(g, [&](const char* k, double*, bool*) { need(prefix + k); });
  }
  const auto params = params_by_name(groups_);
  for (const auto& [key, t] : state.tensors) {
    const std::string param = state_param(key);
    BRISK_CHECK(!param.empty(), name(), ": load_state_dict: unexpected tensor key '", key, "'");
    auto it = params.find(param);
    BRISK_CHECK(it != params.end(), name(), ": load_state_dict: state for unknown parameter '", param, "'");
    BRISK_CHECK(t.defined() && t.sizes() == it->second->sizes(), name(), ": load_state_dict: '", key, "' has shape ",
                t.defined() ? t.sizes() : Shape{}, " but the parameter has ", it->second->sizes());
    const bool is_master = key.size() > 14 && key.compare(key.size() - 14, 14, ".master_weight") == 0;
    BRISK_CHECK(!is_master || uses_master(*it->second), name(), ": load_state_dict: '", key,
                "' is an F32 master weight, but this optimizer keeps none for ", it->second->str(),
                " (call use_master_weights() before loading)");
  }
  const std::vector<std::string> numbers = param_number_keys();
  for (const auto& [key, value] : s) {
    if (key == "num_groups" || is_group_key(key, groups_.size())) continue;
    const std::string param = state_param(key);
    const std::string entry = param.empty() ? "" : key.substr(key.rfind('.') + 1);
    const bool is_number = std::find(numbers.begin(), numbers.end(), entry) != numbers.end();
    BRISK_CHECK(!param.empty() && (entry == "step" || is_number), name(), ": load_state_dict: unexpected scalar key '",
                key, "'");
    BRISK_CHECK(params.count(param), name(), ": load_state_dict: state for unknown parameter '", param, "'");
    if (is_number) {
      BRISK_CHECK(std::isfinite(value), name(), ": load_state_dict: '", key, "' is ", value, ", not a finite number");
    } else {
      scalar_count(value, key, name());
    }
  }
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  check_state_dict(state);  // nothing below throws for a bad state
  const auto params = params_by_name(groups_);
  std::unordered_map<std::string, ParamState> loaded;
  for (const auto& [key, t] : state.tensors) {
    const std::string param = state_param(key);
    const Tensor& p = *params.at(param);
    NoGradGuard no_grad;
    Tensor copy = empty(p.sizes(), uses_master(p) ? DType::F32 : p.dtype(), p.device());
    copy.copy_(t);
    loaded[param].buffers[key.substr(key.rfind('.') + 1)] = copy;
  }
  for (const auto& [key, value] : state.scalars) {
    if (key.rfind("state.", 0) != 0) continue;
    const std::string entry = key.substr(key.rfind('.') + 1);
    if (entry == "step") {
      loaded[state_param(key)].step = int64_t(value);
    } else {
      loaded[state_param(key)].numbers[entry] = value;
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    groups_[g].extras.clear();
    for (auto it = state.scalars.lower_bound(prefix); it != state.scalars.end() && it->first.rfind(prefix, 0) == 0;
         ++it) {
      std::string key = it->first.substr(prefix.size());
      if (key == "num_params") continue;
      set(g, key, it->second);
    }
  }
  state_ = std::move(loaded);
}

}  // namespace brisk::optim
