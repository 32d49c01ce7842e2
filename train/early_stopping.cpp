// train/early_stopping.cpp: EarlyStopping's bookkeeping, its best-weight copies (in memory,
// and in a safetensors file written atomically) and its counters' state_dict, with a check
// that changes nothing. Not here: the training loop or the choice of metric.
#include "train/early_stopping.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "engine/grad_mode.h"
#include "engine/serialize.h"

namespace brisk::optim {

EarlyStopping::EarlyStopping(const EarlyStoppingOptions& options) : options_(options) {
  BRISK_CHECK(options.patience >= 0, "EarlyStopping: patience must be >= 0, got ", options.patience);
  BRISK_CHECK(options.min_delta >= 0, "EarlyStopping: min_delta must be >= 0, got ", options.min_delta);
  best_ = options.mode == StopMode::Min ? std::numeric_limits<double>::infinity()
                                        : -std::numeric_limits<double>::infinity();
}

bool EarlyStopping::improved(double metric) const {
  if (std::isnan(metric)) return false;
  if (options_.mode == StopMode::Min) return metric < best_ - options_.min_delta;
  return metric > best_ + options_.min_delta;
}

bool EarlyStopping::step(double metric, const nn::Module* module) {
  epoch_ += 1;
  if (!improved(metric)) {
    num_bad_epochs_ += 1;
    return should_stop();
  }
  best_ = metric;
  best_epoch_ = epoch_;
  num_bad_epochs_ = 0;
  if (module) {
    NoGradGuard no_grad;
    NamedTensors state = module->state_dict();
    if (options_.keep_in_memory) {
      best_state_.clear();
      for (const auto& [name, t] : state) best_state_.emplace_back(name, t.detach().clone());
    }
    if (!options_.checkpoint_path.empty()) {
      std::map<std::string, std::string> metadata = {{"best_metric", std::to_string(best_)},
                                                     {"best_epoch", std::to_string(best_epoch_)}};
      save_safetensors(options_.checkpoint_path, state, metadata);
      best_on_disk_ = true;
    }
  }
  return false;
}

void EarlyStopping::restore_best(nn::Module& module) const {
  if (!best_state_.empty()) {
    module.load_state_dict(best_state_);
    return;
  }
  BRISK_CHECK(best_on_disk_, "EarlyStopping::restore_best: no best weights kept yet (pass the module to step())");
  module.load_state_dict(load_safetensors(options_.checkpoint_path).tensors);
}

Scalars EarlyStopping::state_dict() const {
  return {{"best", best_},
          {"best_epoch", double(best_epoch_)},
          {"num_bad_epochs", double(num_bad_epochs_)},
          {"epoch", double(epoch_)}};
}

namespace {
double saved_value(const Scalars& state, const char* key) {
  auto it = state.find(key);
  BRISK_CHECK(it != state.end(), "EarlyStopping::load_state_dict: key '", key, "' is missing");
  return it->second;
}
}  // namespace

void EarlyStopping::check_state_dict(const Scalars& state) const {
  saved_value(state, "best");
  for (const char* key : {"best_epoch", "num_bad_epochs", "epoch"})
    scalar_count(saved_value(state, key), key, "EarlyStopping");
}

void EarlyStopping::load_state_dict(const Scalars& state) {
  check_state_dict(state);  // nothing below throws
  best_ = saved_value(state, "best");
  const char* who = "EarlyStopping";
  best_epoch_ = scalar_count(saved_value(state, "best_epoch"), "best_epoch", who);
  num_bad_epochs_ = scalar_count(saved_value(state, "num_bad_epochs"), "num_bad_epochs", who);
  epoch_ = scalar_count(saved_value(state, "epoch"), "epoch", who);
  // A resumed run finds its best weights in the file the first run wrote.
  best_on_disk_ =
      best_epoch_ >= 0 && !options_.checkpoint_path.empty() && std::filesystem::exists(options_.checkpoint_path);
}

}  // namespace brisk::optim
