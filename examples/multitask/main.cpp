// examples/multitask/main.cpp: multi-task learning on Fashion-MNIST. One shared trunk (the main
// job's CNN up to its 128-wide hidden layer) feeds two heads: the 10 classes, and 4 groups
// (tops: T-shirt, pullover, coat, shirt; trousers and dresses; shoes: sandal, sneaker, ankle
// boot; bags). Four runs from the same initial weights, over the same batches, for the same
// number of steps, differ only in how the two losses are combined:
//   classes only   weights (1, 0)   a single-task model for the 10 classes
//   groups only    weights (0, 1)   a single-task model for the 4 groups
//   fixed 1:1      weights (1, 1)   nn::weighted_sum_losses
//   uncertainty    learned          nn::UncertaintyWeighting (Kendall, Gal and Cipolla 2018)
// It prints each run's test accuracy on both tasks (for the classes-only model, the group of its
// predicted class) and the weights the uncertainty weighting settled on.
// Exit status: 77 when the dataset is missing, 1 when a run ends with a non-finite loss.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "brisk.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics
constexpr int64_t kGroupOf[10] = {0, 1, 0, 1, 0, 2, 0, 2, 3, 2};
constexpr const char* kGroupNames = "tops | trousers+dresses | shoes | bags";

struct Args {
  int64_t epochs = 3, batch_size = 128, train_size = 20000, test_size = 10000;
  double lr = 1e-3;
  uint64_t seed = 0;
  int threads = 0;
  std::string data = data::FashionMNIST::kDefaultRoot;
};

// The trunk and both heads: called with {{"image", x}} it returns {"classes", "groups"}
// (forward_dict, Note [Module signatures] in nn/module.h); forward(x) gives the class logits.
class TwoHeadCNN : public nn::Module {
 public:
  TwoHeadCNN() : Module("TwoHeadCNN") {
    auto trunk = std::make_shared<nn::Sequential>();
    trunk->push_back(std::make_shared<nn::Conv2d>(1, 32, 3, nn::ConvOptions{.padding = {1, 1}}));
    trunk->push_back(std::make_shared<nn::ReLU>());
    trunk->push_back(std::make_shared<nn::MaxPool2d>(2));
    trunk->push_back(std::make_shared<nn::Conv2d>(32, 64, 3, nn::ConvOptions{.padding = {1, 1}}));
    trunk->push_back(std::make_shared<nn::ReLU>());
    trunk->push_back(std::make_shared<nn::MaxPool2d>(2));
    trunk->push_back(std::make_shared<nn::Flatten>());
    trunk->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
    trunk->push_back(std::make_shared<nn::ReLU>());
    trunk->push_back(std::make_shared<nn::Dropout>(0.25));
    trunk_ = register_module("trunk", trunk);
    classes_ = register_module("classes", std::make_shared<nn::Linear>(128, 10));
    groups_ = register_module("groups", std::make_shared<nn::Linear>(128, 4));
  }
  nn::TensorDict forward_dict(const nn::TensorDict& in) override {
    Tensor h = (*trunk_)(in["image"]);
    return {{"classes", (*classes_)(h)}, {"groups", (*groups_)(h)}};
  }
  Tensor forward(const Tensor& x) override { return forward_dict({{"image", x}})["classes"]; }

 private:
  std::shared_ptr<nn::Module> trunk_, classes_, groups_;
};

struct Split {
  Tensor x, classes, groups;  // (N, 1, 28, 28) F32 normalized; (N) I64; (N) I64
};

Split load(const std::string& root, bool train, int64_t n) {
  data::FashionMNIST ds(root, train);
  n = std::min(n, ds.size());
  Split s;
  s.x = (ds.images().narrow(0, 0, n).to(DType::F32) * (1.0 / 255) - kMean) * (1.0 / kStd);
  s.classes = ds.labels().narrow(0, 0, n).contiguous();
  std::vector<double> lut(std::begin(kGroupOf), std::end(kGroupOf));
  s.groups = index_select(from_vector(lut, {10}, DType::I64), 0, s.classes);
  return s;
}

struct Result {
  double acc_classes = NAN, acc_groups = NAN, seconds = 0, final_loss = NAN;
  std::vector<double> weights;  // the uncertainty weighting's, at the end
};

int64_t correct(const Tensor& logits, const Tensor& target) {
  return sum(eq(argmax(logits, 1), target).to(DType::I64)).item<int64_t>();
}

// Test accuracy of both heads; `via_classes`: the group accuracy of the class head (the group of
// the predicted class) instead of the group head's.
void evaluate(TwoHeadCNN& model, const Split& test, bool via_classes, Result& r) {
  NoGradGuard ng;
  model.eval();
  std::vector<double> lut(std::begin(kGroupOf), std::end(kGroupOf));
  const Tensor group_of = from_vector(lut, {10}, DType::I64);
  int64_t ok_c = 0, ok_g = 0;
  const int64_t n = test.x.size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    const int64_t b = std::min<int64_t>(1000, n - i);
    nn::TensorDict out = model({{"image", test.x.narrow(0, i, b)}});
    const Tensor &c = out["classes"], &g = out["groups"];
    const Tensor tc = test.classes.narrow(0, i, b), tg = test.groups.narrow(0, i, b);
    ok_c += correct(c, tc);
    if (via_classes)
      ok_g += sum(eq(index_select(group_of, 0, argmax(c, 1)), tg).to(DType::I64)).item<int64_t>();
    else
      ok_g += correct(g, tg);
  }
  r.acc_classes = double(ok_c) / double(n);
  r.acc_groups = double(ok_g) / double(n);
}

// mode: 0 classes only, 1 groups only, 2 fixed 1:1, 3 uncertainty weighting.
Result run(int mode, const Args& a, const Split& train, const Split& test) {
  manual_seed(a.seed);  // the same initial weights in every run
  TwoHeadCNN model;
  nn::UncertaintyWeighting uw(2);
  nn::NamedTensors params = model.named_parameters();
  if (mode == 3)
    for (auto& [name, p] : uw.named_parameters()) params.emplace_back("uncertainty." + name, p);
  optim::Adam opt(params, {.lr = a.lr});
  const std::vector<double> fixed = mode == 0   ? std::vector<double>{1, 0}
                                    : mode == 1 ? std::vector<double>{0, 1}
                                                : std::vector<double>{1, 1};
  std::mt19937_64 rng(a.seed);  // the same batch order in every run
  std::vector<double> order(size_t(train.x.size(0)));
  Result r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    model.train();
    std::iota(order.begin(), order.end(), 0.0);
    std::shuffle(order.begin(), order.end(), rng);
    const Tensor perm = from_vector(order, {int64_t(order.size())}, DType::I64);
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t i = 0; i + a.batch_size <= train.x.size(0); i += a.batch_size) {
      const Tensor idx = perm.narrow(0, i, a.batch_size);
      nn::TensorDict out = model({{"image", index_select(train.x, 0, idx)}});
      const Tensor &c = out["classes"], &g = out["groups"];
      std::vector<Tensor> losses = {nn::functional::cross_entropy(c, index_select(train.classes, 0, idx)),
                                    nn::functional::cross_entropy(g, index_select(train.groups, 0, idx))};
      Tensor loss = mode == 3 ? uw.combine(losses) : nn::weighted_sum_losses(losses, fixed);
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    r.final_loss = batches ? loss_sum / double(batches) : NAN;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  evaluate(model, test, mode == 0, r);
  if (mode == 3) r.weights = uw.weights();
  return r;
}

void usage() {
  std::printf(
      "usage: multitask [options]   (--key value)\n"
      "  --epochs N       epochs per run (default 3)\n"
      "  --batch-size N   (default 128)\n"
      "  --train-size N   the first N training images (default 20000)\n"
      "  --test-size N    the first N test images (default 10000)\n"
      "  --lr X           Adam learning rate (default 1e-3)\n"
      "  --seed N         initial weights and batch order, the same in every run (default 0)\n"
      "  --threads N      OpenMP threads (default: all cores)\n"
      "  --data DIR       Fashion-MNIST root (default %s)\n",
      data::FashionMNIST::kDefaultRoot);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") return usage(), 0;
    if (i + 1 >= argc) return std::fprintf(stderr, "multitask: %s needs a value (--help)\n", key.c_str()), 2;
    const std::string v = argv[++i];
    try {
      if (key == "--epochs")
        a.epochs = std::stoll(v);
      else if (key == "--batch-size")
        a.batch_size = std::stoll(v);
      else if (key == "--train-size")
        a.train_size = std::stoll(v);
      else if (key == "--test-size")
        a.test_size = std::stoll(v);
      else if (key == "--lr")
        a.lr = std::stod(v);
      else if (key == "--seed")
        a.seed = std::stoull(v);
      else if (key == "--threads")
        a.threads = std::stoi(v);
      else if (key == "--data")
        a.data = v;
      else
        return std::fprintf(stderr, "multitask: unknown option %s (--help)\n", key.c_str()), 2;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "multitask: bad value '%s' for %s\n", v.c_str(), key.c_str()), 2;
    }
  }
  if (a.epochs < 1 || a.batch_size < 1 || a.train_size < a.batch_size || a.test_size < 1 || !(a.lr > 0))
    return std::fprintf(stderr, "multitask: need epochs >= 1, train-size >= batch-size >= 1, test-size >= 1, lr > 0\n"),
           2;
  if (!std::filesystem::exists(a.data + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(a.data + "/train-images-idx3-ubyte"))
    return std::fprintf(stderr, "multitask: no Fashion-MNIST under %s (apt install dataset-fashion-mnist)\n",
                        a.data.c_str()),
           77;
  if (a.threads > 0) omp_set_num_threads(a.threads);

  const Split train = load(a.data, true, a.train_size), test = load(a.data, false, a.test_size);
  std::printf("multitask: shared CNN trunk + heads for 10 classes and 4 groups (%s)\n", kGroupNames);
  std::printf("%lld training images, %lld epochs, batch %lld, Adam lr %g, seed %llu, %d threads; test on %lld\n\n",
              (long long)train.x.size(0), (long long)a.epochs, (long long)a.batch_size, a.lr,
              (unsigned long long)a.seed, omp_get_max_threads(), (long long)test.x.size(0));
  const char* names[] = {"classes only", "groups only", "fixed 1:1", "uncertainty"};
  std::printf("| run          | loss weights (classes, groups) | classes acc | groups acc | time s |\n");
  std::printf("|--------------|--------------------------------|-------------|------------|--------|\n");
  int status = 0;
  for (int mode = 0; mode < 4; ++mode) {
    const Result r = run(mode, a, train, test);
    char w[64];
    if (mode == 3)
      std::snprintf(w, sizeof w, "learned: %.3f, %.3f", r.weights[0], r.weights[1]);
    else
      std::snprintf(w, sizeof w, "%s", mode == 0 ? "1, 0" : mode == 1 ? "0, 1" : "1, 1");
    char c[32];
    if (mode == 1)
      std::snprintf(c, sizeof c, "-");
    else
      std::snprintf(c, sizeof c, "%.4f", r.acc_classes);
    std::printf("| %-12s | %-30s | %11s | %9.4f%s | %6.1f |\n", names[mode], w, c, r.acc_groups, mode == 0 ? "*" : " ",
                r.seconds);
    std::fflush(stdout);
    if (!std::isfinite(r.final_loss)) {
      std::fprintf(stderr, "multitask: %s ended with a non-finite loss\n", names[mode]);
      status = 1;
    }
  }
  std::printf("\n* the classes-only model's group accuracy is that of the group of its predicted class.\n");
  return status;
}
