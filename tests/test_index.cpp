// tests/test_index.cpp: the index ops beyond the spec table: error messages (bad indices,
// mismatched cat shapes), I32 indices, cat of many tensors, embedding's accumulated gradient,
// and scatter-adds that give the same bits on one and two OpenMP threads.
// Not here: forward references and gradchecks (opcheck/specs_index.cpp).
#include <doctest/doctest.h>
#include <omp.h>

#include <string>

#include "brisk.h"
#include "test_util.h"

using namespace brisk;

namespace {

Tensor ints(const std::vector<double>& v, const Shape& s, DType t = DType::I64) { return from_vector(v, s, t); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("index ops: an out-of-range index is an error naming the op, the index and the size") {
  Tensor x = ones({3, 2});
  std::string e = test::error_text([&] { index_select(x, 0, ints({0, 3}, {2})); });
  CHECK(contains(e, "index_select"));
  CHECK(contains(e, "index 3"));
  CHECK(contains(e, "size 3"));
  e = test::error_text([&] { gather(x, 1, ints({0, -1}, {1, 2})); });
  CHECK(contains(e, "gather"));
  CHECK(contains(e, "index -1"));
  CHECK(contains(e, "size 2"));
  e = test::error_text([&] { index_add(x, -1, ints({2}, {1}), ones({3, 1})); });
  CHECK(contains(e, "index_add"));
  CHECK(contains(e, "index 2"));
  e = test::error_text([&] { scatter_add(x, 0, ints({5}, {1, 1}), ones({1, 1})); });
  CHECK(contains(e, "scatter_add"));
  CHECK(contains(e, "index 5"));
  e = test::error_text([&] { embedding(ones({4, 2}), ints({4}, {1})); });
  CHECK(contains(e, "index 4"));
}

TEST_CASE("index ops: shape and dtype errors name the offending tensor") {
  std::string e = test::error_text([] { cat({ones({2, 3}), ones({2, 3}), ones({3, 4})}, 1); });
  CHECK(contains(e, "cat"));
  CHECK(contains(e, "tensor 2"));
  CHECK(contains(e, "(3, 4)"));
  e = test::error_text([] { cat({ones({2, 3}), ones({})}, 0); });
  CHECK(contains(e, "0-dim"));
  e = test::error_text([] { cat({ones({2, 3})}, 2); });
  CHECK(contains(e, "dim 2"));
  e = test::error_text([] { stack({ones({2}), ones({3})}, 0); });
  CHECK(contains(e, "tensor 1"));
  e = test::error_text([] { index_select(ones({3}), 0, ones({2})); });
  CHECK(contains(e, "I64"));
  e = test::error_text([] { gather(ones({3, 2}), 0, ints({0, 1}, {2})); });
  CHECK(contains(e, "gather"));
  e = test::error_text([] { index_add(ones({3, 2}), 0, ints({0, 1}, {2}), ones({2, 3})); });
  CHECK(contains(e, "source"));
}

TEST_CASE("index ops: I32 indices give the same results as I64") {
  Tensor x = arange(0.0, 12.0, 1.0, DType::F32).view({4, 3});
  Tensor i64 = ints({3, 0, 3}, {3});
  Tensor i32 = ints({3, 0, 3}, {3}, DType::I32);
  CHECK(equal(index_select(x, 0, i32), index_select(x, 0, i64)));
  Tensor g64 = ints({2, 0, 1, 1}, {2, 2});
  Tensor g32 = ints({2, 0, 1, 1}, {2, 2}, DType::I32);
  CHECK(equal(gather(x, 1, g32), gather(x, 1, g64)));
  CHECK(equal(scatter_add(x, 1, g32, ones({2, 2})), scatter_add(x, 1, g64, ones({2, 2}))));
  CHECK(equal(index_add(x, 0, i32, ones({3, 3})), index_add(x, 0, i64, ones({3, 3}))));
}

TEST_CASE("index ops: cat promotes dtypes and takes more than 32 tensors with their gradients") {
  CHECK(cat({ones({2}), ones({1}, DType::F64)}, 0).dtype() == DType::F64);
  std::vector<Tensor> parts;
  for (int k = 0; k < 40; ++k) parts.push_back(full({2}, double(k)).requires_grad_());
  Tensor s = stack(parts, 0);
  CHECK(s.sizes() == Shape{40, 2});
  std::vector<double> v = s.to_vector<double>();
  for (int k = 0; k < 40; ++k) CHECK(v[size_t(2 * k + 1)] == k);
  Tensor w = arange(0.0, 80.0, 1.0, DType::F32).view({40, 2});
  s.backward(w);
  for (int k = 0; k < 40; ++k) {
    std::vector<double> want = {2.0 * k, 2.0 * k + 1};
    CHECK(parts[size_t(k)].grad().to_vector<double>() == want);
  }
}

TEST_CASE("index ops: embedding's gradient sums the rows of repeated indices") {
  Tensor weight = zeros({4, 2}).requires_grad_();
  Tensor out = embedding(weight, ints({1, 1, 3, 1}, {2, 2}));
  CHECK(out.sizes() == Shape{2, 2, 2});
  out.backward(ones({2, 2, 2}));
  CHECK(weight.grad().to_vector<double>() == std::vector<double>{0, 0, 3, 3, 0, 0, 1, 1});
}

TEST_CASE("index ops: scatter-adds with repeated indices give the same bits on 1 and 2 threads") {
  // Many sources land on few rows, so the order of the float sums matters.
  const int64_t n = 100000;
  Generator g(3);
  Tensor src = uniform({n, 8}, -1, 1, DType::F32, Device::cpu(), &g);
  Tensor rows = randint(0, 50, {n}, DType::I64, Device::cpu(), &g);
  Tensor cols = randint(0, 8, {n, 8}, DType::I64, Device::cpu(), &g);
  auto run = [&](int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<Tensor> out;
    out.push_back(index_add(zeros({50, 8}), 0, rows, src));
    out.push_back(scatter_add(zeros({n, 8}), 1, cols, src));
    out.push_back(index_select(src, 0, rows));
    out.push_back(gather(src, 1, cols));
    omp_set_num_threads(before);
    return out;
  };
  std::vector<Tensor> one = run(1);
  std::vector<Tensor> two = run(2);
  for (size_t k = 0; k < one.size(); ++k) CHECK_MESSAGE(equal(one[k], two[k]), "output ", k);
  // And the row sums are right (to float rounding).
  std::vector<double> s = src.to_vector<double>();
  std::vector<int64_t> r = rows.to_vector<int64_t>();
  std::vector<double> want(50 * 8, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < 8; ++c) want[size_t(r[size_t(i)] * 8 + c)] += s[size_t(i * 8 + c)];
  }
  CHECK(allclose(one[0], from_vector(want, {50, 8}), 1e-4, 1e-3));
}
