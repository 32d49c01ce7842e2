// compress/prune.cpp: the pruning methods of compress/prune.h. Masks are computed on the host in double
// (a mask is made once per pruning call, never per step), then stored as a tensor of the
// parameter's dtype and device. See Note [Pruning as PyTorch does it] in compress/prune.h.
// Not here: physical channel removal (compress/prune_channels.cpp).
#include "compress/prune.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::nn::prune {

// ---- Amount
int64_t Amount::to_prune(int64_t n, const char* fn) const {
  if (is_count_) {
    BRISK_CHECK(count_ >= 0, fn, ": amount=", count_,
                " should either be a float in the range [0, 1] or a non-negative integer");
    BRISK_CHECK(count_ <= n, fn, ": amount=", count_, " should be smaller than the number of parameters to prune=", n);
    return count_;
  }
  BRISK_CHECK(fraction_ >= 0.0 && fraction_ <= 1.0, fn, ": amount=", fraction_,
              " should either be a float in the range [0, 1] or a non-negative integer");
  // Python's round(): half to even, which nearbyint does in the default rounding mode.
  return int64_t(std::nearbyint(fraction_ * double(n)));
}

std::string Amount::str() const { return is_count_ ? std::to_string(count_) : detail::cat(fraction_); }

namespace {

std::string orig_name(const std::string& name) { return name + "_orig"; }
std::string mask_name(const std::string& name) { return name + "_mask"; }

std::vector<double> host(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

// What a pruning method works on: the tensor forward sees (the ranking's default scores), the
// current mask (all ones before the first pruning) and the parameter's shape.
struct State {
  Tensor param;  // the parameter (weight_orig once pruned)
  Shape shape;
  std::vector<double> scores;
  std::vector<double> mask;
};

State read_state(const char* fn, Module& m, const std::string& name, const Tensor& importance) {
  const bool pruned = is_pruned(m, name);
  Tensor p = pruned ? m.parameter(orig_name(name)) : m.maybe_parameter(name);
  BRISK_CHECK(p.defined() && (pruned || !m.has_derived(name)), fn, ": module ", m.type_name(), " has no parameter '",
              name, "'");
  BRISK_CHECK(is_floating(p.dtype()), fn, ": parameter '", name, "' of ", m.type_name(), " has dtype ", p.dtype(),
              "; pruning needs a floating parameter");
  State s;
  s.param = p;
  s.shape = p.sizes();
  if (importance.defined()) {
    BRISK_CHECK(importance.sizes() == p.sizes(), fn, ": importance_scores ", importance.sizes(),
                " should have the same shape as parameter '", name, "' ", p.sizes());
    s.scores = host(importance);
  } else {
    s.scores = host(effective(m, name));
  }
  s.mask = pruned ? host(m.buffer(mask_name(name))) : std::vector<double>(size_t(p.numel()), 1.0);
  return s;
}

Tensor derive(Module& m, const std::string& name) {
  const Tensor& orig = m.parameter(orig_name(name));
  const Tensor& mk = m.buffer(mask_name(name));
  return (mk.dtype() == orig.dtype() ? mk : cast(mk, orig.dtype())) * orig;
}

// Stores new_mask: the first time, moves the parameter to name_orig and registers the mask
// buffer and the derived tensor; later, replaces the mask (PyTorch's register_buffer over an
// existing buffer keeps its place).
void commit(Module& m, const std::string& name, const State& s, const std::vector<double>& new_mask) {
  Tensor mk = from_vector(new_mask, s.shape, s.param.dtype(), s.param.device());
  if (!is_pruned(m, name)) {
    Tensor p = m.remove_parameter(name);
    m.register_parameter(orig_name(name), p, p.requires_grad());
    m.register_buffer(mask_name(name), mk);
  } else {
    m.buffer(mask_name(name)) = mk;
  }
  m.set_derived(name, [name](Module& mm) { return derive(mm, name); });
}

// Zeroes the mask of the k alive entries (mask == 1, as PyTorch's container slices) with the
// smallest key; ties: the lower index first. See Note [Pruning ties].
std::vector<double> prune_smallest(const std::vector<double>& mask, const std::vector<double>& key,
                                   const Amount& amount, const char* fn) {
  std::vector<int64_t> alive;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] == 1.0) alive.push_back(int64_t(i));
  }
  const int64_t k = amount.to_prune(int64_t(alive.size()), fn);
  std::stable_sort(alive.begin(), alive.end(), [&](int64_t a, int64_t b) { return key[size_t(a)] < key[size_t(b)]; });
  std::vector<double> out = mask;
  for (int64_t i = 0; i < k; ++i) out[size_t(alive[size_t(i)])] = 0.0;
  return out;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

// Channels along dim: entry i belongs to channel (i / inner) % channels.
struct Channels {
  int64_t dim, count, inner;
  int64_t of(size_t i) const { return (int64_t(i) / inner) % count; }
};

Channels channels_of(const char* fn, const Shape& shape, int64_t dim) {
  const int64_t nd = shape.size();
  BRISK_CHECK(nd > 1, fn,
              ": structured pruning can only be applied to multidimensional tensors; found tensor of shape ", shape,
              " with ", nd, " dims");
  BRISK_CHECK(dim >= -nd && dim < nd, fn, ": invalid dim ", dim, " for a tensor of shape ", shape);
  if (dim < 0) dim += nd;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  return {dim, shape[dim], inner};
}

// Structured: among channels whose mask is not all zero, prunes the k with the smallest key
// (lower index first on ties) by zeroing their mask; the other channels keep their mask.
std::vector<double> prune_channels_smallest(const std::vector<double>& mask, const Channels& ch,
                                            const std::vector<double>& channel_key, const Amount& amount,
                                            const char* fn) {
  std::vector<char> alive(size_t(ch.count), 0);
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] != 0.0) alive[size_t(ch.of(i))] = 1;
  }
  std::vector<int64_t> live;
  for (int64_t c = 0; c < ch.count; ++c) {
    if (alive[size_t(c)]) live.push_back(c);
  }
  const int64_t k = amount.to_prune(int64_t(live.size()), fn);
  std::stable_sort(live.begin(), live.end(),
                   [&](int64_t a, int64_t b) { return channel_key[size_t(a)] < channel_key[size_t(b)]; });
  std::vector<char> drop(size_t(ch.count), 0);
  for (int64_t i = 0; i < k; ++i) drop[size_t(live[size_t(i)])] = 1;
  std::vector<double> out = mask;
  for (size_t i = 0; i < out.size(); ++i) {
    if (drop[size_t(ch.of(i))]) out[i] = 0.0;
  }
  return out;
}

std::vector<double> uniform_host(int64_t n, Generator* gen) {
  if (n == 0) return {};
  return host(rand({n}, DType::F64, Device::cpu(), gen));
}

}  // namespace

// ---- local methods
void identity(Module& m, const std::string& name) {
  State s = read_state("prune.identity", m, name, {});
  commit(m, name, s, s.mask);
}

void random_unstructured(Module& m, const std::string& name, Amount amount, Generator* gen) {
  const char* fn = "prune.random_unstructured";
  State s = read_state(fn, m, name, {});
  commit(m, name, s, prune_smallest(s.mask, uniform_host(int64_t(s.mask.size()), gen), amount, fn));
}

void l1_unstructured(Module& m, const std::string& name, Amount amount, const Tensor& importance_scores) {
  const char* fn = "prune.l1_unstructured";
  State s = read_state(fn, m, name, importance_scores);
  commit(m, name, s, prune_smallest(s.mask, abs_of(s.scores), amount, fn));
}

void ln_structured(Module& m, const std::string& name, Amount amount, double n, int64_t dim,
                   const Tensor& importance_scores) {
  const char* fn = "prune.ln_structured";
  BRISK_CHECK(n > 0, fn, ": norm order n=", n, " must be positive (1, 2, ... or infinity)");
  State s = read_state(fn, m, name, importance_scores);
  Channels ch = channels_of(fn, s.shape, dim);
  std::vector<double> norm(size_t(ch.count), 0.0);
  for (size_t i = 0; i < s.scores.size(); ++i) {
    const double a = std::abs(s.scores[i]);
    double& acc = norm[size_t(ch.of(i))];
    acc = std::isinf(n) ? std::max(acc, a) : acc + std::pow(a, n);
  }
  if (!std::isinf(n)) {
    for (double& v : norm) v = std::pow(v, 1.0 / n);
  }
  commit(m, name, s, prune_channels_smallest(s.mask, ch, norm, amount, fn));
}

void random_structured(Module& m, const std::string& name, Amount amount, int64_t dim, Generator* gen) {
  const char* fn = "prune.random_structured";
  State s = read_state(fn, m, name, {});
  Channels ch = channels_of(fn, s.shape, dim);
  commit(m, name, s, prune_channels_smallest(s.mask, ch, uniform_host(ch.count, gen), amount, fn));
}

void custom_from_mask(Module& m, const std::string& name, const Tensor& mask) {
  const char* fn = "prune.custom_from_mask";
  BRISK_CHECK(mask.defined(), fn, ": mask is undefined");
  State s = read_state(fn, m, name, {});
  BRISK_CHECK(mask.sizes() == s.shape, fn, ": mask ", mask.sizes(), " should have the shape of parameter '", name, "' ",
              s.shape);
  std::vector<double> given = host(mask);
  std::vector<double> out = s.mask;
  for (size_t i = 0; i < out.size(); ++i) out[i] *= given[i];
  commit(m, name, s, out);
}

// ---- global
void global_unstructured(const std::vector<Param>& params, Method method, Amount amount, Generator* gen) {
  const char* fn = "prune.global_unstructured";
  BRISK_CHECK(!params.empty(), fn, ": no parameters given");
  std::vector<State> states;
  std::vector<double> key, mask;
  for (const Param& p : params) {
    BRISK_CHECK(p.module != nullptr, fn, ": null module for parameter '", p.name, "'");
    for (const State& other : states) {
      BRISK_CHECK(other.param.impl() != (is_pruned(*p.module, p.name) ? p.module->parameter(orig_name(p.name))
                                                                      : p.module->maybe_parameter(p.name))
                                            .impl(),
                  fn, ": parameter '", p.name, "' of ", p.module->type_name(), " is listed twice");
    }
    states.push_back(read_state(fn, *p.module, p.name, {}));
    const State& s = states.back();
    key.insert(key.end(), s.scores.begin(), s.scores.end());
    mask.insert(mask.end(), s.mask.begin(), s.mask.end());
  }
  if (method == Method::L1) {
    key = abs_of(std::move(key));
  } else {
    key = uniform_host(int64_t(key.size()), gen);
  }
  std::vector<double> final_mask = prune_smallest(mask, key, amount, fn);
  // As PyTorch, each slice goes through custom_from_mask: the current mask times the slice.
  size_t at = 0;
  for (size_t j = 0; j < params.size(); ++j) {
    const State& s = states[j];
    std::vector<double> out(s.mask.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = s.mask[i] * final_mask[at + i];
    at += out.size();
    commit(*params[j].module, params[j].name, s, out);
  }
}

// ---- state
bool is_pruned(const Module& m, const std::string& name) {
  return m.has_derived(name) && m.maybe_parameter(orig_name(name)).defined() &&
         m.maybe_buffer(mask_name(name)).defined();
}

bool is_pruned(Module& m) {
  for (auto& [path, sub] : m.named_modules()) {
    for (const std::string& name : sub->derived_names()) {
      if (is_pruned(*sub, name)) return true;
    }
  }
  return false;
}

Tensor effective(Module& m, const std::string& name) {
  if (is_pruned(m, name)) return derive(m, name);
  Tensor p = m.maybe_parameter(name);
  BRISK_CHECK(p.defined(), "prune.effective: module ", m.type_name(), " has no parameter '", name, "'");
  return p;
}

Tensor mask(Module& m, const std::string& name) {
  if (is_pruned(m, name)) return m.buffer(mask_name(name));
  return ones_like(effective(m, name));
}

void remove(Module& m, const std::string& name) {
  BRISK_CHECK(is_pruned(m, name), "prune.remove: parameter '", name, "' of module ", m.type_name(),
              " has to be pruned before pruning can be removed");
  Tensor weight;
  {
    NoGradGuard ng;
    weight = derive(m, name);
  }
  m.remove_derived(name);
  Tensor orig = m.remove_parameter(orig_name(name));
  orig.set_data(weight);
  m.remove_buffer(mask_name(name));
  m.register_parameter(name, orig, orig.requires_grad());
}

// ---- report
int64_t SparsityReport::elements() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r.elements;
  return n;
}

int64_t SparsityReport::zeros() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r.zeros;
  return n;
}

double SparsityReport::sparsity() const {
  const int64_t n = elements();
  return n == 0 ? 0.0 : double(zeros()) / double(n);
}

std::string SparsityReport::str() const {
  size_t w = 6;
  for (const auto& r : rows) w = std::max(w, r.module.size() + 1 + r.parameter.size());
  std::ostringstream s;
  s << std::left << std::setw(int(w)) << "tensor" << std::right << std::setw(12) << "elements" << std::setw(12)
    << "zeros" << std::setw(10) << "sparsity"
    << "  pruned\n";
  auto line = [&](const std::string& what, int64_t n, int64_t z, double sp, const char* pruned) {
    s << std::left << std::setw(int(w)) << what << std::right << std::setw(12) << n << std::setw(12) << z
      << std::setw(9) << std::fixed << std::setprecision(2) << 100.0 * sp << "%  " << pruned << "\n";
  };
  for (const auto& r : rows) {
    line(r.module.empty() ? r.parameter : r.module + "." + r.parameter, r.elements, r.zeros, r.sparsity(),
         r.pruned ? "yes" : "no");
  }
  line("total", elements(), zeros(), sparsity(), "");
  return s.str();
}

SparsityReport sparsity_report(Module& model, const std::vector<std::string>& names) {
  SparsityReport report;
  for (auto& [path, m] : model.named_modules()) {
    for (const std::string& name : names) {
      const bool pruned = is_pruned(*m, name);
      if (!pruned && !m->maybe_parameter(name).defined()) continue;
      std::vector<double> v = host(effective(*m, name));
      SparsityRow row;
      row.module = path;
      row.parameter = name;
      row.elements = int64_t(v.size());
      row.zeros = std::count(v.begin(), v.end(), 0.0);
      row.pruned = pruned;
      report.rows.push_back(row);
    }
  }
  return report;
}

// ---- gradual pruning
void CubicSchedule::check() const {
  const char* fn = "prune.CubicSchedule";
  BRISK_CHECK(initial_sparsity >= 0 && initial_sparsity <= final_sparsity && final_sparsity <= 1, fn,
              ": needs 0 <= initial_sparsity <= final_sparsity <= 1, got ", initial_sparsity, " and ", final_sparsity);
  BRISK_CHECK(num_steps >= 1 && frequency >= 1 && begin_step >= 0, fn,
              ": needs num_steps >= 1, frequency >= 1, begin_step >= 0, got ", num_steps, ", ", frequency, ", ",
              begin_step);
}

double CubicSchedule::sparsity_at(int64_t step) const {
  if (step < begin_step) return 0.0;
  const double span = double(num_steps) * double(frequency);
  const double progress = std::min(1.0, double(step - begin_step) / span);
  const double r = 1.0 - progress;
  return final_sparsity + (initial_sparsity - final_sparsity) * r * r * r;
}

bool CubicSchedule::is_pruning_step(int64_t step) const {
  return step >= begin_step && step <= begin_step + num_steps * frequency && (step - begin_step) % frequency == 0;
}

GradualPruner::GradualPruner(std::vector<Param> params, CubicSchedule schedule, bool global)
    : params_(std::move(params)), schedule_(schedule), global_(global) {
  schedule_.check();
  BRISK_CHECK(!params_.empty(), "prune.GradualPruner: no parameters given");
  for (const Param& p : params_) {
    BRISK_CHECK(p.module != nullptr && (is_pruned(*p.module, p.name) || p.module->maybe_parameter(p.name).defined()),
                "prune.GradualPruner: module ", p.module ? p.module->type_name() : "(null)", " has no parameter '",
                p.name, "'");
  }
}

namespace {
// (entries, entries whose mask is not 1) of one parameter.
std::pair<int64_t, int64_t> masked_count(Module& m, const std::string& name) {
  std::vector<double> v = host(mask(m, name));
  int64_t masked = int64_t(v.size()) - std::count(v.begin(), v.end(), 1.0);
  return {int64_t(v.size()), masked};
}
}  // namespace

double GradualPruner::sparsity() const {
  int64_t n = 0, z = 0;
  for (const Param& p : params_) {
    auto [pn, pz] = masked_count(*p.module, p.name);
    n += pn;
    z += pz;
  }
  return n == 0 ? 0.0 : double(z) / double(n);
}

bool GradualPruner::step(int64_t step) {
  if (!schedule_.is_pruning_step(step)) return false;
  const double target = schedule_.sparsity_at(step);
  if (global_) {
    int64_t n = 0, z = 0;
    for (const Param& p : params_) {
      auto [pn, pz] = masked_count(*p.module, p.name);
      n += pn;
      z += pz;
    }
    const int64_t extra = int64_t(std::nearbyint(target * double(n))) - z;
    global_unstructured(params_, Method::L1, Amount(std::max<int64_t>(extra, 0)));
  } else {
    for (const Param& p : params_) {
      auto [pn, pz] = masked_count(*p.module, p.name);
      const int64_t extra = int64_t(std::nearbyint(target * double(pn))) - pz;
      l1_unstructured(*p.module, p.name, Amount(std::max<int64_t>(extra, 0)));
    }
  }
  return true;
}

}  // namespace brisk::nn::prune
