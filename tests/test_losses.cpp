// tests/test_losses.cpp: binary_cross_entropy, huber_loss, cosine_embedding_loss,
// triplet_margin_loss, nll_loss, l1_loss, smooth_l1_loss, binary_cross_entropy_with_logits and
// kl_div (nn/functional.h) against PyTorch 1.13 (tests/data/losses/losses.json,
// made by tests/make_losses_reference.py): the loss for each reduction and the gradients of
// sum(loss * cot) with respect to every floating input, in F64; and their errors.
// Not here: cross_entropy and distillation losses (tests/test_distill.cpp).
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "brisk.h"
#include "tests/reference.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::json;
namespace F = brisk::nn::functional;

namespace {

using test::tensor_of;

Reduction reduction_of(const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

Tensor run(const json& c, std::map<std::string, Tensor>& in, Reduction r) {
  const std::string name = c["name"];
  if (name == "bce" || name == "bce weight")
    return F::binary_cross_entropy(in["x"], in["t"], in.count("w") ? in["w"] : Tensor(), r);
  if (name.rfind("huber", 0) == 0) return F::huber_loss(in["x"], in["t"], r, c["delta"].get<double>());
  if (name.rfind("cosine", 0) == 0)
    return F::cosine_embedding_loss(in["x1"], in["x2"], in["y"], c["margin"].get<double>(), r);
  if (name.rfind("nll", 0) == 0)
    return F::nll_loss(in["x"], in["y"].to(DType::I64), in.count("w") ? in["w"] : Tensor(), r, -100);
  if (name == "l1") return F::l1_loss(in["x"], in["t"], r);
  if (name.rfind("smooth_l1", 0) == 0) return F::smooth_l1_loss(in["x"], in["t"], r, c["beta"].get<double>());
  if (name.rfind("bce_with_logits", 0) == 0)
    return F::binary_cross_entropy_with_logits(in["x"], in["t"], in["w"], in["pw"], r);
  if (name.rfind("kl_div", 0) == 0) return F::kl_div(in["x"], in["t"], r, c["log_target"].get<bool>());
  return F::triplet_margin_loss(in["a"], in["p"], in["n"], c["margin"].get<double>(), c["p"].get<double>(), 1e-6,
                                c["swap"].get<bool>(), r);
}

}  // namespace

TEST_CASE("losses: BCE, Huber, cosine, triplet, NLL, L1, SmoothL1, BCEWithLogits, KLDiv equal PyTorch's") {
  const json ref = test::read_reference("losses/losses.json");
  int checked = 0;
  for (const json& c : ref["cases"]) {
    for (const auto& reduction : c["reductions"].items()) {
      const std::string& rname = reduction.key();
      const json& rr = reduction.value();
      CAPTURE(c["name"].get<std::string>());
      CAPTURE(rname);
      std::map<std::string, Tensor> in;
      for (const auto& [k, v] : c["inputs"].items()) {
        in[k] = tensor_of(v);
        if (rr["grads"].contains(k)) in[k].requires_grad_(true);
      }
      Tensor loss = run(c, in, reduction_of(rname));
      CHECK(allclose(loss, tensor_of(rr["loss"]), 1e-12, 1e-12));
      (loss * tensor_of(rr["cot"])).sum().backward();
      for (const auto& grad : rr["grads"].items()) {
        const std::string& k = grad.key();
        const json& g = grad.value();
        CAPTURE(k);
        REQUIRE(in[k].grad().defined());
        CHECK(allclose(in[k].grad(), tensor_of(g), 1e-10, 1e-12));
      }
      ++checked;
    }
  }
  CHECK(checked == 51);  // 17 cases x 3 reductions
}

TEST_CASE("losses: bad inputs are clear errors") {
  Tensor p = full({2, 2}, 0.5), t = zeros({2, 2});
  CHECK(error_text([&] {
          F::binary_cross_entropy(full({2, 2}, 1.5), t);
        }).find("must be in [0, 1]") != std::string::npos);
  CHECK(error_text([&] { F::binary_cross_entropy(p, zeros({3})); }).find("does not match input") != std::string::npos);
  CHECK(error_text([&] { F::huber_loss(p, t, Reduction::Mean, 0.0); }).find("delta must be positive") !=
        std::string::npos);
  CHECK(error_text([&] { F::cosine_embedding_loss(p, p, zeros({3})); }).find("cosine_embedding_loss: expects") !=
        std::string::npos);
  CHECK(error_text([&] {
          F::triplet_margin_loss(p, p, zeros({2, 3}));
        }).find("triplet_margin_loss: expects") != std::string::npos);
  // BCE at exactly 0 and 1: PyTorch's clamp at -100 keeps the loss finite.
  CHECK(F::binary_cross_entropy(from_vector({0, 1}, {2}), from_vector({1, 0}, {2})).item<double>() ==
        doctest::Approx(100));
}
