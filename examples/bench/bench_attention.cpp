// examples/bench/bench_attention.cpp: scaled dot-product attention, forward and forward +
// backward, F32 and BF16: brisk's fused op (Note [Fused attention]) against the fused op as it
// was before the transposed F32 tiles and the BF16 kernel ("before": the GEMM tiles,
// BRISK_ATTENTION=gemm; BF16 inputs converted to F32 and the output rounded, as the public
// function did), its math form (scaled_dot_product_attention_math: matmul, softmax, matmul) and
// PyTorch's torch.nn.functional.scaled_dot_product_attention on tensors of the same dtype,
// measured in the same run, over GPT-2-like shapes (head size 64), causal and not, on 1 and 2
// threads. Prints ms per call (median of repeated batches) and the ratios to PyTorch (< 1:
// brisk faster). Asserts nothing; a benchmark, not a test. Arguments: "quick" times only
// T = 256, 1024 and 2048.
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

const std::vector<Case> kAllCases = {
    {16, 4, 128, 64, false},  // bench_models' transformer layer
    {4, 12, 64, 64, true},    // GPT-2 124M at B 4, T 64
    {8, 12, 256, 64, true},   // GPT-2 124M at B 8, T 256
    {1, 12, 1024, 64, true},  // one GPT-2 context
    {1, 4, 2048, 64, true},   // long context
};

const char* kDtypes[] = {"F32", "BF16"};

int iters_of(const Case& c) { return c.T >= 1024 ? 3 : 10; }

std::string torch_body(const std::vector<Case>& cases) {
  std::string s;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string shape =
        std::to_string(c.B) + ", " + std::to_string(c.H) + ", " + std::to_string(c.T) + ", " + std::to_string(c.D);
    const std::string causal = c.causal ? "True" : "False";
    const std::string iters = std::to_string(iters_of(c));
    for (int d = 0; d < 2; ++d) {
      const std::string tag = std::to_string(i) + ", '" + kDtypes[d];
      const std::string dt = d == 0 ? "torch.float32" : "torch.bfloat16";
      s += "q, k, v = (torch.randn(" + shape + ", dtype=" + dt + ", requires_grad=True) for _ in range(3))\n";
      s += "print(" + tag + "-fwd', per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=" + causal +
           "), " + iters + "))\n";
      s += "print(" + tag +
           "-fwdbwd', per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=" + causal +
           ").sum().backward(), " + iters + "))\n";
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
  std::vector<Case> cases;
  for (const Case& c : kAllCases) {
    if (!quick || c.T >= 256) cases.push_back(c);
  }
  std::printf(
      "bench_attention: scaled dot-product attention, ms per call (median); before: the GEMM tiles (BF16: in F32); "
      "ratios < 1: brisk faster\n");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::string which;
    const auto torch = bench::torch_times(torch_body(cases), threads, which);
    std::printf("\n%d thread%s (PyTorch: %s)\n", threads, threads > 1 ? "s" : "", which.c_str());
    std::printf(
        "| B, H, T, D | causal | dtype | pass | fused ms | before ms | math ms | PyTorch ms | fused/PT | before/PT | "
        "fused/before |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      for (int d = 0; d < 2; ++d) {
        const DType dt = d == 0 ? DType::F32 : DType::BF16;
        manual_seed(1);
        Tensor q = randn({c.B, c.H, c.T, c.D}).to(dt).requires_grad_(true);
        Tensor k = randn({c.B, c.H, c.T, c.D}).to(dt).requires_grad_(true);
        Tensor v = randn({c.B, c.H, c.T, c.D}).to(dt).requires_grad_(true);
        for (const bool backward : {false, true}) {
          enum Form { kFused, kBefore, kMath };
          auto run = [&](Form form) {
            if (form == kBefore) setenv("BRISK_ATTENTION", "gemm", 1);
            const double ms = 1e3 * bench::seconds_per_call(
                                        [&] {
                                          Tensor o;
                                          if (form == kMath) {
                                            o = scaled_dot_product_attention_math(q, k, v, {}, 0.0, c.causal);
                                          } else if (form == kBefore && dt != DType::F32) {
                                            o = scaled_dot_product_attention(q.to(DType::F32), k.to(DType::F32),
                                                                             v.to(DType::F32), {}, 0.0, c.causal)
                                                    .to(dt);
                                          } else {
                                            o = scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal);
                                          }
                                          if (backward) {
                                            o.sum().backward();
                                          } else {
                                            bench::keep(o);
                                          }
                                        },
                                        iters_of(c), 5);
            unsetenv("BRISK_ATTENTION");
            return ms;
          };
          const double fused = run(kFused), before = run(kBefore), math = run(kMath);
          const auto it = torch.find(std::to_string(i) + " " + kDtypes[d] + (backward ? "-fwdbwd" : "-fwd"));
          const double pt = it == torch.end() ? 0 : it->second;
          char r_fused[32] = "-", r_before[32] = "-";
          if (pt > 0) {
            std::snprintf(r_fused, sizeof r_fused, "%.2f", fused / pt);
            std::snprintf(r_before, sizeof r_before, "%.2f", before / pt);
          }
          std::printf("| %ld, %ld, %ld, %ld | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %.2f |\n", long(c.B),
                      long(c.H), long(c.T), long(c.D), c.causal ? "yes" : "no", kDtypes[d],
                      backward ? "fwd+bwd" : "fwd", fused, before, math, pt, r_fused, r_before, fused / before);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
