// examples/bench/bench_matmul.cpp: brisk::matmul (F32, square, 256..2048) against Eigen's own
// product (Map<RowMajor> * Map<RowMajor>, same OpenMP threads, same compile flags) and, when
// the build found it, OpenBLAS's cblas_sgemm (linked into this benchmark only, never into
// brisk), on 1 and 2 threads: GFLOP/s and ratios, each the median of several timed calls after
// a warmup, all measured in this run. A benchmark, never a test. Not here: F64/BF16, batched
// or transposed products (the specs in tests/specs_linalg.cpp check those are right).
// For a fair OpenBLAS number run it as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bench_matmul
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"

#ifdef BRISK_BENCH_OPENBLAS
// The OpenBLAS entry points used, declared here so that no cblas.h variant is needed.
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int threads);
char* openblas_get_corename(void);
}
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111;
#endif

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

const char* env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

// Lets the previous library's spinning threads go to sleep before the next one is timed.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

// Median seconds per call of f and of g, called in turn (one warmup each) so that a change in
// the machine's load during the run affects both alike.
template <class F, class G>
std::pair<double, double> interleaved_medians(int repeats, F&& f, G&& g) {
  f();
  g();
  std::vector<double> tf, tg;
  for (int r = 0; r < repeats; ++r) {
    double t0 = bench::now_s();
    f();
    double t1 = bench::now_s();
    g();
    double t2 = bench::now_s();
    tf.push_back(t1 - t0);
    tg.push_back(t2 - t1);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

}  // namespace

int main() {
  std::printf("bench_matmul: C = A @ B, F32, square (n, n), row-major; GFLOP/s = 2 n^3 / median seconds\n");
  std::printf("cores: %d; OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s%s\n", omp_get_num_procs(),
              env_or_unset("OPENBLAS_CORETYPE"), env_or_unset("OPENBLAS_L2_SIZE"),
              std::getenv("OPENBLAS_CORETYPE") || std::getenv("OPENBLAS_L2_SIZE")
                  ? "  <- these slow OpenBLAS down; unset them (see ENVIRONMENT.md)"
                  : "  (both unset, as ENVIRONMENT.md asks for a reference run)");
#ifdef BRISK_BENCH_OPENBLAS
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
  const bool have_openblas = true;
#else
  std::printf("OpenBLAS: not found at build time (column left empty)\n");
  const bool have_openblas = false;
#endif
  std::printf("\n%6s %7s %10s %10s %10s %12s %15s\n", "size", "threads", "brisk", "Eigen", "OpenBLAS", "brisk/Eigen",
              "brisk/OpenBLAS");

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t n : {256, 512, 1024, 2048}) {
    std::vector<float> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    brisk::Tensor ta = brisk::from_blob(a.data(), {n, n}, brisk::DType::F32);
    brisk::Tensor tb = brisk::from_blob(b.data(), {n, n}, brisk::DType::F32);
    Eigen::Map<const RowMatrix> ea(a.data(), n, n), eb(b.data(), n, n);
    Eigen::Map<RowMatrix> ec(c.data(), n, n);
    const int repeats = n >= 2048 ? 5 : n >= 1024 ? 9 : 21;
    const double flops = 2.0 * double(n) * double(n) * double(n);

    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Eigen::setNbThreads(threads);
      // brisk and Eigen share the OpenMP pool, so they alternate; OpenBLAS (its own threads) runs
      // apart. Dropping the last result first lets the allocator hand its block back, so brisk,
      // like Eigen and OpenBLAS writing into c, reuses one warm output buffer (as a training
      // step does with the previous step's activations).
      brisk::Tensor result;
      auto brisk_call = [&] {
        result = brisk::Tensor();
        result = brisk::matmul(ta, tb);
      };
      const auto [t_brisk, t_eigen] = interleaved_medians(repeats, brisk_call, [&] { ec.noalias() = ea * eb; });
      settle();
      // The two results must agree (summation order differs: allow float rounding).
      std::vector<float> got = result.to_vector<float>();
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - c[i])));
      double t_blas = 0;
#ifdef BRISK_BENCH_OPENBLAS
      openblas_set_num_threads(threads);
      t_blas = bench::seconds_per_call(
          [&] {
            cblas_sgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(), int(n),
                        b.data(), int(n), 0.0f, c.data(), int(n));
          },
          1, repeats);
      settle();
#endif
      const double g_brisk = flops / t_brisk * 1e-9, g_eigen = flops / t_eigen * 1e-9;
      const double g_blas = have_openblas ? flops / t_blas * 1e-9 : 0;
      std::printf("%6lld %7d %10.1f %10.1f ", (long long)n, threads, g_brisk, g_eigen);
      if (have_openblas) {
        std::printf("%10.1f %12.2f %15.2f", g_blas, g_brisk / g_eigen, g_brisk / g_blas);
      } else {
        std::printf("%10s %12.2f %15s", "-", g_brisk / g_eigen, "-");
      }
      if (worst > 1e-3 * double(n)) std::printf("   MISMATCH: max |brisk - Eigen| = %g", worst);
      std::printf("\n");
    }
  }
  return 0;
}
