// engine/nonfinite.cpp: scopes, all_finite and the non-finite watch (engine/nonfinite.h).
#include "engine/nonfinite.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/half.h"
#include "engine/hooks.h"

namespace brisk {

namespace {

thread_local std::vector<const std::string*> t_scopes;
thread_local NonfiniteWatch* t_watch = nullptr;
thread_local bool t_in_check = false;  // the checks' own ops are not checked
thread_local detail::BackwardScope* t_backward = nullptr;
const std::string kNoScope;

template <class T>
bool dense_finite(const Tensor& t) {
  const T* p = t.data<T>();
  const int64_t n = t.numel();
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(float(p[i]));
  return bad == 0;
}

template <>
bool dense_finite<double>(const Tensor& t) {
  const double* p = t.data<double>();
  int bad = 0;
  for (int64_t i = 0; i < t.numel(); ++i) bad |= !std::isfinite(p[i]);
  return bad == 0;
}

}  // namespace

ScopeGuard::ScopeGuard(const std::string& name) { t_scopes.push_back(&name); }
ScopeGuard::~ScopeGuard() { t_scopes.pop_back(); }

const std::string& current_scope() { return t_scopes.empty() ? kNoScope : *t_scopes.back(); }

bool scopes_tracked() { return t_watch != nullptr || AnomalyMode::enabled(); }

bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return true;
  NoGradGuard no_grad;
  const bool was = t_in_check;
  t_in_check = true;
  bool ok = true;
  try {
    if (t.device().is_cpu()) {
      const Tensor d = t.contiguous();
      switch (d.dtype()) {
        case DType::F32: ok = dense_finite<float>(d); break;
        case DType::F64: ok = dense_finite<double>(d); break;
        case DType::F16: ok = dense_finite<Half>(d); break;
        case DType::BF16: ok = dense_finite<BFloat16>(d); break;
        default: break;
      }
    } else {
      // amax propagates NaN and sees +-Inf through abs: one reduction and one copy back.
      ok = std::isfinite(amax(abs(t)).item<double>());
    }
  } catch (...) {
    t_in_check = was;
    throw;
  }
  t_in_check = was;
  return ok;
}

std::string NonfiniteEvent::describe() const {
  const std::string what = op + (backward ? " backward" : " forward");
  return scope.empty() ? what : scope + " (" + what + ")";
}

NonfiniteWatch::NonfiniteWatch() : prev_(t_watch) { t_watch = this; }
NonfiniteWatch::~NonfiniteWatch() { t_watch = prev_; }

void NonfiniteWatch::reset() {
  first_ = {};
  count_ = 0;
}

void NonfiniteWatch::report(const char* op, const std::string& scope, bool backward, const Tensor& t) {
  if (count_++ > 0) return;
  if (t_backward) {
    first_ = {t_backward->op, t_backward->scope, true, t.str(), op};
  } else {
    first_ = {op, scope, backward, t.str(), ""};
  }
}

namespace detail {

NonfiniteWatch* active_watch() { return t_watch; }

BackwardScope::BackwardScope(const std::string& op, const std::string& scope)
    : op(op), scope(scope), prev_(t_backward) {
  t_backward = this;
}
BackwardScope::~BackwardScope() { t_backward = prev_; }

void check_outputs(const char* op, const std::string& scope, bool backward, std::span<const Tensor> out) {
  if (t_in_check) return;
  for (const Tensor& t : out) {
    if (all_finite(t)) continue;
    if (AnomalyMode::enabled()) {
      const bool in_formula = t_backward != nullptr;
      const NonfiniteEvent e{in_formula ? t_backward->op : std::string(op), in_formula ? t_backward->scope : scope,
                             backward || in_formula, t.str(), in_formula ? op : ""};
      BRISK_FAIL("anomaly: ", e.describe(), " produced NaN/Inf in ", e.backward ? "a gradient " : "its output ",
                 t.str(), e.inner.empty() ? "" : " (in " + e.inner + ")");
    }
    if (t_watch) t_watch->report(op, scope, backward, t);
  }
}

}  // namespace detail

// ---- anomaly mode's switch and the hooks dispatch and the autograd engine call (engine/hooks.h)
// They live here, so that a program that turns anomaly mode on or makes a NonfiniteWatch links
// this file, whose static initializer installs the hooks.

namespace {
thread_local bool t_anomaly = false;

const std::string* op_scope() { return scopes_tracked() ? &current_scope() : nullptr; }

void check_op(const char* op, std::span<const Tensor> out) {
  if (scopes_tracked()) detail::check_outputs(op, current_scope(), false, out);
}

// Ops inside a backward formula report as the node; its gradients are checked after it.
void check_node(hooks::NodeCall& call, hooks::NodeRun next) {
  if (!scopes_tracked()) return next(call);
  const std::string op = call.node->op_label();
  detail::BackwardScope scope(op, call.node->scope);
  next(call);
  detail::check_outputs(op.c_str(), call.node->scope, true, *call.out);
}

[[maybe_unused]] const bool g_installed = [] {
  hooks::op_scope.store(&op_scope, std::memory_order_relaxed);
  hooks::check_op.store(&check_op, std::memory_order_relaxed);
  hooks::check_node.store(&check_node, std::memory_order_relaxed);
  return true;
}();
}  // namespace

bool AnomalyMode::enabled() { return t_anomaly; }
void AnomalyMode::set_enabled(bool enabled) { t_anomaly = enabled; }

}  // namespace brisk
