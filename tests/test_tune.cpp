// tests/test_tune.cpp: hyperparameter search (search/tune.h): spaces sample inside their bounds,
// on their grids and reproducibly, with conditional parameters only under their parent's
// option; the Parzen estimator's bandwidths (Hyperopt's) and densities; TPE beats random search
// on a quadratic; ASHA and the median rule stop exactly the trials they should on scripted
// curves; a killed search resumes without rerunning finished trials and ends as an
// uninterrupted one; parallel trials match sequential ones; the errors for bad input.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "brisk.h"
#include "search/tune.h"

using namespace brisk;
using namespace brisk::tune;

namespace {

bool on_grid(double v, double q) { return std::fabs(v / q - std::round(v / q)) < 1e-9; }

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("brisk_tune_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / name).string();
  std::filesystem::remove(p);
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no brisk::Error)";
}

// Best (lowest) objective after each trial of a minimizing search.
double best_after(const Result& r) { return r.best().score(); }

Space quadratic_space() { return Space().uniform("x", -5, 5).log_uniform("y", 1e-5, 1.0); }

double quadratic(const Config& c) {
  const double x = c.real("x") - 1.0, y = std::log10(c.real("y")) + 2.0;
  return x * x + y * y;
}

}  // namespace

TEST_CASE("tune: spaces sample inside their bounds, on their grids, reproducibly from a seed") {
  Space s;
  s.uniform("u", -1, 2)
      .log_uniform("lr", 1e-4, 1)
      .quniform("drop", 0.05, 1, 0.1)
      .qlog_uniform("width", 1, 1000, 8)
      .integer("batch", 16, 256)
      .choice("act", {"relu", "gelu", "tanh"});
  std::set<std::string> acts;
  std::set<int64_t> batches;
  int small_lr = 0;
  for (uint64_t i = 0; i < 500; ++i) {
    Rng a(7, i), b(7, i), other(8, i);
    const Config c = s.sample(a);
    CHECK(c == s.sample(b));
    CHECK_FALSE(c == s.sample(other));
    s.check(c);
    CHECK(c.real("u") >= -1);
    CHECK(c.real("u") <= 2);
    CHECK(c.real("lr") >= 1e-4);
    CHECK(c.real("lr") <= 1);
    small_lr += c.real("lr") < 1e-2;  // log-uniform: half the draws below the geometric middle
    CHECK(on_grid(c.real("drop"), 0.1));
    CHECK(c.real("drop") >= 0.1 - 1e-12);
    CHECK(c.real("drop") <= 1 + 1e-12);
    CHECK(on_grid(c.real("width"), 8));
    CHECK(c.real("width") >= 8);
    CHECK(c.real("width") <= 1000);
    const int64_t batch = c.integer("batch");
    CHECK(batch >= 16);
    CHECK(batch <= 256);
    batches.insert(batch);
    acts.insert(c.choice("act"));
  }
  CHECK(acts.size() == 3);
  CHECK(batches.size() > 100);
  CHECK(small_lr > 200);
  CHECK(small_lr < 300);
}

TEST_CASE("tune: conditional parameters exist only when their parent's option is chosen") {
  Space adam;
  adam.log_uniform("beta2_gap", 1e-4, 1e-1).choice("amsgrad", {"yes", "no"});
  adam.when("amsgrad", "yes", Space().log_uniform("eps", 1e-10, 1e-6));
  Space s;
  s.choice("opt", {"sgd", "adam"}).when("opt", "sgd", Space().uniform("momentum", 0, 0.99)).when("opt", "adam", adam);
  int sgd = 0, ams = 0;
  for (uint64_t i = 0; i < 300; ++i) {
    Rng rng(1, i);
    const Config c = s.sample(rng);
    s.check(c);
    const bool is_sgd = c.choice("opt") == "sgd";
    sgd += is_sgd;
    CHECK(c.has("momentum") == is_sgd);
    CHECK(c.has("beta2_gap") == !is_sgd);
    CHECK(c.has("amsgrad") == !is_sgd);
    const bool has_eps = !is_sgd && c.choice("amsgrad") == "yes";
    ams += has_eps;
    CHECK(c.has("eps") == has_eps);
  }
  CHECK(sgd > 100);
  CHECK(ams > 40);
  // The grid: sgd x 5 momenta, adam x 5 gaps x (yes x 5 eps + no) = 5 + 30 configurations.
  const std::vector<Config> grid = Grid::enumerate(s, 5);
  CHECK(grid.size() == 35);
  std::set<std::string> distinct;
  for (const Config& c : grid) {
    s.check(c);
    distinct.insert(c.str());
  }
  CHECK(distinct.size() == 35);
  Options o;
  o.searcher = std::make_shared<Grid>(5);
  o.max_trials = 100;
  int calls = 0;
  const Result r = run(
      s, [&](Trial& t) { ++calls, t.report(1, t.config().has("eps") ? 1.0 : 0.0); }, o);
  CHECK(calls == 35);
  CHECK(r.trials.size() == 35);
}

TEST_CASE("tune: the Parzen estimator has Hyperopt's adaptive bandwidths and prior") {
  // Observations 1, 3, 4 and the prior N(2.5, 10): sorted means 1, 2.5, 3, 4; gaps give sigmas
  // 1.5, 1.5, 1, 1, clipped below at 10 / (1 + 4) = 2; the prior keeps sigma 10.
  const Parzen p = Parzen::fit({3.0, 1.0, 4.0}, 1.0, 2.5, 10.0);
  REQUIRE(p.mus.size() == 4);
  CHECK(p.mus == std::vector<double>{1.0, 2.5, 3.0, 4.0});
  CHECK(p.sigmas == std::vector<double>{2.0, 10.0, 2.0, 2.0});
  for (double w : p.weights) CHECK(w == doctest::Approx(0.25));
  // One observation: half the prior's sigma.
  const Parzen one = Parzen::fit({5.0}, 2.0, 0.0, 4.0);
  CHECK(one.mus == std::vector<double>{0.0, 5.0});
  CHECK(one.sigmas == std::vector<double>{4.0, 2.0});
  CHECK(one.weights[0] == doctest::Approx(2.0 / 3.0));
  // Linear forgetting: with lf = 2 of 4 observations, the two oldest weigh 1/4 and 1.
  const Parzen lf = Parzen::fit({0.1, 0.2, 0.3, 0.4}, 1.0, 0.25, 1.0, 2);
  double total = 0.25 + 1 + 1 + 1 + 1;
  CHECK(lf.weights[0] == doctest::Approx(0.25 / total));  // mu 0.1, the oldest
  // Draws follow the truncated density: bin frequencies match its mass.
  const Parzen q = Parzen::fit({-1.0, 0.5, 0.6, 2.0}, 1.0, 0.0, 6.0);
  Rng rng(3, 0);
  const int n = 20000, bins = 12;
  std::vector<int> counts(bins, 0);
  for (int i = 0; i < n; ++i) {
    const double x = q.sample(rng, -3, 3);
    REQUIRE(x >= -3);
    REQUIRE(x <= 3);
    counts[std::min(bins - 1, int((x + 3) / 6 * bins))]++;
  }
  double mass_total = 0;
  for (int b = 0; b < bins; ++b) {
    const double lo = -3 + 6.0 * b / bins, hi = lo + 6.0 / bins;
    const double mass = std::exp(q.log_mass(lo, hi, -3, 3));
    mass_total += mass;
    CHECK(std::fabs(double(counts[b]) / n - mass) < 0.012);
    // the density integrates to the mass (midpoint rule)
    double integral = 0;
    for (int k = 0; k < 100; ++k) integral += std::exp(q.log_pdf(lo + (k + 0.5) * (hi - lo) / 100, -3, 3));
    CHECK(integral * (hi - lo) / 100 == doctest::Approx(mass).epsilon(1e-3));
  }
  CHECK(mass_total == doctest::Approx(1.0).epsilon(1e-9));
}

TEST_CASE("tune: TPE's proposals concentrate where its good trials were, on a 1-D objective") {
  // (x - 2)^2 on [-10, 10]: a draw from the prior lands within 1 of the minimum 10% of the time.
  // Hyperopt's bandwidths stay wide (at least range / 5 with a few good trials), so TPE keeps
  // exploring; still its later proposals land there about twice as often.
  const Space s = Space().uniform("x", -10, 10);
  int near = 0;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    Options o;
    o.mode = Mode::Min;
    o.max_trials = 100;
    o.seed = seed;
    o.searcher = std::make_shared<Tpe>(TpeOptions{.n_startup = 10});
    const Result r = run(
        s, [](Trial& t) { t.report(1, std::pow(t.config().real("x") - 2.0, 2)); }, o);
    for (const TrialRecord& t : r.trials)
      if (t.id >= 50) near += std::fabs(t.config.real("x") - 2.0) < 1.0;
    CHECK(std::fabs(r.best().config.real("x") - 2.0) < 0.2);
  }
  CHECK(near > 25);  // of 150; the prior's 15 +- 3.7
}

TEST_CASE("tune: TPE finds a quadratic's minimum faster than random search, over 10 seeds") {
  double tpe = 0, rnd = 0;
  const Space s = Space().uniform("x", -5, 5);
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Options o;
    o.mode = Mode::Min;
    o.max_trials = 30;
    o.seed = seed;
    const TrialFn f = [](Trial& t) { t.report(1, std::pow(t.config().real("x") - 1.0, 2)); };
    rnd += best_after(run(s, f, o));
    o.searcher = std::make_shared<Tpe>(TpeOptions{.n_startup = 5});
    tpe += best_after(run(s, f, o));
  }
  MESSAGE("mean best after 30 trials: TPE ", tpe / 10, ", random ", rnd / 10);
  CHECK(tpe < 0.5 * rnd);
}

TEST_CASE("tune: evolution improves on its random first generation") {
  int better = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    Options o;
    o.mode = Mode::Min;
    o.max_trials = 60;
    o.seed = seed;
    o.searcher = std::make_shared<Evolution>(EvolutionOptions{.population = 10});
    const Result r = run(
        quadratic_space(), [](Trial& t) { t.report(1, quadratic(t.config())); }, o);
    double first = INFINITY;
    for (const TrialRecord& t : r.trials)
      if (t.id < 10) first = std::min(first, t.score());
    better += r.best().score() < 0.5 * first;
  }
  CHECK(better >= 4);
}

namespace {

// Scripted curves: trial i's metric at step t is quality[i] * t, the same order at every step.
Result scripted(std::shared_ptr<Scheduler> sched, const std::vector<double>& quality, int steps, int parallel) {
  const int trials = int(quality.size());
  Options o;
  o.max_trials = trials;
  o.parallel = parallel;
  o.scheduler = std::move(sched);
  return run(
      Space().uniform("unused", 0, 1),
      [steps, &quality](Trial& t) {
        for (int step = 1; step <= steps; ++step) {
          // uneven timing, so that parallel trials interleave differently each run
          std::this_thread::sleep_for(std::chrono::microseconds((t.id() * 37 + step * 11) % 300));
          if (!t.report(step, quality[size_t(t.id())] * step)) return;
        }
      },
      o);
}

}  // namespace

TEST_CASE("tune: ASHA stops exactly the trials ranked low at its rungs, in sequence and in parallel") {
  // Rungs 1 and 3 (9 is max_resource); the top ceil(n / 3) of the n recorded so far go on.
  // Rung 1: 2 (3rd of 3), 5 (6th of 6), 6 (4th of 7, 3 kept) and 8 stop; 3 (2nd of 4) goes on.
  // Rung 3, among 0, 1, 3, 4, 7: 3 (2nd of 3) and 7 (3rd of 5) stop; 0, 1, 4 complete.
  const std::vector<std::pair<Status, int64_t>> expected = {
      {Status::Completed, 9}, {Status::Completed, 9}, {Status::Stopped, 1},
      {Status::Stopped, 3},   {Status::Completed, 9}, {Status::Stopped, 1},
      {Status::Stopped, 1},   {Status::Stopped, 3},   {Status::Stopped, 1}};
  for (int parallel : {1, 3}) {
    CAPTURE(parallel);
    const Result r = scripted(std::make_shared<Asha>(AshaOptions{.min_resource = 1, .eta = 3, .max_resource = 9}),
                              {0.5, 0.9, 0.3, 0.7, 0.95, 0.1, 0.6, 0.8, 0.2}, 9, parallel);
    REQUIRE(r.trials.size() == 9);
    for (size_t i = 0; i < 9; ++i) {
      CAPTURE(i);
      CHECK(r.trials[i].status == expected[i].first);
      CHECK(r.trials[i].resource() == expected[i].second);
    }
    CHECK(r.best().id == 4);
    CHECK(r.budget() == 9 * 3 + 1 * 4 + 3 * 2);
  }
  CHECK(Asha(AshaOptions{.min_resource = 2, .eta = 2, .max_resource = 20}).rungs_up_to(100) ==
        std::vector<int64_t>{2, 4, 8, 16});
}

TEST_CASE("tune: the median rule stops trials whose best is below the earlier trials' median") {
  // grace 2, at least 2 earlier trials. Trial 2 at step 2: its best 0.6 < median(0.75, 1.35).
  // Trial 3 stays above the median at steps 2-4; trial 4 at step 2: 0.4 < median(.75, 1.35,
  // .45, 1.05) = 0.9.
  for (int parallel : {1, 2}) {
    CAPTURE(parallel);
    const Result r = scripted(std::make_shared<MedianStopping>(MedianOptions{.grace = 2, .min_samples = 2}),
                              {0.5, 0.9, 0.3, 0.7, 0.2}, 4, parallel);
    REQUIRE(r.trials.size() == 5);
    const Status c = Status::Completed, s = Status::Stopped;
    const std::vector<Status> status = {c, c, s, c, s};
    const std::vector<int64_t> steps = {4, 4, 2, 4, 2};
    for (size_t i = 0; i < 5; ++i) {
      CAPTURE(i);
      CHECK(r.trials[i].status == status[i]);
      CHECK(r.trials[i].resource() == steps[i]);
    }
  }
}

TEST_CASE("tune: a killed search resumes from its journal, reruns nothing, and ends as an uninterrupted one") {
  const std::string journal = temp_path("resume.jsonl");
  Options o;
  o.mode = Mode::Min;
  o.max_trials = 12;
  o.seed = 11;
  o.searcher = std::make_shared<Tpe>(TpeOptions{.n_startup = 4});
  o.scheduler = std::make_shared<Asha>(AshaOptions{.min_resource = 1, .eta = 2, .max_resource = 4});
  std::atomic<int> calls{0};
  int kill_at = -1;
  const TrialFn f = [&](Trial& t) {
    if (++calls == kill_at) throw Interrupt();
    const double v = quadratic(t.config());
    for (int step = 1; step <= 4; ++step)
      if (!t.report(step, v + 1.0 / step)) return;
  };
  const Result whole = run(quadratic_space(), f, o);  // no journal: the reference
  REQUIRE(whole.trials.size() == 12);

  o.journal = journal;
  calls = 0;
  kill_at = 6;
  CHECK_THROWS_AS(run(quadratic_space(), f, o), Interrupt);
  CHECK(calls == 6);  // trials 0-4 finished and are in the journal
  {
    std::ofstream torn(journal, std::ios::app);
    torn << "{\"id\": 7, \"seed\"";  // a kill in the middle of a write
  }
  calls = 0;
  kill_at = -1;
  const Result resumed = run(quadratic_space(), f, o);
  CHECK(calls == 7);  // trials 5-11
  CHECK(resumed.resumed == 5);
  REQUIRE(resumed.trials.size() == 12);
  for (size_t i = 0; i < 12; ++i) {
    CAPTURE(i);
    CHECK(resumed.trials[i].config == whole.trials[i].config);
    CHECK(resumed.trials[i].status == whole.trials[i].status);
    CHECK(resumed.trials[i].score() == whole.trials[i].score());
    CHECK(resumed.trials[i].seed == whole.trials[i].seed);
  }
  // Once finished, a rerun reruns nothing; more trials continue it.
  calls = 0;
  CHECK(run(quadratic_space(), f, o).trials.size() == 12);
  CHECK(calls == 0);
  o.max_trials = 14;
  CHECK(run(quadratic_space(), f, o).trials.size() == 14);
  CHECK(calls == 2);
  // Another search over the same journal is refused.
  o.seed = 12;
  CHECK(error_of([&] { run(quadratic_space(), f, o); }).find("different search") != std::string::npos);
}

TEST_CASE("tune: parallel trials with a thread budget give the sequential results") {
  const int caller_threads = get_num_threads();
  Options o;
  o.mode = Mode::Min;
  o.max_trials = 16;
  o.seed = 3;
  o.scheduler = std::make_shared<Asha>(AshaOptions{.min_resource = 1, .eta = 2, .max_resource = 8});
  std::atomic<int> wrong_threads{0};
  const TrialFn f = [&](Trial& t) {
    if (get_num_threads() != 2) ++wrong_threads;
    // a small brisk computation from the trial's own generator: reproducible from its seed
    const Tensor w = randn({16}, DType::F32, Device::cpu(), &t.generator());
    const double noise = w.abs().mean().item<double>();
    for (int step = 1; step <= 8; ++step) {
      std::this_thread::sleep_for(std::chrono::microseconds((t.id() * 53 + step * 7) % 400));
      if (!t.report(step, quadratic(t.config()) + noise / step)) return;
    }
  };
  o.threads_per_trial = 2;
  const Result seq = run(quadratic_space(), f, o);
  o.parallel = 4;
  const Result par = run(quadratic_space(), f, o);
  CHECK(wrong_threads == 0);
  CHECK(get_num_threads() == caller_threads);  // the caller's setting is untouched
  REQUIRE(seq.trials.size() == par.trials.size());
  int stopped = 0;
  for (size_t i = 0; i < seq.trials.size(); ++i) {
    CAPTURE(i);
    CHECK(par.trials[i].config == seq.trials[i].config);
    CHECK(par.trials[i].status == seq.trials[i].status);
    CHECK(par.trials[i].resource() == seq.trials[i].resource());
    CHECK(par.trials[i].score() == seq.trials[i].score());
    stopped += seq.trials[i].status == Status::Stopped;
  }
  CHECK(stopped > 4);
  // TPE proposes trial k from trials 0 .. k - parallel: deterministic for a given parallelism.
  o.searcher = std::make_shared<Tpe>(TpeOptions{.n_startup = 4});
  const Result a = run(quadratic_space(), f, o), b = run(quadratic_space(), f, o);
  for (size_t i = 0; i < a.trials.size(); ++i) CHECK(a.trials[i].config == b.trials[i].config);
}

TEST_CASE("tune: results as a table, CSV and JSON; a budget ends the search") {
  Options o;
  o.max_trials = 50;
  o.max_budget = 12;  // three trials of 4 steps each, then no more start
  o.seed = 2;
  const Space s = Space().log_uniform("lr", 1e-4, 1e-1).choice("schedule", {"cosine", "step, 10"});
  const Result r = run(
      s,
      [](Trial& t) {
        for (int step = 1; step <= 4; ++step) t.report(step, -std::fabs(std::log10(t.config().real("lr")) + 2));
      },
      o);
  CHECK(r.trials.size() == 3);
  CHECK(r.budget() == 12);
  const std::string table = r.table();
  CHECK(table.find("| rank | trial | status | score | steps | time s | lr | schedule |") == 0);
  CHECK(table.find("| 1 | " + std::to_string(r.best().id) + " | completed |") != std::string::npos);
  const std::string csv_path = temp_path("r.csv"), json_path = temp_path("r.json");
  r.write_csv(csv_path);
  r.write_json(json_path);
  std::ifstream csv(csv_path);
  std::string line;
  int lines = 0;
  std::getline(csv, line);
  CHECK(line == "trial,seed,status,score,resource,seconds,lr,schedule,error");
  while (std::getline(csv, line)) ++lines;
  CHECK(lines == 3);
  CHECK(r.csv().find(",step, 10,") == std::string::npos);  // quoted when chosen
  std::ifstream json(json_path);
  std::stringstream text;
  text << json.rdbuf();
  CHECK(text.str().find("\"best\": " + std::to_string(r.best().id)) != std::string::npos);
}

TEST_CASE("tune: bad input is a brisk::Error naming the problem; a throwing trial is recorded as failed") {
  CHECK(error_of([] { Space().uniform("lr", 1, 1); }).find("'lr' needs low < high") != std::string::npos);
  CHECK(error_of([] { Space().uniform("lr", 2, 1); }).find("low < high") != std::string::npos);
  CHECK(error_of([] { Space().log_uniform("lr", 0, 1); }).find("needs low > 0") != std::string::npos);
  CHECK(error_of([] { Space().log_uniform("lr", -1, 1); }).find("needs low > 0") != std::string::npos);
  CHECK(error_of([] { Space().choice("act", {}); }).find("'act' needs at least one option") != std::string::npos);
  CHECK(error_of([] { Space().quniform("d", 0, 1, 0); }).find("needs q > 0") != std::string::npos);
  CHECK(error_of([] { Space().integer("n", 5, 4); }).find("low <= high") != std::string::npos);
  CHECK(error_of([] { Space().uniform("a", 0, 1).uniform("a", 0, 1); }).find("declared twice") != std::string::npos);
  CHECK(error_of([] { Space().uniform("a", 0, 1).when("a", "x", Space()); }).find("not a choice") != std::string::npos);
  CHECK(error_of([] { Space().choice("c", {"x"}).when("c", "y", Space()); }).find("no option 'y'") !=
        std::string::npos);
  CHECK(error_of([] { Space().when("nope", "y", Space()); }).find("no parameter 'nope'") != std::string::npos);
  Config c;
  c.set("lr", 0.1);
  c.set("act", std::string("relu"));
  CHECK(error_of([&] { c.real("learning_rate"); }).find("no parameter 'learning_rate' (it has: act, lr)") !=
        std::string::npos);
  CHECK(error_of([&] { c.integer("lr"); }).find("not an integer") != std::string::npos);
  CHECK(error_of([&] { c.real("act"); }).find("is a choice") != std::string::npos);

  Options o;
  o.max_trials = 6;
  const Result r = run(
      Space().uniform("x", 0, 1),
      [](Trial& t) {
        if (t.id() == 1) throw std::runtime_error("diverged");
        if (t.id() == 2) t.config().real("y");  // an unknown name inside a trial
        if (t.id() == 3) return;                // reports nothing
        t.report(2, t.config().real("x"));
        if (t.id() == 4) t.report(2, 0.0);  // steps must increase
      },
      o);
  REQUIRE(r.trials.size() == 6);
  CHECK(r.trials[1].status == Status::Failed);
  CHECK(r.trials[1].error == "diverged");
  CHECK(r.trials[2].error.find("no parameter 'y'") != std::string::npos);
  CHECK(r.trials[3].error == "the trial reported no metric");
  CHECK(r.trials[4].error.find("steps must increase") != std::string::npos);
  CHECK(r.best().status == Status::Completed);
  CHECK(error_of([] {
          Options bad;
          bad.max_trials = 2;
          run(
              Space().uniform("x", 0, 1), [](Trial&) { throw std::runtime_error("x"); }, bad)
              .best();
        }).find("no trial finished") != std::string::npos);
  CHECK(error_of([] {
          Options bad;
          bad.parallel = 0;
          run(
              Space().uniform("x", 0, 1), [](Trial&) {}, bad);
        }).find("parallel must be >= 1") != std::string::npos);
  CHECK(error_of([] { Asha(AshaOptions{.eta = 1}); }).find("eta > 1") != std::string::npos);
}
