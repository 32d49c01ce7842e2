// train/early_stopping.h: EarlyStopping: watches a validation metric once per epoch, says when
// it has not improved (by more than min_delta) for `patience` epochs, and keeps the best
// weights: a copy of the module's state_dict in memory and, when checkpoint_path is set, a
// safetensors file written atomically at each improvement. restore_best() puts them back.
// In train/ (above nn and optim), in namespace brisk::optim as before the move.
// Not here: the training loop or the choice of metric.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace brisk::optim {

enum class StopMode { Min, Max };  // Min: lower is better (a loss); Max: higher (an accuracy)

struct EarlyStoppingOptions {
  int64_t patience = 10;  // epochs without improvement before stopping
  double min_delta = 0;   // an improvement must beat the best by more than this
  StopMode mode = StopMode::Min;
  bool keep_in_memory = true;     // copy the best state_dict (clones on the module's device)
  std::string checkpoint_path{};  // also write the best weights here (safetensors), when set
};

class EarlyStopping {
 public:
  explicit EarlyStopping(const EarlyStoppingOptions& options = {});

  // Records one epoch's metric. On an improvement, keeps the module's weights (when a module
  // is given). Returns true when training should stop.
  bool step(double metric, const nn::Module* module = nullptr);
  bool should_stop() const { return num_bad_epochs_ >= options_.patience; }

  double best() const { return best_; }
  int64_t best_epoch() const { return best_epoch_; }  // -1 before any improvement
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t epoch() const { return epoch_; }
  bool has_best_state() const { return !best_state_.empty() || best_on_disk_; }
  const NamedTensors& best_state() const { return best_state_; }

  // Loads the best weights into `module` (from memory, else from checkpoint_path).
  void restore_best(nn::Module& module) const;

  // The counters ("best", "best_epoch", "num_bad_epochs", "epoch"); the weights are not in it.
  Scalars state_dict() const;
  // Throws a brisk::Error naming the first missing or bad key unless `state` can be loaded;
  // changes nothing. load_state_dict runs it first.
  void check_state_dict(const Scalars& state) const;
  void load_state_dict(const Scalars& state);

 private:
  bool improved(double metric) const;

  EarlyStoppingOptions options_;
  double best_;
  int64_t best_epoch_ = -1;
  int64_t num_bad_epochs_ = 0;
  int64_t epoch_ = -1;
  NamedTensors best_state_;
  bool best_on_disk_ = false;
};

}  // namespace brisk::optim
