// tests/test_multitask.cpp: combining task losses (nn/multitask.h): the uncertainty weighting's
// value and gradients against the closed form, its fixed point exp(-s) = 1 / L under an
// optimizer, state_dict, fixed weights, and the errors for bad input.
#include <doctest/doctest.h>

#include <cmath>

#include "brisk.h"
#include "nn/multitask.h"

using namespace brisk;

namespace {
Tensor scalar_leaf(double v) {
  Tensor t = from_vector({v}, Shape{}, DType::F64);
  t.requires_grad_(true);
  return t;
}
}  // namespace

TEST_CASE("multitask: uncertainty weighting matches sum exp(-s) L + s, with its gradients") {
  nn::UncertaintyWeighting w(2, DType::F64);
  {
    NoGradGuard ng;
    w.parameter("log_vars").copy_(from_vector({0.5, -1.0}, {2}, DType::F64));
  }
  Tensor l0 = scalar_leaf(2.0), l1 = scalar_leaf(3.0);
  Tensor total = w.combine({l0, l1});
  const double expected = std::exp(-0.5) * 2.0 + 0.5 + std::exp(1.0) * 3.0 - 1.0;
  CHECK(total.item<double>() == doctest::Approx(expected).epsilon(1e-14));
  total.backward();
  const auto gs = w.parameter("log_vars").grad().to_vector<double>();
  REQUIRE(gs.size() == 2);
  CHECK(gs[0] == doctest::Approx(1.0 - std::exp(-0.5) * 2.0).epsilon(1e-14));
  CHECK(gs[1] == doctest::Approx(1.0 - std::exp(1.0) * 3.0).epsilon(1e-14));
  CHECK(l0.grad().item<double>() == doctest::Approx(std::exp(-0.5)).epsilon(1e-14));
  CHECK(l1.grad().item<double>() == doctest::Approx(std::exp(1.0)).epsilon(1e-14));
  const auto ws = w.weights();
  REQUIRE(ws.size() == 2);
  CHECK(ws[0] == doctest::Approx(std::exp(-0.5)));
  CHECK(ws[1] == doctest::Approx(std::exp(1.0)));
}

TEST_CASE("multitask: optimizing the log-variances settles at exp(-s) = 1 / L") {
  // For fixed losses the minimum over s of exp(-s) L + s is at s = log L: the larger loss gets
  // the smaller weight.
  nn::UncertaintyWeighting w(3, DType::F64);
  CHECK(w.weights() == std::vector<double>{1.0, 1.0, 1.0});  // initialized to s = 0
  optim::Adam opt(w.named_parameters(), {.lr = 0.05});
  const std::vector<double> losses = {0.25, 1.0, 4.0};
  for (int step = 0; step < 1500; ++step) {
    opt.zero_grad();
    std::vector<Tensor> ls;
    for (double l : losses) ls.push_back(from_vector({l}, {1}, DType::F64));  // (1,) works too
    w.combine(ls).backward();
    opt.step();
  }
  const auto ws = w.weights();
  for (size_t i = 0; i < losses.size(); ++i) CHECK(ws[i] == doctest::Approx(1.0 / losses[i]).epsilon(1e-3));
}

TEST_CASE("multitask: log_vars is a parameter in state_dict and round-trips") {
  nn::UncertaintyWeighting a(2), b(2);
  {
    NoGradGuard ng;
    a.parameter("log_vars").copy_(from_vector({0.25, -0.75}, {2}));
  }
  auto sd = a.state_dict();
  REQUIRE(sd.size() == 1);
  CHECK(sd[0].first == "log_vars");
  b.load_state_dict(sd);
  CHECK(b.parameter("log_vars").to_vector<double>() == std::vector<double>{0.25, -0.75});
  CHECK(a.num_tasks() == 2);
}

TEST_CASE("multitask: weighted_sum_losses is sum w_i L_i with gradient w_i") {
  Tensor l0 = scalar_leaf(1.5), l1 = scalar_leaf(-2.0);
  Tensor total = nn::weighted_sum_losses({l0, l1}, {0.25, 3.0});
  CHECK(total.item<double>() == doctest::Approx(0.25 * 1.5 - 3.0 * 2.0));
  total.backward();
  CHECK(l0.grad().item<double>() == doctest::Approx(0.25));
  CHECK(l1.grad().item<double>() == doctest::Approx(3.0));
}

TEST_CASE("multitask: bad input is a clear error") {
  CHECK_THROWS_WITH_AS(nn::UncertaintyWeighting(0), doctest::Contains("num_tasks must be positive"), Error);
  nn::UncertaintyWeighting w(2);
  Tensor one = from_vector({1.0}, Shape{});
  CHECK_THROWS_WITH_AS(w.combine({one}), doctest::Contains("expected 2 losses, got 1"), Error);
  CHECK_THROWS_WITH_AS(w.combine({one, zeros(Shape{3})}), doctest::Contains("loss 1 must be a scalar"), Error);
  CHECK_THROWS_WITH_AS(w.combine({one, Tensor{}}), doctest::Contains("loss 1 is undefined"), Error);
  CHECK_THROWS_WITH_AS(nn::weighted_sum_losses({one}, {1.0, 2.0}), doctest::Contains("expected 2 losses, got 1"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::weighted_sum_losses({}, {}), doctest::Contains("no losses"), Error);
  CHECK_THROWS_WITH_AS(nn::weighted_sum_losses({one}, {std::nan("")}), doctest::Contains("finite"), Error);
}
