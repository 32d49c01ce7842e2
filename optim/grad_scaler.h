// optim/grad_scaler.h: GradScaler, dynamic loss scaling for F16 (and BF16) training, with
// PyTorch's defaults and semantics (torch.amp.GradScaler): the loss is multiplied by a scale
// before backward so small F16 gradients do not flush to zero; unscale_ divides the gradients
// back in one fused pass that also looks for Inf/NaN; step skips the optimizer's step when it
// found any; update halves the scale after a skipped step and doubles it after
// `growth_interval` finite steps in a row. Beyond PyTorch, a skipped step says which
// parameters had non-finite gradients (overflow provenance, Note [Overflow provenance]).
// Not here: autocast (engine/autocast.h), the unscale op amp_unscale (engine/ops/optim.cpp) and
// its kernels (kernels/cpu/amp.cpp, kernels/cuda/amp.cu).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "optim/optimizer.h"

namespace brisk::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call is a pass-through (scale(loss) is loss)
};

// What the last unscale_ that met a non-finite gradient found.
struct Overflow {
  int64_t update = 0;                 // how many update() calls came before it
  double scale = 0;                   // the scale in use
  std::vector<std::string> params{};  // the optimizer's names of the parameters affected
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale (a differentiable op; call backward on the result).
  Tensor scale(const Tensor& loss) const;

  // Divides the gradients of `opt`'s parameters by the scale, in place, and records whether
  // any was Inf/NaN. At most once per optimizer between two update() calls (a second call is a
  // brisk::Error, as in PyTorch); call it before clip_grad_norm_. Gradients must be floating.
  void unscale_(Optimizer& opt);

  // Unscales (unless unscale_ ran) and calls opt.step() unless a gradient was non-finite.
  // Returns whether the optimizer stepped. Once per optimizer between two update() calls.
  bool step(Optimizer& opt);

  // Adjusts the scale from what this iteration's steps found (x backoff_factor when any
  // optimizer met Inf/NaN, x growth_factor after growth_interval finite iterations) and
  // starts the next iteration. The second form sets the scale instead.
  void update();
  void update(double new_scale);

  double get_scale() const;  // 1 when disabled
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Counters for logs: steps skipped so far, and what the last overflow was.
  int64_t skipped_steps() const { return skipped_; }
  const Overflow& last_overflow() const { return last_overflow_; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
  // (plus skipped_steps). check_state_dict throws a brisk::Error naming the first bad key and
  // changes nothing; load_state_dict runs it first.
  Scalars state_dict() const;
  void check_state_dict(const Scalars& state) const;
  void load_state_dict(const Scalars& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };

  PerOptimizer& of(const Optimizer& opt) { return per_optimizer_[&opt]; }

  GradScalerOptions options_;
  float scale_;  // F32, as PyTorch's scale tensor: growth and backoff round like it
  int64_t growth_tracker_ = 0;
  int64_t updates_ = 0;
  int64_t skipped_ = 0;
  Overflow last_overflow_;
  std::unordered_map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace brisk::optim
