// nn/models/simple.h: the small models the examples train: an MLP and the Fashion-MNIST CNN.
// Parameter names match the same architectures written as nn.Sequential in PyTorch.
#pragma once

#include <vector>

#include "nn/layers.h"

namespace brisk::nn::models {

// Linear layers with ReLU between them: sizes {784, 256, 128, 10} gives
// 0: Linear(784, 256), 1: ReLU, 2: Linear(256, 128), 3: ReLU, 4: Linear(128, 10).
// Inputs of any shape (B, ...) are flattened first (no parameters, not in the names).
class MLP : public Sequential {
 public:
  explicit MLP(const std::vector<int64_t>& sizes, double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
};

// The Fashion-MNIST CNN: conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU,
// maxpool 2, flatten, linear 3136->128, ReLU, dropout 0.25, linear 128->10.
// x: (B, 1, 28, 28) -> logits (B, 10). Names: features.{0,3}, classifier.{0,3}.
class SmallCNN : public Module {
 public:
  explicit SmallCNN(int64_t num_classes = 10, double dropout = 0.25);
  Tensor forward(const Tensor& x) override;
};

}  // namespace brisk::nn::models
