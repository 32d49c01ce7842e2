// optim/lr_scheduler.h: learning-rate schedules over an Optimizer's parameter groups, each the
// same sequence as its torch.optim.lr_scheduler namesake when stepped once per epoch (or per
// iteration): the recursive form while stepping, the closed form on jumps (step_to), the same
// construction-time first step. They compose as in PyTorch: SequentialLR switches schedules at
// milestones, ChainedScheduler (or several schedulers stepped in turn) multiplies them.
// CyclicLR and OneCycleLR also cycle momentum (SGD/RMSprop momentum, Adam's beta1).
// A scheduler holds a reference to its optimizer: the optimizer must outlive it.
// Not here: the optimizers (optimizer.h) or warm-up of anything but the learning rate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace brisk::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or iteration) and writes the new learning rates into the groups.
  virtual void step();
  // Jumps to `epoch`, through the closed form where the schedule has one (PyTorch's
  // step(epoch)); SequentialLR restarts a schedule at its milestone with step_to(0).
  virtual void step_to(int64_t epoch);

  // The learning rate of each group after the latest step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return opt_; }

  // The scheduler's counters and per-group values ("last_epoch", "base_lrs.0", ...). Resume by
  // building the same scheduler, then loading this and the optimizer's state_dict.
  virtual Scalars state_dict() const;
  // Throws a brisk::Error naming the first missing or bad key unless this scheduler can load
  // `state` (a composite checks its children's too); changes nothing.
  virtual void check_state_dict(const Scalars& state) const;
  // check_state_dict (the most derived one), then restores `state`.
  virtual void load_state_dict(const Scalars& state);

 protected:
  // Sets each group's "initial_lr" (when absent) and base_lrs from it, as PyTorch; first_lrs
  // (when given) become the groups' lr before that (CyclicLR starts at its base_lr).
  explicit LRScheduler(Optimizer& optimizer, const std::vector<double>& first_lrs = {});

  // The recursive ("chainable") form: the next learning rates, from the groups' current ones.
  virtual std::vector<double> get_lr() = 0;
  // The closed form at last_epoch; empty where the schedule has none (get_lr is used).
  virtual std::vector<double> closed_form_lr() { return {}; }
  // PyTorch's _initial_step: every concrete constructor ends with it.
  void initial_step();
  // Writes lrs into the groups and remembers them as the last ones.
  void apply(const std::vector<double>& lrs);
  std::vector<double> group_lrs() const;
  size_t num_groups() const { return opt_.num_groups(); }

  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;

  friend class SequentialLR;
};

// lr = base_lr * gamma^(epoch / step_size).
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(number of milestones reached); a repeated milestone counts twice.
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  std::vector<int64_t> milestones_;  // sorted, repeats kept
  double gamma_;
};

// lr = base_lr * factor until total_iters, then base_lr (a constant warm-up).
class ConstantLR final : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  double factor_;
  int64_t total_iters_;
};

// The factor moves linearly from start_factor to end_factor over total_iters (a linear warm-up).
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

// lr = base_lr * gamma^epoch.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  double gamma_;
};

// lr = base_lr * (1 - min(epoch, total_iters) / total_iters)^power.
class PolynomialLR final : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t total_iters_;
  double power_;
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, computed recursively
// while stepping as PyTorch does (past T_max it climbs back up).
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// SGDR: cosine annealing restarted every T_i epochs, T_0 first, T_i *= T_mult at each restart.
// step(epoch) accepts fractional epochs (step(epoch + i / iters_per_epoch) inside an epoch).
class CosineAnnealingWarmRestarts final : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0);

  void step() override;
  void step(double epoch);
  void step_to(int64_t epoch) override { step(double(epoch)); }
  Scalars state_dict() const override;
  void check_state_dict(const Scalars& state) const override;
  void load_state_dict(const Scalars& state) override;

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t T_0_;
  int64_t T_mult_;
  double eta_min_;
  double T_i_;
  double T_cur_;
};

// lr = base_lr * lambda(epoch), one lambda for all groups or one per group. The lambdas are
// code: state_dict holds the counters only.
class LambdaLR final : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lambdas_;
};

enum class CyclicMode { Triangular, Triangular2, ExpRange };
enum class ScaleMode { Cycle, Iterations };

// Vectors hold one value for all groups or one per group.
struct CyclicLROptions {
  std::vector<double> base_lr{};
  std::vector<double> max_lr{};
  double step_size_up = 2000;
  std::optional<double> step_size_down{};  // default: step_size_up
  CyclicMode mode = CyclicMode::Triangular;
  double gamma = 1.0;                        // ExpRange: scale = gamma^iteration
  std::function<double(double)> scale_fn{};  // overrides mode when set
  ScaleMode scale_mode = ScaleMode::Cycle;   // what scale_fn is given (with a custom scale_fn)
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.8};
  std::vector<double> max_momentum = {0.9};
};

// The cyclical learning rate policy (Smith 2017), stepped once per batch; the momentum cycles
// the other way between max_momentum and base_momentum.
class CyclicLR final : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, const CyclicLROptions& options);

 protected:
  std::vector<double> get_lr() override;

 private:
  double scale(double x) const;

  CyclicLROptions options_;
  std::vector<double> max_lrs_;
  std::vector<double> base_momentums_;
  std::vector<double> max_momentums_;
  double total_size_;
  double step_ratio_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

enum class AnnealStrategy { Cos, Linear };

struct OneCycleLROptions {
  std::vector<double> max_lr{};  // one value for all groups or one per group
  int64_t total_steps = 0;       // or epochs * steps_per_epoch
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25;         // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

// The 1cycle policy (Smith & Topin 2018), stepped once per batch: warm up from initial_lr to
// max_lr, anneal to min_lr (three_phase: back to initial_lr first); momentum mirrors it.
// Its values live in the groups as in PyTorch (initial_lr, max_lr, min_lr, base_momentum,
// max_momentum), so the optimizer's state_dict carries them.
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    const char* start_lr;
    const char* end_lr;
    const char* start_momentum;
    const char* end_momentum;
  };
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

// Runs schedulers[0] until milestones[0], then schedulers[1] (restarted at epoch 0), ...
// The schedulers must be built on the same optimizer, just before this.
class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  void step() override;
  void step_to(int64_t epoch) override;
  Scalars state_dict() const override;  // its own counters and each child's, "0.last_epoch", ...
  void check_state_dict(const Scalars& state) const override;
  void load_state_dict(const Scalars& state) override;

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Steps every scheduler in turn each step: their (chainable) factors multiply.
class ChainedScheduler final : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);

  void step() override;
  void step_to(int64_t epoch) override;
  Scalars state_dict() const override;
  void check_state_dict(const Scalars& state) const override;
  void load_state_dict(const Scalars& state) override;

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

enum class PlateauMode { Min, Max };
enum class ThresholdMode { Rel, Abs };

struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::Min;
  double factor = 0.1;    // new lr = lr * factor
  int64_t patience = 10;  // epochs without improvement tolerated
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::Rel;
  int64_t cooldown = 0;              // epochs to wait after a reduction before counting again
  std::vector<double> min_lr = {0};  // one value for all groups or one per group
  double eps = 1e-8;                 // a reduction smaller than this is skipped
};

// Multiplies the learning rates by factor when a metric has stopped improving for more than
// patience epochs. step() takes the metric, so it is not an LRScheduler.
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});

  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  Scalars state_dict() const;
  // Throws a brisk::Error naming the first missing or bad key unless `state` can be loaded;
  // changes nothing. load_state_dict runs it first.
  void check_state_dict(const Scalars& state) const;
  void load_state_dict(const Scalars& state);

 private:
  bool is_better(double a, double best) const;

  Optimizer& opt_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace brisk::optim
