// examples/speedup_report/run.h: the two measurements every row of the speedup report is made
// of: train_run (a model trained for the budget under a Config: samples/s, seconds per epoch,
// the allocator's peak beyond what was held before, test accuracy) and infer_run (a trained
// model's passes over the test set: samples/s, seconds per pass, peak, accuracy, latency of a
// batch of 128). A Config is the baseline with every technique off; a row is a delta over it
// (main.cpp). Not here: the table of rows, the outputs (report.h), the MPI launch (main.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "engine/backend.h"
#include "nn/grad_checkpoint.h"
#include "nn/models/simple.h"
#include "optim/optim.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#endif

namespace speedup {

using namespace brisk;

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline bool gpu_available() {
  Backend* cuda = find_backend(DeviceType::CUDA);
  return cuda != nullptr && cuda->device_count() > 0;
}

// The baseline: every technique off (what a first training loop looks like). Rows change fields.
struct Config {
  std::string model = "cnn";  // "cnn" (nn::models::SmallCNN) or "mlp" (784-256-128-10)
  Device device = Device::cpu();
  int64_t batch = 128;
  std::string optimizer = "adam";  // "sgd" (momentum 0.9, nesterov), "adam", "adamw"
  double lr = 1e-3;
  double lr_scale = 1;                // the batch-size finder's scaling of lr
  bool fused_step = false;            // the optimizers' fused multi-tensor step (else the reference)
  std::string schedule = "constant";  // "warmup", "onecycle", "cyclic", stepped per batch
  int workers = 0;                    // DataLoader worker threads
  int prefetch = 2;                   // batches in flight per worker
  bool pin_memory = false;            // page-locked batches, non-blocking copies (CUDA)
  bool fused_transform = false;       // to_tensor + normalize as the loader's one fused pass
  std::optional<DType> amp{};         // autocast dtype: BF16, or F16 with a GradScaler
  int64_t micro_batches = 1;          // gradient accumulation: slices of each batch
  bool checkpointing = false;         // recompute the first conv block / MLP layers in backward
  bool graph = false;                 // capture the step once as a CUDA graph, replay it
  bool drop_last = false;             // (graph capture needs one batch shape)
};

// Train and test sets, shared by every run of the report.
struct Data {
  data::DatasetPtr train, test;
  int64_t epochs = 1;
  uint64_t seed = 0;
};

struct Measured {
  double samples_per_s = 0;
  double seconds = 0;  // per epoch (training rows) or per pass over the test set (inference)
  double peak_mib = 0;
  double test_acc = 0;
  double latency_ms = 0;  // inference rows: median forward of 128 images
  std::string note{};
};

inline std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "cnn") return std::make_shared<nn::models::SmallCNN>();
  return std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 256, 128, 10});
}

// A student a fraction of SmallCNN's width (conv 1->8, 8->16, linear 784->32->10), for distillation.
class TinyCNN : public nn::Module {
 public:
  TinyCNN() : Module("TinyCNN") {
    auto features = std::make_shared<nn::Sequential>();
    features->push_back(std::make_shared<nn::Conv2d>(1, 8, 3, nn::ConvOptions{.padding = {1, 1}}));
    features->push_back(std::make_shared<nn::ReLU>());
    features->push_back(std::make_shared<nn::MaxPool2d>(2));
    features->push_back(std::make_shared<nn::Conv2d>(8, 16, 3, nn::ConvOptions{.padding = {1, 1}}));
    features->push_back(std::make_shared<nn::ReLU>());
    features->push_back(std::make_shared<nn::MaxPool2d>(2));
    register_module("features", features);
    auto classifier = std::make_shared<nn::Sequential>();
    classifier->push_back(std::make_shared<nn::Linear>(16 * 7 * 7, 32));
    classifier->push_back(std::make_shared<nn::ReLU>());
    classifier->push_back(std::make_shared<nn::Linear>(32, 10));
    register_module("classifier", classifier);
  }
  Tensor forward(const Tensor& x) override { return (*child("classifier"))(flatten((*child("features"))(x), 1)); }
};

inline Allocator& allocator_of(Device d) { return backend(d).allocator(d.index); }

// The loader of a run. Step by step: the U8 images are stacked, then cast, scaled and
// normalized by three ops, each a pass over the batch with a temporary; fused: the loader's one
// pass per sample into the batch buffer (data/transforms.h). Both give the same batches.
inline std::unique_ptr<data::DataLoader> make_loader(data::DatasetPtr set, const Config& c, uint64_t seed,
                                                     data::SamplerPtr sampler = nullptr) {
  data::LoaderOptions o;
  o.batch_size = c.batch;
  o.shuffle = sampler == nullptr;
  o.sampler = std::move(sampler);
  o.seed = seed;
  o.drop_last = c.drop_last;
  o.num_workers = c.workers;
  o.prefetch_factor = c.prefetch;
  o.persistent_workers = c.workers > 0;
  o.pin_memory = c.pin_memory;
  if (!c.device.is_cpu()) o.device = c.device;
  if (c.fused_transform) {
    o.transform = data::Compose({data::to_tensor(), data::normalize({kMean}, {kStd})});
  } else {
    o.collate = [](std::vector<data::Example>& samples) {
      std::vector<Tensor> inputs, targets;
      data::Batch b;
      for (data::Example& e : samples) {
        inputs.push_back(e.input);
        targets.push_back(e.target);
      }
      Tensor x = stack(inputs).to(DType::F32) / 255.0;
      b.input = data::normalize_batch(x, {kMean}, {kStd});
      b.target = stack(targets);
      return b;
    };
  }
  return std::make_unique<data::DataLoader>(std::move(set), o);
}

// The test loader every run evaluates with (fused transform, batch 500), so evaluation costs
// the same in every row.
inline std::unique_ptr<data::DataLoader> make_test_loader(const Data& d) {
  data::LoaderOptions o;
  o.batch_size = 500;
  o.transform = data::Compose({data::to_tensor(), data::normalize({kMean}, {kStd})});
  return std::make_unique<data::DataLoader>(d.test, o);
}

inline std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, const optim::NamedTensors& params) {
  const double lr = c.lr * c.lr_scale;
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = lr, .momentum = 0.9, .nesterov = true, .fused = c.fused_step});
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = lr, .fused = c.fused_step});
  }
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .fused = c.fused_step});
}

// Per-batch schedules sized from the run's length; their peak is 3x the configured rate.
inline std::unique_ptr<optim::LRScheduler> make_schedule(const Config& c, optim::Optimizer& opt, int64_t total) {
  const double lr = c.lr * c.lr_scale;
  total = std::max<int64_t>(total, 2);
  if (c.schedule == "warmup") {  // linear warm-up from 10% over the first 10% of the steps
    return std::make_unique<optim::LinearLR>(opt, 0.1, 1.0, std::max<int64_t>(1, total / 10));
  }
  if (c.schedule == "onecycle") {
    optim::OneCycleLROptions o;
    o.max_lr = {3 * lr};
    o.total_steps = total;
    return std::make_unique<optim::OneCycleLR>(opt, o);
  }
  if (c.schedule == "cyclic") {  // triangular2: two cycles between lr / 10 and 3 lr
    optim::CyclicLROptions o;
    o.base_lr = {lr / 10};
    o.max_lr = {3 * lr};
    o.step_size_up = std::max<double>(1, double(total) / 4);
    o.mode = optim::CyclicMode::Triangular2;
    o.cycle_momentum = false;
    return std::make_unique<optim::CyclicLR>(opt, o);
  }
  return nullptr;
}

// The model's forward, with the first segment recomputed in backward when checkpointing: the
// CNN's first conv block (its activations are the largest), the MLP's first Linear + ReLU pairs.
inline Tensor forward(nn::Module& model, const Config& c, const Tensor& x) {
  if (!c.checkpointing) return model(x);
  if (c.model == "cnn") {
    auto& features = static_cast<nn::Sequential&>(*model.child("features"));
    Tensor h = nn::checkpoint_sequential(features, 3, x);
    return (*model.child("classifier"))(flatten(h, 1));
  }
  return nn::checkpoint_sequential(static_cast<nn::Sequential&>(model), 2, flatten(x, 1));
}

// Hooks for the data-parallel run (main.cpp's MPI child): wrap the model, shard the data,
// wait for the other ranks before the clock stops.
struct Hooks {
  std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)> wrap{};
  data::SamplerPtr sampler{};
  std::function<void()> finish{};
};

// One gradient step on `batch`: forward under autocast (if any), backward (through the scaler
// for F16), slices when accumulating (each slice's summed loss over the whole batch size, so the
// gradients add up to the batch's mean gradient), optimizer step. Returns the batch's mean loss.
inline Tensor train_step(nn::Module& model, const Config& c, optim::Optimizer& opt, optim::GradScaler& scaler,
                         const data::Batch& batch) {
  const int64_t B = batch.target.size(0), parts = std::min(c.micro_batches, B);
  opt.zero_grad();
  Tensor total;
  for (int64_t k = 0; k < parts; ++k) {
    const int64_t begin = k * B / parts, len = (k + 1) * B / parts - begin;
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (c.amp) autocast.emplace(c.device, *c.amp);
      Tensor x = parts == 1 ? batch.input : batch.input.narrow(0, begin, len);
      Tensor y = parts == 1 ? batch.target : batch.target.narrow(0, begin, len);
      loss = parts == 1 ? cross_entropy(forward(model, c, x), y)
                        : cross_entropy(forward(model, c, x), y, Reduction::Sum) / double(B);
    }
    scaler.scale(loss).backward();
    NoGradGuard no_grad;
    total = k == 0 ? loss.detach().to(DType::F32) : total + loss.detach().to(DType::F32);
  }
  scaler.step(opt);
  scaler.update();
  return total;
}

// Trains a fresh model (seed-determined, so every row starts from the same weights and sees the
// same batch order) for the budget and evaluates it. Time counts the training loop only, data
// waits included; memory is the allocator's peak beyond what was allocated before the model.
inline Measured train_run(const Config& c, const Data& d, const Hooks& hooks = {},
                          std::shared_ptr<nn::Module>* trained = nullptr) {
  Allocator& alloc = allocator_of(c.device);
  alloc.empty_cache();
  const size_t before = alloc.stats().allocated;
  alloc.reset_peak();
  manual_seed(d.seed);
  std::shared_ptr<nn::Module> model = make_model(c.model);
  model->to(c.device);
  std::shared_ptr<nn::Module> net = hooks.wrap ? hooks.wrap(model) : model;
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, net->named_parameters());
  std::unique_ptr<data::DataLoader> loader = make_loader(d.train, c, d.seed, hooks.sampler);
  std::unique_ptr<optim::LRScheduler> sched = make_schedule(c, *opt, d.epochs * loader->num_batches());
  optim::GradScaler scaler({.enabled = c.amp == DType::F16});
  net->train();

  Tensor loss_sum = zeros({}, DType::F32, c.device);
  int64_t samples = 0, steps = 0;
  const double t0 = now_s();
  if (c.graph) {
#ifdef BRISK_WITH_CUDA
    // Static inputs, one capture of zero_grad + forward + backward + step on the first batch
    // (its two warm-up runs are steps too), then one replay per batch after copying it in.
    loader->set_epoch(0);
    auto first = loader->next();
    Tensor x = first->input.clone(), y = first->target.clone(), loss;
    kernels::cuda::Graph graph(c.device.index);
    graph.capture([&] {
      opt->zero_grad();
      loss = cross_entropy((*net)(x), y);
      loss.backward();
      opt->step();
    });
    for (int64_t epoch = 0; epoch < d.epochs; ++epoch) {
      loader->set_epoch(epoch);
      while (auto b = loader->next()) {
        x.copy_(b->input);
        y.copy_(b->target);
        graph.replay();
        NoGradGuard no_grad;
        loss_sum.add_(loss.detach(), double(b->target.size(0)));
        samples += b->target.size(0);
        ++steps;
      }
    }
#else
    throw std::runtime_error("graph capture needs a CUDA build");
#endif
  } else {
    for (int64_t epoch = 0; epoch < d.epochs; ++epoch) {
      loader->set_epoch(epoch);
      while (auto b = loader->next()) {
        Tensor loss = train_step(*net, c, *opt, scaler, *b);
        if (sched) sched->step();
        NoGradGuard no_grad;
        loss_sum.add_(loss, double(b->target.size(0)));
        samples += b->target.size(0);
        ++steps;
      }
    }
  }
  const double last_loss = loss_sum.item<double>() / double(std::max<int64_t>(samples, 1));
  if (hooks.finish) hooks.finish();
  const double seconds = now_s() - t0;

  Measured m;
  m.samples_per_s = double(samples) / seconds;
  m.seconds = seconds / double(d.epochs);
  m.peak_mib = double(alloc.stats().peak - std::min(before, alloc.stats().peak)) / (1 << 20);
  if (!std::isfinite(last_loss)) m.note = "diverged (non-finite loss)";
  std::unique_ptr<data::DataLoader> test = make_test_loader(d);
  NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0, seen = 0;
  while (auto b = test->next()) {
    Tensor logits = (*model)(b->input.to(c.device));
    correct += sum(eq(argmax(logits, 1), b->target.to(c.device))).item<int64_t>();
    seen += b->target.size(0);
  }
  model->train();
  m.test_acc = double(correct) / double(seen);
  if (trained) *trained = model;
  return m;
}

// Inference with a trained model (CPU): the best of two passes over the test set (eval mode;
// with `no_grad` false the forward still records the tape, as an evaluation loop that forgot
// NoGradGuard does), and the median latency of 20 forwards of the first 128 test images.
inline Measured infer_run(nn::Module& model, const Data& d, bool no_grad = true) {
  Allocator& alloc = allocator_of(Device::cpu());
  std::unique_ptr<data::DataLoader> test = make_test_loader(d);
  std::vector<data::Batch> batches;
  while (auto b = test->next()) batches.push_back(*b);
  const size_t before = alloc.stats().allocated;
  alloc.reset_peak();
  GradModeGuard grad(!no_grad);
  model.eval();
  Measured m;
  m.seconds = 1e30;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t correct = 0, seen = 0;
    const double t0 = now_s();
    for (const data::Batch& b : batches) {
      Tensor logits = model(b.input);
      correct += sum(eq(argmax(logits, 1), b.target)).item<int64_t>();
      seen += b.target.size(0);
    }
    m.seconds = std::min(m.seconds, now_s() - t0);
    m.test_acc = double(correct) / double(seen);
    m.samples_per_s = double(seen) / m.seconds;
  }
  m.peak_mib = double(alloc.stats().peak - std::min(before, alloc.stats().peak)) / (1 << 20);
  Tensor x = batches[0].input.narrow(0, 0, std::min<int64_t>(128, batches[0].input.size(0)));
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t0 = now_s();
    model(x).sum().item<float>();
    if (i >= 3) ms.push_back(1e3 * (now_s() - t0));
  }
  std::sort(ms.begin(), ms.end());
  m.latency_ms = ms[ms.size() / 2];
  model.train();
  return m;
}

}  // namespace speedup
