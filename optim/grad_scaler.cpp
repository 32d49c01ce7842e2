// optim/grad_scaler.cpp: GradScaler (optim/grad_scaler.h): the per-optimizer stages, the
// grouping of gradients for the fused unscale, and the scale's update rule.
#include "optim/grad_scaler.h"

#include <cmath>
#include <map>
#include <utility>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::optim {

// Note [Overflow provenance]
// The fused unscale already visits every gradient, so it reports a flag per tensor at no extra
// cost; when any is set, unscale_ keeps the optimizer's names of those parameters (module paths
// when the optimizer was built from named_parameters(): "layer2.0.conv1.weight") in
// last_overflow(), with the scale and the update count, and counts the skipped step. Which op
// produced the first Inf/NaN in forward or backward is the job of engine/nonfinite.h's opt-in
// watch.

namespace {

constexpr double kMaxScale = 3.4028234663852886e38;  // FLT_MAX: the scale is kept in F32

// One group of the fused pass: gradients of one dtype on one device, and where each came from.
struct UnscaleGroup {
  std::vector<Tensor> grads;
  std::vector<const std::string*> names;
};

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), scale_(float(options.init_scale)) {
  BRISK_CHECK(options.init_scale > 0 && options.init_scale <= kMaxScale,
              "GradScaler: init_scale must be positive and fit in F32 (the scale's dtype), got ", options.init_scale);
  BRISK_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ", options.growth_factor);
  BRISK_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
              "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  BRISK_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
              options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  BRISK_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  if (!options_.enabled) return loss;
  BRISK_CHECK(is_floating(loss.dtype()), "GradScaler.scale: the loss is ", loss.str(), " (a floating tensor expected)");
  return loss * double(scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  BRISK_CHECK(!opt.steps_in_backward(), "GradScaler: ", opt.name(),
              " steps in backward (step_in_backward), so its gradients are gone and were never checked for "
              "inf/NaN; a scaled loss needs step_in_backward(false)");
  PerOptimizer& st = of(opt);
  BRISK_CHECK(st.stage != Stage::Unscaled, "GradScaler.unscale_: already called on this ", opt.name(),
              " optimizer since the last update()");
  BRISK_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: called after step() (call update() first)");
  // PyTorch: the reciprocal in double, then rounded to F32 (the scale tensor's dtype).
  const float inv_scale = float(1.0 / double(scale_));
  NoGradGuard no_grad;
  std::map<std::pair<int, int>, UnscaleGroup> groups;  // (device, dtype) -> gradients
  for (size_t g = 0; g < opt.num_groups(); ++g) {
    const ParamGroup& group = opt.group(g);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      BRISK_CHECK(is_floating(grad.dtype()), "GradScaler.unscale_: the gradient of '", group.names[i], "' is ",
                  grad.str(), " (floating gradients only)");
      if (!grad.is_contiguous()) {
        grad = grad.contiguous();
        p.set_grad(grad);
      }
      const Device d = grad.device();
      UnscaleGroup& u = groups[{int(d.type) * 65536 + d.index, int(grad.dtype())}];
      u.grads.push_back(grad);
      u.names.push_back(&group.names[i]);
    }
  }
  std::vector<std::string> bad;
  for (auto& [key, u] : groups) {
    // One amp_unscale per (device, dtype); reading its flags is the step's one host sync.
    const std::vector<uint8_t> found = amp_unscale_(u.grads, inv_scale).to_vector<uint8_t>();
    for (size_t i = 0; i < found.size(); ++i) {
      if (found[i]) bad.push_back(*u.names[i]);
    }
  }
  st.found_inf = !bad.empty();
  st.stage = Stage::Unscaled;
  if (st.found_inf) last_overflow_ = {updates_, double(scale_), std::move(bad)};
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& st = of(opt);
  BRISK_CHECK(st.stage != Stage::Stepped, "GradScaler.step: already called on this ", opt.name(),
              " optimizer since the last update()");
  if (st.stage == Stage::Ready) unscale_(opt);
  st.stage = Stage::Stepped;
  if (st.found_inf) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  BRISK_CHECK(!per_optimizer_.empty(),
              "GradScaler.update: no inf checks were recorded before update() (call "
              "step(optimizer) or unscale_(optimizer) first)");
  bool found_inf = false;
  for (const auto& [opt, st] : per_optimizer_) found_inf |= st.found_inf;
  // PyTorch's _amp_update_scale_: the scale is F32, each product is rounded to it.
  if (found_inf) {
    scale_ = float(double(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = float(double(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
  ++updates_;
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  BRISK_CHECK(new_scale > 0 && new_scale <= kMaxScale,
              "GradScaler.update: new scale must be positive and fit in F32, got ", new_scale);
  scale_ = float(new_scale);
  per_optimizer_.clear();
  ++updates_;
}

double GradScaler::get_scale() const { return options_.enabled ? double(scale_) : 1.0; }

Scalars GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", double(scale_)},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", double(options_.growth_interval)},
          {"_growth_tracker", double(growth_tracker_)},
          {"skipped_steps", double(skipped_)},
          {"updates", double(updates_)}};
}

void GradScaler::check_state_dict(const Scalars& state) const {
  const Scalars mine = state_dict();
  for (const auto& [key, value] : state) {
    BRISK_CHECK(mine.count(key), "GradScaler.load_state_dict: unexpected key '", key, "'",
                options_.enabled ? "" : " (this scaler is disabled: its state is empty)");
  }
  for (const auto& [key, value] : mine) {
    auto it = state.find(key);
    BRISK_CHECK(it != state.end(), "GradScaler.load_state_dict: missing key '", key, "'");
    const double v = it->second;
    if (key == "scale") {
      BRISK_CHECK(v > 0 && v <= kMaxScale, "GradScaler.load_state_dict: 'scale' must be positive and fit in F32, got ",
                  v);
    } else if (key == "growth_factor") {
      BRISK_CHECK(v > 1, "GradScaler.load_state_dict: 'growth_factor' must be > 1, got ", v);
    } else if (key == "backoff_factor") {
      BRISK_CHECK(v > 0 && v < 1, "GradScaler.load_state_dict: 'backoff_factor' must be in (0, 1), got ", v);
    } else {
      const int64_t n = scalar_count(v, key, "GradScaler.load_state_dict");
      BRISK_CHECK(n >= (key == "growth_interval" ? 1 : 0), "GradScaler.load_state_dict: '", key, "' is ", n);
    }
  }
}

void GradScaler::load_state_dict(const Scalars& state) {
  check_state_dict(state);
  if (!options_.enabled) return;
  scale_ = float(state.at("scale"));
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = int64_t(state.at("growth_interval"));
  growth_tracker_ = int64_t(state.at("_growth_tracker"));
  skipped_ = int64_t(state.at("skipped_steps"));
  updates_ = int64_t(state.at("updates"));
  per_optimizer_.clear();
}

}  // namespace brisk::optim
