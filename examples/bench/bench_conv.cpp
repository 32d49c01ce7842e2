// examples/bench/bench_conv.cpp: conv2d forward and backward, in milliseconds, for the two
// conv layers of the Fashion-MNIST CNN (batch 128, 3x3, padding 1), beside PyTorch's
// torch.nn.functional.conv2d timed in the same run with the same thread count (through
// /usr/bin/python3 with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset; "n/a" without torch).
// Backward follows the CNN: the first layer's input is data (weight gradient only), the
// second's needs both gradients. Threads: OMP_NUM_THREADS (default: all cores).
// Not a test: it asserts nothing.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "nn/functional.h"

using namespace brisk;
namespace F = brisk::nn::functional;

namespace {

struct Layer {
  const char* name;
  Shape x, w;
  bool input_grad;  // whether backward computes the input's gradient too
};

const Layer kLayers[] = {
    {"conv1", {128, 1, 28, 28}, {32, 1, 3, 3}, false},
    {"conv2", {128, 32, 14, 14}, {64, 32, 3, 3}, true},
};

// Times PyTorch on the same layers; prints "layer case ms" lines.
const char* kTorchScript = R"PY(
import sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
def per_call_ms(fn, iters, repeats=7):
    for _ in range(iters // 10 + 1):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters)
    return sorted(times)[len(times) // 2] * 1e3
for name, xs, ws, input_grad in [("conv1", (128, 1, 28, 28), (32, 1, 3, 3), False),
                                 ("conv2", (128, 32, 14, 14), (64, 32, 3, 3), True)]:
    x = torch.randn(*xs, requires_grad=input_grad)
    w = torch.randn(*ws, requires_grad=True)
    with torch.no_grad():
        g = torch.randn_like(F.conv2d(x, w, padding=1))
    def forward():
        with torch.no_grad():
            F.conv2d(x, w, padding=1)
    def forward_backward():
        F.conv2d(x, w, padding=1).backward(g)
        w.grad = None
        x.grad = None
    print(name, "forward", per_call_ms(forward, 20), flush=True)
    print(name, "forward+backward", per_call_ms(forward_backward, 10), flush=True)
)PY";

std::map<std::string, double> torch_times(int threads) {
  std::map<std::string, double> out;
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return out;
  const std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 - " + std::to_string(threads) +
                          " 2>/dev/null <<'BRISK_PY'\n" + kTorchScript + "\nBRISK_PY\n";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char layer[64], what[64];
  double ms;
  while (std::fscanf(p, "%63s %63s %lf", layer, what, &ms) == 3) out[std::string(layer) + " " + what] = ms;
  pclose(p);
  return out;
}

}  // namespace

int main() {
  const int threads = omp_get_max_threads();
  const std::map<std::string, double> torch = torch_times(threads);
  std::printf("conv2d, batch 128, 3x3, padding 1, %d thread(s); ms per call (median of 7)\n", threads);
  std::printf("%-7s %-22s %-20s %10s %10s %8s\n", "layer", "shapes", "case", "brisk", "pytorch", "ratio");
  for (const Layer& l : kLayers) {
    Tensor x = randn(l.x), w = randn(l.w);
    if (l.input_grad) x.requires_grad_();
    w.requires_grad_();
    Tensor g;
    {
      NoGradGuard ng;
      g = randn(F::conv2d(x, w, {}, {1, 1}, {1, 1}).sizes());
    }
    Attrs attrs;
    attrs.geometry = {1, 1, 1, 1, 1, 1, l.w[2], l.w[3]};
    attrs.dim = 1;
    const Tensor xd = x.detach(), wd = w.detach();

    std::map<std::string, double> ms;
    ms["forward"] = 1e3 * bench::seconds_per_call(
                              [&] {
                                NoGradGuard ng;
                                bench::keep(F::conv2d(x, w, {}, {1, 1}, {1, 1}));
                              },
                              20);
    ms["backward_input"] = 1e3 * bench::seconds_per_call(
                                     [&] {
                                       Attrs a = attrs;
                                       a.shape = l.x;
                                       bench::keep(call1(OpId::Conv2dBackwardInput, {g, wd}, a));
                                     },
                                     20);
    ms["backward_weight"] = 1e3 * bench::seconds_per_call(
                                      [&] {
                                        Attrs a = attrs;
                                        a.shape = l.w;
                                        bench::keep(call1(OpId::Conv2dBackwardWeight, {g, xd}, a));
                                      },
                                      20);
    ms["forward+backward"] = 1e3 * bench::seconds_per_call(
                                       [&] {
                                         F::conv2d(x, w, {}, {1, 1}, {1, 1}).backward(g);
                                         w.zero_grad();
                                         x.zero_grad();
                                       },
                                       10);
    char shapes[64];
    std::snprintf(shapes, sizeof shapes, "(%lld,%lld,%lld,%lld)*(%lld,%lld,3,3)", (long long)l.x[0], (long long)l.x[1],
                  (long long)l.x[2], (long long)l.x[3], (long long)l.w[0], (long long)l.w[1]);
    for (const char* c : {"forward", "backward_input", "backward_weight", "forward+backward"}) {
      auto it = torch.find(std::string(l.name) + " " + c);
      if (it != torch.end()) {
        std::printf("%-7s %-22s %-20s %10.3f %10.3f %8.2f\n", l.name, shapes, c, ms[c], it->second, ms[c] / it->second);
      } else {
        std::printf("%-7s %-22s %-20s %10.3f %10s %8s\n", l.name, shapes, c, ms[c], "n/a", "n/a");
      }
    }
  }
  return 0;
}
