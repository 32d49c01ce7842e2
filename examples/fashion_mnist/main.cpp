// examples/fashion_mnist/main.cpp: the main job. Trains the small CNN (default) or an MLP
// (784-256-128-10) on Fashion-MNIST with Adam/AdamW/SGD and a OneCycle or cosine schedule,
// shows a progress bar, evaluates on the test set each epoch, keeps the best model
// (<out>/best.safetensors), writes <out>/log.jsonl, <out>/curves.svg and TensorBoard event
// files (<out>/tensorboard: losses, accuracy, learning rate, loss scale, weight histograms),
// prints the environment's summary at start (engine/env.h), and checkpoints every
// epoch (<out>/checkpoint.safetensors, train/checkpoint.h) so --resume continues bit for bit.
// `fashion_mnist --help` lists the options. Not here: the engine (see README) or benchmarks
// against PyTorch (examples/bench/compare_pytorch.sh).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "engine/env.h"
#include "engine/profiler.h"
#include "examples/fashion_mnist/checkpoint.h"
#include "examples/fashion_mnist/evaluate.h"
#include "examples/fashion_mnist/progress.h"
#include "examples/fashion_mnist/report.h"
#include "nn/models/simple.h"
#include "nn/serialize_module.h"
#include "optim/optim.h"
#include "train/tensorboard.h"

using namespace brisk;
using namespace fashion_mnist;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

struct Args {
  std::string model = "cnn";
  int64_t epochs = 5;
  int64_t batch_size = 128;
  double lr = 0;  // 0: the optimizer's default below
  std::string optimizer = "adam";
  std::string schedule = "onecycle";
  int workers = 2;
  int threads = 0;  // 0: all cores
  std::string device = "cpu";
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "runs/fashion_mnist";
  bool resume = false;
  uint64_t seed = 0;
  int64_t limit = 0;
  bool augment = false;
  int64_t stop_after = 0;    // stop after this many epochs of this invocation (to test --resume)
  std::string amp = "none";  // none | bf16 | f16
  int64_t profile = 0;       // profile this many training steps (after 5 warm-up steps)
};

void usage() {
  std::printf(
      "usage: fashion_mnist [options]\n"
      "  --model cnn|mlp          SmallCNN (default) or MLP 784-256-128-10\n"
      "  --epochs N               epochs (default 5)\n"
      "  --batch-size N           batch size (default 128)\n"
      "  --lr X                   (max) learning rate (default 3e-3 for adam/adamw, 0.05 for sgd)\n"
      "  --optimizer adam|adamw|sgd   (default adam; sgd uses momentum 0.9, nesterov)\n"
      "  --schedule onecycle|cosine|none   per-batch schedule (default onecycle)\n"
      "  --workers N              data-loader worker threads (default 2)\n"
      "  --threads N              OpenMP compute threads (default: all cores)\n"
      "  --device cpu|cuda        (default cpu)\n"
      "  --data DIR               Fashion-MNIST IDX files (default %s)\n"
      "  --out DIR                outputs (default runs/fashion_mnist)\n"
      "  --resume                 continue from <out>/checkpoint.safetensors\n"
      "  --seed N                 seed of init, shuffling, augmentation, dropout (default 0)\n"
      "  --limit N                train on the first N samples only (quick tests)\n"
      "  --augment                random crop (pad 2) + horizontal flip\n"
      "  --stop-after N           stop after N epochs of this run, as if interrupted (tests --resume)\n"
      "  --amp none|bf16|f16      mixed precision: autocast to BF16 (CPU or CUDA) or F16 with a\n"
      "                           GradScaler (CUDA); weights and optimizer state stay F32\n"
      "  --profile N              profile N training steps of the first epoch (after 5 warm-up\n"
      "                           steps): prints the op table, writes <out>/trace.json (Perfetto)\n",
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
    } else if (k == "--model") {
      a.model = value();
    } else if (k == "--epochs") {
      a.epochs = std::stoll(value());
    } else if (k == "--batch-size") {
      a.batch_size = std::stoll(value());
    } else if (k == "--lr") {
      a.lr = std::stod(value());
    } else if (k == "--optimizer") {
      a.optimizer = value();
    } else if (k == "--schedule") {
      a.schedule = value();
    } else if (k == "--workers") {
      a.workers = std::stoi(value());
    } else if (k == "--threads") {
      a.threads = std::stoi(value());
    } else if (k == "--device") {
      a.device = value();
    } else if (k == "--data") {
      a.data = value();
    } else if (k == "--out") {
      a.out = value();
    } else if (k == "--resume") {
      a.resume = true;
    } else if (k == "--seed") {
      a.seed = std::stoull(value());
    } else if (k == "--limit") {
      a.limit = std::stoll(value());
    } else if (k == "--augment") {
      a.augment = true;
    } else if (k == "--stop-after") {
      a.stop_after = std::stoll(value());
    } else if (k == "--amp") {
      a.amp = value();
    } else if (k == "--profile") {
      a.profile = std::stoll(value());
    } else {
      throw std::runtime_error("unknown option " + k + " (see --help)");
    }
  }
  auto one_of = [](const std::string& v, std::initializer_list<const char*> ok, const char* what) {
    for (const char* o : ok)
      if (v == o) return;
    throw std::runtime_error(std::string("--") + what + ": unknown value '" + v + "'");
  };
  one_of(a.model, {"cnn", "mlp"}, "model");
  one_of(a.optimizer, {"adam", "adamw", "sgd"}, "optimizer");
  one_of(a.schedule, {"onecycle", "cosine", "none"}, "schedule");
  one_of(a.device, {"cpu", "cuda"}, "device");
  one_of(a.amp, {"none", "bf16", "f16"}, "amp");
  if (a.amp == "f16" && a.device != "cuda") {
    throw std::runtime_error("--amp f16 needs --device cuda (on the CPU use --amp bf16, which needs no scaler)");
  }
  if (a.epochs < 1 || a.batch_size < 1 || a.workers < 0 || a.threads < 0 || a.limit < 0 || a.profile < 0) {
    throw std::runtime_error(
        "--epochs and --batch-size must be positive; --workers, --threads, --limit, --profile >= 0");
  }
  if (a.lr == 0) a.lr = a.optimizer == "sgd" ? 0.05 : 3e-3;
  return a;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Args& a, const nn::NamedTensors& params) {
  if (a.optimizer == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = a.lr});
  if (a.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = a.lr});
  return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = a.lr, .momentum = 0.9, .nesterov = true});
}

// Stepped once per batch; nullptr for --schedule none.
std::unique_ptr<optim::LRScheduler> make_schedule(const Args& a, optim::Optimizer& opt, int64_t steps_per_epoch) {
  if (a.schedule == "onecycle") {
    optim::OneCycleLROptions o;
    o.max_lr = {a.lr};
    o.epochs = a.epochs;
    o.steps_per_epoch = steps_per_epoch;
    return std::make_unique<optim::OneCycleLR>(opt, o);
  }
  if (a.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, a.epochs * steps_per_epoch);
  return nullptr;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int run(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const Device device = a.device == "cuda" ? Device::cuda() : Device::cpu();
  std::filesystem::create_directories(a.out);
  const std::string ckpt_path = a.out + "/checkpoint.safetensors";
  const std::string best_path = a.out + "/best.safetensors";

  // ---- data: U8 images in memory; the loader's fused transform makes normalized F32 batches
  auto full_train = std::make_shared<data::FashionMNIST>(a.data, /*train=*/true);
  auto test_set = std::make_shared<data::FashionMNIST>(a.data, /*train=*/false);
  if (device.is_cuda()) {
    Backend* cuda = find_backend(DeviceType::CUDA);
    if (!cuda || cuda->device_count() == 0) {
      throw std::runtime_error("--device cuda: no CUDA device (or brisk was built without BRISK_CUDA)");
    }
  }
  data::DatasetPtr train_set = full_train;
  if (a.limit > 0 && a.limit < full_train->size()) {
    std::vector<int64_t> first(static_cast<size_t>(a.limit));
    for (int64_t i = 0; i < a.limit; ++i) first[size_t(i)] = i;
    train_set = std::make_shared<data::Subset>(full_train, first);
  }
  std::vector<data::Transform> steps;
  if (a.augment) {
    steps.push_back(data::random_crop(28, 28, 2));
    steps.push_back(data::random_horizontal_flip());
  }
  steps.push_back(data::to_tensor());
  steps.push_back(data::normalize({kMean}, {kStd}));

  data::LoaderOptions train_opts;
  train_opts.batch_size = a.batch_size;
  train_opts.shuffle = true;
  train_opts.seed = a.seed;
  train_opts.num_workers = a.workers;
  train_opts.persistent_workers = true;
  train_opts.transform = data::Compose(steps);
  train_opts.pin_memory = device.is_cuda();
  if (device.is_cuda()) train_opts.device = device;
  data::DataLoader train_loader(train_set, train_opts);

  data::LoaderOptions test_opts = train_opts;
  test_opts.batch_size = a.batch_size;  // larger evaluation batches would set the peak memory
  test_opts.shuffle = false;
  test_opts.transform = data::Compose({data::to_tensor(), data::normalize({kMean}, {kStd})});
  data::DataLoader test_loader(test_set, test_opts);

  // ---- model, optimizer, schedule
  manual_seed(a.seed);
  std::shared_ptr<nn::Module> model;
  if (a.model == "cnn") {
    model = std::make_shared<nn::models::SmallCNN>();
  } else {
    model = std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 256, 128, 10});
  }
  model->to(device);
  auto opt = make_optimizer(a, model->named_parameters());
  const int64_t steps_per_epoch = train_loader.num_batches();
  auto sched = make_schedule(a, *opt, steps_per_epoch);
  // Mixed precision: forward and loss under autocast; F16 gradients need the scaler, BF16's
  // range is F32's, so its scaler stays disabled (a pass-through).
  const bool amp = a.amp != "none";
  const DType amp_dtype = a.amp == "f16" ? DType::F16 : DType::BF16;
  optim::GradScaler scaler({.enabled = a.amp == "f16"});

  const std::map<std::string, std::string> config = {{"model", a.model},
                                                     {"optimizer", a.optimizer},
                                                     {"schedule", a.schedule},
                                                     {"epochs", std::to_string(a.epochs)},
                                                     {"batch_size", std::to_string(a.batch_size)},
                                                     {"lr", short_number(a.lr)},
                                                     {"seed", std::to_string(a.seed)},
                                                     {"limit", std::to_string(a.limit)},
                                                     {"augment", a.augment ? "1" : "0"},
                                                     {"amp", a.amp}};
  TrainState st;
  st.config = config;
  if (a.resume) {
    if (!std::filesystem::exists(ckpt_path)) throw std::runtime_error("--resume: no " + ckpt_path);
    st = load_checkpoint(ckpt_path, *model, *opt, sched.get(), scaler, train_loader, config);
    std::fprintf(stderr, "resumed from %s after epoch %lld (best test accuracy %.2f%%)\n", ckpt_path.c_str(),
                 (long long)st.epochs_done, 100 * st.best_acc);
  }

  std::fprintf(stderr, "%s\n",
               env_report(EnvOptions{.check_dtype = std::nullopt, .libraries = false}).summary().c_str());
  // TensorBoard: `tensorboard --logdir <out>/tensorboard`. A resumed run adds a file beside
  // the first; TensorBoard merges them by step.
  training::SummaryWriter tb(a.out + "/tensorboard");
  {
    std::string text = "| option | value |\n| --- | --- |\n";
    for (const auto& [k, v] : config) text += "| " + k + " | " + v + " |\n";
    tb.add_text("config", text, st.epochs_done);
  }

  std::fprintf(stderr,
               "fashion_mnist: %s (%lld parameters), %s lr %g, %s schedule, batch %lld, %lld train / %lld test "
               "samples, %d compute threads, %d workers, %s, amp %s\n",
               a.model.c_str(), (long long)model->num_parameters(), a.optimizer.c_str(), a.lr, a.schedule.c_str(),
               (long long)a.batch_size, (long long)train_set->size(), (long long)test_set->size(),
               omp_get_max_threads(), a.workers, device.str().c_str(), a.amp.c_str());

  const double run_start = now_s();
  int64_t epochs_this_run = 0;
  while (st.epochs_done < a.epochs) {
    const int64_t epoch = st.epochs_done + 1;
    char label[32];
    std::snprintf(label, sizeof label, "epoch %lld/%lld", (long long)epoch, (long long)a.epochs);
    ProgressBar bar(label, steps_per_epoch);
    const double t0 = now_s();
    Tensor loss_sum = zeros({}, DType::F32, device);  // summed on the device: no sync per batch
    int64_t done = 0, samples = 0;
    model->train();
    const int64_t skipped_before = scaler.skipped_steps();
    // --profile: steps 6 .. 5 + N of this run's first epoch (engine/profiler.h).
    std::optional<profiler::Profiler> prof;
    const bool profile_epoch = a.profile > 0 && epochs_this_run == 0;
    auto finish_profile = [&](int64_t steps) {
      if (device.is_cuda()) backend(device).synchronize(device.index);
      profiler::Profile p = prof->stop();
      prof.reset();
      p.export_chrome_trace(a.out + "/trace.json");
      std::fprintf(stderr, "\nprofile of %lld training steps (open %s/trace.json in Perfetto):\n%s", (long long)steps,
                   a.out.c_str(), p.table(20).c_str());
    };
    while (true) {
      if (profile_epoch && done == 5) prof.emplace();
      std::optional<data::Batch> batch;
      {
        profiler::RecordFunction r("data");
        batch = train_loader.next();
      }
      if (!batch) break;
      Tensor loss;
      {
        profiler::RecordFunction r("forward");
        AutocastGuard autocast(device, amp_dtype, amp);
        loss = cross_entropy((*model)(batch->input), batch->target);
      }
      {
        profiler::RecordFunction r("backward");
        opt->zero_grad();
        scaler.scale(loss).backward();
      }
      {
        profiler::RecordFunction r("optimizer");
        scaler.step(*opt);
        scaler.update();
        if (sched) sched->step();
      }
      if (done % 50 == 0) tb.add_scalar("train/lr", opt->lr(0), (epoch - 1) * steps_per_epoch + done);
      {
        NoGradGuard no_grad;
        loss_sum.add_(loss.detach(), double(batch->target.size(0)));
      }
      ++done;
      samples += batch->target.size(0);
      if (bar.due(done)) bar.update(done, samples, loss_sum.item<double>() / double(samples));
      if (prof && done == 5 + a.profile) finish_profile(a.profile);
    }
    if (prof) finish_profile(done - 5);  // the epoch had fewer steps
    const double train_seconds = now_s() - t0;
    EvalResult ev;
    {
      AutocastGuard autocast(device, amp_dtype, amp);
      ev = evaluate(*model, test_loader);
    }

    EpochRecord r;
    r.epoch = epoch;
    r.train_loss = loss_sum.item<double>() / double(samples);
    r.test_loss = ev.loss;
    r.test_acc = ev.acc;
    r.lr = opt->lr(0);
    r.seconds = train_seconds;
    r.samples_per_s = double(samples) / train_seconds;
    r.loss_scale = scaler.get_scale();
    r.skipped_steps = scaler.skipped_steps() - skipped_before;
    st.history.push_back(r);
    tb.add_scalar("train/loss", r.train_loss, epoch);
    tb.add_scalar("test/loss", r.test_loss, epoch);
    tb.add_scalar("test/accuracy", r.test_acc, epoch);
    tb.add_scalar("train/samples_per_s", r.samples_per_s, epoch);
    if (scaler.is_enabled()) tb.add_scalar("train/loss_scale", r.loss_scale, epoch);
    for (const auto& [name, p] : model->named_parameters()) tb.add_histogram("weights/" + name, p, epoch);
    const bool best = ev.acc > st.best_acc;
    std::fprintf(stderr,
                 "epoch %lld: train loss %.4f | test loss %.4f, accuracy %.2f%%%s | lr %.3g | %.1f s, %.0f samples/s\n",
                 (long long)epoch, r.train_loss, r.test_loss, 100 * r.test_acc, best ? " (best)" : "", r.lr, r.seconds,
                 r.samples_per_s);
    if (best) {
      st.best_acc = ev.acc;
      nn::save_module(*model, best_path,
                      {{"model", a.model}, {"epoch", std::to_string(epoch)}, {"test_acc", full_precision(ev.acc)}});
    }

    st.epochs_done = epoch;
    save_checkpoint(ckpt_path, *model, *opt, sched.get(), scaler, train_loader, st);
    write_file_atomic(a.out + "/log.jsonl", log_jsonl(st.history));
    write_file_atomic(a.out + "/curves.svg", curves_svg(st.history, "brisk Fashion-MNIST " + a.model));
    ++epochs_this_run;
    if (a.stop_after > 0 && epochs_this_run >= a.stop_after && st.epochs_done < a.epochs) {
      std::fprintf(stderr, "stopping after %lld epoch(s) as asked; continue with --resume\n",
                   (long long)epochs_this_run);
      return 0;
    }
  }

  double train_total = 0;
  for (const EpochRecord& r : st.history) train_total += r.seconds;
  const EpochRecord& last = st.history.back();
  std::printf(
      "fashion_mnist %s: %lld epochs, final test accuracy %.2f%% (best %.2f%%), test loss %.4f, training %.1f s "
      "(%.1f s/epoch), this run %.1f s wall; outputs in %s\n",
      a.model.c_str(), (long long)st.epochs_done, 100 * last.test_acc, 100 * st.best_acc, last.test_loss, train_total,
      train_total / double(st.history.size()), now_s() - run_start, a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
