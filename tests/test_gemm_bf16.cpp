// tests/test_gemm_bf16.cpp: the BF16 GEMM of kernels/cpu/gemm_bf16.h: each native path (AMX,
// AVX512-BF16; skipped where the CPU lacks it) and the forced F32 fallback against an F64
// reference on BF16-valued inputs (edges, odd K, K = 0, transposed and strided operands,
// accumulate, 1 and 2 threads, large K), and BF16 matmul / conv2d through the public API
// against the F32 results. Not here: speed (examples/bench/bench_amp.cpp), the F32 GEMM
// (opcheck/specs_linalg.cpp).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "brisk.h"
#include "kernels/cpu/gemm_bf16.h"
#include "nn/functional.h"
#include "tests/test_util.h"

using namespace brisk;
using namespace brisk::kernels::cpu;
namespace F = brisk::nn::functional;

namespace {

// Error bound relative to sum |a||b| (+ |c| when accumulating). BF16 products are exact in F32,
// so the only error is F32 summation: at worst K u with u = 2^-24, typically sqrt(K) u (below
// 4e-6 for K <= 4096). A dropped, doubled or misplaced term moves an entry by about 1/K of that
// sum, far above this bound for the K tested.
constexpr double kRel = 1e-5;

enum class Layout { RowMajor, ColMajor, Strided };  // Strided: row-major with padded rows

// A (rows, cols) BF16 matrix of values in [-1, 1] stored as `layout` says.
struct Mat {
  std::vector<BFloat16> store;
  MatrixRef<const BFloat16> ref;
  Mat(int64_t rows, int64_t cols, Layout layout, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-1, 1);
    const int64_t pad = layout == Layout::Strided ? 3 : 0;
    store.resize(size_t(std::max<int64_t>(1, layout == Layout::ColMajor ? cols * rows : rows * (cols + pad))));
    for (BFloat16& v : store) v = BFloat16(dist(rng));
    if (layout == Layout::ColMajor) {
      ref = {store.data(), rows, cols, 1, rows};
    } else {
      ref = {store.data(), rows, cols, cols + pad, 1};
    }
  }
  double at(int64_t i, int64_t j) const { return double(float(ref.data[i * ref.row_stride + j * ref.col_stride])); }
};

// The exact product (F64) and sum |a||b| per entry of c.
struct Reference {
  std::vector<double> value, magnitude;
  Reference(const Mat& a, const Mat& b) {
    const int64_t m = a.ref.rows, n = b.ref.cols, k = a.ref.cols;
    value.assign(size_t(m * n), 0.0);
    magnitude.assign(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.at(i, p) * b.at(p, j);
          mag += std::abs(a.at(i, p) * b.at(p, j));
        }
        value[size_t(i * n + j)] = s;
        magnitude[size_t(i * n + j)] = mag;
      }
    }
  }
};

// Sets the path for one scope; the process default (Auto) comes back at the end.
struct PathGuard {
  explicit PathGuard(Bf16GemmPath path) { set_bf16_gemm_path(path); }
  ~PathGuard() { set_bf16_gemm_path(Bf16GemmPath::Auto); }
};

// The native paths this CPU runs (empty without avx512bf16).
std::vector<Bf16GemmPath> native_paths() {
  std::vector<Bf16GemmPath> out;
  for (Bf16GemmPath p : {Bf16GemmPath::Amx, Bf16GemmPath::Avx512}) {
    PathGuard guard(p);
    if (bf16_gemm_path() == p) out.push_back(p);
  }
  return out;
}

// Runs c (+)= a @ b on the current path and checks it against the reference. c starts from
// random values, so an entry the kernel forgets to write fails too.
void check_product(const Mat& a, const Mat& b, const Reference& want, bool accumulate, int threads) {
  const int64_t m = a.ref.rows, n = b.ref.cols;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> c(size_t(m * n)), c0;
  for (float& v : c) v = dist(rng);
  c0 = c;
  gemm_bf16(a.ref, b.ref, {c.data(), m, n, n, 1}, accumulate, threads);
  int bad = 0;
  for (size_t e = 0; e < c.size(); ++e) {
    const double expect = want.value[e] + (accumulate ? double(c0[e]) : 0.0);
    const double bound = kRel * (want.magnitude[e] + (accumulate ? std::abs(double(c0[e])) : 0.0)) + 1e-30;
    if (std::abs(double(c[e]) - expect) > bound && bad++ < 3) {
      FAIL_CHECK("path ", bf16_gemm_path_name(bf16_gemm_path()), " (", m, ", ", a.ref.cols, ") @ (", b.ref.rows, ", ",
                 n, ") threads ", threads, " accumulate ", accumulate, ": entry ", e, " is ", c[e], ", want ", expect);
    }
  }
  CHECK(bad == 0);
}

struct Shape3 {
  int64_t m, n, k;
};

// Every layout pair, both accumulate modes and 1 and 2 threads, for each shape.
void check_shapes(const std::vector<Shape3>& shapes, bool all_layouts) {
  std::mt19937 rng(42);
  const Layout layouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};
  for (const Shape3& s : shapes) {
    for (Layout la : layouts) {
      for (Layout lb : layouts) {
        if (!all_layouts && la != lb && la != Layout::RowMajor) continue;
        const Mat a(s.m, s.k, la, rng), b(s.k, s.n, lb, rng);
        const Reference want(a, b);
        for (bool accumulate : {false, true}) {
          for (int threads : {1, 2}) check_product(a, b, want, accumulate, threads);
        }
      }
    }
  }
}

// Shapes around the kernels' blocks: 1x1x1, odd K, M and N off the 8/16/32/48 multiples,
// vectors, and (big) beyond one MC/KC/NC block.
const std::vector<Shape3> kSmallShapes = {{1, 1, 1},   {1, 1, 2},   {2, 3, 1},    {5, 3, 7},
                                          {8, 16, 32}, {9, 17, 33}, {31, 47, 3},  {33, 49, 65},
                                          {1, 70, 45}, {70, 1, 45}, {16, 48, 31}, {64, 96, 64}};
const std::vector<Shape3> kBigShapes = {{257, 130, 515}, {97, 1000, 40}, {300, 33, 1100}, {40, 520, 600}};

// Every native path on `shapes`; false when there is none (the caller skips).
bool check_native(const std::vector<Shape3>& shapes, bool all_layouts) {
  const std::vector<Bf16GemmPath> paths = native_paths();
  if (paths.empty()) return false;
  for (Bf16GemmPath p : paths) {
    PathGuard guard(p);
    INFO("path ", std::string(bf16_gemm_path_name(p)));
    check_shapes(shapes, all_layouts);
  }
  return true;
}

std::vector<double> values(const Tensor& t) { return t.to(DType::F32).to_vector<double>(); }

// got (BF16 results) against want (F32 results of the same BF16-valued inputs): within one BF16
// rounding of each entry plus the summation bound on `scale` (sum |a||b|, per entry).
void check_rounded(const Tensor& got, const Tensor& want, const Tensor& scale) {
  REQUIRE(got.dtype() == DType::BF16);
  const std::vector<double> g = values(got), w = values(want), s = values(scale);
  REQUIRE(g.size() == w.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = std::ldexp(std::abs(w[i]), -8) + kRel * s[i] + 1e-30;
    if (std::abs(g[i] - w[i]) > bound && bad++ < 3) FAIL_CHECK("entry ", i, " is ", g[i], ", want ", w[i]);
  }
  CHECK(bad == 0);
}

// x rounded to BF16 and back: the F32 reference then sees the very values the BF16 op sees.
Tensor bf16_valued(const Tensor& x) { return x.to(DType::BF16).to(DType::F32); }

}  // namespace

TEST_CASE("gemm_bf16: the native paths match the F64 reference on small shapes and every layout") {
  if (!check_native(kSmallShapes, true)) MESSAGE("this CPU has no avx512bf16: native BF16 GEMM not tested");
}

TEST_CASE("gemm_bf16: the native paths match the F64 reference beyond one cache block") {
  if (!check_native(kBigShapes, false)) MESSAGE("this CPU has no avx512bf16: native BF16 GEMM not tested");
}

TEST_CASE("gemm_bf16: the forced fallback matches the F64 reference") {
  PathGuard guard(Bf16GemmPath::Fallback);
  REQUIRE(bf16_gemm_path() == Bf16GemmPath::Fallback);
  REQUIRE_FALSE(bf16_gemm_native());
  check_shapes(kSmallShapes, true);
  check_shapes({kBigShapes[0]}, false);
}

TEST_CASE("gemm_bf16: the reference loop matches the F64 reference") {
  std::mt19937 rng(3);
  const Mat a(13, 37, Layout::ColMajor, rng), b(37, 11, Layout::Strided, rng);
  const Reference want(a, b);
  std::vector<float> c(13 * 11, 5.0f);
  gemm_bf16_reference(a.ref, b.ref, {c.data(), 13, 11, 11, 1}, true);
  for (size_t e = 0; e < c.size(); ++e) CHECK(double(c[e]) == doctest::Approx(want.value[e] + 5.0).epsilon(1e-5));
}

TEST_CASE("gemm_bf16: large K stays within the F32 summation bound") {
  if (!check_native({{33, 40, 4097}, {2, 600, 2048}}, false)) MESSAGE("this CPU has no avx512bf16: skipped");
}

TEST_CASE("gemm_bf16: K = 0 writes zeros, or leaves c as it is when accumulating") {
  for (Bf16GemmPath p : {Bf16GemmPath::Auto, Bf16GemmPath::Fallback}) {
    PathGuard guard(p);
    std::vector<BFloat16> none(1);
    std::vector<float> c(6, 3.0f);
    gemm_bf16({none.data(), 2, 0, 0, 1}, {none.data(), 0, 3, 3, 1}, {c.data(), 2, 3, 3, 1}, true);
    for (float v : c) CHECK(v == 3.0f);
    gemm_bf16({none.data(), 2, 0, 0, 1}, {none.data(), 0, 3, 3, 1}, {c.data(), 2, 3, 3, 1}, false);
    for (float v : c) CHECK(v == 0.0f);
  }
}

TEST_CASE("gemm_bf16: a column-major output is written in place") {
  std::mt19937 rng(5);
  const Mat a(37, 21, Layout::RowMajor, rng), b(21, 50, Layout::ColMajor, rng);
  const Reference want(a, b);
  std::vector<float> c(37 * 50, 1.0f);
  gemm_bf16(a.ref, b.ref, {c.data(), 37, 50, 1, 37});  // c (i, j) at i + 37 j
  for (int64_t i = 0; i < 37; ++i) {
    for (int64_t j = 0; j < 50; ++j) {
      const size_t e = size_t(i * 50 + j);
      CHECK(std::abs(double(c[size_t(i + 37 * j)]) - want.value[e]) <= kRel * want.magnitude[e] + 1e-30);
    }
  }
}

TEST_CASE("gemm_bf16: mismatched sizes and unreadable strides are errors naming the op and shapes") {
  std::vector<BFloat16> x(64);
  std::vector<float> c(64);
  const std::string sizes = test::error_text([&] {
    gemm_bf16({x.data(), 2, 3, 3, 1}, {x.data(), 4, 2, 2, 1}, {c.data(), 2, 2, 2, 1});
  });
  CHECK(sizes.find("gemm_bf16") != std::string::npos);
  CHECK(sizes.find("(2, 3) @ (4, 2)") != std::string::npos);
  const std::string strides = test::error_text([&] {
    gemm_bf16({x.data(), 2, 3, 6, 2}, {x.data(), 3, 2, 2, 1}, {c.data(), 2, 2, 2, 1});
  });
  CHECK(strides.find("strides (6, 2)") != std::string::npos);
}

TEST_CASE("gemm_bf16: the native path and the fallback agree") {
  if (native_paths().empty()) {
    MESSAGE("this CPU has no avx512bf16: skipped");
    return;
  }
  std::mt19937 rng(11);
  const Mat a(150, 300, Layout::RowMajor, rng), b(300, 170, Layout::ColMajor, rng);
  std::vector<float> fast(150 * 170), slow(150 * 170);
  gemm_bf16(a.ref, b.ref, {fast.data(), 150, 170, 170, 1});
  {
    PathGuard guard(Bf16GemmPath::Fallback);
    gemm_bf16(a.ref, b.ref, {slow.data(), 150, 170, 170, 1});
  }
  for (size_t e = 0; e < fast.size(); ++e) CHECK(std::abs(fast[e] - slow[e]) <= 1e-5f * 300);
}

// The F32-b overload rounds b while packing (Note [Mixed linear] in kernels/cpu/gemm.cpp): on
// every path and layout it gives the bits of the BF16 product on b rounded first, including
// ties, NaN, infinities and subnormals (which vcvtneps2bf16 would flush).
TEST_CASE("gemm_bf16: an F32 b is read as its BF16 rounding, bit for bit, on every path and layout") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<Bf16GemmPath> paths = native_paths();
  paths.push_back(Bf16GemmPath::Fallback);
  const std::vector<Shape3> shapes = {{1, 1, 1}, {5, 3, 7}, {9, 17, 33}, {33, 49, 65}, {70, 1, 45}, {97, 300, 41}};
  for (Bf16GemmPath path : paths) {
    PathGuard guard(path);
    for (const Shape3& s : shapes) {
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::Strided}) {
        const Mat a(s.m, s.k, Layout::RowMajor, rng);
        // b in F32 with values that do not fit BF16: ties to even, NaN, +-inf, subnormals.
        const int64_t pad = lb == Layout::Strided ? 3 : 0;
        std::vector<float> b32(size_t(lb == Layout::ColMajor ? s.k * s.n : s.k * (s.n + pad)));
        for (size_t e = 0; e < b32.size(); ++e) {
          switch (e % 11) {
            case 3:  // ties (to even: down, then up) and just above a tie
              b32[e] = std::bit_cast<float>(e % 3 == 0 ? 0x3f808000u : e % 3 == 1 ? 0xbf818000u : 0x3f808001u);
              break;
            case 5: b32[e] = 1e-39f * dist(rng); break;  // subnormal
            case 7: b32[e] = e % 22 == 7 ? INFINITY : -INFINITY; break;
            case 9: b32[e] = e % 33 == 9 ? NAN : dist(rng); break;
            default: b32[e] = dist(rng) * 1.0001f;
          }
        }
        MatrixRef<const float> b = lb == Layout::ColMajor ? MatrixRef<const float>{b32.data(), s.k, s.n, 1, s.k}
                                                          : MatrixRef<const float>{b32.data(), s.k, s.n, s.n + pad, 1};
        std::vector<BFloat16> b16(b32.size());
        for (size_t e = 0; e < b32.size(); ++e) b16[e] = BFloat16(b32[e]);
        const MatrixRef<const BFloat16> b_rounded{b16.data(), b.rows, b.cols, b.row_stride, b.col_stride};
        for (int threads : {1, 2}) {
          std::vector<float> got(size_t(s.m * s.n), 7.0f), want(size_t(s.m * s.n), 7.0f);
          gemm_bf16(a.ref, b, {got.data(), s.m, s.n, s.n, 1}, false, threads);
          gemm_bf16(a.ref, b_rounded, {want.data(), s.m, s.n, s.n, 1}, false, threads);
          int differ = 0;
          for (size_t e = 0; e < got.size(); ++e)
            differ += std::bit_cast<uint32_t>(got[e]) != std::bit_cast<uint32_t>(want[e]) &&
                      !(std::isnan(got[e]) && std::isnan(want[e]));
          CAPTURE(bf16_gemm_path_name(path));
          CAPTURE(s.m);
          CAPTURE(s.n);
          CAPTURE(s.k);
          CAPTURE(int(lb));
          CHECK(differ == 0);
        }
      }
    }
  }
  // A column-major c takes the rounded copy.
  const Mat a(6, 5, Layout::RowMajor, rng);
  std::vector<float> b32(5 * 4), c(6 * 4), want(6 * 4);
  for (float& v : b32) v = dist(rng) * 1.0001f;
  std::vector<BFloat16> b16(b32.begin(), b32.end());
  gemm_bf16(a.ref, MatrixRef<const float>{b32.data(), 5, 4, 4, 1}, {c.data(), 6, 4, 1, 6});
  gemm_bf16(a.ref, MatrixRef<const BFloat16>{b16.data(), 5, 4, 4, 1}, {want.data(), 6, 4, 1, 6});
  CHECK(c == want);
}

TEST_CASE("gemm_bf16: BF16 matmul through the public API agrees with F32 rounded once") {
  manual_seed(1);
  for (Bf16GemmPath p : {Bf16GemmPath::Auto, Bf16GemmPath::Fallback}) {
    PathGuard guard(p);
    INFO("path ", std::string(bf16_gemm_path_name(bf16_gemm_path())));
    const Tensor a = bf16_valued(randn({3, 70, 130})), b = bf16_valued(randn({130, 90}));
    const Tensor bt = bf16_valued(randn({2, 1, 90, 130})).transpose(-1, -2);  // (2, 1, 130, 90), read in place
    const Tensor a16 = a.to(DType::BF16), b16 = b.to(DType::BF16), bt16 = bt.to(DType::BF16);
    check_rounded(matmul(a16, b16), matmul(a, b), matmul(abs(a), abs(b)));
    check_rounded(matmul(a16, bt16), matmul(a, bt), matmul(abs(a), abs(bt)));
    const Tensor big = bf16_valued(randn({300, 520}));
    check_rounded(matmul(big.to(DType::BF16), big.t().to(DType::BF16)), matmul(big, big.t()),
                  matmul(abs(big), abs(big.t())));
  }
}

namespace {

// conv2d in BF16 (forward, and both gradients by backward) against the same conv in F32 on the
// same BF16 values. The error scale is the same conv on |x|, |w| (and |g| for the gradients).
void check_conv(Shape xs, Shape ws, F::Pair stride, F::Pair padding, int64_t groups) {
  const Tensor x = bf16_valued(randn(xs)), w = bf16_valued(randn(ws)), bias = bf16_valued(randn({ws[0]}));
  Tensor x16 = x.to(DType::BF16), w16 = w.to(DType::BF16);
  x16.requires_grad_();
  w16.requires_grad_();
  const Tensor y16 = F::conv2d(x16, w16, bias.to(DType::BF16), stride, padding, {1, 1}, groups);
  Tensor xa = abs(x), wa = abs(w);  // before x and w (shared with x32, w32) require grad
  xa.requires_grad_();
  wa.requires_grad_();
  Tensor x32 = x, w32 = w;
  x32.requires_grad_();
  w32.requires_grad_();
  const Tensor y32 = F::conv2d(x32, w32, bias, stride, padding, {1, 1}, groups);
  const Tensor ya = F::conv2d(xa, wa, abs(bias), stride, padding, {1, 1}, groups);
  check_rounded(y16, y32, ya);
  const Tensor g = bf16_valued(randn(y32.sizes()));
  y16.backward(g.to(DType::BF16));
  y32.backward(g);
  ya.backward(abs(g));
  check_rounded(x16.grad(), x32.grad(), xa.grad());
  check_rounded(w16.grad(), w32.grad(), wa.grad());
}

}  // namespace

TEST_CASE("gemm_bf16: BF16 conv2d and its gradients agree with F32 rounded once") {
  manual_seed(2);
  for (Bf16GemmPath p : {Bf16GemmPath::Auto, Bf16GemmPath::Fallback}) {
    PathGuard guard(p);
    INFO("path ", std::string(bf16_gemm_path_name(bf16_gemm_path())));
    check_conv({4, 3, 11, 9}, {8, 3, 3, 3}, {1, 1}, {1, 1}, 1);      // per-sample threads
    check_conv({1, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1}, 1);  // one sample, GEMM threads
    check_conv({3, 4, 10, 10}, {6, 2, 3, 2}, {2, 1}, {0, 1}, 2);     // groups, stride, odd K
    check_conv({2, 16, 7, 7}, {24, 16, 1, 1}, {1, 1}, {0, 0}, 1);    // pointwise: no im2col
    check_conv({2, 4, 8, 8}, {4, 1, 3, 3}, {1, 1}, {1, 1}, 4);       // depthwise: direct loops
  }
}
