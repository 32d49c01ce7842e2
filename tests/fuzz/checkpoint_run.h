// tests/fuzz/checkpoint_run.h: the small training setup (model, Adam, StepLR, plateau, early
// stopping, loader) that fuzz_checkpoint.cpp loads checkpoints into and make_corpus.cpp writes
// its seed checkpoints from, so the seeds are valid for the target. Not a test fixture of
// brisk_tests (tests/test_checkpoint.cpp has its own).
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "engine/functions.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"

namespace brisk::fuzz {

struct CheckpointRun {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau;
  optim::EarlyStopping stopping;
  std::unique_ptr<data::DataLoader> loader;

  CheckpointRun() {
    model->push_back(std::make_shared<nn::Linear>(3, 4));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(4, 2));
    opt = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 0.01, .amsgrad = true});
    sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
    plateau = std::make_unique<optim::ReduceLROnPlateau>(*opt);
    std::vector<double> xs(8 * 3), ys(8);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.7 * double(i));
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = double(i % 2);
    data::LoaderOptions lo;
    lo.batch_size = 2;
    lo.shuffle = true;
    lo.seed = 3;
    loader = std::make_unique<data::DataLoader>(
        std::make_shared<data::TensorDataset>(from_vector(xs, {8, 3}), from_vector(ys, {8}, DType::I64)), lo);
  }

  training::TrainingState state() {
    training::TrainingState s;
    s.model = model.get();
    s.optimizer = opt.get();
    s.scheduler = sched.get();
    s.plateau = plateau.get();
    s.early_stopping = &stopping;
    s.loader = loader.get();
    return s;
  }

  // n optimizer steps; schedules step at each epoch's end.
  void train(int n) {
    for (int i = 0; i < n;) {
      auto batch = loader->next();
      if (!batch) {
        sched->step();
        plateau->step(1.0);
        stopping.step(1.0 / double(i + 1));
        continue;
      }
      opt->zero_grad();
      nn::functional::cross_entropy((*model)(batch->input), batch->target).backward();
      opt->step();
      ++i;
    }
  }
};

}  // namespace brisk::fuzz
