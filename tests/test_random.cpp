// tests/test_random.cpp: the random ops beyond the spec table: seeding and streams, the
// statistics of 1e5 samples, randint's range, dropout's mask rate and gradient, arange's
// PyTorch rules, and values that do not change with the number of OpenMP threads.
// Not here: the element-by-element references (opcheck/specs_random.cpp).
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "brisk.h"
#include "test_util.h"

using namespace brisk;

namespace {

struct Moments {
  double mean = 0;
  double std = 0;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= double(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size() - 1));
  return m;
}

// Runs f with `n` OpenMP threads, then restores the previous setting.
template <class F>
auto with_threads(int n, F f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(n);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

}  // namespace

TEST_CASE("random: the same seed gives the same values") {
  manual_seed(123);
  Tensor a = rand({1000});
  Tensor b = randn({1000});
  manual_seed(123);
  CHECK(equal(rand({1000}), a));
  CHECK(equal(randn({1000}), b));
  Generator g1(7), g2(7);
  CHECK(equal(normal({50}, 1, 2, DType::F64, Device::cpu(), &g1), normal({50}, 1, 2, DType::F64, Device::cpu(), &g2)));
}

TEST_CASE("random: successive calls take new offsets and draw different values") {
  Generator g(5);
  Tensor a = rand({100}, DType::F32, Device::cpu(), &g);
  const uint64_t after_first = g.offset();
  Tensor b = rand({100}, DType::F32, Device::cpu(), &g);
  CHECK(after_first > 0);
  CHECK(g.offset() > after_first);
  CHECK_FALSE(equal(a, b));
  Generator other_seed(6);
  CHECK_FALSE(equal(a, rand({100}, DType::F32, Device::cpu(), &other_seed)));
}

TEST_CASE("random: rand and randn are the Philox stream element by element") {
  Generator g(99);
  g.set_offset(10);
  std::vector<float> u = rand({37}, DType::F32, Device::cpu(), &g).to_vector<float>();
  for (size_t i = 0; i < u.size(); ++i) CHECK(u[i] == philox_uniform(99, 10, i));
  const uint64_t offset = g.offset();
  std::vector<float> z = randn({37}, DType::F32, Device::cpu(), &g).to_vector<float>();
  for (size_t i = 0; i < z.size(); ++i) CHECK(z[i] == philox_normal(99, offset, i));
  // randn spends two lanes per value: the next stream starts past its counters.
  CHECK(g.offset() >= offset + (37 + 1) / 2);
}

TEST_CASE("random: the vectorized kernels give the scalar definitions' bits at any size, seed and offset") {
  // Whole and partial blocks of 64 counters, a seed with both key words set, and offsets whose
  // counters carry into the high word.
  for (const uint64_t seed : {uint64_t(7), uint64_t(0x123456789ABCDEF0ULL)}) {
    for (const uint64_t offset : {uint64_t(0), uint64_t(0xFFFFFFFFULL - 50), uint64_t(1) << 40}) {
      for (const int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(4099)}) {
        Generator g(seed);
        g.set_offset(offset);
        const std::vector<float> u = rand({n}, DType::F32, Device::cpu(), &g).to_vector<float>();
        g.set_offset(offset);
        const std::vector<float> z = randn({n}, DType::F32, Device::cpu(), &g).to_vector<float>();
        int64_t bad_u = 0, bad_z = 0;
        for (int64_t i = 0; i < n; ++i) {
          bad_u += u[size_t(i)] != philox_uniform(seed, offset, uint64_t(i));
          bad_z += z[size_t(i)] != philox_normal(seed, offset, uint64_t(i));
        }
        CAPTURE(seed);
        CAPTURE(offset);
        CAPTURE(n);
        CHECK(bad_u == 0);
        CHECK(bad_z == 0);
      }
    }
  }
}

TEST_CASE("random: Box-Muller's own log and cos are within 1.7 ulp and 7.6e-8 of the exact functions") {
  // Every 3rd of the 2^24 inputs the generator can give (u = k / 2^24), and both ends.
  double worst_ulp = 0, worst_cos = 0;
  for (uint32_t k = 1; k <= (1u << 24); k += (k < 64 || k > (1u << 24) - 64) ? 1 : 3) {
    const float u = float(k) * (1.0f / 16777216.0f);  // (0, 1]: Box-Muller's u1
    const double want = std::log(double(u));
    const float w = float(want);
    const double ulp = double(std::nextafter(std::fabs(w), INFINITY) - std::fabs(w));
    worst_ulp =
        std::max(worst_ulp, want == 0 ? double(box_muller_log(u) != 0) : std::fabs(box_muller_log(u) - want) / ulp);
    const float v = float(k - 1) * (1.0f / 16777216.0f);  // [0, 1): u2
    worst_cos = std::max(worst_cos, std::fabs(double(box_muller_cos2pi(v)) - std::cos(2 * M_PI * double(v))));
  }
  CHECK(worst_ulp <= 1.7);
  CHECK(worst_cos <= 7.6e-8);
  CHECK(box_muller_log(1.0f) == 0.0f);
  CHECK(box_muller_cos2pi(0.0f) == 1.0f);
  CHECK(box_muller_cos2pi(0.5f) == -1.0f);
}

TEST_CASE("random: uniform and normal have the right mean and std over 1e5 samples") {
  manual_seed(2024);
  Moments u = moments(uniform({100000}, -1, 3));
  CHECK(std::fabs(u.mean - 1.0) < 0.02);
  CHECK(std::fabs(u.std - 4 / std::sqrt(12.0)) < 0.01);
  Moments n = moments(normal({100000}, 2, 3, DType::F64));
  CHECK(std::fabs(n.mean - 2.0) < 0.05);
  CHECK(std::fabs(n.std - 3.0) < 0.03);
  Moments z = moments(randn({100000}));
  CHECK(std::fabs(z.mean) < 0.02);
  CHECK(std::fabs(z.std - 1.0) < 0.01);
  for (DType t : {DType::F16, DType::BF16}) {
    Moments h = moments(randn({100000}, t));
    CHECK(std::fabs(h.mean) < 0.02);
    CHECK(std::fabs(h.std - 1.0) < 0.02);
  }
  std::vector<double> r = rand({100000}).to_vector<double>();
  for (double v : r) REQUIRE((v >= 0 && v < 1));
}

TEST_CASE("random: randint stays in [low, high) and draws every value") {
  manual_seed(11);
  Tensor t = randint(-3, 4, {7000});
  CHECK(t.dtype() == DType::I64);
  std::vector<int64_t> v = t.to_vector<int64_t>();
  std::vector<int> count(7, 0);
  for (int64_t x : v) {
    REQUIRE((x >= -3 && x < 4));
    ++count[size_t(x + 3)];
  }
  for (int c : count) CHECK(std::abs(c - 1000) < 150);
  CHECK(randint(0, 10, {4}, DType::I32).dtype() == DType::I32);
  CHECK(test::error_text([] { randint(3, 3, {2}); }).find("randint") != std::string::npos);
}

TEST_CASE("random: dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)") {
  manual_seed(3);
  const double p = 0.3;
  std::vector<float> y = dropout(ones({100000}), p).to_vector<float>();
  int64_t kept = 0;
  for (float v : y) {
    if (v == 0) continue;
    ++kept;
    REQUIRE(v == float(1.0f * float(1.0 / (1.0 - p))));
  }
  CHECK(std::fabs(double(kept) / double(y.size()) - (1 - p)) < 0.01);
}

TEST_CASE("random: dropout's special cases follow PyTorch") {
  Tensor x = uniform({10}, -1, 1);
  CHECK(dropout(x, 0.5, /*training=*/false).impl() == x.impl());
  CHECK(dropout(x, 0.0).impl() == x.impl());
  CHECK(equal(dropout(x, 1.0), zeros({10})));
  CHECK(test::error_text([&] { dropout(x, 1.5); }).find("dropout") != std::string::npos);
  CHECK(test::error_text([&] { dropout(x, -0.1); }).find("dropout") != std::string::npos);
  CHECK(test::error_text([] { dropout(ones({3}, DType::I64), 0.5); }).find("floating") != std::string::npos);
}

TEST_CASE("random: dropout's gradient is the mask divided by 1 - p") {
  manual_seed(8);
  Tensor x = uniform({1000}, 0.5, 1.5).requires_grad_();
  Tensor y = dropout(x, 0.25);
  Tensor w = uniform({1000}, -1, 1);
  y.backward(w);
  std::vector<float> yv = y.to_vector<float>(), wv = w.to_vector<float>(), gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) {
    const float want = yv[i] != 0 ? wv[i] * float(1.0 / 0.75) : 0.0f;
    REQUIRE(gv[i] == doctest::Approx(want).epsilon(1e-6));
  }
  Tensor x1 = ones({5}).requires_grad_();
  dropout(x1, 1.0).backward(ones({5}));
  CHECK(equal(x1.grad(), zeros({5})));
}

TEST_CASE("random: values do not depend on the number of OpenMP threads") {
  auto draw = [] {
    Generator g(77);
    std::vector<Tensor> out;
    out.push_back(rand({200001}, DType::F32, Device::cpu(), &g));
    out.push_back(randn({200001}, DType::F64, Device::cpu(), &g));
    out.push_back(randn({200001}, DType::BF16, Device::cpu(), &g));
    out.push_back(dropout(ones({200001}), 0.5, true, &g));
    out.push_back(arange(0.0, 200001.0, 1.0, DType::F32));
    return out;
  };
  std::vector<Tensor> one = with_threads(1, draw);
  std::vector<Tensor> two = with_threads(2, draw);
  for (size_t k = 0; k < one.size(); ++k) CHECK_MESSAGE(equal(one[k], two[k]), "output ", k);
}

TEST_CASE("random: arange follows PyTorch's length and dtype rules") {
  Tensor a = arange(5);
  CHECK(a.dtype() == DType::I64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0, 1, 0.25, DType::F32).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(1, 2.5, 0.5, DType::F64).numel() == 3);
  CHECK(arange(1, 2.6, 0.5, DType::F64).numel() == 4);
  CHECK(arange(10, 0, -3).to_vector<int64_t>() == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(arange(0, 0).numel() == 0);
  CHECK(arange(4, DType::BF16).to_vector<double>() == std::vector<double>{0, 1, 2, 3});
  CHECK(test::error_text([] { arange(0, 5, 0); }).find("step") != std::string::npos);
  CHECK(test::error_text([] { arange(0, 5, -1); }).find("arange") != std::string::npos);
  CHECK(test::error_text([] { arange(0, 3, 1, DType::Bool); }).find("Bool") != std::string::npos);
}

TEST_CASE("random: factories refuse integer dtypes and negative sizes") {
  CHECK(test::error_text([] { rand({3}, DType::I64); }).find("rand") != std::string::npos);
  CHECK(test::error_text([] { randn({3}, DType::I32); }).find("randn") != std::string::npos);
  CHECK(test::error_text([] { rand({-1, 2}); }).find("negative") != std::string::npos);
  CHECK(test::error_text([] { uniform({2}, 1, 0); }).find("uniform") != std::string::npos);
  CHECK(test::error_text([] { normal({2}, 0, -1); }).find("normal") != std::string::npos);
}

TEST_CASE("random: fill_uniform_ / fill_normal_ write uniform() / normal()'s values in place, strided too") {
  for (DType t : {DType::F32, DType::F64, DType::BF16}) {
    CAPTURE(dtype_name(t));
    Generator a(7), b(7);
    Tensor want_u = uniform({5, 6}, -2, 3, t, Device::cpu(), &a), want_n = normal({5, 6}, 1, 0.5, t, Device::cpu(), &a);
    Tensor u = zeros({5, 6}, t), n = zeros({6, 5}, t).t();  // n: a transposed view (through a copy)
    u.requires_grad_(true);                                 // a parameter: filled unrecorded
    fill_uniform_(u, -2, 3, &b);
    fill_normal_(n, 1, 0.5, &b);
    CHECK(u.requires_grad());
    CHECK(!u.grad_fn());
    CHECK(allclose(u.detach(), want_u, 0, 0));
    CHECK(allclose(n, want_n, 0, 0));
    CHECK(a.offset() == b.offset());
  }
  Tensor i = zeros({3}, DType::I64);
  CHECK_THROWS_AS(fill_uniform_(i, 0, 1), Error);
}
