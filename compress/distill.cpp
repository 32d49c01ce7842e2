// compress/distill.cpp: the distillation losses (written with engine ops, so their gradients come
// from those ops) and Distiller: the teacher's no-grad eval pass with its modes restored, the
// forward hooks that capture the matched features, and their removal.
// Not here: probability-target cross_entropy and kl_div (nn/functional.cpp).
#include "compress/distill.h"

#include <cmath>
#include <sstream>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/functional.h"

namespace brisk::nn::distill {

namespace {

void check_options(const DistillOptions& o, const char* fn) {
  BRISK_CHECK(std::isfinite(o.temperature) && o.temperature > 0, fn, ": temperature must be finite and > 0, got ",
              o.temperature);
  BRISK_CHECK(o.alpha >= 0 && o.alpha <= 1, fn, ": alpha must be in [0, 1], got ", o.alpha);
}

void check_logits(const Tensor& s, const Tensor& t, const char* fn) {
  BRISK_CHECK(s.defined() && t.defined(), fn, ": undefined student or teacher logits");
  BRISK_CHECK(s.dim() >= 2, fn, ": logits must be (N, C) or (N, C, d1, ...), got student ", s.sizes());
  BRISK_CHECK(s.sizes() == t.sizes(), fn, ": student logits ", s.sizes(), " and teacher logits ", t.sizes(),
              " differ in shape");
  BRISK_CHECK(is_floating(s.dtype()) && is_floating(t.dtype()), fn, ": logits must be floating, got student ",
              s.dtype(), ", teacher ", t.dtype());
  BRISK_CHECK(s.device() == t.device(), fn, ": student logits on ", s.device().str(), ", teacher logits on ",
              t.device().str());
}

// Note [Soft targets in log space]
// KL(p_t || p_s) = sum p_t (log p_t - log p_s) is computed from two log_softmax results
// (kl_div with log_target): the same value as PyTorch's usual
// kl_div(log_softmax(s / T), softmax(t / T)), but a teacher probability that underflows to 0
// contributes exp(-large) * (finite) instead of 0 * log 0, and no xlogy masking is needed.
Tensor soft_term(const Tensor& s, const Tensor& t, double temperature) {
  Tensor log_ps = brisk::log_softmax(s / temperature, 1);
  Tensor log_pt = brisk::log_softmax(t / temperature, 1);
  return functional::kl_div_batchmean(log_ps, log_pt, /*log_target=*/true) * (temperature * temperature);
}

Tensor hard_term(const Tensor& s, const Tensor& target, const DistillOptions& o, const char* fn) {
  BRISK_CHECK(target.defined(), fn, ": the hard-label term (alpha = ", o.alpha, " < 1) needs a target");
  return functional::cross_entropy(s, target, {}, Reduction::Mean, -100, o.label_smoothing);
}

// The child at a dotted path ("" is the module itself), as a shared pointer (weak_ptr-able).
ModulePtr resolve(const ModulePtr& root, const std::string& path, const char* which) {
  ModulePtr m = root;
  if (path.empty()) return m;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    ModulePtr next = m->child(part);
    BRISK_CHECK(next != nullptr, "Distiller: the ", which, " (", root->type_name(), ") has no submodule '", path, "'");
    m = next;
  }
  return m;
}

}  // namespace

Tensor soft_target_loss(const Tensor& student_logits, const Tensor& teacher_logits, double temperature) {
  check_logits(student_logits, teacher_logits, "soft_target_loss");
  BRISK_CHECK(std::isfinite(temperature) && temperature > 0,
              "soft_target_loss: temperature must be finite and > 0, got ", temperature);
  return soft_term(student_logits, teacher_logits, temperature);
}

Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& target,
                         const DistillOptions& o) {
  check_options(o, "distillation_loss");
  check_logits(student_logits, teacher_logits, "distillation_loss");
  Tensor loss;
  if (o.alpha > 0) loss = soft_term(student_logits, teacher_logits, o.temperature) * o.alpha;
  if (o.alpha < 1) {
    Tensor hard = hard_term(student_logits, target, o, "distillation_loss") * (1 - o.alpha);
    loss = loss.defined() ? loss + hard : hard;
  }
  return loss;
}

// ---- Distiller

struct Distiller::Match {
  std::string student_path, teacher_path;
  ModulePtr adapter;
  double weight = 1;
  bool active = false;  // capture only during a Distiller step
  Tensor student_out, teacher_out;
  int student_calls = 0, teacher_calls = 0;
};

Distiller::Distiller(ModulePtr teacher, ModulePtr student, DistillOptions options)
    : teacher_(std::move(teacher)),
      student_(std::move(student)),
      options_(options),
      adapters_(std::make_shared<ModuleList>()) {
  BRISK_CHECK(teacher_ && student_, "Distiller: teacher and student must be modules, got a null pointer");
  BRISK_CHECK(teacher_ != student_, "Distiller: teacher and student are the same module");
  check_options(options_, "Distiller");
}

Distiller::~Distiller() { remove_hooks(); }

void Distiller::match_features(const std::string& student_path, const std::string& teacher_path, ModulePtr adapter,
                               double weight) {
  BRISK_CHECK(!hooks_removed_, "Distiller::match_features: the hooks were removed (remove_hooks)");
  BRISK_CHECK(adapter != nullptr,
              "Distiller::match_features: the adapter is a null pointer (use nn::Identity "
              "when the widths already match)");
  BRISK_CHECK(std::isfinite(weight) && weight >= 0, "Distiller::match_features: weight must be finite and >= 0, got ",
              weight);
  ModulePtr s = resolve(student_, student_path, "student");
  ModulePtr t = resolve(teacher_, teacher_path, "teacher");
  auto m = std::make_shared<Match>();
  m->student_path = student_path;
  m->teacher_path = teacher_path;
  m->adapter = adapter;
  m->weight = weight;
  // The hooks own the match (and through it the adapter): after remove_hooks() the modules
  // hold nothing of this Distiller.
  int hs = s->register_forward_hook([m](Module&, const Tensor&, Tensor& out) {
    if (!m->active) return;
    m->student_out = out;
    ++m->student_calls;
  });
  int ht = t->register_forward_hook([m](Module&, const Tensor&, Tensor& out) {
    if (!m->active) return;
    m->teacher_out = out;
    ++m->teacher_calls;
  });
  handles_.emplace_back(s, hs);
  handles_.emplace_back(t, ht);
  adapters_->push_back(std::move(adapter));
  matches_.push_back(std::move(m));
}

void Distiller::remove_hooks() {
  for (auto& [module, handle] : handles_) {
    if (ModulePtr m = module.lock()) m->remove_hook(handle);
  }
  handles_.clear();
  hooks_removed_ = true;
}

NamedTensors Distiller::named_parameters() const {
  NamedTensors out = student_->named_parameters();
  for (auto& [name, t] : adapters_->named_parameters()) out.emplace_back("adapters." + name, t);
  return out;
}

Tensor Distiller::teacher_forward(const Tensor& x) {
  // Each module's own mode, parents first: train(mode) recurses, so restoring in this order
  // leaves every module as it was (a teacher with some children frozen in eval stays so).
  struct ModeRestore {
    std::vector<std::pair<Module*, bool>> modes;
    ~ModeRestore() {
      for (auto& [m, training] : modes) m->train(training);
    }
  } restore;
  for (auto& [name, m] : teacher_->named_modules()) restore.modes.emplace_back(m, m->is_training());
  teacher_->eval();
  NoGradGuard no_grad;
  return (*teacher_)(x);
}

DistillLosses Distiller::operator()(const Tensor& x, const Tensor& target) {
  check_options(options_, "Distiller");
  BRISK_CHECK(!(hooks_removed_ && !matches_.empty()),
              "Distiller: its feature hooks were removed (remove_hooks); build a new Distiller to match features");
  struct Capture {
    std::vector<std::shared_ptr<Match>>& matches;
    explicit Capture(std::vector<std::shared_ptr<Match>>& ms) : matches(ms) {
      for (auto& m : matches) {
        m->active = true;
        m->student_calls = m->teacher_calls = 0;
      }
    }
    ~Capture() {
      for (auto& m : matches) {
        m->active = false;
        m->student_out = Tensor();
        m->teacher_out = Tensor();
      }
    }
  } capture(matches_);

  DistillLosses out;
  out.teacher_logits = teacher_forward(x);
  out.student_logits = (*student_)(x);
  const Tensor& s = out.student_logits;
  check_logits(s, out.teacher_logits, "Distiller");
  if (options_.alpha > 0) out.soft = soft_term(s, out.teacher_logits, options_.temperature);
  if (options_.alpha < 1) out.hard = hard_term(s, target, options_, "Distiller");
  if (out.soft.defined()) out.total = out.soft * options_.alpha;
  if (out.hard.defined()) {
    Tensor h = out.hard * (1 - options_.alpha);
    out.total = out.total.defined() ? out.total + h : h;
  }
  for (auto& m : matches_) {
    BRISK_CHECK(m->student_calls == 1 && m->teacher_calls == 1, "Distiller: feature match '", m->student_path, "' -> '",
                m->teacher_path, "' needs one output of each per step; the student's ran ", m->student_calls,
                " times, the teacher's ", m->teacher_calls);
    Tensor adapted = (*m->adapter)(m->student_out);
    BRISK_CHECK(adapted.sizes() == m->teacher_out.sizes(), "Distiller: the adapted student feature '", m->student_path,
                "' ", adapted.sizes(), " (from ", m->student_out.sizes(), ") does not match the teacher feature '",
                m->teacher_path, "' ", m->teacher_out.sizes());
    Tensor mse = brisk::mse_loss(adapted, m->teacher_out) * m->weight;
    out.features = out.features.defined() ? out.features + mse : mse;
  }
  if (out.features.defined()) out.total = out.total + out.features;
  return out;
}

}  // namespace brisk::nn::distill
