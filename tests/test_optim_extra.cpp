// tests/test_optim_extra.cpp: NAdam, RAdam and Adamax against PyTorch 2.x's trajectories
// (tests/data/optim_extra/optimizers.json, made by tests/make_optim_extra_reference.py) in F64
// and F32, two parameter groups with their own lr and skipped gradients, a beta1 changed
// halfway (NAdam's stored momentum product), the state_dict round trip and the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "optim/optim.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json load_extra_reference() {
  fs::path path = ::brisk::test::data_dir() / "optim_extra" / "optimizers.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

// Largest |x - ref| / max(|ref|, floor): relative (floor 1e-12) in F64; relative above 1 and
// absolute below in F32, where rounding of values passing near zero inflates a relative measure.
double deviation(const std::vector<double>& x, const std::vector<double>& ref, double floor) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - ref[i]) / std::max(std::abs(ref[i]), floor));
    if (!std::isfinite(x[i])) worst = INFINITY;
  }
  return worst;
}

std::unique_ptr<optim::Optimizer> make_extra(const std::string& kind, const Tensor& a, const Tensor& b) {
  optim::NamedTensors ga = {{"a", a}};
  optim::NamedTensors gb = {{"b", b}};
  auto two_groups = [&](auto opt) -> std::unique_ptr<optim::Optimizer> {
    opt->add_param_group(gb);
    return opt;
  };
  if (kind == "NAdam") return two_groups(std::make_unique<optim::NAdam>(ga));
  if (kind == "RAdam") return two_groups(std::make_unique<optim::RAdam>(ga));
  if (kind == "Adamax") return two_groups(std::make_unique<optim::Adamax>(ga));
  FAIL("unknown optimizer ", kind);
  return nullptr;
}

std::string extra_case_name(const json& c) {
  std::string s = c["optimizer"].get<std::string>() + " " + c["options"].dump();
  if (!c["lr_b"].is_null()) s += " lr_b=" + c["lr_b"].dump();
  if (!c["skip_b"].empty()) s += " skip_b=" + c["skip_b"].dump();
  if (!c["beta1_from_step_10"].is_null()) s += " beta1_from_step_10=" + c["beta1_from_step_10"].dump();
  return s;
}

// One reference case in brisk; the largest deviation over all steps. resume_at > 0: save the
// state before that step and continue in a fresh optimizer loaded from it.
double run_extra_case(const json& ref, const json& c, DType dtype, int resume_at = 0) {
  Tensor a = from_vector(ref["a"].get<std::vector<double>>(), {5}, dtype);
  Tensor b = from_vector(ref["b"].get<std::vector<double>>(), {3, 2}, dtype);
  a.requires_grad_(true);
  b.requires_grad_(true);
  std::unique_ptr<optim::Optimizer> opt = make_extra(c["optimizer"], a, b);
  for (size_t g = 0; g < 2; ++g) {
    for (const auto& [key, value] : c["options"].items()) {
      opt->set(g, key, value.is_boolean() ? double(value.get<bool>()) : value.get<double>());
    }
  }
  if (!c["lr_b"].is_null()) opt->set(1, "lr", c["lr_b"].get<double>());
  const double floor = dtype == DType::F64 ? 1e-12 : 1.0;
  double worst = 0;
  for (int t = 0; t < ref["steps"].get<int>(); ++t) {
    if (resume_at > 0 && t == resume_at) {
      optim::OptimizerState state = opt->state_dict();
      opt = make_extra(c["optimizer"], a, b);
      opt->load_state_dict(state);
    }
    if (t == 10 && !c["beta1_from_step_10"].is_null()) {
      for (size_t g = 0; g < 2; ++g) opt->set(g, "beta1", c["beta1_from_step_10"].get<double>());
    }
    const json& grads = ref["grads"][t];
    a.set_grad(from_vector(grads["a"].get<std::vector<double>>(), {5}, dtype));
    bool skip = std::find(c["skip_b"].begin(), c["skip_b"].end(), json(t)) != c["skip_b"].end();
    b.set_grad(skip ? Tensor() : from_vector(grads["b"].get<std::vector<double>>(), {3, 2}, dtype));
    opt->step();
    const json& want = c["trajectory"][t];
    worst = std::max(worst, deviation(a.to_vector<double>(), want["a"].get<std::vector<double>>(), floor));
    worst = std::max(worst, deviation(b.to_vector<double>(), want["b"].get<std::vector<double>>(), floor));
  }
  return worst;
}

}  // namespace

TEST_CASE("optimx: NAdam, RAdam and Adamax follow PyTorch's trajectories in F64") {
  json ref = load_extra_reference();
  REQUIRE(ref["cases"].size() >= 15);
  for (const json& c : ref["cases"]) {
    double dev = run_extra_case(ref, c, DType::F64);
    CHECK_MESSAGE(dev <= 1e-9, extra_case_name(c), ": relative deviation ", dev);
  }
}

TEST_CASE("optimx: NAdam, RAdam and Adamax in F32 stay within single-precision rounding of PyTorch") {
  json ref = load_extra_reference();
  for (const json& c : ref["cases"]) {
    double dev = run_extra_case(ref, c, DType::F32);
    CHECK_MESSAGE(dev <= 5e-6, extra_case_name(c), ": deviation ", dev);
  }
}

TEST_CASE("optimx: a state_dict saved halfway continues the same trajectory (NAdam's mu_product included)") {
  json ref = load_extra_reference();
  for (const json& c : ref["cases"]) {
    double dev = run_extra_case(ref, c, DType::F64, /*resume_at=*/9);
    CHECK_MESSAGE(dev <= 1e-9, extra_case_name(c), " resumed at step 9: relative deviation ", dev);
  }
}

TEST_CASE("optimx: state_dict keys of NAdam, RAdam and Adamax") {
  Tensor p = from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F32);
  p.requires_grad_(true);
  p.set_grad(from_vector(std::vector<double>{0.5, -1, 2}, {3}, DType::F32));
  optim::NAdam nadam(optim::NamedTensors{{"w", p}});
  nadam.step();
  nadam.step();
  optim::OptimizerState s = nadam.state_dict();
  // mu_1 mu_2 with PyTorch's defaults (beta1 0.9, momentum_decay 4e-3).
  double mu1 = 0.9 * (1 - 0.5 * std::pow(0.96, 0.004));
  double mu2 = 0.9 * (1 - 0.5 * std::pow(0.96, 0.008));
  CHECK(s.scalars.at("state.w.mu_product") == doctest::Approx(mu1 * mu2).epsilon(1e-15));
  CHECK(s.scalars.at("state.w.step") == 2);
  CHECK(s.scalars.at("group.0.momentum_decay") == doctest::Approx(4e-3));
  CHECK(s.scalars.at("group.0.lr") == doctest::Approx(2e-3));
  CHECK(s.scalars.count("group.0.decoupled_weight_decay"));
  CHECK(nadam.state("w")->buffers.count("exp_avg_sq"));

  optim::Adamax adamax(optim::NamedTensors{{"w", p}});
  adamax.step();
  CHECK(adamax.state("w")->buffers.count("exp_inf"));
  CHECK(adamax.get(0, "lr") == doctest::Approx(2e-3));
  optim::RAdam radam(optim::NamedTensors{{"w", p}});
  radam.step();
  CHECK(radam.get(0, "lr") == doctest::Approx(1e-3));
  CHECK(radam.state_dict().scalars.count("state.w.mu_product") == 0);
}

TEST_CASE("optimx: NAdam, RAdam and Adamax refuse bad options and bad states with clear errors") {
  Tensor p = from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F32);
  p.requires_grad_(true);
  std::vector<Tensor> ps = {p};
  CHECK_THROWS_WITH_AS(optim::NAdam(ps, {.lr = -1}), doctest::Contains("NAdam: invalid learning rate"), Error);
  CHECK_THROWS_WITH_AS(optim::NAdam(ps, {.momentum_decay = -0.1}), doctest::Contains("NAdam: invalid momentum_decay"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::NAdam(ps, {.beta1 = 1.0}), doctest::Contains("NAdam: invalid beta1"), Error);
  CHECK_THROWS_WITH_AS(optim::RAdam(ps, {.beta2 = -0.5}), doctest::Contains("RAdam: invalid beta2"), Error);
  CHECK_THROWS_WITH_AS(optim::RAdam(ps, {.weight_decay = -1}), doctest::Contains("RAdam: invalid weight_decay"), Error);
  CHECK_THROWS_WITH_AS(optim::Adamax(ps, {.eps = -1}), doctest::Contains("Adamax: invalid eps"), Error);
  CHECK_THROWS_WITH_AS(optim::Adamax(ps, {.beta1 = 1.5}), doctest::Contains("Adamax: invalid beta1"), Error);

  p.set_grad(from_vector(std::vector<double>{0.5, -1, 2}, {3}, DType::F32));
  optim::NAdam nadam(ps);
  nadam.step();
  optim::OptimizerState s = nadam.state_dict();
  optim::OptimizerState bad = s;
  bad.scalars["state.0.mu_product"] = NAN;
  CHECK_THROWS_WITH_AS(nadam.load_state_dict(bad), doctest::Contains("'state.0.mu_product' is nan"), Error);
  bad = s;
  bad.scalars["state.0.something"] = 1;
  CHECK_THROWS_WITH_AS(nadam.load_state_dict(bad), doctest::Contains("unexpected scalar key 'state.0.something'"),
                       Error);
  // Only NAdam keeps a mu_product: RAdam refuses one.
  optim::RAdam radam(ps);
  radam.step();
  bad = radam.state_dict();
  bad.scalars["state.0.mu_product"] = 0.5;
  CHECK_THROWS_WITH_AS(radam.load_state_dict(bad), doctest::Contains("unexpected scalar key 'state.0.mu_product'"),
                       Error);
  // A state of another optimizer kind is refused by its options.
  CHECK_THROWS_WITH_AS(radam.load_state_dict(s), doctest::Contains("RAdam: load_state_dict"), Error);
}
