// optim/lr_scheduler.cpp: the schedules, each written as its PyTorch namesake computes it
// (get_lr's recursive form, _get_closed_form_lr, the construction-time first step), so the
// sequences agree to the last bits.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace brisk::optim {

namespace {

constexpr double kPi = std::numbers::pi;

// One value for all groups, or one per group (PyTorch's _format_param).
std::vector<double> per_group(const char* scheduler, const char* what, const std::vector<double>& values,
                              size_t groups) {
  BRISK_CHECK(values.size() == 1 || values.size() == groups, scheduler, ": expected 1 or ", groups, " values for ",
              what, ", got ", values.size());
  if (values.size() == 1) return std::vector<double>(groups, values[0]);
  return values;
}

// Python's a % b for b > 0 (never negative).
int64_t py_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return r < 0 ? r + b : r;
}

double scalar_at(const Scalars& s, const std::string& key, const char* who) {
  auto it = s.find(key);
  BRISK_CHECK(it != s.end(), who, ": load_state_dict: key '", key, "' is missing");
  return it->second;
}

void save_list(Scalars& s, const std::string& prefix, const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) s[prefix + "." + std::to_string(i)] = values[i];
}

std::vector<double> load_list(const Scalars& s, const std::string& prefix, size_t n, const char* who) {
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(scalar_at(s, prefix + "." + std::to_string(i), who));
  return out;
}

// The keys "<i>.<key>" of a composite's state: child i's own state.
Scalars child_state(const Scalars& state, size_t i) {
  const std::string prefix = std::to_string(i) + ".";
  Scalars child;
  for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0; ++it)
    child[it->first.substr(prefix.size())] = it->second;
  return child;
}

// The optimizer's momentum-like option a schedule cycles: SGD/RMSprop momentum, Adam's beta1.
std::string momentum_key(const Optimizer& opt, const char* scheduler) {
  if (opt.has_option("beta1")) return "beta1";
  BRISK_CHECK(opt.has_option("momentum"), scheduler, ": optimizer ", opt.name(),
              " has no momentum to cycle (set cycle_momentum = false)");
  return "momentum";
}

}  // namespace

// ---- LRScheduler

LRScheduler::LRScheduler(Optimizer& optimizer, const std::vector<double>& first_lrs) : opt_(optimizer) {
  for (size_t g = 0; g < first_lrs.size(); ++g) opt_.set_lr(g, first_lrs[g]);
  for (size_t g = 0; g < opt_.num_groups(); ++g) {
    if (!opt_.has(g, "initial_lr")) opt_.set(g, "initial_lr", opt_.lr(g));
    base_lrs_.push_back(opt_.get(g, "initial_lr"));
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  step_count_ += 1;
  last_epoch_ += 1;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  step_count_ += 1;
  last_epoch_ = epoch;
  std::vector<double> lrs = closed_form_lr();
  apply(lrs.empty() ? get_lr() : lrs);
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
  last_lr_ = group_lrs();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < opt_.num_groups(); ++g) lrs.push_back(opt_.lr(g));
  return lrs;
}

Scalars LRScheduler::state_dict() const {
  Scalars s;
  s["last_epoch"] = double(last_epoch_);
  s["step_count"] = double(step_count_);
  save_list(s, "base_lrs", base_lrs_);
  save_list(s, "last_lr", last_lr_);
  return s;
}

void LRScheduler::check_state_dict(const Scalars& state) const {
  const char* who = "LRScheduler";
  scalar_count(scalar_at(state, "last_epoch", who), "last_epoch", who);
  scalar_count(scalar_at(state, "step_count", who), "step_count", who);
  load_list(state, "base_lrs", num_groups(), who);
  load_list(state, "last_lr", num_groups(), who);
}

void LRScheduler::load_state_dict(const Scalars& state) {
  check_state_dict(state);  // virtual: a derived scheduler's keys and its children's too
  last_epoch_ = scalar_count(scalar_at(state, "last_epoch", "LRScheduler"), "last_epoch", "LRScheduler");
  step_count_ = scalar_count(scalar_at(state, "step_count", "LRScheduler"), "step_count", "LRScheduler");
  base_lrs_ = load_list(state, "base_lrs", num_groups(), "LRScheduler");
  last_lr_ = load_list(state, "last_lr", num_groups(), "LRScheduler");
}

// ---- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  BRISK_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() {
  std::vector<double> lrs;
  int64_t k = last_epoch_ >= 0 ? last_epoch_ / step_size_ : -((-last_epoch_ + step_size_ - 1) / step_size_);
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, double(k)));
  return lrs;
}

// ---- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (hits == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, double(hits));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() {
  auto reached = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, double(reached)));
  return lrs;
}

// ---- ConstantLR

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  BRISK_CHECK(factor >= 0 && factor <= 1, "ConstantLR: factor must lie in [0, 1], got ", factor);
  initial_step();
}

std::vector<double> ConstantLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= factor_;
  } else if (last_epoch_ == total_iters_) {
    for (double& lr : lrs) lr *= 1.0 / factor_;
  }
  return lrs;
}

std::vector<double> ConstantLR::closed_form_lr() {
  std::vector<double> lrs;
  double reached = last_epoch_ >= total_iters_ ? 1.0 : 0.0;
  for (double base : base_lrs_) lrs.push_back(base * (factor_ + reached * (1 - factor_)));
  return lrs;
}

// ---- LinearLR

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  BRISK_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must lie in (0, 1], got ", start_factor);
  BRISK_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must lie in [0, 1], got ", end_factor);
  BRISK_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  double slope = end_factor_ - start_factor_;
  double factor = 1.0 + slope / (double(total_iters_) * start_factor_ + double(last_epoch_ - 1) * slope);
  for (double& lr : lrs) lr *= factor;
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() {
  std::vector<double> lrs;
  double done = double(std::min(total_iters_, last_epoch_)) / double(total_iters_);
  for (double base : base_lrs_) lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done));
  return lrs;
}

// ---- ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> ExponentialLR::closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, double(last_epoch_)));
  return lrs;
}

// ---- PolynomialLR

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  BRISK_CHECK(total_iters > 0, "PolynomialLR: total_iters must be positive, got ", total_iters);
  initial_step();
}

std::vector<double> PolynomialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ > total_iters_) return lrs;
  double t = double(total_iters_);
  double factor = std::pow((1.0 - double(last_epoch_) / t) / (1.0 - double(last_epoch_ - 1) / t), power_);
  for (double& lr : lrs) lr *= factor;
  return lrs;
}

std::vector<double> PolynomialLR::closed_form_lr() {
  std::vector<double> lrs;
  double done = double(std::min(total_iters_, last_epoch_)) / double(total_iters_);
  for (double base : base_lrs_) lrs.push_back(base * std::pow(1.0 - done, power_));
  return lrs;
}

// ---- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  BRISK_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  double T = double(T_max_);
  double t = double(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (size_t g = 0; g < lrs.size(); ++g) {
      lrs[g] = eta_min_ + (base_lrs_[g] - eta_min_) * (1 + std::cos(t * kPi / T)) / 2;
    }
    return lrs;
  }
  if (py_mod(last_epoch_ - 1 - T_max_, 2 * T_max_) == 0) {
    for (size_t g = 0; g < lrs.size(); ++g) lrs[g] = lrs[g] + (base_lrs_[g] - eta_min_) * (1 - std::cos(kPi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs) {
    lr = (1 + std::cos(kPi * t / T)) / (1 + std::cos(kPi * (t - 1) / T)) * (lr - eta_min_) + eta_min_;
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) {
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * double(last_epoch_) / double(T_max_))) / 2);
  }
  return lrs;
}

// ---- CosineAnnealingWarmRestarts

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(optimizer), T_0_(T_0), T_mult_(T_mult), eta_min_(eta_min), T_i_(double(T_0)), T_cur_(-1) {
  BRISK_CHECK(T_0 > 0, "CosineAnnealingWarmRestarts: T_0 must be positive, got ", T_0);
  BRISK_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", T_mult);
  initial_step();
}

std::vector<double> CosineAnnealingWarmRestarts::get_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * T_cur_ / T_i_)) / 2);
  return lrs;
}

void CosineAnnealingWarmRestarts::step() {
  if (last_epoch_ < 0) {
    step(0.0);
    return;
  }
  step_count_ += 1;
  T_cur_ = T_cur_ + 1;
  if (T_cur_ >= T_i_) {
    T_cur_ = T_cur_ - T_i_;
    T_i_ = T_i_ * double(T_mult_);
  }
  last_epoch_ += 1;
  apply(get_lr());
}

void CosineAnnealingWarmRestarts::step(double epoch) {
  BRISK_CHECK(epoch >= 0, "CosineAnnealingWarmRestarts: expected a non-negative epoch, got ", epoch);
  step_count_ += 1;
  double T_0 = double(T_0_);
  if (epoch >= T_0) {
    if (T_mult_ == 1) {
      T_cur_ = std::fmod(epoch, T_0);
    } else {
      double mult = double(T_mult_);
      double n = std::floor(std::log(epoch / T_0 * (mult - 1) + 1) / std::log(mult));
      T_cur_ = epoch - T_0 * (std::pow(mult, n) - 1) / (mult - 1);
      T_i_ = T_0 * std::pow(mult, n);
    }
  } else {
    T_i_ = T_0;
    T_cur_ = epoch;
  }
  last_epoch_ = int64_t(std::floor(epoch));
  apply(get_lr());
}

Scalars CosineAnnealingWarmRestarts::state_dict() const {
  Scalars s = LRScheduler::state_dict();
  s["T_i"] = T_i_;
  s["T_cur"] = T_cur_;
  return s;
}

void CosineAnnealingWarmRestarts::check_state_dict(const Scalars& state) const {
  LRScheduler::check_state_dict(state);
  scalar_at(state, "T_i", "CosineAnnealingWarmRestarts");
  scalar_at(state, "T_cur", "CosineAnnealingWarmRestarts");
}

void CosineAnnealingWarmRestarts::load_state_dict(const Scalars& state) {
  LRScheduler::load_state_dict(state);
  T_i_ = scalar_at(state, "T_i", "CosineAnnealingWarmRestarts");
  T_cur_ = scalar_at(state, "T_cur", "CosineAnnealingWarmRestarts");
}

// ---- LambdaLR

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda) : LambdaLR(optimizer, std::vector<Lambda>{std::move(lambda)}) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas) : LRScheduler(optimizer) {
  BRISK_CHECK(lambdas.size() == 1 || lambdas.size() == num_groups(), "LambdaLR: expected 1 or ", num_groups(),
              " lambdas, got ", lambdas.size());
  if (lambdas.size() == 1) lambdas.resize(num_groups(), lambdas[0]);
  lambdas_ = std::move(lambdas);
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(base_lrs_[g] * lambdas_[g](last_epoch_));
  return lrs;
}

// ---- CyclicLR

// PyTorch sets the groups' lr to base_lr before its base class records initial_lr.
CyclicLR::CyclicLR(Optimizer& optimizer, const CyclicLROptions& options)
    : LRScheduler(optimizer, per_group("CyclicLR", "base_lr", options.base_lr, optimizer.num_groups())),
      options_(options) {
  size_t n = num_groups();
  std::vector<double> base_lrs = per_group("CyclicLR", "base_lr", options.base_lr, n);
  max_lrs_ = per_group("CyclicLR", "max_lr", options.max_lr, n);
  BRISK_CHECK(options.step_size_up > 0, "CyclicLR: step_size_up must be positive");
  double down = options.step_size_down.value_or(options.step_size_up);
  total_size_ = options.step_size_up + down;
  step_ratio_ = options.step_size_up / total_size_;
  if (options.cycle_momentum) {
    momentum_key_ = momentum_key(opt_, "CyclicLR");
    base_momentums_ = per_group("CyclicLR", "base_momentum", options.base_momentum, n);
    max_momentums_ = per_group("CyclicLR", "max_momentum", options.max_momentum, n);
    for (size_t g = 0; g < n; ++g) {
      opt_.set(g, momentum_key_, max_momentums_[g]);
      opt_.set(g, "max_momentum", max_momentums_[g]);
      opt_.set(g, "base_momentum", base_momentums_[g]);
    }
  }
  initial_step();
  base_lrs_ = base_lrs;
}

double CyclicLR::scale(double x) const {
  if (options_.scale_fn) return options_.scale_fn(x);
  switch (options_.mode) {
    case CyclicMode::Triangular: return 1.0;
    case CyclicMode::Triangular2: return 1 / std::pow(2.0, x - 1);
    case CyclicMode::ExpRange: return std::pow(options_.gamma, x);
  }
  return 1.0;
}

std::vector<double> CyclicLR::get_lr() {
  double t = double(last_epoch_);
  double cycle = std::floor(1 + t / total_size_);
  double x = 1. + t / total_size_ - cycle;
  double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  // triangular modes scale per cycle, exp_range per iteration; a custom scale_fn as told.
  bool per_iteration =
      options_.scale_fn ? options_.scale_mode == ScaleMode::Iterations : options_.mode == CyclicMode::ExpRange;
  double s = scale(per_iteration ? t : cycle);
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    double base_height = (max_lrs_[g] - base_lrs_[g]) * scale_factor;
    lrs.push_back(base_lrs_[g] + base_height * s);
  }
  if (options_.cycle_momentum) {
    for (size_t g = 0; g < base_momentums_.size(); ++g) {
      double base_height = (max_momentums_[g] - base_momentums_[g]) * scale_factor;
      opt_.set(g, momentum_key_, max_momentums_[g] - base_height * s);
    }
  }
  return lrs;
}

// ---- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options)
    : LRScheduler(optimizer), options_(options) {
  const OneCycleLROptions& o = options;
  if (o.total_steps > 0) {
    total_steps_ = o.total_steps;
  } else {
    BRISK_CHECK(o.epochs > 0 && o.steps_per_epoch > 0,
                "OneCycleLR: give total_steps, or epochs and steps_per_epoch (all positive)");
    total_steps_ = o.epochs * o.steps_per_epoch;
  }
  BRISK_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must lie in [0, 1], got ", o.pct_start);
  double steps = double(total_steps_);
  if (o.three_phase) {
    phases_ = {
        {o.pct_start * steps - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
        {2 * o.pct_start * steps - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
        {steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"},
    };
  } else {
    phases_ = {
        {o.pct_start * steps - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
        {steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"},
    };
  }
  size_t n = num_groups();
  std::vector<double> max_lrs = per_group("OneCycleLR", "max_lr", o.max_lr, n);
  for (size_t g = 0; g < n; ++g) {
    double initial_lr = max_lrs[g] / o.div_factor;
    opt_.set(g, "initial_lr", initial_lr);
    opt_.set(g, "max_lr", max_lrs[g]);
    opt_.set(g, "min_lr", initial_lr / o.final_div_factor);
    base_lrs_[g] = initial_lr;
  }
  if (o.cycle_momentum) {
    momentum_key_ = momentum_key(opt_, "OneCycleLR");
    std::vector<double> max_m = per_group("OneCycleLR", "max_momentum", o.max_momentum, n);
    std::vector<double> base_m = per_group("OneCycleLR", "base_momentum", o.base_momentum, n);
    for (size_t g = 0; g < n; ++g) {
      opt_.set(g, momentum_key_, max_m[g]);
      opt_.set(g, "max_momentum", max_m[g]);
      opt_.set(g, "base_momentum", base_m[g]);
    }
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == AnnealStrategy::Linear) return (end - start) * pct + start;
  double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() {
  BRISK_CHECK(last_epoch_ <= total_steps_, "OneCycleLR: stepped ", last_epoch_, " times, but total_steps is ",
              total_steps_);
  double step_num = double(last_epoch_);
  std::vector<double> lrs;
  for (size_t g = 0; g < num_groups(); ++g) {
    double start_step = 0;
    double lr = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (step_num <= phase.end_step || i + 1 == phases_.size()) {
        double pct = (step_num - start_step) / (phase.end_step - start_step);
        lr = anneal(opt_.get(g, phase.start_lr), opt_.get(g, phase.end_lr), pct);
        if (options_.cycle_momentum) {
          double m = anneal(opt_.get(g, phase.start_momentum), opt_.get(g, phase.end_momentum), pct);
          opt_.set(g, momentum_key_, m);
        }
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
  }
  return lrs;
}

// ---- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  BRISK_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  BRISK_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: expected ", schedulers_.size() - 1,
              " milestones for ", schedulers_.size(), " schedulers, got ", milestones_.size());
  for (auto& s : schedulers_) {
    BRISK_CHECK(s && &s->optimizer() == &opt_, "SequentialLR: every scheduler must drive the same optimizer");
  }
  BRISK_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be sorted");
  last_epoch_ = 0;
  // Undo the first step each child took when it was built, then take the first one's again.
  for (size_t g = 0; g < num_groups(); ++g) opt_.set_lr(g, opt_.get(g, "initial_lr"));
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  last_epoch_ += 1;
  step_count_ += 1;
  size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) {
    s.step_to(0);
  } else {
    s.step();
  }
  last_lr_ = s.get_last_lr();
}

void SequentialLR::step_to(int64_t epoch) {
  BRISK_FAIL("SequentialLR: step_to is not supported (step once per epoch)");
}

Scalars SequentialLR::state_dict() const {
  Scalars s = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    for (const auto& [k, v] : schedulers_[i]->state_dict()) s[std::to_string(i) + "." + k] = v;
  }
  return s;
}

void SequentialLR::check_state_dict(const Scalars& state) const {
  LRScheduler::check_state_dict(state);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->check_state_dict(child_state(state, i));
}

void SequentialLR::load_state_dict(const Scalars& state) {
  LRScheduler::load_state_dict(state);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(child_state(state, i));
}

// ---- ChainedScheduler

namespace {
Optimizer& first_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& schedulers) {
  BRISK_CHECK(!schedulers.empty() && schedulers[0], "ChainedScheduler: needs at least one scheduler");
  return schedulers[0]->optimizer();
}
}  // namespace

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(first_optimizer(schedulers)), schedulers_(std::move(schedulers)) {
  for (auto& s : schedulers_) {
    BRISK_CHECK(s && &s->optimizer() == &opt_, "ChainedScheduler: every scheduler must drive the same optimizer");
  }
  last_lr_ = group_lrs();
}

void ChainedScheduler::step() {
  step_count_ += 1;
  last_epoch_ += 1;
  for (auto& s : schedulers_) s->step();
  last_lr_ = group_lrs();
}

void ChainedScheduler::step_to(int64_t epoch) {
  BRISK_FAIL("ChainedScheduler: step_to is not supported (step once per epoch)");
}

Scalars ChainedScheduler::state_dict() const {
  Scalars s = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    for (const auto& [k, v] : schedulers_[i]->state_dict()) s[std::to_string(i) + "." + k] = v;
  }
  return s;
}

void ChainedScheduler::check_state_dict(const Scalars& state) const {
  LRScheduler::check_state_dict(state);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->check_state_dict(child_state(state, i));
}

void ChainedScheduler::load_state_dict(const Scalars& state) {
  LRScheduler::load_state_dict(state);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(child_state(state, i));
}

// ---- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : opt_(optimizer), options_(options) {
  BRISK_CHECK(options.factor < 1.0, "ReduceLROnPlateau: factor must be < 1, got ", options.factor);
  min_lrs_ = per_group("ReduceLROnPlateau", "min_lr", options.min_lr, opt_.num_groups());
  best_ = options.mode == PlateauMode::Min ? std::numeric_limits<double>::infinity()
                                           : -std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < opt_.num_groups(); ++g) last_lr_.push_back(opt_.lr(g));
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const ReduceLROnPlateauOptions& o = options_;
  bool rel = o.threshold_mode == ThresholdMode::Rel;
  if (o.mode == PlateauMode::Min) return rel ? a < best * (1 - o.threshold) : a < best - o.threshold;
  return rel ? a > best * (o.threshold + 1) : a > best + o.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  last_epoch_ += 1;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (in_cooldown()) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // no bad epochs counted in cooldown
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < opt_.num_groups(); ++g) {
      double old_lr = opt_.lr(g);
      double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps) opt_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (size_t g = 0; g < opt_.num_groups(); ++g) last_lr_.push_back(opt_.lr(g));
}

Scalars ReduceLROnPlateau::state_dict() const {
  Scalars s;
  s["best"] = best_;
  s["num_bad_epochs"] = double(num_bad_epochs_);
  s["cooldown_counter"] = double(cooldown_counter_);
  s["last_epoch"] = double(last_epoch_);
  save_list(s, "last_lr", last_lr_);
  return s;
}

void ReduceLROnPlateau::check_state_dict(const Scalars& state) const {
  const char* who = "ReduceLROnPlateau";
  scalar_at(state, "best", who);
  for (const char* key : {"num_bad_epochs", "cooldown_counter", "last_epoch"})
    scalar_count(scalar_at(state, key, who), key, who);
  load_list(state, "last_lr", opt_.num_groups(), who);
}

void ReduceLROnPlateau::load_state_dict(const Scalars& state) {
  check_state_dict(state);  // nothing below throws
  best_ = scalar_at(state, "best", "ReduceLROnPlateau");
  const char* who = "ReduceLROnPlateau";
  num_bad_epochs_ = scalar_count(scalar_at(state, "num_bad_epochs", who), "num_bad_epochs", who);
  cooldown_counter_ = scalar_count(scalar_at(state, "cooldown_counter", who), "cooldown_counter", who);
  last_epoch_ = scalar_count(scalar_at(state, "last_epoch", who), "last_epoch", who);
  last_lr_ = load_list(state, "last_lr", opt_.num_groups(), "ReduceLROnPlateau");
}

}  // namespace brisk::optim
