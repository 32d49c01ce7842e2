// examples/fashion_mnist/checkpoint.h: the trainer's resumable checkpoint, a thin layer over
// train/checkpoint.h (one atomic safetensors file: model, optimizer, schedule, default
// generator, loader position, epoch, the gradient scaler). What this adds, as the checkpoint's user strings: the best
// test accuracy, the per-epoch history (so a resumed run redraws the same curves) and the run's
// configuration, which must match on --resume. Not here: the best-model file
// (nn::save_module) or the training loop.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "data/dataloader.h"
#include "examples/fashion_mnist/report.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace fashion_mnist {

// Everything a checkpoint holds besides model, optimizer, schedule, RNG and loader.
struct TrainState {
  int64_t epochs_done = 0;
  double best_acc = 0;
  std::vector<EpochRecord> history;
  std::map<std::string, std::string> config;  // what must match on resume (model, optimizer, ...)
};

inline std::string full_precision(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline void save_checkpoint(const std::string& path, brisk::nn::Module& model, brisk::optim::Optimizer& opt,
                            brisk::optim::LRScheduler* sched, brisk::optim::GradScaler& scaler,
                            brisk::data::DataLoader& loader, const TrainState& st) {
  brisk::training::TrainingState ts;
  ts.model = &model;
  ts.optimizer = &opt;
  ts.scheduler = sched;
  ts.scaler = &scaler;
  ts.loader = &loader;
  ts.epoch = st.epochs_done;
  ts.user_metadata["best_acc"] = full_precision(st.best_acc);
  ts.user_metadata["history"] = history_to_string(st.history);
  for (auto& [key, v] : st.config) ts.user_metadata["config." + key] = v;
  brisk::training::save_checkpoint(path, ts);
}

// Restores model, optimizer, schedule, default generator and loader in place (all built exactly
// as for the saved run) and returns the rest. A configuration that differs from `config` is an
// error naming the key.
inline TrainState load_checkpoint(const std::string& path, brisk::nn::Module& model, brisk::optim::Optimizer& opt,
                                  brisk::optim::LRScheduler* sched, brisk::optim::GradScaler& scaler,
                                  brisk::data::DataLoader& loader, const std::map<std::string, std::string>& config) {
  brisk::training::TrainingState ts;
  ts.model = &model;
  ts.optimizer = &opt;
  ts.scheduler = sched;
  ts.scaler = &scaler;
  ts.loader = &loader;
  brisk::training::load_checkpoint(path, ts);
  auto user = [&](const std::string& key) -> const std::string& {
    auto it = ts.user_metadata.find(key);
    if (it == ts.user_metadata.end()) throw std::runtime_error(path + ": checkpoint has no '" + key + "'");
    return it->second;
  };
  for (auto& [key, value] : config) {
    const std::string& saved = user("config." + key);
    if (saved != value) {
      throw std::runtime_error("--resume: the checkpoint was made with " + key + " = " + saved + ", this run has " +
                               value + " (use the same settings or a new --out)");
    }
  }
  TrainState st;
  st.epochs_done = ts.epoch;
  st.best_acc = std::stod(user("best_acc"));
  st.history = history_from_string(user("history"));
  st.config = config;
  return st;
}

}  // namespace fashion_mnist
