// search/tune.h: hyperparameter search (brisk::tune). A Space of named parameters (uniform,
// log-uniform, quantized, integer, choice, and parameters active only under one option of a
// choice); searchers that propose configurations (Grid, RandomSearch, Tpe as Hyperopt does it,
// Evolution); schedulers that stop bad trials early (Asha, MedianStopping); run(), which runs
// trials in parallel with a thread budget each, journals finished trials so a killed search
// resumes, and returns a Result (table, CSV, JSON, best trial). Not here: what a trial trains
// (the trial function's business) or distributing trials over processes. Design: docs/TUNE.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/random.h"

namespace brisk::tune {

// A parameter's value: a real (uniform, log-uniform and their quantized forms), an integer, or
// the name of a choice's option.
using Value = std::variant<double, int64_t, std::string>;

// One sampled configuration: parameter name -> value; an inactive conditional parameter is absent.
class Config {
 public:
  double real(const std::string& name) const;      // a real parameter (or an integer, as double)
  int64_t integer(const std::string& name) const;  // an integer parameter
  const std::string& choice(const std::string& name) const;
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, Value>& values() const { return values_; }
  void set(const std::string& name, Value v) { values_[name] = std::move(v); }
  std::string str() const;  // "batch=64 lr=0.00312 schedule=cosine"
  bool operator==(const Config& o) const { return values_ == o.values_; }

 private:
  const Value& at(const std::string& name) const;
  std::map<std::string, Value> values_;
};

// Counter-based random numbers (Philox, engine/random.h) for one stream of one seed: sampling a
// space and a searcher's draws for trial i use stream i, so they do not depend on timing.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint64_t next_u64();
  double uniform();          // [0, 1)
  double normal();           // standard normal
  int64_t below(int64_t n);  // uniform in [0, n)

 private:
  uint64_t seed_, stream_, counter_ = 0;
};

enum class Kind { Uniform, LogUniform, QUniform, QLogUniform, Integer, Choice };

struct Param {
  std::string name = {};
  Kind kind = Kind::Uniform;
  double low = 0, high = 1, q = 0;              // reals: [low, high], step q for the quantized kinds
  int64_t ilow = 0, ihigh = 0;                  // Integer: [ilow, ihigh], both included
  std::vector<std::string> options = {};        // Choice
  std::string parent = {}, parent_option = {};  // active only when choice `parent` is `parent_option`
};

// Parameters in declaration order; a conditional parameter's parent comes before it.
class Space {
 public:
  Space& uniform(const std::string& name, double low, double high);
  Space& log_uniform(const std::string& name, double low, double high);
  // round(x / q) * q for x drawn as uniform / log_uniform, kept on the grid inside [low, high].
  Space& quniform(const std::string& name, double low, double high, double q);
  Space& qlog_uniform(const std::string& name, double low, double high, double q);
  Space& integer(const std::string& name, int64_t low, int64_t high);  // both ends included
  Space& choice(const std::string& name, const std::vector<std::string>& options);
  // The parameters of `sub` exist only when choice `parent` (already declared) is `option`.
  Space& when(const std::string& parent, const std::string& option, const Space& sub);

  const std::vector<Param>& params() const { return params_; }
  const Param& param(const std::string& name) const;  // Error for an unknown name
  // Whether `p` is active in a (partial) config holding the values of the parameters before it.
  bool active(const Param& p, const Config& partial) const;
  Config sample(Rng& rng) const;      // every active parameter from its prior
  void check(const Config& c) const;  // Error unless c holds exactly the active parameters, in range
  std::string describe() const;       // one line per parameter (the journal's fingerprint)

 private:
  Space& add(Param p);
  std::vector<Param> params_;
};

// A finished trial as a searcher sees it: its configuration and its loss (the score, negated
// when maximizing; NaN scores as +inf). Failed trials are not shown to searchers.
struct Observation {
  const Config* config = nullptr;
  double loss = 0;
};

// Proposes trial `id`'s configuration from the finished trials 0 .. id - parallel (in id order),
// so a proposal depends on the seed and the history, never on timing. nullopt: no more trials.
class Searcher {
 public:
  virtual ~Searcher() = default;
  virtual std::optional<Config> propose(const Space& space, const std::vector<Observation>& history, int64_t id,
                                        Rng& rng) = 0;
  virtual std::string describe() const = 0;
};

class RandomSearch : public Searcher {
 public:
  std::optional<Config> propose(const Space&, const std::vector<Observation>&, int64_t, Rng& rng) override;
  std::string describe() const override { return "random"; }
};

// Every combination, in declaration order (the last parameter varies fastest); a continuous
// parameter takes `points` evenly spaced values (log-spaced for log-uniform). Ends after the grid.
class Grid : public Searcher {
 public:
  explicit Grid(int points = 5);
  std::optional<Config> propose(const Space& space, const std::vector<Observation>&, int64_t id, Rng&) override;
  std::string describe() const override;
  static std::vector<Config> enumerate(const Space& space, int points);

 private:
  int points_;
  std::vector<Config> grid_;
  std::string grid_of_;  // the space the cached grid was made for
};

// Hyperopt's adaptive Parzen estimator (hyperopt/tpe.py, adaptive_parzen_normal): one normal per
// observation at the observation, with the prior N(prior_mu, prior_sigma) inserted among them in
// sorted order; each one's sigma is the larger gap to its neighbours, clipped to
// [prior_sigma / min(100, 1 + n), prior_sigma]; weights 1 (the oldest ramped down once there are
// more than `lf` observations) and prior_weight for the prior, normalized. Densities are
// truncated to [low, high].
struct Parzen {
  std::vector<double> weights = {}, mus = {}, sigmas = {};
  static Parzen fit(const std::vector<double>& obs, double prior_weight, double prior_mu, double prior_sigma,
                    int lf = 25);
  double sample(Rng& rng, double low, double high) const;  // rejection-sampled inside [low, high]
  double log_pdf(double x, double low, double high) const;
  double log_mass(double a, double b, double low, double high) const;  // of [a, b], truncated
};

struct TpeOptions {
  int n_startup = 20;       // random trials before the model (Hyperopt's n_startup_jobs)
  double gamma = 0.25;      // good set: the ceil(gamma * sqrt(n)) best (at most `lf`)
  int n_candidates = 24;    // samples from l(x), the one maximizing l(x) / g(x) wins
  double prior_weight = 1;  // weight of the prior among the Parzen components
  int lf = 25;              // linear forgetting: older observations weigh less past this many
};

// Tree-structured Parzen estimator as Hyperopt's tpe.suggest: each parameter is modelled on its
// own, from the trials where it was active (see Note [TPE as Hyperopt does it] in
// search/tune_search.cpp).
class Tpe : public Searcher {
 public:
  explicit Tpe(TpeOptions o = {}) : o_(o) {}
  std::optional<Config> propose(const Space& space, const std::vector<Observation>& history, int64_t id,
                                Rng& rng) override;
  std::string describe() const override;

 private:
  TpeOptions o_;
};

struct EvolutionOptions {
  int population = 10;     // the first `population` trials are random; parents: the latest `population`
  int tournament = 3;      // the best of this many, drawn from the population, is the parent
  double mutate_prob = 0;  // per parameter; 0: 1 / (number of active parameters)
  double sigma = 0.2;      // a real's mutation: normal step of sigma * (high - low), in its own scale
};

// A simple genetic search, regularized evolution's shape (Real et al. 2019): tournament selection
// from the most recent trials, then mutation; at least one parameter changes.
class Evolution : public Searcher {
 public:
  explicit Evolution(EvolutionOptions o = {}) : o_(o) {}
  std::optional<Config> propose(const Space& space, const std::vector<Observation>& history, int64_t id,
                                Rng& rng) override;
  std::string describe() const override;

 private:
  EvolutionOptions o_;
};

// One (step, metric) report; steps increase within a trial.
struct Point {
  int64_t step = 0;
  double metric = 0;
};

enum class Mode { Max, Min };

// Decides at each report whether a trial stops, from its curve and the curves of the trials with
// smaller ids, truncated at its current step (run() waits until those are known, so a decision
// is the same in parallel as in sequence).
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual bool should_stop(const std::vector<Point>& mine, const std::vector<std::vector<Point>>& earlier,
                           Mode mode) const = 0;
  virtual std::string describe() const = 0;
};

struct AshaOptions {
  int64_t min_resource = 1;  // r: the first rung
  double eta = 3;            // rungs at r * eta^k; the top 1 / eta go on
  int64_t max_resource = 0;  // no rung at or past this step (0: no limit)
};

// Asynchronous successive halving (Li et al. 2020, "A System for Massively Parallel
// Hyperparameter Tuning"): a trial reaching rung r * eta^k continues only if its metric there is
// among the top ceil(n / eta) of the n trials recorded at that rung so far, itself included
// (ties go to the earlier trial); otherwise it stops.
class Asha : public Scheduler {
 public:
  explicit Asha(AshaOptions o = {});
  bool should_stop(const std::vector<Point>& mine, const std::vector<std::vector<Point>>& earlier,
                   Mode mode) const override;
  std::string describe() const override;
  std::vector<int64_t> rungs_up_to(int64_t step) const;

 private:
  AshaOptions o_;
};

struct MedianOptions {
  int64_t grace = 1;    // no decision before this step
  int min_samples = 3;  // earlier trials needed before any decision
};

// The median stopping rule (Golovin et al. 2017, Google Vizier): at step s, stop if the trial's
// best metric so far is worse than the median, over earlier trials, of the mean of each one's
// metrics reported up to step s.
class MedianStopping : public Scheduler {
 public:
  explicit MedianStopping(MedianOptions o = {});
  bool should_stop(const std::vector<Point>& mine, const std::vector<std::vector<Point>>& earlier,
                   Mode mode) const override;
  std::string describe() const override;

 private:
  MedianOptions o_;
};

enum class Status { Completed, Stopped, Failed };
const char* status_name(Status s);

struct TrialRecord {
  int64_t id = 0;
  uint64_t seed = 0;
  Config config = {};
  Status status = Status::Completed;
  std::vector<Point> curve = {};
  std::string error = {};    // Failed: what the trial threw
  double seconds = 0;        // wall time (not reproducible, unlike the rest)
  double score() const;      // the last metric reported; NaN when none
  int64_t resource() const;  // the last step reported; 0 when none
};

class Runner;

// What a trial function gets: its configuration, seed and a way to report.
class Trial {
 public:
  int64_t id() const { return id_; }
  uint64_t seed() const { return seed_; }
  const Config& config() const { return config_; }
  // A generator seeded with seed() for the trial's own random ops (the default generator is one
  // per process, shared by parallel trials: see docs/TUNE.md, "Parallel trials").
  Generator& generator() { return gen_; }
  // Records metric at step (steps strictly increase). false: the scheduler stopped the trial,
  // which should return now (later reports are ignored).
  bool report(int64_t step, double metric);
  bool should_stop() const { return stopped_; }

 private:
  friend class Runner;
  Trial(int64_t id, uint64_t seed, Config c, Runner* r)
      : id_(id), seed_(seed), config_(std::move(c)), gen_(seed), runner_(r) {}
  int64_t id_;
  uint64_t seed_;
  Config config_;
  Generator gen_;
  Runner* runner_;
  bool stopped_ = false;
};

using TrialFn = std::function<void(Trial&)>;

// Thrown by a trial function to end the whole search at once, as a kill would: the trial is not
// recorded, running ones are abandoned at their next report, run() rethrows it after the workers
// have joined. The journal keeps every trial finished before.
struct Interrupt : std::runtime_error {
  Interrupt() : std::runtime_error("tune: search interrupted") {}
};

struct Options {
  int64_t max_trials = 20;
  double max_budget = 0;  // > 0: no trial starts once trials 0 .. id - parallel used this many steps
  Mode mode = Mode::Max;
  uint64_t seed = 0;
  int parallel = 1;                           // trials at once, each on its own thread
  int threads_per_trial = 0;                  // brisk threads in each trial; 0: the caller's get_num_threads()
  std::string journal = {};                   // a JSON-lines file of finished trials; resumed when it exists
  std::shared_ptr<Searcher> searcher = {};    // default RandomSearch
  std::shared_ptr<Scheduler> scheduler = {};  // default none
  std::function<void(const TrialRecord&)> on_trial_end = {};  // called under the search's lock
};

struct Result {
  std::vector<TrialRecord> trials = {};  // by id
  Mode mode = Mode::Max;
  std::vector<std::string> params = {};           // the space's parameter names, in declaration order
  int64_t resumed = 0;                            // trials read back from the journal, not run again
  const TrialRecord& best() const;                // the best score among completed and stopped trials
  double budget() const;                          // the sum of the trials' resources
  std::string table(size_t max_rows = 20) const;  // Markdown, best first
  std::string csv() const;
  std::string json() const;
  void write_csv(const std::string& path) const;  // atomically (temp file, then rename)
  void write_json(const std::string& path) const;
};

Result run(const Space& space, const TrialFn& fn, const Options& options = {});

// Trial id's seed: a function of the search seed and the id only.
uint64_t trial_seed(uint64_t search_seed, int64_t id);

}  // namespace brisk::tune
