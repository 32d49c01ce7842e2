// examples/bench/bench_residual.cpp: GPT-2's residual add, h + branch with branch a temporary
// (B, T, 768) F32, lent to the result (Note [Donated operands] in engine/ops/elementwise.cpp)
// against the allocating add (set_operand_donation(false)), measured in the same run with the
// two interleaved so that a shared machine's noise falls on both. The branch is written just
// before each add, as the projection before a residual writes it. Under autograd (the branch
// and h require grad, as in training) and without. Prints us per add (median of the add
// alone), the ratio lent / allocating (< 1: lending is faster) and the allocations per add.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "brisk.h"
#include "engine/allocator.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

uint64_t requests() {
  const AllocatorStats a = cpu_allocator().stats();
  return a.system_allocs + a.cache_hits;
}

// One add of h and a fresh branch, timed alone; `grad`: both require grad (a graph is recorded).
double one_add(const Tensor& h, const Tensor& src, bool grad, uint64_t& allocs) {
  Tensor branch = src * 1.0;  // written now, as the projection writes it
  if (grad) branch = branch.detach().requires_grad_() * 1.0;
  const uint64_t r0 = requests();
  const double t0 = bench::now_s();
  Tensor y = h + std::move(branch);
  const double t1 = bench::now_s();
  allocs += requests() - r0;
  bench::keep(y);
  return t1 - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  std::printf(
      "bench_residual: h + branch (F32), branch a temporary lent to the result vs the allocating add; "
      "us per add (median), lent / allocating (< 1: lending faster), allocations per add\n");
  std::printf("| B x T | thr | autograd | lent us | allocating us | lent / alloc | allocs lent / alloc |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (auto [b, t] : {std::pair<int64_t, int64_t>{4, 64}, {8, 256}}) {
    Tensor src = randn({b, t, 768});
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (bool grad : {false, true}) {
        Tensor h = randn({b, t, 768});
        if (grad) h.requires_grad_();
        const int iters = b * t > 1024 ? 60 : 300;
        std::vector<double> lent, alloc;
        uint64_t n_lent = 0, n_alloc = 0;
        for (int i = 0; i < iters; ++i) {
          for (bool donate : {i % 2 == 0, i % 2 != 0}) {  // alternate which goes first
            set_operand_donation(donate);
            const double s = one_add(h, src, grad, donate ? n_lent : n_alloc);
            (donate ? lent : alloc).push_back(s);
          }
        }
        set_operand_donation(true);
        const double l = 1e6 * median(lent), a = 1e6 * median(alloc);
        std::printf("| %lldx%lld | %d | %s | %.1f | %.1f | %.2f | %.2f / %.2f |\n", (long long)b, (long long)t, threads,
                    grad ? "yes" : "no", l, a, l / a, double(n_lent) / iters, double(n_alloc) / iters);
      }
    }
  }
  return 0;
}
