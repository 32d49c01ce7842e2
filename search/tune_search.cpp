// search/tune_search.cpp: the searchers (RandomSearch, Grid, Tpe with its Parzen estimator,
// Evolution) and the schedulers (Asha, MedianStopping). Each is a pure function of the space,
// the history and a counter-based Rng, which is what makes run()'s results independent of
// timing and a resumed search identical to an uninterrupted one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "search/tune.h"

namespace brisk::tune {

Value sample_param(const Param& p, Rng& rng);  // search/tune_space.cpp

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double quantize(double x, double q, double low, double high) {
  const double v = std::round(x / q) * q;
  return std::clamp(v, std::ceil(low / q) * q, std::floor(high / q) * q);
}

// A numeric parameter in the space the models work in: log for the log kinds; an integer is a
// quantized real on [low - 0.5, high + 0.5] with q = 1 (each value gets a bin of equal width).
struct Axis {
  double low, high;  // internal bounds
  double q;          // in the parameter's own scale; 0: continuous
  bool log;
};

Axis axis_of(const Param& p) {
  switch (p.kind) {
    case Kind::Uniform: return {p.low, p.high, 0, false};
    case Kind::QUniform: return {p.low, p.high, p.q, false};
    case Kind::LogUniform: return {std::log(p.low), std::log(p.high), 0, true};
    case Kind::QLogUniform: return {std::log(p.low), std::log(p.high), p.q, true};
    case Kind::Integer: return {double(p.ilow) - 0.5, double(p.ihigh) + 0.5, 1, false};
    case Kind::Choice: break;
  }
  BRISK_FAIL("tune: '", p.name, "' is a choice, not a numeric axis");
}

double internal(const Param& p, const Value& v) {
  const double x = p.kind == Kind::Integer ? double(std::get<int64_t>(v)) : std::get<double>(v);
  return axis_of(p).log ? std::log(x) : x;
}

// The parameter's value for internal coordinate u.
Value external(const Param& p, double u) {
  const Axis a = axis_of(p);
  const double x = a.log ? std::exp(u) : u;
  if (p.kind == Kind::Integer) return std::clamp<int64_t>(int64_t(std::llround(x)), p.ilow, p.ihigh);
  if (a.q > 0) return quantize(x, a.q, p.low, p.high);
  return std::clamp(x, p.low, p.high);
}

size_t option_index(const Param& p, const Value& v) {
  const auto it = std::find(p.options.begin(), p.options.end(), std::get<std::string>(v));
  return size_t(it - p.options.begin());
}

double normal_cdf(double x, double mu, double sigma) { return 0.5 * std::erfc(-(x - mu) / (sigma * std::sqrt(2.0))); }

// Hyperopt's linear_forgetting_weights: ones, the oldest n - lf ramped from 1/n up to 1.
std::vector<double> forgetting_weights(size_t n, int lf) {
  std::vector<double> w(n, 1.0);
  if (lf <= 0 || n <= size_t(lf)) return w;
  const size_t ramp = n - size_t(lf);
  for (size_t i = 0; i < ramp; ++i) {
    const double lo = 1.0 / double(n);
    w[i] = ramp == 1 ? lo : lo + (1.0 - lo) * double(i) / double(ramp - 1);
  }
  return w;
}

bool better(double a, double b, Mode mode) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return mode == Mode::Max ? a > b : a < b;
}

}  // namespace

// ---- Parzen ----

Parzen Parzen::fit(const std::vector<double>& obs, double prior_weight, double prior_mu, double prior_sigma, int lf) {
  BRISK_CHECK(prior_sigma > 0 && prior_weight > 0, "tune: Parzen::fit needs prior_sigma > 0 and prior_weight > 0");
  const size_t n = obs.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return obs[a] < obs[b]; });
  const std::vector<double> w_time = forgetting_weights(n, lf);
  Parzen p;
  size_t prior_pos = 0;
  for (size_t i = 0; i < n; ++i) {
    if (obs[order[i]] < prior_mu) prior_pos = i + 1;  // numpy searchsorted, side left
  }
  for (size_t i = 0; i < n; ++i) {
    if (i == prior_pos) {
      p.mus.push_back(prior_mu);
      p.weights.push_back(prior_weight);
    }
    p.mus.push_back(obs[order[i]]);
    p.weights.push_back(w_time[order[i]]);
  }
  if (prior_pos == n) {
    p.mus.push_back(prior_mu);
    p.weights.push_back(prior_weight);
  }
  const size_t m = p.mus.size();
  p.sigmas.assign(m, prior_sigma);
  if (n == 1) {
    p.sigmas[prior_pos == 0 ? 1 : 0] = prior_sigma * 0.5;
  } else if (n >= 2) {
    for (size_t i = 1; i + 1 < m; ++i) p.sigmas[i] = std::max(p.mus[i] - p.mus[i - 1], p.mus[i + 1] - p.mus[i]);
    p.sigmas[0] = p.mus[1] - p.mus[0];
    p.sigmas[m - 1] = p.mus[m - 1] - p.mus[m - 2];
  }
  const double max_sigma = prior_sigma, min_sigma = prior_sigma / std::min(100.0, 1.0 + double(m));
  for (double& s : p.sigmas) s = std::clamp(s, min_sigma, max_sigma);
  p.sigmas[prior_pos] = prior_sigma;
  const double total = std::accumulate(p.weights.begin(), p.weights.end(), 0.0);
  for (double& w : p.weights) w /= total;
  return p;
}

double Parzen::sample(Rng& rng, double low, double high) const {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    double u = rng.uniform(), acc = 0;
    size_t k = 0;
    while (k + 1 < weights.size() && (acc += weights[k]) <= u) ++k;
    const double x = mus[k] + sigmas[k] * rng.normal();
    if (x >= low && x <= high) return x;
  }
  return std::clamp(mus[0], low, high);  // unreachable in practice: the prior alone accepts ~38%
}

double Parzen::log_mass(double a, double b, double low, double high) const {
  double mass = 0, accept = 0;
  for (size_t k = 0; k < mus.size(); ++k) {
    mass += weights[k] * (normal_cdf(b, mus[k], sigmas[k]) - normal_cdf(a, mus[k], sigmas[k]));
    accept += weights[k] * (normal_cdf(high, mus[k], sigmas[k]) - normal_cdf(low, mus[k], sigmas[k]));
  }
  return std::log(std::max(mass, 1e-300)) - std::log(std::max(accept, 1e-300));
}

double Parzen::log_pdf(double x, double low, double high) const {
  double dens = 0, accept = 0;
  for (size_t k = 0; k < mus.size(); ++k) {
    const double z = (x - mus[k]) / sigmas[k];
    dens += weights[k] * std::exp(-0.5 * z * z) / (sigmas[k] * std::sqrt(2 * M_PI));
    accept += weights[k] * (normal_cdf(high, mus[k], sigmas[k]) - normal_cdf(low, mus[k], sigmas[k]));
  }
  return std::log(std::max(dens, 1e-300)) - std::log(std::max(accept, 1e-300));
}

// ---- RandomSearch, Grid ----

std::optional<Config> RandomSearch::propose(const Space& space, const std::vector<Observation>&, int64_t, Rng& rng) {
  return space.sample(rng);
}

Grid::Grid(int points) : points_(points) { BRISK_CHECK(points >= 1, "tune: Grid needs points >= 1, got ", points); }

std::string Grid::describe() const { return "grid points=" + std::to_string(points_); }

namespace {

std::vector<Value> grid_values(const Param& p, int points) {
  std::vector<Value> out;
  if (p.kind == Kind::Choice) {
    for (const std::string& o : p.options) out.emplace_back(o);
    return out;
  }
  if (p.kind == Kind::Integer && p.ihigh - p.ilow + 1 <= points) {
    for (int64_t v = p.ilow; v <= p.ihigh; ++v) out.emplace_back(v);
    return out;
  }
  const Axis a = axis_of(p);
  const double lo = p.kind == Kind::Integer ? double(p.ilow) : a.low;
  const double hi = p.kind == Kind::Integer ? double(p.ihigh) : a.high;
  for (int i = 0; i < points; ++i) {
    const double u = points == 1 ? 0.5 * (lo + hi) : lo + (hi - lo) * double(i) / double(points - 1);
    Value v = p.kind == Kind::Integer ? Value(int64_t(std::llround(u))) : external(p, u);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

void enumerate_from(const Space& space, size_t i, Config& c, int points, std::vector<Config>& out) {
  const auto& ps = space.params();
  if (i == ps.size()) {
    out.push_back(c);
    return;
  }
  if (!space.active(ps[i], c)) return enumerate_from(space, i + 1, c, points, out);
  for (const Value& v : grid_values(ps[i], points)) {
    Config next = c;
    next.set(ps[i].name, v);
    enumerate_from(space, i + 1, next, points, out);
  }
}

}  // namespace

std::vector<Config> Grid::enumerate(const Space& space, int points) {
  std::vector<Config> out;
  Config c;
  enumerate_from(space, 0, c, points, out);
  return out;
}

std::optional<Config> Grid::propose(const Space& space, const std::vector<Observation>&, int64_t id, Rng&) {
  if (grid_of_ != space.describe()) {
    grid_ = enumerate(space, points_);
    grid_of_ = space.describe();
  }
  if (id < 0 || size_t(id) >= grid_.size()) return std::nullopt;
  return grid_[size_t(id)];
}

// ---- Tpe ----

// Note [TPE as Hyperopt does it]
// hyperopt/tpe.py, tpe.suggest with its defaults: with fewer than n_startup finished trials, a
// draw from the prior. Otherwise the trials are sorted by loss and the best
// ceil(gamma * sqrt(n)) (at most lf) form the good set, the rest the bad set. Each parameter is
// modelled on its own (Hyperopt's "independent" TPE): l(x) from its values in good trials
// where it was active, g(x) from the bad ones, each an adaptive Parzen estimator with the
// prior (mid-range, sigma = the range, in log space for log kinds) as one component.
// n_candidates draws from l are scored by log l(x) - log g(x) and the best is kept. Quantized
// and integer parameters score the probability mass of their bin, as Hyperopt's GMM1_lpdf
// with q; a choice uses pseudo-counts (observations weighted by linear forgetting, plus
// prior_weight spread evenly over the options). Parameters are proposed in declaration order,
// so a conditional one is drawn only when its parent's proposed option activates it.

std::string Tpe::describe() const {
  std::ostringstream s;
  s << "tpe n_startup=" << o_.n_startup << " gamma=" << o_.gamma << " n_candidates=" << o_.n_candidates
    << " prior_weight=" << o_.prior_weight << " lf=" << o_.lf;
  return s.str();
}

std::optional<Config> Tpe::propose(const Space& space, const std::vector<Observation>& history, int64_t, Rng& rng) {
  const size_t n = history.size();
  if (n < size_t(std::max(o_.n_startup, 1))) return space.sample(rng);
  std::vector<size_t> by_loss(n);
  std::iota(by_loss.begin(), by_loss.end(), size_t(0));
  std::stable_sort(by_loss.begin(), by_loss.end(),
                   [&](size_t a, size_t b) { return history[a].loss < history[b].loss; });
  size_t n_below = size_t(std::ceil(o_.gamma * std::sqrt(double(n))));
  if (o_.lf > 0) n_below = std::min(n_below, size_t(o_.lf));
  std::vector<bool> good(n, false);
  for (size_t i = 0; i < n_below && i < n; ++i) good[by_loss[i]] = true;

  Config c;
  for (const Param& p : space.params()) {
    if (!space.active(p, c)) continue;
    if (p.kind == Kind::Choice) {
      const size_t k = p.options.size();
      std::vector<double> below_obs, above_obs;  // option indices, in id order
      for (size_t i = 0; i < n; ++i) {
        if (!history[i].config->has(p.name)) continue;
        (good[i] ? below_obs : above_obs).push_back(double(option_index(p, history[i].config->values().at(p.name))));
      }
      auto probs = [&](const std::vector<double>& obs) {
        std::vector<double> pr(k, o_.prior_weight / double(k));
        const std::vector<double> w = forgetting_weights(obs.size(), o_.lf);
        for (size_t i = 0; i < obs.size(); ++i)
          if (size_t(obs[i]) < k) pr[size_t(obs[i])] += w[i];
        const double t = std::accumulate(pr.begin(), pr.end(), 0.0);
        for (double& v : pr) v /= t;
        return pr;
      };
      const std::vector<double> pl = probs(below_obs), pg = probs(above_obs);
      size_t best = 0;
      double best_score = -kInf;
      for (int j = 0; j < o_.n_candidates; ++j) {
        double u = rng.uniform(), acc = 0;
        size_t o = 0;
        while (o + 1 < k && (acc += pl[o]) <= u) ++o;
        const double score = std::log(pl[o]) - std::log(pg[o]);
        if (score > best_score) best_score = score, best = o;
      }
      c.set(p.name, p.options[best]);
      continue;
    }
    const Axis a = axis_of(p);
    std::vector<double> below_obs, above_obs;
    for (size_t i = 0; i < n; ++i) {
      if (!history[i].config->has(p.name)) continue;
      (good[i] ? below_obs : above_obs).push_back(internal(p, history[i].config->values().at(p.name)));
    }
    const double prior_mu = 0.5 * (a.low + a.high), prior_sigma = a.high - a.low;
    const Parzen l = Parzen::fit(below_obs, o_.prior_weight, prior_mu, prior_sigma, o_.lf);
    const Parzen g = Parzen::fit(above_obs, o_.prior_weight, prior_mu, prior_sigma, o_.lf);
    Value best;
    double best_score = -kInf;
    for (int j = 0; j < o_.n_candidates; ++j) {
      const Value v = external(p, l.sample(rng, a.low, a.high));
      double score;
      if (a.q > 0) {
        // the bin of v, in the parameter's scale, mapped to the internal one
        const double x = p.kind == Kind::Integer ? double(std::get<int64_t>(v)) : std::get<double>(v);
        double lo = x - 0.5 * a.q, hi = x + 0.5 * a.q;
        if (a.log) lo = std::log(std::max(lo, p.low)), hi = std::log(std::min(hi, p.high));
        lo = std::max(lo, a.low), hi = std::min(hi, a.high);
        score = l.log_mass(lo, hi, a.low, a.high) - g.log_mass(lo, hi, a.low, a.high);
      } else {
        const double u = internal(p, v);
        score = l.log_pdf(u, a.low, a.high) - g.log_pdf(u, a.low, a.high);
      }
      if (j == 0 || score > best_score) best_score = score, best = v;
    }
    c.set(p.name, best);
  }
  return c;
}

// ---- Evolution ----

std::string Evolution::describe() const {
  std::ostringstream s;
  s << "evolution population=" << o_.population << " tournament=" << o_.tournament << " mutate_prob=" << o_.mutate_prob
    << " sigma=" << o_.sigma;
  return s.str();
}

std::optional<Config> Evolution::propose(const Space& space, const std::vector<Observation>& history, int64_t,
                                         Rng& rng) {
  BRISK_CHECK(o_.population >= 1 && o_.tournament >= 1, "tune: Evolution needs population >= 1 and tournament >= 1");
  if (history.size() < size_t(o_.population)) return space.sample(rng);
  const size_t first = history.size() - size_t(o_.population);  // the latest: the oldest age out
  size_t parent = first + size_t(rng.below(o_.population));
  for (int t = 1; t < o_.tournament; ++t) {
    const size_t i = first + size_t(rng.below(o_.population));
    if (history[i].loss < history[parent].loss) parent = i;
  }
  const Config& mom = *history[parent].config;
  size_t n_active = 0;
  for (const Param& p : space.params()) n_active += mom.has(p.name);
  const double pm = o_.mutate_prob > 0 ? o_.mutate_prob : 1.0 / double(std::max<size_t>(n_active, 1));
  Config child;
  for (int attempt = 0; attempt < 20 && (attempt == 0 || child == mom); ++attempt) {
    child = Config();
    for (const Param& p : space.params()) {
      if (!space.active(p, child)) continue;
      if (!mom.has(p.name)) {  // newly active under a mutated parent choice
        child.set(p.name, sample_param(p, rng));
        continue;
      }
      const Value& v = mom.values().at(p.name);
      if (rng.uniform() >= pm) {
        child.set(p.name, v);
      } else if (p.kind == Kind::Choice) {
        child.set(p.name, p.options[size_t(rng.below(int64_t(p.options.size())))]);
      } else {
        const Axis a = axis_of(p);
        const double u = std::clamp(internal(p, v) + o_.sigma * (a.high - a.low) * rng.normal(), a.low, a.high);
        child.set(p.name, external(p, u));
      }
    }
  }
  return child;
}

// ---- Asha ----

Asha::Asha(AshaOptions o) : o_(o) {
  BRISK_CHECK(o.min_resource >= 1, "tune: Asha needs min_resource >= 1, got ", o.min_resource);
  BRISK_CHECK(o.eta > 1, "tune: Asha needs eta > 1, got ", o.eta);
  BRISK_CHECK(o.max_resource >= 0, "tune: Asha needs max_resource >= 0 (0: no limit), got ", o.max_resource);
}

std::string Asha::describe() const {
  std::ostringstream s;
  s << "asha r=" << o_.min_resource << " eta=" << o_.eta << " max=" << o_.max_resource;
  return s.str();
}

std::vector<int64_t> Asha::rungs_up_to(int64_t step) const {
  std::vector<int64_t> out;
  for (double m = double(o_.min_resource); m <= double(step); m *= o_.eta) {
    const int64_t r = int64_t(std::ceil(m - 1e-9));
    if (o_.max_resource > 0 && r >= o_.max_resource) break;
    if (out.empty() || out.back() != r) out.push_back(r);
  }
  return out;
}

bool Asha::should_stop(const std::vector<Point>& mine, const std::vector<std::vector<Point>>& earlier,
                       Mode mode) const {
  if (mine.empty()) return false;
  const int64_t s = mine.back().step;
  const int64_t prev = mine.size() > 1 ? mine[mine.size() - 2].step : std::numeric_limits<int64_t>::min();
  const double v = mine.back().metric;
  for (int64_t rung : rungs_up_to(s)) {
    if (rung <= prev) continue;  // decided at an earlier report
    size_t n = 1, rank = 1;
    for (const auto& curve : earlier) {
      auto it = std::find_if(curve.begin(), curve.end(), [&](const Point& p) { return p.step >= rung; });
      if (it == curve.end()) continue;
      ++n;
      if (!better(v, it->metric, mode)) ++rank;  // ties go to the earlier trial
    }
    const double keep = std::ceil(double(n) / o_.eta - 1e-9);
    if (double(rank) > std::max(1.0, keep)) return true;
  }
  return false;
}

// ---- MedianStopping ----

MedianStopping::MedianStopping(MedianOptions o) : o_(o) {
  BRISK_CHECK(o.min_samples >= 1, "tune: MedianStopping needs min_samples >= 1, got ", o.min_samples);
}

std::string MedianStopping::describe() const {
  return "median grace=" + std::to_string(o_.grace) + " min_samples=" + std::to_string(o_.min_samples);
}

bool MedianStopping::should_stop(const std::vector<Point>& mine, const std::vector<std::vector<Point>>& earlier,
                                 Mode mode) const {
  if (mine.empty() || mine.back().step < o_.grace) return false;
  std::vector<double> means;
  for (const auto& curve : earlier) {
    if (curve.empty()) continue;
    double total = 0;
    for (const Point& p : curve) total += p.metric;
    if (std::isfinite(total)) means.push_back(total / double(curve.size()));  // a diverged trial has no mean
  }
  if (means.size() < size_t(o_.min_samples)) return false;
  std::sort(means.begin(), means.end());
  const size_t h = means.size() / 2;
  const double median = means.size() % 2 ? means[h] : 0.5 * (means[h - 1] + means[h]);
  double best = mine[0].metric;
  for (const Point& p : mine) best = better(p.metric, best, mode) ? p.metric : best;
  return better(median, best, mode);
}

}  // namespace brisk::tune
