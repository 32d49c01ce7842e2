// examples/bench/bench_train.cpp: one training run of the Fashion-MNIST MLP (784-256-128-10) or
// the small CNN with Adam 1e-3, batch 128, normalized inputs, no schedule: the brisk half of
// examples/bench/compare_pytorch.sh (train_pytorch.py is the other half, same settings).
// Prints one parseable line
//   RESULT impl=brisk model=.. threads=.. epochs=.. sec_per_epoch=.. cpu_per_epoch=.. samples_per_s=..
//          test_acc=.. peak_rss_mb=..
// (cpu_per_epoch: process CPU seconds, all threads; on a loaded machine it is the steadier number)
// and a PHASES line (seconds per epoch in data / forward / backward / optimizer step), then a
// PEAK line: the machine's F32 FMA peak on as many threads (bench_common.h), the epoch's
// matmul/conv FLOPs (counted by forward hooks on one batch: forward, weight gradient and input
// gradient except the first layer's, whose input needs none) and the fraction of peak achieved.
// Convs count as direct sums; those that run Winograd F(2x2, 3x3) (Note [Winograd conv]) do
// 2.25x fewer multiply-adds, so the fraction is of that nominal work and can pass 1.
// Options: --model mlp|cnn  --threads N  --epochs N  --workers N (loader threads, default 0)
// --data DIR  --profile N (also profile the first N training steps with brisk::profiler and
// print its table, ops by self time, after the RESULT line; the profiled steps are timed
// too, so leave it off for the epoch's time). Not a test: it asserts nothing.
#include <omp.h>
#include <sys/resource.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "engine/profiler.h"
#include "examples/bench/bench_common.h"
#include "nn/models/simple.h"
#include "optim/optim.h"

using namespace brisk;

// FLOPs (2 x multiply-adds) of one training step on `x`, from the Conv2d and Linear layers that
// a forward pass runs: each costs its forward product again for the weight gradient and once
// more for the input gradient, except the first layer reached (its input is data).
static double train_step_flops(nn::Module& model, const Tensor& x) {
  std::vector<std::pair<nn::Module*, int>> hooks;
  double total = 0;
  bool first = true;
  for (auto& [name, m] : model.named_modules()) {
    const bool conv = m->type_name() == "Conv2d", linear = m->type_name() == "Linear";
    if (!conv && !linear) continue;
    hooks.emplace_back(m, m->register_forward_hook([&total, &first](nn::Module& mod, const Tensor&, Tensor& out) {
      const Tensor& w = mod.parameter("weight");  // Linear (out, in); Conv2d (out, in / groups, kh, kw)
      const double per_output = double(w.numel() / w.size(0));
      const double fwd = 2.0 * double(out.numel()) * per_output;
      total += fwd * (first ? 2 : 3);
      first = false;
    }));
  }
  {
    NoGradGuard no_grad;
    model(x);
  }
  for (auto& [m, h] : hooks) m->remove_hook(h);
  return total;
}

static double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
  std::string model_name = "mlp", root = data::FashionMNIST::kDefaultRoot;
  int threads = 1, epochs = 1, workers = 0, profile_steps = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") {
      model_name = v;
    } else if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--epochs") {
      epochs = std::stoi(v);
    } else if (k == "--workers") {
      workers = std::stoi(v);
    } else if (k == "--data") {
      root = v;
    } else if (k == "--profile") {
      profile_steps = std::stoi(v);
    } else {
      std::fprintf(stderr, "bench_train: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (model_name != "mlp" && model_name != "cnn") {
    std::fprintf(stderr, "bench_train: --model mlp|cnn\n");
    return 2;
  }
  omp_set_num_threads(threads);

  auto train_set = std::make_shared<data::FashionMNIST>(root, true);
  auto test_set = std::make_shared<data::FashionMNIST>(root, false);
  data::LoaderOptions opts;
  opts.batch_size = 128;
  opts.shuffle = true;
  opts.num_workers = workers;
  opts.persistent_workers = true;
  opts.transform = data::Compose({data::to_tensor(), data::normalize({0.2860}, {0.3530})});
  data::DataLoader train_loader(train_set, opts);
  data::LoaderOptions test_opts = opts;
  test_opts.shuffle = false;
  // test batches of 128 too: peak RSS then measures training, not a larger evaluation batch
  data::DataLoader test_loader(test_set, test_opts);

  manual_seed(0);
  std::shared_ptr<nn::Module> model;
  if (model_name == "cnn") {
    model = std::make_shared<nn::models::SmallCNN>();
  } else {
    model = std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 256, 128, 10});
  }
  optim::Adam opt(model->named_parameters(), {.lr = 1e-3});

  double t_data = 0, t_fwd = 0, t_bwd = 0, t_step = 0, t_total = 0, cpu_total = 0;
  int64_t samples = 0, steps = 0;
  std::unique_ptr<profiler::Profiler> prof;
  std::string profile_table;
  if (profile_steps > 0) prof = std::make_unique<profiler::Profiler>(profiler::ProfilerOptions{.record_shapes = false});
  for (int e = 0; e < epochs; ++e) {
    const double t0 = bench::now_s(), c0 = cpu_seconds();
    double t = t0;
    while (auto batch = train_loader.next()) {
      double t1 = bench::now_s();
      t_data += t1 - t;
      Tensor loss = cross_entropy((*model)(batch->input), batch->target);
      double t2 = bench::now_s();
      opt.zero_grad();
      loss.backward();
      double t3 = bench::now_s();
      opt.step();
      t = bench::now_s();
      t_fwd += t2 - t1;
      t_bwd += t3 - t2;
      t_step += t - t3;
      samples += batch->target.size(0);
      if (prof && ++steps == profile_steps) {
        profile_table = prof->stop().table(20);
        prof.reset();
      }
    }
    t_total += bench::now_s() - t0;
    cpu_total += cpu_seconds() - c0;
  }

  int64_t correct = 0;
  {
    NoGradGuard no_grad;
    model->eval();
    while (auto batch = test_loader.next()) {
      correct += sum(eq(argmax((*model)(batch->input), 1), batch->target)).item<int64_t>();
    }
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "RESULT impl=brisk model=%s threads=%d epochs=%d sec_per_epoch=%.3f cpu_per_epoch=%.3f samples_per_s=%.0f "
      "test_acc=%.4f peak_rss_mb=%.0f\n",
      model_name.c_str(), threads, epochs, t_total / epochs, cpu_total / epochs, double(samples) / t_total,
      double(correct) / double(test_set->size()), double(ru.ru_maxrss) / 1024.0);
  if (!profile_table.empty()) std::printf("PROFILE of the first %d steps\n%s", profile_steps, profile_table.c_str());
  std::printf("PHASES data=%.3f forward=%.3f backward=%.3f step=%.3f (seconds per epoch)\n", t_data / epochs,
              t_fwd / epochs, t_bwd / epochs, t_step / epochs);
  const double peak = bench::fma_peak(threads);
  const double epoch_flops = train_step_flops(*model, randn({128, 1, 28, 28})) / 128.0 * double(samples) / epochs;
  const double achieved = epoch_flops / (t_total / epochs) * 1e-9;
  std::printf(
      "PEAK fma_peak_gflops=%.1f epoch_gflop=%.1f achieved_gflops=%.1f fraction_of_peak=%.3f floor_sec=%.3f "
      "(matmul/conv FLOPs only, convs counted as direct sums: Winograd ones do 2.25x fewer)\n",
      peak, epoch_flops * 1e-9, achieved, peak > 0 ? achieved / peak : 0.0, peak > 0 ? epoch_flops * 1e-9 / peak : 0.0);
  return 0;
}
