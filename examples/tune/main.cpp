// examples/tune/main.cpp: hyperparameter search (search/tune.h) for a small Fashion-MNIST CNN.
// It tunes AdamW's learning rate and weight decay, the batch size and the learning-rate schedule
// (constant, cosine, or step with a conditional decay factor) with four methods at the same
// budget of training epochs: random search, TPE, random search + ASHA, TPE + ASHA. Validation
// images are the training file's images after the training subset (the test set is not used).
// It prints a table (method, trials, budget used, best validation accuracy, wall time) and the
// best trials, and writes per-method CSV and JSON files and an SVG plot of the best accuracy so
// far against the budget spent. Exit status: 77 when the dataset is missing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "engine/serialize.h"
#include "search/tune.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

struct Args {
  int64_t train_size = 2000, val_size = 2000, max_epochs = 4, budget = 96, width = 16;
  std::vector<uint64_t> seeds = {0};
  int parallel = 2, threads_per_trial = 1;
  std::string methods = "random,tpe,random+asha,tpe+asha";
  std::string data = data::FashionMNIST::kDefaultRoot, out = "tune_out";
};

struct Data {
  Tensor x_train, y_train, x_val, y_val;
};

Data load(const Args& a) {
  data::FashionMNIST ds(a.data, true);
  const int64_t n = std::min(a.train_size + a.val_size, ds.size());
  const Tensor x = (ds.images().narrow(0, 0, n).to(DType::F32) * (1.0 / 255) - kMean) * (1.0 / kStd);
  const Tensor y = ds.labels().narrow(0, 0, n).contiguous();
  const int64_t nt = std::min(a.train_size, n - 1);
  return {x.narrow(0, 0, nt).contiguous(), y.narrow(0, 0, nt).contiguous(), x.narrow(0, nt, n - nt).contiguous(),
          y.narrow(0, nt, n - nt).contiguous()};
}

// The CNN of examples/multitask/main.cpp at `width` channels (16: 16-32 conv, 64 hidden), without
// dropout. Layers draw their initial weights from the process's default generator, which
// parallel trials share: they are built under a lock, then re-initialized from the trial's own
// generator so that a trial's weights depend on its seed only.
std::shared_ptr<nn::Sequential> make_cnn(int64_t w, Generator& gen) {
  static std::mutex build;
  std::lock_guard lock(build);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(1, w, 3, nn::ConvOptions{.padding = {1, 1}}));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(2));
  m->push_back(std::make_shared<nn::Conv2d>(w, 2 * w, 3, nn::ConvOptions{.padding = {1, 1}}));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(2));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(2 * w * 7 * 7, 4 * w));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(4 * w, 10));
  NoGradGuard ng;
  const nn::NamedTensors params = m->named_parameters();
  for (size_t i = 0; i + 1 < params.size(); i += 2) {  // (weight, bias) per layer, in order
    Tensor weight = params[i].second, bias = params[i + 1].second;
    nn::init::linear_default_(weight, bias, &gen);
  }
  return m;
}

double accuracy(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard ng;
  model.eval();
  int64_t ok = 0;
  for (int64_t i = 0; i < x.size(0); i += 500) {
    const int64_t b = std::min<int64_t>(500, x.size(0) - i);
    ok += sum(eq(argmax(model(x.narrow(0, i, b)), 1), y.narrow(0, i, b)).to(DType::I64)).item<int64_t>();
  }
  return double(ok) / double(x.size(0));
}

// The learning rate at iteration `it` of `total`: constant, cosine to 0, or decay by `gamma` at
// 50% and 75%.
double scheduled_lr(const tune::Config& c, double lr, int64_t it, int64_t total) {
  const std::string& s = c.choice("schedule");
  const double t = double(it) / double(std::max<int64_t>(total, 1));
  if (s == "cosine") return lr * 0.5 * (1 + std::cos(M_PI * t));
  if (s == "step") return lr * std::pow(c.real("step_gamma"), (t >= 0.5) + (t >= 0.75));
  return lr;
}

// One trial: train for up to max_epochs, reporting validation accuracy after each epoch.
void train_trial(tune::Trial& trial, const Data& d, const Args& a) {
  const tune::Config& c = trial.config();
  const double lr = c.real("lr");
  const int64_t batch = int64_t(1) << c.integer("log2_batch");
  auto model = make_cnn(a.width, trial.generator());
  optim::AdamW opt(model->named_parameters(), {.lr = lr, .weight_decay = c.real("weight_decay")});
  std::mt19937_64 rng(trial.seed());
  const int64_t n = d.x_train.size(0), per_epoch = n / batch, total = per_epoch * a.max_epochs;
  std::vector<double> order(static_cast<size_t>(n));
  int64_t it = 0;
  for (int64_t epoch = 1; epoch <= a.max_epochs; ++epoch) {
    model->train();
    std::iota(order.begin(), order.end(), 0.0);
    std::shuffle(order.begin(), order.end(), rng);
    const Tensor perm = from_vector(order, {n}, DType::I64);
    for (int64_t i = 0; i + batch <= n; i += batch, ++it) {
      const Tensor idx = perm.narrow(0, i, batch);
      opt.set_lr(0, scheduled_lr(c, lr, it, total));
      Tensor loss =
          nn::functional::cross_entropy((*model)(index_select(d.x_train, 0, idx)), index_select(d.y_train, 0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    if (!trial.report(epoch, accuracy(*model, d.x_val, d.y_val))) return;
  }
}

tune::Space make_space() {
  tune::Space s;
  s.log_uniform("lr", 1e-4, 3e-2)
      .log_uniform("weight_decay", 1e-5, 3e-1)
      .integer("log2_batch", 5, 8)  // batch 32 .. 256
      .choice("schedule", {"constant", "cosine", "step"})
      .when("schedule", "step", tune::Space().quniform("step_gamma", 0.1, 0.5, 0.05));
  return s;
}

struct Run {
  std::string method;
  uint64_t seed;
  tune::Result result;
  double seconds;
};

// Best score so far against budget spent, in trial order: (budget, best) after each trial.
std::vector<std::pair<double, double>> progress(const tune::Result& r) {
  std::vector<std::pair<double, double>> out;
  double used = 0, best = 0;
  for (const tune::TrialRecord& t : r.trials) {
    used += double(t.resource());
    if (t.status != tune::Status::Failed && t.score() > best) best = t.score();
    out.emplace_back(used, best);
  }
  return out;
}

void write_svg(const std::string& path, const std::vector<Run>& runs, double budget) {
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  double lo = 1, hi = 0;
  for (const Run& r : runs)
    for (auto [b, acc] : progress(r.result))
      if (acc > 0) lo = std::min(lo, acc), hi = std::max(hi, acc);
  lo = std::floor(lo * 50) / 50, hi = std::ceil(hi * 50) / 50 + 1e-9;
  if (!(hi > lo)) lo = 0, hi = 1;
  const double W = 640, H = 400, L = 60, R = 170, T = 20, B = 50;
  auto X = [&](double b) { return L + (W - L - R) * b / budget; };
  auto Y = [&](double acc) { return T + (H - T - B) * (1 - (std::clamp(acc, lo, hi) - lo) / (hi - lo)); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' "
    << "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  s << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='black'/>\n";
  s << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='black'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double b = budget * i / 4, acc = lo + (hi - lo) * i / 4;
    s << "<text x='" << X(b) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << b << "</text>\n";
    s << "<text x='" << L - 6 << "' y='" << Y(acc) + 4 << "' text-anchor='end'>" << acc << "</text>\n";
  }
  s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle'>budget used (epochs)</text>\n";
  s << "<text x='14' y='" << (T + H - B) / 2 << "' transform='rotate(-90 14 " << (T + H - B) / 2
    << ")' text-anchor='middle'>best validation accuracy</text>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* col = colors[i % 8];
    s << "<polyline fill='none' stroke='" << col << "' stroke-width='2' points='";
    double prev = 0;
    for (auto [b, acc] : progress(runs[i].result)) {
      if (acc <= 0) continue;
      s << X(prev) << "," << Y(acc) << " " << X(b) << "," << Y(acc) << " ";  // a step: flat until it improves
      prev = b;
    }
    s << "'/>\n<text x='" << W - R + 10 << "' y='" << T + 16 * (i + 1) << "' fill='" << col << "'>" << runs[i].method
      << " (seed " << runs[i].seed << ")</text>\n";
  }
  s << "</svg>\n";
  write_file_atomic(path, s.str());
}

void usage() {
  std::printf(
      "usage: tune [options]   (--key value)\n"
      "  --train-size N         training images (default 2000)\n"
      "  --val-size N           validation images, the ones after the training ones (default 2000)\n"
      "  --max-epochs N         epochs of a trial that is not stopped (default 4)\n"
      "  --budget N             epochs per method, summed over its trials (default 96)\n"
      "  --seeds A,B            search seeds (default 0)\n"
      "  --methods LIST         of random, tpe, random+asha, tpe+asha, evolution (default the first four)\n"
      "  --parallel N           trials at once (default 2)\n"
      "  --threads-per-trial N  (default 1)\n"
      "  --width N              CNN channels: N, 2N conv, 4N hidden (default 16)\n"
      "  --out DIR              CSV, JSON and SVG go here (default tune_out)\n"
      "  --data DIR             Fashion-MNIST root (default %s)\n",
      data::FashionMNIST::kDefaultRoot);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") return usage(), 0;
    if (i + 1 >= argc) return std::fprintf(stderr, "tune: %s needs a value (--help)\n", key.c_str()), 2;
    const std::string v = argv[++i];
    try {
      if (key == "--train-size")
        a.train_size = std::stoll(v);
      else if (key == "--val-size")
        a.val_size = std::stoll(v);
      else if (key == "--max-epochs")
        a.max_epochs = std::stoll(v);
      else if (key == "--budget")
        a.budget = std::stoll(v);
      else if (key == "--seeds") {
        a.seeds.clear();
        for (const std::string& s : split(v)) a.seeds.push_back(std::stoull(s));
      } else if (key == "--methods")
        a.methods = v;
      else if (key == "--parallel")
        a.parallel = std::stoi(v);
      else if (key == "--threads-per-trial")
        a.threads_per_trial = std::stoi(v);
      else if (key == "--width")
        a.width = std::stoll(v);
      else if (key == "--out")
        a.out = v;
      else if (key == "--data")
        a.data = v;
      else
        return std::fprintf(stderr, "tune: unknown option %s (--help)\n", key.c_str()), 2;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "tune: bad value '%s' for %s\n", v.c_str(), key.c_str()), 2;
    }
  }
  if (a.train_size < 256 || a.val_size < 1 || a.max_epochs < 1 || a.budget < a.max_epochs || a.seeds.empty() ||
      a.width < 1)
    return std::fprintf(stderr, "tune: need train-size >= 256, val-size >= 1, budget >= max-epochs >= 1, width >= 1\n"),
           2;
  if (!std::filesystem::exists(a.data + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(a.data + "/train-images-idx3-ubyte"))
    return std::fprintf(stderr, "tune: no Fashion-MNIST under %s (apt install dataset-fashion-mnist)\n",
                        a.data.c_str()),
           77;
  std::filesystem::create_directories(a.out);
  const Data d = load(a);
  const tune::Space space = make_space();
  std::printf("tune: Fashion-MNIST CNN (width %lld), %lld training / %lld validation images\n", (long long)a.width,
              (long long)d.x_train.size(0), (long long)d.x_val.size(0));
  std::printf(
      "space: lr log-uniform [1e-4, 3e-2], weight_decay log-uniform [1e-5, 0.3], batch 2^[5, 8],\n"
      "       schedule constant | cosine | step (step_gamma quantized [0.1, 0.5] by 0.05)\n");
  std::printf(
      "budget: %lld epochs per method, trials of at most %lld epochs; %d trials at once, %d thread(s) each\n"
      "ASHA: rungs at 1, 3, ... epochs (eta 3); TPE: Hyperopt's defaults but 5 startup trials\n\n",
      (long long)a.budget, (long long)a.max_epochs, a.parallel, a.threads_per_trial);
  std::fflush(stdout);

  std::vector<Run> runs;
  for (uint64_t seed : a.seeds) {
    for (const std::string& method : split(a.methods)) {
      tune::Options o;
      o.max_trials = 1000;
      o.max_budget = double(a.budget);
      o.seed = seed;
      o.parallel = a.parallel;
      o.threads_per_trial = a.threads_per_trial;
      const bool tpe = method.rfind("tpe", 0) == 0;
      if (tpe) o.searcher = std::make_shared<tune::Tpe>(tune::TpeOptions{.n_startup = 5});
      if (method == "evolution")
        o.searcher = std::make_shared<tune::Evolution>(tune::EvolutionOptions{.population = 6});
      if (method.find("asha") != std::string::npos)
        o.scheduler =
            std::make_shared<tune::Asha>(tune::AshaOptions{.min_resource = 1, .eta = 3, .max_resource = a.max_epochs});
      if (!tpe && method != "evolution" && method != "random" && method != "random+asha")
        return std::fprintf(stderr, "tune: unknown method '%s'\n", method.c_str()), 2;
      const auto t0 = std::chrono::steady_clock::now();
      tune::Result r = tune::run(
          space, [&](tune::Trial& t) { train_trial(t, d, a); }, o);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string stem = a.out + "/" + method + "_seed" + std::to_string(seed);
      r.write_csv(stem + ".csv");
      r.write_json(stem + ".json");
      std::printf("%s, seed %llu: %zu trials, best %.4f (%s), %.0f s\n", method.c_str(), (unsigned long long)seed,
                  r.trials.size(), r.best().score(), r.best().config.str().c_str(), sec);
      std::fflush(stdout);
      runs.push_back({method, seed, std::move(r), sec});
    }
  }
  std::printf("\n| method | search seed | trials | stopped early | budget used (epochs) | best val acc | wall s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    int stopped = 0;
    for (const tune::TrialRecord& t : r.result.trials) stopped += t.status == tune::Status::Stopped;
    std::printf("| %s | %llu | %zu | %d | %.0f | %.4f | %.0f |\n", r.method.c_str(), (unsigned long long)r.seed,
                r.result.trials.size(), stopped, r.result.budget(), r.result.best().score(), r.seconds);
  }
  // Per method over the seeds: the mean best accuracy, and how it compares with random search
  // run at the same seed (the paired difference removes most of the seed's luck).
  if (a.seeds.size() > 1) {
    std::printf(
        "\n| method | seeds | mean trials | mean best val acc | vs random (mean, wins) |\n|---|---|---|---|---|\n");
    for (const std::string& method : split(a.methods)) {
      double acc = 0, diff = 0, trials = 0;
      int n = 0, paired = 0, wins = 0;
      for (const Run& r : runs) {
        if (r.method != method) continue;
        ++n;
        acc += r.result.best().score();
        trials += double(r.result.trials.size());
        for (const Run& q : runs)
          if (q.method == "random" && q.seed == r.seed) {
            const double dd = r.result.best().score() - q.result.best().score();
            diff += dd;
            wins += dd > 0;
            ++paired;
          }
      }
      if (n == 0) continue;
      if (method == "random" || paired == 0)
        std::printf("| %s | %d | %.1f | %.4f | |\n", method.c_str(), n, trials / n, acc / n);
      else
        std::printf("| %s | %d | %.1f | %.4f | %+.4f, %d of %d |\n", method.c_str(), n, trials / n, acc / n,
                    diff / paired, wins, paired);
    }
  }
  if (!runs.empty()) {
    std::printf("\nbest trials of %s, seed %llu:\n%s", runs.back().method.c_str(), (unsigned long long)runs.back().seed,
                runs.back().result.table(5).c_str());
  }
  write_svg(a.out + "/tune_progress.svg", runs, double(a.budget + a.max_epochs));
  std::printf("\nwrote %s/tune_progress.svg and a CSV and JSON per run\n", a.out.c_str());
  return 0;
}
