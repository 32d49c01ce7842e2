// tests/test_norm.cpp: what the op specs cannot say about normalization: batch norm's running
// statistics against a hand computation, eval mode using them, double backward, dtypes under
// autocast, accuracy with a large mean, the threaded paths, and the errors users meet.
// Not here: forward values and first-order gradients per shape (opcheck/specs_norm.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "brisk.h"
#include "nn/functional.h"
#include "opcheck/spec.h"

using namespace brisk;
namespace F = brisk::nn::functional;
using V = std::vector<double>;

namespace {

// Per-channel mean and unbiased variance of x (B, C, S), by hand.
void channel_stats(const Tensor& x, V& mean, V& unbiased) {
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  const int64_t spatial = x.numel() / (batch * channels);
  const V xv = x.to_vector<double>();
  const double n = double(batch * spatial);
  mean.assign(size_t(channels), 0.0);
  unbiased.assign(size_t(channels), 0.0);
  for (size_t k = 0; k < xv.size(); ++k) mean[size_t((int64_t(k) / spatial) % channels)] += xv[k] / n;
  for (size_t k = 0; k < xv.size(); ++k) {
    const size_t c = size_t((int64_t(k) / spatial) % channels);
    unbiased[c] += (xv[k] - mean[c]) * (xv[k] - mean[c]) / (n - 1);
  }
}

void check_close(const V& got, const V& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol).scale(1));
}

}  // namespace

TEST_CASE("batch_norm: running statistics after two training steps equal a hand computation") {
  for (DType t : {DType::F32, DType::F64}) {
    INFO("dtype " << dtype_name(t));
    const double m = 0.1;
    const double tol = t == DType::F32 ? 1e-6 : 1e-12;
    Tensor rm = zeros({3}, t), rv = ones({3}, t);
    V want_m(3, 0.0), want_v(3, 1.0);
    for (uint64_t step = 0; step < 2; ++step) {
      Tensor x = cast(opcheck::uniform_values({4, 3, 2}, -1, 3, 100 + step), t);
      const uint32_t version = rm.version();
      F::batch_norm(x, rm, rv, {}, {}, /*training=*/true, m);
      CHECK(rm.version() > version);
      V mean, unbiased;
      channel_stats(cast(x, DType::F64), mean, unbiased);
      for (size_t c = 0; c < 3; ++c) {
        want_m[c] = (1 - m) * want_m[c] + m * mean[c];
        want_v[c] = (1 - m) * want_v[c] + m * unbiased[c];
      }
    }
    check_close(rm.to_vector<double>(), want_m, tol);
    check_close(rv.to_vector<double>(), want_v, tol);
  }
}

TEST_CASE("batch_norm: eval mode normalizes with the running statistics and leaves them alone") {
  Tensor rm = zeros({2}, DType::F64), rv = ones({2}, DType::F64);
  F::batch_norm(opcheck::uniform_values({5, 2, 3}, 0, 4, 1), rm, rv, {}, {}, true, 0.5);
  const V m = rm.to_vector<double>(), v = rv.to_vector<double>();
  Tensor w = from_vector({2.0, -1.0}, {2}, DType::F64), b = from_vector({0.5, 0.25}, {2}, DType::F64);
  Tensor x = opcheck::uniform_values({3, 2, 4}, -1, 1, 2);
  Tensor y = F::batch_norm(x, rm, rv, w, b, /*training=*/false);
  const V xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const V wv = {2.0, -1.0}, bv = {0.5, 0.25};
  for (size_t k = 0; k < xv.size(); ++k) {
    const size_t c = (k / 4) % 2;
    CHECK(yv[k] == doctest::Approx((xv[k] - m[c]) / std::sqrt(v[c] + 1e-5) * wv[c] + bv[c]).epsilon(1e-12));
  }
  CHECK(rm.to_vector<double>() == m);
  CHECK(rv.to_vector<double>() == v);
}

TEST_CASE("batch_norm: without running statistics eval mode uses batch statistics") {
  Tensor x = opcheck::uniform_values({4, 3, 2}, -1, 1, 3);
  CHECK(allclose(F::batch_norm(x, {}, {}, {}, {}, false), F::batch_norm(x, {}, {}, {}, {}, true), 1e-12, 1e-12));
}

TEST_CASE("batch_norm: the running-statistics update is not recorded by autograd") {
  Tensor x = opcheck::uniform_values({4, 3}, -1, 1, 4).requires_grad_();
  Tensor rm = zeros({3}, DType::F64), rv = ones({3}, DType::F64);
  Tensor y = F::batch_norm(x, rm, rv, {}, {}, true);
  CHECK(y.requires_grad());
  CHECK_FALSE(rm.requires_grad());
  CHECK_FALSE(rv.requires_grad());
  y.sum().backward();
  CHECK(x.grad().defined());
}

TEST_CASE("layer_norm: statistics outputs have the normalized dims kept as 1") {
  Tensor x = opcheck::uniform_values({2, 3, 4}, -1, 1, 5);
  Tensor in[3] = {x, ones({3, 4}, DType::F64), zeros({3, 4}, DType::F64)};
  Attrs attrs;
  attrs.dim = 2;
  attrs.a = 1e-5;
  Tensor out[3];
  call(OpId::LayerNorm, in, attrs, out);
  CHECK(out[1].sizes() == Shape{2, 1, 1});
  CHECK(out[2].sizes() == Shape{2, 1, 1});
  const V xv = x.to_vector<double>();
  double m = 0;
  for (size_t k = 0; k < 12; ++k) m += xv[k] / 12;
  CHECK(out[1].to_vector<double>()[0] == doctest::Approx(m).epsilon(1e-14));
}

TEST_CASE("layer_norm and batch_norm: 16-bit inputs keep their dtype, statistics are F32") {
  Tensor x = cast(opcheck::uniform_values({4, 6}, -1, 1, 6), DType::BF16);
  Tensor in[3] = {x, ones({6}, DType::BF16), zeros({6}, DType::BF16)};
  Attrs attrs;
  attrs.dim = 1;
  attrs.a = 1e-5;
  Tensor out[3];
  call(OpId::LayerNorm, in, attrs, out);
  CHECK(out[0].dtype() == DType::BF16);
  CHECK(out[1].dtype() == DType::F32);
  CHECK(out[2].dtype() == DType::F32);
  CHECK(F::batch_norm(x, {}, {}, {}, {}, true).dtype() == DType::BF16);
  // Backward mixes the BF16 input with the F32 statistics; gradients come back in BF16.
  Tensor xl = x.detach().requires_grad_();
  Tensor w = ones({6}, DType::BF16).requires_grad_();
  (F::layer_norm(xl, {6}, w, {}) * F::batch_norm(xl, {}, {}, {}, {}, true)).sum().backward();
  CHECK(xl.grad().dtype() == DType::BF16);
  CHECK(w.grad().dtype() == DType::BF16);
}

TEST_CASE("layer_norm: under autocast a BF16 input is normalized in F32 with F32 parameters") {
  Tensor x = cast(opcheck::uniform_values({4, 6}, -1, 1, 7), DType::BF16);
  Tensor w = cast(opcheck::uniform_values({6}, 0.5, 1.5, 8), DType::F32);
  AutocastGuard guard(Device::cpu(), DType::BF16);
  Tensor y = F::layer_norm(x, {6}, w, {});
  CHECK(y.dtype() == DType::F32);
  Tensor want = F::layer_norm(cast(x, DType::F64), {6}, cast(w, DType::F64), {});
  CHECK(allclose(cast(y, DType::F64), want, 1e-5, 1e-5));
}

TEST_CASE("layer_norm and batch_norm: F32 stays accurate when the mean is large against the spread") {
  Tensor noise = opcheck::uniform_values({8, 64}, -1, 1, 9);
  Tensor x64 = noise * 0.01 + 1e4;  // spread 1e-2 around 1e4
  Tensor x = cast(x64, DType::F32);
  // Compare with F64 on the same (F32-rounded) values.
  Tensor ref_in = cast(x, DType::F64);
  CHECK(allclose(cast(F::layer_norm(x, {64}), DType::F64), F::layer_norm(ref_in, {64}), 1e-3, 1e-3));
  Tensor xt = x.t().contiguous().view({64, 8});  // (B, C): 64 values per channel
  CHECK(allclose(cast(F::batch_norm(xt, {}, {}, {}, {}, true), DType::F64),
                 F::batch_norm(cast(xt, DType::F64), {}, {}, {}, {}, true), 1e-3, 1e-3));
}

TEST_CASE("layer_norm and batch_norm: the threaded paths match F64") {
  // Big enough that the kernels split the work over threads.
  Tensor x = opcheck::uniform_values({256, 512}, -1, 2, 10);
  Tensor xf = cast(x, DType::F32);
  CHECK(allclose(cast(F::layer_norm(xf, {512}), DType::F64), F::layer_norm(x, {512}), 1e-5, 1e-5));
  Tensor x4 = opcheck::uniform_values({8, 16, 32, 32}, -1, 2, 11);
  CHECK(allclose(cast(F::batch_norm(cast(x4, DType::F32), {}, {}, {}, {}, true), DType::F64),
                 F::batch_norm(x4, {}, {}, {}, {}, true), 1e-5, 1e-5));
  Tensor x2 = opcheck::uniform_values({512, 256}, -1, 2, 12);
  CHECK(allclose(cast(F::batch_norm(cast(x2, DType::F32), {}, {}, {}, {}, true), DType::F64),
                 F::batch_norm(x2, {}, {}, {}, {}, true), 1e-5, 1e-5));
}

TEST_CASE("layer_norm and batch_norm: second derivatives match finite differences") {
  // f(x, w) = d<norm(x, w), v>/dx with create_graph: gradcheck of the first derivative
  // exercises the gradients that reach the saved mean and rstd.
  auto first_derivative = [](auto norm) {
    return [norm](const std::vector<Tensor>& in) {
      GradModeGuard on(true);  // gradcheck's finite differences run under NoGradGuard
      Tensor y = norm(in[0], in[1]);
      Tensor v = opcheck::uniform_values(y.sizes(), -1, 1, 77);
      Tensor s = (y * v).sum();
      std::vector<Tensor> g = grad(std::vector<Tensor>{s}, in, {}, false, /*create_graph=*/true);
      return g[0] + g[1].sum() * 0.5;  // both first derivatives, one tensor
    };
  };
  auto ln = [](const Tensor& x, const Tensor& w) { return F::layer_norm(x, {4}, w, {}); };
  auto bn = [](const Tensor& x, const Tensor& w) { return F::batch_norm(x, {}, {}, w, {}, true); };
  std::vector<Tensor> ln_in = {opcheck::leaf(opcheck::uniform_values({3, 4}, -1, 2, 13)),
                               opcheck::leaf(opcheck::uniform_values({4}, 0.5, 1.5, 14))};
  CHECK(gradcheck(first_derivative(ln), ln_in));
  std::vector<Tensor> bn_in = {opcheck::leaf(opcheck::uniform_values({3, 2, 2}, -1, 2, 15)),
                               opcheck::leaf(opcheck::uniform_values({2}, 0.5, 1.5, 16))};
  CHECK(gradcheck(first_derivative(bn), bn_in));
}

TEST_CASE("normalization: errors name the op and the shapes") {
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {3}), doctest::Contains("layer_norm: normalized_shape (3)"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {3}), doctest::Contains("(2, 3, 4)"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {2, 3, 4, 5}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {4}, zeros({3})), doctest::Contains("layer_norm: weight has shape (3)"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(x, {4}, {}, zeros({4, 1})), doctest::Contains("bias has shape (4, 1)"), Error);
  CHECK_THROWS_WITH_AS(F::layer_norm(zeros({2, 4}, DType::I64), {4}), doctest::Contains("floating"), Error);

  CHECK_THROWS_WITH_AS(F::batch_norm(x, zeros({4}), ones({3})),
                       doctest::Contains("batch_norm: running_mean has shape (4)"), Error);
  CHECK_THROWS_WITH_AS(F::batch_norm(x, zeros({3}), ones({3}), ones({2})),
                       doctest::Contains("batch_norm: weight has shape (2)"), Error);
  CHECK_THROWS_WITH_AS(F::batch_norm(x, zeros({3}), {}), doctest::Contains("both"), Error);
  CHECK_THROWS_WITH_AS(F::batch_norm(zeros({3}), {}, {}), doctest::Contains("(B, C, *)"), Error);
  CHECK_THROWS_WITH_AS(F::batch_norm(zeros({1, 3}), zeros({3}), ones({3}), {}, {}, true),
                       doctest::Contains("expected more than 1 value per channel when training, got input size (1, 3)"),
                       Error);
  CHECK_THROWS_WITH_AS(F::batch_norm(zeros({1, 3, 1}), {}, {}, {}, {}, true),
                       doctest::Contains("more than 1 value per channel"), Error);
  CHECK_NOTHROW(F::batch_norm(zeros({1, 3}), zeros({3}), ones({3}), {}, {}, false));

  CHECK_THROWS_WITH_AS(F::group_norm(zeros({2, 6, 4}), 4),
                       doctest::Contains("group_norm: 6 channels of input (2, 6, 4) are not divisible by 4 groups"),
                       Error);
  CHECK_THROWS_WITH_AS(F::group_norm(zeros({2, 6, 4}), 3, ones({4})), doctest::Contains("weight has shape (4)"), Error);
}
