// tests/test_distill.cpp: knowledge distillation (compress/distill.h) and the losses it rests on,
// against PyTorch (tests/data/distill/reference.json, made by tests/make_distill_reference.py):
// Hinton's loss (values and gradients w.r.t. the student's logits), cross_entropy with
// probability targets (weight, label_smoothing, each reduction, (N, C, H, W) and (C) logits),
// kl_div with each reduction; the Distiller (teacher in eval mode under no_grad, modes
// restored, no teacher gradients, feature matching through hooks with a trained adapter, hooks
// removed); the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compress/distill.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
namespace F = brisk::nn::functional;
namespace distill = brisk::nn::distill;
using json = nlohmann::json;

namespace {

const json& reference() {
  static const json ref = [] {
    std::ifstream in(::brisk::test::data_dir() / "distill" / "reference.json");
    REQUIRE_MESSAGE(in.good(), "tests/data/distill/reference.json is missing (tests/make_distill_reference.py)");
    return json::parse(in);
  }();
  return ref;
}

Shape shape_of(const json& t) {
  Shape s;
  for (const json& d : t["shape"]) s.push_back(d.get<int64_t>());
  return s;
}

Tensor tensor_of(const json& t, DType dt = DType::F64, bool requires_grad = false) {
  Tensor x = from_vector(t["data"].get<std::vector<double>>(), shape_of(t), dt);
  if (requires_grad) x.requires_grad_(true);
  return x;
}

Tensor labels_of(const json& t) { return tensor_of(t, DType::F64).to(DType::I64); }

Reduction reduction_of(const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

// max |x - ref| / max(1, |ref|): relative for large values, absolute near 0.
double max_dev(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
  return worst;
}

// Backward of `out` (of sum(out * cot) when the case stores a cotangent).
void backward_of(const Tensor& out, const json& c) {
  if (c.contains("cot")) {
    (out * from_vector(c["cot"].get<std::vector<double>>(), out.sizes(), DType::F64)).sum().backward();
  } else {
    out.backward();
  }
}

// A small classifier: Linear(6, 8) "0", ReLU "1", Dropout "2", Linear(8, 3) "3".
std::shared_ptr<nn::Sequential> mlp(int64_t hidden, double dropout = 0.0) {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, hidden), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(dropout),
      std::make_shared<nn::Linear>(hidden, 3)});
}

}  // namespace

// ---- the losses against PyTorch

TEST_CASE("distill: distillation_loss equals PyTorch's formula, values and gradients") {
  for (const json& c : reference()["distill"]) {
    const double temperature = c["temperature"], alpha = c["alpha"], ls = c["label_smoothing"];
    CAPTURE(temperature);
    CAPTURE(alpha);
    Tensor s = tensor_of(c["student"], DType::F64, true);
    Tensor t = tensor_of(c["teacher"]);
    Tensor y = labels_of(c["target"]);
    Tensor loss =
        distill::distillation_loss(s, t, y, {.temperature = temperature, .alpha = alpha, .label_smoothing = ls});
    CHECK(loss.item<double>() == doctest::Approx(c["loss"].get<double>()).epsilon(1e-12));
    loss.backward();
    CHECK(max_dev(s.grad().to_vector<double>(), c["grad_student"].get<std::vector<double>>()) < 1e-12);
    // The soft term on its own is T^2 * KL (batchmean).
    CHECK(distill::soft_target_loss(s, t, temperature).item<double>() ==
          doctest::Approx(c["soft"].get<double>()).epsilon(1e-12));
  }
}

TEST_CASE("distill: distillation_loss in F32 stays within F32 rounding of PyTorch's F64 values") {
  const json& c = reference()["distill"][2];  // T 4, alpha 0.9, label smoothing 0.1
  Tensor s = tensor_of(c["student"], DType::F32, true);
  Tensor loss = distill::distillation_loss(
      s, tensor_of(c["teacher"], DType::F32), labels_of(c["target"]),
      {.temperature = c["temperature"], .alpha = c["alpha"], .label_smoothing = c["label_smoothing"]});
  CHECK(loss.dtype() == DType::F32);
  CHECK(loss.item<double>() == doctest::Approx(c["loss"].get<double>()).epsilon(1e-5));
  loss.backward();
  CHECK(max_dev(s.grad().to_vector<double>(), c["grad_student"].get<std::vector<double>>()) < 1e-5);
}

TEST_CASE("distill: the hard-label term takes probability targets too (mixup, smoothed labels)") {
  const json& c = reference()["distill"][1];
  Tensor s = tensor_of(c["student"]);
  Tensor t = tensor_of(c["teacher"]);
  Tensor y = labels_of(c["target"]);
  Tensor onehot = eq(arange(s.size(1), DType::I64).unsqueeze(0), y.unsqueeze(1)).to(DType::F64);
  const distill::DistillOptions o{.temperature = c["temperature"], .alpha = c["alpha"]};
  CHECK(distill::distillation_loss(s, t, onehot, o).item<double>() ==
        doctest::Approx(c["loss"].get<double>()).epsilon(1e-12));
}

TEST_CASE("distill: cross_entropy with probability targets equals PyTorch's") {
  int cases = 0;
  for (const json& c : reference()["cross_entropy"]) {
    CAPTURE(c["name"].get<std::string>());
    Tensor x = tensor_of(c["logits"], DType::F64, true);
    Tensor p = tensor_of(c["target"], DType::F64, true);
    Tensor w = c.contains("weight")
                   ? from_vector(c["weight"].get<std::vector<double>>(), {x.size(x.dim() == 1 ? 0 : 1)}, DType::F64)
                   : Tensor();
    Tensor out = F::cross_entropy(x, p, w, reduction_of(c["reduction"]), -100, c["label_smoothing"]);
    REQUIRE(out.sizes() == shape_of(c["out"]));
    CHECK(max_dev(out.to_vector<double>(), c["out"]["data"].get<std::vector<double>>()) < 1e-12);
    backward_of(out, c);
    CHECK(max_dev(x.grad().to_vector<double>(), c["grad_logits"].get<std::vector<double>>()) < 1e-12);
    CHECK(max_dev(p.grad().to_vector<double>(), c["grad_target"].get<std::vector<double>>()) < 1e-12);
    ++cases;
  }
  CHECK(cases == 19);
}

TEST_CASE("distill: one-hot probability targets give the class-index cross_entropy") {
  manual_seed(3);
  Tensor x = randn({7, 5}, DType::F64);
  Tensor y = from_vector({0, 4, 2, 2, 1, 3, 0}, {7}, DType::I64);
  Tensor onehot = eq(arange(5, DType::I64).unsqueeze(0), y.unsqueeze(1)).to(DType::F64);
  Tensor w = from_vector({0.5, 1.0, 2.0, 0.25, 1.5}, {5}, DType::F64);
  for (double ls : {0.0, 0.3}) {
    // Unweighted, the mean divides by N either way; weighted 'mean' differs by design
    // (probability targets divide by N, class indices by the picked weights), so compare sums.
    CHECK(F::cross_entropy(x, onehot, {}, Reduction::Mean, -100, ls).item<double>() ==
          doctest::Approx(F::cross_entropy(x, y, {}, Reduction::Mean, -100, ls).item<double>()).epsilon(1e-12));
    CHECK(max_dev(F::cross_entropy(x, onehot, {}, Reduction::None, -100, ls).to_vector<double>(),
                  F::cross_entropy(x, y, {}, Reduction::None, -100, ls).to_vector<double>()) < 1e-12);
  }
  CHECK(F::cross_entropy(x, onehot, w, Reduction::Sum).item<double>() ==
        doctest::Approx(F::cross_entropy(x, y, w, Reduction::Sum).item<double>()).epsilon(1e-12));
}

TEST_CASE("distill: kl_div equals PyTorch's for each reduction, batchmean included") {
  for (const json& c : reference()["kl_div"]) {
    const std::string red = c["reduction"];
    const bool log_target = c["log_target"];
    CAPTURE(red);
    CAPTURE(log_target);
    Tensor x = tensor_of(c["input"], DType::F64, true);
    Tensor t = tensor_of(c["target"]);
    Tensor out =
        red == "batchmean" ? F::kl_div_batchmean(x, t, log_target) : F::kl_div(x, t, reduction_of(red), log_target);
    REQUIRE(out.sizes() == shape_of(c["out"]));
    CHECK(max_dev(out.to_vector<double>(), c["out"]["data"].get<std::vector<double>>()) < 1e-12);
    backward_of(out, c);
    CHECK(max_dev(x.grad().to_vector<double>(), c["grad_input"].get<std::vector<double>>()) < 1e-12);
  }
}

// ---- the Distiller

TEST_CASE("distill: Distiller runs the teacher in eval mode under no_grad and restores its modes") {
  manual_seed(0);
  auto teacher = mlp(16, /*dropout=*/0.5);
  auto student = mlp(4);
  teacher->train();
  teacher->submodule("3").eval();  // a mixed state must come back as it was
  Tensor x = randn({10, 6});
  Tensor y = from_vector({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, {10}, DType::I64);
  distill::Distiller d(teacher, student, {.temperature = 2.0, .alpha = 0.7});
  distill::DistillLosses l = d(x, y);
  l.total.backward();

  // The teacher ran in eval mode (dropout off): its logits equal an eval forward.
  Tensor expected;
  {
    NoGradGuard ng;
    teacher->eval();
    expected = (*teacher)(x);
  }
  teacher->train();
  teacher->submodule("3").eval();
  CHECK(max_dev(l.teacher_logits.to_vector<double>(), expected.to_vector<double>()) == 0);
  CHECK_FALSE(l.teacher_logits.requires_grad());
  // Modes restored, one module at a time.
  d(x, y);
  CHECK(teacher->is_training());
  CHECK(teacher->submodule("2").is_training());
  CHECK_FALSE(teacher->submodule("3").is_training());
  // No gradient reached the teacher; every student parameter got one.
  for (auto& np : teacher->named_parameters()) CHECK_MESSAGE(!np.second.grad().defined(), np.first);
  for (auto& np : student->named_parameters()) CHECK_MESSAGE(np.second.grad().defined(), np.first);
  // The total is the mix of the two parts, and the parts are the functions'.
  CHECK(l.total.item<double>() ==
        doctest::Approx(0.7 * l.soft.item<double>() + 0.3 * l.hard.item<double>()).epsilon(1e-6));
  CHECK(l.total.item<double>() ==
        doctest::Approx(distill::distillation_loss(l.student_logits, l.teacher_logits, y, d.options()).item<double>())
            .epsilon(1e-6));
  CHECK_FALSE(l.features.defined());
}

TEST_CASE("distill: the teacher's modes come back after an exception in its forward") {
  manual_seed(0);
  auto teacher = mlp(8);
  auto student = mlp(4);
  teacher->train();
  distill::Distiller d(teacher, student);
  CHECK_FALSE(error_text([&] { d(randn({4, 5}), from_vector({0, 1, 2, 0}, {4}, DType::I64)); }).empty());
  CHECK(teacher->is_training());
  CHECK(teacher->submodule("0").is_training());
}

TEST_CASE("distill: feature matching trains the adapter and the student towards the teacher's features") {
  manual_seed(1);
  auto teacher = mlp(16);
  auto student = mlp(4);
  teacher->eval();
  Tensor x = randn({32, 6});
  Tensor y = argmax((*teacher)(x).detach(), 1);
  auto adapter = std::make_shared<nn::Linear>(4, 16);
  distill::Distiller d(teacher, student, {.temperature = 2.0, .alpha = 0.5});
  d.match_features("1", "1", adapter, 2.0);  // the ReLU outputs: (32, 4) -> (32, 16)
  CHECK(d.num_hooks() == 2);
  auto params = d.named_parameters();
  CHECK(params.size() == student->named_parameters().size() + 2);
  CHECK(params.back().first == "adapters.0.bias");

  distill::DistillLosses first = d(x, y);
  // The feature term is weight * MSE(adapter(student's ReLU output), teacher's ReLU output).
  Tensor hs, ht;
  {
    NoGradGuard ng;
    hs = (*student->child("1"))((*student->child("0"))(x));
    ht = (*teacher->child("1"))((*teacher->child("0"))(x));
  }
  CHECK(first.features.item<double>() ==
        doctest::Approx(2.0 * mse_loss((*adapter)(hs), ht).item<double>()).epsilon(1e-5));
  CHECK(first.total.item<double>() == doctest::Approx(0.5 * first.soft.item<double>() +
                                                      0.5 * first.hard.item<double>() + first.features.item<double>())
                                          .epsilon(1e-5));

  optim::Adam opt(params, {.lr = 1e-2});
  double feature0 = first.features.item<double>(), feature_last = 0;
  for (int step = 0; step < 60; ++step) {
    distill::DistillLosses l = d(x, y);
    opt.zero_grad();
    l.total.backward();
    CHECK(adapter->weight().grad().defined());
    opt.step();
    feature_last = l.features.item<double>();
  }
  CHECK(feature_last < 0.5 * feature0);
  for (auto& np : teacher->named_parameters()) CHECK_MESSAGE(!np.second.grad().defined(), np.first);
}

TEST_CASE("distill: the hooks are removed and the modules keep nothing of the Distiller") {
  manual_seed(2);
  auto teacher = mlp(16);
  auto student = mlp(4);
  auto adapter = std::make_shared<nn::Linear>(4, 16);
  std::weak_ptr<nn::Module> adapter_alive = adapter;
  Tensor x = randn({5, 6});
  Tensor y = from_vector({0, 1, 2, 0, 1}, {5}, DType::I64);
  {
    distill::Distiller d(teacher, student);
    d.match_features("1", "1", adapter);
    adapter.reset();
    CHECK_FALSE(adapter_alive.expired());  // held by the Distiller and its hooks
    d(x, y).total.backward();
  }
  // The hooks owned the match and its adapter: once removed, nothing keeps the adapter alive.
  CHECK(adapter_alive.expired());
  // The student runs as before.
  CHECK((*student)(x).sizes() == Shape{5, 3});

  distill::Distiller d2(teacher, student);
  d2.match_features("1", "1", std::make_shared<nn::Linear>(4, 16));
  d2.remove_hooks();
  CHECK(d2.num_hooks() == 0);
  CHECK(error_text([&] { d2(x, y); }).find("hooks were removed") != std::string::npos);
  CHECK(error_text([&] { d2.match_features("1", "1", std::make_shared<nn::Identity>()); }).find("removed") !=
        std::string::npos);
}

TEST_CASE("distill: a 1x1 Conv2d adapter matches CNN feature maps") {
  manual_seed(4);
  auto make = [](int64_t width) {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::pair<std::string, nn::ModulePtr>>{
        {"conv", std::make_shared<nn::Conv2d>(1, width, 3, nn::ConvOptions{.padding = {1, 1}})},
        {"relu", std::make_shared<nn::ReLU>()},
        {"pool", std::make_shared<nn::AdaptiveAvgPool2d>(1)},
        {"flatten", std::make_shared<nn::Flatten>()},
        {"fc", std::make_shared<nn::Linear>(width, 4)}});
  };
  auto teacher = make(8);
  auto student = make(2);
  distill::Distiller d(teacher, student);
  d.match_features("relu", "relu", std::make_shared<nn::Conv2d>(2, 8, 1));
  distill::DistillLosses l = d(randn({3, 1, 6, 6}), from_vector({0, 3, 1}, {3}, DType::I64));
  CHECK(l.features.defined());
  l.total.backward();
  CHECK(d.adapters().named_parameters()[0].second.grad().defined());
  CHECK(std::isfinite(l.total.item<double>()));
}

// ---- errors

TEST_CASE("distill: bad input is a clear error") {
  manual_seed(5);
  Tensor s = randn({4, 3});
  Tensor y = from_vector({0, 1, 2, 0}, {4}, DType::I64);
  auto has = [](const std::string& msg, const char* part) {
    CAPTURE(msg);
    return msg.find(part) != std::string::npos;
  };
  // shape mismatch
  CHECK(has(error_text([&] { distill::distillation_loss(s, randn({4, 5}), y); }), "differ in shape"));
  CHECK(has(error_text([&] { distill::soft_target_loss(randn({3}), randn({3}), 2.0); }), "(N, C)"));
  // temperature and alpha
  for (double t : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    CHECK(has(error_text([&] { distill::distillation_loss(s, s, y, {.temperature = t}); }), "temperature"));
    CHECK(has(error_text([&] { distill::soft_target_loss(s, s, t); }), "temperature"));
  }
  for (double a : {-0.1, 1.5, double(NAN)}) {
    CHECK(has(error_text([&] { distill::distillation_loss(s, s, y, {.alpha = a}); }), "alpha"));
  }
  CHECK(has(error_text([&] { distill::distillation_loss(s, s, Tensor(), {.alpha = 0.5}); }), "needs a target"));
  CHECK_NOTHROW(distill::distillation_loss(s, s, Tensor(), {.alpha = 1.0}));
  CHECK(has(error_text([&] { distill::distillation_loss(s.to(DType::I64), s.to(DType::I64), y); }), "floating"));
  // cross_entropy: integer probability targets, bad weight, ignore_index
  CHECK(has(error_text([&] { F::cross_entropy(s, zeros({4, 3}, DType::I64)); }), "must be floating"));
  CHECK(has(error_text([&] { F::cross_entropy(s, softmax(s, 1), randn({4})); }), "weight"));
  CHECK(has(error_text([&] { F::cross_entropy(s, softmax(s, 1), {}, Reduction::Mean, 2); }), "ignore_index"));
  CHECK(
      has(error_text([&] { F::cross_entropy(s, softmax(s, 1), {}, Reduction::Mean, -100, 1.5); }), "label_smoothing"));
  // Distiller
  auto teacher = mlp(8);
  auto student = mlp(4);
  CHECK(has(error_text([&] { distill::Distiller(nullptr, student); }), "null"));
  CHECK(has(error_text([&] { distill::Distiller(student, student); }), "same module"));
  CHECK(has(error_text([&] { distill::Distiller(teacher, student, {.alpha = 2}); }), "alpha"));
  distill::Distiller d(teacher, student);
  CHECK(has(error_text([&] { d.match_features("9", "1", std::make_shared<nn::Identity>()); }),
            "student (Sequential) has no submodule '9'"));
  CHECK(has(error_text([&] { d.match_features("1", "x.y", std::make_shared<nn::Identity>()); }),
            "teacher (Sequential) has no submodule 'x.y'"));
  CHECK(has(error_text([&] { d.match_features("1", "1", nullptr); }), "null"));
  d.match_features("1", "1", std::make_shared<nn::Identity>());  // (N, 4) vs (N, 8): no adapter
  CHECK(has(error_text([&] { d(randn({4, 6}), y); }), "does not match the teacher feature '1'"));
  d.options().temperature = 0;
  CHECK(has(error_text([&] { d(randn({4, 6}), y); }), "temperature"));
}

TEST_CASE("distill: a module that runs twice in one step is refused for feature matching") {
  manual_seed(6);
  auto block = std::make_shared<nn::Linear>(6, 6);
  auto student = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{block, block, std::make_shared<nn::Linear>(6, 3)});
  auto teacher = mlp(8);
  distill::Distiller d(teacher, student);
  d.match_features("0", "0", std::make_shared<nn::Linear>(6, 8));
  std::string msg = error_text([&] { d(randn({2, 6}), from_vector({0, 1}, {2}, DType::I64)); });
  CHECK(msg.find("ran 2 times") != std::string::npos);
}
