// tests/test_ops_port.cpp: the ops a PyTorch port reaches for first, beyond what the op-spec
// table checks (opcheck/specs_scan.cpp, opcheck/specs_elementwise.cpp): exact values that PyTorch
// documents (ties, NaN order, half-to-even rounding, Python slice clipping), results that are
// not one tensor (split, sort, topk, max over a dim, nonzero, where), and the errors.
// Not here: the spec rows of these ops (opcheck/specs_scan.cpp, opcheck/specs_elementwise.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "brisk.h"
#include "engine/indexing.h"
#include "tests/test_util.h"

using namespace brisk;
using namespace brisk::indexing;
using brisk::test::error_text;

namespace {
std::vector<double> values(const Tensor& t) { return cast(t, DType::F64).to_vector<double>(); }
std::vector<int64_t> ivalues(const Tensor& t) { return t.to_vector<int64_t>(); }
Tensor vec(std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, DType::F32); }
}  // namespace

TEST_CASE("ops port: split, chunk, unbind are views with PyTorch's piece sizes") {
  Tensor x = arange(10, DType::F32).reshape({2, 5});
  auto p = split(x, 2, 1);  // 2, 2, 1
  REQUIRE(p.size() == 3);
  CHECK(p[2].sizes() == Shape{2, 1});
  CHECK(values(p[1]) == std::vector<double>{2, 3, 7, 8});
  auto c = chunk(x, 3, 1);  // ceil(5 / 3) = 2: pieces 2, 2, 1
  CHECK(c.size() == 3);
  auto c6 = chunk(arange(6), 4, 0);  // ceil(6 / 4) = 2: three pieces, as torch.chunk
  CHECK(c6.size() == 3);
  auto u = unbind(x, 1);
  CHECK(u.size() == 5);
  CHECK(values(u[4]) == std::vector<double>{4, 9});
  p[0].mul_(0.0);  // a view: writes through to x
  CHECK(values(x)[0] == 0);
  CHECK(values(narrow(x, 1, -2, 2)) == std::vector<double>{3, 4, 8, 9});
  CHECK(error_text([&] {
          split(x, std::vector<int64_t>{2, 2}, 1);
        }).find("sizes add up to 4 but dim 1 has size 5") != std::string::npos);
  CHECK(error_text([&] { split(x, 0, 1); }).find("split_size must be positive") != std::string::npos);
  CHECK(error_text([&] { chunk(x, 0); }).find("chunks must be positive") != std::string::npos);
}

TEST_CASE("ops port: index with integers, slices, None, Ellipsis, masks and integer tensors") {
  Tensor x = arange(24, DType::F32).reshape({2, 3, 4});
  CHECK(x.index({1, 2, 3}).item<float>() == 23);
  CHECK(x.index({Ellipsis, 0}).sizes() == Shape{2, 3});
  CHECK(values(x.index({Ellipsis, 0}).reshape({-1})) == std::vector<double>{0, 4, 8, 12, 16, 20});
  CHECK(x.index({None, Slice(), 1}).sizes() == Shape{1, 2, 4});
  CHECK(x.index({Slice(-1, std::nullopt), Slice(0, 100), Slice(std::nullopt, std::nullopt, 3)}).sizes() ==
        Shape{1, 3, 2});  // Python clipping of out-of-range stops
  CHECK(values(x.index({0, -1, Slice(1, 3)})) == std::vector<double>{9, 10});
  Tensor mask = gt(x, full({}, 20.0));
  CHECK(values(x.index({mask})) == std::vector<double>{21, 22, 23});
  Tensor row_mask = from_vector({1, 0, 1}, {3}, DType::Bool);
  CHECK(x.index({Slice(), row_mask}).sizes() == Shape{2, 2, 4});
  Tensor idx = from_vector({2, -1, 0}, {3}, DType::I64);  // negative counts from the end
  CHECK(values(x.index({0, 0, idx})) == std::vector<double>{2, 3, 0});
  CHECK(x.index({Slice(), from_vector({0, 1, 2, 0}, {2, 2}, DType::I64)}).sizes() == Shape{2, 2, 2, 4});
  // Gradients flow back to the indexed elements only.
  Tensor w = ones({3, 4}).requires_grad_();
  w.index({from_vector({0, 0, 2}, {3}, DType::I64)}).sum().backward();
  CHECK(values(w.grad().sum({1})) == std::vector<double>{8, 0, 4});
  CHECK(error_text([&] { x.index({5}); }).find("index 5 is out of range for dim 0 of size 2") != std::string::npos);
  CHECK(error_text([&] { x.index({0, 0, 0, 0}); }).find("too many indices") != std::string::npos);
  CHECK(error_text([&] { x.index({Ellipsis, Ellipsis}); }).find("at most one Ellipsis") != std::string::npos);
  // Several tensor indices pair up (tests/test_index_advanced.cpp); idx's 2 is past dim 0's size.
  CHECK(error_text([&] { x.index({idx, idx}); }).find("out of range for dim 0 of size 2") != std::string::npos);
  CHECK(error_text([&] {
          x.index({0, 0, from_vector({4}, {1}, DType::I64)});
        }).find("out of range for dim 0 of size 4") != std::string::npos);
  CHECK(error_text([&] {
          x.index({from_vector({1, 0}, {2}, DType::Bool), from_vector({1}, {1}, DType::Bool)});
        }).find("does not match dims 1..1") != std::string::npos);
  CHECK(error_text([&] {
          x.index({Slice(), from_vector({1, 0}, {2}, DType::Bool)});
        }).find("does not match dims") != std::string::npos);
}

TEST_CASE("ops port: index_put and index_put_ replace or accumulate, with gradients for x and values") {
  Tensor x = zeros({2, 3});
  x.index_put_({Slice(), 1}, 5.0);
  CHECK(values(x) == std::vector<double>{0, 5, 0, 0, 5, 0});
  x.index_put_({gt(x, full({}, 1.0))}, from_vector({7, 8}, {2}));
  CHECK(values(x) == std::vector<double>{0, 7, 0, 0, 8, 0});
  Tensor idx = from_vector({0, 0}, {2}, DType::I64);
  Tensor acc = index_put(zeros({3}), {idx}, from_vector({1, 2}, {2}), true);
  CHECK(values(acc) == std::vector<double>{3, 0, 0});
  CHECK(error_text([&] {
          index_put(zeros({3}), {idx}, from_vector({1, 2}, {2}));
        }).find("more than once") != std::string::npos);
  Tensor a = ones({3}).requires_grad_();
  Tensor v = full({1}, 2.0).requires_grad_();
  (index_put(a, {from_vector({1}, {1}, DType::I64)}, v) * from_vector({1, 10, 100}, {3})).sum().backward();
  CHECK(values(a.grad()) == std::vector<double>{1, 0, 100});  // the overwritten element gets none
  CHECK(values(v.grad()) == std::vector<double>{10});
}

TEST_CASE("ops port: nonzero, where(cond), masked_select, one_hot, any/all, isnan/isinf/isfinite") {
  Tensor x = from_vector({0, 1, 0, 2, 0, 3}, {2, 3});
  CHECK(ivalues(nonzero(x)) == std::vector<int64_t>{0, 1, 1, 0, 1, 2});
  CHECK(nonzero(zeros({2, 0})).sizes() == Shape{0, 2});
  auto w = where(x);
  REQUIRE(w.size() == 2);
  CHECK(ivalues(w[1]) == std::vector<int64_t>{1, 0, 2});
  CHECK(values(masked_select(x, gt(x, full({}, 1.5)))) == std::vector<double>{2, 3});
  CHECK(values(masked_select(x, from_vector({1, 0, 1}, {3}, DType::Bool))) == std::vector<double>{0, 0, 2, 3});
  CHECK(ivalues(one_hot(from_vector({2, 0}, {2}, DType::I64))) == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
  CHECK(one_hot(from_vector({1}, {1}, DType::I64), 4).sizes() == Shape{1, 4});
  CHECK(error_text([] { one_hot(from_vector({3}, {1}, DType::I64), 3); }).find("out of range for num_classes 3") !=
        std::string::npos);
  CHECK(error_text([] { one_hot(from_vector({-1}, {1}, DType::I64)); }).find("non-negative") != std::string::npos);
  CHECK(error_text([] { one_hot(ones({2})); }).find("expects an I64 tensor") != std::string::npos);
  CHECK(any(x).item<bool>());
  CHECK_FALSE(all(x).item<bool>());
  CHECK(ivalues(cast(all(x, 0), DType::I64)) == std::vector<int64_t>{0, 0, 0});
  CHECK(ivalues(cast(any(x, 1), DType::I64)) == std::vector<int64_t>{1, 1});
  CHECK(all(zeros({0})).item<bool>());  // vacuous truth, as torch.all
  CHECK_FALSE(any(zeros({0})).item<bool>());
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor s = from_vector({1, inf, -inf, nan}, {4});
  CHECK(ivalues(cast(isnan(s), DType::I64)) == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(ivalues(cast(isinf(s), DType::I64)) == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(ivalues(cast(isfinite(s), DType::I64)) == std::vector<int64_t>{1, 0, 0, 0});
  CHECK(ivalues(cast(isfinite(arange(3)), DType::I64)) == std::vector<int64_t>{1, 1, 1});
}

TEST_CASE("ops port: sort and topk are stable, put NaN last, return indices; max/min over a dim") {
  const double nan = std::nan("");
  Tensor x = vec({3, 1, nan, 1, 2});
  SortResult s = sort(x);
  CHECK(ivalues(s.indices) == std::vector<int64_t>{1, 3, 4, 0, 2});  // ties keep their order, NaN last
  CHECK(std::isnan(values(s.values)[4]));
  CHECK(ivalues(sort(x, 0, true).indices) == std::vector<int64_t>{2, 0, 4, 1, 3});  // NaN first when descending
  SortResult t = topk(vec({5, 9, 1, 9}), 2);
  CHECK(values(t.values) == std::vector<double>{9, 9});
  CHECK(ivalues(t.indices) == std::vector<int64_t>{1, 3});
  CHECK(ivalues(topk(vec({5, 9, 1}), 2, 0, false).indices) == std::vector<int64_t>{2, 0});
  CHECK(error_text([] { topk(vec({1, 2}), 3); }).find("k = 3 is out of range") != std::string::npos);
  Tensor m = from_vector({1, 7, 7, 0, -2, -2}, {2, 3});
  SortResult mx = max(m, 1);
  CHECK(values(mx.values) == std::vector<double>{7, 0});
  CHECK(ivalues(mx.indices) == std::vector<int64_t>{1, 0});  // the first maximum, as PyTorch
  CHECK(ivalues(min(m, 1, true).indices) == std::vector<int64_t>{0, 1});
  CHECK(min(m, 1, true).values.sizes() == Shape{2, 1});
  Tensor g = from_vector({1, 7, 3}, {3}).requires_grad_();
  max(g, 0).values.backward();
  CHECK(values(g.grad()) == std::vector<double>{0, 1, 0});
  CHECK(ivalues(cumsum(from_vector({1, 1, 0, 1}, {4}, DType::Bool), 0)) == std::vector<int64_t>{1, 2, 2, 3});
  CHECK(cumsum(arange(4, DType::I32), 0).dtype() == DType::I64);
  CHECK(values(prod(from_vector({2, 3, 4}, {3}))) == std::vector<double>{24});
  CHECK(values(prod(zeros({0}))) == std::vector<double>{1});
  Tensor z = from_vector({2, 0, 4}, {3}).requires_grad_();
  CHECK(error_text([&] { cumprod(z, 0).sum().backward(); }).find("cumprod backward: the input has zeros") !=
        std::string::npos);
}

TEST_CASE("ops port: elementwise breadth at PyTorch's edge values") {
  // round is half to even; floor/ceil/trunc on negatives; integer tensors are copied unchanged.
  CHECK(values(round(vec({0.5, 1.5, 2.5, -0.5, -1.5}))) == std::vector<double>{0, 2, 2, -0, -2});
  CHECK(values(floor(vec({-1.5, 1.5}))) == std::vector<double>{-2, 1});
  CHECK(values(ceil(vec({-1.5, 1.5}))) == std::vector<double>{-1, 2});
  CHECK(values(trunc(vec({-1.5, 1.5}))) == std::vector<double>{-1, 1});
  CHECK(round(arange(3)).dtype() == DType::I64);
  CHECK(values(hardswish(vec({-4, -3, 0, 3, 4}))) == std::vector<double>{0, 0, 0, 3, 4});
  CHECK(values(hardsigmoid(vec({-3, 0, 3}))) == std::vector<double>{0, 0.5, 1});
  Tensor h = vec({-3, 3}).requires_grad_();
  hardswish(h).sum().backward();  // PyTorch's hardswish_backward: x / 3 + 1/2 on [-3, 3]
  CHECK(values(h.grad()) == std::vector<double>{-0.5, 1.5});
  CHECK(values(leaky_relu(vec({-2, 3}))) == std::vector<double>{-0.019999999552965164, 3});
  CHECK(std::isnan(values(leaky_relu(vec({std::nan("")})))[0]));
  CHECK(values(log1p(vec({0}))) == std::vector<double>{0});
  CHECK(std::fabs(values(expm1(vec({1e-7})))[0] - 1e-7) < 1e-12);
  CHECK(sin(arange(3)).dtype() == DType::F32);  // integer inputs compute in F32, as PyTorch
  CHECK(error_text([] { eye(-1); }).find("n must be non-negative") != std::string::npos);
  CHECK(values(eye(2, 3)) == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(values(linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(values(linspace(2, 2, 1)) == std::vector<double>{2});
  CHECK(rand_like(zeros({2, 3}, DType::F64)).dtype() == DType::F64);
}

TEST_CASE("ops port: shape construction, einsum and batched products check their arguments") {
  Tensor x = arange(6, DType::F32).reshape({2, 3});
  CHECK(values(roll(x, 1, 1)) == std::vector<double>{2, 0, 1, 5, 3, 4});
  CHECK(values(roll(x, -4, 1)) == values(roll(x, 2, 1)));
  CHECK(tile(x, {2}).sizes() == Shape{2, 6});  // short reps get leading 1s
  CHECK(repeat(x, {2, 1, 1}).sizes() == Shape{2, 2, 3});
  CHECK(error_text([&] { repeat(x, {2}); }).find("at least as many") != std::string::npos);
  CHECK(values(flip(x, {1})) == std::vector<double>{2, 1, 0, 5, 4, 3});
  CHECK(values(triu(ones({3, 3}), 1)) == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(error_text([] { tril(ones({3})); }).find("at least 2 dims") != std::string::npos);
  CHECK(values(einsum("i,i->", {vec({1, 2}), vec({3, 4})})) == std::vector<double>{11});
  CHECK(einsum("ij->ji", {x}).sizes() == Shape{3, 2});
  CHECK(error_text([&] { einsum("ii->i", {ones({2, 2})}); }).find("repeats within one operand") != std::string::npos);
  CHECK(error_text([&] { einsum("ij,jk->ik", {x}); }).find("2 operand term(s) but 1 operand(s)") != std::string::npos);
  CHECK(error_text([&] { einsum("ijk->i", {x}); }).find("has 2 dims but its term") != std::string::npos);
  CHECK(error_text([&] {
          einsum("ij,jk->ik", {x, ones({4, 2})});
        }).find("letter 'j' has size 3 and 4") != std::string::npos);
  CHECK(error_text([&] { einsum("ij->q", {x}); }).find("output letter 'q' is in no operand") != std::string::npos);
  CHECK(error_text([&] { bmm(x, x); }).find("bmm: expects (B, n, k) and (B, k, m)") != std::string::npos);
  CHECK(values(addmm(zeros({2, 2}), x, x.transpose(0, 1), 0.0, 1.0)) == std::vector<double>{5, 14, 14, 50});
  CHECK(error_text([&] { outer(x, x); }).find("outer: expects two vectors") != std::string::npos);
}

TEST_CASE("ops port: scans and sorts at PyTorch's edge values: empty, NaN, inf, k = 0, huge repeats") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // Empty tensors keep their shape; topk with k = 0 is empty; prod of nothing is 1.
  CHECK(cumsum(zeros({0, 3}), 0).sizes() == Shape{0, 3});
  CHECK(cumprod(zeros({2, 0}), 1).sizes() == Shape{2, 0});
  CHECK(argsort(zeros({0})).sizes() == Shape{0});
  CHECK(topk(vec({1, 2}), 0).values.sizes() == Shape{0});
  CHECK(values(prod(zeros({2, 0}), 1)) == std::vector<double>{1, 1});
  // NaN propagates through a scan from where it appears; inf - inf inside a sum is NaN.
  std::vector<double> c = values(cumsum(vec({1, nan, 2}), 0));
  CHECK(c[0] == 1);
  CHECK(std::isnan(c[1]));
  CHECK(std::isnan(c[2]));
  std::vector<double> ci = values(cumsum(vec({inf, -inf}), 0));
  CHECK(ci[0] == inf);
  CHECK(std::isnan(ci[1]));
  CHECK(values(cumprod(vec({2, 0, 3}), 0)) == std::vector<double>{2, 0, 0});
  // -inf and inf sort to the ends, NaN after inf; -0 and 0 are equal (stable: input order).
  CHECK(ivalues(argsort(vec({inf, nan, -inf, 0}))) == std::vector<int64_t>{2, 3, 0, 1});
  CHECK(ivalues(argsort(vec({0.0, -0.0, 0.0}))) == std::vector<int64_t>{0, 1, 2});
  // The gradient of sort's values goes to the element each came from.
  Tensor x = vec({3, 1, 2}).requires_grad_();
  (sort(x).values * vec({1, 10, 100})).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{100, 1, 10});
  // A repeat whose size overflows 64 bits is an error, not a wrapped size.
  CHECK(error_text([] { repeat(ones({2}), {int64_t(1) << 62}); }).find("repeat") != std::string::npos);
  CHECK(error_text([] { repeat(ones({4}), {int64_t(1) << 62}); }).find("overflows 64 bits") != std::string::npos);
}
