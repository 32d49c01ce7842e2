// examples/bench/bench_overhead.cpp: per-op overhead of brisk on tiny tensors, the cost that
// dominates small models: a+b on 16 floats (plain, with requires_grad, under NoGradGuard)
// and y = (x*w).sum(); y.backward(). Prints microseconds per iteration, one line per case
// ("name us"), which examples/bench/overhead.sh sets beside LibTorch's numbers. The same two
// cases again with a profiling run active (engine/profiler.h) show what recording costs; the
// first rows are the profiler compiled in but off (one relaxed load per op).
#include <cstdio>

#include "brisk.h"
#include "engine/profiler.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

int main() {
  Tensor a = rand({16}), b = rand({16});
  Tensor ag = rand({16}).requires_grad_(), bg = rand({16}).requires_grad_();
  Tensor x = rand({16}), w = rand({16}).requires_grad_();

  double plain = bench::seconds_per_call([&] { bench::keep(a + b); }, 200000);
  double grad = bench::seconds_per_call([&] { bench::keep(ag + bg); }, 200000);
  double nograd = bench::seconds_per_call(
      [&] {
        NoGradGuard ng;
        bench::keep(ag + bg);
      },
      200000);
  double fwd_bwd = bench::seconds_per_call(
      [&] {
        Tensor y = (x * w).sum();
        y.backward();
      },
      50000);
  double plain_prof = 0, fwd_bwd_prof = 0;
  size_t events = 0;
  {
    profiler::Profiler run;
    plain_prof = bench::seconds_per_call([&] { bench::keep(a + b); }, 5000);
    fwd_bwd_prof = bench::seconds_per_call(
        [&] {
          Tensor y = (x * w).sum();
          y.backward();
        },
        2000);
    events = run.stop().events().size();
  }
  std::printf("add_16 %.3f\n", plain * 1e6);
  std::printf("add_16_requires_grad %.3f\n", grad * 1e6);
  std::printf("add_16_no_grad_guard %.3f\n", nograd * 1e6);
  std::printf("mul_sum_backward_16 %.3f\n", fwd_bwd * 1e6);
  std::printf("add_16_profiler_on %.3f\n", plain_prof * 1e6);
  std::printf("mul_sum_backward_16_profiler_on %.3f\n", fwd_bwd_prof * 1e6);
  std::fprintf(stderr, "(profiling run: %zu events recorded)\n", events);
  return 0;
}
