// examples/bench/bench_amp.cpp: mixed precision on the CPU, measured in one run. The GEMM
// section times brisk's F32 GEMM (kernels/cpu/gemm.h) against the BF16 GEMM
// (kernels/cpu/gemm_bf16.h) on each of its paths this CPU runs (AMX, AVX512-BF16, and the
// convert-to-F32 fallback), square n = 512, 1024, 2048, on 2 threads and 1: GFLOP/s as 2 n^3
// over the median of several calls, and the ratio of the best BF16 path to F32. The CNN
// section trains the Fashion-MNIST SmallCNN (Adam, batch 128, the main job's recipe) for
// --epochs full epochs (default 1) in F32 and under BF16 autocast from the same initial
// weights, and prints seconds per epoch, test accuracy and the speedup; then the cost of a
// NonfiniteWatch (engine/nonfinite.h) per training step, on and off.
//   bench_amp [--epochs N] [--data DIR] [--skip-gemm] [--skip-cnn]
// Not a test: it asserts nothing (tests/test_gemm_bf16.cpp and tests/test_amp.cpp check values).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "examples/bench/bench_common.h"
#include "examples/fashion_mnist/evaluate.h"
#include "kernels/cpu/gemm_bf16.h"
#include "nn/models/simple.h"
#include "optim/optim.h"

using namespace brisk;
using namespace brisk::kernels::cpu;

namespace {

double gflops(double flops, double seconds) { return flops / seconds * 1e-9; }

struct GemmRow {
  double f32, amx, avx512, fallback;
};

// Median seconds of one c = a @ b on `path`; 0 when this CPU lacks it.
double time_bf16(Bf16GemmPath path, const std::vector<BFloat16>& a, const std::vector<BFloat16>& b,
                 std::vector<float>& c, int64_t n, int threads, int repeats) {
  set_bf16_gemm_path(path);
  if (bf16_gemm_path() != path) return 0;  // this CPU lacks the path
  const double s = bench::seconds_per_call(
      [&] {
        gemm_bf16({a.data(), n, n, n, 1}, {b.data(), n, n, n, 1}, {c.data(), n, n, n, 1}, false, threads);
      },
      1, repeats);
  set_bf16_gemm_path(Bf16GemmPath::Auto);
  return s;
}

GemmRow measure(int64_t n, int threads) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a32(size_t(n * n)), b32(size_t(n * n)), c(size_t(n * n));
  std::vector<BFloat16> a16(a32.size()), b16(b32.size());
  for (size_t i = 0; i < a32.size(); ++i) {
    a16[i] = BFloat16(dist(rng));
    b16[i] = BFloat16(dist(rng));
    a32[i] = float(a16[i]);
    b32[i] = float(b16[i]);
  }
  const int repeats = n >= 2048 ? 3 : n >= 1024 ? 5 : 9;
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const double t32 = bench::seconds_per_call(
      [&] {
        gemm<float>({a32.data(), n, n, n, 1}, {b32.data(), n, n, n, 1}, {c.data(), n, n, n, 1}, false, threads);
      },
      1, repeats);
  auto rate = [&](double s) { return s > 0 ? gflops(flops, s) : 0.0; };
  GemmRow row{gflops(flops, t32), 0, 0, 0};
  row.amx = rate(time_bf16(Bf16GemmPath::Amx, a16, b16, c, n, threads, repeats));
  row.avx512 = rate(time_bf16(Bf16GemmPath::Avx512, a16, b16, c, n, threads, repeats));
  row.fallback = rate(time_bf16(Bf16GemmPath::Fallback, a16, b16, c, n, threads, repeats));
  return row;
}

void print_rate(double g) {
  if (g > 0) {
    std::printf(" %10.1f", g);
  } else {
    std::printf(" %10s", "n/a");
  }
}

void gemm_section() {
  std::printf("== GEMM: c (F32) = a @ b, square n, row-major; GFLOP/s = 2 n^3 / median seconds\n");
  std::printf("cores: %d; BF16 path auto-selected: %s (n/a: this CPU lacks the path)\n", omp_get_num_procs(),
              bf16_gemm_path_name(bf16_gemm_path()));
  std::printf("%6s %7s %10s %10s %10s %10s %10s\n", "n", "threads", "F32", "BF16 amx", "BF16 avx", "BF16 fb",
              "best/F32");
  for (int threads : {2, 1}) {
    for (int64_t n : {512, 1024, 2048}) {
      const GemmRow r = measure(n, threads);
      std::printf("%6lld %7d", (long long)n, threads);
      for (double g : {r.f32, r.amx, r.avx512, r.fallback}) print_rate(g);
      const double best = std::max({r.amx, r.avx512, r.fallback});
      std::printf(" %10.2f\n", best / r.f32);
    }
  }
}

// ---- the CNN: epochs in F32 and under BF16 autocast
struct CnnResult {
  double seconds_per_epoch = 0, test_acc = 0;
};

data::LoaderOptions loader_options(bool shuffle) {
  data::LoaderOptions o;
  o.batch_size = 128;
  o.shuffle = shuffle;
  o.num_workers = 2;
  o.persistent_workers = true;
  o.transform = data::Compose({data::to_tensor(), data::normalize({0.2860}, {0.3530})});
  return o;
}

// One training step of the main job's loop (examples/fashion_mnist/main.cpp).
void train_step(nn::Module& model, optim::Optimizer& opt, const data::Batch& b, bool bf16) {
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BF16, bf16);
    loss = cross_entropy(model(b.input), b.target);
  }
  opt.zero_grad();
  loss.backward();
  opt.step();
}

CnnResult train_cnn(bool bf16, int64_t epochs, const data::DatasetPtr& train, const data::DatasetPtr& test) {
  manual_seed(0);
  nn::models::SmallCNN model;
  optim::Adam opt(model.named_parameters(), {.lr = 1e-3});
  data::DataLoader train_loader(train, loader_options(true));
  data::DataLoader test_loader(test, loader_options(false));
  double seconds = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    const double t0 = bench::now_s();
    while (auto b = train_loader.next()) train_step(model, opt, *b, bf16);
    seconds += bench::now_s() - t0;
  }
  AutocastGuard autocast(DeviceType::CPU, DType::BF16, bf16);
  return {seconds / double(epochs), fashion_mnist::evaluate(model, test_loader).acc};
}

// Median seconds of one training step with and without a NonfiniteWatch.
void watch_overhead(const data::DatasetPtr& train) {
  manual_seed(0);
  nn::models::SmallCNN model;
  optim::Adam opt(model.named_parameters(), {.lr = 1e-4});
  data::DataLoader loader(train, loader_options(false));
  const data::Batch b = *loader.next();
  const double off = bench::seconds_per_call([&] { train_step(model, opt, b, false); }, 5, 5);
  const double on = bench::seconds_per_call(
      [&] {
        NonfiniteWatch watch;
        train_step(model, opt, b, false);
        bench::keep(watch.found());
      },
      5, 5);
  std::printf("NonfiniteWatch: %.1f ms per CNN step off, %.1f ms on (x%.2f; every op's outputs checked)\n", 1e3 * off,
              1e3 * on, on / off);
}

void cnn_section(int64_t epochs, const std::string& root) {
  std::printf("\n== Fashion-MNIST SmallCNN, Adam lr 1e-3, batch 128, %lld epoch(s), %d threads\n", (long long)epochs,
              omp_get_max_threads());
  auto train = std::make_shared<data::FashionMNIST>(root, /*train=*/true);
  auto test = std::make_shared<data::FashionMNIST>(root, /*train=*/false);
  const CnnResult f32 = train_cnn(false, epochs, train, test);
  const CnnResult bf16 = train_cnn(true, epochs, train, test);
  std::printf("%-22s %12s %14s\n", "", "s / epoch", "test accuracy");
  std::printf("%-22s %12.2f %13.2f%%\n", "F32", f32.seconds_per_epoch, 100 * f32.test_acc);
  std::printf("%-22s %12.2f %13.2f%%\n", "BF16 autocast", bf16.seconds_per_epoch, 100 * bf16.test_acc);
  std::printf("BF16 speedup x%.2f, accuracy %+.2f points\n", f32.seconds_per_epoch / bf16.seconds_per_epoch,
              100 * (bf16.test_acc - f32.test_acc));
  watch_overhead(train);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t epochs = 1;
  std::string root = data::FashionMNIST::kDefaultRoot;
  bool gemm = true, cnn = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--epochs" && i + 1 < argc) {
      epochs = std::max<int64_t>(1, std::stoll(argv[++i]));
    } else if (k == "--data" && i + 1 < argc) {
      root = argv[++i];
    } else if (k == "--skip-gemm") {
      gemm = false;
    } else if (k == "--skip-cnn") {
      cnn = false;
    } else {
      std::fprintf(stderr, "usage: bench_amp [--epochs N] [--data DIR] [--skip-gemm] [--skip-cnn]\n");
      return 2;
    }
  }
  try {
    if (gemm) gemm_section();
    if (cnn) cnn_section(epochs, root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_amp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
