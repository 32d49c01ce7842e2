// tests/test_gemm_f32.cpp: the F32 GEMM behind gemm<float> (kernels/cpu/gemm.h): brisk's AVX-512
// kernel (kernels/cpu/gemm_f32.h; skipped where the CPU lacks AVX-512) and the Eigen path, each
// against a plain F64 reference loop over odd sizes (1..67, primes, 1 x 1 x K, M x 1, K = 0,
// large K, sizes past the cache blocks), all four transpose combinations, padded leading dims,
// offsets, misaligned pointers and general strides, accumulation, a column-major c, and 1 vs 2
// threads (brisk's kernel bitwise equal: the summation order of an entry does not depend on the
// split).
// Not here: speed (examples/bench/bench_matmul.cpp), matmul's shape rules (opcheck/specs_linalg.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "brisk.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_f32.h"

using namespace brisk;
using namespace brisk::kernels::cpu;

namespace {

// How an operand is stored. Padded: leading dim larger than the row (or column); General: no
// unit stride at all.
enum class Layout { RowMajor, ColMajor, RowPadded, ColPadded, General };

constexpr Layout kLayouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::RowPadded, Layout::ColPadded,
                               Layout::General};

// A (rows, cols) matrix of values in [-1, 1] stored as `layout` says, starting `offset` floats
// into its buffer (offset 1 leaves the data misaligned for every vector width).
struct Mat {
  std::vector<float> store;
  MatrixRef<float> ref;
  Mat(int64_t rows, int64_t cols, Layout layout, std::mt19937& rng, int64_t offset = 0) {
    int64_t rs = cols, cs = 1, extent = rows * cols;
    switch (layout) {
      case Layout::RowMajor: break;
      case Layout::ColMajor: rs = 1, cs = rows; break;
      case Layout::RowPadded: rs = cols + 5; break;
      case Layout::ColPadded: rs = 1, cs = rows + 3; break;
      case Layout::General: rs = 2 * cols + 1, cs = 2; break;
    }
    if (rows > 0 && cols > 0) extent = (rows - 1) * rs + (cols - 1) * cs + 1;
    std::uniform_real_distribution<float> dist(-1, 1);
    store.resize(size_t(offset + std::max<int64_t>(extent, 1)));
    for (float& v : store) v = dist(rng);
    ref = {store.data() + offset, rows, cols, rs, cs};
  }
  Mat(const Mat& o) : store(o.store), ref(o.ref) { ref.data = store.data() + (o.ref.data - o.store.data()); }
  Mat& operator=(const Mat&) = delete;
  MatrixRef<const float> cref() const { return {ref.data, ref.rows, ref.cols, ref.row_stride, ref.col_stride}; }
  float& at(int64_t i, int64_t j) { return ref.data[i * ref.row_stride + j * ref.col_stride]; }
  float at(int64_t i, int64_t j) const { return ref.data[i * ref.row_stride + j * ref.col_stride]; }
};

// Checks c (after gemm) against the F64 product of a and b (+ c0 when accumulating). The bound
// is relative to sum |a||b| (+ |c0|): F32 summation of K terms errs by about sqrt(K) u
// (u = 2^-24) on random signs, K u at worst; 4 sqrt(K) + 4 units leave room for that while a
// dropped, doubled or misplaced term (about 1/K of the sum) stays far above it.
void check_product(const Mat& a, const Mat& b, const std::vector<double>& c0, const Mat& c, bool accumulate) {
  const int64_t m = c.ref.rows, n = c.ref.cols, k = a.ref.cols;
  const double u = std::ldexp(1.0, -24), rel = u * (4 * std::sqrt(double(k)) + 4);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? c0[size_t(i * n + j)] : 0.0;
      double mag = accumulate ? std::abs(s) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        s += double(a.at(i, p)) * double(b.at(p, j));
        mag += std::abs(double(a.at(i, p)) * double(b.at(p, j)));
      }
      const double err = std::abs(double(c.at(i, j)) - s);
      if (!(err <= rel * mag + 1e-30)) {
        if (bad++ < 3) {
          FAIL_CHECK("c[", i, ", ", j, "] = ", c.at(i, j), ", want ", s, " (m, n, k = ", m, ", ", n, ", ", k, ")");
        }
      }
    }
  }
  CHECK(bad == 0);
}

// c = a @ b (or +=) with the given layouts; c row-major (or column-major) of its own.
void run_case(int64_t m, int64_t n, int64_t k, Layout la, Layout lb, bool accumulate, int threads, std::mt19937& rng,
              int64_t offset = 0, Layout lc = Layout::RowMajor) {
  const Mat a(m, k, la, rng, offset), b(k, n, lb, rng, offset);
  Mat c(m, n, lc, rng, offset);
  std::vector<double> c0(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c0[size_t(i * n + j)] = c.at(i, j);
  }
  gemm<float>(a.cref(), b.cref(), c.ref, accumulate, threads);
  check_product(a, b, c0, c, accumulate);
}

// Runs body once per path this CPU has (brisk's AVX-512 kernel, Eigen), restoring Auto after.
template <class F>
void for_each_path(F&& body) {
  for (F32GemmPath path : {F32GemmPath::Avx512, F32GemmPath::Eigen}) {
    set_f32_gemm_path(path);
    if (f32_gemm_path() != path) continue;  // no AVX-512 here
    const std::string name = f32_gemm_path_name(path);
    CAPTURE(name);
    body();
  }
  set_f32_gemm_path(F32GemmPath::Auto);
}

}  // namespace

TEST_CASE("gemm_f32: odd sizes 1..67 in all four transpose combinations match the F64 reference") {
  std::mt19937 rng(7);
  const int64_t sizes[] = {1, 2, 3, 5, 13, 14, 15, 16, 17, 29, 31, 32, 33, 47, 67};
  for_each_path([&] {
    for (int64_t m : sizes) {
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(16), int64_t(33), int64_t(67)}) {
        for (int64_t k : {int64_t(1), int64_t(3), int64_t(17), int64_t(61)}) {
          for (Layout la : {Layout::RowMajor, Layout::ColMajor}) {
            for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(int(la));
              CAPTURE(int(lb));
              run_case(m, n, k, la, lb, false, 1, rng);
            }
          }
        }
      }
    }
  });
}

TEST_CASE("gemm_f32: 1 x 1 x K, M x 1, 1 x N, K = 0 and large K") {
  std::mt19937 rng(11);
  for_each_path([&] {
    for (Layout la : {Layout::RowMajor, Layout::ColMajor}) {
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
        run_case(1, 1, 1, la, lb, false, 1, rng);
        run_case(1, 1, 997, la, lb, false, 1, rng);
        run_case(53, 1, 37, la, lb, false, 1, rng);
        run_case(1, 59, 41, la, lb, true, 1, rng);
        run_case(23, 19, 4099, la, lb, false, 2, rng);  // 17 KC slices
        run_case(5, 300, 1000, la, lb, true, 2, rng);
      }
    }
    // K = 0: c = 0, or c unchanged when accumulating.
    for (bool acc : {false, true}) {
      Mat a(9, 0, Layout::RowMajor, rng), b(0, 11, Layout::RowMajor, rng), c(9, 11, Layout::RowMajor, rng);
      const Mat before = c;
      gemm<float>(a.cref(), b.cref(), c.ref, acc);
      for (int64_t i = 0; i < 9; ++i) {
        for (int64_t j = 0; j < 11; ++j) CHECK(c.at(i, j) == (acc ? before.at(i, j) : 0.0f));
      }
    }
  });
}

TEST_CASE("gemm_f32: padded leading dims, offsets, misaligned pointers and general strides") {
  std::mt19937 rng(13);
  for_each_path([&] {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        for (int64_t offset : {0, 1, 3}) {
          CAPTURE(int(la));
          CAPTURE(int(lb));
          CAPTURE(offset);
          run_case(37, 45, 29, la, lb, false, 1, rng, offset, offset == 3 ? Layout::RowPadded : Layout::RowMajor);
          run_case(15, 33, 18, la, lb, true, 2, rng, offset);
        }
      }
    }
  });
}

TEST_CASE("gemm_f32: accumulate adds onto c, and a column-major c is written in place") {
  std::mt19937 rng(17);
  for_each_path([&] {
    for (Layout la : {Layout::RowMajor, Layout::ColMajor}) {
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::General}) {
        for (bool acc : {false, true}) {
          run_case(31, 47, 300, la, lb, acc, 1, rng);
          run_case(29, 43, 40, la, lb, acc, 2, rng, 1, Layout::ColMajor);
          run_case(30, 34, 20, la, lb, acc, 1, rng, 0, Layout::ColPadded);
        }
      }
    }
  });
}

TEST_CASE("gemm_f32: sizes past the cache blocks (MC, NC, KC) on 1 and 2 threads") {
  std::mt19937 rng(19);
  for_each_path([&] {
    run_case(1409, 37, 21, Layout::RowMajor, Layout::ColMajor, false, 2, rng);  // M past 2 x MC
    run_case(1409, 37, 21, Layout::ColMajor, Layout::RowMajor, true, 1, rng);
    run_case(3, 4133, 5, Layout::RowMajor, Layout::RowMajor, false, 2, rng);  // N past NC
    run_case(3, 4133, 5, Layout::ColMajor, Layout::ColMajor, true, 1, rng);
    run_case(129, 257, 785, Layout::RowMajor, Layout::ColMajor, false, 2, rng);  // the MLP's shapes
    run_case(257, 131, 129, Layout::ColMajor, Layout::RowMajor, true, 2, rng);
  });
}

// brisk's kernel only: Eigen's per-thread slabs get their own cache blocking, so its sums differ
// in the last bits between 1 and 2 threads.
TEST_CASE("gemm_f32: 1 and 2 threads give bitwise equal results") {
  std::mt19937 rng(23);
  set_f32_gemm_path(F32GemmPath::Avx512);
  if (f32_gemm_path() != F32GemmPath::Avx512) return;  // no AVX-512 here
  {
    for (auto [m, n, k] :
         {std::tuple<int64_t, int64_t, int64_t>{128, 256, 784}, {256, 784, 128}, {97, 200, 300}, {300, 61, 513}}) {
      const Mat a(m, k, Layout::ColMajor, rng), b(k, n, Layout::RowMajor, rng);
      Mat c1(m, n, Layout::RowMajor, rng);
      Mat c2 = c1;
      gemm<float>(a.cref(), b.cref(), c1.ref, true, 1);
      gemm<float>(a.cref(), b.cref(), c2.ref, true, 2);
      CHECK(c1.store == c2.store);
    }
  }
  set_f32_gemm_path(F32GemmPath::Auto);
}

TEST_CASE("gemm_f32: matmul follows set_num_threads and the forced Eigen path agrees") {
  std::mt19937 rng(29);
  const int saved = get_num_threads();
  const Tensor a = randn({131, 250}), b = randn({250, 97});
  std::vector<std::vector<float>> results;
  for (F32GemmPath path : {F32GemmPath::Auto, F32GemmPath::Eigen}) {
    set_f32_gemm_path(path);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      results.push_back(matmul(a, b.t().contiguous().t()).to_vector<float>());
    }
  }
  set_f32_gemm_path(F32GemmPath::Auto);
  set_num_threads(saved);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  for (const auto& r : results) {
    double worst = 0;
    for (int64_t i = 0; i < 131; ++i) {
      for (int64_t j = 0; j < 97; ++j) {
        double s = 0;
        for (int64_t p = 0; p < 250; ++p) s += double(av[size_t(i * 250 + p)]) * double(bv[size_t(p * 97 + j)]);
        worst = std::max(worst, std::abs(s - double(r[size_t(i * 97 + j)])));
      }
    }
    CHECK(worst < 1e-4);
  }
  CHECK(std::string(f32_gemm_path_name(F32GemmPath::Eigen)) == "eigen");
  set_f32_gemm_path(F32GemmPath::Eigen);
  CHECK(f32_gemm_path() == F32GemmPath::Eigen);
  set_f32_gemm_path(F32GemmPath::Auto);
  CHECK(f32_gemm_path() != F32GemmPath::Auto);
}

TEST_CASE("gemm_f32: bad sizes and an output without a unit stride are errors") {
  std::mt19937 rng(31);
  for_each_path([&] {
    const Mat a(4, 5, Layout::RowMajor, rng), b(6, 3, Layout::RowMajor, rng);
    Mat c(4, 3, Layout::RowMajor, rng);
    CHECK_THROWS_WITH_AS(gemm<float>(a.cref(), b.cref(), c.ref), doctest::Contains("gemm: sizes do not match"),
                         brisk::Error);
    const Mat b2(5, 3, Layout::RowMajor, rng);
    Mat cg(4, 3, Layout::General, rng);
    CHECK_THROWS_WITH_AS(gemm<float>(a.cref(), b2.cref(), cg.ref), doctest::Contains("one of them must be 1"),
                         brisk::Error);
  });
}

// Note [Packed B]: b packed once, then multiplied by several a's; against the F64 product and,
// bitwise, against gemm_f32_avx512 on the same operands (the same slices in the same order).
TEST_CASE("gemm_f32: PackedB multiplies like the one-call GEMM, on 1 and 2 threads, past KC and MC") {
  if (f32_gemm_path() != F32GemmPath::Avx512) return;  // no AVX-512 here
  std::mt19937 rng(29);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{32, 2048, 512},
                         {7, 50, 3},
                         {1409, 37, 300},
                         {1, 97, 1},
                         {33, 1536, 513}}) {
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::General}) {
      const Mat b(k, n, lb, rng, 1);
      const PackedB packed(k, n, b.ref.data, b.ref.row_stride, b.ref.col_stride);
      for (int threads : {1, 2}) {
        for (bool accumulate : {false, true}) {
          const Mat a(m, k, threads == 1 ? Layout::RowMajor : Layout::ColPadded, rng);
          Mat c(m, n, Layout::RowMajor, rng);
          Mat once = c;
          std::vector<double> c0(c.store.begin(), c.store.begin() + m * n);
          packed.multiply(m, a.ref.data, a.ref.row_stride, a.ref.col_stride, c.ref.data, n, accumulate, threads);
          check_product(a, b, c0, c, accumulate);
          gemm_f32_avx512(m, n, k, a.ref.data, a.ref.row_stride, a.ref.col_stride, b.ref.data, b.ref.row_stride,
                          b.ref.col_stride, once.ref.data, n, accumulate, threads);
          CHECK(c.store == once.store);
        }
      }
    }
  }
}
