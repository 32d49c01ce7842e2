// tests/test_errors.cpp: misuse gives brisk::Error with a message naming the op and what was
// wrong (shapes, dtypes, device), never a crash.
#include <doctest/doctest.h>

#include "brisk.h"

using namespace brisk;

TEST_CASE("errors: shape mismatch names the op and both shapes") {
  CHECK_THROWS_WITH_AS(add(zeros({2, 3}), zeros({4})), "add: shapes (2, 3) and (4) cannot be broadcast (dim 1: 3 vs 4)",
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})), doctest::Contains("(2, 3)"), Error);
}

TEST_CASE("errors: dtype mismatch where promotion does not apply") {
  CHECK_THROWS_WITH_AS(where(zeros({2}), zeros({2}), zeros({2})), doctest::Contains("Bool"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(zeros({2}), zeros({2}), 1.0), doctest::Contains("masked_fill"), Error);
}

TEST_CASE("errors: a device that does not exist, and mixed devices") {
  bool has_cuda = find_backend(DeviceType::CUDA) && find_backend(DeviceType::CUDA)->device_count() > 0;
  if (!has_cuda) {
    CHECK_THROWS_WITH_AS(zeros({2}).to(Device::cuda()), doctest::Contains("cuda:0"), Error);
    CHECK_THROWS_AS(zeros({2}, DType::F32, Device::cuda()), Error);
  }
}

TEST_CASE("errors: bad dims and indices") {
  CHECK_THROWS_WITH_AS(zeros({2, 3}).transpose(0, 2), "transpose: dim 2 is out of range for a tensor with 2 dims", Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).select(1, 3), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).narrow(0, 1, 2), doctest::Contains("narrow"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).view({4}), doctest::Contains("view: shape (4) is invalid"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).expand({3, 3}), doctest::Contains("expand"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).permute({0, 0}), doctest::Contains("repeats"), Error);
  CHECK_THROWS_WITH_AS(index_select(zeros({3, 2}), 0, full({1}, 5, DType::I64)), doctest::Contains("5"), Error);
  CHECK_THROWS_AS(zeros({2, 3}).sum({2}), Error);
}

TEST_CASE("errors: backward of a non-scalar without a gradient") {
  Tensor x = zeros({3}).requires_grad_();
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("scalar"), Error);
  CHECK_THROWS_WITH_AS(zeros({3}).sum().backward(), doctest::Contains("does not require grad"), Error);
  CHECK_THROWS_WITH_AS(y.backward(zeros({2})), doctest::Contains("does not match"), Error);
}

TEST_CASE("errors: in-place change of a leaf that requires grad") {
  Tensor x = zeros({3}).requires_grad_();
  CHECK_THROWS_WITH_AS(x.mul_(2.0), doctest::Contains("mul_: a leaf tensor that requires grad"), Error);
  CHECK_THROWS_WITH_AS(x.zero_(), doctest::Contains("fill_"), Error);
}

TEST_CASE("errors: a missing kernel for (op, device, dtype)") {
  // Float-only math on Bool has no kernel: the error names op and dtype.
  CHECK_THROWS_WITH_AS(relu(zeros({2}, DType::Bool)), "relu: no kernel for dtype Bool", Error);
  CHECK_THROWS_WITH_AS(call1(OpId::Pow, {zeros({2}, DType::I64), zeros({2}, DType::I64)}),
                       "pow: no kernel for dtype I64 (floating dtypes only)", Error);
}

TEST_CASE("errors: item of a tensor with several elements, data<T> of the wrong dtype") {
  CHECK_THROWS_WITH_AS(zeros({2}).item<float>(), doctest::Contains("one element"), Error);
  CHECK_THROWS_WITH_AS(zeros({2}).data<double>(), doctest::Contains("F32"), Error);
  CHECK_THROWS_WITH_AS(zeros({-1}), doctest::Contains("negative"), Error);
}
