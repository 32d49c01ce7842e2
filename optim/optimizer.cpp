// optim/optimizer.cpp: the Optimizer base: groups, options by name, zero_grad, state_dict.
#include "optim/optimizer.h"

#include <cmath>
#include <unordered_set>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::optim {

bool is_count_key(const std::string& key) {
  const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  for (const char* k : {"step", "last_epoch", "step_count", "num_bad_epochs", "cooldown_counter", "best_epoch", "epoch",
                        "num_groups", "num_params"}) {
    if (last == k) return true;
  }
  return false;
}

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

std::vector<Optimizer::Slot> Optimizer::active_slots(size_t g) {
  std::vector<Slot> slots;
  ParamGroup& group = groups_.at(g);
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    if (!p.requires_grad()) continue;  // frozen
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    BRISK_CHECK(grad.sizes() == p.sizes() && grad.device() == p.device(), name(), ": gradient of '", group.names[i],
                "' is ", grad.str(), " but the parameter is ", p.str());
    if (grad.dtype() != p.dtype()) grad = cast(grad, p.dtype());
    slots.push_back({p, grad, &state_[group.names[i]]});
  }
  return slots;
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
      for (const auto& [buffer, t] : it->second.buffers) out.tensors.emplace_back(state_prefix + buffer, t);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  const Scalars& s = state.scalars;
  auto scalar = [&](const std::string& key) {
    auto it = s.find(key);
    BRISK_CHECK(it != s.end(), name(), ": load_state_dict: key '", key, "' is missing");
    return it->second;
  };
  BRISK_CHECK(scalar_count(scalar("num_groups"), "num_groups", name()) == int64_t(groups_.size()), name(),
              ": load_state_dict: the state has ",
              scalar("num_groups"), " parameter groups, the optimizer ", groups_.size());
  std::unordered_map<std::string, const Tensor*> params;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    BRISK_CHECK(scalar_count(scalar(prefix + "num_params"), prefix + "num_params", name()) ==
                    int64_t(groups_[g].params.size()), name(), ": load_state_dict: group ",
                g, " has ", scalar(prefix + "num_params"), " parameters in the state, ", groups_[g].params.size(),
                " in the optimizer");
    for (size_t i = 0; i < groups_[g].params.size(); ++i) params[groups_[g].names[i]] = &groups_[g].params[i];
  }
  // Everything is checked before anything changes: a bad state leaves the optimizer as it was.
  std::unordered_map<std::string, ParamState> loaded;
  for (const auto& [key, t] : state.tensors) {
    size_t dot = key.rfind('.');
    BRISK_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos && dot > 6, name(),
                ": load_state_dict: unexpected tensor key '", key, "'");
    std::string param_name = key.substr(6, dot - 6);
    auto it = params.find(param_name);
    BRISK_CHECK(it != params.end(), name(), ": load_state_dict: state for unknown parameter '", param_name, "'");
    const Tensor& p = *it->second;
    BRISK_CHECK(t.defined() && t.sizes() == p.sizes(), name(), ": load_state_dict: '", key, "' has shape ",
                t.defined() ? t.sizes() : Shape{}, " but the parameter has ", p.sizes());
    NoGradGuard no_grad;
    Tensor copy = empty(p.sizes(), p.dtype(), p.device());
    copy.copy_(t);
    loaded[param_name].buffers[key.substr(dot + 1)] = copy;
  }
  for (const auto& [key, value] : s) {
    if (key.rfind("state.", 0) != 0) continue;
    size_t dot = key.rfind('.');
    BRISK_CHECK(dot != std::string::npos && key.substr(dot + 1) == "step", name(),
                ": load_state_dict: unexpected scalar key '", key, "'");
    std::string param_name = key.substr(6, dot - 6);
    BRISK_CHECK(params.count(param_name), name(), ": load_state_dict: state for unknown parameter '", param_name, "'");
    loaded[param_name].step = scalar_count(value, key, name());
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    groups_[g].extras.clear();
    for (auto it = s.lower_bound(prefix); it != s.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      std::string key = it->first.substr(prefix.size());
      if (key == "num_params") continue;
      set(g, key, it->second);
    }
  }
  state_ = std::move(loaded);
}

}  // namespace brisk::optim
