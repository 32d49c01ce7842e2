// examples/bench/bench_checkpoint.cpp: what gradient checkpointing (nn/grad_checkpoint.h)
// buys and costs, measured in one run from the CPU allocator's statistics: the bytes the graph
// holds after the forward pass (the saved activations), the peak during forward + backward
// (activations, gradients, kernels' workspaces and temporaries), both beyond the weights, and
// the step time, plain vs checkpointed, on a deep MLP (32 Linear+ReLU layers of 256, batch
// 4096, so that activations outweigh weights; checkpointed every 8 modules) and on ResNet-18
// (batch 16, 112 x 112, the stem and each of its four stages one checkpoint).
//   bench_checkpoint [--quick]
#include <cstdio>
#include <cstring>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "nn/functional.h"
#include "nn/grad_checkpoint.h"
#include "nn/layers.h"
#include "nn/models/vision.h"

using namespace brisk;

namespace {

struct Result {
  double held = 0;  // MiB held by the graph after the forward pass: the saved activations
  double mib = 0;   // MiB at the step's peak
  double seconds = 0;
};

// forward() returns the loss; the step is forward().backward().
template <class F>
Result measure(nn::Module& model, F&& forward, int iters) {
  auto once = [&] {
    model.zero_grad(true);
    forward().backward();
  };
  once();  // warm: caches, the allocator's blocks
  model.zero_grad(true);
  cpu_allocator().empty_cache();
  cpu_allocator().reset_peak();
  const double base = double(cpu_allocator().stats().allocated);
  Tensor loss = forward();
  Result r;
  r.held = (double(cpu_allocator().stats().allocated) - base) / double(1 << 20);
  loss.backward();
  r.mib = (double(cpu_allocator().stats().peak) - base) / double(1 << 20);
  r.seconds = bench::seconds_per_call(once, iters, 3);
  return r;
}

void row(const char* model, const char* mode, const Result& r, const Result& base) {
  std::printf("%-10s %-14s %9.1f %7.2fx %9.1f %7.2fx %9.1f %7.2fx\n", model, mode, r.held, r.held / base.held, r.mib,
              r.mib / base.mib, r.seconds * 1e3, r.seconds / base.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  std::printf(
      "saved = MiB the graph holds after forward (activations); peak = MiB in use at the step's peak,\n"
      "both beyond the weights (allocator statistics); step = forward + backward\n");
  std::printf("%-10s %-14s %9s %8s %9s %8s %9s %8s\n", "model", "mode", "saved", "vs plain", "peak", "vs plain",
              "step ms", "vs plain");

  {
    manual_seed(0);
    nn::Sequential mlp;
    const int layers = quick ? 8 : 32;
    for (int i = 0; i < layers; ++i) {
      mlp.push_back(std::make_shared<nn::Linear>(256, 256));
      mlp.push_back(std::make_shared<nn::ReLU>());
    }
    Tensor x = randn({4096, 256});
    Result plain = measure(
        mlp, [&] { return mlp(x).sum(); }, quick ? 1 : 3);
    Result ck = measure(
        mlp, [&] { return nn::checkpoint_sequential(mlp, 8, x).sum(); }, quick ? 1 : 3);
    row("mlp", "plain", plain, plain);
    row("mlp", "checkpoint/8", ck, plain);
  }
  {
    manual_seed(0);
    auto net = nn::models::resnet18(10);
    Tensor x = randn({quick ? 4 : 16, 3, 112, 112});
    nn::Module& m = *net;
    auto forward = [&](bool ck) {
      auto stem = [&m](const Tensor& t) {
        return (*m.child("maxpool"))(relu((*m.child("bn1"))((*m.child("conv1"))(t))));
      };
      Tensor h = ck ? checkpoint(stem, x) : stem(x);
      for (int stage = 1; stage <= 4; ++stage) {
        nn::ModulePtr layer = m.child("layer" + std::to_string(stage));
        h = ck ? checkpoint([layer](const Tensor& t) { return (*layer)(t); }, h) : (*layer)(h);
      }
      return (*m.child("fc"))(flatten((*m.child("avgpool"))(h), 1));
    };
    Result plain = measure(
        m, [&] { return forward(false).sum(); }, 1);
    Result ck = measure(
        m, [&] { return forward(true).sum(); }, 1);
    row("resnet18", "plain", plain, plain);
    row("resnet18", "checkpoint", ck, plain);
  }
  return 0;
}
