// examples/bench/bench_optim.cpp: time of one optimizer step, fused multi-tensor loop against
// the tensor-op reference, for model-sized parameter sets (1M and 10M F32 values in 20
// tensors of mixed sizes), for Adam and SGD with momentum. Prints milliseconds per step and
// the speedup, one line per case. Threads: OMP_NUM_THREADS (both paths use the same pool).
// With a GPU, a second section does the same on cuda:0 (fused multi-tensor kernel against the
// reference's chain of elementwise kernels) for every optimizer, on 1M, 10M and 100M values in
// 20 tensors and on 400 small tensors; each timing waits for the device. Skipped without a GPU.
// Not a test: the paths' equality is checked by tests/test_optim.cpp and tests/test_cuda_optim.cpp.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "optim/optim.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#endif

using namespace brisk;

namespace {

// A parameter of `shape` on `device` with its gradient set.
Tensor make_param(const Shape& shape, Device device) {
  Tensor p = rand(shape, DType::F32, device);
  p.requires_grad_(true);
  p.set_grad(rand(shape, DType::F32, device));
  return p;
}

// 20 tensors totalling about `total` floats: a few big matrices, many small vectors (a model's
// weights and biases), with gradients already set.
std::vector<Tensor> make_params(int64_t total, Device device = Device::cpu()) {
  std::vector<Tensor> params;
  int64_t big = total / 10;  // 10 matrices of ~total/10 ...
  for (int i = 0; i < 10; ++i) params.push_back(make_param({big / 256, 256}, device));
  for (int i = 0; i < 10; ++i) params.push_back(make_param({256 + 64 * i}, device));  // ... and 10 bias-sized vectors
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

using MakeOptimizer = std::unique_ptr<optim::Optimizer> (*)(const std::vector<Tensor>&, bool);

std::unique_ptr<optim::Optimizer> make_adam(const std::vector<Tensor>& p, bool fused) {
  return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3, .fused = fused});
}
std::unique_ptr<optim::Optimizer> make_adamw(const std::vector<Tensor>& p, bool fused) {
  return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-3, .fused = fused});
}
std::unique_ptr<optim::Optimizer> make_sgd_momentum(const std::vector<Tensor>& p, bool fused) {
  return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .fused = fused});
}
std::unique_ptr<optim::Optimizer> make_rmsprop(const std::vector<Tensor>& p, bool fused) {
  return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 1e-3, .fused = fused});
}
std::unique_ptr<optim::Optimizer> make_adagrad(const std::vector<Tensor>& p, bool fused) {
  return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 1e-3, .fused = fused});
}

#ifdef BRISK_WITH_CUDA
// Seconds per call of fn on the GPU: median over `repeats` runs of `iters` calls, each run
// waiting for the device before and after (not between calls: steps queue as in training).
template <class F>
double gpu_seconds_per_call(F&& fn, int iters, int repeats = 7) {
  for (int i = 0; i < 3; ++i) fn();  // warm up the allocator's cache and the kernels
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    cuda::synchronize(0);
    double t0 = bench::now_s();
    for (int i = 0; i < iters; ++i) fn();
    cuda::synchronize(0);
    t.push_back((bench::now_s() - t0) / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void compare_cuda(const char* name, const char* set, const std::vector<Tensor>& params, MakeOptimizer make) {
  std::unique_ptr<optim::Optimizer> reference = make(params, false);
  std::unique_ptr<optim::Optimizer> fused = make(params, true);
  const int iters = count(params) > 20'000'000 ? 10 : 50;
  double t_ref = gpu_seconds_per_call([&] { reference->step(); }, iters);
  double t_fused = gpu_seconds_per_call([&] { fused->step(); }, iters);
  std::printf("cuda %-14s %-10s %10lld floats %4zu tensors  reference %8.3f ms  fused %8.3f ms  speedup %6.2fx\n", name,
              set, static_cast<long long>(count(params)), params.size(), t_ref * 1e3, t_fused * 1e3, t_ref / t_fused);
}

void cuda_section(const std::vector<std::pair<const char*, MakeOptimizer>>& optimizers) {
  if (cuda::device_count() == 0) {
    std::printf("bench_optim: CUDA section skipped: no CUDA device\n");
    return;
  }
  const Device gpu = Device::cuda(0);
  for (int64_t total : {int64_t(1'000'000), int64_t(10'000'000), int64_t(100'000'000)}) {
    std::vector<Tensor> params = make_params(total, gpu);
    const std::string set = std::to_string(total / 1'000'000) + "M";
    for (const auto& [name, make] : optimizers) compare_cuda(name, set.c_str(), params, make);
  }
  // Many small tensors (norm weights, biases, embeddings of a deep model): where one launch
  // per group instead of ~10 per tensor matters most.
  std::vector<Tensor> small;
  for (int i = 0; i < 400; ++i) small.push_back(make_param({int64_t(256 + 32 * (i % 64))}, gpu));
  for (const auto& [name, make] : optimizers) compare_cuda(name, "400 small", small, make);
}
#endif

}  // namespace

int main() {
  const std::vector<std::pair<const char*, MakeOptimizer>> optimizers = {{"adam", make_adam},
                                                                         {"adamw", make_adamw},
                                                                         {"sgd_momentum", make_sgd_momentum},
                                                                         {"rmsprop", make_rmsprop},
                                                                         {"adagrad", make_adagrad}};
  for (int64_t total : {int64_t(1'000'000), int64_t(10'000'000)}) {
    for (int k = 0; k < 3; ++k) compare(optimizers[k].first, total, optimizers[k].second);
  }
#ifdef BRISK_WITH_CUDA
  cuda_section(optimizers);
#else
  std::printf("bench_optim: CUDA section skipped: built without CUDA\n");
#endif
  return 0;
}
