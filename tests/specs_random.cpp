// tests/specs_random.cpp: specs of arange, rand, randn, dropout, bernoulli and multinomial
// (engine/ops/random.cpp).
// Each random spec draws from its own Generator with a fixed seed, so every call of `fn` gives
// the same values; the references recompute them with the Philox functions of engine/random.h
// in plain loops (the definition in Note [Random streams]). Case inputs only carry shape and
// dtype for the factories; arange's input holds (start, end, step).
// Then the sampling ops' statistics, thread-count independence and errors.
// Not here: statistics, seeding and threading of the others (tests/test_random.cpp).
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/op_spec.h"

namespace brisk::test {
namespace {

constexpr uint64_t kSeed = 42;

// Shapes the factories draw; the values of the input are unused.
std::vector<OpCase> shape_cases() {
  return {
      {"(3, 4)", {uniform_values({3, 4}, -1, 1, 1)}},
      {"(7): a partial Philox counter", {uniform_values({7}, -1, 1, 2)}},
      {"0-dim", {uniform_values({}, -1, 1, 3)}},
      {"size 0", {uniform_values({0, 3}, -1, 1, 4)}},
      {"(2, 3, 5)", {uniform_values({2, 3, 5}, -1, 1, 5)}},
  };
}

Tensor arange_ref(const std::vector<Tensor>& in) {
  std::vector<double> v = in[0].to_vector<double>();
  const int64_t n = int64_t(std::ceil((v[1] - v[0]) / v[2]));
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(v[0] + double(i) * v[2]);
  return from_vector(out, {n}, DType::F64);
}

// Draw d of a multinomial row: 53 bits of lanes 0 and 1 of counter `counter`, as the kernel.
double uniform_double(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox(seed, counter);
  return double((uint64_t(r.v[0]) << 21) | (uint64_t(r.v[1]) >> 11)) * 0x1p-53;
}

// torch.multinomial's law by the definition in Note [Random streams] (engine/ops/random.cpp).
Tensor multinomial_ref(const Tensor& probs, int64_t samples, bool replacement) {
  const int64_t c = probs.size(-1), rows = probs.numel() / c;
  const uint64_t per_row = uint64_t(replacement ? samples : c);
  std::vector<double> w = probs.to_vector<double>(), out;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = w.data() + r * c;
    const uint64_t first = uint64_t(r) * per_row;
    if (replacement) {
      const double total = std::accumulate(row, row + c, 0.0);
      for (int64_t d = 0; d < samples; ++d) {
        double x = uniform_double(kSeed, first + uint64_t(d)) * total, acc = 0;
        int64_t j = 0;
        while (j + 1 < c && !(acc + row[j] > x && row[j] > 0)) acc += row[j++];
        out.push_back(double(j));
      }
      continue;
    }
    std::vector<std::pair<double, int64_t>> keys;
    for (int64_t j = 0; j < c; ++j) {
      if (row[j] > 0) keys.push_back({-std::log1p(-uniform_double(kSeed, first + uint64_t(j))) / row[j], j});
    }
    std::sort(keys.begin(), keys.end());
    for (int64_t d = 0; d < samples; ++d) out.push_back(double(keys[size_t(d)].second));
  }
  Shape shape = probs.dim() == 1 ? Shape{samples} : Shape{rows, samples};
  return from_vector(out, shape, DType::F64);
}

void add_sampling_specs(std::vector<OpSpec>& specs) {
  {
    OpSpec s;
    s.name = "bernoulli";
    s.covers = {OpId::Bernoulli};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return bernoulli(in[0], &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [i = uint64_t(0)](const std::vector<double>& p) mutable {
        return double(philox_uniform(kSeed, 0, i++)) < p[0] ? 1.0 : 0.0;
      });
    };
    s.cases = [] {
      return std::vector<OpCase>{
          {"(3, 4)", {uniform_values({3, 4}, 0, 1, 1)}},
          {"(7): a partial Philox counter", {uniform_values({7}, 0, 1, 2)}},
          {"0-dim", {uniform_values({}, 0, 1, 3)}},
          {"size 0", {uniform_values({0, 3}, 0, 1, 4)}},
          {"p 0 and 1", {from_vector({0, 1, 0, 1}, {4}, DType::F64)}},
      };
    };
    s.grad = false;
    s.cuda = false;  // CPU only: no kernel for device cuda
    specs.push_back(s);
  }
  struct Variant {
    const char* name;
    int64_t samples;
    bool replacement;
  };
  for (Variant v :
       {Variant{"multinomial with replacement", 9, true}, Variant{"multinomial without replacement", 3, false}}) {
    OpSpec s;
    s.name = v.name;
    s.covers = {OpId::Multinomial};
    s.fn = [v](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return multinomial(in[0], v.samples, v.replacement, &gen);
    };
    s.reference = [v](const std::vector<Tensor>& in) { return multinomial_ref(in[0], v.samples, v.replacement); };
    s.cases = [] {
      return std::vector<OpCase>{
          {"1-D (5)", {uniform_values({5}, 0, 1, 5)}},
          {"2-D (4, 6) with zeros",
           {from_vector({0, 1, 2, 0, 3, 1, 1, 1, 1, 1, 1, 1, 5, 0, 0, 0.5, 0, 2, 0, 0, 1, 2, 3, 0}, {4, 6},
                        DType::F64)}},
      };
    };
    s.grad = false;
    s.dtypes = {};   // rounding the weights to F32 may move a draw across a category boundary
    s.cuda = false;  // CPU only: no kernel for device cuda
    specs.push_back(s);
  }
}

void add_specs(std::vector<OpSpec>& specs) {
  add_sampling_specs(specs);
  {
    OpSpec s;
    s.name = "arange";
    s.covers = {OpId::Arange};
    s.fn = [](const std::vector<Tensor>& in) {
      std::vector<double> v = in[0].to_vector<double>();
      return arange(v[0], v[1], v[2], in[0].dtype());
    };
    s.reference = arange_ref;
    s.cases = [] {
      auto range = [](double start, double end, double step) {
        return from_vector({start, end, step}, {3}, DType::F64);
      };
      return std::vector<OpCase>{
          {"0 to 5 step 1", {range(0, 5, 1)}},       {"1 to 2 step 0.3 (length rounds up)", {range(1, 2, 0.3)}},
          {"5 to 0 step -1.5", {range(5, 0, -1.5)}}, {"-3 to 3 step 0.5", {range(-3, 3, 0.5)}},
          {"empty: 2 to 2", {range(2, 2, 1)}},
      };
    };
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "uniform [-2, 3)";
    s.covers = {OpId::Rand};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return uniform(in[0].sizes(), -2, 3, in[0].dtype(), Device::cpu(), &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> out(size_t(in[0].numel()));
      for (size_t i = 0; i < out.size(); ++i) out[i] = -2 + 5 * double(philox_uniform(kSeed, 0, i));
      return from_vector(out, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "normal (0.5, 2)";
    s.covers = {OpId::Randn};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return normal(in[0].sizes(), 0.5, 2, in[0].dtype(), Device::cpu(), &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> out(size_t(in[0].numel()));
      for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5 + 2 * double(philox_normal(kSeed, 0, i));
      return from_vector(out, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.tol_half = 2e-2;  // values up to ~8 in magnitude
    specs.push_back(s);
  }
  {
    // The mask is fixed by the seed, so gradcheck sees one smooth function.
    OpSpec s;
    s.name = "dropout p = 0.4";
    s.covers = {OpId::Dropout};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return dropout(in[0], 0.4, true, &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> x = in[0].to_vector<double>();
      for (size_t i = 0; i < x.size(); ++i) x[i] = philox_uniform(kSeed, 0, i) >= 0.4 ? x[i] / 0.6 : 0.0;
      return from_vector(x, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
}

REGISTER_SPECS(add_specs);

}  // namespace
}  // namespace brisk::test

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
  Tensor w = test::uniform_values({64, 200}, 0, 1, 3);
  Tensor p = test::uniform_values({100000}, 0, 1, 4);
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
