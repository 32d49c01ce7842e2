// tests/test_tensor.cpp: tensor basics: dtypes and 16-bit conversion, factories, views and
// their strides, contiguity, in-place ops and versions, printing, promotion.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "brisk.h"

using namespace brisk;

TEST_CASE("half: float round trip rounds to nearest even and keeps NaN/Inf") {
  CHECK(float(Half(1.0f)) == 1.0f);
  CHECK(float(Half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(float(Half(65520.0f))));  // rounds up past the largest half
  CHECK(float(Half(65519.0f)) == 65504.0f);  // rounds down
  CHECK(std::isinf(float(Half(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(float(Half(std::nanf("")))));
  CHECK(float(Half(5.9604645e-8f)) == 5.9604645e-8f);            // smallest subnormal
  CHECK(float(Half(2.9802322e-8f)) == 0.0f);                     // exactly half of it: ties to even (0)
  CHECK(float(Half(1.0f + 1.0f / 2048)) == 1.0f);                // tie between 1 and 1+2^-10: even is 1
  CHECK(float(Half(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024);  // tie: even is 1+2^-9
  // Exhaustive: every half converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    Half v = Half::from_bits(uint16_t(h));
    float f = float(v);
    if (std::isnan(f)) continue;
    REQUIRE(Half(f).bits == h);
  }
}

TEST_CASE("bfloat16: round to nearest even, NaN stays NaN") {
  CHECK(float(BFloat16(1.0f)) == 1.0f);
  CHECK(float(BFloat16(1.00390625f)) == 1.0f);       // tie -> even
  CHECK(float(BFloat16(1.01171875f)) == 1.015625f);  // tie -> even (up)
  CHECK(std::isnan(float(BFloat16(std::nanf("")))));
  CHECK(std::isinf(float(BFloat16(std::numeric_limits<float>::infinity()))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = float(BFloat16::from_bits(uint16_t(h)));
    if (std::isnan(f)) continue;
    REQUIRE(BFloat16(f).bits == h);
  }
}

TEST_CASE("dtype: promotion follows PyTorch's rules") {
  CHECK(promote_types(DType::F32, DType::F64) == DType::F64);
  CHECK(promote_types(DType::I64, DType::F16) == DType::F16);
  CHECK(promote_types(DType::F16, DType::BF16) == DType::F32);
  CHECK(promote_types(DType::I32, DType::I64) == DType::I64);
  CHECK(promote_types(DType::Bool, DType::U8) == DType::U8);
  CHECK(promote_types(DType::I8, DType::U8) == DType::I32);
  Tensor i = full({2}, 3, DType::I64);
  Tensor f = full({2}, 0.5, DType::F32);
  CHECK((i + f).dtype() == DType::F32);
  CHECK(div(i, full({2}, 2, DType::I64)).dtype() == DType::F32);  // true division
}

TEST_CASE("factories: zeros, ones, full, from_vector, from_blob") {
  Tensor z = zeros({2, 3});
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.dtype() == DType::F32);
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, DType::I32).to_vector<int32_t>() == std::vector<int32_t>(4, 1));
  CHECK(full({}, 2.5, DType::F64).item<double>() == 2.5);
  Tensor v = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK_THROWS_AS(from_vector({1, 2}, {3}), Error);
  float buf[4] = {1, 2, 3, 4};
  bool freed = false;
  {
    Tensor b = from_blob(buf, {2, 2}, DType::F32, [&](void*) { freed = true; });
    CHECK(b.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
    buf[0] = 9;
    CHECK(b.to_vector<float>()[0] == 9);  // no copy
  }
  CHECK(freed);
}

TEST_CASE("factories: a zero-size dim anywhere gives an empty tensor, contiguous as in PyTorch") {
  // A zero-size middle dim once made the random factories refuse their own output ("must be
  // contiguous": empty((2, 0, 5, 5)) has strides (25, 25, 5, 1)).
  for (const Shape& s : {Shape{2, 0, 5, 5}, Shape{0, 3}, Shape{3, 0}, Shape{1, 0, 1}}) {
    for (const Tensor& t : {randn(s), rand(s), zeros(s), ones(s, DType::I64), randint(0, 5, s), empty(s)}) {
      CHECK(t.sizes() == s);
      CHECK(t.numel() == 0);
      CHECK(t.is_contiguous());
      CHECK(t.to_vector<double>().empty());
    }
  }
  // an empty strided view, too; a non-empty one still is not
  const Tensor x = zeros({2, 3, 4}).transpose(0, 2);
  CHECK_FALSE(x.is_contiguous());
  CHECK(x.slice(1, 1, 1).is_contiguous());
  CHECK(x.slice(1, 1, 1).contiguous().numel() == 0);
}

TEST_CASE("views: share storage, compute strides, and copy only when asked") {
  Tensor x = from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.transpose(0, 1);
  CHECK(t.sizes() == Shape{3, 2});
  CHECK(t.strides() == Shape{1, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.storage() == x.storage());
  CHECK(t.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(t.contiguous().is_contiguous());
  CHECK(t.contiguous().to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});

  CHECK(x.view({3, 2}).storage() == x.storage());
  CHECK(x.view({-1}).sizes() == Shape{6});
  CHECK_THROWS_AS(t.view({6}), Error);  // not viewable: needs reshape
  CHECK(t.reshape({6}).to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(x.unsqueeze(0).sizes() == Shape{1, 2, 3});
  CHECK(x.unsqueeze(-1).sizes() == Shape{2, 3, 1});
  CHECK(x.unsqueeze(1).squeeze(1).sizes() == Shape{2, 3});
  CHECK(x.narrow(1, 1, 2).to_vector<double>() == std::vector<double>{1, 2, 4, 5});
  CHECK(x.slice(1, 0, 3, 2).to_vector<double>() == std::vector<double>{0, 2, 3, 5});
  CHECK(x.slice(1, -2, 100).to_vector<double>() == std::vector<double>{1, 2, 4, 5});
  CHECK(x.select(0, 1).to_vector<double>() == std::vector<double>{3, 4, 5});
  CHECK(x.select(1, -1).to_vector<double>() == std::vector<double>{2, 5});
  Tensor e = from_vector({1, 2, 3}, {3}).expand({2, 3});
  CHECK(e.strides() == Shape{0, 1});
  CHECK(e.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(x.permute({1, 0}).sizes() == Shape{3, 2});
  CHECK(x.flatten().sizes() == Shape{6});
  Tensor y = zeros({2, 3, 4});
  CHECK(y.flatten(1).sizes() == Shape{2, 12});
  // A view of a permuted tensor that is still expressible with strides.
  Tensor p = zeros({4, 6}).t();  // (6, 4) strides (1, 6)
  CHECK(p.view({2, 3, 4}).strides() == Shape{3, 1, 6});
}

TEST_CASE("in-place ops write through views and bump the version") {
  Tensor x = zeros({2, 3});
  uint32_t v0 = x.version();
  x.narrow(1, 1, 1).fill_(7);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 7, 0, 0, 7, 0});
  CHECK(x.version() > v0);
  x.add_(ones({3}));  // broadcast other
  CHECK(x.to_vector<float>() == std::vector<float>{1, 8, 1, 1, 8, 1});
  x.mul_(2.0);
  CHECK(x.to_vector<float>()[1] == 16);
  x.zero_();
  CHECK(x.to_vector<float>() == std::vector<float>(6, 0));
  x.copy_(from_vector({1, 2, 3}, {3}));
  CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  x.sub_(ones({2, 3}), 0.5);
  CHECK(x.to_vector<float>()[0] == 0.5f);
  x.div_(full({}, 0.5));
  CHECK(x.to_vector<float>()[0] == 1.0f);
  // The target of an in-place op cannot broadcast.
  Tensor small = zeros({3});
  CHECK_THROWS_AS(small.add_(ones({2, 3})), Error);
}

TEST_CASE("cast: between every pair of dtypes on representable values") {
  std::vector<double> vals{0, 1, 2, 3, 100, 127};
  for (DType a : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::U8, DType::I32, DType::I64}) {
    for (DType b : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::U8, DType::I32, DType::I64}) {
      Tensor t = from_vector(vals, {6}, a);
      CHECK(cast(t, b).to_vector<double>() == vals);
    }
  }
  CHECK(cast(from_vector({0, 2, -1}, {3}), DType::Bool).to_vector<double>() == std::vector<double>{0, 1, 1});
}

TEST_CASE("printing: readable values, dtype and flags") {
  std::ostringstream s;
  s << from_vector({1, 2.5, -3, 4}, {2, 2});
  CHECK(s.str() == "tensor([[1.0000, 2.5000],\n        [-3.0000, 4.0000]], dtype=F32)");
  std::ostringstream i;
  i << full({3}, 7, DType::I64);
  CHECK(i.str() == "tensor([7, 7, 7], dtype=I64)");
  std::ostringstream big;
  big << zeros({100});
  CHECK(big.str().find("...") != std::string::npos);
  CHECK(zeros({2, 3}).str() == "Tensor(F32, cpu, (2, 3))");
}

TEST_CASE("allocator: freed blocks are reused and stats add up") {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  AllocatorStats s0 = a.stats();
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  AllocatorStats s1 = a.stats();
  void* q = a.allocate(1000);
  CHECK(q == p);  // same size class: the cached block comes back
  AllocatorStats s2 = a.stats();
  CHECK(s2.cache_hits == s1.cache_hits + 1);
  CHECK(s2.system_allocs == s1.system_allocs);
  CHECK(reinterpret_cast<uintptr_t>(q) % 64 == 0);
  a.deallocate(q, 1000);
  CHECK(a.stats().allocated == s0.allocated);
  CHECK(a.stats().cached >= CachingAllocator::round_size(1000));
  // A large block is 2 MiB aligned (huge-page friendly).
  void* big = a.allocate(size_t(8) << 20);
  CHECK(reinterpret_cast<uintptr_t>(big) % (size_t(2) << 20) == 0);
  CHECK(a.stats().peak >= size_t(8) << 20);
  a.deallocate(big, size_t(8) << 20);
  a.empty_cache();
  CHECK(a.stats().cached == 0);
}

TEST_CASE("allocator: size classes waste at most 25%") {
  CHECK(CachingAllocator::round_size(1) == 64);
  CHECK(CachingAllocator::round_size(256) == 256);
  for (size_t n : {257ul, 1000ul, 4097ul, 123456ul, 10000000ul}) {
    size_t r = CachingAllocator::round_size(n);
    CHECK(r >= n);
    CHECK(double(r) <= 1.25 * double(n) + 64);
    CHECK(CachingAllocator::round_size(r) == r);
  }
}

TEST_CASE("tensors keep working when a tensor's memory is reused") {
  // Repeated allocation of the same size served from the cache, values never mixed up.
  for (int i = 0; i < 100; ++i) {
    Tensor a = full({1000}, double(i));
    Tensor b = a + 1.0;
    REQUIRE(b.to_vector<float>()[999] == float(i + 1));
  }
}

TEST_CASE("clamp_min / clamp_max on integer tensors (infinite bounds never convert)") {
  Tensor x = from_vector({-3, 5, 7}, {3}, DType::I64);
  CHECK(clamp_min(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 5, 7});
  CHECK(clamp_max(x, 6).to_vector<int64_t>() == std::vector<int64_t>{-3, 5, 6});
}
