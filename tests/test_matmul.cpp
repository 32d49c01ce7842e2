// tests/test_matmul.cpp: what the matmul specs (opcheck/specs_linalg.cpp) do not express: the
// error messages, autocast, the low-level gemm() (column-major output, accumulate) and which
// operand layouts are read in place. Not here: speed (examples/bench/bench_matmul.cpp).
#include <doctest/doctest.h>

#include "engine/allocator.h"
#include "kernels/cpu/gemm.h"
#include "opcheck/spec.h"

using namespace brisk;

TEST_CASE("matmul: a shape mismatch names the op and both shapes") {
  CHECK_THROWS_WITH_AS(matmul(ones({2, 3}), ones({4, 5})), "matmul: shape mismatch (2, 3) @ (4, 5)", Error);
  CHECK_THROWS_WITH_AS(matmul(ones({3}), ones({4})), "matmul: shape mismatch (3) @ (4)", Error);
  CHECK_THROWS_WITH_AS(matmul(ones({2, 3}), ones({4})), "matmul: shape mismatch (2, 3) @ (4)", Error);
  CHECK_THROWS_WITH_AS(matmul(ones({2, 3, 4}), ones({3, 4, 5})),
                       "matmul: batch dims do not broadcast (2, 3, 4) @ (3, 4, 5)", Error);
  CHECK_THROWS_WITH_AS(matmul(ones({}), ones({3})), "matmul: both operands need at least 1 dim, got () @ (3)", Error);
}

TEST_CASE("matmul: operands of different dtypes are an error") {
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({3, 2}, DType::F64)), Error);
  CHECK_THROWS_AS(matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)), Error);
}

TEST_CASE("matmul: autocast computes in the lower dtype, and backward reaches the F32 inputs") {
  Tensor a = opcheck::uniform_values({3, 4}, -1, 1, 1, DType::F32).requires_grad_();
  Tensor b = opcheck::uniform_values({4, 2}, -1, 1, 2, DType::F32).requires_grad_();
  Tensor y;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    y = matmul(a, b);
  }
  CHECK(y.dtype() == DType::BF16);
  CHECK(allclose(cast(y, DType::F32), matmul(a, b), 3e-2, 3e-2));
  y.backward(ones({3, 2}, DType::BF16));
  REQUIRE(a.grad().defined());
  CHECK(a.grad().dtype() == DType::F32);
  CHECK(b.grad().sizes() == Shape{4, 2});
}

TEST_CASE("gemm: column-major output and accumulate match a plain loop") {
  using kernels::cpu::MatrixRef;
  const int64_t m = 37, n = 29, k = 53;
  std::vector<double> a = opcheck::uniform_values({m, k}, -1, 1, 1).to_vector<double>();
  std::vector<double> b = opcheck::uniform_values({k, n}, -1, 1, 2).to_vector<double>();
  // a: (m, k) and b: (k, n) row-major; c: (m, n) column-major, starting at 1.
  std::vector<double> c(size_t(m * n), 1.0);
  kernels::cpu::gemm<double>(MatrixRef<const double>{a.data(), m, k, k, 1},
                             MatrixRef<const double>{b.data(), k, n, n, 1}, MatrixRef<double>{c.data(), m, n, 1, m},
                             /*accumulate=*/true);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 1.0;
      for (int64_t p = 0; p < k; ++p) want += a[size_t(i * k + p)] * b[size_t(p * n + j)];
      worst = std::max(worst, std::abs(c[size_t(i + j * m)] - want));
    }
  }
  CHECK(worst < 1e-12);
}

TEST_CASE("matmul: a transposed operand is read in place, a strided one is copied") {
  // Nothing but the output may come from the allocator when the operand has a unit stride.
  Tensor a = opcheck::uniform_values({64, 32}, -1, 1, 1, DType::F32);
  Tensor b = opcheck::uniform_values({64, 48}, -1, 1, 2, DType::F32);
  Allocator& alloc = cpu_allocator();
  auto extra_bytes = [&](const Tensor& x, const Tensor& y) {
    matmul(x, y);  // warm this thread's workspace
    alloc.reset_peak();
    const size_t before = alloc.stats().allocated;
    Tensor out = matmul(x, y);
    return alloc.stats().peak - before - CachingAllocator::round_size(size_t(out.numel()) * out.element_size());
  };
  CHECK(extra_bytes(transpose(a, 0, 1), b) == 0);
  CHECK(extra_bytes(transpose(a, 0, 1), opcheck::noncontiguous(b)) > 0);
}

TEST_CASE("matmul: an empty inner dim gives zeros, batched too (no offset of an empty input's null data)") {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor a = zeros({2, 3, 0}, dt).requires_grad_(true), b = zeros({2, 0, 4}, dt).requires_grad_(true);
    const Tensor c = matmul(a, b);
    CHECK(c.sizes() == Shape{2, 3, 4});
    CHECK(abs(c).sum().item<double>() == 0);
    c.sum().backward();
    CHECK(a.grad().sizes() == a.sizes());
    CHECK(b.grad().sizes() == b.sizes());
    CHECK(matmul(zeros({0, 3, 5}, dt), zeros({0, 5, 2}, dt)).sizes() == Shape{0, 3, 2});
  }
}
