// tests/test_linear_cross_entropy.cpp: linear_cross_entropy (engine/ops/linear_cross_entropy.cpp)
// against the unfused linear + cross_entropy: values and gradients over several vocabulary
// chunks, every reduction with a per-row incoming gradient, BF16 autocast, the errors, and
// GPT2::loss against cross_entropy of GPT2::forward.
// Not here: the conformance rows against plain loops (opcheck/specs_linear_cross_entropy.cpp).
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/autocast.h"
#include "engine/dispatch.h"
#include "engine/op.h"
#include "engine/op_params.h"
#include "nn/models/gpt2.h"

using namespace brisk;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return amax(abs(cast(a, DType::F64) - cast(b, DType::F64))).item<double>();
}

struct Grads {
  Tensor loss{}, dx{}, dw{}, db{};
};

// loss (summed against `weights` when per-row) and the gradients of x, w and bias.
Grads run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& target, Reduction r,
          double eps, const Tensor& weights) {
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
         b = b0.detach().requires_grad_(true);
  Tensor loss = fused ? linear_cross_entropy(x, w, target, b, r, eps) : cross_entropy(linear(x, w, b), target, r, eps);
  Tensor total = r == Reduction::None ? sum(loss * weights) : loss;
  total.backward();
  return {loss.detach(), x.grad(), w.grad(), b.grad()};
}

void check_against_unfused(DType dtype, double tol) {
  // 100 rows -> 20928 classes a chunk (Note [Linear cross-entropy chunks]): three chunks.
  const int64_t n = 100, k = 8, v = 50000;
  manual_seed(7);
  const Tensor x = cast(randn({n, k}), dtype), w = cast(randn({v, k}) * 0.5, dtype), b = cast(randn({v}), dtype);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 7 == 3 ? -100 : (i * 4999 + 13) % v);
  const Tensor target = from_data(t.data(), {n}, Device::cpu());
  const Tensor weights = cast(rand({n}), dtype);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (double eps : {0.0, 0.1}) {
      CAPTURE(int(r));
      CAPTURE(eps);
      const Grads f = run(true, x, w, b, target, r, eps, weights);
      const Grads u = run(false, x, w, b, target, r, eps, weights);
      // Relative to the size of each quantity.
      auto rel = [](const Tensor& a, const Tensor& ref) {
        return max_diff(a, ref) / std::max(1.0, amax(abs(cast(ref, DType::F64))).item<double>());
      };
      CHECK(rel(f.loss, u.loss) < tol);
      CHECK(rel(f.dx, u.dx) < tol);
      CHECK(rel(f.dw, u.dw) < tol);
      CHECK(rel(f.db, u.db) < tol);
    }
  }
}

}  // namespace

TEST_CASE("linear_cross_entropy: equals linear + cross_entropy over several vocabulary chunks, F64 and F32") {
  check_against_unfused(DType::F64, 1e-12);
  check_against_unfused(DType::F32, 1e-5);
}

TEST_CASE("linear_cross_entropy: (*, K) input with target (*), and no bias") {
  manual_seed(3);
  const Tensor x = randn({2, 3, 5}, DType::F64), w = randn({11, 5}, DType::F64);
  const std::vector<int64_t> t = {0, 10, 4, 4, -100, 7};
  const Tensor target = from_data(t.data(), {2, 3}, Device::cpu());
  const Tensor fused = linear_cross_entropy(x, w, target, {}, Reduction::None);
  CHECK(fused.sizes() == Shape{2, 3});
  const Tensor unfused =
      nn::functional::cross_entropy(linear(x, w).reshape({6, 11}), target.reshape({6}), {}, Reduction::None);
  CHECK(max_diff(fused.reshape({6}), unfused) < 1e-12);
  const Tensor mean = nn::functional::linear_cross_entropy(x, w, target);
  CHECK(mean.dim() == 0);
  CHECK(std::abs(mean.item<double>() -
                 nn::functional::cross_entropy(linear(x, w).reshape({6, 11}), target.reshape({6})).item<double>()) <
        1e-12);
}

TEST_CASE("linear_cross_entropy: BF16 autocast multiplies in BF16 and returns an F32 loss near the F32 one") {
  manual_seed(5);
  const Tensor x0 = randn({64, 32}), w0 = randn({300, 32}) * 0.2;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < 64; ++i) t.push_back((i * 37) % 300);
  const Tensor target = from_data(t.data(), {64}, Device::cpu());
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  Tensor loss;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    loss = linear_cross_entropy(x, w, target);
  }
  CHECK(loss.dtype() == DType::F32);
  loss.backward();
  CHECK(x.grad().dtype() == DType::F32);  // through the autocast cast, back to the leaf's dtype
  const Tensor ref = cross_entropy(linear(x0, w0), target);
  CHECK(std::abs(loss.item<double>() - ref.item<double>()) < 2e-2);
  Tensor x2 = x0.detach().requires_grad_(true), w2 = w0.detach().requires_grad_(true);
  cross_entropy(linear(x2, w2), target).backward();
  CHECK(max_diff(x.grad(), x2.grad()) < 2e-2 * std::max(1.0, amax(abs(x2.grad())).item<double>()));
  CHECK(max_diff(w.grad(), w2.grad()) < 2e-2 * std::max(1.0, amax(abs(w2.grad())).item<double>()));
}

TEST_CASE("linear_cross_entropy: bad input is an error naming the op and the shapes") {
  const Tensor x = zeros({4, 3}), w = zeros({5, 3});
  const std::vector<int64_t> good = {0, 1, 2, 4}, bad = {0, 1, 5, 4};
  const Tensor t = from_data(good.data(), {4}, Device::cpu());
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, from_data(bad.data(), {4}, Device::cpu())),
                       doctest::Contains("linear_cross_entropy: target index 5 (row 2) is out of range for 5 classes"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, zeros({5, 2}), t), doctest::Contains("weight must be (V, 3)"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, zeros({5, 3}, DType::F64), t), doctest::Contains("dtypes differ"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t, zeros({4})), doctest::Contains("bias must be (5)"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, cast(t, DType::F32)), doctest::Contains("I64 class indices"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t.narrow(0, 0, 3)), doctest::Contains("linear_cross_entropy: target"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t, {}, Reduction::Mean, 1.5),
                       doctest::Contains("label_smoothing must be in [0, 1]"), Error);
}

namespace {

// GPT2::loss against cross_entropy of the logits GPT2::forward makes: the loss and every
// parameter's gradient.
void check_gpt2_loss(DType dtype, double tol) {
  nn::models::GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 16;
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.dropout = 0;
  manual_seed(11);
  nn::models::GPT2 model(c);
  model.to(dtype);
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < 2 * 9; ++i) {
    ids.push_back((i * 31 + 5) % 97);
    targets.push_back(i == 4 ? -100 : (i * 17 + 3) % 97);
  }
  const Tensor idx = from_data(ids.data(), {2, 9}, Device::cpu());
  const Tensor tgt = from_data(targets.data(), {2, 9}, Device::cpu());

  model.zero_grad();
  const Tensor fused = model.loss(idx, tgt);
  fused.backward();
  NamedTensors fused_grads;
  for (auto& [name, p] : model.named_parameters()) fused_grads.emplace_back(name, p.grad().detach().clone());

  model.zero_grad();
  const Tensor unfused = cross_entropy(model.forward(idx).reshape({18, 97}), tgt.reshape({18}));
  unfused.backward();
  CHECK(fused.dtype() == dtype);
  CHECK(std::abs(fused.item<double>() - unfused.item<double>()) < tol);
  size_t i = 0;
  for (auto& [key, p] : model.named_parameters()) {
    const std::string name = key;  // clang cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(name);
    CHECK(max_diff(fused_grads[i++].second, p.grad()) < tol);
  }
  // Flattened targets, as a (B * T) label vector; other shapes are an error.
  CHECK(model.loss(idx, tgt.reshape({18})).item<double>() == fused.item<double>());
  CHECK_THROWS_WITH_AS(model.loss(idx, tgt.narrow(1, 0, 3)), doctest::Contains("GPT2::loss: targets must be I64"),
                       Error);
}

}  // namespace

TEST_CASE("linear_cross_entropy: GPT2::loss equals cross_entropy of GPT2::forward, with the same gradients") {
  check_gpt2_loss(DType::F64, 1e-12);
  check_gpt2_loss(DType::F32, 1e-5);
}

#ifdef BRISK_WITH_CUDA
// The CUDA kernels are composed of device-agnostic ops (kernels/cuda/linear_cross_entropy.cpp),
// so they run here on CPU tensors, against the CPU kernels, without a GPU.
TEST_CASE("linear_cross_entropy: the CUDA kernels' composition matches the CPU kernels (run on the CPU)") {
  const KernelFn fwd = op_def(OpId::LinearCrossEntropy).kernels[int(DeviceType::CUDA)];
  const KernelFn bwd = op_def(OpId::LinearCrossEntropyBackward).kernels[int(DeviceType::CUDA)];
  const bool registered = fwd != nullptr && bwd != nullptr;
  REQUIRE(registered);
  // 2000 rows -> 4160 classes a chunk there: three chunks.
  const int64_t n = 2000, k = 6, v = 9000;
  manual_seed(9);
  const Tensor x = randn({n, k}, DType::F64), w = randn({v, k}, DType::F64), b = randn({v}, DType::F64);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 9 == 2 ? -100 : (i * 7919) % v);
  const Tensor target = from_data(t.data(), {n}, Device::cpu());
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (double eps : {0.0, 0.2}) {
      CAPTURE(int(r));
      CAPTURE(eps);
      Attrs a;
      CrossEntropyParams{.ignore_index = -100, .label_smoothing = eps, .reduction = r}.store(a);
      const Tensor fin[4] = {x, w, target, b};
      Tensor want[2];
      call(OpId::LinearCrossEntropy, fin, a, want);
      Tensor got[2] = {empty(want[0].sizes(), DType::F64), empty({n}, DType::F64)};
      fwd(std::span<const Tensor>(fin), std::span<Tensor>(got), a);
      CHECK(max_diff(got[0], want[0]) < 1e-9 * std::max(1.0, amax(abs(want[0])).item<double>()));
      CHECK(max_diff(got[1], want[1]) < 1e-10);
      const Tensor g = r == Reduction::None ? rand({n}, DType::F64) : full({}, 0.7, DType::F64);
      const Tensor bin[6] = {g, x, w, target, want[1], b};
      Tensor bwant[3];
      call(OpId::LinearCrossEntropyBackward, bin, a, bwant);
      Tensor bgot[3] = {empty({n, k}, DType::F64), empty({v, k}, DType::F64), empty({v}, DType::F64)};
      bwd(std::span<const Tensor>(bin), std::span<Tensor>(bgot), a);
      for (int i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(max_diff(bgot[i], bwant[i]) < 1e-10 * std::max(1.0, amax(abs(bwant[i])).item<double>()));
      }
    }
  }
}
#endif
