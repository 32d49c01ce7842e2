// examples/bench/bench_resize.cpp: the padding / resizing / transposed-conv functions of
// nn/functional.h, in milliseconds per call, forward (no grad) and forward + backward, beside
// the same torch.nn.functional calls timed in the same run with the same thread count (the
// venv's current PyTorch at /work/venv-torch/bin/python when present, else Debian's
// /usr/bin/python3; OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset; "n/a" without torch). The
// composites (pad, interpolate, pixel_shuffle, conv_transpose2d) are built on index_select, cat,
// permute and conv2d_backward_input (Note [Resizing through index_select]); this shows what that
// costs against PyTorch's dedicated kernels. Threads: OMP_NUM_THREADS (default: all cores).
// Not a test: it asserts nothing.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "nn/functional.h"

using namespace brisk;
namespace F = brisk::nn::functional;

namespace {

// One benchmark: an input shape, the brisk call and the matching PyTorch expression of `x`
// (and `w` for conv_transpose2d).
struct Case {
  const char* name;
  Shape x;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  const char* torch_expr;
};

const Shape kW{64, 32, 4, 4};

std::vector<Case> cases() {
  return {
      {"pad constant 1",
       {16, 64, 56, 56},
       [](const Tensor& x, const Tensor&) {
         return F::pad(x, {1, 1, 1, 1});
       },
       "F.pad(x, (1, 1, 1, 1))"},
      {"pad reflect 1",
       {16, 64, 56, 56},
       [](const Tensor& x, const Tensor&) {
         return F::pad(x, {1, 1, 1, 1}, "reflect");
       },
       "F.pad(x, (1, 1, 1, 1), mode='reflect')"},
      {"pad replicate 3",
       {16, 64, 56, 56},
       [](const Tensor& x, const Tensor&) {
         return F::pad(x, {3, 3, 3, 3}, "replicate");
       },
       "F.pad(x, (3, 3, 3, 3), mode='replicate')"},
      {"nearest x2",
       {16, 64, 28, 28},
       [](const Tensor& x, const Tensor&) { return F::interpolate(x, {.scale_factor = {2.0}}); },
       "F.interpolate(x, scale_factor=2.0)"},
      {"bilinear x2",
       {16, 64, 28, 28},
       [](const Tensor& x, const Tensor&) {
         return F::interpolate(x, {.scale_factor = {2.0}, .mode = "bilinear", .align_corners = false});
       },
       "F.interpolate(x, scale_factor=2.0, mode='bilinear', align_corners=False)"},
      {"bilinear (30, 30) ac",
       {16, 64, 28, 28},
       [](const Tensor& x, const Tensor&) {
         return F::interpolate(x, {.size = {30, 30}, .mode = "bilinear", .align_corners = true});
       },
       "F.interpolate(x, size=(30, 30), mode='bilinear', align_corners=True)"},
      {"pixel_shuffle 2",
       {16, 256, 28, 28},
       [](const Tensor& x, const Tensor&) { return F::pixel_shuffle(x, 2); },
       "F.pixel_shuffle(x, 2)"},
      {"adaptive_max (7, 7)",
       {16, 64, 28, 28},
       [](const Tensor& x, const Tensor&) {
         return F::adaptive_max_pool2d(x, {7, 7});
       },
       "F.adaptive_max_pool2d(x, (7, 7))"},
      {"max_pool1d 3/2/1",
       {32, 64, 1000},
       [](const Tensor& x, const Tensor&) { return F::max_pool1d(x, 3, 2, 1); },
       "F.max_pool1d(x, 3, 2, 1)"},
      {"conv_transpose2d s2",
       {16, 64, 28, 28},
       [](const Tensor& x, const Tensor& w) {
         return F::conv_transpose2d(x, w, {}, {2, 2}, {1, 1});
       },
       "F.conv_transpose2d(x, w, None, 2, 1)"},
  };
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (int i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + ")";
}

// Times PyTorch on the same cases; prints "index what ms" lines.
std::map<std::string, double> torch_times(int threads, std::string& which) {
  std::string script = R"PY(
w = torch.randn(64, 32, 4, 4)
)PY";
  const std::vector<Case> cs = cases();
  for (size_t i = 0; i < cs.size(); ++i) {
    std::string shape = shape_str(cs[i].x);
    script += "x = torch.randn" + shape + "\n";
    script += "def fwd():\n    with torch.no_grad():\n        " + std::string(cs[i].torch_expr) + "\n";
    script += "xg = x.clone().requires_grad_()\n";
    script += "with torch.no_grad():\n    g = torch.randn_like(" + std::string(cs[i].torch_expr) + ")\n";
    script += "def fb():\n    x = xg\n    (" + std::string(cs[i].torch_expr) + ").backward(g)\n    xg.grad = None\n";
    script += "print(" + std::to_string(i) + ", 'forward', per_call_ms(fwd, 10), flush=True)\n";
    script += "print(" + std::to_string(i) + ", 'forward+backward', per_call_ms(fb, 5), flush=True)\n";
  }
  return bench::torch_times(script, threads, which);
}

}  // namespace

int main() {
  const int threads = omp_get_max_threads();
  std::string which;
  const std::map<std::string, double> torch = torch_times(threads, which);
  std::printf("resize ops, F32, %d thread(s); ms per call (median of 7); reference: %s\n", threads, which.c_str());
  std::printf("%-22s %-18s %-17s %9s %9s %7s\n", "case", "input", "what", "brisk", "pytorch", "ratio");
  manual_seed(0);
  const Tensor w = randn(kW);
  const std::vector<Case> cs = cases();
  for (size_t i = 0; i < cs.size(); ++i) {
    const Case& c = cs[i];
    const Tensor x = randn(c.x);
    const Tensor xg = x.detach().requires_grad_();
    Tensor g;
    {
      NoGradGuard ng;
      g = randn(c.fn(x, w).sizes());
    }
    std::map<std::string, double> ms;
    ms["forward"] = 1e3 * bench::seconds_per_call(
                              [&] {
                                NoGradGuard ng;
                                bench::keep(c.fn(x, w));
                              },
                              10);
    ms["forward+backward"] = 1e3 * bench::seconds_per_call(
                                       [&] {
                                         c.fn(xg, w).backward(g);
                                         xg.zero_grad();
                                       },
                                       5);
    for (const char* what : {"forward", "forward+backward"}) {
      auto it = torch.find(std::to_string(i) + " " + what);
      if (it != torch.end()) {
        std::printf("%-22s %-18s %-17s %9.3f %9.3f %7.2f\n", c.name, shape_str(c.x).c_str(), what, ms[what], it->second,
                    ms[what] / it->second);
      } else {
        std::printf("%-22s %-18s %-17s %9.3f %9s %7s\n", c.name, shape_str(c.x).c_str(), what, ms[what], "n/a", "n/a");
      }
    }
  }
  return 0;
}
