// tests/test_optim_schedulers.cpp: every LR scheduler against PyTorch's LR (and momentum)
// sequence over 100 steps for two parameter groups (tests/data/optim/schedulers.json, made by
// tests/make_optim_reference.py), resuming from a state saved halfway, and CyclicLR/OneCycleLR
// cycling Adam's beta1. Set BRISK_OPTIM_REPORT=1 to print the largest deviation per schedule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "engine/functions.h"
#include "optim/optim.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json load_schedulers() {
  fs::path path = ::brisk::test::data_dir() / "optim" / "schedulers.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

// The optimizer every schedule drives: two groups with lr 0.1 and 0.05.
struct Setup {
  Tensor a = ones({5}).requires_grad_(true);
  Tensor b = ones({3, 2}).requires_grad_(true);
  std::unique_ptr<optim::Optimizer> opt;

  explicit Setup(const std::string& kind) {
    if (kind == "SGD") {
      auto sgd =
          std::make_unique<optim::SGD>(optim::NamedTensors{{"a", a}}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      sgd->add_param_group(optim::NamedTensors{{"b", b}}, {.lr = 0.05, .momentum = 0.9});
      opt = std::move(sgd);
    } else {
      auto adam = std::make_unique<optim::Adam>(optim::NamedTensors{{"a", a}}, optim::AdamOptions{.lr = 0.1});
      adam->add_param_group(optim::NamedTensors{{"b", b}}, {.lr = 0.05});
      opt = std::move(adam);
    }
  }
  double momentum(size_t g) const { return opt->has(g, "beta1") ? opt->get(g, "beta1") : opt->get(g, "momentum"); }
};

std::vector<double> doubles(const json& j) { return j.get<std::vector<double>>(); }
std::vector<int64_t> ints(const json& j) { return j.get<std::vector<int64_t>>(); }

std::shared_ptr<optim::LRScheduler> make_scheduler(const json& spec, optim::Optimizer& opt);

std::vector<std::shared_ptr<optim::LRScheduler>> make_children(const json& list, optim::Optimizer& opt) {
  std::vector<std::shared_ptr<optim::LRScheduler>> out;
  for (const json& sub : list) out.push_back(make_scheduler(sub, opt));
  return out;
}

// A vector from a number or a list (PyTorch accepts both).
std::vector<double> one_or_many(const json& j) {
  return j.is_array() ? doubles(j) : std::vector<double>{j.get<double>()};
}

std::shared_ptr<optim::LRScheduler> make_scheduler(const json& spec, optim::Optimizer& opt) {
  std::string name = spec["name"];
  const json& a = spec["args"];
  auto num = [&](const char* key, double fallback) { return a.contains(key) ? a[key].get<double>() : fallback; };
  auto integer = [&](const char* key, int64_t fallback) { return a.contains(key) ? a[key].get<int64_t>() : fallback; };
  if (name == "StepLR") return std::make_shared<optim::StepLR>(opt, a["step_size"].get<int64_t>(), num("gamma", 0.1));
  if (name == "MultiStepLR") return std::make_shared<optim::MultiStepLR>(opt, ints(a["milestones"]), num("gamma", 0.1));
  if (name == "ExponentialLR") return std::make_shared<optim::ExponentialLR>(opt, a["gamma"].get<double>());
  if (name == "CosineAnnealingLR") {
    return std::make_shared<optim::CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(), num("eta_min", 0));
  }
  if (name == "CosineAnnealingWarmRestarts") {
    return std::make_shared<optim::CosineAnnealingWarmRestarts>(opt, a["T_0"].get<int64_t>(), integer("T_mult", 1),
                                                                num("eta_min", 0));
  }
  if (name == "LinearLR") {
    return std::make_shared<optim::LinearLR>(opt, num("start_factor", 1.0 / 3), num("end_factor", 1.0),
                                             integer("total_iters", 5));
  }
  if (name == "ConstantLR") {
    return std::make_shared<optim::ConstantLR>(opt, num("factor", 1.0 / 3), integer("total_iters", 5));
  }
  if (name == "PolynomialLR") {
    return std::make_shared<optim::PolynomialLR>(opt, integer("total_iters", 5), num("power", 1.0));
  }
  if (name == "LambdaLR") {
    std::vector<optim::LambdaLR::Lambda> fns;
    for (const json& f : a["lambdas"]) {
      if (f == "pow095") fns.push_back([](int64_t e) { return std::pow(0.95, double(e)); });
      if (f == "inv") fns.push_back([](int64_t e) { return 1.0 / (1.0 + 0.1 * double(e)); });
    }
    return std::make_shared<optim::LambdaLR>(opt, fns);
  }
  if (name == "CyclicLR") {
    optim::CyclicLROptions o;
    o.base_lr = one_or_many(a["base_lr"]);
    o.max_lr = one_or_many(a["max_lr"]);
    o.step_size_up = num("step_size_up", 2000);
    if (a.contains("step_size_down")) o.step_size_down = a["step_size_down"].get<double>();
    std::string mode = a.contains("mode") ? a["mode"].get<std::string>() : "triangular";
    o.mode = mode == "triangular"    ? optim::CyclicMode::Triangular
             : mode == "triangular2" ? optim::CyclicMode::Triangular2
                                     : optim::CyclicMode::ExpRange;
    o.gamma = num("gamma", 1.0);
    if (a.contains("cycle_momentum")) o.cycle_momentum = a["cycle_momentum"].get<bool>();
    if (a.contains("base_momentum")) o.base_momentum = one_or_many(a["base_momentum"]);
    if (a.contains("max_momentum")) o.max_momentum = one_or_many(a["max_momentum"]);
    return std::make_shared<optim::CyclicLR>(opt, o);
  }
  if (name == "OneCycleLR") {
    optim::OneCycleLROptions o;
    o.max_lr = one_or_many(a["max_lr"]);
    o.total_steps = integer("total_steps", 0);
    o.epochs = integer("epochs", 0);
    o.steps_per_epoch = integer("steps_per_epoch", 0);
    o.pct_start = num("pct_start", 0.3);
    if (a.contains("anneal_strategy") && a["anneal_strategy"] == "linear")
      o.anneal_strategy = optim::AnnealStrategy::Linear;
    if (a.contains("cycle_momentum")) o.cycle_momentum = a["cycle_momentum"].get<bool>();
    o.div_factor = num("div_factor", 25);
    o.final_div_factor = num("final_div_factor", 1e4);
    if (a.contains("three_phase")) o.three_phase = a["three_phase"].get<bool>();
    return std::make_shared<optim::OneCycleLR>(opt, o);
  }
  if (name == "SequentialLR") {
    auto children = make_children(a["schedulers"], opt);
    return std::make_shared<optim::SequentialLR>(opt, children, ints(a["milestones"]));
  }
  if (name == "ChainedScheduler") return std::make_shared<optim::ChainedScheduler>(make_children(a["schedulers"], opt));
  FAIL("unknown scheduler ", name);
  return nullptr;
}

std::unique_ptr<optim::ReduceLROnPlateau> make_plateau(const json& spec, optim::Optimizer& opt) {
  const json& a = spec["args"];
  optim::ReduceLROnPlateauOptions o;
  o.mode = a["mode"] == "max" ? optim::PlateauMode::Max : optim::PlateauMode::Min;
  o.factor = a["factor"].get<double>();
  o.patience = a["patience"].get<int64_t>();
  o.threshold = a["threshold"].get<double>();
  if (a.contains("threshold_mode") && a["threshold_mode"] == "abs") o.threshold_mode = optim::ThresholdMode::Abs;
  if (a.contains("cooldown")) o.cooldown = a["cooldown"].get<int64_t>();
  if (a.contains("min_lr")) o.min_lr = one_or_many(a["min_lr"]);
  return std::make_unique<optim::ReduceLROnPlateau>(opt, o);
}

double rel(double x, double ref) { return std::abs(x - ref) / std::max(std::abs(ref), 1e-300); }

// Runs one case for 100 steps (saving the state at `resume_at` and continuing in a freshly
// built optimizer and scheduler when > 0); returns the largest relative deviation of the LRs
// and momenta from PyTorch's.
double run_schedule(const json& spec, int resume_at = 0) {
  std::string kind = spec.contains("opt") ? spec["opt"].get<std::string>() : "SGD";
  bool plateau = spec["name"] == "ReduceLROnPlateau";
  auto setup = std::make_unique<Setup>(kind);
  std::shared_ptr<optim::LRScheduler> sched;
  std::unique_ptr<optim::ReduceLROnPlateau> reduce;
  auto build = [&]() {
    if (plateau) {
      reduce = make_plateau(spec, *setup->opt);
    } else {
      sched = make_scheduler(spec, *setup->opt);
    }
  };
  build();
  double worst = 0;
  auto compare = [&](int t) {
    for (size_t g = 0; g < 2; ++g) {
      worst = std::max(worst, rel(setup->opt->lr(g), spec["lr"][t][g].get<double>()));
      worst = std::max(worst, rel(setup->momentum(g), spec["momentum"][t][g].get<double>()));
      double last = plateau ? reduce->get_last_lr()[g] : sched->get_last_lr()[g];
      worst = std::max(worst, rel(last, spec["lr"][t][g].get<double>()));
    }
  };
  compare(0);
  int steps = int(spec["lr"].size()) - 1;
  for (int t = 0; t < steps; ++t) {
    if (resume_at > 0 && t == resume_at) {
      optim::OptimizerState opt_state = setup->opt->state_dict();
      optim::Scalars sched_state = plateau ? reduce->state_dict() : sched->state_dict();
      sched.reset();
      reduce.reset();
      setup = std::make_unique<Setup>(kind);
      build();
      setup->opt->load_state_dict(opt_state);
      if (plateau) {
        reduce->load_state_dict(sched_state);
      } else {
        sched->load_state_dict(sched_state);
      }
    }
    if (plateau) {
      reduce->step(spec["metrics"][t].get<double>());
    } else {
      sched->step();
    }
    compare(t + 1);
  }
  return worst;
}

std::string describe(const json& spec) {
  return spec["name"].get<std::string>() + " " + spec["args"].dump() +
         (spec.contains("opt") ? " on " + spec["opt"].get<std::string>() : "");
}

}  // namespace

TEST_CASE("lr_scheduler: every schedule matches PyTorch's LR and momentum sequence over 100 steps") {
  json ref = load_schedulers();
  std::map<std::string, double> worst_per_schedule;
  for (const json& spec : ref["cases"]) {
    double dev = run_schedule(spec);
    CHECK_MESSAGE(dev <= 1e-9, describe(spec), ": relative deviation ", dev);
    double& w = worst_per_schedule[spec["name"].get<std::string>()];
    w = std::max(w, dev);
  }
  if (std::getenv("BRISK_OPTIM_REPORT")) {
    std::printf("lr_scheduler parity (torch %s), largest relative deviation per schedule:\n",
                ref["torch_version"].get<std::string>().c_str());
    for (const auto& [name, dev] : worst_per_schedule) std::printf("  %-28s %.3g\n", name.c_str(), dev);
  }
}

TEST_CASE("lr_scheduler: a schedule saved halfway and restored into fresh objects continues the same sequence") {
  json ref = load_schedulers();
  for (const json& spec : ref["cases"]) {
    double dev = run_schedule(spec, /*resume_at=*/47);
    CHECK_MESSAGE(dev <= 1e-9, describe(spec), " resumed at step 47: relative deviation ", dev);
  }
}

TEST_CASE("lr_scheduler: CyclicLR and OneCycleLR cycle Adam's beta1 as they cycle SGD's momentum") {
  for (bool one_cycle : {false, true}) {
    Setup sgd("SGD");
    Setup adam("Adam");
    std::shared_ptr<optim::LRScheduler> s1;
    std::shared_ptr<optim::LRScheduler> s2;
    if (one_cycle) {
      optim::OneCycleLROptions o{.max_lr = {0.1}, .total_steps = 50};
      s1 = std::make_shared<optim::OneCycleLR>(*sgd.opt, o);
      s2 = std::make_shared<optim::OneCycleLR>(*adam.opt, o);
    } else {
      optim::CyclicLROptions o{
          .base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 7, .mode = optim::CyclicMode::Triangular2};
      s1 = std::make_shared<optim::CyclicLR>(*sgd.opt, o);
      s2 = std::make_shared<optim::CyclicLR>(*adam.opt, o);
    }
    for (int t = 0; t < 50; ++t) {
      CHECK(adam.opt->get(0, "beta1") == sgd.opt->get(0, "momentum"));
      CHECK(adam.opt->lr(1) == sgd.opt->lr(1));
      s1->step();
      s2->step();
    }
  }
}

TEST_CASE("lr_scheduler: CosineAnnealingWarmRestarts accepts fractional epochs, PolynomialLR decays to zero") {
  Setup s("SGD");
  optim::CosineAnnealingWarmRestarts sched(*s.opt, 10, 2, 0.0);
  sched.step(2.5);
  CHECK(s.opt->lr(0) == doctest::Approx(0.1 * (1 + std::cos(M_PI * 2.5 / 10)) / 2));
  sched.step(15.0);  // second period: T_i = 20, T_cur = 5
  CHECK(s.opt->lr(0) == doctest::Approx(0.1 * (1 + std::cos(M_PI * 5 / 20)) / 2));

  Setup p("SGD");
  optim::PolynomialLR poly(*p.opt, 4, 2.0);
  std::vector<double> lrs = {p.opt->lr(0)};
  for (int i = 0; i < 5; ++i) {
    poly.step();
    lrs.push_back(p.opt->lr(0));
  }
  CHECK(lrs[0] == doctest::Approx(0.1));
  CHECK(lrs[1] == doctest::Approx(0.1 * 0.75 * 0.75));
  CHECK(lrs[2] == doctest::Approx(0.1 * 0.25));
  CHECK(lrs[4] == doctest::Approx(0.0));
  CHECK(lrs[5] == doctest::Approx(0.0));
}

TEST_CASE("lr_scheduler: misuse is a clear error") {
  Setup s("SGD");
  Tensor c = ones({1}).requires_grad_(true);
  optim::Adagrad ada(std::vector<Tensor>{c});
  CHECK_THROWS_WITH_AS(optim::CyclicLR(ada, {.base_lr = {0.1}, .max_lr = {1.0}}), doctest::Contains("momentum"), Error);
  CHECK_THROWS_WITH_AS(optim::CyclicLR(*s.opt, {.base_lr = {0.1, 0.2, 0.3}, .max_lr = {1.0}}),
                       doctest::Contains("base_lr"), Error);
  optim::OneCycleLR one(*s.opt, {.max_lr = {0.1}, .total_steps = 3});
  one.step();
  one.step();
  one.step();
  CHECK_THROWS_WITH_AS(one.step(), doctest::Contains("total_steps"), Error);
  auto a = std::make_shared<optim::ConstantLR>(*s.opt);
  CHECK_THROWS_WITH_AS(optim::SequentialLR(*s.opt, {a}, {3}), doctest::Contains("milestones"), Error);
}

TEST_CASE("lr_scheduler: a saved counter that is not a whole number is refused, naming the key") {
  Setup sgd("SGD");
  optim::StepLR sched(*sgd.opt, 3);
  optim::Scalars good = sched.state_dict();
  for (double bad : {std::nan(""), 1e300, -1e300, 2.5, HUGE_VAL}) {
    CAPTURE(bad);
    optim::Scalars s = good;
    s["last_epoch"] = bad;
    CHECK_THROWS_WITH_AS(sched.load_state_dict(s), doctest::Contains("key 'last_epoch' is"), Error);
  }
  optim::OptimizerState os = sgd.opt->state_dict();
  os.scalars["num_groups"] = std::nan("");
  CHECK_THROWS_WITH_AS(sgd.opt->load_state_dict(os), doctest::Contains("'num_groups' is nan, not a whole number"),
                       Error);
}
