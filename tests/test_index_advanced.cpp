// tests/test_index_advanced.cpp: several tensor indices in one index() call, as PyTorch 1.13
// indexes (the expected shapes and values below were printed by PyTorch for the same
// arange inputs): pairwise picking with broadcasting, the result dims in place when the indexed
// dims are adjacent and first when they are not, integers applied as select first (PyTorch's
// rule, not NumPy's), Bool masks as their nonzero columns beside integer tensors; index_put
// with two tensors; gradients; errors.
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/gradcheck.h"
#include "engine/indexing.h"

using namespace brisk;
using namespace brisk::indexing;

namespace {

Tensor ids(std::vector<double> v, Shape s = {}) {
  Shape shape = s.size() ? s : Shape{int64_t(v.size())};
  return from_vector(v, shape, DType::I64);
}

void expect(const Tensor& got, const Shape& shape, const std::vector<int64_t>& values) {
  CHECK(got.sizes() == shape);
  CHECK(got.to_vector<int64_t>() == values);
}

}  // namespace

TEST_CASE("index: several tensor indices, as PyTorch") {
  Tensor x = reshape(arange(24, DType::I64), {2, 3, 4});
  expect(x.index({ids({0, 1}), ids({1, 2})}), {2, 4}, {4, 5, 6, 7, 20, 21, 22, 23});
  expect(x.index({Slice(), ids({0, 2}), ids({1, 3})}), {2, 2}, {1, 11, 13, 23});
  expect(x.index({ids({0, 1}), Slice(), ids({1, 3})}), {2, 3}, {1, 5, 9, 15, 19, 23});  // apart: first
  expect(x.index({ids({0, 1}, {2, 1}), ids({0, 1, 2})}), {2, 3, 4},
         {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  Tensor mask = from_vector({1, 0, 1, 0, 1, 0}, {2, 3}, DType::Bool);
  expect(x.index({mask, ids({0, 3, 1})}), {3}, {0, 11, 17});
  expect(x.index({1, ids({0, 2}), Slice(1, 3)}), {2, 2}, {13, 14, 21, 22});
  expect(x.index({ids({1, 0}), 2, ids({3, 0})}), {2}, {23, 8});
  expect(x.index({None, ids({0, 1}), Ellipsis, ids({2, 3})}), {2, 1, 3}, {2, 6, 10, 15, 19, 23});

  // Integers select first: PyTorch gives (5, 2, 4) where NumPy gives (2, 5, 4).
  Tensor y = reshape(arange(5 * 3 * 4 * 6, DType::I64), {5, 3, 4, 6});
  CHECK(y.index({Slice(), ids({0, 1}), Slice(), 2}).sizes() == Shape{5, 2, 4});
  CHECK(y.index({1, Slice(), ids({0, 1})}).sizes() == Shape{3, 2, 6});
  CHECK(y.index({Slice(), 1, Slice(), ids({0, 2, 3})}).sizes() == Shape{5, 4, 3});
  // True at (0, 1) and (2, 3).
  Tensor m = from_vector({0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {3, 4}, DType::Bool);
  CHECK(y.index({Slice(), m}).sizes() == Shape{5, 2, 6});
  Tensor z = reshape(arange(2 * 3 * 4 * 5, DType::I64), {2, 3, 4, 5});
  expect(z.index({ids({0, 1}), m}), {2, 5}, {5, 6, 7, 8, 9, 115, 116, 117, 118, 119});
}

TEST_CASE("index: index_put and gradients with several tensor indices") {
  Tensor x = zeros({2, 3, 4});
  Tensor put = index_put(x, {ids({0, 1}), ids({1, 2})}, from_vector({1, 2, 3, 4}, {4}));
  std::vector<double> v = put.to_vector<double>();
  for (int i = 0; i < 24; ++i) {
    const bool hit = (i >= 4 && i < 8) || i >= 20;
    CHECK((v[size_t(i)] != 0) == hit);
  }
  CHECK(v[4] == 1);
  CHECK(v[23] == 4);
  // Duplicated pairs add up with accumulate.
  Tensor acc = index_put(zeros({3, 3}), {ids({1, 1}), ids({2, 2})}, from_vector({1.5}, {1}), true);
  CHECK(acc.index({1, 2}).item<double>() == 3.0);

  Tensor a = randn({3, 4, 5}, DType::F64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    return in[0].index({ids({0, 2, 2}), Slice(), ids({4, 0, 4})});  // (3, 4), a repeated pair
  };
  CHECK(gradcheck(f, {a}));
}

TEST_CASE("index: errors with several tensor indices") {
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(x.index({ids({0, 1}), ids({0, 1, 2})}), doctest::Contains("cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(x.index({ids({0, 1}), ids({0, 3})}), doctest::Contains("out of range for dim 1"), Error);
  Tensor bad_mask = zeros({2, 4}, DType::Bool);
  CHECK_THROWS_WITH_AS(x.index({bad_mask, ids({0})}), doctest::Contains("does not match"), Error);
}
