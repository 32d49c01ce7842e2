// examples/bench/bench_loader.cpp: how fast the DataLoader feeds Fashion-MNIST batches (128)
// through the augmentation pipeline (random crop pad 2 + flip + to_tensor + normalize + random
// erasing, fused), in samples/s over one training epoch at 0, 1 and 2 worker threads; then the
// fraction of a CNN training loop's time spent blocked in loader.next() with 2 workers over
// ~100 steps (compute threads: --threads, default all cores, so workers and compute share them).
// Options: --threads N  --steps N  --data DIR. Not a test: it asserts nothing.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "examples/bench/bench_common.h"
#include "nn/models/simple.h"
#include "optim/optim.h"

using namespace brisk;

namespace {

data::LoaderOptions augmenting_options(int workers) {
  data::LoaderOptions o;
  o.batch_size = 128;
  o.shuffle = true;
  o.num_workers = workers;
  o.persistent_workers = true;
  o.transform = data::Compose({data::random_crop(28, 28, 2), data::random_horizontal_flip(), data::to_tensor(),
                               data::normalize({0.2860}, {0.3530}), data::random_erasing()});
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root = data::FashionMNIST::kDefaultRoot;
  int threads = omp_get_num_procs(), steps = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--steps") {
      steps = std::stoi(v);
    } else if (k == "--data") {
      root = v;
    } else {
      std::fprintf(stderr, "bench_loader: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  auto train = std::make_shared<data::FashionMNIST>(root, true);

  // ---- loader alone: best of two epochs per worker count (the first warms caches and pages)
  std::printf("DataLoader, batch 128, crop(pad 2) + flip + to_tensor + normalize + erasing, %lld samples\n",
              (long long)train->size());
  for (int workers : {0, 1, 2}) {
    data::DataLoader loader(train, augmenting_options(workers));
    double best = 1e300;
    for (int epoch = 0; epoch < 2; ++epoch) {
      const double t0 = bench::now_s();
      int64_t n = 0;
      while (auto batch = loader.next()) n += batch->input.size(0);
      best = std::min(best, (bench::now_s() - t0) / double(n));
    }
    std::printf("  %d worker(s): %9.0f samples/s (%.2f us/sample, %.3f s/epoch)\n", workers, 1.0 / best, best * 1e6,
                best * double(train->size()));
  }

  // ---- time the CNN training loop waits on data, 2 workers
  data::DataLoader loader(train, augmenting_options(2));
  manual_seed(0);
  nn::models::SmallCNN model;
  optim::Adam opt(model.named_parameters(), {.lr = 1e-3});
  double waited = 0;
  const int warmup = 5;
  double t_start = 0;
  for (int s = 0; s < steps + warmup; ++s) {
    if (s == warmup) {
      waited = 0;
      t_start = bench::now_s();
    }
    const double t0 = bench::now_s();
    auto batch = loader.next();
    if (!batch) batch = loader.next();  // epoch boundary
    waited += bench::now_s() - t0;
    Tensor loss = cross_entropy(model(batch->input), batch->target);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  const double total = bench::now_s() - t_start;
  std::printf(
      "CNN training, 2 workers, %d compute threads, %d steps: %.3f s total, %.4f s blocked in next() "
      "(%.2f%% of the time waiting on data)\n",
      threads, steps, total, waited, 100 * waited / total);
  return 0;
}
