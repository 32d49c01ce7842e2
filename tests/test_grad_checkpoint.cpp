// tests/test_grad_checkpoint.cpp: gradient checkpointing (nn/grad_checkpoint.h): gradients
// bit-identical to the plain run (parameters and inputs, dropout included, the generator left
// where the plain run leaves it), several inputs and outputs, a lower activation peak by the
// allocator's own count, no-grad pass-through, and the errors (every < 1, an input modified in
// place, a second backward, double backward).
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/random.h"
#include "nn/functional.h"
#include "nn/grad_checkpoint.h"
#include "nn/layers.h"

using namespace brisk;

namespace {

std::shared_ptr<nn::Sequential> deep_mlp(int64_t width, int layers, double dropout) {
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i) {
    seq->push_back(std::make_shared<nn::Linear>(width, width));
    seq->push_back(std::make_shared<nn::ReLU>());
    if (dropout > 0) seq->push_back(std::make_shared<nn::Dropout>(dropout));
  }
  return seq;
}

std::vector<std::vector<float>> grads_of(nn::Module& m, const Tensor& x) {
  std::vector<std::vector<float>> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().to_vector<float>());
  g.push_back(x.grad().to_vector<float>());
  return g;
}

}  // namespace

TEST_CASE("grad_checkpoint: gradients are bit-identical to the plain run, dropout included") {
  manual_seed(3);
  auto seq = deep_mlp(32, 6, 0.2);
  Tensor x = randn({16, 32}).requires_grad_();

  manual_seed(11);
  Tensor plain = square((*seq)(x)).sum();
  plain.backward();
  auto want = grads_of(*seq, x);
  const uint64_t offset_plain = default_generator().offset();

  for (int64_t every : {1, 2, 4, 100}) {
    CAPTURE(every);
    seq->zero_grad();
    x.zero_grad();
    manual_seed(11);
    Tensor ck = square(nn::checkpoint_sequential(*seq, every, x)).sum();
    CHECK(ck.item<double>() == plain.item<double>());
    ck.backward();
    CHECK(default_generator().offset() == offset_plain);  // the recomputation left no trace
    auto got = grads_of(*seq, x);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
  }
}

TEST_CASE("grad_checkpoint: several inputs and outputs; inputs without grad; no_grad") {
  Tensor a = randn({5}).requires_grad_(), b = randn({5}).requires_grad_(), c = randn({5});
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{sin(in[0] * in[1]), in[0] + in[2], in[2]}; };
  auto plain = fn({a, b, c});
  (plain[0].sum() + square(plain[1]).sum()).backward();
  auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  a.zero_grad();
  b.zero_grad();
  auto ck = checkpoint(fn, {a, b, c});
  REQUIRE(ck.size() == 3);
  CHECK(ck[2].impl() != c.impl());  // an input returned as is comes back as a copy
  (ck[0].sum() + square(ck[1]).sum()).backward();
  CHECK(a.grad().to_vector<double>() == ga);
  CHECK(b.grad().to_vector<double>() == gb);
  {
    NoGradGuard ng;
    auto out = checkpoint(fn, {a, b, c});
    CHECK_FALSE(out[0].requires_grad());
  }
  // Parameters inside the segment get gradients even when no input requires grad.
  nn::Linear fc(5, 3);
  Tensor y = checkpoint([&](const Tensor& t) { return fc.forward(t); }, c).sum();
  y.backward();
  CHECK(fc.parameters()[0].grad().defined());
}

TEST_CASE("grad_checkpoint: the activation peak is lower") {
  manual_seed(0);
  // Activations (4096 x 64 floats = 1 MiB per layer) dominate the weights (16 KiB each).
  auto seq = deep_mlp(64, 16, 0.0);
  Tensor x = randn({4096, 64});
  auto peak_of = [&](int64_t every) {
    seq->zero_grad(true);
    cpu_allocator().empty_cache();
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    Tensor out = every > 0 ? nn::checkpoint_sequential(*seq, every, x) : (*seq)(x);
    out.sum().backward();
    return cpu_allocator().stats().peak - base;
  };
  size_t plain = peak_of(0), ck = peak_of(8);  // 4 segments of 4 layers
  INFO("plain peak ", plain, " bytes, checkpointed ", ck);
  CHECK(double(ck) < 0.6 * double(plain));
}

TEST_CASE("grad_checkpoint: errors") {
  auto seq = deep_mlp(4, 2, 0.0);
  Tensor x = randn({2, 4}).requires_grad_();
  CHECK_THROWS_WITH_AS(nn::checkpoint_sequential(*seq, 0, x), doctest::Contains("every"), Error);
  CHECK_THROWS_WITH_AS(checkpoint(CheckpointFn(), {x}), doctest::Contains("no function"), Error);

  Tensor h = x * 1.0;
  Tensor y = checkpoint([](const Tensor& t) { return square(t); }, h).sum();
  {
    NoGradGuard ng;
    h.add_(1.0);
  }
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified in place"), Error);

  Tensor z = checkpoint([](const Tensor& t) { return square(t); }, x).sum();
  z.backward();
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("second time"), Error);

  Tensor w = checkpoint([](const Tensor& t) { return square(t); }, x).sum();
  CHECK_THROWS_WITH_AS(grad(std::vector<Tensor>{w}, std::vector<Tensor>{x}, {}, false, true),
                       doctest::Contains("double backward"), Error);
}
