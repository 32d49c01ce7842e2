// engine/grad_mode.h: thread-local switches that change what dispatch records or checks:
// grad mode (NoGradGuard) and anomaly mode (name the first op that produces NaN/Inf).
#pragma once

namespace brisk {

struct GradMode {
  static bool enabled();
  static void set_enabled(bool enabled);
};

// Disables recording for its scope (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets grad mode to `enabled` for its scope (backward with create_graph uses it).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(GradMode::enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// With anomaly mode on, every op's floating outputs (forward) and every backward formula's
// gradients are checked for NaN/Inf; the first offender raises brisk::Error naming the op and
// the module path it ran in (engine/nonfinite.h; NonfiniteWatch records instead of throwing).
struct AnomalyMode {
  static bool enabled();
  static void set_enabled(bool enabled);
};

class AnomalyGuard {
 public:
  AnomalyGuard() : prev_(AnomalyMode::enabled()) { AnomalyMode::set_enabled(true); }
  ~AnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace brisk
