// examples/compress/main.cpp: model compression on Fashion-MNIST, one stage after another, with
// one table row per stage: test accuracy, parameters, bytes of its safetensors file, inference
// ms per batch of 128 and training ms per step. Stages so far: a teacher (the main job's
// SmallCNN), a small student trained alone, and the same student (same initial weights, same
// batch order) distilled from the teacher (nn/distill.h: T^2-scaled soft targets mixed with the
// labels, optionally feature matching through a 1x1 conv adapter). Then the gap the distilled
// student recovers: (distilled - alone) / (teacher - alone).
//   compress [--epochs N] [--quick] [--student-epochs N] [--student-limit N] [--temperature T]
//            [--alpha A] [--feature-weight W] [--teacher FILE]   (--help lists all)
// Not here yet: the pruning and quantization stages (prune_stages / quantize_stages below).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "brisk.h"
#include "examples/fashion_mnist/evaluate.h"
#include "examples/fashion_mnist/progress.h"
#include "nn/distill.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

struct Args {
  int64_t epochs = 4;          // the teacher's
  bool quick = false;          // 1 epoch on 10000 samples: a smoke run
  int64_t limit = 0;           // train on the first N samples (0: all 60000)
  int64_t student_epochs = 0;  // 0: as --epochs
  int64_t student_limit = 0;   // the students' transfer set: the first N samples (0: as --limit)
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
      "                       <out>/teacher.safetensors) instead of training it\n",
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
  if (a.epochs < 1 || a.student_epochs < 1 || a.limit < 0 || a.student_limit < 0 || a.width < 1 || a.threads < 0) {
    throw std::runtime_error("--epochs, --student-epochs and --width must be positive; --limit, --threads >= 0");
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
};

// What every stage reads: the options, the loaders, a fixed test batch for timings.
struct Context {
  Args args;
  data::DataLoader* teacher_loader = nullptr;
  data::DataLoader* student_loader = nullptr;  // the teacher's unless --student-limit
  data::DataLoader* test_loader = nullptr;
  Tensor timing_batch;  // (128, 1, 28, 28), normalized
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

// Test accuracy, parameters, file size and inference time of a model; step_ms from training.
Stage measure(const std::string& name, nn::Module& model, Context& ctx, double step_ms, std::string note = "") {
  Stage s;
  s.name = name;
  s.acc = fashion_mnist::evaluate(model, *ctx.test_loader).acc;
  s.params = model.num_parameters();
  const std::string path = ctx.args.out + "/" + name + ".safetensors";
  nn::save_module(model, path, {{"stage", name}});
  s.bytes = int64_t(std::filesystem::file_size(path));
  s.infer_ms = inference_ms(model, ctx.timing_batch);
  s.step_ms = step_ms;
  s.note = std::move(note);
  return s;
}

using LossFn = std::function<Tensor(const data::Batch&)>;

// Adam + OneCycle (per batch) over `params` for `epochs`, starting the loader at epoch 0 so
// every stage sees the same batches; prints loss and test accuracy per epoch. Returns the mean
// wall ms per training step (forward, loss, backward, optimizer step).
double train(const std::string& label, nn::Module& model, const nn::NamedTensors& params, data::DataLoader& loader,
             int64_t epochs, Context& ctx, const LossFn& loss_of) {
  const Args& a = ctx.args;
  optim::Adam opt(params, {.lr = a.lr});
  optim::OneCycleLROptions o;
  o.max_lr = {a.lr};
  o.epochs = epochs;
  o.steps_per_epoch = loader.num_batches();
  optim::OneCycleLR sched(opt, o);
  loader.set_epoch(0);
  model.train();
  double step_seconds = 0;
  int64_t steps = 0;
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    fashion_mnist::ProgressBar bar(label + " " + std::to_string(epoch) + "/" + std::to_string(epochs),
                                   loader.num_batches());
    double loss_sum = 0;
    int64_t done = 0, samples = 0;
    while (auto batch = loader.next()) {
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
      bar.update(++done, samples, loss_sum / double(samples));
    }
    const double acc = fashion_mnist::evaluate(model, *ctx.test_loader).acc;
    std::fprintf(stderr, "%s epoch %lld: train loss %.4f, test accuracy %.2f%%\n", label.c_str(), (long long)epoch,
                 loss_sum / double(samples), 100 * acc);
  }
  return 1e3 * step_seconds / double(steps);
}

// ---- The stages to come (issue 15). The lead fills these in; each returns its table rows and
// may replace `student` by its compressed form for the stages after it.

// Pruning (nn/prune.h): 90% L1 unstructured on the distilled student + fine-tuning (target: at
// most 0.5 points lost), then 50% of the conv channels removed physically (a smaller dense
// model, faster inference and training step).
std::vector<Stage> prune_stages(std::shared_ptr<nn::Module>& student, Context& ctx) {
  (void)student;
  (void)ctx;
  return {};
}

// Quantization (nn/quantize.h): static int8 PTQ with calibration (conv+relu folding) and QAT
// with fake quantization, then convert (target: int8 at most 0.5 points below F32, about 2x
// faster inference).
std::vector<Stage> quantize_stages(std::shared_ptr<nn::Module>& student, Context& ctx) {
  (void)student;
  (void)ctx;
  return {};
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
  lo.shuffle = false;
  data::DataLoader test_loader(test_set, lo);

  Context ctx;
  ctx.args = a;
  ctx.teacher_loader = &train_loader;
  ctx.student_loader = student_loader ? student_loader.get() : &train_loader;
  ctx.test_loader = &test_loader;
  ctx.timing_batch = test_loader.next()->input;
  test_loader.set_epoch(0);
  std::fprintf(stderr,
               "compress: teacher %lld train samples x %lld epochs, students %lld x %lld; %lld test samples; %d "
               "threads, seed %llu\n",
               (long long)train_set->size(), (long long)a.epochs, (long long)student_set->size(),
               (long long)a.student_epochs, (long long)test_set->size(), omp_get_max_threads(),
               (unsigned long long)a.seed);

  std::vector<Stage> rows;
  auto plain_ce = [](nn::Module& m) {
    return [&m](const data::Batch& b) { return cross_entropy(m(b.input), b.target); };
  };

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
      train("student", *alone, alone->named_parameters(), *ctx.student_loader, a.student_epochs, ctx, plain_ce(*alone));
  rows.push_back(measure("student", *alone, ctx, step, student_note + ", labels only"));

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
    step = train("distilled", *student, distiller.named_parameters(), *ctx.student_loader, a.student_epochs, ctx,
                 [&](const data::Batch& b) { return distiller(b.input, b.target).total; });
  }  // the Distiller removes its hooks here; the adapter is training-only and not saved
  char note[160];
  std::snprintf(note, sizeof note, "%s, T %g, alpha %g%s (step includes the teacher's forward)", student_note.c_str(),
                a.temperature, a.alpha, a.feature_weight > 0 ? ", + features" : "");
  rows.push_back(measure("distilled", *student, ctx, step, note));

  // ---- 4, 5. pruning and quantization of the distilled student (to come)
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compress: error: %s\n", e.what());
    return 1;
  }
}
