// examples/bench/bench_strided.cpp: the CPU elementwise loop on layouts that do not run along
// memory (a transposed input, an every-other-column slice, a transposed output) with the tiled
// walk (Note [Tiled elementwise walk] in kernels/cpu/loops.h) against the output-order walk,
// both measured in this run; and one vs all threads on contiguous adds of growing size, which
// sets kParallelGrain. Ratios > 1: the tiled walk (or one thread) is faster.
//   bench_strided [N]   N x N F32 matrices (default 2048)
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "bench_common.h"
#include "brisk.h"
#include "kernels/cpu/loops.h"

using namespace brisk;

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2048;
  Tensor a = randn({n, n}), b = randn({n, n});
  Tensor dst = empty({n, n});
  struct Case {
    const char* name;
    std::function<void()> fn;
  } cases[] = {
      {"relu(contiguous)", [&] { bench::keep(relu(a)); }},
      {"relu(a.t())", [&] { bench::keep(relu(a.t())); }},
      {"a.t() + b", [&] { bench::keep(a.t() + b); }},
      {"a.t() + b.t()", [&] { bench::keep(a.t() + b.t()); }},
      {"a.t().contiguous()", [&] { bench::keep(a.t().contiguous()); }},
      {"dst.t().copy_(a)", [&] { dst.t().copy_(a); }},
      {"relu(a[:, ::2])", [&] { bench::keep(relu(slice(a, 1, 0, n, 2))); }},
  };
  auto& tiling = kernels::cpu::elementwise_tiling();
  std::printf("bench_strided: %lld x %lld F32, %d threads, median of 7\n", (long long)n, (long long)n,
              omp_get_max_threads());
  std::printf("%-22s %12s %12s %8s\n", "case", "old walk us", "tiled us", "ratio");
  for (const Case& c : cases) {
    tiling = false;
    const double old_s = bench::seconds_per_call(c.fn, 10);
    tiling = true;
    const double new_s = bench::seconds_per_call(c.fn, 10);
    std::printf("%-22s %12.1f %12.1f %7.2fx\n", c.name, old_s * 1e6, new_s * 1e6, old_s / new_s);
  }

  std::printf("\ncontiguous a + b, one thread vs %d (the grain is %lld elements per thread)\n", omp_get_max_threads(),
              (long long)kernels::cpu::kParallelGrain);
  std::printf("%-10s %10s %10s %8s\n", "elements", "1 thr us", "all us", "1/all");
  const int max_threads = omp_get_max_threads();
  for (int64_t m : {16384, 32768, 65536, 131072, 262144, 1048576}) {
    Tensor x = randn({m}), y = randn({m});
    Tensor out = empty({m});
    auto add = [&] {
      kernels::cpu::elementwise<float, float, float>(out, {&x, &y}, [](float p, float q) { return p + q; });
    };
    omp_set_num_threads(1);
    const double one = bench::seconds_per_call(add, 200);
    omp_set_num_threads(max_threads);
    // threads_for(m) would pick one thread below the grain: force them all with a grain of 1.
    auto add_all = [&] {
#pragma omp parallel num_threads(max_threads)
      {
        const int t = omp_get_thread_num();
        const int64_t chunk = (m + max_threads - 1) / max_threads, b0 = t * chunk, e0 = std::min(m, b0 + chunk);
        const float* px = x.data<float>();
        const float* py = y.data<float>();
        float* po = out.data<float>();
        for (int64_t i = b0; i < e0; ++i) po[i] = px[i] + py[i];
      }
    };
    const double all = bench::seconds_per_call(add_all, 200);
    std::printf("%-10lld %10.2f %10.2f %7.2fx\n", (long long)m, one * 1e6, all * 1e6, all / one);
  }
  return 0;
}
