// nn/models/vision.h: torchvision's ResNet-18/34/50, VGG-11/16 and MobileNetV2, with
// torchvision's module tree and parameter names (conv1.weight, layer1.0.bn1.running_mean,
// features.0.0.weight, classifier.1.bias, ...) and its default initialization, so published
// torchvision weights load as they are (converted to safetensors). Inputs (B, 3, H, W).
#pragma once

#include "nn/layers.h"

namespace brisk::nn::models {

// ---- ResNet
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride, ModulePtr downsample);
  Tensor forward(const Tensor& x) override;
};

class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride, ModulePtr downsample);
  Tensor forward(const Tensor& x) override;
};

class ResNet : public Module {
 public:
  // bottleneck: Bottleneck blocks (ResNet-50) instead of BasicBlock; layers: blocks per stage.
  ResNet(bool bottleneck, std::array<int, 4> layers, int64_t num_classes = 1000);
  Tensor forward(const Tensor& x) override;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000);

// ---- VGG (without batch norm): features, avgpool (7, 7), classifier.
class VGG : public Module {
 public:
  // config: channel counts, 0 for a max pool.
  VGG(const std::vector<int64_t>& config, int64_t num_classes = 1000, double dropout = 0.5);
  Tensor forward(const Tensor& x) override;
};

std::shared_ptr<VGG> vgg11(int64_t num_classes = 1000);
std::shared_ptr<VGG> vgg16(int64_t num_classes = 1000);

// ---- MobileNetV2 (width 1.0): features.0 .. features.18, classifier (dropout, linear).
class MobileNetV2 : public Module {
 public:
  explicit MobileNetV2(int64_t num_classes = 1000, double dropout = 0.2);
  Tensor forward(const Tensor& x) override;
};

}  // namespace brisk::nn::models
