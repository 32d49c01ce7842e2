// examples/bench/bench_unary.cpp: the transcendental unary ops on a dense F32 tensor of 2^20
// elements (exp, tanh, sigmoid, gelu with the tanh form), brisk against PyTorch measured in the
// same run (a Python with torch: $TORCH_PYTHON, else the venv, else Debian's; skipped with a
// note when there is none), at 1 and 2 threads. brisk's F32 kernels for these go through
// glibc's libmvec (kernels/cpu/vmath.cpp). Prints ms per call (median) and brisk / PyTorch.
#include <cstdio>
#include <string>

#include "brisk.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

const char* kTorch = R"PY(
x = torch.randn(1 << 20)
print(0, "exp", per_call_ms(lambda: torch.exp(x), 50))
print(1, "tanh", per_call_ms(lambda: torch.tanh(x), 50))
print(2, "sigmoid", per_call_ms(lambda: torch.sigmoid(x), 50))
print(3, "gelu_tanh", per_call_ms(lambda: F.gelu(x, approximate="tanh"), 50))
)PY";

}  // namespace

int main() {
  std::printf("bench_unary: F32, 2^20 elements, ms per call (median); ratio < 1: brisk faster\n");
  Tensor x = randn({1 << 20});
  NoGradGuard no_grad;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::string which;
    const auto torch = bench::torch_times(kTorch, threads, which);
    const double ms[4] = {1e3 * bench::seconds_per_call([&] { bench::keep(exp(x)); }, 50),
                          1e3 * bench::seconds_per_call([&] { bench::keep(tanh(x)); }, 50),
                          1e3 * bench::seconds_per_call([&] { bench::keep(sigmoid(x)); }, 50),
                          1e3 * bench::seconds_per_call([&] { bench::keep(gelu(x, /*tanh=*/true)); }, 50)};
    const char* names[] = {"exp", "tanh", "sigmoid", "gelu_tanh"};
    std::printf("%d thread%s (PyTorch: %s)\n", threads, threads > 1 ? "s" : "", which.c_str());
    for (int i = 0; i < 4; ++i) {
      const std::string key = std::to_string(i) + " " + names[i];
      if (torch.count(key)) {
        std::printf("  %-10s brisk %7.3f ms  PyTorch %7.3f ms  ratio %.2f\n", names[i], ms[i], torch.at(key),
                    ms[i] / torch.at(key));
      } else {
        std::printf("  %-10s brisk %7.3f ms  PyTorch -\n", names[i], ms[i]);
      }
    }
  }
  return 0;
}
