// tests/test_edge_values.cpp: focused regressions for edge values, one defect per test: NaN
// propagation (relu, clamp, maximum/minimum, amax/amin, argmax/argmin, max pooling) and the
// gradients at non-differentiable points, following PyTorch's conventions (relu at 0, clamp at
// its bounds, ties of max/min, pow at 0, sign, the binary cross-entropy head at a logit of 0).
// Each expected value is PyTorch 1.13's. Not here: the broad sweep against PyTorch's own
// numbers (tests/test_pytorch_edge.cpp) and the per-op conformance table (opcheck/specs_*.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "brisk.h"
#include "engine/dispatch.h"
#include "nn/functional.h"

using namespace brisk;
namespace F = brisk::nn::functional;

namespace {

constexpr double kNan = NAN;
constexpr double kInf = INFINITY;

Tensor vec(const std::vector<double>& v, DType t = DType::F32) { return from_vector(v, {int64_t(v.size())}, t); }
Tensor leaf(const std::vector<double>& v, DType t = DType::F32) { return vec(v, t).requires_grad_(); }

// Equal element by element, NaN equal to NaN, and zeros of the same sign.
bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (!(std::isnan(a) && std::isnan(b))) return false;
    } else if (a != b || std::signbit(a) != std::signbit(b)) {
      if (std::fabs(a - b) > 1e-6 * std::fabs(b) || a == 0 || b == 0) return false;
    }
  }
  return true;
}

std::string show(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

#define CHECK_SAME(got, ...)                                                            \
  do {                                                                                  \
    const std::vector<double> got_ = (got);                                             \
    const std::vector<double> want_ = __VA_ARGS__;                                      \
    CHECK_MESSAGE(same(got_, want_), "got " << show(got_) << ", want " << show(want_)); \
  } while (0)

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }

// A copy of t that requires grad.
Tensor leaf_of(const Tensor& t) { return t.clone().requires_grad_(true); }

}  // namespace

TEST_CASE("edge values: relu passes NaN and -0 through, as PyTorch's relu") {
  for (DType t : {DType::F32, DType::F64}) {
    CHECK_SAME(values(relu(vec({kNan, -0.0, 0.0, -1.0, 2.0, -kInf, kInf}, t))), {kNan, -0.0, 0.0, 0.0, 2.0, 0.0, kInf});
  }
}

TEST_CASE("edge values: relu's gradient is 0 at 0 and passes at NaN") {
  Tensor x = leaf({0.0, -0.0, kNan, 1.0, -1.0});
  relu(x).backward(vec({1, 1, 1, 1, 1}));
  CHECK_SAME(grad_of(x), {0, 0, 1, 1, 0});
}

TEST_CASE("edge values: clamp passes NaN through and its gradient is 1 at the bounds") {
  Tensor x = leaf({-1.0, 1.0, kNan, 2.0, -2.0, 0.5});
  Tensor y = clamp(x, -1.0, 1.0);
  CHECK_SAME(values(y), {-1.0, 1.0, kNan, 1.0, -1.0, 0.5});
  y.backward(vec({1, 1, 1, 1, 1, 1}));
  CHECK_SAME(grad_of(x), {1, 1, 0, 0, 0, 1});
}

TEST_CASE("edge values: maximum and minimum propagate NaN and give its gradient to both sides") {
  Tensor a = leaf({kNan, 1.0, 2.0, kNan, 3.0});
  Tensor b = leaf({1.0, kNan, 2.0, kNan, 1.0});
  Tensor y = maximum(a, b);
  CHECK_SAME(values(y), {kNan, kNan, 2.0, kNan, 3.0});
  y.backward(vec({1, 1, 1, 1, 1}));
  CHECK_SAME(grad_of(a), {1, 1, 0.5, 1, 1});  // PyTorch: the NaN side and the other side, halves at ties
  CHECK_SAME(grad_of(b), {1, 1, 0.5, 1, 0});
  Tensor c = leaf({kNan, 2.0, 0.0});
  Tensor d = leaf({0.0, 2.0, 1.0});
  Tensor z = minimum(c, d);
  CHECK_SAME(values(z), {kNan, 2.0, 0.0});
  z.backward(vec({1, 1, 1}));
  CHECK_SAME(grad_of(c), {1, 0.5, 1});
  CHECK_SAME(grad_of(d), {1, 0.5, 0});
}

TEST_CASE("edge values: pow's gradients at a zero base follow PyTorch") {
  Tensor a = leaf({0.0, 0.0, 0.0, 2.0, -2.0});
  Tensor b = leaf({0.0, -1.0, 2.0, 0.0, 0.5});
  Tensor y = pow(a, b);
  CHECK_SAME(values(y), {1.0, kInf, 0.0, 1.0, kNan});
  y.backward(vec({1, 1, 1, 1, 1}));
  CHECK_SAME(grad_of(a), {0.0, -kInf, 0.0, 0.0, kNan});             // 0 where the exponent is 0
  CHECK_SAME(grad_of(b), {0.0, -kInf, 0.0, std::log(2.0f), kNan});  // 0 where base 0 and exponent >= 0
}

TEST_CASE("edge values: pow with a scalar exponent takes PyTorch's special forms") {
  // sqrt, rsqrt and reciprocals, not std::pow: they differ at -0 and -inf.
  CHECK_SAME(values(pow(vec({-0.0, -kInf, 4.0}), 0.5)), {-0.0, kNan, 2.0});
  CHECK_SAME(values(pow(vec({-0.0, -kInf, 4.0}), -0.5)), {-kInf, kNan, 0.5});
  CHECK_SAME(values(pow(vec({-0.0, 2.0}), -1.0)), {-kInf, 0.5});
}

TEST_CASE("edge values: sign has a zero gradient") {
  Tensor x = leaf({-2.0, 0.0, 3.0, kNan});
  Tensor y = sign(x) * x;
  y.backward(vec({1, 1, 1, 1}));
  CHECK_SAME(grad_of(x), {-1, 0, 1, 0});  // sign(x) from the product; sign's own part is 0, even at NaN
  Tensor z = leaf({1.0, -1.0});
  sign(z).backward(vec({1, 1}));
  CHECK_SAME(grad_of(z), {0, 0});
}

TEST_CASE("edge values: amax and amin share the gradient evenly over ties and propagate NaN") {
  Tensor x = from_vector({2, 2, 1, 3, 3, 3}, {2, 3}).requires_grad_();
  Tensor y = amax(x, {1});
  CHECK_SAME(values(y), {2, 3});
  y.backward(vec({1, 3}));
  CHECK_SAME(grad_of(x), {0.5, 0.5, 0, 1, 1, 1});
  Tensor n = from_vector({kNan, 1, 2, 0, -1, -1}, {2, 3}).requires_grad_();
  Tensor m = amin(n, {1});
  CHECK_SAME(values(m), {kNan, -1});
  m.backward(vec({1, 1}));
  CHECK_SAME(grad_of(n), {kNan, kNan, kNan, 0, 0.5, 0.5});  // PyTorch's amax/amin: a NaN row's gradient is NaN
}

TEST_CASE("edge values: max of all elements sends the gradient to the NaN, as torch.max") {
  Tensor x = from_vector({kNan, 1, 2, 2, 2, 1}, {2, 3}).requires_grad_();
  Tensor y = max(x);
  CHECK(std::isnan(y.item<float>()));
  y.backward();
  CHECK_SAME(grad_of(x), {1, 0, 0, 0, 0, 0});
  Tensor t = from_vector({1, 5, 5, 0}, {2, 2}).requires_grad_();
  min(t).backward();
  CHECK_SAME(grad_of(t), {0, 0, 0, 1});
}

TEST_CASE("edge values: argmax and argmin pick the first NaN, else the first of tied extremes") {
  Tensor x = from_vector({1, kNan, 3, kNan, 2, 2, -kInf, 2}, {2, 4});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(argmax(x).item<int64_t>() == 1);
}

TEST_CASE("edge values: max_pool2d takes the last NaN of a window, value and index") {
  for (bool two_by_two : {true, false}) {
    Tensor x = from_vector({kNan, 1, kNan, 2}, {1, 1, 2, 2});
    Attrs a;
    a.geometry = {two_by_two ? 2 : 1, two_by_two ? 2 : 1, 0, 0, 1, 1, 2, 2};
    const Tensor in[1] = {x};
    Tensor out[2];
    call(OpId::MaxPool2d, in, a, out);
    CHECK(std::isnan(out[0].item<float>()));
    CHECK(out[1].item<int64_t>() == 2);  // PyTorch: `val > max || isnan(val)` takes every NaN it meets
  }
}

TEST_CASE("edge values: binary_cross_entropy_with_logits has gradient sigmoid(x) - y at a zero logit") {
  // A zero-initialized binary head must move: d/dx at x = 0 is 0.5 - y.
  Tensor x = leaf({0, 0, 0});
  Tensor y = vec({0, 0.5, 1});
  Tensor loss = F::binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::None);
  CHECK_SAME(values(loss), {std::log(2.0f), std::log(2.0f), std::log(2.0f)});
  loss.backward(vec({1, 1, 1}));
  CHECK_SAME(grad_of(x), {0.5, 0, -0.5});
}

TEST_CASE("edge values: binary_cross_entropy_with_logits with pos_weight and weight at a zero logit") {
  // PyTorch: d/dx = weight * ((pos_weight * y + 1 - y) sigmoid(x) - pos_weight * y).
  Tensor x = leaf({0, 0, 0});
  Tensor y = vec({0, 0.5, 1});
  Tensor pos_weight = vec({3, 3, 3});
  Tensor weight = vec({2, 1, 0.5});
  F::binary_cross_entropy_with_logits(x, y, {}, pos_weight, Reduction::Sum).backward();
  CHECK_SAME(grad_of(x), {0.5, -0.5, -1.5});
  Tensor x2 = leaf({0, 0, 0});
  F::binary_cross_entropy_with_logits(x2, y, weight, pos_weight, Reduction::Sum).backward();
  CHECK_SAME(grad_of(x2), {1.0, -0.5, -0.75});
}

TEST_CASE("edge values: binary_cross_entropy_with_logits stays finite for huge logits") {
  Tensor x = leaf({100, -100, 1e30, -1e30});
  Tensor y = vec({0, 1, 1, 0});
  Tensor loss = F::binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::None);
  CHECK_SAME(values(loss), {100, 100, 0, 0});
  loss.backward(vec({1, 1, 1, 1}));
  CHECK_SAME(grad_of(x), {1, -1, 0, 0});
}

TEST_CASE("edge values: abs(-0) is +0") {
  CHECK_SAME(values(abs(vec({-0.0, 0.0, -kInf, kNan}))), {0.0, 0.0, kInf, kNan});
}

TEST_CASE("edge values: div's gradient for a tiny divisor does not underflow to NaN") {
  // -g a / b^2 taken as -g (a / b) / b, as PyTorch: b * b is 0 for b = 1e-40 and 0 / 0 is NaN.
  Tensor a = leaf({0, 1});
  Tensor b = leaf({1e-40, 1e-20});
  div(a, b).backward(vec({1, 1}));
  CHECK_SAME(grad_of(b), {-0.0, -kInf});
}

TEST_CASE("edge values: std of a constant row has gradient 0 and std of huge values is finite in F32") {
  Tensor x = from_vector({1, 1, 1, 1, 1e20, -1e20, 1e20, 3}, {2, 4}).requires_grad_();
  Tensor s = brisk::std(x, {1});
  CHECK(s.to_vector<double>()[0] == 0);
  CHECK(std::fabs(s.to_vector<double>()[1] / 9.5742710e19 - 1) < 1e-6);  // the variance, 9e39, is beyond F32
  s.backward(vec({1, 1}));
  const std::vector<double> g = grad_of(x);
  CHECK_SAME(std::vector<double>(g.begin(), g.begin() + 4), {0, 0, 0, 0});  // PyTorch masks the 1 / (2 std) at 0
  CHECK(std::fabs(g[4] - 0.26111648) < 1e-6);
}

TEST_CASE("edge values: smooth_l1_loss's gradient is finite for an infinite difference") {
  Tensor x = leaf({0, 5, kInf, -kInf});
  Tensor loss = F::smooth_l1_loss(x, vec({0, 0, 0, 0}), Reduction::None, 1.0);
  CHECK_SAME(values(loss), {0, 4.5, kInf, kInf});
  loss.backward(vec({1, 1, 1, 1}));
  CHECK_SAME(grad_of(x), {0, 1, 1, -1});  // not 0 * inf = NaN from the quadratic branch
}

TEST_CASE("edge values: kl_div keeps PyTorch's NaN for a zero target against a -inf input") {
  Tensor loss = F::kl_div(vec({-kInf, -1}), vec({0, 0.5}), Reduction::None);
  CHECK(std::isnan(loss.to_vector<double>()[0]));  // xlogy(0, 0) - 0 * -inf
  CHECK(std::fabs(loss.to_vector<double>()[1] - 0.15342641) < 1e-6);
}

TEST_CASE("edge values: weighted cross_entropy keeps the smoothing term of a class weighted 0") {
  // Only ignored samples drop out; PyTorch: loss 0.6771, and row 0 (target weight 0) has a gradient.
  Tensor x = from_vector({1, 2, 3, 0, 0, 1}, {2, 3}).requires_grad_();
  Tensor loss = F::cross_entropy(x, from_vector({2, 0}, {2}, DType::I64), vec({0, 1, 1}), Reduction::Mean, -100, 0.3);
  CHECK(std::fabs(loss.item<float>() - 0.6771) < 1e-4);
  loss.backward();
  CHECK(std::fabs(grad_of(x)[0] - 0.0810) < 1e-4);
}

TEST_CASE("edge values: batch_norm's running variance of a channel with NaN is NaN") {
  Tensor rm = zeros({2}), rv = ones({2});
  F::batch_norm(from_vector({kNan, 1, 1, 2}, {2, 2}), rm, rv, {}, {}, true);
  CHECK_SAME(values(rm), {kNan, 0.15});
  CHECK_SAME(values(rv), {kNan, 0.95});  // a NaN variance is not clamped to 0
}

TEST_CASE("edge values: integer sums wrap around as PyTorch's do, never overflow undefined") {
  Tensor x = from_vector({1, 2}, {2}, DType::I64);
  x.data<int64_t>()[0] = std::numeric_limits<int64_t>::max();
  CHECK(sum(x).item<int64_t>() == std::numeric_limits<int64_t>::min() + 1);
  Tensor y = from_vector({-1, -2}, {2}, DType::I64);
  y.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  CHECK(sum(y).item<int64_t>() == std::numeric_limits<int64_t>::max() - 1);
}

TEST_CASE("edge values: a negative value filled into U8 wraps through int64, as before, with no undefined conversion") {
  // Note [Scalars into integer dtypes] (kernels/functors.h): found by the clang UBSan build.
  const Tensor x = zeros({4}, DType::U8);
  const Tensor mask = from_vector({1, 0, 1, 0}, {4}, DType::Bool);
  CHECK(masked_fill(x, mask, -7).to_vector<int64_t>() == std::vector<int64_t>{249, 0, 249, 0});
  CHECK(full({3}, -7, DType::U8).to_vector<int64_t>() == std::vector<int64_t>{249, 249, 249});
  CHECK(full({2}, -7, DType::I8).to_vector<int64_t>() == std::vector<int64_t>{-7, -7});
  CHECK(full({2}, 300, DType::U8).to_vector<int64_t>() == std::vector<int64_t>{44, 44});
}

TEST_CASE("edge values: reductions and convs of inputs without elements read nothing") {
  // Offsets into an empty input's null data were undefined behaviour (clang UBSan build).
  const Tensor x = zeros({2, 0, 3});
  CHECK(equal(sum(x, {1}), zeros({2, 3})));
  CHECK(equal(logsumexp(x, {1}), full({2, 3}, -INFINITY)));
  const Tensor img = zeros({2, 0, 5, 5}), w = zeros({3, 0, 3, 3}), b = full({3}, 0.5);
  CHECK(equal(nn::functional::conv2d(img, w, b, {1, 1}, {1, 1}, {1, 1}, 1), full({2, 3, 5, 5}, 0.5)));
  // The same on 2x2 planes (the batch-folded path) with gradients.
  const Tensor small = leaf_of(zeros({2, 0, 2, 2})), ws = leaf_of(zeros({3, 0, 3, 3})), bs = leaf_of(full({3}, 0.5));
  const Tensor y = nn::functional::conv2d(small, ws, bs, {1, 1}, {1, 1}, {1, 1}, 1);
  CHECK(equal(y, full({2, 3, 2, 2}, 0.5)));
  y.sum().backward();
  CHECK(small.grad().sizes() == Shape{2, 0, 2, 2});
  CHECK(ws.grad().sizes() == Shape{3, 0, 3, 3});
  CHECK(equal(bs.grad(), full({3}, 8.0)));
}

TEST_CASE("edge values: add and sub with alpha round once, as PyTorch (-inf + 2.5 * 3e38 is -inf)") {
  // Without an FMA the product overflowed to inf first and gave inf - inf = NaN (BRISK_NATIVE=OFF).
  const Tensor a = from_vector({-INFINITY, 1.0}, {2}), b = from_vector({3e38, 3e38}, {2});
  const std::vector<float> added = add(a, b, 2.5).to_vector<float>();
  CHECK(added[0] == -INFINITY);
  CHECK(added[1] == INFINITY);
  CHECK(sub(a, b, -3).to_vector<float>()[0] == -INFINITY);
}

// set_flush_denormal (engine/threads.h), as torch.set_flush_denormal: 2^20 subnormal F32 values
// times 1 become zeros on every kernel thread (the product runs on all of them at this size),
// and stay themselves once it is off again.
TEST_CASE("edge values: set_flush_denormal flushes subnormals to zero on the kernel threads, and back") {
  const float tiny = 1e-39f;  // below F32's smallest normal, 1.18e-38
  const Tensor x = full({1 << 20}, double(tiny), DType::F32);
  REQUIRE(x.to_vector<float>()[0] == tiny);
  if (!set_flush_denormal(true)) return;  // not an x86 CPU: nothing to flush with
  const Tensor flushed = x * 1.0;
  set_flush_denormal(false);
  const Tensor kept = x * 1.0;
  const std::vector<float> f = flushed.to_vector<float>(), k = kept.to_vector<float>();
  CHECK(std::all_of(f.begin(), f.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(k.begin(), k.end(), [tiny](float v) { return v == tiny; }));
}

// rms_norm (PyTorch 2.4+, so not in tests/data/edge's PyTorch 1.13 data) at edge rows, values
// and gradients against its definition x * rsqrt(mean(x^2) + eps) * w written with ops (what
// torch.nn.functional.rms_norm computes): a zero row (rstd = 1 / sqrt(eps)), a NaN, +-inf (rstd
// 0, so inf * 0 = NaN where x is infinite and 0 elsewhere), an empty batch.
TEST_CASE("edge values: rms_norm at zero, NaN and infinite rows, values and gradients, as its definition") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const Tensor x0 =
      from_vector(std::vector<double>{0, 0, 0, nan, 1, 2, inf, 1, -2, -inf, 3, 0.5, 1, -1, 2}, {5, 3}, DType::F32);
  const Tensor w0 = from_vector(std::vector<double>{0.5, -1, 2}, {3}, DType::F32);
  const Tensor gy =
      from_vector(std::vector<double>{1, -2, 3, 0.5, 1, 1, 1, 2, -1, 1, 1, 1, -1, 0.25, 2}, {5, 3}, DType::F32);
  const double eps = 1e-5;
  Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  Tensor y = rms_norm(x, {3}, w, eps);
  y.backward(gy);
  Tensor xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_();
  Tensor yr = xr * rsqrt(mean(xr * xr, {1}, true) + eps) * wr;
  yr.backward(gy);
  auto same = [](const Tensor& a, const Tensor& b) {
    const std::vector<float> u = a.to_vector<float>(), v = b.to_vector<float>();
    for (size_t i = 0; i < u.size(); ++i) {
      const bool ok = std::isnan(v[i]) ? std::isnan(u[i]) : std::fabs(u[i] - v[i]) <= 1e-5f * (1 + std::fabs(v[i]));
      if (!ok) return false;
    }
    return u.size() == v.size();
  };
  CHECK(same(y.detach(), yr.detach()));
  CHECK(same(x.grad(), xr.grad()));
  // The weight's gradient sums over rows, so the NaN rows make it NaN in both.
  CHECK(same(w.grad(), wr.grad()));
  // No rows: empty outputs and a zero weight gradient.
  Tensor e = zeros({0, 3}).requires_grad_(), we = ones({3}).requires_grad_();
  Tensor ye = rms_norm(e, {3}, we);
  CHECK(ye.sizes() == Shape{0, 3});
  ye.sum().backward();
  CHECK(we.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
}
