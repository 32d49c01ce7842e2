// examples/bench/bench_linear_ce.cpp: linear_cross_entropy (the head fused into its loss, Note
// [Linear cross-entropy recomputes the logits] in engine/ops/linear_cross_entropy.cpp) against
// cross_entropy(linear(x, w), target), in the same run: forward + backward time and the CPU
// allocator's peak bytes above what was allocated before the step, for GPT-2's head (K = 768,
// V = 50257) at N = 256 and 2048 tokens, 1 and 2 threads, F32 and BF16 autocast; and a whole
// GPT-2 124M forward + backward in both forms; and linear_gelu against gelu(linear) (the gelu mode).
// Usage: bench_linear_ce [N,N,...] [repeats] [threads,...]   (defaults: 256,2048, 3 and 1,2)
//        bench_linear_ce gpt2 [B] [T] [repeats]   a whole GPT-2 124M forward + backward (no
//        optimizer step) with GPT2::loss against cross_entropy of GPT2::forward (defaults 4, 256, 3)
//        bench_linear_ce gelu [N,N,...] [repeats] [threads,...]   linear_gelu against gelu(linear)
//        at GPT-2's c_fc (defaults 256,2048, 9 and 1,2)
// Not here: correctness (tests/test_linear_cross_entropy.cpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autocast.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/threads.h"
#include "examples/bench/bench_common.h"
#include "nn/models/gpt2.h"

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

// GPT-2 124M, forward + backward of the mean next-token loss, in both forms.
int gpt2_main(int64_t b, int64_t t, int repeats) {
  nn::models::GPT2Config c;
  c.dropout = 0;
  manual_seed(1);
  nn::models::GPT2 model(c);
  model.train(true);
  const Tensor idx = randint(0, c.vocab_size, {b, t}), targets = randint(0, c.vocab_size, {b, t});
  std::printf(
      "bench_linear_ce gpt2: GPT-2 124M forward + backward at B %lld, T %lld, %d threads, ms per step "
      "(median of %d) and the CPU allocator's peak MB above the step's start\n",
      (long long)b, (long long)t, get_num_threads(), repeats);
  std::printf(
      "| dtype | GPT2::loss ms | forward + cross_entropy ms | time ratio | GPT2::loss MB | "
      "forward + cross_entropy MB | memory ratio |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (bool bf16 : {false, true}) {
    auto step = [&](bool fused) {
      model.zero_grad();
      Tensor loss;
      {
        AutocastGuard guard(DeviceType::CPU, DType::BF16, bf16);
        loss = fused ? model.loss(idx, targets)
                     : cross_entropy(model.forward(idx).reshape({b * t, c.vocab_size}), targets.reshape({b * t}));
      }
      loss.backward();
    };
    Result r[2];
    for (int fused = 1; fused >= 0; --fused) {
      step(fused);
      model.zero_grad();
      Allocator& a = cpu_allocator();
      const size_t before = a.stats().allocated;
      a.reset_peak();
      step(fused);
      r[fused].peak_mb = double(a.stats().peak - before) / 1e6;
    }
    // Interleaved, so that a change in the machine's load hits both forms alike.
    std::vector<double> ms[2];
    for (int i = 0; i < repeats; ++i) {
      for (int fused = 1; fused >= 0; --fused) {
        const double t0 = bench::now_s();
        step(fused);
        ms[fused].push_back(1e3 * (bench::now_s() - t0));
      }
    }
    for (int fused = 0; fused < 2; ++fused) {
      std::sort(ms[fused].begin(), ms[fused].end());
      r[fused].ms = ms[fused][ms[fused].size() / 2];
    }
    std::printf("| %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", bf16 ? "BF16 autocast" : "F32", r[1].ms, r[0].ms,
                r[1].ms / r[0].ms, r[1].peak_mb, r[0].peak_mb, r[1].peak_mb / r[0].peak_mb);
    std::fflush(stdout);
  }
  return 0;
}

// linear_gelu (Note [Linear with GELU] in engine/ops/linalg.cpp) against gelu(linear) at GPT-2's
// c_fc (x (N, 768) @ w (768, 3072), stored (in, out) as GPT-2's, + bias, tanh form): the forward
// alone (no grad) and forward + backward, ms (median of `repeats`, the two forms interleaved).
int gelu_main(const std::vector<int64_t>& ns, int repeats, const std::vector<int>& thread_counts) {
  constexpr int64_t kHidden = 4 * kK;
  std::printf(
      "bench_linear_ce gelu: GPT-2's c_fc + GELU, x (N, %lld) @ w (%lld, %lld) + bias then gelu (tanh), ms per\n"
      "call (median of %d, fused and unfused interleaved); ratios < 1: fused better\n",
      (long long)kK, (long long)kK, (long long)kHidden, repeats);
  std::printf("| threads | dtype | N | pass | fused ms | unfused ms | fused/unfused |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  manual_seed(1);
  const Tensor w = (randn({kK, kHidden}) * 0.02).requires_grad_(true), bias = zeros({kHidden}).requires_grad_(true);
  for (int threads : thread_counts) {
    set_num_threads(threads);
    for (bool bf16 : {false, true}) {
      for (int64_t n : ns) {
        const Tensor x = randn({n, kK}).requires_grad_(true);
        const Tensor gy = randn({n, kHidden});
        for (bool backward : {false, true}) {
          auto call = [&](bool fused) {
            const double t0 = bench::now_s();
            if (backward) {
              x.zero_grad();
              w.zero_grad();
              bias.zero_grad();
            }
            GradModeGuard grad_mode(backward);
            Tensor y;
            {
              AutocastGuard guard(DeviceType::CPU, DType::BF16, bf16);
              y = fused ? linear_gelu(x, w, bias, true, true) : gelu(linear_in_out(x, w, bias), true);
            }
            if (backward) y.backward(bf16 ? gy.to(DType::BF16) : gy);
            return 1e3 * (bench::now_s() - t0);
          };
          call(true);  // warm: the allocator's cache, the autocast casts
          call(false);
          std::vector<double> ms[2];
          for (int i = 0; i < repeats; ++i)
            for (int fused = 1; fused >= 0; --fused) ms[fused].push_back(call(fused));
          for (auto& v : ms) std::sort(v.begin(), v.end());
          const double f = ms[1][ms[1].size() / 2], u = ms[0][ms[0].size() / 2];
          std::printf("| %d | %s | %lld | %s | %.2f | %.2f | %.2f |\n", threads, bf16 ? "BF16 autocast" : "F32",
                      (long long)n, backward ? "forward + backward" : "forward", f, u, f / u);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "gelu") {
    std::vector<int64_t> ns = {256, 2048};
    if (argc > 2) {
      ns.clear();
      for (const std::string& s : bench::split(argv[2])) ns.push_back(std::atoll(s.c_str()));
    }
    std::vector<int> thread_counts = {1, 2};
    if (argc > 4) {
      thread_counts.clear();
      for (const std::string& s : bench::split(argv[4])) thread_counts.push_back(std::atoi(s.c_str()));
    }
    return gelu_main(ns, argc > 3 ? std::atoi(argv[3]) : 9, thread_counts);
  }
  if (argc > 1 && std::string(argv[1]) == "gpt2") {
    return gpt2_main(argc > 2 ? std::atoll(argv[2]) : 4, argc > 3 ? std::atoll(argv[3]) : 256,
                     argc > 4 ? std::atoi(argv[4]) : 3);
  }
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
