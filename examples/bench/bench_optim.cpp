// examples/bench/bench_optim.cpp: time of one optimizer step, fused multi-tensor loop against
// the tensor-op reference, for model-sized parameter sets (1M and 10M F32 values in 20
// tensors of mixed sizes), for Adam and SGD with momentum. Prints milliseconds per step and
// the speedup, one line per case. Threads: OMP_NUM_THREADS (both paths use the same pool).
// Not a test: the two paths' equality is checked by tests/test_optim.cpp.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "optim/optim.h"

using namespace brisk;

namespace {

// 20 tensors totalling about `total` floats: a few big matrices, many small vectors (a model's
// weights and biases), with gradients already set.
std::vector<Tensor> make_params(int64_t total) {
  std::vector<Tensor> params;
  int64_t big = total / 10;  // 10 matrices of ~total/10 ...
  for (int i = 0; i < 10; ++i) {
    Tensor w = rand({big / 256, 256});
    w.requires_grad_(true);
    w.set_grad(rand({big / 256, 256}));
    params.push_back(w);
  }
  for (int i = 0; i < 10; ++i) {  // ... and 10 bias-sized vectors
    Tensor b = rand({256 + 64 * i});
    b.requires_grad_(true);
    b.set_grad(rand({256 + 64 * i}));
    params.push_back(b);
  }
  return params;
}

int64_t count(const std::vector<Tensor>& params) {
  int64_t n = 0;
  for (const Tensor& p : params) n += p.numel();
  return n;
}

template <class Make>
void compare(const char* name, int64_t total, Make make) {
  std::vector<Tensor> params = make_params(total);
  std::unique_ptr<optim::Optimizer> reference = make(params, false);
  std::unique_ptr<optim::Optimizer> fused = make(params, true);
  int iters = total > 2'000'000 ? 5 : 30;
  double t_ref = bench::seconds_per_call([&] { reference->step(); }, iters, 5);
  double t_fused = bench::seconds_per_call([&] { fused->step(); }, iters, 5);
  std::printf("%-14s %9lld floats  reference %8.3f ms  fused %8.3f ms  speedup %5.2fx\n", name,
              static_cast<long long>(count(params)), t_ref * 1e3, t_fused * 1e3, t_ref / t_fused);
}

}  // namespace

int main() {
  for (int64_t total : {int64_t(1'000'000), int64_t(10'000'000)}) {
    compare("adam", total, [](const std::vector<Tensor>& p, bool fused) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3, .fused = fused});
    });
    compare("adamw", total, [](const std::vector<Tensor>& p, bool fused) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-3, .fused = fused});
    });
    compare("sgd_momentum", total, [](const std::vector<Tensor>& p, bool fused) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .fused = fused});
    });
  }
  return 0;
}
