// tests/test_cuda_amp.cpp: mixed precision on CUDA: the fused unscale (amp_unscale) against the CPU
// pass (F32, F16, BF16, F64; Inf and NaN in some tensors; many tensors and one over several
// blocks), autocast F16 with a GradScaler and BF16 without, matmul and conv2d in 16 bits with
// F32 accumulation against the CPU F32 result. Skipped (with a message) without a GPU; in a
// build without BRISK_WITH_CUDA this file is empty.
#include <doctest/doctest.h>

#ifdef BRISK_WITH_CUDA

#include <cmath>
#include <vector>

#include "engine/autocast.h"
#include "engine/functions.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tests/cuda_test.h"

using namespace brisk;
using brisk::test::kGpu;

TEST_CASE("cuda amp: the fused unscale equals the CPU pass, flags included") {
  BRISK_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    CAPTURE(dt);
    std::vector<Tensor> cpu, gpu;
    const std::vector<int64_t> sizes = {1, 7, 1000, 70000, 3};
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor t = cast(randn({sizes[i]}) * 100.0, dt);
      if (i == 1) t.fill_(INFINITY);
      if (i == 3) {
        Tensor s = slice(t, 0, 65000, 65001);
        s.fill_(NAN);  // past the first block of the big tensor
      }
      cpu.push_back(t);
      gpu.push_back(t.to(kGpu));
    }
    const std::vector<uint8_t> fc = amp_unscale_(cpu, 1.0f / 1024).to_vector<uint8_t>();
    const std::vector<uint8_t> fg = amp_unscale_(gpu, 1.0f / 1024).to_vector<uint8_t>();
    CHECK(fc == std::vector<uint8_t>{0, 1, 0, 1, 0});
    CHECK(fg == fc);
    for (size_t i = 0; i < cpu.size(); ++i) {
      const std::vector<double> a = cpu[i].to_vector<double>(), b = gpu[i].to(Device::cpu()).to_vector<double>();
      for (size_t j = 0; j < a.size(); ++j) {
        if (std::isnan(a[j])) {
          CHECK(std::isnan(b[j]));
        } else {
          CHECK(a[j] == b[j]);
        }
      }
    }
  }
}

TEST_CASE("cuda amp: F16 autocast with a GradScaler trains like F32; BF16 without one") {
  BRISK_REQUIRE_GPU();
  for (DType dt : {DType::F16, DType::BF16}) {
    CAPTURE(dt);
    manual_seed(0);
    nn::Linear ref(16, 4), m(16, 4);
    m.load_state_dict(ref.state_dict());
    m.to(kGpu);
    optim::SGD opt_ref(ref.parameters(), {.lr = 0.1});
    optim::SGD opt(m.parameters(), {.lr = 0.1});
    optim::GradScaler scaler({.enabled = dt == DType::F16});
    Tensor x = randn({32, 16});
    Tensor xg = x.to(kGpu);
    for (int step = 0; step < 5; ++step) {
      opt_ref.zero_grad();
      sum(ref(x) * ref(x)).backward();
      opt_ref.step();
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(kGpu, dt);
        Tensor y = m(xg);
        CHECK(y.dtype() == dt);
        loss = sum(y * y);
      }
      CHECK(loss.dtype() == DType::F32);
      scaler.scale(loss).backward();
      CHECK(m.weight().grad().dtype() == DType::F32);
      CHECK(scaler.step(opt));
      scaler.update();
    }
    const std::vector<double> a = ref.weight().to_vector<double>();
    const std::vector<double> b = m.weight().to(Device::cpu()).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 0.02 * (1 + std::abs(a[i])));
  }
}

TEST_CASE("cuda amp: conv2d in F16 and BF16 (cuDNN, F32 accumulation) is close to the CPU F32 result") {
  BRISK_REQUIRE_GPU();
  manual_seed(1);
  Tensor x = randn({2, 8, 12, 12}), w = randn({16, 8, 3, 3}) * 0.1;
  const Tensor ref = nn::functional::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  for (DType dt : {DType::F16, DType::BF16}) {
    CAPTURE(dt);
    AutocastGuard autocast(kGpu, dt);
    const Tensor y = nn::functional::conv2d(x.to(kGpu), w.to(kGpu), Tensor(), {1, 1}, {1, 1});
    CHECK(y.dtype() == dt);
    const std::vector<double> a = ref.to_vector<double>(), b = y.to(Device::cpu()).to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(a[i])));
    CHECK(worst < (dt == DType::F16 ? 5e-3 : 3e-2));
  }
}

#endif  // BRISK_WITH_CUDA
