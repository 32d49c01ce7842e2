// examples/bench/bench_linear_ce.cpp: linear_cross_entropy (the head fused into its loss, Note
// [Linear cross-entropy recomputes the logits] in engine/ops/linear_cross_entropy.cpp) against
// cross_entropy(linear(x, w), target), in the same run: forward + backward time and the CPU
// allocator's peak bytes above what was allocated before the step, for GPT-2's head (K = 768,
// V = 50257) at N = 256 and 2048 tokens, 1 and 2 threads, F32 and BF16 autocast.
// Usage: bench_linear_ce [N,N,...] [repeats] [threads,...]   (defaults: 256,2048, 3 and 1,2)
// Not here: correctness (tests/test_linear_cross_entropy.cpp).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autocast.h"
#include "engine/functions.h"
#include "engine/threads.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

constexpr int64_t kK = 768, kV = 50257;

struct Result {
  double ms = 0;
  double peak_mb = 0;
  double loss = 0;
};

// One forward + backward of either form; x and w are leaves whose gradients are dropped first.
double step(bool fused, bool bf16, const Tensor& x, const Tensor& w, const Tensor& target) {
  x.zero_grad();
  w.zero_grad();
  Tensor loss;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16, bf16);
    loss = fused ? linear_cross_entropy(x, w, target) : cross_entropy(linear(x, w), target);
  }
  loss.backward();
  return loss.item<double>();
}

Result measure(bool fused, bool bf16, const Tensor& x, const Tensor& w, const Tensor& target, int repeats) {
  Result r;
  step(fused, bf16, x, w, target);  // warm: the allocator's cache, the autocast casts
  x.zero_grad();
  w.zero_grad();
  Allocator& a = cpu_allocator();
  const size_t before = a.stats().allocated;
  a.reset_peak();
  r.loss = step(fused, bf16, x, w, target);
  r.peak_mb = double(a.stats().peak - before) / 1e6;
  r.ms = 1e3 * bench::seconds_per_call([&] { step(fused, bf16, x, w, target); }, 1, repeats);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ns = {256, 2048};
  if (argc > 1) {
    ns.clear();
    for (const std::string& s : bench::split(argv[1])) ns.push_back(std::atoll(s.c_str()));
  }
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  std::vector<int> thread_counts = {1, 2};
  if (argc > 3) {
    thread_counts.clear();
    for (const std::string& s : bench::split(argv[3])) thread_counts.push_back(std::atoi(s.c_str()));
  }
  std::printf(
      "bench_linear_ce: GPT-2's head and loss, x (N, %lld) @ w (%lld, %lld)^T then cross_entropy, forward +\n"
      "backward, ms per step (median of %d) and the CPU allocator's peak MB above the step's start\n"
      "(w.grad included); ratios < 1: fused better\n",
      (long long)kK, (long long)kV, (long long)kK, repeats);
  std::printf(
      "| threads | dtype | N | fused ms | unfused ms | fused/unfused time | fused MB | unfused MB | "
      "fused/unfused memory | loss difference |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  manual_seed(1);
  const Tensor w = (randn({kV, kK}) * 0.02).requires_grad_(true);
  for (int threads : thread_counts) {
    set_num_threads(threads);
    for (bool bf16 : {false, true}) {
      for (int64_t n : ns) {
        const Tensor x = randn({n, kK}).requires_grad_(true);
        const Tensor target = randint(0, kV, {n});
        const Result f = measure(true, bf16, x, w, target, repeats);
        const Result u = measure(false, bf16, x, w, target, repeats);
        std::printf("| %d | %s | %lld | %.1f | %.1f | %.2f | %.0f | %.0f | %.2f | %.1e |\n", threads,
                    bf16 ? "BF16 autocast" : "F32", (long long)n, f.ms, u.ms, f.ms / u.ms, f.peak_mb, u.peak_mb,
                    f.peak_mb / u.peak_mb, std::abs(f.loss - u.loss));
        std::fflush(stdout);
      }
    }
  }
}
