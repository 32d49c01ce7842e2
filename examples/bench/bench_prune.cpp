// examples/bench/bench_prune.cpp: what pruning buys in speed, measured in one run on the
// Fashion-MNIST SmallCNN (batch 128, random inputs): the dense model; the model with 50% of
// its conv channels removed physically (compress/prune_channels.h: conv1 32 -> 16, conv2 64 -> 32,
// the first Linear 3136 -> 1568 inputs); and the model with 90% of its conv and linear weights
// masked (global L1, compress/prune.h), which stays a dense computation plus the mask multiply, so
// it is expected at ~1.0x (masks save nothing without sparse kernels). Inference is ms per
// batch (eval, no grad); a training step is forward + cross entropy + backward + Adam step.
//   bench_prune [--iters N] [--repeats N (rounds)] [--threads N]
// Not a test: it asserts nothing (tests/test_prune.cpp checks the values).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "brisk.h"
#include "compress/prune.h"
#include "compress/prune_channels.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

struct Timing {
  double infer_ms = 1e30, train_ms = 1e30;
};

// One model under test: its optimizer is made once (Adam state allocated by the warm-up).
struct Case {
  const char* name;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Adam> opt{};
  Timing best{};
};

double ms_of(const std::function<void()>& fn, int iters) {
  const double t0 = bench::now_s();
  for (int i = 0; i < iters; ++i) fn();
  return 1e3 * (bench::now_s() - t0) / iters;
}

// Rounds interleave the models (each round times every model), and each model keeps its best
// round: on a shared machine, interference then costs every model alike and shows as noise
// above the minimum rather than as a bias against whichever model ran during it.
void measure(std::vector<Case>& cases, const Tensor& x, const Tensor& y, int iters, int rounds) {
  for (Case& c : cases) c.opt = std::make_unique<optim::Adam>(c.model->named_parameters(), optim::AdamOptions{});
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up (first-touch page faults, caches)
    for (Case& c : cases) {
      c.model->eval();
      double infer;
      {
        NoGradGuard ng;
        infer = ms_of(
            [&] {
              Tensor out = (*c.model)(x);
              bench::keep(out);
            },
            iters);
      }
      c.model->train();
      double train = ms_of(
          [&] {
            c.opt->zero_grad();
            Tensor loss = cross_entropy((*c.model)(x), y);
            loss.backward();
            c.opt->step();
          },
          iters);
      if (r == 0) continue;
      c.best.infer_ms = std::min(c.best.infer_ms, infer);
      c.best.train_ms = std::min(c.best.train_ms, train);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 10, repeats = 5, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  if (threads > 0) set_num_threads(threads);
  manual_seed(0);
  Tensor x = randn({128, 1, 28, 28});
  Tensor y = randint(0, 10, {128});

  auto dense = std::make_shared<nn::models::SmallCNN>();
  auto channels = std::make_shared<nn::models::SmallCNN>();
  auto masked = std::make_shared<nn::models::SmallCNN>();
  channels->load_state_dict(dense->state_dict());
  masked->load_state_dict(dense->state_dict());
  nn::prune::ChannelPlan plan = nn::prune::prune_channels(*channels, {.amount = 0.5, .norm = 1}, x.narrow(0, 0, 8));
  std::vector<nn::prune::Param> weights;
  for (auto& [path, m] : masked->named_modules()) {
    if (m->type_name() == "Conv2d" || m->type_name() == "Linear") weights.emplace_back(*m, "weight");
  }
  nn::prune::global_unstructured(weights, nn::prune::Method::L1, 0.9);

  std::printf(
      "bench_prune: SmallCNN, batch 128, %d threads, best of %d interleaved rounds of %d calls (shared machine)\n",
      get_num_threads(), repeats, iters);
  std::printf("%s", plan.str().c_str());
  std::printf("unstructured: %.1f%% of conv+linear weights masked\n",
              100 * nn::prune::sparsity_report(*masked).sparsity());
  std::vector<Case> cases;
  cases.push_back({"dense", dense});
  cases.push_back({"50% conv channels removed", channels});
  cases.push_back({"90% unstructured (masked, dense)", masked});
  measure(cases, x, y, iters, repeats);
  const Timing& d = cases[0].best;
  std::printf("%-34s %10s %12s %12s %10s %10s\n", "model", "params", "infer ms", "train ms", "infer x", "train x");
  for (const Case& c : cases) {
    std::printf("%-34s %10lld %12.2f %12.2f %9.2fx %9.2fx\n", c.name, (long long)c.model->num_parameters(),
                c.best.infer_ms, c.best.train_ms, d.infer_ms / c.best.infer_ms, d.train_ms / c.best.train_ms);
  }
  return 0;
}
