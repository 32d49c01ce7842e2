// tests/test_model_parallel.cpp: model parallelism in one process: a model whose parts live on
// different devices (module.to(device) per part), the activation moved between them by the
// differentiable device copy, so backward carries the gradient back across. On the CPU: a model
// split into parts with a copy at each boundary trains to the unsplit model's weights, with
// every gradient on its part. With a GPU (BRISK_WITH_CUDA builds; skipped without one): an
// embedding on the CPU and the rest on CUDA, the guide's heterogeneous case, trains to the
// all-CPU weights. Not here: pipelines across ranks (tests/dist/test_pipeline.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/functions.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#include "tests/cuda_test.h"
#endif

using namespace brisk;

namespace {

// Parts run in order; before part k its input moves to part k's device. On one device
// Tensor::to is a no-op, so `copy_on_same_device` makes the boundary a real copy there too
// (clone: a dense copy whose backward passes the gradient through, as to_device's does).
class Placed : public nn::Module {
 public:
  Placed(std::vector<nn::ModulePtr> parts, std::vector<Device> devices, bool copy_on_same_device)
      : nn::Module("Placed"), devices_(std::move(devices)), copy_(copy_on_same_device) {
    for (size_t k = 0; k < parts.size(); ++k) {
      parts_.push_back(register_module(std::to_string(k), parts[k]));
      parts_[k]->to(devices_[k]);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    boundaries.clear();
    for (size_t k = 0; k < parts_.size(); ++k) {
      Tensor moved = h.device() == devices_[k] && copy_ ? h.clone() : h.to(devices_[k]);
      if (k > 0) boundaries.push_back({h, moved});
      h = (*parts_[k])(moved);
    }
    return h;
  }
  std::vector<std::pair<Tensor, Tensor>> boundaries;  // (before, after) each move of the last forward

 private:
  std::vector<nn::ModulePtr> parts_;
  std::vector<Device> devices_;
  bool copy_;
};

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(42);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 12), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(12, 12),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(12, 3)});
  m->to(DType::F64);
  return m;
}

// The same layers as mlp(), cut into parts [0, 2), [2, 4), [4, 5).
std::vector<nn::ModulePtr> mlp_parts() {
  auto whole = mlp();
  return {std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{(*whole)[0], (*whole)[1]}),
          std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{(*whole)[2], (*whole)[3]}),
          std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{(*whole)[4]})};
}

double max_rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to(Device::cpu()).to_vector<double>(), y = b[i].to(Device::cpu()).to_vector<double>();
    REQUIRE(x.size() == y.size());
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]) / (1 + std::abs(y[k])));
  }
  return worst;
}

}  // namespace

TEST_CASE("model parallel: parts joined by device copies train to the unsplit model's weights") {
  auto whole = mlp();
  Placed split(mlp_parts(), {Device::cpu(), Device::cpu(), Device::cpu()}, /*copy_on_same_device=*/true);
  REQUIRE(split.parameters().size() == whole->parameters().size());
  optim::SGD opt_whole(whole->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_split(split.parameters(), {.lr = 0.05, .momentum = 0.9});
  manual_seed(1);
  for (int step = 0; step < 10; ++step) {
    Tensor x = cast(randn({16, 6}), DType::F64), y = cast(randn({16, 3}), DType::F64);
    opt_whole.zero_grad();
    mse_loss((*whole)(x), y).backward();
    opt_whole.step();
    opt_split.zero_grad();
    mse_loss(split(x), y).backward();
    // Each boundary is a copy in a buffer of its own, and the gradient crossed it.
    REQUIRE(split.boundaries.size() == 2);
    for (const auto& [before, after] : split.boundaries) {
      CHECK(before.data_ptr() != after.data_ptr());
      CHECK(after.requires_grad());
    }
    for (const Tensor& p : split.parameters()) REQUIRE(p.grad().defined());
    opt_split.step();
  }
  CHECK(max_rel_diff(split.parameters(), whole->parameters()) < 1e-12);
}

TEST_CASE("model parallel: a move to the device a tensor is on is free (the same tensor)") {
  Tensor x = randn({4, 4});
  Tensor y = x.to(Device::cpu());
  CHECK(y.data_ptr() == x.data_ptr());
}

#ifdef BRISK_WITH_CUDA
TEST_CASE("model parallel: an embedding on the CPU and the rest on CUDA train to the all-CPU weights") {
  BRISK_REQUIRE_GPU();
  auto make = [] {
    manual_seed(9);
    std::vector<nn::ModulePtr> parts = {std::make_shared<nn::Embedding>(50, 16),
                                        std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
                                            std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 16, 32),
                                            std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(32, 3)})};
    for (auto& p : parts) p->to(DType::F64);
    return parts;
  };
  Placed cpu_only(make(), {Device::cpu(), Device::cpu()}, /*copy_on_same_device=*/false);
  Placed mixed(make(), {Device::cpu(), test::kGpu}, /*copy_on_same_device=*/false);
  const auto params = mixed.named_parameters();
  for (const auto& [name, p] : params) CHECK(p.device() == (name.rfind("0.", 0) == 0 ? Device::cpu() : test::kGpu));
  optim::SGD opt_cpu(cpu_only.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_mixed(mixed.parameters(), {.lr = 0.05, .momentum = 0.9});
  manual_seed(2);
  for (int step = 0; step < 10; ++step) {
    Tensor idx = randint(0, 50, {8, 4});  // I64 token ids, on the CPU where the embedding is
    Tensor y = cast(randn({8, 3}), DType::F64);
    opt_cpu.zero_grad();
    mse_loss(cpu_only(idx), y).backward();
    opt_cpu.step();
    opt_mixed.zero_grad();
    Tensor out = mixed(idx);
    CHECK(out.device() == test::kGpu);
    mse_loss(out, y.to(test::kGpu)).backward();
    for (const auto& [name, p] : mixed.named_parameters()) REQUIRE(p.grad().device() == p.device());
    opt_mixed.step();
  }
  CHECK(max_rel_diff(mixed.parameters(), cpu_only.parameters()) < 1e-10);
}
#endif  // BRISK_WITH_CUDA
