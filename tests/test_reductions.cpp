// tests/test_reductions.cpp: reductions, softmax and losses beyond their specs
// (opcheck/specs_reduce.cpp): errors on empty max/argmax and bad targets, ties, accuracy of long
// F32 sums, thread independence, large logits, autocast, double backward.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "opcheck/spec.h"

using namespace brisk;
using namespace brisk::opcheck;

namespace {

using V = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Gradient of sum(v * f(x)) with respect to x, differentiable again (for double backward).
Tensor first_gradient(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, uint64_t seed) {
  GradModeGuard on(true);
  Tensor y = f(x);
  Tensor v = uniform_values(y.sizes(), 0.5, 1.5, seed);
  Tensor outs[1] = {y};
  Tensor ins[1] = {x};
  Tensor grads[1] = {v};
  return grad(outs, ins, grads, /*retain_graph=*/true, /*create_graph=*/true)[0];
}

void check_double_backward(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  TensorFn g = [f](const std::vector<Tensor>& in) { return first_gradient(f, in[0], 7); };
  CHECK(gradcheck(g, {leaf(x)}));
}

}  // namespace

TEST_CASE("amax, amin, max, argmax: reducing over a dim of size 0 is an error") {
  Tensor x = zeros({0, 3});
  CHECK_THROWS_WITH_AS(amax(x, {0}), doctest::Contains("amax: cannot reduce"), Error);
  CHECK_THROWS_WITH_AS(amin(x), doctest::Contains("amin: cannot reduce"), Error);
  CHECK_THROWS_WITH_AS(max(x), doctest::Contains("(0, 3)"), Error);
  CHECK_THROWS_WITH_AS(argmax(x, 0), doctest::Contains("argmax: cannot reduce"), Error);
  CHECK_THROWS_WITH_AS(argmax(x), doctest::Contains("argmax"), Error);
  CHECK(amax(x, {1}).sizes() == Shape{0});  // no outputs: fine, as in PyTorch
}

TEST_CASE("sum, amax: bad dims are errors naming the op") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(sum(x, {2}), doctest::Contains("sum: dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(amax(x, {1, -1}), doctest::Contains("appears more than once"), Error);
  CHECK_THROWS_WITH_AS(softmax(x, -3), doctest::Contains("softmax"), Error);
  CHECK_THROWS_WITH_AS(var(ints({1, 2}, {2})), doctest::Contains("var: needs a floating input"), Error);
  CHECK_THROWS_WITH_AS(mean(ints({1, 2}, {2})), doctest::Contains("mean"), Error);
}

TEST_CASE("amax, amin: tied extremes share the gradient evenly") {
  Tensor x = leaf(from_vector({1, 3, 3, 2, 0, 0}, {2, 3}, DType::F64));
  sum(amax(x, {1}) * from_vector({1, 2}, {2}, DType::F64)).backward();
  CHECK(x.grad().to_vector<double>() == V{0, 0.5, 0.5, 2, 0, 0});
  Tensor y = leaf(from_vector({1, 3, 3, 2, 0, 0}, {2, 3}, DType::F64));
  min(y).backward();
  CHECK(y.grad().to_vector<double>() == V{0, 0, 0, 0, 0.5, 0.5});
}

TEST_CASE("sum: F32 sums of 1e6 elements stay accurate") {
  const int64_t n = 1000000;
  Tensor x64 = uniform_values({n}, 0, 1, 3);
  Tensor x = cast(x64, DType::F32);
  const double want = sum(cast(x, DType::F64)).item<double>();
  CHECK(std::fabs(sum(x).item<double>() - want) / want < 1e-6);
  // The same elements as (1000, 1000) over dim 0 (rows path) and dim 1 (inner path).
  Tensor m = reshape(x, {1000, 1000});
  Tensor m64 = cast(m, DType::F64);
  for (int64_t d : {0, 1}) {
    INFO("dim " << d);
    CHECK(allclose(cast(sum(m, {d}), DType::F64), sum(m64, {d}), 1e-6, 1e-6));
  }
  // A long column reduction with few outputs (chunked rows) and a strided input.
  Tensor tall = reshape(x, {250000, 4});
  CHECK(allclose(cast(sum(tall, {0}), DType::F64), sum(cast(tall, DType::F64), {0}), 1e-6, 1e-6));
  Tensor strided = slice(x, 0, 0, n, 2);
  const double want_strided = sum(cast(strided, DType::F64)).item<double>();
  CHECK(std::fabs(sum(strided).item<double>() - want_strided) / want_strided < 1e-6);
  CHECK(std::fabs(mean(x).item<double>() - want / double(n)) < 1e-6);
  // var (two passes, the second reading each output's mean) and amax on the chunked paths.
  CHECK(allclose(cast(var(tall, {0}), DType::F64), var(cast(tall, DType::F64), {0}), 1e-5, 1e-7));
  CHECK(allclose(cast(var(x), DType::F64), var(x64), 1e-5, 1e-7));
  CHECK(amax(x).item<double>() == max(cast(x, DType::F64)).item<double>());
  CHECK(allclose(cast(amin(tall, {0}), DType::F64), amin(cast(tall, DType::F64), {0}), 0, 0));
}

TEST_CASE("sum, var, softmax: results do not depend on the number of threads") {
  Tensor x = cast(uniform_values({300000, 4}, -1, 1, 4), DType::F32);
  Tensor flat = reshape(x, {-1});
  auto run = [&] {
    return std::vector<Tensor>{sum(flat), sum(x, {0}), sum(x, {1}), var(x, {0}), softmax(reshape(x, {-1, 600}), 1)};
  };
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Tensor> one = run();
  omp_set_num_threads(2);
  std::vector<Tensor> two = run();
  omp_set_num_threads(threads);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(equal(one[i], two[i]));
  }
}

TEST_CASE("sum: integers and Bool sum to I64") {
  Tensor b = gt(from_vector({1, -1, 2, 3}, {4}), scalar_tensor(0));
  Tensor s = sum(b);
  CHECK(s.dtype() == DType::I64);
  CHECK(s.item<int64_t>() == 3);
  CHECK(sum(ints({1, 2, 3}, {3})).dtype() == DType::I64);
}

TEST_CASE("var: reductions of no elements or of one element with correction give NaN") {
  CHECK(std::isnan(var(zeros({0, 3}), {0}).to_vector<double>()[0]));
  CHECK(std::isnan(var(ones({1, 3}), {0}).to_vector<double>()[0]));
  CHECK(var(ones({1, 3}), {0}, 0).to_vector<double>()[0] == 0);
  CHECK(std::isnan(mean(zeros({0})).item<double>()));
}

TEST_CASE("argmax: NaN counts as the maximum, as in PyTorch") {
  Tensor x = from_vector({1, kNaN, 5, kNaN}, {4});
  CHECK(argmax(x).item<int64_t>() == 1);
  CHECK(argmin(x, 0).item<int64_t>() == 1);
  CHECK(std::isnan(max(x).item<double>()));
}

TEST_CASE("softmax, log_softmax, cross_entropy: large logits stay finite") {
  Tensor x = from_vector({1000, 1001, 1002, -1000}, {1, 4});
  V p = softmax(x, 1).to_vector<double>();
  CHECK(p[2] == doctest::Approx(0.66524096));
  CHECK(p[3] == 0);
  V lp = log_softmax(x, 1).to_vector<double>();
  CHECK(lp[2] == doctest::Approx(-0.40760596));
  CHECK(std::isfinite(lp[3]));
  CHECK(cross_entropy(x, ints({0}, {1})).item<double>() == doctest::Approx(2.40760596));
}

TEST_CASE("logsumexp: stays finite for huge values, and its gradient is exp(x - y) as in PyTorch") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(logsumexp(from_vector({1000, 1000}, {2})).item<double>() == doctest::Approx(1000 + std::log(2.0)));
  CHECK(logsumexp(from_vector({-1000, -1000}, {2})).item<double>() == doctest::Approx(-1000 + std::log(2.0)));
  // PyTorch's logsumexp_backward is grad * exp(x - y): NaN where x and y are the same infinity.
  Tensor x = leaf(from_vector({-inf, -inf, inf, 1, 0, std::log(3.0)}, {3, 2}, DType::F64));
  sum(logsumexp(x, {1})).backward();
  const V g = x.grad().to_vector<double>();
  CHECK(std::isnan(g[0]));
  CHECK(std::isnan(g[1]));
  CHECK(std::isnan(g[2]));
  CHECK(g[3] == 0);
  CHECK(g[4] == doctest::Approx(0.25));
  CHECK(g[5] == doctest::Approx(0.75));
  CHECK_THROWS_WITH_AS(logsumexp(ints({1, 2}, {2})), doctest::Contains("logsumexp: needs a floating input"), Error);
  CHECK_THROWS_WITH_AS(logsumexp(zeros({2, 3}), {0, -2}), doctest::Contains("appears more than once"), Error);
}

TEST_CASE("cross_entropy: an out-of-range target is an error naming the op, the index and C") {
  Tensor logits = zeros({2, 5});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, ints({1, 5}, {2})),
                       doctest::Contains("cross_entropy: target index 5 (row 1) is out of range for 5 classes"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, ints({-3, 0}, {2})), doctest::Contains("target index -3"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, ints({1, 2, 3}, {3})), doctest::Contains("target must be I64"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, from_vector({1, 2}, {2})), doctest::Contains("cross_entropy"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, ints({1, 2}, {2}), Reduction::Mean, 1.5),
                       doctest::Contains("label_smoothing"), Error);
}

TEST_CASE("cross_entropy: mean over only ignored targets is NaN, its gradient zero") {
  Tensor logits = leaf(uniform_values({2, 3}, -1, 1, 1));
  Tensor loss = cross_entropy(logits, ints({-100, -100}, {2}));
  CHECK(std::isnan(loss.item<double>()));
  loss.backward();
  CHECK(logits.grad().to_vector<double>() == V(6, 0.0));
}

TEST_CASE("mse_loss: different shapes are an error") {
  CHECK_THROWS_WITH_AS(mse_loss(zeros({3}), zeros({3, 1})), doctest::Contains("mse_loss"), Error);
}

TEST_CASE("sum_to: returns the input itself, or a view for squeezed leading dims") {
  Tensor x = uniform_values({2, 3}, -1, 1, 1);
  CHECK(sum_to(x, {2, 3}).impl() == x.impl());
  Tensor y = uniform_values({1, 1, 3}, -1, 1, 2);
  Tensor v = sum_to(y, {3});
  CHECK(v.sizes() == Shape{3});
  CHECK(v.storage().get() == y.storage().get());
  CHECK_THROWS_WITH_AS(sum_to(x, {4}), doctest::Contains("sum_to"), Error);
}

TEST_CASE("autocast: sums, softmax and cross_entropy run in F32; amax keeps the dtype") {
  Tensor x = cast(uniform_values({4, 5}, -1, 1, 1), DType::BF16);
  AutocastGuard guard(DeviceType::CPU, DType::BF16);
  CHECK(sum(x).dtype() == DType::F32);
  CHECK(softmax(x, 1).dtype() == DType::F32);
  CHECK(logsumexp(x, {1}).dtype() == DType::F32);
  CHECK(cross_entropy(x, ints({0, 1, 2, 3}, {4})).dtype() == DType::F32);
  CHECK(amax(x).dtype() == DType::BF16);
}

TEST_CASE("reductions: double backward matches finite differences") {
  Tensor x = uniform_values({3, 4}, -1, 1, 5);
  SUBCASE("softmax") {
    check_double_backward([](const Tensor& t) { return softmax(t, 1); }, x);
  }
  SUBCASE("log_softmax") {
    check_double_backward([](const Tensor& t) { return log_softmax(t, 0); }, x);
  }
  SUBCASE("logsumexp") {
    check_double_backward([](const Tensor& t) { return logsumexp(t, {1}); }, x);
  }
  SUBCASE("var") {
    check_double_backward([](const Tensor& t) { return var(t, {1}); }, x);
  }
  SUBCASE("amax") {
    check_double_backward([](const Tensor& t) { return amax(t, {0}) * amax(t, {0}); }, x);
  }
  SUBCASE("sum") {
    check_double_backward([](const Tensor& t) { return sum(t * t, {1}); }, x);
  }
  SUBCASE("cross_entropy, mean, ignore_index, label smoothing") {
    Tensor target = ints({2, -100, 0}, {3});
    check_double_backward([target](const Tensor& t) { return cross_entropy(t, target, Reduction::Mean, 0.1); }, x);
  }
  SUBCASE("cross_entropy, none: gradient with respect to the incoming gradient too") {
    Tensor target = ints({1, 3, 0}, {3});
    TensorFn f = [target](const std::vector<Tensor>& in) {
      GradModeGuard on(true);
      Tensor loss = cross_entropy(in[0], target, Reduction::None);
      Tensor outs[1] = {loss};
      Tensor ins[1] = {in[0]};
      Tensor grads[1] = {in[1]};
      return grad(outs, ins, grads, true, true)[0];
    };
    CHECK(gradcheck(f, {leaf(x), leaf(uniform_values({3}, 0.5, 1.5, 9))}));
  }
  SUBCASE("cross_entropy, sum: gradient with respect to the incoming gradient") {
    Tensor target = ints({1, 3, 0}, {3});
    TensorFn f = [target](const std::vector<Tensor>& in) {
      GradModeGuard on(true);
      Tensor loss = cross_entropy(in[0], target, Reduction::Sum);
      Tensor outs[1] = {loss};
      Tensor ins[1] = {in[0]};
      Tensor grads[1] = {in[1]};
      return grad(outs, ins, grads, true, true)[0];
    };
    CHECK(gradcheck(f, {leaf(x), leaf(uniform_values({}, 0.5, 1.5, 9))}));
  }
}
