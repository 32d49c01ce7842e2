// nn/models/simple.cpp: MLP and SmallCNN.
#include "nn/models/simple.h"

namespace brisk::nn::models {

MLP::MLP(const std::vector<int64_t>& sizes, double dropout) {
  BRISK_CHECK(sizes.size() >= 2, "MLP: needs at least input and output sizes, got ", sizes.size());
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) {
      push_back(std::make_shared<ReLU>());
      if (dropout > 0) push_back(std::make_shared<Dropout>(dropout));
    }
  }
}

Tensor MLP::forward(const Tensor& x) { return Sequential::forward(x.dim() > 2 ? flatten(x, 1) : x); }

SmallCNN::SmallCNN(int64_t num_classes, double dropout) : Module("SmallCNN") {
  auto features = std::make_shared<Sequential>();
  features->push_back(std::make_shared<Conv2d>(1, 32, 3, ConvOptions{.padding = {1, 1}}));
  features->push_back(std::make_shared<ReLU>());
  features->push_back(std::make_shared<MaxPool2d>(2));
  features->push_back(std::make_shared<Conv2d>(32, 64, 3, ConvOptions{.padding = {1, 1}}));
  features->push_back(std::make_shared<ReLU>());
  features->push_back(std::make_shared<MaxPool2d>(2));
  register_module("features", features);
  auto classifier = std::make_shared<Sequential>();
  classifier->push_back(std::make_shared<Linear>(64 * 7 * 7, 128));
  classifier->push_back(std::make_shared<ReLU>());
  classifier->push_back(std::make_shared<Dropout>(dropout));
  classifier->push_back(std::make_shared<Linear>(128, num_classes));
  register_module("classifier", classifier);
}

Tensor SmallCNN::forward(const Tensor& x) {
  BRISK_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
              "SmallCNN: expects (B, 1, 28, 28), got ", x.sizes());
  Tensor h = (*child("features"))(x);
  return (*child("classifier"))(flatten(h, 1));
}

}  // namespace brisk::nn::models
