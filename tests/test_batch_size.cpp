// tests/test_batch_size.cpp: the allocator's limit (OutOfMemoryError past it, restored) and the
// batch-size finder (train/batch_size.h): under a budget it returns exactly the largest batch
// whose step's measured peak fits (checked against peaks measured without any limit), scales
// the learning rate by the linear and square-root rules, restores the allocator's limit, lets
// other errors through, and refuses a CPU search without a budget.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "brisk.h"
#include "engine/backend.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "train/batch_size.h"

using namespace brisk;

namespace {

// One training step of a small MLP at batch b: parameters and Adam state persist across calls
// (as in a real search); activations and gradients of the step are freed when it returns.
struct MlpStep {
  nn::Sequential model;
  std::unique_ptr<optim::Adam> opt;
  MlpStep() {
    model.push_back(std::make_shared<nn::Linear>(64, 128));
    model.push_back(std::make_shared<nn::ReLU>());
    model.push_back(std::make_shared<nn::Linear>(128, 10));
    opt = std::make_unique<optim::Adam>(model.parameters());
    (*this)(4);  // creates Adam's state, so later steps allocate the same way
  }
  void operator()(int64_t b) {
    Tensor x = randn({b, 64});
    Tensor y = zeros({b}, DType::I64);
    opt->zero_grad();
    Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
    opt->step();
  }
};

size_t peak_of(MlpStep& step, int64_t b) {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  a.reset_peak();
  step(b);
  size_t p = a.stats().peak;
  a.empty_cache();
  return p;
}

}  // namespace

TEST_CASE("batch_size: the allocator's limit throws OutOfMemoryError and can be lifted") {
  Allocator& a = cpu_allocator();
  REQUIRE(a.limit() == 0);
  a.empty_cache();
  size_t in_use = a.stats().allocated;
  a.set_limit(in_use + (1 << 20));
  CHECK_NOTHROW(zeros({1000}));  // 4 KB fits
  CHECK_THROWS_WITH_AS(zeros({1 << 20}), doctest::Contains("limit"), OutOfMemoryError);
  a.set_limit(0);
  CHECK_NOTHROW(zeros({1 << 20}));
}

TEST_CASE("batch_size: the finder returns the largest batch whose peak fits the budget") {
  MlpStep step;
  // A budget between the peaks of batch 300 and 301 would be too fine for size classes;
  // take the peak at 300 and check the answer against measured peaks either side of it.
  size_t budget = peak_of(step, 300);
  training::BatchSizeSearch s;
  s.memory_budget = budget;
  s.max_batch = 4096;
  s.base_lr = 1e-3;
  s.base_batch = 100;
  training::BatchSizeResult r = training::find_batch_size(std::ref(step), s);
  INFO(r.to_string());
  REQUIRE(r.batch_size >= 300);
  CHECK(r.batch_size < 4096);
  CHECK(peak_of(step, r.batch_size) <= budget);
  CHECK(peak_of(step, r.batch_size + 1) > budget);
  CHECK(r.peak_bytes == peak_of(step, r.batch_size));
  CHECK(r.lr == doctest::Approx(1e-3 * double(r.batch_size) / 100.0));
  // Doubling from 1 found the first failure at a power of two, then bisected.
  CHECK(r.probes.front().batch == 1);
  CHECK(r.probes.front().fits);
  bool saw_oom = false;
  for (const auto& p : r.probes) saw_oom |= !p.fits;
  CHECK(saw_oom);
  CHECK(cpu_allocator().limit() == 0);  // restored
}

TEST_CASE("batch_size: max_batch caps the search; nothing fitting gives 0") {
  MlpStep step;
  training::BatchSizeSearch s;
  s.memory_budget = size_t(1) << 30;
  s.max_batch = 48;
  training::BatchSizeResult r = training::find_batch_size(std::ref(step), s);
  CHECK(r.batch_size == 48);
  CHECK(r.probes.back().batch == 48);

  cpu_allocator().empty_cache();
  s.memory_budget = cpu_allocator().stats().allocated + 64;  // not even one batch's input
  s.initial = 8;
  r = training::find_batch_size(std::ref(step), s);
  CHECK(r.batch_size == 0);
  CHECK(r.probes.size() == 1);
  CHECK(r.to_string().find("nothing fits") != std::string::npos);
}

TEST_CASE("batch_size: errors and learning-rate rules") {
  MlpStep step;
  training::BatchSizeSearch s;  // no budget on the CPU
  CHECK_THROWS_WITH_AS(training::find_batch_size(std::ref(step), s), doctest::Contains("memory_budget"), Error);
  s.memory_budget = size_t(1) << 30;
  s.initial = 0;
  CHECK_THROWS_WITH_AS(training::find_batch_size(std::ref(step), s), doctest::Contains("initial"), Error);
  s.initial = 1;
  // A step failing for another reason is not "too large": the error reaches the caller.
  auto bad = [](int64_t b) {
    if (b > 2) throw std::logic_error("not an allocation failure");
  };
  CHECK_THROWS_AS(training::find_batch_size(bad, s), std::logic_error);
  CHECK(cpu_allocator().limit() == 0);
  CHECK(training::scale_lr(0.1, 32, 128, training::LrScaling::Linear) == doctest::Approx(0.4));
  CHECK(training::scale_lr(0.1, 32, 128, training::LrScaling::Sqrt) == doctest::Approx(0.2));
  CHECK(training::scale_lr(0.1, 0, 128, training::LrScaling::Linear) == 0.1);
  CHECK(training::scale_lr(0.1, 32, 128, training::LrScaling::None) == 0.1);
}
