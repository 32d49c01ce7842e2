// tests/test_sampling.cpp: bernoulli and multinomial beyond their specs
// (opcheck/specs_random.cpp): frequencies, independence from the thread count, and the errors.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>

#include "opcheck/spec.h"

using namespace brisk;

namespace {

// Frequencies of the values 0 .. k-1 among the I64 samples.
std::vector<double> frequencies(const Tensor& samples, int64_t k) {
  std::vector<double> f(size_t(k), 0.0);
  std::vector<int64_t> v = samples.to_vector<int64_t>();
  for (int64_t x : v) f[size_t(x)] += 1.0 / double(v.size());
  return f;
}

template <class F>
auto with_threads(int n, F f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(n);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

}  // namespace

TEST_CASE("bernoulli, multinomial: frequencies match the probabilities") {
  // 200000 draws: the standard error of a frequency is at most 0.0012, the tolerance ~5 of them.
  constexpr double kTol = 0.006;
  Generator gen(7);
  Tensor p = full({200000}, 0.3, DType::F64);
  CHECK(std::abs(mean(bernoulli(p, &gen)).item<double>() - 0.3) < kTol);
  Tensor w = from_vector({1, 0, 3, 6}, {4}, DType::F32);
  std::vector<double> f = frequencies(multinomial(w, 200000, true, &gen), 4);
  for (int j = 0; j < 4; ++j) CHECK(std::abs(f[size_t(j)] - std::vector<double>{0.1, 0, 0.3, 0.6}[size_t(j)]) < kTol);
  CHECK(f[1] == 0);  // a zero weight is never drawn
  // Without replacement, 50000 rows of two draws: the first is w / sum, the second
  // P(j second) = sum over i != j of p_i p_j / (1 - p_i); no row repeats a category.
  Tensor rows = expand(unsqueeze(from_vector({1, 2, 3, 4}, {4}, DType::F64), 0), {50000, 4});
  Tensor s = multinomial(rows, 2, false, &gen);
  const std::vector<double> pr = {0.1, 0.2, 0.3, 0.4};
  std::vector<double> first = frequencies(select(s, 1, 0), 4), second = frequencies(select(s, 1, 1), 4);
  for (size_t j = 0; j < 4; ++j) {
    double want = 0;
    for (size_t i = 0; i < 4; ++i) want += i == j ? 0 : pr[i] * pr[j] / (1 - pr[i]);
    CHECK(std::abs(first[j] - pr[j]) < 2 * kTol);
    CHECK(std::abs(second[j] - want) < 2 * kTol);
  }
  CHECK(sum(eq(select(s, 1, 0), select(s, 1, 1))).item<int64_t>() == 0);
}

TEST_CASE("bernoulli, multinomial: the draws do not depend on the number of OpenMP threads") {
  Tensor w = opcheck::uniform_values({64, 200}, 0, 1, 3);
  Tensor p = opcheck::uniform_values({100000}, 0, 1, 4);
  auto draw = [&] {
    Generator gen(11);
    return std::vector<Tensor>{multinomial(w, 150, false, &gen), multinomial(w, 300, true, &gen), bernoulli(p, &gen)};
  };
  std::vector<Tensor> one = with_threads(1, draw), four = with_threads(4, draw);
  for (size_t i = 0; i < one.size(); ++i) CHECK(equal(one[i], four[i]));
  // The default generator advances: two calls differ, re-seeding repeats them.
  manual_seed(5);
  Tensor a = multinomial(w, 10, true), b = multinomial(w, 10, true);
  manual_seed(5);
  CHECK(equal(multinomial(w, 10, true), a));
  CHECK(!equal(a, b));
}

TEST_CASE("bernoulli, multinomial: invalid probabilities and sizes are errors, as in PyTorch") {
  CHECK_THROWS_WITH_AS(bernoulli(from_vector({0.5, 1.5}, {2})),
                       doctest::Contains("bernoulli: p must be in [0, 1], got 1.5 at element 1"), Error);
  CHECK_THROWS_WITH_AS(bernoulli(from_vector({NAN}, {1})), doctest::Contains("bernoulli: p must be in [0, 1], got nan"),
                       Error);
  CHECK_THROWS_WITH_AS(bernoulli(ones({2}, DType::I64)), doctest::Contains("bernoulli: p must be floating"), Error);
  Tensor w = from_vector({1, 0, 2}, {3});
  CHECK_THROWS_WITH_AS(multinomial(w, 3, false),
                       "multinomial: row 0 of weights Tensor(F32, cpu, (3)) has 2 non-zero weights, fewer than "
                       "num_samples = 3 drawn without replacement",
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(w, 4, false),
                       "multinomial: cannot draw 4 samples without replacement from 3 categories (weights (3))", Error);
  CHECK_NOTHROW(multinomial(w, 4, true));
  CHECK_THROWS_WITH_AS(multinomial(w, 0, true), "multinomial: num_samples must be positive, got 0", Error);
  CHECK_THROWS_WITH_AS(multinomial(from_vector({1, 2, 0, 0}, {2, 2}), 1, true),
                       doctest::Contains("multinomial: row 1 of weights Tensor(F32, cpu, (2, 2)) sums to 0"), Error);
  CHECK_THROWS_WITH_AS(
      multinomial(from_vector({1, -1}, {2}), 1, true),
      doctest::Contains("multinomial: weights must be finite and non-negative, got -1 at (row 0, column 1)"), Error);
  CHECK_THROWS_WITH_AS(multinomial(from_vector({1, INFINITY}, {2}), 1, true),
                       doctest::Contains("finite and non-negative, got inf"), Error);
  CHECK_THROWS_WITH_AS(multinomial(from_vector({1, NAN}, {2}), 1, true), doctest::Contains("got nan"), Error);
  CHECK_THROWS_WITH_AS(multinomial(ones({2, 2, 2}), 1, true),
                       "multinomial: weights must be 1-D (C) or 2-D (R, C), got (2, 2, 2)", Error);
  CHECK_THROWS_WITH_AS(multinomial(ones({3}, DType::I64), 1, true), doctest::Contains("weights must be floating"),
                       Error);
}
