// examples/bench/reference/overhead_libtorch.cpp: the same loops as bench_overhead.cpp in
// LibTorch (Debian's libtorch-dev 1.13), the reference for per-op overhead. Built and run by
// examples/bench/overhead.sh; never part of brisk's build.
#include <torch/torch.h>

#include <cstdio>

#include "examples/bench/bench_common.h"

int main() {
  torch::set_num_threads(1);
  auto a = torch::rand({16}), b = torch::rand({16});
  auto ag = torch::rand({16}).requires_grad_(), bg = torch::rand({16}).requires_grad_();
  auto x = torch::rand({16}), w = torch::rand({16}).requires_grad_();

  double plain = bench::seconds_per_call([&] { bench::keep(a + b); }, 200000);
  double grad = bench::seconds_per_call([&] { bench::keep(ag + bg); }, 200000);
  double nograd = bench::seconds_per_call(
      [&] {
        torch::NoGradGuard ng;
        bench::keep(ag + bg);
      },
      200000);
  double fwd_bwd = bench::seconds_per_call(
      [&] {
        auto y = (x * w).sum();
        y.backward();
      },
      50000);
  std::printf("add_16 %.3f\n", plain * 1e6);
  std::printf("add_16_requires_grad %.3f\n", grad * 1e6);
  std::printf("add_16_no_grad_guard %.3f\n", nograd * 1e6);
  std::printf("mul_sum_backward_16 %.3f\n", fwd_bwd * 1e6);
  return 0;
}
