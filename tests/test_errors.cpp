// tests/test_errors.cpp: misuse gives brisk::Error with a message naming the op and what was
// wrong (shapes, dtypes, device), never a crash.
#include <doctest/doctest.h>

#include <limits>

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
  CHECK_THROWS_WITH_AS(zeros({2, 3}).transpose(0, 2), "transpose: dim 2 is out of range for a tensor with 2 dims",
                       Error);
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

TEST_CASE("errors: shapes whose element count, byte count or strides overflow 64 bits are refused") {
  // See Note [Checked sizes]: a zero dim does not excuse the others (their strides overflow).
  const int64_t big = int64_t(1) << 40;
  CHECK_THROWS_WITH_AS(empty({big, big}),
                       "empty: shape (1099511627776, 1099511627776) has more elements than fit in 64 bits", Error);
  CHECK_THROWS_WITH_AS(zeros({0, big, big}), doctest::Contains("more elements than fit in 64 bits"), Error);
  CHECK_THROWS_WITH_AS(empty({int64_t(1) << 62}, DType::F64), doctest::Contains("with 8-byte elements has more bytes"),
                       Error);
  CHECK_THROWS_WITH_AS(empty({int64_t(1) << 31, int64_t(1) << 31}, DType::F32),
                       doctest::Contains("has more bytes than fit in 64 bits"), Error);
  CHECK_THROWS_WITH_AS(empty({-3}), "empty: negative size -3 in shape (-3)", Error);
  CHECK_THROWS_WITH_AS(full({big, big}, 1.0), doctest::Contains("more elements than fit"), Error);
  CHECK_THROWS_WITH_AS(randn({big, big}), doctest::Contains("randn: shape (1099511627776, 1099511627776)"), Error);
  CHECK_THROWS_WITH_AS(rand({0, big, big}), doctest::Contains("more elements than fit"), Error);
  CHECK_THROWS_WITH_AS(from_vector({}, {0, big, big}), doctest::Contains("from_vector: shape"), Error);
  float one = 1;
  CHECK_THROWS_WITH_AS(from_blob(&one, {big, big}, DType::F32), doctest::Contains("from_blob: shape"), Error);
  // Views: sizes that never allocate still have to be describable.
  Tensor x = zeros({1});
  CHECK_THROWS_WITH_AS(x.expand({big, big, 1}), doctest::Contains("expand: target (1099511627776, 1099511627776, 1)"),
                       Error);
  CHECK_THROWS_WITH_AS(x.expand({-5}), doctest::Contains("expand: invalid size -5"), Error);
  CHECK(x.expand({big, 1}).numel() == big);  // fits: a broadcast view of one element
  Tensor e = zeros({0});
  CHECK_THROWS_WITH_AS(reshape(e, {0, big, big}), doctest::Contains("reshape: shape (0, 1099511627776, 1099511627776)"),
                       Error);
  CHECK_THROWS_WITH_AS(view(e, {big, big, 0}), doctest::Contains("view: shape"), Error);
  // Slicing and narrowing with extreme arguments: clipped or refused, never wrapped.
  Tensor r = arange(0, 6);
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  CHECK(slice(r, 0, 1, max, max).to_vector<int>() == std::vector<int>{1});
  CHECK(slice(r, 0, min, max, 2).to_vector<int>() == std::vector<int>{0, 2, 4});
  CHECK(slice(r, 0, max, min, 1).numel() == 0);
  CHECK_THROWS_WITH_AS(r.narrow(0, 2, max), doctest::Contains("narrow: start 2 + length 9223372036854775807"), Error);
  CHECK_THROWS_WITH_AS(r.narrow(0, max, 1), doctest::Contains("out of range"), Error);
  // 2^32 * 2^32 wraps to exactly 0 in 64 bits; a wrapped product must not pass as "0 elements".
  CHECK_THROWS_WITH_AS(reshape(e, {int64_t(1) << 32, int64_t(1) << 32}), doctest::Contains("more elements than fit"),
                       Error);
}
