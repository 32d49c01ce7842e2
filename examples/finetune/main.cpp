// examples/finetune/main.cpp: transfer learning on Fashion-MNIST. The main job's CNN
// (nn::models::SmallCNN) is pretrained on classes 0-4 (T-shirt, trouser, pullover, dress, coat)
// and saved (nn::save_module); then, for small labelled budgets of classes 5-9 (sandal, shirt,
// sneaker, bag, ankle boot), three runs over the same images, batches and number of epochs:
//   scratch        a fresh SmallCNN, every parameter trained at the head's learning rate
//   linear probe   the pretrained model loaded (nn::load_module), its backbone frozen
//                  (requires_grad_(false)), its head replaced (replace_module): 645 parameters
//   fine-tune      the same start, two parameter groups (head lr, backbone lr / 10), the
//                  backbone frozen for the first k epochs, then unfrozen
// The backbone is everything up to the 128-wide hidden layer (features.*, classifier.0); the
// head is classifier.3. It prints a table of test accuracy on classes 5-9 per budget, method
// and seed. Not here: data augmentation, BatchNorm backbones (they would also need eval() while
// frozen, to keep their running statistics), learning-rate schedules.
// Exit status: 77 when the dataset is missing, 1 when a run ends with a non-finite loss.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "nn/models/simple.h"
#include "nn/serialize_module.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics
constexpr int64_t kClasses = 5;                  // per task: 0-4 to pretrain, 5-9 to transfer to
constexpr const char* kHead = "classifier.3";

struct Args {
  int64_t pretrain_epochs = 2, pretrain_size = 0;  // 0: all ~30000 images of classes 0-4
  std::vector<int64_t> budgets = {10, 50, 200};    // labelled images per class of 5-9
  int64_t epochs = 10, unfreeze_after = 3, batch_size = 32, test_size = 10000;
  double lr = 1e-3, head_lr = 1e-2, backbone_factor = 0.1;
  std::vector<uint64_t> seeds = {0, 1};
  uint64_t pretrain_seed = 0;
  int threads = 0;
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "runs/finetune";
  std::string pretrained;  // an earlier run's pretrained.safetensors: skip pretraining
};

struct Split {
  Tensor x, y;  // (N, 1, 28, 28) F32 normalized; (N) I64 in 0..4
};

// The images of classes [first, first + 5), labels shifted to 0..4; `per_class` > 0 keeps that
// many of each class, drawn at random with `seed`; `limit` > 0 keeps the first `limit` images.
Split select(const data::FashionMNIST& ds, int64_t first, int64_t per_class, uint64_t seed, int64_t limit) {
  const std::vector<int64_t> labels = ds.labels().to_vector<int64_t>();
  std::vector<std::vector<double>> by_class(kClasses);
  const int64_t n = limit > 0 ? std::min<int64_t>(limit, int64_t(labels.size())) : int64_t(labels.size());
  for (int64_t i = 0; i < n; ++i)
    if (labels[size_t(i)] >= first && labels[size_t(i)] < first + kClasses)
      by_class[size_t(labels[size_t(i)] - first)].push_back(double(i));
  std::vector<double> keep;
  std::mt19937_64 rng(seed);
  for (auto& idx : by_class) {
    if (per_class > 0) {
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(size_t(std::min<int64_t>(per_class, int64_t(idx.size()))));
      std::sort(idx.begin(), idx.end());
    }
    keep.insert(keep.end(), idx.begin(), idx.end());
  }
  const Tensor index = from_vector(keep, {int64_t(keep.size())}, DType::I64);
  Split s;
  s.x = (index_select(ds.images(), 0, index).to(DType::F32) * (1.0 / 255) - kMean) * (1.0 / kStd);
  s.y = index_select(ds.labels(), 0, index) - first;
  return s;
}

double accuracy(nn::Module& model, const Split& test) {
  NoGradGuard ng;
  model.eval();
  int64_t ok = 0;
  const int64_t n = test.x.size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    const int64_t b = std::min<int64_t>(1000, n - i);
    const Tensor pred = argmax(model(test.x.narrow(0, i, b)), 1);
    ok += sum(eq(pred, test.y.narrow(0, i, b)).to(DType::I64)).item<int64_t>();
  }
  return double(ok) / double(n);
}

// `epochs` passes over `train` in batches (the last, smaller one kept), order from `seed`;
// `on_epoch(e)` runs before epoch e. Returns the last epoch's mean loss.
double train_epochs(nn::Module& model, optim::Optimizer& opt, const Split& train, int64_t epochs, int64_t batch,
                    uint64_t seed, const std::function<void(int64_t)>& on_epoch = {}) {
  std::mt19937_64 rng(seed);
  std::vector<double> order(size_t(train.x.size(0)));
  double mean_loss = NAN;
  for (int64_t e = 0; e < epochs; ++e) {
    if (on_epoch) on_epoch(e);
    model.train();
    std::iota(order.begin(), order.end(), 0.0);
    std::shuffle(order.begin(), order.end(), rng);
    const Tensor perm = from_vector(order, {int64_t(order.size())}, DType::I64);
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t i = 0; i < train.x.size(0); i += batch) {
      const Tensor idx = perm.narrow(0, i, std::min<int64_t>(batch, train.x.size(0) - i));
      const Tensor loss =
          nn::functional::cross_entropy(model(index_select(train.x, 0, idx)), index_select(train.y, 0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    mean_loss = loss_sum / double(batches);
  }
  return mean_loss;
}

// Pretrains on classes 0-4 and saves the model; returns its test accuracy on classes 0-4.
double pretrain(const Args& a, const data::FashionMNIST& train_ds, const data::FashionMNIST& test_ds,
                const std::string& path) {
  const Split train = select(train_ds, 0, 0, 0, a.pretrain_size), test = select(test_ds, 0, 0, 0, a.test_size);
  manual_seed(a.pretrain_seed);
  nn::models::SmallCNN model(kClasses);
  optim::Adam opt(model.named_parameters(), {.lr = a.lr});
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = train_epochs(model, opt, train, a.pretrain_epochs, 64, a.pretrain_seed);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double acc = accuracy(model, test);
  nn::save_module(model, path, {{"task", "Fashion-MNIST classes 0-4"}});
  std::printf(
      "pretrained on %lld images of classes 0-4, %lld epochs, Adam lr %g, batch 64, seed %llu: loss %.4f, "
      "test accuracy (classes 0-4) %.4f, %.1f s -> %s\n\n",
      (long long)train.x.size(0), (long long)a.pretrain_epochs, a.lr, (unsigned long long)a.pretrain_seed, loss, acc,
      seconds, path.c_str());
  if (!std::isfinite(loss)) throw Error("finetune: pretraining ended with a non-finite loss");
  return acc;
}

enum class Method { Scratch, Probe, FineTune };
const char* kMethodNames[] = {"scratch", "linear probe", "fine-tune"};

struct Result {
  double acc = NAN, loss = NAN, seconds = 0;
  int64_t trainable_start = 0, trainable_end = 0;
};

// The parameters of the model's backbone (everything but the head) and of its head.
void split_params(const nn::Module& model, nn::NamedTensors& backbone, nn::NamedTensors& head) {
  const std::string prefix = std::string(kHead) + ".";
  for (const auto& [name, p] : model.named_parameters())
    (name.rfind(prefix, 0) == 0 ? head : backbone).emplace_back(name, p);
}

Result run(Method method, const Args& a, const std::string& pretrained, const Split& train, const Split& test,
           uint64_t seed) {
  manual_seed(seed);  // the scratch model's weights; the new head's in the other two
  nn::models::SmallCNN model(kClasses);
  std::unique_ptr<optim::Adam> opt;
  std::function<void(int64_t)> on_epoch;
  if (method == Method::Scratch) {
    opt = std::make_unique<optim::Adam>(model.named_parameters(), optim::AdamOptions{.lr = a.lr});
  } else {
    nn::load_module(model, pretrained);  // strict: every key and shape must match
    manual_seed(seed + 1000);
    model.replace_module(kHead, std::make_shared<nn::Linear>(128, kClasses));
    model.requires_grad_(false);
    model.submodule(kHead).requires_grad_(true);
    nn::NamedTensors backbone, head;
    split_params(model, backbone, head);
    opt = std::make_unique<optim::Adam>(head, optim::AdamOptions{.lr = a.head_lr});
    if (method == Method::FineTune) {
      // The backbone's group steps nothing while it is frozen (no gradients), then at lr / 10.
      opt->add_param_group(backbone, {.lr = a.head_lr * a.backbone_factor});
      on_epoch = [&model, &a](int64_t e) {
        if (e == a.unfreeze_after) model.requires_grad_(true);
      };
    }
  }
  Result r;
  r.trainable_start = model.num_parameters(true);
  const auto t0 = std::chrono::steady_clock::now();
  r.loss = train_epochs(model, *opt, train, a.epochs, a.batch_size, seed, on_epoch);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.trainable_end = model.num_parameters(true);
  r.acc = accuracy(model, test);
  return r;
}

template <class T>
std::vector<T> parse_list(const std::string& v) {
  std::vector<T> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(T(std::stoull(item)));
  if (out.empty()) throw std::invalid_argument(v);
  return out;
}

void usage() {
  std::printf(
      "usage: finetune [options]   (--key value)\n"
      "  --pretrain-epochs N   epochs on classes 0-4 (default 2)\n"
      "  --pretrain-size N     pretrain on classes 0-4 among the first N training images (default: all)\n"
      "  --pretrained FILE     a pretrained.safetensors from an earlier run: skip pretraining\n"
      "  --budgets A,B,...     labelled images per class of 5-9 (default 10,50,200)\n"
      "  --epochs N            epochs per transfer run (default 10)\n"
      "  --unfreeze-after K    fine-tune: the backbone is frozen for the first K epochs (default 3)\n"
      "  --batch-size N        transfer runs' batch (default 32)\n"
      "  --lr X                Adam learning rate: pretraining and scratch (default 1e-3)\n"
      "  --head-lr X           Adam learning rate of the new head: probe and fine-tune (default 1e-2)\n"
      "  --backbone-factor X   fine-tune: backbone lr = X * head lr (default 0.1)\n"
      "  --seeds A,B,...       labelled subset, batch order and initial weights (default 0,1)\n"
      "  --test-size N         evaluate on the classes' images among the first N test images (default 10000)\n"
      "  --out DIR             where pretrained.safetensors goes (default runs/finetune)\n"
      "  --threads N           OpenMP threads (default: all cores)\n"
      "  --data DIR            Fashion-MNIST root (default %s)\n",
      data::FashionMNIST::kDefaultRoot);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") return usage(), 0;
    if (i + 1 >= argc) return std::fprintf(stderr, "finetune: %s needs a value (--help)\n", key.c_str()), 2;
    const std::string v = argv[++i];
    try {
      if (key == "--pretrain-epochs")
        a.pretrain_epochs = std::stoll(v);
      else if (key == "--pretrain-size")
        a.pretrain_size = std::stoll(v);
      else if (key == "--pretrained")
        a.pretrained = v;
      else if (key == "--budgets")
        a.budgets = parse_list<int64_t>(v);
      else if (key == "--epochs")
        a.epochs = std::stoll(v);
      else if (key == "--unfreeze-after")
        a.unfreeze_after = std::stoll(v);
      else if (key == "--batch-size")
        a.batch_size = std::stoll(v);
      else if (key == "--lr")
        a.lr = std::stod(v);
      else if (key == "--head-lr")
        a.head_lr = std::stod(v);
      else if (key == "--backbone-factor")
        a.backbone_factor = std::stod(v);
      else if (key == "--seeds")
        a.seeds = parse_list<uint64_t>(v);
      else if (key == "--test-size")
        a.test_size = std::stoll(v);
      else if (key == "--out")
        a.out = v;
      else if (key == "--threads")
        a.threads = std::stoi(v);
      else if (key == "--data")
        a.data = v;
      else
        return std::fprintf(stderr, "finetune: unknown option %s (--help)\n", key.c_str()), 2;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "finetune: bad value '%s' for %s\n", v.c_str(), key.c_str()), 2;
    }
  }
  const bool budgets_ok = std::all_of(a.budgets.begin(), a.budgets.end(), [](int64_t b) { return b >= 1; });
  if (a.pretrain_epochs < 1 || a.pretrain_size < 0 || !budgets_ok || a.epochs < 1 || a.unfreeze_after < 0 ||
      a.batch_size < 1 || a.test_size < 1 || !(a.lr > 0) || !(a.head_lr > 0) || !(a.backbone_factor >= 0))
    return std::fprintf(stderr,
                        "finetune: need pretrain-epochs, budgets, epochs, batch-size, test-size >= 1, "
                        "unfreeze-after >= 0, lr, head-lr > 0, backbone-factor >= 0\n"),
           2;
  if (!std::filesystem::exists(a.data + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(a.data + "/train-images-idx3-ubyte"))
    return std::fprintf(stderr, "finetune: no Fashion-MNIST under %s (apt install dataset-fashion-mnist)\n",
                        a.data.c_str()),
           77;
  if (a.threads > 0) omp_set_num_threads(a.threads);

  const auto start = std::chrono::steady_clock::now();
  try {
    const data::FashionMNIST train_ds(a.data, true), test_ds(a.data, false);
    std::string path = a.pretrained;
    if (path.empty()) {
      std::filesystem::create_directories(a.out);
      path = a.out + "/pretrained.safetensors";
      pretrain(a, train_ds, test_ds, path);
    } else {
      std::printf("pretrained model: %s\n\n", path.c_str());
    }
    const Split test = select(test_ds, kClasses, 0, 0, a.test_size);
    std::printf(
        "transfer to classes 5-9: %lld epochs per run, batch %lld, Adam: scratch lr %g, new head lr %g, "
        "fine-tune backbone lr %g, unfrozen after epoch %lld; %d threads; test on %lld images\n",
        (long long)a.epochs, (long long)a.batch_size, a.lr, a.head_lr, a.head_lr * a.backbone_factor,
        (long long)a.unfreeze_after, omp_get_max_threads(), (long long)test.x.size(0));
    std::string seeds;
    for (uint64_t s : a.seeds) seeds += (seeds.empty() ? "" : ",") + std::to_string(s);
    std::printf(
        "seeds %s: each picks the labelled images, the batch order and the new weights, the same for "
        "all three methods\n\n",
        seeds.c_str());
    std::printf(
        "| labelled / class | method       | test acc (mean) | per seed          | trainable params  | "
        "time s |\n");
    std::printf(
        "|------------------|--------------|-----------------|-------------------|-------------------|"
        "--------|\n");
    int status = 0;
    for (int64_t budget : a.budgets) {
      for (Method m : {Method::Scratch, Method::Probe, Method::FineTune}) {
        double acc_sum = 0, seconds = 0;
        std::string per_seed;
        Result r;
        for (uint64_t seed : a.seeds) {
          const Split train = select(train_ds, kClasses, budget, seed, 0);
          r = run(m, a, path, train, test, seed);
          acc_sum += r.acc;
          seconds += r.seconds;
          char buf[16];
          std::snprintf(buf, sizeof buf, "%s%.4f", per_seed.empty() ? "" : " ", r.acc);
          per_seed += buf;
          if (!std::isfinite(r.loss)) {
            std::fprintf(stderr, "finetune: %s at %lld per class, seed %llu: non-finite loss\n", kMethodNames[int(m)],
                         (long long)budget, (unsigned long long)seed);
            status = 1;
          }
        }
        char trainable[32];
        if (r.trainable_start == r.trainable_end)
          std::snprintf(trainable, sizeof trainable, "%lld", (long long)r.trainable_end);
        else
          std::snprintf(trainable, sizeof trainable, "%lld -> %lld", (long long)r.trainable_start,
                        (long long)r.trainable_end);
        std::printf("| %16lld | %-12s | %15.4f | %-17s | %17s | %6.1f |\n", (long long)budget, kMethodNames[int(m)],
                    acc_sum / double(a.seeds.size()), per_seed.c_str(), trainable, seconds);
        std::fflush(stdout);
      }
    }
    std::printf("\ntime: the training of all seeds together; trainable params: at the start -> after unfreezing.\n");
    std::printf("total %.0f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
