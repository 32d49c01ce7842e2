// examples/compress/main.cpp: model compression on Fashion-MNIST, one stage after another, with
// one table row per stage: test accuracy, parameters, bytes of its safetensors file, inference
// ms per batch of 128 and training ms per step. Stages: a teacher (the main job's SmallCNN), a
// small student trained alone, and the same student (same initial weights, same batch order)
// distilled from the teacher (compress/distill.h: T^2-scaled soft targets mixed with the labels,
// optionally feature matching through a 1x1 conv adapter). Then copies of the distilled student
// compressed (prune_stages, quantize_stages): a control fine-tuned uncompressed ("dense-ft");
// 90% of its conv and linear weights masked by global L1 pruning (compress/prune.h), one shot or on
// Zhu and Gupta's cubic ramp, fine-tuned; half of its conv channels removed physically
// (compress/prune_channels.h) and fine-tuned; static int8 PTQ with calibration and QAT (fake
// quantization, fine-tuned, converted) (compress/quantize.h). Summary lines at the end: the gap the
// distilled student recovers, (distilled - alone) / (teacher - alone), and what each
// compression costs in accuracy against the distilled student and the control, with its
// inference speedup timed interleaved with the dense student.
// With --labels N the students know the labels of N images only (semi-supervised
// distillation, where distillation pays on this data; with every label it does not, in brisk
// and in PyTorch alike: distill_pytorch.py beside this file runs the same stages in PyTorch).
//   compress [--epochs N] [--quick] [--student-epochs N] [--student-limit N] [--labels N] [--temperature T]
//            [--alpha A] [--feature-weight W] [--teacher FILE] [--finetune-epochs N]
//            [--finetune-limit N] [--sparsity S] [--channels A]   (--help lists all)
// Not here: sparse storage or sparse kernels (the 90%-sparse models are stored and run dense).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "brisk.h"
#include "compress/distill.h"
#include "compress/prune.h"
#include "compress/prune_channels.h"
#include "compress/quantize.h"
#include "examples/fashion_mnist/evaluate.h"
#include "examples/fashion_mnist/progress.h"
#include "kernels/cpu/gemm_i8.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

struct Args {
  int64_t epochs = 4;          // the teacher's
  bool quick = false;          // 1 epoch on 10000 samples: a smoke run
  int64_t limit = 0;           // train on the first N samples (0: all 60000)
  int64_t student_epochs = 0;  // 0: as --epochs
  int64_t student_limit = 0;   // the students' transfer set: the first N samples (0: as --limit)
  int64_t labels = 0;          // the students have the labels of their first N samples only (0: all)
  double lr = 3e-3;            // OneCycle max learning rate (Adam)
  double temperature = 4.0;
  double alpha = 0.9;
  double feature_weight = 0.0;  // > 0: also match the conv features (1x1 conv adapter, MSE)
  int64_t width = 8;            // the student's first conv width (the second has 2x)
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "runs/compress";
  std::string teacher;  // a trained teacher's safetensors (a previous run's teacher.safetensors)
  // The compression stages' fine-tunes (pruned models and QAT): labels only, OneCycle at
  // finetune_lr, on the first finetune_limit samples of the students' set (0: all of it).
  int64_t finetune_epochs = 1;
  int64_t finetune_limit = 0;
  double finetune_lr = 1e-3;
  double sparsity = 0.9;            // unstructured: fraction of conv + linear weights masked
  double channels = 0.5;            // structured: fraction of each conv's output channels removed
  int64_t calibration_batches = 8;  // static PTQ: training batches through the observers
};

void usage() {
  std::printf(
      "usage: compress [options]\n"
      "  --epochs N           epochs of the teacher (default 4)\n"
      "  --quick              1 epoch on 10000 training samples (a smoke run)\n"
      "  --limit N            train on the first N samples (default: all 60000)\n"
      "  --student-epochs N   epochs of each student (default: as --epochs)\n"
      "  --student-limit N    the students learn from the first N samples only, the teacher from\n"
      "                       all (Hinton's small transfer set; default: as --limit)\n"
      "  --labels N           semi-supervised distillation: the students have the labels of\n"
      "                       their first N samples only; the student alone trains on those\n"
      "                       (as many steps as the distilled one), the distilled student on the\n"
      "                       teacher's soft targets for all and the labels it has (default: all)\n"
      "  --lr X               OneCycle max learning rate, Adam (default 3e-3)\n"
      "  --temperature T      distillation temperature (default 4)\n"
      "  --alpha A            weight of the soft targets, 1 - A on the labels (default 0.9)\n"
      "  --feature-weight W   also match conv features through a 1x1 conv adapter (default 0: off)\n"
      "  --width N            student conv widths N and 2N (default 8)\n"
      "  --seed N             seed of init and shuffling (default 0)\n"
      "  --threads N          OpenMP compute threads (default: all cores)\n"
      "  --data DIR           Fashion-MNIST IDX files (default %s)\n"
      "  --out DIR            safetensors files of each stage (default runs/compress)\n"
      "  --teacher FILE       load the teacher (SmallCNN safetensors, e.g. a previous run's\n"
      "                       <out>/teacher.safetensors) instead of training it\n"
      "  --finetune-epochs N  epochs of each compression fine-tune (pruned models, QAT; default 1)\n"
      "  --finetune-limit N   fine-tune on the first N samples of the students' set (default: all)\n"
      "  --finetune-lr X      OneCycle max learning rate of the fine-tunes (default 1e-3)\n"
      "  --sparsity S         unstructured pruning: fraction of conv+linear weights masked (default 0.9)\n"
      "  --channels A         structured pruning: fraction of conv channels removed (default 0.5)\n"
      "  --calibration N      static PTQ: training batches of 128 run through the observers (default 8)\n",
      data::FashionMNIST::kDefaultRoot);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--help" || k == "-h") {
      usage();
      std::exit(0);
    } else if (k == "--epochs") {
      a.epochs = std::stoll(value());
    } else if (k == "--quick") {
      a.quick = true;
    } else if (k == "--limit") {
      a.limit = std::stoll(value());
    } else if (k == "--student-epochs") {
      a.student_epochs = std::stoll(value());
    } else if (k == "--student-limit") {
      a.student_limit = std::stoll(value());
    } else if (k == "--labels") {
      a.labels = std::stoll(value());
    } else if (k == "--lr") {
      a.lr = std::stod(value());
    } else if (k == "--temperature") {
      a.temperature = std::stod(value());
    } else if (k == "--alpha") {
      a.alpha = std::stod(value());
    } else if (k == "--feature-weight") {
      a.feature_weight = std::stod(value());
    } else if (k == "--width") {
      a.width = std::stoll(value());
    } else if (k == "--seed") {
      a.seed = std::stoull(value());
    } else if (k == "--threads") {
      a.threads = std::stoi(value());
    } else if (k == "--data") {
      a.data = value();
    } else if (k == "--out") {
      a.out = value();
    } else if (k == "--teacher") {
      a.teacher = value();
    } else if (k == "--finetune-epochs") {
      a.finetune_epochs = std::stoll(value());
    } else if (k == "--finetune-limit") {
      a.finetune_limit = std::stoll(value());
    } else if (k == "--finetune-lr") {
      a.finetune_lr = std::stod(value());
    } else if (k == "--sparsity") {
      a.sparsity = std::stod(value());
    } else if (k == "--channels") {
      a.channels = std::stod(value());
    } else if (k == "--calibration") {
      a.calibration_batches = std::stoll(value());
    } else {
      throw std::runtime_error("unknown option " + k + " (see --help)");
    }
  }
  if (a.quick) {
    a.epochs = 1;
    if (a.limit == 0) a.limit = 10000;
  }
  if (a.student_epochs == 0) a.student_epochs = a.epochs;
  if (a.student_limit == 0) a.student_limit = a.limit;
  if (a.epochs < 1 || a.student_epochs < 1 || a.limit < 0 || a.student_limit < 0 || a.labels < 0 || a.width < 1 ||
      a.threads < 0) {
    throw std::runtime_error(
        "--epochs, --student-epochs and --width must be positive; --limit, --student-limit, --labels and --threads "
        ">= 0");
  }
  if (a.finetune_epochs < 1 || a.finetune_limit < 0 || a.calibration_batches < 1 || !(a.sparsity >= 0) ||
      !(a.sparsity <= 1) || !(a.channels >= 0) || !(a.channels < 1)) {
    throw std::runtime_error(
        "--finetune-epochs and --calibration must be positive, --finetune-limit >= 0, --sparsity in [0, 1], "
        "--channels in [0, 1)");
  }
  return a;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The student: SmallCNN's layout at a fraction of its width (conv 1->w, conv w->2w, linear
// 2w*49 -> 32 -> 10). Names as SmallCNN: features.{0,3}, classifier.{0,2}.
class TinyCNN : public nn::Module {
 public:
  explicit TinyCNN(int64_t w) : Module("TinyCNN") {
    auto features = std::make_shared<nn::Sequential>();
    features->push_back(std::make_shared<nn::Conv2d>(1, w, 3, nn::ConvOptions{.padding = {1, 1}}));
    features->push_back(std::make_shared<nn::ReLU>());
    features->push_back(std::make_shared<nn::MaxPool2d>(2));
    features->push_back(std::make_shared<nn::Conv2d>(w, 2 * w, 3, nn::ConvOptions{.padding = {1, 1}}));
    features->push_back(std::make_shared<nn::ReLU>());
    features->push_back(std::make_shared<nn::MaxPool2d>(2));
    register_module("features", features);
    auto classifier = std::make_shared<nn::Sequential>();
    classifier->push_back(std::make_shared<nn::Linear>(2 * w * 7 * 7, 32));
    classifier->push_back(std::make_shared<nn::ReLU>());
    classifier->push_back(std::make_shared<nn::Linear>(32, 10));
    register_module("classifier", classifier);
  }
  Tensor forward(const Tensor& x) override { return (*child("classifier"))(flatten((*child("features"))(x), 1)); }
};

// One row of the table.
struct Stage {
  std::string name;
  double acc = 0;
  int64_t params = 0;
  int64_t bytes = 0;
  double infer_ms = 0;
  double step_ms = 0;  // 0: the stage trains nothing
  std::string note;
  double sparsity = 0;  // zeros / entries of the conv and linear weights (the "sparse" stages)
  double speedup = 0;   // inference against the dense F32 student, timed interleaved (0: not timed)
};

// What every stage reads: the options, the loaders, a fixed test batch for timings.
struct Context {
  Args args;
  data::DataLoader* teacher_loader = nullptr;
  data::DataLoader* student_loader = nullptr;  // the teacher's unless --student-limit
  // --labels: the student alone's loader (the labeled samples) and its epochs; else as above
  data::DataLoader* alone_loader = nullptr;
  int64_t alone_epochs = 0;
  data::DataLoader* test_loader = nullptr;
  data::DataLoader* finetune_loader = nullptr;  // the students' unless --finetune-limit
  Tensor timing_batch;                          // (128, 1, 28, 28), normalized
};

// Median wall ms of forward passes on the timing batch, eval mode, no graph.
double inference_ms(nn::Module& model, const Tensor& batch) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t0 = now_s();
    Tensor y = model(batch);
    y.sum().item<float>();  // wait for the result (a device sync on CUDA)
    if (i >= 3) ms.push_back(1e3 * (now_s() - t0));
  }
  model.train();
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Inference of `reference` over `model`'s, each the best of 3 interleaved inference_ms calls,
// so load from other processes on a shared machine costs both alike (the table's single
// measurements, minutes apart, are not comparable to a few tens of percent).
double paired_speedup(nn::Module& reference, nn::Module& model, const Tensor& batch) {
  double ref = 1e30, ms = 1e30;
  for (int round = 0; round < 3; ++round) {
    ref = std::min(ref, inference_ms(reference, batch));
    ms = std::min(ms, inference_ms(model, batch));
  }
  return ref / ms;
}

// Test accuracy, parameters, file size and inference time of a model; step_ms from training.
// A quantized model (quantized: true) is saved with nn::quantize::save_quantized; its weights
// are int8 buffers, not parameters, so it counts the elements of every "weight" and "bias"
// (the same numbers as the float model it came from).
Stage measure(const std::string& name, nn::Module& model, Context& ctx, double step_ms, std::string note = "",
              bool quantized = false) {
  Stage s;
  s.name = name;
  s.acc = fashion_mnist::evaluate(model, *ctx.test_loader).acc;
  const std::string path = ctx.args.out + "/" + name + ".safetensors";
  if (quantized) {
    for (const auto& [key, t] : model.state_dict()) {
      const std::string leaf = key.substr(key.rfind('.') + 1);
      if (leaf == "weight" || leaf == "bias") s.params += t.numel();
    }
    nn::quantize::save_quantized(model, path);
  } else {
    s.params = model.num_parameters();
    nn::save_module(model, path, {{"stage", name}});
  }
  s.bytes = int64_t(std::filesystem::file_size(path));
  s.infer_ms = inference_ms(model, ctx.timing_batch);
  s.step_ms = step_ms;
  s.note = std::move(note);
  return s;
}

using LossFn = std::function<Tensor(const data::Batch&)>;

// Adam + OneCycle (per batch) over `params` for `epochs`, starting the loader at epoch 0 so
// every stage sees the same batches; prints loss and test accuracy per epoch. Returns the mean
// wall ms per training step (forward, loss, backward, optimizer step). lr: the OneCycle max
// learning rate (0: --lr). before_step (optional) runs before each step with the step's index
// from 0, outside the timing (the gradual pruner's masks).
double train(const std::string& label, nn::Module& model, const nn::NamedTensors& params, data::DataLoader& loader,
             int64_t epochs, Context& ctx, const LossFn& loss_of, double lr = 0,
             const std::function<void(int64_t)>& before_step = {}) {
  const Args& a = ctx.args;
  if (lr == 0) lr = a.lr;
  optim::Adam opt(params, {.lr = lr});
  optim::OneCycleLROptions o;
  o.max_lr = {lr};
  o.epochs = epochs;
  o.steps_per_epoch = loader.num_batches();
  optim::OneCycleLR sched(opt, o);
  loader.set_epoch(0);
  model.train();
  double step_seconds = 0;
  int64_t steps = 0;
  const int64_t every = (epochs + 7) / 8;  // report about 8 epochs of a long run (--labels)
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    const bool report = epoch % every == 0 || epoch == epochs;
    std::optional<fashion_mnist::ProgressBar> bar;
    if (report) bar.emplace(label + " " + std::to_string(epoch) + "/" + std::to_string(epochs), loader.num_batches());
    double loss_sum = 0;
    int64_t done = 0, samples = 0;
    while (auto batch = loader.next()) {
      if (before_step) before_step(steps);
      const double t0 = now_s();
      Tensor loss = loss_of(*batch);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      const double l = loss.item<double>();
      step_seconds += now_s() - t0;
      ++steps;
      loss_sum += l * double(batch->target.size(0));
      samples += batch->target.size(0);
      ++done;
      if (bar) bar->update(done, samples, loss_sum / double(samples));
    }
    if (!report) continue;
    const double acc = fashion_mnist::evaluate(model, *ctx.test_loader).acc;
    std::fprintf(stderr, "%s epoch %lld: train loss %.4f, test accuracy %.2f%%\n", label.c_str(), (long long)epoch,
                 loss_sum / double(samples), 100 * acc);
  }
  return 1e3 * step_seconds / double(steps);
}

// ---- Compression of the distilled student (issue 15). Every stage works on its own copy of
// the distilled student, so each compression is measured against the same F32 model (the
// "distilled" row) and the costs do not compound. The student suits the channel walk (Note
// [Channel dependency walk] in compress/prune_channels.h): its root forward runs "features" then
// "classifier" in registration order, and each conv reaches the next conv or the first Linear
// through ReLU and max pooling only, so both convs can lose channels (no need to fall back to
// the teacher). The dense reference for timings is the "student" row: the same architecture
// trained alone (the "distilled" row's step also runs the teacher).

LossFn plain_ce(nn::Module& m) {
  return [&m](const data::Batch& b) { return cross_entropy(m(b.input), b.target); };
}

std::shared_ptr<TinyCNN> copy_of(nn::Module& student, const Context& ctx) {
  auto m = std::make_shared<TinyCNN>(ctx.args.width);
  m->load_state_dict(student.state_dict());
  return m;
}

// The short fine-tune of a compressed model: labels only, --finetune-lr, --finetune-epochs.
double finetune(const std::string& label, nn::Module& model, Context& ctx,
                const std::function<void(int64_t)>& before_step = {}) {
  return train(label, model, model.named_parameters(), *ctx.finetune_loader, ctx.args.finetune_epochs, ctx,
               plain_ce(model), ctx.args.finetune_lr, before_step);
}

// Every conv and linear weight of m, for global pruning.
std::vector<nn::prune::Param> prunable_weights(nn::Module& m) {
  std::vector<nn::prune::Param> weights;
  for (auto& [path, sub] : m.named_modules()) {
    if (sub->type_name() == "Conv2d" || sub->type_name() == "Linear") weights.emplace_back(*sub, "weight");
  }
  return weights;
}

// Makes the masks permanent (weights with zeros, no masks: the file and forward of a dense
// model) and returns the sparsity, also printed per tensor on stderr.
nn::prune::SparsityReport make_permanent(const std::string& label, nn::Module& m,
                                         const std::vector<nn::prune::Param>& weights) {
  for (const nn::prune::Param& w : weights) nn::prune::remove(*w.module, w.name);
  nn::prune::SparsityReport report = nn::prune::sparsity_report(m);
  std::fprintf(stderr, "%s: after the fine-tune and prune::remove\n%s", label.c_str(), report.str().c_str());
  return report;
}

// Pruning (compress/prune.h, compress/prune_channels.h). "sparse": global L1 unstructured over every conv
// and linear weight (--sparsity, 90%), fine-tuned through the masks (the masked entries get no
// update), then made permanent (prune::remove), so the file and the forward are the dense
// layout with zeros: masks alone buy no speed or bytes without sparse kernels or sparse
// storage. "channels": --channels (50%) of each conv's output channels, the filters with the
// smallest L1 norm, removed physically (checked against the masked model on 16 images), then
// fine-tuned: a smaller dense model.
std::vector<Stage> prune_stages(std::shared_ptr<nn::Module>& student, Context& ctx) {
  const Args& a = ctx.args;
  std::vector<Stage> rows;
  char note[320];
  {  // the control: the same fine-tune with nothing pruned (extra epochs alone move accuracy)
    auto m = copy_of(*student, ctx);
    const double step = finetune("dense-ft", *m, ctx);
    rows.push_back(measure("dense-ft", *m, ctx, step, "control: the distilled student fine-tuned as the pruned ones"));
  }
  {  // one shot: all of the sparsity at once, then the fine-tune
    auto m = copy_of(*student, ctx);
    const std::vector<nn::prune::Param> weights = prunable_weights(*m);
    nn::prune::global_unstructured(weights, nn::prune::Method::L1, a.sparsity);
    const double before = fashion_mnist::evaluate(*m, *ctx.test_loader).acc;
    const double step = finetune("sparse", *m, ctx);
    const nn::prune::SparsityReport report = make_permanent("sparse", *m, weights);
    std::snprintf(note, sizeof note,
                  "one-shot global L1 %g%%: %lld of %lld conv+linear weights zero; %.2f%% before fine-tune; stored "
                  "and run dense",
                  100 * a.sparsity, (long long)report.zeros(), (long long)report.elements(), 100 * before);
    Stage s = measure("sparse", *m, ctx, step, note);
    s.sparsity = report.sparsity();
    s.speedup = paired_speedup(*student, *m, ctx.timing_batch);
    rows.push_back(s);
  }
  {  // gradual (Zhu and Gupta): the cubic ramp 0 -> --sparsity in 10 global L1 steps over the
     // first half of the fine-tune, the second half at the final sparsity
    auto m = copy_of(*student, ctx);
    const std::vector<nn::prune::Param> weights = prunable_weights(*m);
    const int64_t steps = ctx.finetune_loader->num_batches() * a.finetune_epochs;
    nn::prune::CubicSchedule schedule{.initial_sparsity = 0.0,
                                      .final_sparsity = a.sparsity,
                                      .begin_step = 0,
                                      .num_steps = 10,
                                      .frequency = std::max<int64_t>(1, steps / 20)};
    nn::prune::GradualPruner pruner(weights, schedule, /*global=*/true);
    const double step = finetune("sparse-gradual", *m, ctx, [&](int64_t t) { pruner.step(t); });
    const nn::prune::SparsityReport report = make_permanent("sparse-gradual", *m, weights);
    std::snprintf(note, sizeof note,
                  "gradual global L1 (cubic, 10 steps every %lld over the fine-tune's first half) to %g%%: %lld of "
                  "%lld weights zero; stored and run dense",
                  (long long)schedule.frequency, 100 * a.sparsity, (long long)report.zeros(),
                  (long long)report.elements());
    Stage s = measure("sparse-gradual", *m, ctx, step, note);
    s.sparsity = report.sparsity();
    s.speedup = paired_speedup(*student, *m, ctx.timing_batch);
    rows.push_back(s);
  }
  {
    auto m = copy_of(*student, ctx);
    const nn::prune::ChannelPlan plan =
        nn::prune::prune_channels(*m, {.amount = a.channels, .norm = 1}, ctx.timing_batch.narrow(0, 0, 16));
    std::fprintf(stderr, "channels: %s", plan.str().c_str());
    const double before = fashion_mnist::evaluate(*m, *ctx.test_loader).acc;
    const double step = finetune("channels", *m, ctx);
    std::string widths;
    for (const nn::prune::ChannelGroup& g : plan.groups) {
      widths += (widths.empty() ? "" : ", ") + g.conv + " " + std::to_string(g.channels) + "->" +
                std::to_string(g.keep.size());
    }
    std::snprintf(note, sizeof note, "%g%% of conv channels removed (L1 filters): %s; %.2f%% before fine-tune",
                  100 * a.channels, widths.c_str(), 100 * before);
    Stage s = measure("channels", *m, ctx, step, note);
    s.speedup = paired_speedup(*student, *m, ctx.timing_batch);
    rows.push_back(s);
  }
  // `student` stays the distilled student: quantize_stages starts from it again.
  return rows;
}

// Quantization (compress/quantize.h) of the distilled student, so int8 is compared with the F32
// model it came from (quantizing the sparse model would not keep its zeros through QAT, which
// trains plain parameters, and the channel-pruned one would mix two losses in one number).
// "int8-ptq": static post-training quantization: fuse (conv + ReLU + 2x2 max pool, linear +
// ReLU), histogram observers on the inputs and per-channel symmetric int8 weights (PyTorch's
// fbgemm default), --calibration training batches, convert. "int8-qat": fake quantization of
// weights and inputs (moving-average min-max), fine-tuned with the straight-through estimator,
// converted. Both files through save_quantized (int8 weights, F32 scales, I64 zero points).
std::vector<Stage> quantize_stages(std::shared_ptr<nn::Module>& student, Context& ctx) {
  namespace q = nn::quantize;
  const Args& a = ctx.args;
  const char* path = kernels::cpu::i8_gemm_path_name(kernels::cpu::i8_gemm_path());
  std::vector<Stage> rows;
  char note[320];
  {
    auto m = copy_of(*student, ctx);
    q::prepare(m, q::get_default_qconfig("fbgemm"));
    int64_t seen = 0;
    {
      NoGradGuard no_grad;
      data::DataLoader& loader = *ctx.student_loader;
      loader.set_epoch(0);
      for (int64_t i = 0; i < a.calibration_batches; ++i) {
        auto batch = loader.next();
        if (!batch) break;
        (*m)(batch->input);
        seen += batch->target.size(0);
      }
      loader.set_epoch(0);
    }
    q::convert(m);
    std::snprintf(note, sizeof note,
                  "static PTQ: conv+relu+pool fused, histogram observers, %lld calibration images, per-channel int8 "
                  "weights, %s GEMM",
                  (long long)seen, path);
    Stage s = measure("int8-ptq", *m, ctx, 0, note, /*quantized=*/true);
    s.speedup = paired_speedup(*student, *m, ctx.timing_batch);
    rows.push_back(s);
  }
  {
    auto m = copy_of(*student, ctx);
    q::prepare_qat(m, q::default_qat_qconfig());
    const double step = finetune("qat", *m, ctx);
    const double fake = fashion_mnist::evaluate(*m, *ctx.test_loader).acc;
    q::convert(m);
    std::snprintf(note, sizeof note,
                  "QAT: fake quant (moving-average min-max), %lld-epoch fine-tune, converted; fake-quant model %.2f%%; "
                  "%s GEMM",
                  (long long)a.finetune_epochs, 100 * fake, path);
    Stage s = measure("int8-qat", *m, ctx, step, note, /*quantized=*/true);
    s.speedup = paired_speedup(*student, *m, ctx.timing_batch);
    rows.push_back(s);
  }
  return rows;
}

void print_table(const std::vector<Stage>& rows) {
  std::printf("\n| stage | test acc | params | bytes on disk | infer ms / 128 | train ms / step | notes |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const Stage& s : rows) {
    char step[32] = "-";
    if (s.step_ms > 0) std::snprintf(step, sizeof step, "%.2f", s.step_ms);
    std::printf("| %s | %.2f%% | %lld | %lld | %.2f | %s | %s |\n", s.name.c_str(), 100 * s.acc, (long long)s.params,
                (long long)s.bytes, s.infer_ms, step, s.note.c_str());
  }
}

int run(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  std::filesystem::create_directories(a.out);
  const double start = now_s();

  // ---- data (as the main job: U8 images in memory, normalized F32 batches from the loader)
  auto full_train = std::make_shared<data::FashionMNIST>(a.data, /*train=*/true);
  auto test_set = std::make_shared<data::FashionMNIST>(a.data, /*train=*/false);
  auto first_n = [&](int64_t n) -> data::DatasetPtr {
    if (n == 0 || n >= full_train->size()) return full_train;
    std::vector<int64_t> first(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) first[size_t(i)] = i;
    return std::make_shared<data::Subset>(full_train, first);
  };
  data::DatasetPtr train_set = first_n(a.limit), student_set = first_n(a.student_limit);
  // --labels N (semi-supervised distillation): the students know the labels of the first N of
  // their samples only. The distilled student reads every sample, with target -100 (ignored by
  // cross_entropy) where it has no label; the student alone and every later fine-tune read the
  // N labeled samples.
  data::DatasetPtr labeled_set = student_set;
  if (a.labels > 0 && a.labels < student_set->size()) {
    labeled_set = first_n(a.labels);
    Tensor targets = student_set->targets().clone();
    targets.narrow(0, a.labels, targets.size(0) - a.labels).fill_(-100);
    student_set = std::make_shared<data::TensorDataset>(student_set->inputs(), targets);
  }
  const bool finetune_subset = a.finetune_limit > 0 && a.finetune_limit < labeled_set->size();
  data::DatasetPtr finetune_set = finetune_subset ? first_n(a.finetune_limit) : labeled_set;
  data::LoaderOptions lo;
  lo.batch_size = 128;
  lo.shuffle = true;
  lo.seed = a.seed;
  lo.num_workers = 2;
  lo.persistent_workers = true;
  lo.transform = data::Compose({data::to_tensor(), data::normalize({kMean}, {kStd})});
  data::DataLoader train_loader(train_set, lo);
  std::unique_ptr<data::DataLoader> student_loader;
  if (student_set != train_set) student_loader = std::make_unique<data::DataLoader>(student_set, lo);
  std::unique_ptr<data::DataLoader> labeled_loader;
  if (labeled_set != student_set) labeled_loader = std::make_unique<data::DataLoader>(labeled_set, lo);
  std::unique_ptr<data::DataLoader> finetune_loader;
  if (finetune_set != labeled_set) finetune_loader = std::make_unique<data::DataLoader>(finetune_set, lo);
  lo.shuffle = false;
  data::DataLoader test_loader(test_set, lo);

  Context ctx;
  ctx.args = a;
  ctx.teacher_loader = &train_loader;
  ctx.student_loader = student_loader ? student_loader.get() : &train_loader;
  ctx.alone_loader = labeled_loader ? labeled_loader.get() : ctx.student_loader;
  ctx.finetune_loader = finetune_loader ? finetune_loader.get() : ctx.alone_loader;
  // The same number of steps for both students: ceil(epochs x distilled batches / alone batches).
  ctx.alone_epochs = (a.student_epochs * ctx.student_loader->num_batches() + ctx.alone_loader->num_batches() - 1) /
                     ctx.alone_loader->num_batches();
  ctx.test_loader = &test_loader;
  ctx.timing_batch = test_loader.next()->input;
  test_loader.set_epoch(0);
  std::fprintf(stderr,
               "compress: teacher %lld train samples x %lld epochs, students %lld x %lld (%lld labeled; the student "
               "alone %lld epochs); %lld test samples; %d threads, seed %llu\n",
               (long long)train_set->size(), (long long)a.epochs, (long long)student_set->size(),
               (long long)a.student_epochs, (long long)labeled_set->size(), (long long)ctx.alone_epochs,
               (long long)test_set->size(), omp_get_max_threads(), (unsigned long long)a.seed);

  std::vector<Stage> rows;

  // ---- 1. the teacher
  manual_seed(a.seed);
  auto teacher = std::make_shared<nn::models::SmallCNN>();
  double step = 0;
  if (a.teacher.empty()) {
    step =
        train("teacher", *teacher, teacher->named_parameters(), *ctx.teacher_loader, a.epochs, ctx, plain_ce(*teacher));
  } else {
    nn::load_module(*teacher, a.teacher);
  }
  rows.push_back(measure("teacher", *teacher, ctx, step, a.teacher.empty() ? "SmallCNN" : "SmallCNN, " + a.teacher));

  // ---- 2. the student alone
  const std::string student_note = "TinyCNN width " + std::to_string(a.width);
  manual_seed(a.seed + 1);
  auto alone = std::make_shared<TinyCNN>(a.width);
  step =
      train("student", *alone, alone->named_parameters(), *ctx.alone_loader, ctx.alone_epochs, ctx, plain_ce(*alone));
  std::string alone_note = student_note + ", labels only";
  if (labeled_set != student_set) {
    alone_note += " (" + std::to_string(labeled_set->size()) + " labeled samples, " + std::to_string(ctx.alone_epochs) +
                  " epochs)";
  }
  rows.push_back(measure("student", *alone, ctx, step, alone_note));

  // ---- 3. the same student (same initial weights and batches) distilled from the teacher
  manual_seed(a.seed + 1);
  std::shared_ptr<nn::Module> student = std::make_shared<TinyCNN>(a.width);
  {
    nn::distill::Distiller distiller(teacher, student, {.temperature = a.temperature, .alpha = a.alpha});
    if (a.feature_weight > 0) {
      // The feature maps after the second pool: student (B, 2w, 7, 7) -> teacher (B, 64, 7, 7).
      distiller.match_features("features", "features", std::make_shared<nn::Conv2d>(2 * a.width, 64, 1),
                               a.feature_weight);
    }
    // A batch without any label (possible with --labels) learns from the soft targets alone.
    step = train("distilled", *student, distiller.named_parameters(), *ctx.student_loader, a.student_epochs, ctx,
                 [&](const data::Batch& b) {
                   nn::distill::DistillLosses l = distiller(b.input, b.target);
                   if (a.alpha == 1 || any(ne(b.target, full_like(b.target, -100))).item<bool>()) return l.total;
                   return l.soft * a.alpha;
                 });
  }  // the Distiller removes its hooks here; the adapter is training-only and not saved
  char note[160];
  std::snprintf(note, sizeof note, "%s, T %g, alpha %g%s (step includes the teacher's forward)", student_note.c_str(),
                a.temperature, a.alpha, a.feature_weight > 0 ? ", + features" : "");
  rows.push_back(measure("distilled", *student, ctx, step, note));

  // ---- 4, 5. pruning and quantization of the distilled student
  for (Stage& s : prune_stages(student, ctx)) rows.push_back(s);
  for (Stage& s : quantize_stages(student, ctx)) rows.push_back(s);

  print_table(rows);
  const double gap = rows[0].acc - rows[1].acc;
  const double recovered = rows[2].acc - rows[1].acc;
  std::printf(
      "\ndistillation recovered %.2f of %.2f points between the student alone and the teacher (%.0f%%; "
      "target >= 50%%); teacher %lld samples x %lld epochs, students %lld x %lld, seed %llu, %.0f s in all\n",
      100 * recovered, 100 * gap, gap > 0 ? 100 * recovered / gap : 0.0, (long long)train_set->size(),
      (long long)a.epochs, (long long)student_set->size(), (long long)a.student_epochs, (unsigned long long)a.seed,
      now_s() - start);

  // What each compression costs against the model it started from (the distilled student; the
  // targets' reference) and against the control (that model fine-tuned alike, uncompressed:
  // the fine-tune's extra epochs alone move accuracy), and what it buys in speed against the
  // dense F32 student timed interleaved with it.
  auto find = [&](const std::string& name) -> const Stage* {
    for (const Stage& s : rows) {
      if (s.name == name) return &s;
    }
    return nullptr;
  };
  const Stage &dense = rows[1], &distilled = rows[2];
  const Stage* control = find("dense-ft");
  auto versus = [&](const Stage& s, bool target) {
    const double d = 100 * (s.acc - distilled.acc);
    char text[160];
    int n = std::snprintf(text, sizeof text, "%.2f%% vs distilled %.2f%%: %+.2f points", 100 * s.acc,
                          100 * distilled.acc, d);
    if (target)
      n += std::snprintf(text + n, sizeof text - size_t(n), " (target >= -0.50: %s)", d >= -0.5 ? "met" : "missed");
    if (control && s.step_ms > 0) {
      std::snprintf(text + n, sizeof text - size_t(n), "; %+.2f vs dense-ft %.2f%%", 100 * (s.acc - control->acc),
                    100 * control->acc);
    }
    return std::string(text);
  };
  const std::string recipe =
      std::to_string(a.finetune_epochs) + "-epoch fine-tune on " + std::to_string(finetune_set->size()) + " samples";
  for (const char* name : {"sparse", "sparse-gradual"}) {
    if (const Stage* s = find(name)) {
      std::printf(
          "%s: %.1f%% of conv+linear weights zero after a %s: %s; inference %.2fx the dense student's "
          "(interleaved; dense kernels)\n",
          name, 100 * s->sparsity, recipe.c_str(), versus(*s, true).c_str(), s->speedup);
    }
  }
  if (const Stage* s = find("channels")) {
    std::printf(
        "channels: %g%% of conv channels removed, %s: %s; %lld -> %lld parameters, %lld -> %lld bytes; inference "
        "%.2fx the dense student's (interleaved), training step %.2fx the student row's\n",
        100 * a.channels, recipe.c_str(), versus(*s, false).c_str(), (long long)distilled.params, (long long)s->params,
        (long long)distilled.bytes, (long long)s->bytes, s->speedup, s->step_ms > 0 ? dense.step_ms / s->step_ms : 0.0);
  }
  for (const char* name : {"int8-ptq", "int8-qat"}) {
    if (const Stage* s = find(name)) {
      std::printf("%s: %s; %lld -> %lld bytes (%.1fx smaller); inference %.2fx the F32 student's (interleaved)\n", name,
                  versus(*s, true).c_str(), (long long)distilled.bytes, (long long)s->bytes,
                  double(distilled.bytes) / double(s->bytes), s->speedup);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    if (!std::filesystem::exists(a.data + "/train-images-idx3-ubyte.gz") &&
        !std::filesystem::exists(a.data + "/train-images-idx3-ubyte")) {
      std::fprintf(stderr, "compress: no Fashion-MNIST under %s (apt install dataset-fashion-mnist)\n", a.data.c_str());
      return 77;  // the smoke test's "skipped"
    }
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compress: error: %s\n", e.what());
    return 1;
  }
}
