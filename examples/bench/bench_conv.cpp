// examples/bench/bench_conv.cpp: conv2d forward and backward, in milliseconds, for the two
// conv layers of the Fashion-MNIST CNN (batch 128, 3x3, padding 1), and the relu + 2x2 max pool
// that follows each, beside PyTorch timed in the same run with the same thread count
// (bench::torch_times: a venv's PyTorch 2.x, else /usr/bin/python3's; OPENBLAS_CORETYPE /
// OPENBLAS_L2_SIZE unset; "n/a" without torch).
// Backward follows the CNN: the first layer's input is data (weight gradient only), the
// second's needs both gradients. The plain rows are the default path (Winograd F(2x2, 3x3)
// where it fits, the second layer; else the direct kernel); "direct" rows time the same op with
// Winograd off (kernels/cpu/conv.h: set_winograd_conv), "im2col" rows with the direct kernel off
// too (set_direct_conv), the path both replaced. Threads: OMP_NUM_THREADS (default: all
// cores). Not a test: it asserts nothing.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "kernels/cpu/conv.h"
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

// PyTorch on the same cases (bench::torch_times: the venv's PyTorch 2.x when present, else
// Debian's 1.13); prints "index case ms" lines, index 0/1 the conv layers, 2/3 the pools.
const char* kTorchScript = R"PY(
for i, (xs, ws, input_grad) in enumerate([((128, 1, 28, 28), (32, 1, 3, 3), False),
                                          ((128, 32, 14, 14), (64, 32, 3, 3), True)]):
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
    print(i, "forward", per_call_ms(forward, 20), flush=True)
    print(i, "forward+backward", per_call_ms(forward_backward, 10), flush=True)
for i, xs in [(2, (128, 32, 28, 28)), (3, (128, 64, 14, 14))]:
    x = torch.randn(*xs, requires_grad=True)
    with torch.no_grad():
        g = torch.randn_like(F.max_pool2d(x, 2))
    def pool():
        with torch.no_grad():
            F.max_pool2d(x, 2)
    def relu_pool():
        with torch.no_grad():
            F.max_pool2d(F.relu(x), 2)
    def relu_pool_backward():
        F.max_pool2d(F.relu(x), 2).backward(g)
        x.grad = None
    print(i, "forward", per_call_ms(pool, 20), flush=True)
    print(i, "relu+pool", per_call_ms(relu_pool, 20), flush=True)
    print(i, "relu+pool+backward", per_call_ms(relu_pool_backward, 10), flush=True)
)PY";

// One table row: brisk's ms beside PyTorch's (n/a without it).
void row(const std::map<std::string, double>& torch, int index, const char* layer, const char* shapes, const char* what,
         double ms) {
  auto it = torch.find(std::to_string(index) + " " + what);
  if (it != torch.end()) {
    std::printf("%-7s %-26s %-20s %10.3f %10.3f %8.2f\n", layer, shapes, what, ms, it->second, ms / it->second);
  } else {
    std::printf("%-7s %-26s %-20s %10.3f %10s %8s\n", layer, shapes, what, ms, "n/a", "n/a");
  }
}

}  // namespace

int main() {
  const int threads = omp_get_max_threads();
  std::string which;
  const std::map<std::string, double> torch = bench::torch_times(kTorchScript, threads, which);
  std::printf(
      "conv2d (batch 128, 3x3, padding 1) and relu + 2x2 max pool, %d thread(s); ms per call (median of 7);\n"
      "PyTorch: %s\n",
      threads, which.c_str());
  std::printf("%-7s %-26s %-20s %10s %10s %8s\n", "layer", "shapes", "case", "brisk", "pytorch", "ratio");
  int index = 0;
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
    // the three ops as they run by default (Winograd where it fits, else the direct kernel), then
    // with Winograd off (the direct kernel), then through im2col + GEMM (the path both replaced)
    struct Path {
      const char* suffix;
      bool winograd, direct;
    };
    for (const Path& path : {Path{"", true, true}, Path{" direct", false, true}, Path{" im2col", false, false}}) {
      kernels::cpu::conv::set_winograd_conv(path.winograd);
      kernels::cpu::conv::set_direct_conv(path.direct);
      const std::string suffix = path.suffix;
      ms["forward" + suffix] = 1e3 * bench::seconds_per_call(
                                         [&] {
                                           NoGradGuard ng;
                                           bench::keep(F::conv2d(x, w, {}, {1, 1}, {1, 1}));
                                         },
                                         20);
      // one backward op (its output's shape in attrs.shape), ms per call
      auto backward_ms = [&](OpId op, const Tensor& other, const Shape& shape) {
        Attrs a = attrs;
        a.shape = shape;
        return 1e3 * bench::seconds_per_call([&] { bench::keep(call1(op, {g, other}, a)); }, 20);
      };
      ms[(suffix.empty() ? "backward_input" : "bwd_input") + suffix] = backward_ms(OpId::Conv2dBackwardInput, wd, l.x);
      ms[(suffix.empty() ? "backward_weight" : "bwd_weight") + suffix] =
          backward_ms(OpId::Conv2dBackwardWeight, xd, l.w);
    }
    kernels::cpu::conv::set_winograd_conv(true);
    kernels::cpu::conv::set_direct_conv(true);
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
    for (const char* c :
         {"forward", "forward direct", "forward im2col", "backward_input", "bwd_input direct", "bwd_input im2col",
          "backward_weight", "bwd_weight direct", "bwd_weight im2col", "forward+backward"})
      row(torch, index, l.name, shapes, c, ms[c]);
    ++index;
  }
  // The CNN's relu -> 2x2 max pool after each conv, forward and through backward.
  for (const Shape& xs : {Shape{128, 32, 28, 28}, Shape{128, 64, 14, 14}}) {
    Tensor x = randn(xs).requires_grad_();
    Tensor g;
    {
      NoGradGuard ng;
      g = randn(F::max_pool2d(x, {2, 2}).sizes());
    }
    std::map<std::string, double> ms;
    ms["forward"] = 1e3 * bench::seconds_per_call(
                              [&] {
                                NoGradGuard ng;
                                bench::keep(F::max_pool2d(x, {2, 2}));
                              },
                              20);
    ms["relu+pool"] = 1e3 * bench::seconds_per_call(
                                [&] {
                                  NoGradGuard ng;
                                  bench::keep(F::max_pool2d(relu(x), {2, 2}));
                                },
                                20);
    ms["relu+pool+backward"] = 1e3 * bench::seconds_per_call(
                                         [&] {
                                           F::max_pool2d(relu(x), {2, 2}).backward(g);
                                           x.zero_grad();
                                         },
                                         10);
    char shapes[64];
    std::snprintf(shapes, sizeof shapes, "(%lld,%lld,%lld,%lld) 2x2", (long long)xs[0], (long long)xs[1],
                  (long long)xs[2], (long long)xs[3]);
    for (const char* c : {"forward", "relu+pool", "relu+pool+backward"}) row(torch, index, "pool", shapes, c, ms[c]);
    ++index;
  }
  return 0;
}
