// examples/bench/bench_int8.cpp: int8 against F32 in one run: (1) the int8 GEMM
// (kernels/cpu/gemm_i8.h, weights packed once) against brisk's F32 matmul at 256..2048, with
// int32 and with F32 (fused epilogue) outputs; (2) the Fashion-MNIST SmallCNN's inference,
// F32 against static int8 (compress/quantize.h: fuse, calibrate, convert) at batch 128 and 1; (3) the
// accuracy of both on the 10k test images after a short F32 training (skipped with --no-train
// or when the data is absent). Goals (issue 15): int8 GEMM >= 2x F32 at 1024+, int8 CNN >= 2x
// F32, accuracy within 0.5 points.
// Usage: bench_int8 [--no-train] [--no-gemm] [--epochs N]   (threads: OMP_NUM_THREADS, default all cores)
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "brisk.h"
#include "compress/quantize.h"
#include "examples/bench/bench_common.h"
#include "kernels/cpu/gemm_i8.h"

using namespace brisk;
namespace q = brisk::nn::quantize;
using brisk::kernels::cpu::MatrixRef;

namespace {

void bench_gemm() {
  std::printf("== GEMM c = a @ b, square n, %d threads, int8 path %s\n", omp_get_max_threads(),
              kernels::cpu::i8_gemm_path_name(kernels::cpu::i8_gemm_path()));
  std::printf("%6s %12s %14s %14s %10s %10s\n", "n", "F32 GFLOP/s", "i8->i32 GOP/s", "i8->F32 GOP/s", "i32/F32",
              "F32out/F32");
  std::mt19937 rng(1);
  for (int64_t n : {256, 512, 1024, 2048}) {
    const Tensor a = randn(Shape{n, n}), b = randn(Shape{n, n});
    const int iters = n <= 512 ? 20 : n <= 1024 ? 4 : 1;
    const double t_f32 = bench::seconds_per_call([&] { bench::keep(matmul(a, b)); }, iters, 5);
    std::vector<uint8_t> ai(size_t(n * n));
    std::vector<int8_t> bi(size_t(n * n));
    std::uniform_int_distribution<int> du(0, 255), ds(-128, 127);
    for (auto& v : ai) v = uint8_t(du(rng));
    for (auto& v : bi) v = int8_t(ds(rng));
    const kernels::cpu::PackedI8 packed = kernels::cpu::pack_i8({bi.data(), n, n, n, 1});
    std::vector<int32_t> c(size_t(n * n));
    std::vector<float> out(size_t(n * n)), scale(size_t(n), 1e-3f);
    const MatrixRef<const uint8_t> ar{ai.data(), n, n, n, 1};
    const double t_i32 = bench::seconds_per_call(
        [&] {
          kernels::cpu::gemm_u8s8(ar, 3, packed, MatrixRef<int32_t>{c.data(), n, n, n, 1});
        },
        iters, 5);
    kernels::cpu::I8Epilogue e{.a_scale = 0.01f, .col_scale = scale.data()};
    e.out = {out.data(), n, n, n, 1};
    const double t_f = bench::seconds_per_call([&] { kernels::cpu::gemm_u8s8(ar, 3, packed, e); }, iters, 5);
    const double ops = 2.0 * double(n) * double(n) * double(n);
    std::printf("%6lld %12.1f %14.1f %14.1f %9.2fx %9.2fx\n", (long long)n, ops / t_f32 * 1e-9, ops / t_i32 * 1e-9,
                ops / t_f * 1e-9, t_f32 / t_i32, t_f32 / t_f);
  }
}

// The SmallCNN's inputs: (u8 / 255 - mean) / std.
Tensor normalize(const Tensor& images_u8) {
  return div(sub(div(cast(images_u8, DType::F32), scalar_tensor(255.0)), scalar_tensor(0.2860)), scalar_tensor(0.3530));
}

std::shared_ptr<nn::models::SmallCNN> quantized_copy(const nn::models::SmallCNN& f32, const Tensor& calib) {
  auto m = std::make_shared<nn::models::SmallCNN>();
  m->load_state_dict(f32.state_dict());
  q::prepare(m);
  NoGradGuard g;
  for (int64_t i = 0; i + 128 <= calib.size(0); i += 128) (*m)(calib.narrow(0, i, 128));
  q::convert(m);
  return m;
}

void bench_cnn(nn::models::SmallCNN& f32, const Tensor& calib) {
  auto qm = quantized_copy(f32, calib);
  f32.eval();
  std::printf("== SmallCNN inference (eval, no grad), %d threads\n", omp_get_max_threads());
  std::printf("%6s %12s %12s %8s\n", "batch", "F32 ms", "int8 ms", "speedup");
  NoGradGuard g;
  for (int64_t batch : {128, 32, 1}) {
    const Tensor x = calib.narrow(0, 0, batch).contiguous();
    const int iters = batch >= 32 ? 5 : 50;
    const double tf = bench::seconds_per_call([&] { bench::keep(f32(x)); }, iters, 7);
    const double tq = bench::seconds_per_call([&] { bench::keep((*qm)(x)); }, iters, 7);
    std::printf("%6lld %12.3f %12.3f %7.2fx\n", (long long)batch, tf * 1e3, tq * 1e3, tf / tq);
  }
}

double accuracy(nn::Module& m, const Tensor& x, const Tensor& y) {
  NoGradGuard g;
  m.eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < x.size(0); i += 500) {
    const int64_t n = std::min<int64_t>(500, x.size(0) - i);
    correct += sum(eq(argmax(m(x.narrow(0, i, n)), 1), y.narrow(0, i, n))).item<int64_t>();
  }
  return double(correct) / double(x.size(0));
}

}  // namespace

int main(int argc, char** argv) {
  bool train = true, gemm = true;
  int epochs = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-train")) train = false;
    if (!std::strcmp(argv[i], "--no-gemm")) gemm = false;
    if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::atoi(argv[++i]);
  }
  if (gemm) bench_gemm();

  manual_seed(0);
  nn::models::SmallCNN model;
  const bool have_data =
      std::filesystem::exists(std::string(data::FashionMNIST::kDefaultRoot) + "/train-images-idx3-ubyte.gz");
  Tensor train_x, train_y, test_x, test_y;
  if (have_data) {
    data::FashionMNIST tr(data::FashionMNIST::kDefaultRoot, true), te(data::FashionMNIST::kDefaultRoot, false);
    train_x = normalize(tr.images());
    train_y = tr.labels();
    test_x = normalize(te.images());
    test_y = te.labels();
  } else {
    std::printf("(no Fashion-MNIST at %s: random inputs, no accuracy)\n", data::FashionMNIST::kDefaultRoot);
    train_x = randn(Shape{1024, 1, 28, 28});
    train = false;
  }
  if (train) {
    const double t0 = bench::now_s();
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    model.train();
    for (int e = 0; e < epochs; ++e) {
      for (int64_t i = 0; i + 128 <= train_x.size(0); i += 128) {
        opt.zero_grad();
        Tensor loss = cross_entropy(model(train_x.narrow(0, i, 128)), train_y.narrow(0, i, 128));
        loss.backward();
        opt.step();
      }
    }
    std::printf("(trained F32 SmallCNN for %d epoch(s), Adam 1e-3, batch 128: %.1f s)\n", epochs, bench::now_s() - t0);
  }
  const Tensor calib = train_x.narrow(0, 0, 1024).contiguous();
  bench_cnn(model, calib);
  if (train) {
    auto qm = quantized_copy(model, calib);
    const double af = accuracy(model, test_x, test_y), aq = accuracy(*qm, test_x, test_y);
    std::printf("== accuracy on the 10k test images: F32 %.4f, int8 %.4f, difference %+.2f points\n", af, aq,
                (aq - af) * 100);
  }
  return 0;
}
