// search/tune_space.cpp: Config's typed accessors, the counter-based Rng, and Space: declaring
// parameters (with the checks on bad bounds), conditional activity, sampling from the priors.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "search/tune.h"

namespace brisk::tune {

// ---- Config ----

const Value& Config::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    std::string names;
    for (const auto& [k, v] : values_) names += (names.empty() ? "" : ", ") + k;
    BRISK_FAIL("tune: the config has no parameter '", name, "' (it has: ", names.empty() ? "none" : names, ")");
  }
  return it->second;
}

double Config::real(const std::string& name) const {
  const Value& v = at(name);
  if (const double* d = std::get_if<double>(&v)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&v)) return double(*i);
  BRISK_FAIL("tune: parameter '", name, "' is a choice ('", std::get<std::string>(v), "'), not a real; use choice()");
}

int64_t Config::integer(const std::string& name) const {
  const Value& v = at(name);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  BRISK_FAIL("tune: parameter '", name, "' is not an integer; use ",
             std::holds_alternative<double>(v) ? "real()" : "choice()");
}

const std::string& Config::choice(const std::string& name) const {
  const Value& v = at(name);
  if (const std::string* s = std::get_if<std::string>(&v)) return *s;
  BRISK_FAIL("tune: parameter '", name, "' is not a choice; use ",
             std::holds_alternative<double>(v) ? "real()" : "integer()");
}

std::string Config::str() const {
  std::ostringstream s;
  s.precision(4);
  bool first = true;
  for (const auto& [k, v] : values_) {
    s << (first ? "" : " ") << k << "=";
    first = false;
    if (const double* d = std::get_if<double>(&v))
      s << *d;
    else if (const int64_t* i = std::get_if<int64_t>(&v))
      s << *i;
    else
      s << std::get<std::string>(v);
  }
  return s.str();
}

// ---- Rng ----

uint64_t Rng::next_u64() {
  const Philox4 r = philox(seed_, counter_++, stream_);
  return uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32);
}

double Rng::uniform() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

int64_t Rng::below(int64_t n) { return int64_t(uniform() * double(n)) % n; }

// ---- Space ----

Space& Space::add(Param p) {
  BRISK_CHECK(!p.name.empty(), "tune: a parameter needs a name");
  for (const Param& q : params_) BRISK_CHECK(q.name != p.name, "tune: parameter '", p.name, "' is declared twice");
  const bool real = p.kind != Kind::Integer && p.kind != Kind::Choice;
  if (real) {
    BRISK_CHECK(std::isfinite(p.low) && std::isfinite(p.high) && p.low < p.high, "tune: parameter '", p.name,
                "' needs low < high (both finite), got [", p.low, ", ", p.high, "]");
  }
  if (p.kind == Kind::LogUniform || p.kind == Kind::QLogUniform)
    BRISK_CHECK(p.low > 0, "tune: log-uniform parameter '", p.name, "' needs low > 0, got ", p.low);
  if (p.kind == Kind::QUniform || p.kind == Kind::QLogUniform) {
    BRISK_CHECK(std::isfinite(p.q) && p.q > 0, "tune: quantized parameter '", p.name, "' needs q > 0, got ", p.q);
    BRISK_CHECK(std::ceil(p.low / p.q) * p.q <= p.high, "tune: quantized parameter '", p.name,
                "' has no multiple of q = ", p.q, " in [", p.low, ", ", p.high, "]");
  }
  if (p.kind == Kind::Integer)
    BRISK_CHECK(p.ilow <= p.ihigh, "tune: integer parameter '", p.name, "' needs low <= high, got [", p.ilow, ", ",
                p.ihigh, "]");
  if (p.kind == Kind::Choice) {
    BRISK_CHECK(!p.options.empty(), "tune: choice '", p.name, "' needs at least one option");
    std::set<std::string> seen(p.options.begin(), p.options.end());
    BRISK_CHECK(seen.size() == p.options.size(), "tune: choice '", p.name, "' lists an option twice");
  }
  params_.push_back(std::move(p));
  return *this;
}

namespace {
Param real_param(const std::string& name, Kind kind, double low, double high, double q = 0) {
  Param p;
  p.name = name;
  p.kind = kind;
  p.low = low;
  p.high = high;
  p.q = q;
  return p;
}
}  // namespace

Space& Space::uniform(const std::string& name, double low, double high) {
  return add(real_param(name, Kind::Uniform, low, high));
}
Space& Space::log_uniform(const std::string& name, double low, double high) {
  return add(real_param(name, Kind::LogUniform, low, high));
}
Space& Space::quniform(const std::string& name, double low, double high, double q) {
  return add(real_param(name, Kind::QUniform, low, high, q));
}
Space& Space::qlog_uniform(const std::string& name, double low, double high, double q) {
  return add(real_param(name, Kind::QLogUniform, low, high, q));
}
Space& Space::integer(const std::string& name, int64_t low, int64_t high) {
  Param p;
  p.name = name;
  p.kind = Kind::Integer;
  p.ilow = low;
  p.ihigh = high;
  return add(std::move(p));
}
Space& Space::choice(const std::string& name, const std::vector<std::string>& options) {
  Param p;
  p.name = name;
  p.kind = Kind::Choice;
  p.options = options;
  return add(std::move(p));
}

Space& Space::when(const std::string& parent, const std::string& option, const Space& sub) {
  const Param& p = param(parent);
  BRISK_CHECK(p.kind == Kind::Choice, "tune: when('", parent, "', ...): '", parent, "' is not a choice");
  BRISK_CHECK(std::find(p.options.begin(), p.options.end(), option) != p.options.end(), "tune: when('", parent, "', '",
              option, "'): '", parent, "' has no option '", option, "'");
  for (Param q : sub.params_) {
    if (q.parent.empty()) {
      q.parent = parent;
      q.parent_option = option;
    }
    add(std::move(q));
  }
  return *this;
}

const Param& Space::param(const std::string& name) const {
  for (const Param& p : params_)
    if (p.name == name) return p;
  std::string names;
  for (const Param& p : params_) names += (names.empty() ? "" : ", ") + p.name;
  BRISK_FAIL("tune: the space has no parameter '", name, "' (it has: ", names.empty() ? "none" : names, ")");
}

bool Space::active(const Param& p, const Config& partial) const {
  if (p.parent.empty()) return true;
  return partial.has(p.parent) && partial.choice(p.parent) == p.parent_option;
}

namespace {

// round(x / q) * q, kept on the grid of multiples of q inside [low, high].
double quantize(double x, double q, double low, double high) {
  const double v = std::round(x / q) * q;
  return std::clamp(v, std::ceil(low / q) * q, std::floor(high / q) * q);
}

}  // namespace

Value sample_param(const Param& p, Rng& rng);  // shared with search/tune_search.cpp

Value sample_param(const Param& p, Rng& rng) {
  const double u = rng.uniform();
  switch (p.kind) {
    case Kind::Uniform: return p.low + u * (p.high - p.low);
    case Kind::LogUniform:
      return std::clamp(std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low))), p.low, p.high);
    case Kind::QUniform: return quantize(p.low + u * (p.high - p.low), p.q, p.low, p.high);
    case Kind::QLogUniform:
      return quantize(std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low))), p.q, p.low, p.high);
    case Kind::Integer: return std::min(p.ihigh, p.ilow + int64_t(u * double(p.ihigh - p.ilow + 1)));
    case Kind::Choice: return p.options[std::min(p.options.size() - 1, size_t(u * double(p.options.size())))];
  }
  return 0.0;
}

Config Space::sample(Rng& rng) const {
  Config c;
  for (const Param& p : params_)
    if (active(p, c)) c.set(p.name, sample_param(p, rng));
  return c;
}

void Space::check(const Config& c) const {
  Config seen;
  for (const Param& p : params_) {
    if (!active(p, seen)) {
      BRISK_CHECK(!c.has(p.name), "tune: parameter '", p.name, "' is set but inactive (", p.parent,
                  " != ", p.parent_option, ")");
      continue;
    }
    BRISK_CHECK(c.has(p.name), "tune: the config lacks active parameter '", p.name, "'");
    if (p.kind == Kind::Choice) {
      const std::string& v = c.choice(p.name);
      BRISK_CHECK(std::find(p.options.begin(), p.options.end(), v) != p.options.end(), "tune: '", p.name, "' = '", v,
                  "' is not one of its options");
      seen.set(p.name, v);
    } else if (p.kind == Kind::Integer) {
      const int64_t v = c.integer(p.name);
      BRISK_CHECK(v >= p.ilow && v <= p.ihigh, "tune: '", p.name, "' = ", v, " is outside [", p.ilow, ", ", p.ihigh,
                  "]");
    } else {
      const double v = c.real(p.name);
      BRISK_CHECK(v >= p.low && v <= p.high, "tune: '", p.name, "' = ", v, " is outside [", p.low, ", ", p.high, "]");
    }
  }
  for (const auto& [k, v] : c.values()) param(k);  // unknown names
}

std::string Space::describe() const {
  static const char* kinds[] = {"uniform", "log_uniform", "quniform", "qlog_uniform", "integer", "choice"};
  std::ostringstream s;
  s.precision(17);
  for (const Param& p : params_) {
    s << p.name << " " << kinds[int(p.kind)];
    if (p.kind == Kind::Integer)
      s << " " << p.ilow << " " << p.ihigh;
    else if (p.kind == Kind::Choice)
      for (const std::string& o : p.options) s << " " << o;
    else
      s << " " << p.low << " " << p.high << " " << p.q;
    if (!p.parent.empty()) s << " when " << p.parent << "=" << p.parent_option;
    s << "\n";
  }
  return s.str();
}

}  // namespace brisk::tune
