// examples/fashion_mnist/evaluate.h: one pass of a classifier over a loader without gradients
// (eval mode, restored to train mode after): mean cross-entropy and accuracy. Shared by the
// examples that train on Fashion-MNIST. Not here: the training loop.
#pragma once

#include <cstdint>

#include "brisk.h"
#include "data/dataloader.h"
#include "nn/module.h"

namespace fashion_mnist {

struct EvalResult {
  double loss = 0, acc = 0;
};

inline EvalResult evaluate(brisk::nn::Module& model, brisk::data::DataLoader& loader) {
  using namespace brisk;
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  while (auto batch = loader.next()) {
    Tensor logits = model(batch->input);
    loss_sum += cross_entropy(logits, batch->target, Reduction::Sum).item<double>();
    correct += sum(eq(argmax(logits, 1), batch->target)).item<int64_t>();
    seen += batch->target.size(0);
  }
  model.train();
  return {loss_sum / double(seen), double(correct) / double(seen)};
}

}  // namespace fashion_mnist
