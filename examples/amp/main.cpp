// examples/amp/main.cpp: mixed precision with a gradient scaler, in one page. An MLP learns
// Fashion-MNIST (a subset) three ways from the same initial weights: plain F32; autocast to F16
// with a GradScaler (matmuls in F16, softmax/loss in F32, weights and Adam state in F32); and
// the same F16 run without the scaler, whose small gradients underflow to zero. Each epoch
// prints the loss, the accuracy, the scale and the steps the scaler skipped.
//   amp [--data DIR] [--epochs N] [--limit N] [--device cpu|cuda]
// On the CPU, F16 is emulated through F32 (slow, but the numbers are F16's); on a GPU it runs
// on tensor cores. BF16 has F32's range and needs no scaler: use AutocastGuard(device, BF16).
#include <cstdio>
#include <cstring>
#include <string>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "nn/models/simple.h"
#include "optim/optim.h"

using namespace brisk;

namespace {

struct Options {
  std::string data = data::FashionMNIST::kDefaultRoot;
  int64_t epochs = 2;
  int64_t limit = 6000;
  Device device = Device::cpu();
};

enum class Mode { F32, F16Scaled, F16Unscaled };
const char* mode_name(Mode m) {
  return m == Mode::F32 ? "F32" : m == Mode::F16Scaled ? "F16 + GradScaler" : "F16, no scaler";
}

double accuracy(nn::Module& model, data::DataLoader& loader, Mode mode, Device device) {
  NoGradGuard no_grad;
  AutocastGuard autocast(device, DType::F16, mode != Mode::F32);
  int64_t correct = 0, seen = 0;
  while (auto b = loader.next()) {
    correct += sum(eq(argmax(model(b->input), 1), b->target)).item<int64_t>();
    seen += b->target.size(0);
  }
  return double(correct) / double(seen);
}

void train_one(Mode mode, const Options& o, data::DataLoader& train_loader, data::DataLoader& test_loader) {
  manual_seed(0);  // the same initial weights for every mode
  nn::models::MLP model({784, 256, 128, 10});
  model.to(o.device);
  optim::Adam opt(model.named_parameters(), {.lr = 1e-3});
  // A scaler with enabled = false is a pass-through: the same loop serves every mode.
  optim::GradScaler scaler({.enabled = mode == Mode::F16Scaled});
  std::printf("-- %s\n", mode_name(mode));
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    double loss_sum = 0;
    int64_t batches = 0, zero_grads = 0;
    const int64_t skipped_before = scaler.skipped_steps();
    while (auto b = train_loader.next()) {
      Tensor loss;
      {
        // 1. Forward and loss under autocast: each op runs in the dtype its policy names.
        AutocastGuard autocast(o.device, DType::F16, mode != Mode::F32);
        loss = cross_entropy(model(b->input), b->target);
      }
      opt.zero_grad();
      // 2. Backward on the scaled loss: gradients are `scale` times too large, so F16 keeps them.
      // Without a scaler, the loss is divided by 2^16 here to show what tiny gradients do in F16.
      Tensor to_backward = mode == Mode::F16Unscaled ? loss * (1.0 / 65536) : scaler.scale(loss);
      to_backward.backward();
      const Tensor& w = model.named_parameters()[0].second;  // the first layer's weight
      if (w.grad().defined() && sum(abs(w.grad())).item<double>() == 0) ++zero_grads;
      // 3. unscale_ (optional: only needed before clipping), step (skipped on Inf/NaN), update.
      scaler.unscale_(opt);
      optim::clip_grad_norm_(model.parameters(), 5.0);
      scaler.step(opt);
      scaler.update();
      loss_sum += loss.item<double>();
      ++batches;
    }
    std::printf("epoch %lld: loss %.4f, test accuracy %.2f%%, scale %g, skipped steps %lld, all-zero grads %lld\n",
                (long long)epoch, loss_sum / double(batches), 100 * accuracy(model, test_loader, mode, o.device),
                scaler.get_scale(), (long long)(scaler.skipped_steps() - skipped_before), (long long)zero_grads);
  }
  if (!scaler.last_overflow().params.empty()) {  // overflow provenance: which gradients overflowed
    std::printf("last skipped step (scale %g): Inf/NaN in", scaler.last_overflow().scale);
    for (const std::string& p : scaler.last_overflow().params) std::printf(" %s", p.c_str());
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--data")) o.data = argv[i + 1];
    if (!std::strcmp(argv[i], "--epochs")) o.epochs = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--limit")) o.limit = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--device"))
      o.device = std::string(argv[i + 1]) == "cuda" ? Device::cuda() : Device::cpu();
  }
  try {
    auto train_set = std::make_shared<data::FashionMNIST>(o.data, /*train=*/true);
    auto test_set = std::make_shared<data::FashionMNIST>(o.data, /*train=*/false);
    std::vector<int64_t> first(size_t(std::min<int64_t>(o.limit, train_set->size())));
    for (size_t i = 0; i < first.size(); ++i) first[i] = int64_t(i);
    data::LoaderOptions lo;
    lo.batch_size = 128;
    lo.shuffle = true;
    lo.transform = data::Compose({data::to_tensor(), data::normalize({0.2860}, {0.3530})});
    if (o.device.is_cuda()) lo.device = o.device;
    data::DataLoader train_loader(std::make_shared<data::Subset>(train_set, first), lo);
    lo.shuffle = false;
    data::DataLoader test_loader(test_set, lo);
    for (Mode m : {Mode::F32, Mode::F16Scaled, Mode::F16Unscaled}) train_one(m, o, train_loader, test_loader);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
