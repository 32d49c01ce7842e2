// tests/checkpoint_child.cpp: the training run the checkpoint kill test starts, kills and
// restarts (tests/test_checkpoint.cpp). Trains an MLP 8-16-4 with dropout on a fixed synthetic
// set of 256 samples (shuffled loader, 1 worker thread, Adam + OneCycleLR stepped per batch),
// checkpoints every `every` steps to <checkpoint> and resumes from it when it exists, and at
// the end writes the model's weights to <output>. With --die-at S it SIGKILLs itself right
// after step S (before that step's checkpoint, if any). Not a test by itself; not installed.
//
// usage: checkpoint_child <checkpoint> <output> [--steps N] [--every K] [--die-at S]
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/serialize_module.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "train/checkpoint.h"

using namespace brisk;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <checkpoint> <output> [--steps N] [--every K] [--die-at S]\n", argv[0]);
    return 2;
  }
  const std::string ckpt = argv[1], output = argv[2];
  int64_t total_steps = 120, every = 7, die_at = -1;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int64_t v = std::atoll(argv[i + 1]);
    if (flag == "--steps")
      total_steps = v;
    else if (flag == "--every")
      every = v;
    else if (flag == "--die-at")
      die_at = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    manual_seed(1234);
    // A fixed synthetic set: inputs from a formula, 4 classes from a linear rule of the inputs.
    const int64_t n = 256;
    std::vector<double> xs(static_cast<size_t>(n * 8)), ys(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < 8; ++j) {
        double v = std::sin(0.37 * double(i * 8 + j) + 0.11 * double(j * j));
        xs[size_t(i * 8 + j)] = v;
        s += v * double(j % 3 - 1);
      }
      ys[size_t(i)] = double(int64_t(std::floor((s + 4.0) * 0.5)) & 3);
    }
    auto dataset = std::make_shared<data::TensorDataset>(from_vector(xs, {n, 8}), from_vector(ys, {n}, DType::I64));
    data::LoaderOptions lo;
    lo.batch_size = 16;
    lo.shuffle = true;
    lo.seed = 77;
    lo.num_workers = 1;  // a worker thread prefetching: its position must resume too
    data::DataLoader loader(dataset, lo);

    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(8, 16));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.25));
    model->push_back(std::make_shared<nn::Linear>(16, 4));
    model->train();

    optim::Adam opt(model->named_parameters(), {.lr = 1e-2});
    optim::OneCycleLR sched(opt, {.max_lr = {0.05}, .total_steps = total_steps + 1});

    training::TrainingState state;
    state.model = model.get();
    state.optimizer = &opt;
    state.scheduler = &sched;
    state.loader = &loader;
    if (std::filesystem::exists(ckpt)) training::load_checkpoint(ckpt, state);

    int64_t step = state.step;
    while (step < total_steps) {
      std::optional<data::Batch> batch = loader.next();
      if (!batch) continue;  // the epoch is over; the next call starts the following one
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy((*model)(batch->input), batch->target);
      loss.backward();
      opt.step();
      sched.step();
      ++step;
      if (step == die_at) ::raise(SIGKILL);
      if (step % every == 0) {
        state.step = step;
        state.epoch = loader.state().epoch;
        training::save_checkpoint(ckpt, state);
      }
    }
    nn::save_module(*model, output);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
