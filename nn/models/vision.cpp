// nn/models/vision.cpp: ResNet, VGG and MobileNetV2 as torchvision builds them.
#include "nn/models/vision.h"

#include "nn/init.h"

namespace brisk::nn::models {

namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0,
                             int64_t groups = 1, bool bias = false) {
  return std::make_shared<Conv2d>(
      in, out, k, ConvOptions{.stride = {stride, stride}, .padding = {pad, pad}, .groups = groups, .bias = bias});
}

// torchvision's init for convolutional models: conv kaiming_normal(fan_out, relu), norm
// weight 1 / bias 0, conv bias 0; Linear as given by `linear_std` (0: keep PyTorch's default).
void torchvision_init(Module& m, double linear_std) {
  m.apply([&](Module& mod) {
    const std::string& t = mod.type_name();
    if (t == "Conv2d") {
      Tensor& w = mod.parameter("weight");
      init::kaiming_normal_(w, 0, init::FanMode::FanOut, "relu");
      Tensor b = mod.maybe_parameter("bias");
      if (b.defined()) init::zeros_(b);
    } else if (t == "BatchNorm2d" || t == "GroupNorm") {
      Tensor& w = mod.parameter("weight");
      Tensor& b = mod.parameter("bias");
      init::ones_(w);
      init::zeros_(b);
    } else if (t == "Linear" && linear_std > 0) {
      Tensor& w = mod.parameter("weight");
      init::normal_(w, 0, linear_std);
      Tensor b = mod.maybe_parameter("bias");
      if (b.defined()) init::zeros_(b);
    }
  });
}

}  // namespace

// ---- ResNet
BasicBlock::BasicBlock(int64_t in, int64_t planes, int64_t stride, ModulePtr downsample) : Module("BasicBlock") {
  register_module("conv1", conv(in, planes, 3, stride, 1));
  register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  register_module("relu", std::make_shared<ReLU>());
  register_module("conv2", conv(planes, planes, 3, 1, 1));
  register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (downsample) register_module("downsample", downsample);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu((*child("bn1"))((*child("conv1"))(x)));
  out = (*child("bn2"))((*child("conv2"))(out));
  ModulePtr down = child("downsample");
  Tensor identity = down ? (*down)(x) : x;
  return relu(out + identity);
}

Bottleneck::Bottleneck(int64_t in, int64_t planes, int64_t stride, ModulePtr downsample) : Module("Bottleneck") {
  register_module("conv1", conv(in, planes, 1));
  register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  register_module("conv2", conv(planes, planes, 3, stride, 1));
  register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  register_module("conv3", conv(planes, planes * kExpansion, 1));
  register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion));
  register_module("relu", std::make_shared<ReLU>());
  if (downsample) register_module("downsample", downsample);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = relu((*child("bn1"))((*child("conv1"))(x)));
  out = relu((*child("bn2"))((*child("conv2"))(out)));
  out = (*child("bn3"))((*child("conv3"))(out));
  ModulePtr down = child("downsample");
  Tensor identity = down ? (*down)(x) : x;
  return relu(out + identity);
}

ResNet::ResNet(bool bottleneck, std::array<int, 4> layers, int64_t num_classes) : Module("ResNet") {
  int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  register_module("conv1", conv(3, 64, 7, 2, 3));
  register_module("bn1", std::make_shared<BatchNorm2d>(64));
  register_module("relu", std::make_shared<ReLU>());
  register_module("maxpool", std::make_shared<MaxPool2d>(Pair{3, 3}, Pair{2, 2}, Pair{1, 1}));
  int64_t in = 64;
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = std::make_shared<Sequential>();
    for (int b = 0; b < layers[size_t(stage)]; ++b) {
      int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      ModulePtr down;
      if (b == 0 && (stride != 1 || in != planes[stage] * expansion)) {
        auto d = std::make_shared<Sequential>();
        d->push_back(conv(in, planes[stage] * expansion, 1, stride));
        d->push_back(std::make_shared<BatchNorm2d>(planes[stage] * expansion));
        down = d;
      }
      if (bottleneck) {
        layer->push_back(std::make_shared<Bottleneck>(in, planes[stage], stride, down));
      } else {
        layer->push_back(std::make_shared<BasicBlock>(in, planes[stage], stride, down));
      }
      in = planes[stage] * expansion;
    }
    register_module("layer" + std::to_string(stage + 1), layer);
  }
  register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  register_module("fc", std::make_shared<Linear>(512 * expansion, num_classes));
  torchvision_init(*this, 0);
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = (*child("maxpool"))(relu((*child("bn1"))((*child("conv1"))(x))));
  for (int stage = 1; stage <= 4; ++stage) h = (*child("layer" + std::to_string(stage)))(h);
  h = flatten((*child("avgpool"))(h), 1);
  return (*child("fc"))(h);
}

std::shared_ptr<ResNet> resnet18(int64_t n) {
  return std::make_shared<ResNet>(false, std::array<int, 4>{2, 2, 2, 2}, n);
}
std::shared_ptr<ResNet> resnet34(int64_t n) {
  return std::make_shared<ResNet>(false, std::array<int, 4>{3, 4, 6, 3}, n);
}
std::shared_ptr<ResNet> resnet50(int64_t n) {
  return std::make_shared<ResNet>(true, std::array<int, 4>{3, 4, 6, 3}, n);
}

// ---- VGG
VGG::VGG(const std::vector<int64_t>& config, int64_t num_classes, double dropout) : Module("VGG") {
  auto features = std::make_shared<Sequential>();
  int64_t in = 3;
  for (int64_t c : config) {
    if (c == 0) {
      features->push_back(std::make_shared<MaxPool2d>(Pair{2, 2}, Pair{2, 2}));
    } else {
      features->push_back(conv(in, c, 3, 1, 1, 1, /*bias=*/true));
      features->push_back(std::make_shared<ReLU>());
      in = c;
    }
  }
  register_module("features", features);
  register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(7));
  auto classifier = std::make_shared<Sequential>();
  classifier->push_back(std::make_shared<Linear>(512 * 7 * 7, 4096));
  classifier->push_back(std::make_shared<ReLU>());
  classifier->push_back(std::make_shared<Dropout>(dropout));
  classifier->push_back(std::make_shared<Linear>(4096, 4096));
  classifier->push_back(std::make_shared<ReLU>());
  classifier->push_back(std::make_shared<Dropout>(dropout));
  classifier->push_back(std::make_shared<Linear>(4096, num_classes));
  register_module("classifier", classifier);
  torchvision_init(*this, 0.01);
}

Tensor VGG::forward(const Tensor& x) {
  Tensor h = (*child("avgpool"))((*child("features"))(x));
  return (*child("classifier"))(flatten(h, 1));
}

std::shared_ptr<VGG> vgg11(int64_t n) {
  return std::make_shared<VGG>(std::vector<int64_t>{64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}, n);
}
std::shared_ptr<VGG> vgg16(int64_t n) {
  return std::make_shared<VGG>(
      std::vector<int64_t>{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}, n);
}

// ---- MobileNetV2
namespace {

// torchvision's Conv2dNormActivation: Sequential(conv (no bias), BatchNorm2d, ReLU6).
ModulePtr conv_bn_relu6(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups) {
  auto s = std::make_shared<Sequential>();
  s->push_back(conv(in, out, k, stride, (k - 1) / 2, groups));
  s->push_back(std::make_shared<BatchNorm2d>(out));
  s->push_back(std::make_shared<ReLU6>());
  return s;
}

class InvertedResidual : public Module {
 public:
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand) : Module("InvertedResidual") {
    int64_t hidden = in * expand;
    use_residual_ = stride == 1 && in == out;
    auto layers = std::make_shared<Sequential>();
    if (expand != 1) layers->push_back(conv_bn_relu6(in, hidden, 1, 1, 1));
    layers->push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden));
    layers->push_back(conv(hidden, out, 1));
    layers->push_back(std::make_shared<BatchNorm2d>(out));
    register_module("conv", layers);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*child("conv"))(x);
    return use_residual_ ? x + y : y;
  }

 private:
  bool use_residual_;
};

}  // namespace

MobileNetV2::MobileNetV2(int64_t num_classes, double dropout) : Module("MobileNetV2") {
  // (expansion t, channels c, repeats n, first stride s), as in the paper and torchvision.
  const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  auto features = std::make_shared<Sequential>();
  features->push_back(conv_bn_relu6(3, 32, 3, 2, 1));
  int64_t in = 32;
  for (const auto& s : settings) {
    for (int64_t i = 0; i < s[2]; ++i) {
      features->push_back(std::make_shared<InvertedResidual>(in, s[1], i == 0 ? s[3] : 1, s[0]));
      in = s[1];
    }
  }
  features->push_back(conv_bn_relu6(in, 1280, 1, 1, 1));
  register_module("features", features);
  auto classifier = std::make_shared<Sequential>();
  classifier->push_back(std::make_shared<Dropout>(dropout));
  classifier->push_back(std::make_shared<Linear>(1280, num_classes));
  register_module("classifier", classifier);
  torchvision_init(*this, 0.01);
}

Tensor MobileNetV2::forward(const Tensor& x) {
  Tensor h = (*child("features"))(x);
  h = functional::adaptive_avg_pool2d(h, {1, 1});
  return (*child("classifier"))(flatten(h, 1));
}

}  // namespace brisk::nn::models
