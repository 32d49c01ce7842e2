// tests/test_optim.cpp: the optimizers against PyTorch (tests/data/optim/optimizers.json, made
// by tests/make_optim_reference.py), the fused loops against the tensor-op references, the
// state_dict round trip, skipped and frozen parameters, gradient clipping (clip.json), the L1
// penalty, gradient accumulation and early stopping.
// Set BRISK_OPTIM_REPORT=1 to print the largest deviation from PyTorch per case.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/optim.h"
#include "tests/paths.h"
#include "tests/test_util.h"
#include "train/early_stopping.h"

using namespace brisk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json load_reference(const char* name) {
  fs::path path = ::brisk::test::data_dir() / "optim" / name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

bool report() { return std::getenv("BRISK_OPTIM_REPORT") != nullptr; }

// Largest |x - ref| / |ref| (|ref| floored at 1e-12).
double rel_dev(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double scale = std::max(std::abs(ref[i]), 1e-12);
    worst = std::max(worst, std::abs(x[i] - ref[i]) / scale);
    if (std::isnan(x[i]) != std::isnan(ref[i])) worst = INFINITY;
  }
  return worst;
}

Tensor param_from(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = from_vector(values, shape, dtype);
  t.requires_grad_(true);
  return t;
}

// An optimizer of the named kind over two groups: {"a": a} and {"b": b}.
std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const Tensor& a, const Tensor& b) {
  optim::NamedTensors ga = {{"a", a}};
  optim::NamedTensors gb = {{"b", b}};
  auto two_groups = [&](auto opt) -> std::unique_ptr<optim::Optimizer> {
    opt->add_param_group(gb);
    return opt;
  };
  if (kind == "SGD") return two_groups(std::make_unique<optim::SGD>(ga));
  if (kind == "Adam") return two_groups(std::make_unique<optim::Adam>(ga));
  if (kind == "AdamW") return two_groups(std::make_unique<optim::AdamW>(ga));
  if (kind == "RMSprop") return two_groups(std::make_unique<optim::RMSprop>(ga));
  if (kind == "Adagrad") return two_groups(std::make_unique<optim::Adagrad>(ga));
  FAIL("unknown optimizer ", kind);
  return nullptr;
}

// Sets a case's options on both groups by name (booleans as 0/1), then b's own lr.
void configure(optim::Optimizer& opt, const json& c, bool fused) {
  for (size_t g = 0; g < 2; ++g) {
    for (const auto& [key, value] : c["options"].items()) {
      opt.set(g, key, value.is_boolean() ? double(value.get<bool>()) : value.get<double>());
    }
    opt.set(g, "fused", fused);
  }
  if (!c["lr_b"].is_null()) opt.set(1, "lr", c["lr_b"].get<double>());
}

std::string case_name(const json& c) {
  std::string s = c["optimizer"].get<std::string>() + " " + c["options"].dump();
  if (!c["lr_b"].is_null()) s += " lr_b=" + c["lr_b"].dump();
  if (!c["skip_b"].empty()) s += " skip_b=" + c["skip_b"].dump();
  return s;
}

bool skipped(const json& c, int t) {
  for (const auto& s : c["skip_b"]) {
    if (s.get<int>() == t) return true;
  }
  return false;
}

// Largest |x - ref| / max(|ref|, 1): relative for weights above 1, absolute below (where F32
// rounding of values that pass near zero would inflate a purely relative measure).
double mixed_dev(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - ref[i]) / std::max(std::abs(ref[i]), 1.0));
    if (std::isnan(x[i]) != std::isnan(ref[i])) worst = INFINITY;
  }
  return worst;
}

// Runs one reference case in brisk; returns the largest deviation over all steps: relative in
// F64, mixed (see mixed_dev) in F32.
// first_steps > 0: stop after that many steps, save the state, continue in a fresh optimizer.
double run_case(const json& ref, const json& c, DType dtype, bool fused, int resume_at = 0) {
  Tensor a = param_from(ref["a"].get<std::vector<double>>(), {5}, dtype);
  Tensor b = param_from(ref["b"].get<std::vector<double>>(), {3, 2}, dtype);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c["optimizer"], a, b);
  configure(*opt, c, fused);
  double worst = 0;
  int steps = ref["steps"].get<int>();
  for (int t = 0; t < steps; ++t) {
    if (resume_at > 0 && t == resume_at) {
      optim::OptimizerState state = opt->state_dict();
      opt = make_optimizer(c["optimizer"], a, b);
      opt->load_state_dict(state);
    }
    const json& grads = ref["grads"][t];
    a.set_grad(from_vector(grads["a"].get<std::vector<double>>(), {5}, dtype));
    if (skipped(c, t)) {
      b.set_grad(Tensor());
    } else {
      b.set_grad(from_vector(grads["b"].get<std::vector<double>>(), {3, 2}, dtype));
    }
    opt->step();
    const json& want = c["trajectory"][t];
    auto dev = dtype == DType::F64 ? rel_dev : mixed_dev;
    worst = std::max(worst, dev(a.to_vector<double>(), want["a"].get<std::vector<double>>()));
    worst = std::max(worst, dev(b.to_vector<double>(), want["b"].get<std::vector<double>>()));
  }
  return worst;
}

}  // namespace

TEST_CASE("optim: every optimizer follows PyTorch's trajectory in F64, reference and fused steps") {
  json ref = load_reference("optimizers.json");
  std::map<std::string, double> worst_per_optimizer;
  for (const json& c : ref["cases"]) {
    for (bool fused : {false, true}) {
      double dev = run_case(ref, c, DType::F64, fused);
      CHECK_MESSAGE(dev <= 1e-6, case_name(c), std::string(fused ? " fused" : " reference"), ": relative deviation ",
                    dev);
      double& w = worst_per_optimizer[c["optimizer"].get<std::string>()];
      w = std::max(w, dev);
      if (report()) {
        std::printf("optim parity F64 %-8s %s: %.3g\n", fused ? "fused" : "ref", case_name(c).c_str(), dev);
      }
    }
  }
  if (report()) {
    std::printf("optim parity (torch %s), largest relative deviation per optimizer over all cases, F64:\n",
                ref["torch_version"].get<std::string>().c_str());
    for (const auto& [name, dev] : worst_per_optimizer) std::printf("  %-8s %.3g\n", name.c_str(), dev);
  }
}

TEST_CASE("optim: F32 optimizers stay within single-precision rounding of PyTorch's F64 trajectory") {
  // Deviation relative to max(|w|, 1): F32 rounding, accumulated over 20 steps.
  json ref = load_reference("optimizers.json");
  std::map<std::string, double> worst_per_optimizer;
  for (const json& c : ref["cases"]) {
    for (bool fused : {false, true}) {
      double dev = run_case(ref, c, DType::F32, fused);
      CHECK_MESSAGE(dev <= 5e-6, case_name(c), std::string(fused ? " fused" : " reference"), ": relative deviation ",
                    dev);
      double& w = worst_per_optimizer[c["optimizer"].get<std::string>()];
      w = std::max(w, dev);
    }
  }
  if (report()) {
    std::printf("optim parity, largest deviation |x - ref| / max(|ref|, 1) per optimizer, brisk F32 vs torch F64:\n");
    for (const auto& [name, dev] : worst_per_optimizer) std::printf("  %-8s %.3g\n", name.c_str(), dev);
  }
}

TEST_CASE("optim: state_dict saved halfway and loaded into a fresh optimizer continues the same trajectory") {
  json ref = load_reference("optimizers.json");
  for (const json& c : ref["cases"]) {
    double dev = run_case(ref, c, DType::F64, /*fused=*/true, /*resume_at=*/9);
    CHECK_MESSAGE(dev <= 1e-6, case_name(c), " resumed at step 9: relative deviation ", dev);
  }
}

namespace {

// Parameters for the fused-vs-reference comparison: a matrix (p[0]), a tiny one (p[1], the
// one some cases leave without a gradient), a transposed view (not dense: the fused path hands
// it to the reference) and, when `large`, three tensors of 95000 values in all (more than
// detail::kParallelMin: the fused loop's OpenMP path, with a tensor split into two chunks),
// each small enough for the reference's elementwise ops to stay on one thread (fast on a
// loaded machine).
std::vector<Tensor> comparison_params(DType dtype, bool large) {
  std::vector<Shape> shapes = {{64, 33}, {7}, {5, 9}};
  if (large) {
    shapes.push_back({40000});
    shapes.push_back({100, 300});
    shapes.push_back({25000});
  }
  std::vector<Tensor> params;
  for (size_t k = 0; k < shapes.size(); ++k) {
    int64_t n = shapes[k].numel();
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = std::cos(0.37 * double(i) + double(k)) * 0.5;
    Tensor p = from_vector(v, shapes[k], dtype);
    if (k == 2) p = p.t();
    p.requires_grad_(true);
    params.push_back(p);
  }
  return params;
}

// The gradients of step t for every parameter (same values for both optimizers compared).
std::vector<Tensor> comparison_grads(const std::vector<Tensor>& params, int t) {
  std::vector<Tensor> grads;
  for (size_t k = 0; k < params.size(); ++k) {
    int64_t n = params[k].numel();
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) {
      v[i] = std::sin(double(t) + 0.11 * double(i) + double(k)) * (1 + 0.01 * double(i % 13));
    }
    grads.push_back(from_vector(v, params[k].sizes(), params[k].dtype()));
  }
  return grads;
}

// Adds `params` as a new group with group 0's options.
void add_group_like_first(optim::Optimizer& opt, const optim::NamedTensors& params) {
  if (auto* o = dynamic_cast<optim::SGD*>(&opt)) o->add_param_group(params, o->options(0));
  if (auto* o = dynamic_cast<optim::Adam*>(&opt)) o->add_param_group(params, o->options(0));
  if (auto* o = dynamic_cast<optim::AdamW*>(&opt)) o->add_param_group(params, o->options(0));
  if (auto* o = dynamic_cast<optim::RMSprop*>(&opt)) o->add_param_group(params, o->options(0));
  if (auto* o = dynamic_cast<optim::Adagrad*>(&opt)) o->add_param_group(params, o->options(0));
}

// The case of each optimizer with the most options set (it also gets the large tensor).
bool richest_of_its_kind(const json& cases, const json& c) {
  for (const json& other : cases) {
    if (other["optimizer"] == c["optimizer"] && other["options"].size() > c["options"].size()) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("optim: fused steps equal the reference steps to 1e-7 relative over 20 steps (F32 and F64)") {
  json ref = load_reference("optimizers.json");
  for (DType dtype : {DType::F32, DType::F64}) {
    double worst = 0;
    for (const json& c : ref["cases"]) {
      bool large = richest_of_its_kind(ref["cases"], c);
      std::vector<Tensor> pr = comparison_params(dtype, large);
      std::vector<Tensor> pf = comparison_params(dtype, large);
      auto build = [&](const std::vector<Tensor>& p, bool fused) {
        std::unique_ptr<optim::Optimizer> opt = make_optimizer(c["optimizer"], p[0], p[1]);
        configure(*opt, c, fused);
        optim::NamedTensors rest = {{"c", p[2]}};
        add_group_like_first(*opt, rest);
        if (large) add_group_like_first(*opt, {{"d", p[3]}, {"e", p[4]}, {"f", p[5]}});
        return opt;
      };
      auto opt_r = build(pr, false);
      auto opt_f = build(pf, true);
      for (int t = 0; t < 20; ++t) {
        std::vector<Tensor> grads = comparison_grads(pr, t);
        for (size_t k = 0; k < pr.size(); ++k) {
          pr[k].set_grad(grads[k].clone());
          pf[k].set_grad(grads[k].clone());
        }
        if (skipped(c, t)) {
          pr[1].set_grad(Tensor());
          pf[1].set_grad(Tensor());
        }
        opt_r->step();
        opt_f->step();
      }
      double dev = 0;
      for (size_t k = 0; k < pr.size(); ++k)
        dev = std::max(dev, rel_dev(pf[k].to_vector<double>(), pr[k].to_vector<double>()));
      CHECK_MESSAGE(dev <= 1e-7, case_name(c), " ", dtype, ": fused vs reference deviation ", dev);
      worst = std::max(worst, dev);
    }
    if (report())
      std::printf("optim fused vs reference, %s, largest relative deviation: %.3g\n", dtype_name(dtype), worst);
  }
}

TEST_CASE("optim: parameters without a gradient and frozen parameters are left alone") {
  Tensor a = param_from({1, 2, 3}, {3}, DType::F32);
  Tensor frozen = param_from({4, 5}, {2}, DType::F32);
  Tensor no_grad = param_from({6}, {1}, DType::F32);
  for (bool fused : {false, true}) {
    optim::Adam opt(optim::NamedTensors{{"a", a}, {"frozen", frozen}, {"no_grad", no_grad}},
                    {.lr = 0.1, .fused = fused});
    frozen.set_grad(ones({2}));
    frozen.requires_grad_(false);
    a.set_grad(ones({3}));
    opt.step();
    CHECK(frozen.to_vector<double>() == std::vector<double>{4, 5});
    CHECK(no_grad.to_vector<double>() == std::vector<double>{6});
    CHECK(a.to_vector<double>()[0] != 1.0);
    CHECK(opt.state("frozen") == nullptr);
    CHECK(opt.state("no_grad") == nullptr);
    CHECK(opt.state("a")->step == 1);
    frozen.requires_grad_(true);
  }
}

// ---- stepping in backward (Note [Stepping in backward] in optim/optimizer.cpp)

namespace {

// Two layers and a weight used twice (w1 in both products), so one parameter's gradient has two
// parts that must be summed before its step.
struct TwoLayers {
  Tensor w1, b1, w2;
  TwoLayers(DType dt, uint64_t seed) {
    manual_seed(seed);
    w1 = (randn({16, 16}) * 0.2).to(dt).requires_grad_(true);
    b1 = (randn({16}) * 0.1).to(dt).requires_grad_(true);
    w2 = (randn({4, 16}) * 0.2).to(dt).requires_grad_(true);
  }
  optim::NamedTensors named() const { return {{"w1", w1}, {"b1", b1}, {"w2", w2}}; }
  Tensor loss(const Tensor& x) const {
    Tensor h = tanh(linear(x, w1, b1));
    h = tanh(linear(h, w1));
    Tensor y = linear(h, w2);
    return sum(y * y);
  }
};

}  // namespace

TEST_CASE("optim: stepping in backward gives step()'s parameters, steps a shared weight once and drops gradients") {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"AdamW fused",
       [](optim::NamedTensors p) {
         return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.01});
       }},
      {"Adam reference",
       [](optim::NamedTensors p) {
         return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01, .fused = false});
       }},
      {"SGD momentum", [](optim::NamedTensors p) {
         return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
       }}};
  for (const auto& [text, make] : makers) {
    const std::string label = text;  // clang cannot capture a structured binding in CAPTURE's lambda
    for (DType dt : {DType::F64, DType::F32}) {
      CAPTURE(label);
      CAPTURE(dt);
      TwoLayers plain(dt, 5), fused(dt, 5);
      auto opt_plain = make(plain.named());
      auto opt_fused = make(fused.named());
      opt_fused->step_in_backward();
      CHECK(opt_fused->steps_in_backward());
      for (int t = 0; t < 5; ++t) {
        manual_seed(100 + uint64_t(t));
        const Tensor x = randn({8, 16}).to(dt);
        opt_plain->zero_grad();
        plain.loss(x).backward();
        opt_plain->step();
        fused.loss(x).backward();
        CHECK_FALSE(fused.w1.grad().defined());  // dropped after its step
        CHECK_FALSE(fused.w2.grad().defined());
      }
      // The same rule on the same gradients in the same order: the same bits.
      CHECK(fused.w1.to_vector<double>() == plain.w1.to_vector<double>());
      CHECK(fused.b1.to_vector<double>() == plain.b1.to_vector<double>());
      CHECK(fused.w2.to_vector<double>() == plain.w2.to_vector<double>());
      CHECK(fused.w1.to_vector<double>() != TwoLayers(dt, 5).w1.to_vector<double>());
      CHECK(opt_fused->state("w1")->step == 5);  // one step per backward, not one per use
    }
  }
}

TEST_CASE("optim: stepping in backward with F32 master weights for BF16 parameters") {
  TwoLayers plain(DType::BF16, 9), fused(DType::BF16, 9);
  optim::AdamW opt_plain(plain.named(), {.lr = 0.01});
  optim::AdamW opt_fused(fused.named(), {.lr = 0.01});
  opt_plain.use_master_weights();
  opt_fused.use_master_weights();
  opt_fused.step_in_backward();
  for (int t = 0; t < 3; ++t) {
    manual_seed(200 + uint64_t(t));
    const Tensor x = randn({8, 16}).to(DType::BF16);
    opt_plain.zero_grad();
    plain.loss(x).backward();
    opt_plain.step();
    fused.loss(x).backward();
  }
  CHECK(fused.w1.to_vector<double>() == plain.w1.to_vector<double>());
  CHECK(opt_fused.state("w1")->buffers.at("master_weight").to_vector<double>() ==
        opt_plain.state("w1")->buffers.at("master_weight").to_vector<double>());
}

TEST_CASE("optim: stepping in backward holds one gradient at a time, not the model's") {
  // 8 weights of 256 x 256 F32 (256 KiB each, 2 MiB in all) against a few KiB of activations.
  manual_seed(1);
  std::vector<Tensor> ws;
  optim::NamedTensors named;
  for (int i = 0; i < 8; ++i) {
    ws.push_back((randn({256, 256}) * 0.05).requires_grad_(true));
    named.emplace_back("w" + std::to_string(i), ws.back());
  }
  const Tensor x = randn({2, 256});
  auto loss_of = [&] {
    Tensor h = x;
    for (const Tensor& w : ws) h = linear(h, w);
    return sum(h * h);
  };
  auto peak_of = [&](optim::Optimizer& opt, bool in_backward) {
    opt.step_in_backward(in_backward);
    opt.zero_grad();
    cpu_allocator().empty_cache();
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    loss_of().backward();
    if (!in_backward) opt.step();
    return double(cpu_allocator().stats().peak - base);
  };
  optim::Adam opt(named, {.lr = 1e-3});
  peak_of(opt, false);  // first step: creates the moment buffers outside the measurement
  const double plain = peak_of(opt, false), fused = peak_of(opt, true);
  INFO("peak above the weights and state: step() ", plain, " bytes, in backward ", fused);
  CHECK(plain >= 8.0 * 256 * 256 * 4);  // every gradient at once
  CHECK(fused <= 0.35 * plain);         // about one
}

TEST_CASE("optim: stepping in backward: step() and GradScaler refuse, switching off and destruction remove the hooks") {
  TwoLayers m(DType::F32, 3);
  const Tensor x = randn({4, 16});
  {
    optim::SGD opt(m.named(), {.lr = 0.1});
    opt.step_in_backward();
    m.loss(x).backward();
    CHECK(test::error_text([&] { opt.step(); }).find("step() while stepping in backward") != std::string::npos);
    optim::GradScaler scaler;
    CHECK(test::error_text([&] { scaler.step(opt); }).find("steps in backward") != std::string::npos);
    opt.step_in_backward(false);
    CHECK_FALSE(opt.steps_in_backward());
    m.loss(x).backward();
    CHECK(m.w1.grad().defined());  // kept: the hooks are gone
    opt.step();
    opt.zero_grad();
    opt.step_in_backward();
  }                      // destroyed while on
  m.loss(x).backward();  // a hook of a destroyed optimizer would step through a dangling pointer
  CHECK(m.w1.grad().defined());
}

TEST_CASE("optim: zero_grad drops gradients or fills them with zeros") {
  Tensor a = param_from({1, 2}, {2}, DType::F32);
  optim::SGD opt(std::vector<Tensor>{a}, {.lr = 0.1});
  a.set_grad(ones({2}));
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0, 0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("optim: state_dict is keyed by module parameter names and holds steps and hyperparameters") {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(3, 2));
  model->push_back(std::make_shared<nn::Linear>(2, 1));
  optim::Adam opt(model->named_parameters(), {.lr = 0.01, .amsgrad = true});
  for (auto& p : model->parameters()) p.set_grad(ones_like(p));
  opt.step();
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  std::vector<std::string> keys;
  for (auto& [k, t] : s.tensors) keys.push_back(k);
  CHECK(std::find(keys.begin(), keys.end(), "state.0.weight.exp_avg") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "state.1.bias.max_exp_avg_sq") != keys.end());
  CHECK(s.scalars.at("state.0.weight.step") == 2);
  CHECK(s.scalars.at("group.0.lr") == 0.01);
  CHECK(s.scalars.at("group.0.amsgrad") == 1);
  CHECK(s.scalars.at("group.0.beta2") == 0.999);
  CHECK(s.scalars.at("num_groups") == 1);

  // Unnamed parameters are named by position.
  Tensor x = param_from({1}, {1}, DType::F32);
  Tensor y = param_from({2}, {1}, DType::F32);
  optim::SGD sgd(std::vector<Tensor>{x}, {.lr = 0.1, .momentum = 0.9});
  sgd.add_param_group(std::vector<Tensor>{y}, {.lr = 0.2});
  CHECK(sgd.group(1).names == std::vector<std::string>{"1"});
  x.set_grad(ones({1}));
  y.set_grad(ones({1}));
  sgd.step();
  optim::OptimizerState ss = sgd.state_dict();
  REQUIRE(ss.tensors.size() == 2);  // group 1 inherits momentum 0.9 (tests/test_optim_groups.cpp)
  CHECK(ss.tensors[0].first == "state.0.momentum_buffer");
  CHECK(ss.tensors[1].first == "state.1.momentum_buffer");
  CHECK(ss.scalars.at("group.1.lr") == 0.2);
  CHECK(ss.scalars.at("group.1.momentum") == 0.9);
}

TEST_CASE("optim: misuse is a clear error") {
  Tensor a = param_from({1}, {1}, DType::F32);
  CHECK_THROWS_WITH_AS(optim::SGD(std::vector<Tensor>{a, a}), doctest::Contains("twice"), Error);
  CHECK_THROWS_WITH_AS(optim::Adam(std::vector<Tensor>{a}, {.lr = -1}), doctest::Contains("learning rate"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD(std::vector<Tensor>{a}, {.lr = 0.1, .nesterov = true}), doctest::Contains("nesterov"),
                       Error);
  optim::SGD sgd(std::vector<Tensor>{a});
  CHECK_THROWS_WITH_AS(sgd.add_param_group(optim::NamedTensors{{"again", a}}), doctest::Contains("already"), Error);
  CHECK_THROWS_WITH_AS(sgd.get(0, "beta1"), doctest::Contains("no option 'beta1'"), Error);
  optim::OptimizerState s = sgd.state_dict();
  s.scalars["num_groups"] = 2;
  CHECK_THROWS_WITH_AS(sgd.load_state_dict(s), doctest::Contains("parameter groups"), Error);
  optim::OptimizerState t = sgd.state_dict();
  t.tensors.emplace_back("state.nope.momentum_buffer", zeros({1}));
  CHECK_THROWS_WITH_AS(sgd.load_state_dict(t), doctest::Contains("unknown parameter 'nope'"), Error);
}

// ---- gradient clipping

TEST_CASE("clip_grad_norm_ and clip_grad_value_ match PyTorch") {
  json ref = load_reference("clip.json");
  auto fresh = [&]() {
    Tensor a = param_from(std::vector<double>(5, 0.0), {5}, DType::F64);
    Tensor b = param_from(std::vector<double>(6, 0.0), {3, 2}, DType::F64);
    a.set_grad(from_vector(ref["a_grad"].get<std::vector<double>>(), {5}, DType::F64));
    b.set_grad(from_vector(ref["b_grad"].get<std::vector<double>>(), {3, 2}, DType::F64));
    return std::vector<Tensor>{a, b};
  };
  double worst = 0;
  for (const json& c : ref["norm"]) {
    std::vector<Tensor> p = fresh();
    double norm_type = c["norm_type"].is_string() ? optim::kInfNorm : c["norm_type"].get<double>();
    double total = optim::clip_grad_norm_(p, c["max_norm"].get<double>(), norm_type);
    double want = c["total_norm"].get<double>();
    double dev = std::max({std::abs(total - want) / want,
                           rel_dev(p[0].grad().to_vector<double>(), c["a"].get<std::vector<double>>()),
                           rel_dev(p[1].grad().to_vector<double>(), c["b"].get<std::vector<double>>())});
    CHECK_MESSAGE(dev <= 1e-6, "norm_type ", c["norm_type"].dump(), " max_norm ", c["max_norm"].dump(), ": ", dev);
    worst = std::max(worst, dev);
  }
  std::vector<Tensor> p = fresh();
  optim::clip_grad_value_(p, ref["value"]["clip_value"].get<double>());
  CHECK(rel_dev(p[0].grad().to_vector<double>(), ref["value"]["a"].get<std::vector<double>>()) == 0);
  CHECK(rel_dev(p[1].grad().to_vector<double>(), ref["value"]["b"].get<std::vector<double>>()) == 0);
  if (report()) std::printf("clip_grad_norm_ vs torch, largest relative deviation: %.3g\n", worst);
}

TEST_CASE("clip_grad_norm_: a non-finite norm is an error when asked, parameters without grad are skipped") {
  Tensor a = param_from({1, 2}, {2}, DType::F32);
  Tensor b = param_from({3}, {1}, DType::F32);
  a.set_grad(from_vector({3, 4}, {2}));
  CHECK(optim::clip_grad_norm_({a, b}, 10.0) == doctest::Approx(5.0));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 4});  // under max_norm: untouched
  double total = optim::clip_grad_norm_({a, b}, 1.0);
  CHECK(total == doctest::Approx(5.0));
  CHECK(optim::grad_norm({a, b}) == doctest::Approx(1.0).epsilon(1e-5));
  b.set_grad(from_vector({NAN}, {1}));
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true), doctest::Contains("nan"), Error);
  CHECK(optim::grad_norm({b.detach()}) == 0.0);
}

TEST_CASE("clip: l1_penalty is sum |p| and its gradient is sign(p)") {
  Tensor a = param_from({1.5, -2.0, 0.0}, {3}, DType::F64);
  Tensor b = param_from({-0.5, 0.25}, {2, 1}, DType::F64);
  Tensor penalty = optim::l1_penalty({a, b});
  CHECK(penalty.item<double>() == doctest::Approx(4.25));
  penalty.backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, -1, 0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{-1, 1});
}

// ---- gradient accumulation

TEST_CASE("optim: accumulating N micro-batches of loss / N gives the update of one batch N times larger") {
  auto make_model = []() {
    auto m = std::make_shared<nn::Linear>(4, 3);
    m->to(DType::F64);
    NoGradGuard ng;
    std::vector<double> w(12);
    for (int i = 0; i < 12; ++i) w[i] = std::sin(double(i)) * 0.5;
    m->weight().copy_(from_vector(w, {3, 4}, DType::F64));
    m->bias().copy_(from_vector({0.1, -0.2, 0.3}, {3}, DType::F64));
    return m;
  };
  std::vector<double> xv(32);
  std::vector<double> yv(24);
  for (int i = 0; i < 32; ++i) xv[i] = std::cos(0.7 * i);
  for (int i = 0; i < 24; ++i) yv[i] = std::sin(0.3 * i);
  Tensor x = from_vector(xv, {8, 4}, DType::F64);
  Tensor y = from_vector(yv, {8, 3}, DType::F64);

  auto full = make_model();
  optim::Adam opt_full(full->named_parameters(), {.lr = 0.01});
  mse_loss((*full)(x), y).backward();
  opt_full.step();

  auto accum = make_model();
  optim::Adam opt_accum(accum->named_parameters(), {.lr = 0.01});
  const int N = 4;
  opt_accum.zero_grad();
  for (int i = 0; i < N; ++i) {
    Tensor loss = mse_loss((*accum)(x.narrow(0, 2 * i, 2)), y.narrow(0, 2 * i, 2)) / double(N);
    loss.backward();
  }
  opt_accum.step();

  auto pf = full->parameters();
  auto pa = accum->parameters();
  for (size_t k = 0; k < pf.size(); ++k) {
    CHECK(rel_dev(pa[k].grad().to_vector<double>(), pf[k].grad().to_vector<double>()) < 1e-12);
    CHECK(rel_dev(pa[k].to_vector<double>(), pf[k].to_vector<double>()) < 1e-12);
  }
}

// ---- early stopping

TEST_CASE("early stopping: stops after patience epochs without improvement and restores the best weights") {
  auto model = std::make_shared<nn::Linear>(2, 1);
  optim::EarlyStopping stopper({.patience = 3, .min_delta = 0.01});
  std::vector<double> losses = {1.0, 0.8, 0.7, 0.695, 0.75, 0.71, 0.9};
  std::vector<bool> stop;
  std::vector<double> best_weight;
  for (size_t e = 0; e < losses.size(); ++e) {
    {
      NoGradGuard ng;
      model->weight().fill_(double(e));  // the "training" of epoch e
    }
    stop.push_back(stopper.step(losses[e], model.get()));
  }
  // 0.695 is not better than 0.7 by more than 0.01: epochs 3, 4, 5 are bad, stop at 5.
  CHECK(stop == std::vector<bool>{false, false, false, false, false, true, true});
  CHECK(stopper.best() == 0.7);
  CHECK(stopper.best_epoch() == 2);
  stopper.restore_best(*model);
  CHECK(model->weight().to_vector<double>() == std::vector<double>{2, 2});

  optim::EarlyStopping up({.patience = 1, .mode = optim::StopMode::Max});
  CHECK_FALSE(up.step(0.5));
  CHECK_FALSE(up.step(0.6));
  CHECK(up.step(0.55));
  CHECK(up.best() == 0.6);

  optim::EarlyStopping resumed({.patience = 3, .min_delta = 0.01});
  resumed.load_state_dict(stopper.state_dict());
  CHECK(resumed.should_stop());
  CHECK(resumed.best_epoch() == 2);
}

TEST_CASE("early stopping: best weights can live in a safetensors file instead of memory") {
  fs::path dir = fs::temp_directory_path() / "brisk_test_early_stopping";
  fs::create_directories(dir);
  fs::path file = dir / "best.safetensors";
  fs::remove(file);
  auto model = std::make_shared<nn::Linear>(3, 2);
  optim::EarlyStopping stopper({.patience = 2, .keep_in_memory = false, .checkpoint_path = file.string()});
  {
    NoGradGuard ng;
    model->weight().fill_(0.25);
  }
  stopper.step(1.0, model.get());
  CHECK(fs::exists(file));
  CHECK(stopper.best_state().empty());
  {
    NoGradGuard ng;
    model->weight().fill_(-1.0);
  }
  stopper.step(2.0, model.get());
  stopper.restore_best(*model);
  CHECK(model->weight().to_vector<double>() == std::vector<double>(6, 0.25));
  fs::remove_all(dir);
}
