// examples/nas/main.cpp: architecture search on Fashion-MNIST with brisk::nas (search/nas.h).
// Regularized evolution (seed s) and a REINFORCE controller with an LSTM policy (seed s + 1) each evaluate --trials
// (default 20) architectures; a trial
// trains the arch for --epochs (default 3) epochs (Adam, lr 2e-3, batch 64) on the first --train-size training
// images and scores it on --val-size test-set images held out from training. It prints the
// top-5 of each search (arch, validation accuracy, parameters, CPU latency of a 64-image forward,
// median of 5) and writes an SVG of best-so-far accuracy against trial for both searches.
// Exit status: 77 when the dataset is missing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "brisk.h"
#include "search/nas.h"

using namespace brisk;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;

struct Split {
  Tensor x, y;
};

Split load(const std::string& root, bool train, int64_t n) {
  data::FashionMNIST ds(root, train);
  n = std::min(n, ds.size());
  return {(ds.images().narrow(0, 0, n).to(DType::F32) * (1.0 / 255) - kMean) * (1.0 / kStd),
          ds.labels().narrow(0, 0, n).contiguous()};
}

nas::EvalResult train_and_score(const nas::Arch& arch, uint64_t seed, int64_t epochs, const Split& tr,
                                const Split& va) {
  manual_seed(seed);
  auto model = arch.build(1, 10);
  optim::Adam opt(model->named_parameters(), {.lr = 2e-3});
  std::mt19937_64 rng(seed);
  std::vector<double> order(size_t(tr.x.size(0)));
  model->train();
  const int64_t bs = 64;
  for (int64_t e = 0; e < epochs; ++e) {
    std::iota(order.begin(), order.end(), 0.0);
    std::shuffle(order.begin(), order.end(), rng);
    const Tensor perm = from_vector(order, {int64_t(order.size())}, DType::I64);
    for (int64_t i = 0; i + bs <= tr.x.size(0); i += bs) {
      const Tensor idx = perm.narrow(0, i, bs);
      Tensor loss = nn::functional::cross_entropy((*model)(index_select(tr.x, 0, idx)), index_select(tr.y, 0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  NoGradGuard ng;
  model->eval();
  int64_t ok = 0;
  for (int64_t i = 0; i < va.x.size(0); i += 500) {
    const int64_t b = std::min<int64_t>(500, va.x.size(0) - i);
    ok += sum(eq(argmax((*model)(va.x.narrow(0, i, b)), 1), va.y.narrow(0, i, b)).to(DType::I64)).item<int64_t>();
  }
  nas::EvalResult r;
  r.accuracy = double(ok) / double(va.x.size(0));
  r.params = model->num_parameters();
  const Tensor batch = va.x.narrow(0, 0, std::min<int64_t>(64, va.x.size(0)));
  std::vector<double> ms;
  for (int k = 0; k < 6; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)(*model)(batch).sum().item<double>();
    if (k) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  r.latency_ms = ms[ms.size() / 2];
  return r;
}

void print_top(const char* name, const nas::SearchResult& r, double seconds) {
  std::vector<size_t> idx(r.history.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return r.history[a].result.accuracy > r.history[b].result.accuracy; });
  std::printf("\n%s: %zu trials in %.1f s; top 5\n", name, r.history.size(), seconds);
  std::printf("  %-5s %-44s %8s %8s %12s\n", "trial", "arch", "val acc", "params", "latency ms");
  for (size_t i = 0; i < std::min<size_t>(5, idx.size()); ++i) {
    const nas::Trial& t = r.history[idx[i]];
    std::printf("  %-5zu %-44s %8.3f %8lld %12.2f\n", idx[i], t.arch.str().c_str(), t.result.accuracy,
                (long long)t.result.params, t.result.latency_ms);
  }
}

std::vector<double> best_so_far(const nas::SearchResult& r) {
  std::vector<double> v;
  double b = 0;
  for (const nas::Trial& t : r.history) v.push_back(b = std::max(b, t.result.accuracy));
  return v;
}

// Best-so-far validation accuracy against trial, one polyline per search; temp file + rename.
bool write_svg(const std::string& path, const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  const double W = 640, H = 400, L = 60, R = 150, T = 30, B = 50;
  double lo = 1, hi = 0;
  size_t n = 1;
  for (auto& [name, v] : series)
    for (double y : v) lo = std::min(lo, y), hi = std::max(hi, y), n = std::max(n, v.size());
  if (hi <= lo) hi = lo + 0.01;
  lo -= 0.01, hi += 0.01;
  auto px = [&](size_t i) { return L + (W - L - R) * (n > 1 ? double(i) / double(n - 1) : 0.5); };
  auto py = [&](double y) { return T + (H - T - B) * (1 - (y - lo) / (hi - lo)); };
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return false;
    char buf[256];
    f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    f << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    f << "<text x=\"" << L
      << "\" y=\"18\">Architecture search on Fashion-MNIST: best-so-far validation accuracy</text>\n";
    std::snprintf(buf, sizeof buf, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", L, H - B,
                  W - R, H - B);
    f << buf;
    std::snprintf(buf, sizeof buf, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", L, T, L,
                  H - B);
    f << buf;
    for (int k = 0; k <= 4; ++k) {
      const double y = lo + (hi - lo) * k / 4;
      std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.3f</text>\n", L - 5, py(y) + 4, y);
      f << buf;
    }
    std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">trial (1..%zu)</text>\n",
                  (L + W - R) / 2, H - 15, n);
    f << buf;
    const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
    for (size_t s = 0; s < series.size(); ++s) {
      f << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colors[s % 3] << "\" points=\"";
      for (size_t i = 0; i < series[s].second.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(i), py(series[s].second[i]));
        f << buf;
      }
      f << "\"/>\n";
      std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\" fill=\"%s\">%s</text>\n", W - R + 10,
                    T + 20 + 18.0 * double(s), colors[s % 3], series[s].first.c_str());
      f << buf;
    }
    f << "</svg>\n";
    if (!f.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t trials = 20, epochs = 3, train_size = 2048, val_size = 1000;
  uint64_t seed = 0;
  std::string root = data::FashionMNIST::kDefaultRoot, svg = "nas_progress.svg";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--trials")
      trials = std::stoll(v);
    else if (k == "--train-size")
      train_size = std::stoll(v);
    else if (k == "--val-size")
      val_size = std::stoll(v);
    else if (k == "--epochs")
      epochs = std::stoll(v);
    else if (k == "--seed")
      seed = std::stoull(v);
    else if (k == "--data")
      root = v;
    else if (k == "--svg")
      svg = v;
    else
      return std::fprintf(stderr,
                          "nas: unknown option %s (--trials --epochs --train-size --val-size --seed --data --svg)\n",
                          k.c_str()),
             2;
  }
  if (!std::filesystem::exists(root)) return std::printf("nas: no dataset at %s, skipping\n", root.c_str()), 77;
  const Split tr = load(root, true, train_size), va = load(root, false, val_size);
  std::printf(
      "brisk::nas on Fashion-MNIST: %lld train images (%lld epochs per trial), %lld validation images, %lld trials per "
      "search, seed %llu\n",
      (long long)tr.x.size(0), (long long)epochs, (long long)va.x.size(0), (long long)trials, (unsigned long long)seed);
  nas::SearchSpace space;
  auto eval = [&](const nas::Arch& a, uint64_t s) { return train_and_score(a, s, epochs, tr, va); };
  const int64_t pop = std::max<int64_t>(2, std::min<int64_t>(8, trials / 2));
  auto t0 = std::chrono::steady_clock::now();
  const nas::SearchResult evo = nas::regularized_evolution(
      space, eval, {.population = pop, .sample_size = std::min<int64_t>(3, pop), .cycles = trials - pop, .seed = seed});
  const double evo_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t0 = std::chrono::steady_clock::now();
  const nas::SearchResult rl = nas::reinforce_search(
      space, eval, {.trials = trials, .lr = 0.05, .baseline_decay = 0.7, .entropy_weight = 0.01, .seed = seed + 1});
  const double rl_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nevolution: population %lld, sample size %lld\n", (long long)pop, (long long)std::min<int64_t>(3, pop));
  print_top("regularized evolution", evo, evo_s);
  print_top("REINFORCE controller (LSTM policy)", rl, rl_s);
  std::printf("the controller's greedy arch after %lld trials: %s\n", (long long)trials, rl.greedy.str().c_str());
  if (!write_svg(svg, {{"evolution", best_so_far(evo)}, {"REINFORCE", best_so_far(rl)}}))
    return std::fprintf(stderr, "nas: cannot write %s\n", svg.c_str()), 1;
  std::printf("\nwrote %s\n", svg.c_str());
  return 0;
}
