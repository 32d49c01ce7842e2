// examples/training_strategies/strategies.h: the rows of the training-strategies comparison:
// each Strategy names an optimizer and a learning-rate schedule (plus, for some rows, gradient
// accumulation, an L1 penalty, L2 weight decay or early stopping) and knows how to build them
// for a run of a given length. make_strategies() lists them all, in table order. Not here:
// the training loop (main.cpp) or the plots (lr_plot.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optim/optim.h"
#include "train/early_stopping.h"

namespace training_strategies {

namespace optim = brisk::optim;

// What drives the learning rate during one run: a scheduler stepped after every optimizer
// step, and/or ReduceLROnPlateau stepped once per epoch with the validation loss.
struct Schedule {
  std::unique_ptr<optim::LRScheduler> per_step;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau;
};

// The length of a run, which schedules are sized from.
struct RunLength {
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps() const { return epochs * steps_per_epoch; }
};

struct Strategy {
  std::string name;       // --only picks rows by this
  std::string optimizer;  // table columns, e.g. "SGD m=0.9 nesterov", "StepLR x0.2 / 131 steps"
  std::string schedule;
  std::function<std::unique_ptr<optim::Optimizer>(const optim::NamedTensors&)> make_optimizer;
  std::function<Schedule(optim::Optimizer&)> make_schedule;  // empty: constant learning rate
  int64_t micro_batches = 1;        // > 1: gradient accumulation over this many slices of each batch
  double l1 = 0;                    // > 0: loss += l1 * sum |p|
  int64_t early_stop_patience = 0;  // > 0: EarlyStopping on the validation loss
  double early_stop_min_delta = 0;
  // Another row this one should match (same updates by construction): the report compares
  // their final weights (bit-identical or the largest difference).
  std::string same_as;
};

namespace detail {

inline std::string fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

inline optim::SGDOptions sgd_nesterov(double lr) { return {.lr = lr, .momentum = 0.9, .nesterov = true}; }

// A linear warm-up over the first `warmup` steps (from 10% of the peak), then cosine annealing
// to 0 over the rest: SequentialLR(LinearLR, CosineAnnealingLR).
inline Schedule warmup_cosine(optim::Optimizer& opt, int64_t total, int64_t warmup) {
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, warmup);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, total - warmup));
  Schedule s;
  s.per_step = std::make_unique<optim::SequentialLR>(
      opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cosine}, std::vector<int64_t>{warmup});
  return s;
}

}  // namespace detail

// Every row, in table order. Schedules are stepped per batch and sized from `len`, so their
// shapes stay the same for any number of epochs or samples; learning rates are the usual
// starting points for this MLP, not tuned per row.
inline std::vector<Strategy> make_strategies(const RunLength& len) {
  using detail::fmt;
  using detail::sgd_nesterov;
  const int64_t total = std::max<int64_t>(1, len.total_steps());
  const int64_t warmup = std::max<int64_t>(1, total / 10);
  std::vector<Strategy> rows;

  rows.push_back({.name = "sgd",
                  .optimizer = "SGD lr 0.1",
                  .schedule = "constant",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1});
                  }});
  rows.push_back({.name = "sgd-nesterov",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov",
                  .schedule = "constant",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05));
                  }});

  const int64_t step_size = std::max<int64_t>(1, (total + 2) / 3);
  rows.push_back({.name = "sgd-nesterov-step",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov",
                  .schedule = fmt("StepLR x0.2 every %.0f steps", double(step_size)),
                  .make_optimizer =
                      [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05)); },
                  .make_schedule =
                      [step_size](optim::Optimizer& opt) {
                        Schedule s;
                        s.per_step = std::make_unique<optim::StepLR>(opt, step_size, 0.2);
                        return s;
                      }});
  rows.push_back(
      {.name = "sgd-warmup-cosine",
       .optimizer = "SGD lr 0.05 m 0.9 nesterov",
       .schedule = fmt("LinearLR warm-up %.0f steps, then cosine", double(warmup)),
       .make_optimizer =
           [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05)); },
       .make_schedule = [total, warmup](optim::Optimizer& opt) { return detail::warmup_cosine(opt, total, warmup); }});
  rows.push_back({.name = "sgd-onecycle",
                  .optimizer = "SGD m 0.95..0.85 nesterov",
                  .schedule = "OneCycleLR max 0.1, 30% up",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.1)); },
                  .make_schedule =
                      [total](optim::Optimizer& opt) {
                        optim::OneCycleLROptions o;
                        o.max_lr = {0.1};
                        o.total_steps = total;
                        Schedule s;
                        s.per_step = std::make_unique<optim::OneCycleLR>(opt, o);
                        return s;
                      }});
  // Three cycles, each half as high as the one before (triangular2); momentum 0.9 at the lowest
  // learning rate, 0.8 at the highest.
  const double half_cycle = std::max(1.0, double(total) / 6);
  rows.push_back({.name = "sgd-cyclic",
                  .optimizer = "SGD m 0.9..0.8",
                  .schedule = fmt("CyclicLR triangular2 0.005..0.1, %.0f steps up", half_cycle),
                  .make_optimizer =
                      [](const optim::NamedTensors& p) {
                        return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.005, .momentum = 0.9});
                      },
                  .make_schedule =
                      [half_cycle](optim::Optimizer& opt) {
                        optim::CyclicLROptions o;
                        o.base_lr = {0.005};
                        o.max_lr = {0.1};
                        o.step_size_up = half_cycle;
                        o.mode = optim::CyclicMode::Triangular2;
                        o.cycle_momentum = true;
                        o.base_momentum = {0.8};
                        o.max_momentum = {0.9};
                        Schedule s;
                        s.per_step = std::make_unique<optim::CyclicLR>(opt, o);
                        return s;
                      }});
  rows.push_back({.name = "sgd-plateau",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov",
                  .schedule = "ReduceLROnPlateau x0.3 (val loss)",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05)); },
                  .make_schedule =
                      [](optim::Optimizer& opt) {
                        Schedule s;
                        s.plateau = std::make_unique<optim::ReduceLROnPlateau>(
                            opt, optim::ReduceLROnPlateauOptions{.factor = 0.3, .patience = 0, .threshold = 1e-3});
                        return s;
                      }});
  rows.push_back({.name = "sgd-accum4",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov",
                  .schedule = "constant, 4 micro-batches of B/4",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05)); },
                  .micro_batches = 4,
                  .same_as = "sgd-nesterov"});
  rows.push_back({.name = "sgd-l2",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov wd 5e-4",
                  .schedule = "constant",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    auto o = sgd_nesterov(0.05);
                    o.weight_decay = 5e-4;
                    return std::make_unique<optim::SGD>(p, o);
                  }});
  rows.push_back({.name = "sgd-l1",
                  .optimizer = "SGD lr 0.05 m 0.9 nesterov",
                  .schedule = "constant, loss + 1e-5 sum|p|",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) { return std::make_unique<optim::SGD>(p, sgd_nesterov(0.05)); },
                  .l1 = 1e-5});

  rows.push_back({.name = "adam",
                  .optimizer = "Adam lr 1e-3 (fused)",
                  .schedule = "constant",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3, .fused = true});
                  }});
  rows.push_back({.name = "adam-unfused",
                  .optimizer = "Adam lr 1e-3 (tensor ops)",
                  .schedule = "constant",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) {
                        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3, .fused = false});
                      },
                  .same_as = "adam"});
  // Decays 10x over the run whatever its length.
  const double gamma = std::pow(0.1, 1.0 / double(total));
  rows.push_back({.name = "adam-exp",
                  .optimizer = "Adam lr 2e-3",
                  .schedule = fmt("ExponentialLR gamma %.5f (x0.1 over the run)", gamma),
                  .make_optimizer =
                      [](const optim::NamedTensors& p) {
                        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 2e-3});
                      },
                  .make_schedule =
                      [gamma](optim::Optimizer& opt) {
                        Schedule s;
                        s.per_step = std::make_unique<optim::ExponentialLR>(opt, gamma);
                        return s;
                      }});
  rows.push_back(
      {.name = "adamw-warmup-cosine",
       .optimizer = "AdamW lr 2e-3 wd 0.05",
       .schedule = fmt("LinearLR warm-up %.0f steps, then cosine", double(warmup)),
       .make_optimizer =
           [](const optim::NamedTensors& p) {
             return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 2e-3, .weight_decay = 0.05});
           },
       .make_schedule = [total, warmup](optim::Optimizer& opt) { return detail::warmup_cosine(opt, total, warmup); }});
  rows.push_back({.name = "adam-early-stop",
                  .optimizer = "Adam lr 1e-3",
                  .schedule = "constant, EarlyStopping(val loss, patience 1, min_delta 0.01)",
                  .make_optimizer =
                      [](const optim::NamedTensors& p) {
                        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3});
                      },
                  .early_stop_patience = 1,
                  .early_stop_min_delta = 0.01});
  rows.push_back({.name = "rmsprop",
                  .optimizer = "RMSprop lr 1e-3 alpha 0.99",
                  .schedule = "constant",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 1e-3});
                  }});
  rows.push_back({.name = "adagrad",
                  .optimizer = "Adagrad lr 0.01",
                  .schedule = "constant (per-weight decay built in)",
                  .make_optimizer = [](const optim::NamedTensors& p) {
                    return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 0.01});
                  }});
  return rows;
}

}  // namespace training_strategies
