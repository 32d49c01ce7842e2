// tests/test_gemm_i8.cpp: the int8 GEMM of kernels/cpu/gemm_i8.h: the VNNI kernel (skipped
// where the CPU lacks AVX512-VNNI) and the plain packed loops against the unpacked scalar
// references, exactly: odd sizes (1, 3, 17, 64, 127, 255 ...), extreme values (0/255 for u8,
// -128/127 for s8), zero points, transposed and strided operands, the F32 epilogue (scale per
// column, bias, ReLU, strided output), 1 and 2 threads, and the errors.
// Not here: speed (examples/bench/bench_int8.cpp), quantized layers (tests/test_quantize.cpp).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/gemm_i8.h"

using namespace brisk;
using namespace brisk::kernels::cpu;

namespace {

enum class Layout { RowMajor, ColMajor, Strided };

// A (rows, cols) matrix of T in `layout`; values uniform over T's range, or only its extremes.
template <class T>
struct Mat {
  std::vector<T> store;
  MatrixRef<const T> ref;
  Mat(int64_t rows, int64_t cols, Layout layout, std::mt19937& rng, bool extremes) {
    const int lo = std::is_signed_v<T> ? -128 : 0, hi = std::is_signed_v<T> ? 127 : 255;
    std::uniform_int_distribution<int> dist(lo, hi), coin(0, 1);
    const int64_t pad = layout == Layout::Strided ? 5 : 0;
    store.resize(size_t(std::max<int64_t>(1, layout == Layout::ColMajor ? cols * rows : rows * (cols + pad))));
    for (T& v : store) v = T(extremes ? (coin(rng) ? hi : lo) : dist(rng));
    if (layout == Layout::ColMajor) {
      ref = {store.data(), rows, cols, 1, rows};
    } else {
      ref = {store.data(), rows, cols, cols + pad, 1};
    }
  }
};

struct PathGuard {
  explicit PathGuard(I8GemmPath p) { set_i8_gemm_path(p); }
  ~PathGuard() { set_i8_gemm_path(I8GemmPath::Auto); }
};

std::vector<I8GemmPath> paths() {
  std::vector<I8GemmPath> out{I8GemmPath::Plain};
  set_i8_gemm_path(I8GemmPath::Auto);
  if (i8_gemm_path() == I8GemmPath::Vnni)
    out.push_back(I8GemmPath::Vnni);
  else
    MESSAGE("no AVX512-VNNI on this CPU: the VNNI kernel is not tested");
  return out;
}

void check_u8(int64_t m, int64_t n, int64_t k, Layout la, Layout lb, int32_t zp, bool extremes, int threads,
              std::mt19937& rng) {
  Mat<uint8_t> a(m, k, la, rng, extremes);
  Mat<int8_t> b(k, n, lb, rng, extremes);
  std::vector<int32_t> want(size_t(std::max<int64_t>(1, m * n))), got(want.size(), -7);
  gemm_u8s8_reference(a.ref, zp, b.ref, MatrixRef<int32_t>{want.data(), m, n, n, 1});
  const PackedI8 packed = pack_i8(b.ref);
  gemm_u8s8(a.ref, zp, packed, MatrixRef<int32_t>{got.data(), m, n, n, 1}, threads);
  CHECK_MESSAGE(got == want, "u8s8 ", m, "x", n, "x", k, " zp ", zp, " layouts ", int(la), int(lb), " threads ",
                threads, " path ", i8_gemm_path_name(i8_gemm_path()));
}

}  // namespace

TEST_CASE("gemm_i8: u8 x s8 equals the reference exactly on odd sizes, layouts and zero points") {
  std::mt19937 rng(7);
  const int64_t sizes[] = {1, 3, 17, 64, 127, 255};
  for (I8GemmPath path : paths()) {
    PathGuard guard(path);
    for (int64_t m : sizes) {
      for (int64_t n : {int64_t(1), int64_t(17), int64_t(64), int64_t(255)}) {
        for (int64_t k : {int64_t(1), int64_t(3), int64_t(64), int64_t(127)}) {
          check_u8(m, n, k, Layout::RowMajor, Layout::RowMajor, 0, false, 0, rng);
        }
      }
    }
    for (Layout la : {Layout::RowMajor, Layout::ColMajor, Layout::Strided}) {
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::Strided}) {
        check_u8(33, 47, 75, la, lb, 3, false, 1, rng);
      }
    }
    for (int32_t zp : {0, 1, 128, 255}) check_u8(70, 49, 255, Layout::RowMajor, Layout::ColMajor, zp, false, 2, rng);
    check_u8(130, 100, 1024, Layout::RowMajor, Layout::ColMajor, 0, true, 2, rng);  // extremes, long K
    check_u8(9, 31, 4099, Layout::RowMajor, Layout::RowMajor, 255, true, 0, rng);
  }
}

TEST_CASE("gemm_i8: s8 x s8 (shifted by 128) equals the reference exactly, extremes included") {
  std::mt19937 rng(8);
  for (I8GemmPath path : paths()) {
    PathGuard guard(path);
    for (bool extremes : {false, true}) {
      for (int64_t s : {int64_t(1), int64_t(3), int64_t(17), int64_t(127), int64_t(255)}) {
        Mat<int8_t> a(s, s + 2, Layout::ColMajor, rng, extremes);  // a transposed view
        Mat<int8_t> b(s + 2, s, Layout::Strided, rng, extremes);
        std::vector<int32_t> want(size_t(s * s)), got(size_t(s * s));
        gemm_s8s8_reference(a.ref, b.ref, MatrixRef<int32_t>{want.data(), s, s, s, 1});
        gemm_s8s8(a.ref, pack_i8(b.ref), MatrixRef<int32_t>{got.data(), s, s, s, 1});
        CHECK_MESSAGE(got == want, "s8s8 n=", s, " extremes ", extremes, " path ", i8_gemm_path_name(path));
      }
    }
  }
}

TEST_CASE("gemm_i8: the F32 epilogue (scale per column, bias, ReLU, strided out) equals the reference bit for bit") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  for (I8GemmPath path : paths()) {
    PathGuard guard(path);
    for (bool relu : {false, true}) {
      for (bool bias : {false, true}) {
        for (bool transposed_out : {false, true}) {
          const int64_t m = 37, n = 53, k = 91;
          Mat<uint8_t> a(m, k, Layout::RowMajor, rng, false);
          Mat<int8_t> b(k, n, Layout::ColMajor, rng, false);
          std::vector<float> scale(n), bvec(n);
          for (auto& v : scale) v = std::abs(u(rng)) * 1e-3f + 1e-5f;
          for (auto& v : bvec) v = u(rng);
          std::vector<float> want(size_t(m * n)), got(size_t(m * n), 42.0f);
          auto out = [&](std::vector<float>& v) {
            return transposed_out ? MatrixRef<float>{v.data(), m, n, 1, m} : MatrixRef<float>{v.data(), m, n, n, 1};
          };
          I8Epilogue e{.a_scale = 0.02f, .col_scale = scale.data(), .bias = bias ? bvec.data() : nullptr, .relu = relu};
          e.out = out(want);
          gemm_u8s8_reference(a.ref, 11, b.ref, e);
          e.out = out(got);
          gemm_u8s8(a.ref, 11, pack_i8(b.ref), e);
          CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("gemm_i8: mismatched sizes and unpacked operands are errors") {
  std::vector<uint8_t> a(12);
  std::vector<int8_t> b(12);
  std::vector<int32_t> c(16);
  const PackedI8 packed = pack_i8(MatrixRef<const int8_t>{b.data(), 3, 4, 4, 1});
  CHECK_THROWS_AS(
      gemm_u8s8(MatrixRef<const uint8_t>{a.data(), 3, 4, 4, 1}, 0, packed, MatrixRef<int32_t>{c.data(), 3, 4, 4, 1}),
      Error);  // K 4 vs 3
  CHECK_THROWS_AS(
      gemm_u8s8(MatrixRef<const uint8_t>{a.data(), 4, 3, 3, 1}, 0, packed, MatrixRef<int32_t>{c.data(), 4, 3, 3, 1}),
      Error);  // c (4, 3) for N = 4
  CHECK_THROWS_AS(gemm_u8s8(MatrixRef<const uint8_t>{a.data(), 4, 3, 3, 1}, 0, PackedI8{.k = 3, .n = 4},
                            MatrixRef<int32_t>{c.data(), 4, 4, 4, 1}),
                  Error);  // not packed
}
