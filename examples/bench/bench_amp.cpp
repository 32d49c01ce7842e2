// examples/bench/bench_amp.cpp: mixed precision on the CPU, measured in one run. The GEMM
// section times brisk's F32 GEMM (kernels/cpu/gemm.h) against the BF16 GEMM
// (kernels/cpu/gemm_bf16.h) on each of its paths this CPU runs (AMX, AVX512-BF16, and the
// convert-to-F32 fallback), square n = 512, 1024, 2048, on 2 threads and 1: GFLOP/s as 2 n^3
// over the median of several calls, and the ratio of the best BF16 path to F32.
// Not a test: it asserts nothing (tests/test_gemm_bf16.cpp checks the values).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "examples/bench/bench_common.h"
#include "kernels/cpu/gemm_bf16.h"

using namespace brisk;
using namespace brisk::kernels::cpu;

namespace {

double gflops(double flops, double seconds) { return flops / seconds * 1e-9; }

struct GemmRow {
  double f32, amx, avx512, fallback;
};

// Median seconds of one c = a @ b on `path`; 0 when this CPU lacks it.
double time_bf16(Bf16GemmPath path, const std::vector<BFloat16>& a, const std::vector<BFloat16>& b,
                 std::vector<float>& c, int64_t n, int threads, int repeats) {
  set_bf16_gemm_path(path);
  if (bf16_gemm_path() != path) return 0;  // this CPU lacks the path
  const double s = bench::seconds_per_call(
      [&] {
        gemm_bf16({a.data(), n, n, n, 1}, {b.data(), n, n, n, 1}, {c.data(), n, n, n, 1}, false, threads);
      },
      1, repeats);
  set_bf16_gemm_path(Bf16GemmPath::Auto);
  return s;
}

GemmRow measure(int64_t n, int threads) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a32(size_t(n * n)), b32(size_t(n * n)), c(size_t(n * n));
  std::vector<BFloat16> a16(a32.size()), b16(b32.size());
  for (size_t i = 0; i < a32.size(); ++i) {
    a16[i] = BFloat16(dist(rng));
    b16[i] = BFloat16(dist(rng));
    a32[i] = float(a16[i]);
    b32[i] = float(b16[i]);
  }
  const int repeats = n >= 2048 ? 3 : n >= 1024 ? 5 : 9;
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const double t32 = bench::seconds_per_call(
      [&] {
        gemm<float>({a32.data(), n, n, n, 1}, {b32.data(), n, n, n, 1}, {c.data(), n, n, n, 1}, false, threads);
      },
      1, repeats);
  auto rate = [&](double s) { return s > 0 ? gflops(flops, s) : 0.0; };
  GemmRow row{gflops(flops, t32), 0, 0, 0};
  row.amx = rate(time_bf16(Bf16GemmPath::Amx, a16, b16, c, n, threads, repeats));
  row.avx512 = rate(time_bf16(Bf16GemmPath::Avx512, a16, b16, c, n, threads, repeats));
  row.fallback = rate(time_bf16(Bf16GemmPath::Fallback, a16, b16, c, n, threads, repeats));
  return row;
}

void print_rate(double g) {
  if (g > 0) {
    std::printf(" %10.1f", g);
  } else {
    std::printf(" %10s", "n/a");
  }
}

void gemm_section() {
  std::printf("== GEMM: c (F32) = a @ b, square n, row-major; GFLOP/s = 2 n^3 / median seconds\n");
  std::printf("cores: %d; BF16 path auto-selected: %s (n/a: this CPU lacks the path)\n", omp_get_num_procs(),
              bf16_gemm_path_name(bf16_gemm_path()));
  std::printf("%6s %7s %10s %10s %10s %10s %10s\n", "n", "threads", "F32", "BF16 amx", "BF16 avx", "BF16 fb",
              "best/F32");
  for (int threads : {2, 1}) {
    for (int64_t n : {512, 1024, 2048}) {
      const GemmRow r = measure(n, threads);
      std::printf("%6lld %7d", (long long)n, threads);
      for (double g : {r.f32, r.amx, r.avx512, r.fallback}) print_rate(g);
      const double best = std::max({r.amx, r.avx512, r.fallback});
      std::printf(" %10.2f\n", best / r.f32);
    }
  }
}

}  // namespace

int main() {
  gemm_section();
  // ---- further sections (the CNN epoch under BF16 autocast) go below this line.
  return 0;
}
