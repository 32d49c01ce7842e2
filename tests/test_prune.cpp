// tests/test_prune.cpp: nn::prune (compress/prune.h) against torch.nn.utils.prune on committed
// reference masks (tests/data/prune/prune.json, made by tests/make_prune_reference.py with
// PyTorch 1.13): L1 unstructured, Ln structured (n 1 and 2, dims 0, 1, -1), their composition,
// global pruning, state_dict keys, outputs and weight_orig gradients, remove. Then the parts
// PyTorch has no counterpart for, checked by exact arithmetic: masks and their gradients, the
// cubic schedule, the sparsity report, and physical channel removal (compress/prune_channels.h)
// equal to the masked model for a Sequential CNN with batch norm, SmallCNN and ResNet-18.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compress/prune.h"
#include "compress/prune_channels.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/models/simple.h"
#include "nn/models/vision.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace brisk;
using namespace brisk::nn;
using brisk::test::error_text;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json reference() {
  std::ifstream in(::brisk::test::data_dir() / "prune" / "prune.json");
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<double> nums(const json& a) { return a.get<std::vector<double>>(); }

void set_values(Tensor t, const json& values) {
  NoGradGuard ng;
  t.copy_(from_vector(nums(values), t.sizes(), t.dtype()));
}

std::vector<double> values(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

std::vector<std::string> keys(const Module& m) {
  std::vector<std::string> out;
  for (auto& [k, t] : m.state_dict()) out.push_back(k);
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

int64_t zeros_of(const Tensor& t) {
  std::vector<double> v = values(t);
  return std::count(v.begin(), v.end(), 0.0);
}

ModulePtr make_module(const json& c) {
  const std::vector<int64_t> s = c["shape"].get<std::vector<int64_t>>();
  ModulePtr m = c["kind"] == "linear" ? ModulePtr(std::make_shared<Linear>(s[1], s[0]))
                                      : ModulePtr(std::make_shared<Conv2d>(s[1], s[0], s[2]));
  set_values(m->parameter("weight"), c["weight"]);
  set_values(m->parameter("bias"), c["bias"]);
  return m;
}

prune::Amount amount_of(const json& step) {
  if (step["amount_is_count"].get<bool>()) return prune::Amount(step["amount"].get<int64_t>());
  return prune::Amount(step["amount"].get<double>());
}

// Random running statistics and affine parameters, so masking a channel matters at every step.
void randomize_batch_norms(Module& model) {
  NoGradGuard ng;
  for (auto& [path, m] : model.named_modules()) {
    if (!dynamic_cast<BatchNorm2d*>(m)) continue;
    const int64_t c = m->parameter("weight").numel();
    DType dt = m->parameter("weight").dtype();
    m->parameter("weight").copy_(uniform({c}, 0.5, 1.5, dt));
    m->parameter("bias").copy_(uniform({c}, -0.5, 0.5, dt));
    m->buffer("running_mean").copy_(uniform({c}, -0.3, 0.3, dt));
    m->buffer("running_var").copy_(uniform({c}, 0.5, 2.0, dt));
  }
}

std::shared_ptr<Sequential> bn_cnn() {
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Conv2d>(3, 8, 3, ConvOptions{.padding = {1, 1}}));
  s->push_back(std::make_shared<BatchNorm2d>(8));
  s->push_back(std::make_shared<ReLU>());
  s->push_back(std::make_shared<MaxPool2d>(2));
  s->push_back(std::make_shared<Conv2d>(8, 12, 3, ConvOptions{.padding = {1, 1}}));
  s->push_back(std::make_shared<BatchNorm2d>(12));
  s->push_back(std::make_shared<ReLU>());
  s->push_back(std::make_shared<Flatten>());
  s->push_back(std::make_shared<Linear>(12 * 4 * 4, 5));
  return s;
}

}  // namespace

TEST_CASE("prune: l1_unstructured and ln_structured pick PyTorch's elements, repeated calls compose as PyTorch's") {
  const json ref = reference();
  for (const json& c : ref["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    ModulePtr m = make_module(c);
    int i = 0;
    for (const json& step : c["steps"]) {
      CAPTURE(i++);
      const std::string method = step["method"];
      if (method == "l1_unstructured") {
        prune::l1_unstructured(*m, "weight", amount_of(step));
      } else {
        prune::ln_structured(*m, "weight", amount_of(step), step["n"].get<double>(), step["dim"].get<int64_t>());
      }
      CHECK(values(m->buffer("weight_mask")) == nums(step["mask"]));
    }
    CHECK(keys(*m) == c["state_dict_keys"].get<std::vector<std::string>>());
    CHECK(prune::is_pruned(*m));
  }
}

TEST_CASE("prune: global_unstructured ranks three modules together as PyTorch does, on top of an existing mask") {
  const json g = reference()["global"];
  auto conv = std::make_shared<Conv2d>(4, 6, 3);
  auto fc1 = std::make_shared<Linear>(7, 5);
  auto fc2 = std::make_shared<Linear>(5, 3);
  set_values(conv->parameter("weight"), g["conv_weight"]);
  set_values(fc1->parameter("weight"), g["fc1_weight"]);
  set_values(fc2->parameter("weight"), g["fc2_weight"]);
  prune::l1_unstructured(*fc1, "weight", 0.2);
  CHECK(values(fc1->buffer("weight_mask")) == nums(g["fc1_pre_mask"]));
  for (const json& step : g["steps"]) {
    prune::global_unstructured({{conv, "weight"}, {fc1, "weight"}, {fc2, "weight"}}, prune::Method::L1,
                               amount_of(step));
    CHECK(values(conv->buffer("weight_mask")) == nums(step["conv_mask"]));
    CHECK(values(fc1->buffer("weight_mask")) == nums(step["fc1_mask"]));
    CHECK(values(fc2->buffer("weight_mask")) == nums(step["fc2_mask"]));
  }
}

TEST_CASE("prune: a pruned Sequential has PyTorch's state_dict keys, output and weight_orig gradients; remove too") {
  const json s = reference()["sequential"];
  auto conv = std::make_shared<Conv2d>(2, 4, 3);
  auto fc = std::make_shared<Linear>(16, 3);
  Sequential seq{conv, std::make_shared<ReLU>(), std::make_shared<Flatten>(), fc};
  set_values(conv->parameter("weight"), s["conv_weight"]);
  set_values(conv->parameter("bias"), s["conv_bias"]);
  set_values(fc->parameter("weight"), s["fc_weight"]);
  set_values(fc->parameter("bias"), s["fc_bias"]);
  prune::l1_unstructured(*conv, "weight", 0.5);
  prune::l1_unstructured(*fc, "bias", 1);
  prune::ln_structured(*fc, "weight", 0.5, 1, 1);
  CHECK(keys(seq) == s["keys_pruned"].get<std::vector<std::string>>());
  CHECK(values(conv->buffer("weight_mask")) == nums(s["conv_mask"]));
  CHECK(values(fc->buffer("weight_mask")) == nums(s["fc_weight_mask"]));
  CHECK(values(fc->buffer("bias_mask")) == nums(s["fc_bias_mask"]));

  Tensor x = from_vector(nums(s["x"]), {2, 2, 4, 4});
  Tensor g = from_vector(nums(s["g"]), {2, 3});
  Tensor y = seq(x);
  CHECK(max_diff(y, from_vector(nums(s["y"]), {2, 3})) < 1e-5);
  (y * g).sum().backward();
  auto close = [](const Tensor& a, const json& b) {
    std::vector<double> x = values(a), r = nums(b);
    REQUIRE(x.size() == r.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::abs(x[i] - r[i]) > 1e-5 * (1 + std::abs(r[i]))) return false;
    }
    return true;
  };
  CHECK(close(conv->parameter("weight_orig").grad(), s["conv_weight_orig_grad"]));
  CHECK(close(fc->parameter("weight_orig").grad(), s["fc_weight_orig_grad"]));
  CHECK(close(fc->parameter("bias_orig").grad(), s["fc_bias_orig_grad"]));

  prune::remove(*fc, "weight");
  CHECK(keys(seq) == s["keys_after_remove"].get<std::vector<std::string>>());
}

TEST_CASE("prune: weight_orig.grad is grad * mask, and the weight is recomputed from weight_orig before each forward") {
  manual_seed(3);
  Linear fc(6, 4);
  Tensor orig = fc.parameter("weight");
  prune::l1_unstructured(fc, "weight", 0.5);
  CHECK(fc.parameter("weight_orig").impl() == orig.impl());  // the same tensor, renamed
  CHECK(fc.named_parameters().size() == 2);                  // bias, weight_orig
  Tensor mask = fc.buffer("weight_mask");
  CHECK(zeros_of(mask) == 12);
  Tensor x = randn({3, 6});
  Tensor g = randn({3, 4});
  (fc(x) * g).sum().backward();
  // d/dW of sum(g * (x W^T)) = g^T x; through W = orig * mask: (g^T x) * mask, exactly.
  Tensor dense = matmul(g.t(), x);
  CHECK(values(orig.grad()) == values(dense * mask));
  // An in-place update of weight_orig (an optimizer step) shows in the next forward.
  {
    NoGradGuard ng;
    orig.add_(1.0);
  }
  Tensor y = fc(x);
  CHECK(max_diff(y, functional::linear(x, orig * mask, fc.bias())) == 0.0);
  // The effective weight follows the module to another dtype.
  fc.to(DType::F64);
  CHECK(fc.parameter("weight").dtype() == DType::F64);
  CHECK(fc(x.to(DType::F64)).dtype() == DType::F64);
}

TEST_CASE("prune: remove makes the mask permanent in the same tensor; masks compose; random methods prune counts") {
  manual_seed(4);
  Conv2d conv(3, 6, 3);
  Tensor orig = conv.parameter("weight");
  prune::random_unstructured(conv, "weight", 0.5);  // 162 entries
  CHECK(zeros_of(conv.buffer("weight_mask")) == 81);
  prune::random_unstructured(conv, "weight", 0.5);  // half of the 81 alive: round(40.5) = 40
  CHECK(zeros_of(conv.buffer("weight_mask")) == 121);
  Tensor expected = orig * conv.buffer("weight_mask");
  prune::remove(conv, "weight");
  CHECK_FALSE(prune::is_pruned(conv));
  CHECK(conv.parameter("weight").impl() == orig.impl());
  CHECK(conv.parameter("weight").requires_grad());
  CHECK(max_diff(conv.parameter("weight"), expected) == 0.0);
  CHECK(keys(conv) == std::vector<std::string>{"bias", "weight"});

  prune::random_structured(conv, "weight", 2, 0);  // 2 whole filters on top of the old zeros
  std::vector<double> m = values(conv.buffer("weight_mask"));
  int dead = 0;
  for (int c = 0; c < 6; ++c) {
    bool all_zero = std::all_of(m.begin() + c * 27, m.begin() + (c + 1) * 27, [](double v) { return v == 0; });
    bool all_one = std::all_of(m.begin() + c * 27, m.begin() + (c + 1) * 27, [](double v) { return v == 1; });
    CHECK((all_zero || all_one));
    dead += all_zero;
  }
  CHECK(dead == 2);

  Tensor custom = ones({6, 3, 3, 3});
  {
    NoGradGuard ng;
    custom.narrow(0, 0, 1).zero_();  // filter 0
  }
  prune::custom_from_mask(conv, "weight", custom);
  std::vector<double> m2 = values(conv.buffer("weight_mask"));
  for (size_t i = 0; i < m2.size(); ++i) CHECK(m2[i] == m[i] * (i < 27 ? 0.0 : 1.0));
  prune::identity(conv, "bias");
  CHECK(zeros_of(conv.buffer("bias_mask")) == 0);
  CHECK(keys(conv) == std::vector<std::string>{"weight_orig", "bias_orig", "weight_mask", "bias_mask"});
  // importance_scores rank in place of |w|: the three smallest scores go.
  Linear fc(5, 1);
  prune::l1_unstructured(fc, "weight", 3, from_vector({5, 1, 4, 2, 3}, {1, 5}));
  CHECK(values(fc.buffer("weight_mask")) == std::vector<double>{1, 0, 1, 0, 0});
}

TEST_CASE("prune: bad input is a clear error and leaves the module as it was") {
  Linear fc(4, 3);
  auto err = [](auto&& f) { return error_text(f); };
  CHECK(err([&] {
          prune::l1_unstructured(fc, "weight", 1.5);
        }).find("amount=1.5 should either be a float in the range [0, 1]") != std::string::npos);
  CHECK(err([&] { prune::l1_unstructured(fc, "weight", -0.1); }).find("range [0, 1]") != std::string::npos);
  CHECK(err([&] { prune::l1_unstructured(fc, "weight", std::nan("")); }).find("range [0, 1]") != std::string::npos);
  CHECK(err([&] { prune::l1_unstructured(fc, "weight", -1); }).find("non-negative integer") != std::string::npos);
  CHECK(err([&] {
          prune::l1_unstructured(fc, "weight", 13);
        }).find("amount=13 should be smaller than the number of parameters to prune=12") != std::string::npos);
  CHECK(err([&] { prune::l1_unstructured(fc, "kernel", 0.5); }).find("module Linear has no parameter 'kernel'") !=
        std::string::npos);
  CHECK(err([&] { prune::ln_structured(fc, "bias", 0.5, 2, 0); }).find("multidimensional") != std::string::npos);
  CHECK(err([&] { prune::ln_structured(fc, "weight", 0.5, 2, 2); }).find("invalid dim 2") != std::string::npos);
  CHECK(err([&] { prune::ln_structured(fc, "weight", 0.5, 0, 0); }).find("norm order") != std::string::npos);
  CHECK(err([&] {
          prune::custom_from_mask(fc, "weight", ones({4, 3}));
        }).find("should have the shape") != std::string::npos);
  CHECK(err([&] { prune::l1_unstructured(fc, "weight", 1, ones({12})); }).find("importance_scores") !=
        std::string::npos);
  CHECK(err([&] { prune::remove(fc, "weight"); }).find("has to be pruned before pruning can be removed") !=
        std::string::npos);
  CHECK(err([&] {
          prune::global_unstructured({{fc, "weight"}, {fc, "weight"}}, prune::Method::L1, 0.5);
        }).find("listed twice") != std::string::npos);
  CHECK(err([&] {
          prune::global_unstructured({{fc, "weight"}}, prune::Method::L1, 13);
        }).find("smaller than") != std::string::npos);
  CHECK_FALSE(prune::is_pruned(fc));
  CHECK(keys(fc) == std::vector<std::string>{"weight", "bias"});
  // A second pruning with a bad amount keeps the first mask.
  prune::l1_unstructured(fc, "weight", 6);
  CHECK(err([&] { prune::l1_unstructured(fc, "weight", 7); }).find("prune=6") != std::string::npos);
  CHECK(zeros_of(fc.buffer("weight_mask")) == 6);
  CHECK(err([&] {
          prune::CubicSchedule{.initial_sparsity = 0.5, .final_sparsity = 0.2}.check();
        }).find("initial_sparsity <= final_sparsity") != std::string::npos);
  CHECK(err([&] {
          prune::GradualPruner({{fc, "weight"}}, {.num_steps = 0});
        }).find("num_steps >= 1") != std::string::npos);
  CHECK(err([&] { prune::GradualPruner({{fc, "nope"}}, {}); }).find("no parameter 'nope'") != std::string::npos);
}

TEST_CASE("prune: the cubic schedule follows Zhu and Gupta's formula and GradualPruner reaches each target") {
  const prune::CubicSchedule s{
      .initial_sparsity = 0.1, .final_sparsity = 0.8, .begin_step = 10, .num_steps = 4, .frequency = 5};
  CHECK(s.sparsity_at(9) == 0.0);
  CHECK(s.sparsity_at(10) == doctest::Approx(0.1));
  CHECK(s.sparsity_at(15) == doctest::Approx(0.8 - 0.7 * 0.421875));  // (1 - 1/4)^3
  CHECK(s.sparsity_at(20) == doctest::Approx(0.8 - 0.7 * 0.125));
  CHECK(s.sparsity_at(30) == doctest::Approx(0.8));
  CHECK(s.sparsity_at(1000) == doctest::Approx(0.8));
  CHECK(s.is_pruning_step(10));
  CHECK(s.is_pruning_step(30));
  CHECK_FALSE(s.is_pruning_step(12));
  CHECK_FALSE(s.is_pruning_step(35));
  for (bool global : {true, false}) {
    CAPTURE(global);
    manual_seed(5);
    Linear a(20, 10), b(10, 5);  // 200 + 50 weights
    prune::GradualPruner pruner({{a, "weight"}, {b, "weight"}}, s, global);
    int pruned_steps = 0;
    for (int64_t t = 0; t <= 40; ++t) {
      if (!pruner.step(t)) continue;
      ++pruned_steps;
      const double target = s.sparsity_at(t);
      if (global) {
        CHECK(zeros_of(a.buffer("weight_mask")) + zeros_of(b.buffer("weight_mask")) ==
              int64_t(std::nearbyint(target * 250)));
      } else {
        CHECK(zeros_of(a.buffer("weight_mask")) == int64_t(std::nearbyint(target * 200)));
        CHECK(zeros_of(b.buffer("weight_mask")) == int64_t(std::nearbyint(target * 50)));
      }
    }
    CHECK(pruned_steps == 5);
    CHECK(pruner.sparsity() == doctest::Approx(0.8));
  }
}

TEST_CASE("prune: sparsity_report counts the zeros of each module's effective weight and in total") {
  manual_seed(6);
  models::MLP mlp({8, 6, 4});  // 0: Linear(8, 6), 1: ReLU, 2: Linear(6, 4)
  prune::l1_unstructured(*mlp.child("0"), "weight", 12);
  prune::SparsityReport r = prune::sparsity_report(mlp);
  REQUIRE(r.rows.size() == 2);
  CHECK(r.rows[0].module == "0");
  CHECK(r.rows[0].parameter == "weight");
  CHECK(r.rows[0].elements == 48);
  CHECK(r.rows[0].zeros == 12);
  CHECK(r.rows[0].pruned);
  CHECK(r.rows[0].sparsity() == 0.25);
  CHECK(r.rows[1].zeros == 0);
  CHECK_FALSE(r.rows[1].pruned);
  CHECK(r.elements() == 72);
  CHECK(r.zeros() == 12);
  const std::string table = r.str();
  CHECK(table.find("0.weight") != std::string::npos);
  CHECK(table.find("25.00%") != std::string::npos);
  CHECK(table.find("total") != std::string::npos);
  CHECK(prune::sparsity_report(mlp, {"bias"}).rows.size() == 2);
}

TEST_CASE("prune_channels: a Sequential CNN with batch norm becomes smaller and computes what the masked one does") {
  manual_seed(7);
  auto masked = bn_cnn();
  auto small = bn_cnn();
  masked->to(DType::F64);
  small->to(DType::F64);
  randomize_batch_norms(*masked);
  small->load_state_dict(masked->state_dict());
  const prune::ChannelPlan plan = prune::plan_channels(*masked, {.amount = 0.5, .norm = 2});
  REQUIRE(plan.groups.size() == 2);
  CHECK(plan.groups[0].conv == "0");
  CHECK(plan.groups[0].norm == "1");
  CHECK(plan.groups[0].consumer == "4");
  CHECK(plan.groups[1].consumer == "8");
  CHECK(plan.groups[1].per_channel == 16);
  CHECK(plan.groups[0].keep.size() == 4);
  CHECK(plan.groups[1].keep.size() == 6);
  // The kept filters are the ones ln_structured(n = 2, dim 0) keeps.
  {
    Conv2d probe(3, 8, 3);
    probe.parameter("weight").set_data(masked->child("0")->parameter("weight").detach());
    prune::ln_structured(probe, "weight", 0.5, 2, 0);
    std::vector<double> m = values(probe.buffer("weight_mask"));
    std::vector<int64_t> kept;
    for (int64_t c = 0; c < 8; ++c) {
      if (m[size_t(c * 27)] == 1) kept.push_back(c);
    }
    CHECK(kept == plan.groups[0].keep);
  }
  prune::mask_channels(*masked, plan);
  prune::remove_channels(*small, plan);
  CHECK(small->child("0")->parameter("weight").sizes() == Shape{4, 3, 3, 3});
  CHECK(small->child("1")->buffer("running_mean").sizes() == Shape{4});
  CHECK(small->child("4")->parameter("weight").sizes() == Shape{6, 4, 3, 3});
  CHECK(small->child("8")->parameter("weight").sizes() == Shape{5, 96});
  CHECK_FALSE(prune::is_pruned(*small));
  CHECK(small->num_parameters() < masked->num_parameters() / 2);
  Tensor x = randn({4, 3, 8, 8}, DType::F64);
  for (bool training : {false, true}) {
    CAPTURE(training);
    masked->train(training);
    small->train(training);
    masked->zero_grad();
    small->zero_grad();
    Tensor ym = (*masked)(x), ys = (*small)(x);
    CHECK(max_diff(ym, ys) < 1e-12);
    // Gradients too: the kept filters of the small model get the masked model's gradients.
    Tensor g = randn({4, 5}, DType::F64);
    (ym * g).sum().backward();
    (ys * g).sum().backward();
    Tensor keep =
        from_vector(std::vector<double>(plan.groups[0].keep.begin(), plan.groups[0].keep.end()), {4}, DType::I64);
    CHECK(max_diff(index_select(masked->child("0")->parameter("weight_orig").grad(), 0, keep),
                   small->child("0")->parameter("weight").grad()) < 1e-12);
  }
  // A plan applied twice no longer fits the model.
  CHECK(error_text([&] { prune::remove_channels(*small, plan); }).find("the plan was made for") != std::string::npos);
  // Removing the channels of the masked model itself: the masks left are all ones, so plain parameters.
  prune::remove_channels(*masked, plan);
  CHECK_FALSE(prune::is_pruned(*masked));
  masked->eval();
  small->eval();
  CHECK(max_diff((*masked)(x), (*small)(x)) < 1e-12);
}

TEST_CASE("prune_channels: SmallCNN with half its conv channels removed matches the masked model in F32") {
  manual_seed(8);
  models::SmallCNN masked, small;
  small.load_state_dict(masked.state_dict());
  masked.eval();
  small.eval();
  Tensor x = randn({3, 1, 28, 28});
  const prune::ChannelPlan plan = prune::plan_channels(masked, {.amount = 0.5});
  REQUIRE(plan.groups.size() == 2);
  CHECK(plan.groups[0].conv == "features.0");
  CHECK(plan.groups[0].consumer == "features.3");
  CHECK(plan.groups[1].conv == "features.3");
  CHECK(plan.groups[1].consumer == "classifier.0");
  CHECK(plan.groups[1].per_channel == 49);
  prune::mask_channels(masked, plan);
  prune::remove_channels(small, plan, x);  // with the built-in check
  CHECK(small.submodule("features.3").parameter("weight").sizes() == Shape{32, 16, 3, 3});
  CHECK(small.submodule("classifier.0").parameter("weight").sizes() == Shape{128, 32 * 49});
  CHECK(max_diff(masked(x), small(x)) < 1e-5);
  // An unstructured mask on a rebuilt module survives, sliced.
  models::SmallCNN sparse;
  prune::l1_unstructured(*sparse.submodule("classifier").child("0"), "weight", 0.9);
  prune::prune_channels(sparse, {.amount = 0.5}, x);
  CHECK(prune::is_pruned(sparse.submodule("classifier.0"), "weight"));
  CHECK(sparse.submodule("classifier.0").buffer("weight_mask").sizes() == Shape{128, 32 * 49});
}

TEST_CASE("prune_channels: ResNet-18 is pruned inside its basic blocks; channels of residual adds are left alone") {
  manual_seed(9);
  auto masked = models::resnet18(10);
  auto small = models::resnet18(10);
  masked->to(DType::F64);
  small->to(DType::F64);
  randomize_batch_norms(*masked);
  small->load_state_dict(masked->state_dict());
  const prune::ChannelPlan plan = prune::plan_channels(*masked, {.amount = 0.5});
  REQUIRE(plan.groups.size() == 8);
  for (const auto& g : plan.groups) {
    CHECK(g.conv.substr(g.conv.size() - 5) == "conv1");
    CHECK(g.consumer.substr(g.consumer.size() - 5) == "conv2");
  }
  const std::string text = plan.str();
  CHECK(text.find("left alone: conv1: feeds a residual add (layer1.0)") != std::string::npos);
  CHECK(text.find("left alone: layer1.0.conv2: feeds a residual add") != std::string::npos);
  CHECK(text.find("left alone: layer2.0.downsample: feeds a residual add") != std::string::npos);
  prune::mask_channels(*masked, plan);
  prune::remove_channels(*small, plan);
  CHECK(small->submodule("layer3.1.conv1").parameter("weight").sizes() == Shape{128, 256, 3, 3});
  CHECK(small->submodule("layer3.1.bn1").parameter("weight").sizes() == Shape{128});
  CHECK(small->submodule("layer3.1.conv2").parameter("weight").sizes() == Shape{256, 128, 3, 3});
  masked->eval();
  small->eval();
  Tensor x = randn({2, 3, 32, 32}, DType::F64);
  CHECK(max_diff((*masked)(x), (*small)(x)) < 1e-12);
}

namespace {
// A model whose forward the walk misreads: registration order says conv_a -> conv_b, but
// forward puts a sigmoid (sigmoid(0) != 0) or a residual add between them.
class Tricky : public Module {
 public:
  explicit Tricky(bool add) : Module("Tricky"), add_(add) {
    register_module("a", std::make_shared<Conv2d>(2, 4, 1));
    register_module("b", std::make_shared<Conv2d>(4, 4, 1));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*child("a"))(x);
    return add_ ? (*child("b"))(h) + h : (*child("b"))(sigmoid(h));
  }
  bool add_;
};
}  // namespace

TEST_CASE("prune_channels: the example-input check catches a forward the walk misreads and restores the model") {
  manual_seed(10);
  Tensor x = randn({2, 2, 5, 5});
  for (bool add : {false, true}) {
    CAPTURE(add);
    Tricky m(add);
    Tensor before = m(x);
    const prune::ChannelPlan plan = prune::plan_channels(m, {.amount = 0.5});
    REQUIRE(plan.groups.size() == 1);
    const std::string e = error_text([&] { prune::remove_channels(m, plan, x); });
    CHECK(e.find(add ? "forward failed" : "differs from the masked model's") != std::string::npos);
    CHECK(e.find("left unchanged") != std::string::npos);
    CHECK(m.child("a")->parameter("weight").sizes() == Shape{4, 2, 1, 1});
    CHECK(max_diff(m(x), before) == 0.0);
  }
  Linear fc(3, 2);
  CHECK(error_text([&] { prune::plan_channels(fc, {.amount = 1.0}); }).find("should be in [0, 1)") !=
        std::string::npos);
  CHECK(error_text([&] { prune::plan_channels(fc, {.amount = 0.5, .norm = -1}); }).find("norm order") !=
        std::string::npos);
}
