// examples/bench/bench_attention.cpp: scaled dot-product attention, forward and forward +
// backward, F32: brisk's fused op (Note [Fused attention]) against its math form
// (scaled_dot_product_attention_math: matmul, softmax, matmul) and PyTorch's
// torch.nn.functional.scaled_dot_product_attention measured in the same run, over GPT-2-like
// shapes (head size 64), causal and not, on 1 and 2 threads. Prints ms per call and the ratios
// (< 1: brisk's fused op faster). Asserts nothing; a benchmark, not a test.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/threads.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

struct Case {
  int64_t B, H, T, D;
  bool causal;
};

const std::vector<Case> kCases = {
    {16, 4, 128, 64, false},  // bench_models' transformer layer
    {4, 12, 64, 64, true},    // GPT-2 124M at B 4, T 64
    {8, 12, 256, 64, true},   // GPT-2 124M at B 8, T 256
    {1, 12, 1024, 64, true},  // one GPT-2 context
    {1, 4, 2048, 64, true},   // long context
};

std::string torch_body() {
  std::string s;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    const std::string shape =
        std::to_string(c.B) + ", " + std::to_string(c.H) + ", " + std::to_string(c.T) + ", " + std::to_string(c.D);
    const std::string causal = c.causal ? "True" : "False";
    const int iters = c.T >= 1024 ? 3 : 10;
    s += "q, k, v = (torch.randn(" + shape + ", requires_grad=True) for _ in range(3))\n";
    s += "print(" + std::to_string(i) +
         ", 'fwd', per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=" + causal + "), " +
         std::to_string(iters) + "))\n";
    s += "print(" + std::to_string(i) +
         ", 'fwdbwd', per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=" + causal +
         ").sum().backward(), " + std::to_string(iters) + "))\n";
  }
  return s;
}

}  // namespace

int main() {
  std::printf("bench_attention: F32 scaled dot-product attention, ms per call (median); ratios < 1: fused faster\n");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::string which;
    const auto torch = bench::torch_times(torch_body(), threads, which);
    std::printf("\n%d thread%s (PyTorch: %s)\n", threads, threads > 1 ? "s" : "", which.c_str());
    std::printf("| B, H, T, D | causal | pass | fused ms | math ms | PyTorch ms | fused/math | fused/PT |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < kCases.size(); ++i) {
      const Case& c = kCases[i];
      manual_seed(1);
      Tensor q = randn({c.B, c.H, c.T, c.D}).requires_grad_(true);
      Tensor k = randn({c.B, c.H, c.T, c.D}).requires_grad_(true);
      Tensor v = randn({c.B, c.H, c.T, c.D}).requires_grad_(true);
      const int iters = c.T >= 1024 ? 3 : 10;
      for (const bool backward : {false, true}) {
        auto run = [&](bool math) {
          return 1e3 * bench::seconds_per_call(
                           [&] {
                             Tensor o = math ? scaled_dot_product_attention_math(q, k, v, {}, 0.0, c.causal)
                                             : scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal);
                             if (backward) {
                               o.sum().backward();
                             } else {
                               bench::keep(o);
                             }
                           },
                           iters, 5);
        };
        const double fused = run(false), math = run(true);
        const auto it = torch.find(std::to_string(i) + (backward ? " fwdbwd" : " fwd"));
        const double pt = it == torch.end() ? 0 : it->second;
        char ratio[32] = "-";
        if (pt > 0) std::snprintf(ratio, sizeof ratio, "%.2f", fused / pt);
        std::printf("| %ld, %ld, %ld, %ld | %s | %s | %.2f | %.2f | %.2f | %.2f | %s |\n", long(c.B), long(c.H),
                    long(c.T), long(c.D), c.causal ? "yes" : "no", backward ? "fwd+bwd" : "fwd", fused, math, pt,
                    fused / math, ratio);
      }
    }
  }
  return 0;
}
