// tests/test_attention.cpp: the fused scaled_dot_product_attention against PyTorch 2.15's
// (tests/data/attention/reference.safetensors, made by tests/make_attention_reference.py):
// values and gradients in F32 over head sizes 32-128, odd T and S, causal (square and
// end-aligned), Bool and float masks and a custom scale; the allocator's peak for forward and
// backward at T = 2048 against the math form's; 16-bit inputs; a row with no key; errors.
// Not here: the specs against plain loops and the gradchecks (opcheck/specs_attention.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "brisk.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace brisk;

namespace {

const SafetensorsFile& reference() {
  static const SafetensorsFile f =
      load_safetensors((::brisk::test::data_dir() / "attention" / "reference.safetensors").string());
  return f;
}

Tensor case_tensor(const std::string& key) {
  for (const auto& [name, t] : reference().tensors)
    if (name == key) return t;
  return Tensor();
}

double max_abs(const Tensor& t) { return amax(abs(t.to(DType::F64))).item<double>(); }

// |got - want| <= tol * (1 + max |want|): F32 against PyTorch's F64 math rounded to F32.
void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  REQUIRE(got.sizes() == want.sizes());
  const double err = max_abs(sub(got.to(DType::F64), want.to(DType::F64)));
  const double bound = tol * (1 + max_abs(want));
  CAPTURE(what);
  CAPTURE(err);
  CAPTURE(bound);
  CHECK(err <= bound);
}

}  // namespace

TEST_CASE("attention: the fused op gives PyTorch's values and gradients (F32, head sizes 32-128, masks)") {
  for (const auto& [key, options_text] : reference().metadata) {
    const std::string name = key;  // (a structured binding cannot be captured by CAPTURE's lambda under clang)
    if (name == "torch_version") continue;
    const nlohmann::json o = nlohmann::json::parse(options_text);
    CAPTURE(name);
    const bool causal = o.value("causal", false);
    const std::optional<double> scale =
        o.contains("scale") ? std::optional<double>(o["scale"].get<double>()) : std::nullopt;
    const Tensor mask = case_tensor(name + ".mask");
    for (const bool math : {false, true}) {
      Tensor q = case_tensor(name + ".q").clone().requires_grad_(true);
      Tensor k = case_tensor(name + ".k").clone().requires_grad_(true);
      Tensor v = case_tensor(name + ".v").clone().requires_grad_(true);
      Tensor out = math ? scaled_dot_product_attention_math(q, k, v, mask, 0.0, causal, scale)
                        : scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
      (out * case_tensor(name + ".gout")).sum().backward();
      const std::string form = math ? " (math form)" : " (fused)";
      check_close(out, case_tensor(name + ".out"), 1e-5, "out" + form);
      check_close(q.grad(), case_tensor(name + ".dq"), 1e-5, "dq" + form);
      check_close(k.grad(), case_tensor(name + ".dk"), 1e-5, "dk" + form);
      check_close(v.grad(), case_tensor(name + ".dv"), 1e-5, "dv" + form);
    }
  }
}

TEST_CASE("attention: forward and backward at T = 2048 take at most 1/8 of the math form's memory") {
  // One layer of a GPT-2-like model: 4 heads of 64, causal.
  manual_seed(11);
  const int64_t H = 4, T = 2048, D = 64;
  Tensor q = randn({1, H, T, D}), k = randn({1, H, T, D}), v = randn({1, H, T, D});
  auto peak_of = [&](bool math) {
    Tensor ql = q.clone().requires_grad_(true), kl = k.clone().requires_grad_(true),
           vl = v.clone().requires_grad_(true);
    Allocator& a = cpu_allocator();
    const size_t before = a.stats().allocated;
    a.reset_peak();
    Tensor out = math ? scaled_dot_product_attention_math(ql, kl, vl, {}, 0.0, true)
                      : scaled_dot_product_attention(ql, kl, vl, {}, 0.0, true);
    out.sum().backward();
    return std::pair<size_t, Tensor>(a.stats().peak - before, ql.grad());
  };
  const auto [fused, dq_fused] = peak_of(false);
  const auto [math, dq_math] = peak_of(true);
  MESSAGE("attention peak at T = 2048, 4 heads of 64: fused ", fused >> 20, " MiB, math form ", math >> 20, " MiB");
  CHECK(fused * 8 <= math);
  check_close(dq_fused, dq_math, 1e-4, "dq at T = 2048");
}

TEST_CASE("attention: 16-bit inputs run in F32 and round once; a row with no key gives NaN as the math form") {
  manual_seed(12);
  Tensor q = randn({2, 5, 16}), k = randn({2, 7, 16}), v = randn({2, 7, 16});
  const Tensor want = scaled_dot_product_attention(q, k, v);
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor got = scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt));
    CHECK(got.dtype() == dt);
    CHECK(max_abs(sub(got.to(DType::F32), want)) < (dt == DType::BF16 ? 0.05 : 0.01));
  }
  // Row 1 of batch 0 attends nothing.
  Tensor allowed = ones({2, 5, 7}, DType::Bool);
  allowed.select(0, 0).select(0, 1).fill_(0.0);
  const Tensor fused = scaled_dot_product_attention(q, k, v, allowed);
  const Tensor math = scaled_dot_product_attention_math(q, k, v, allowed);
  CHECK(std::isnan(fused.select(0, 0).select(0, 1).sum().item<double>()));
  CHECK(std::isnan(math.select(0, 0).select(0, 1).sum().item<double>()));
  check_close(fused.select(0, 1), math.select(0, 1), 1e-5, "the other batch");
}

TEST_CASE("attention: empty shapes, NaN and infinite inputs give the math form's values and gradients") {
  manual_seed(13);
  // No keys (zeros, the empty product), no queries, an empty batch.
  for (const auto& shape : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 0, 2}, {0, 4, 2}, {3, 4, 0}}) {
    const int64_t T = std::get<0>(shape), S = std::get<1>(shape), B = std::get<2>(shape);
    CAPTURE(T);
    CAPTURE(S);
    CAPTURE(B);
    Tensor q = randn({B, T, 5}).requires_grad_(true), k = randn({B, S, 5}).requires_grad_(true),
           v = randn({B, S, 2}).requires_grad_(true);
    const Tensor fused = scaled_dot_product_attention(q, k, v);
    const Tensor math = scaled_dot_product_attention_math(q.detach(), k.detach(), v.detach());
    REQUIRE(fused.sizes() == math.sizes());
    CHECK(equal(fused, math));
    fused.sum().backward();
    for (const Tensor* t : {&q, &k, &v}) {  // defined, of the input's shape, zero
      REQUIRE(t->grad().defined());
      CHECK(t->grad().sizes() == t->sizes());
      CHECK(abs(t->grad()).sum().item<double>() == 0);
    }
  }
  // A NaN in a query row poisons that row only; an infinite key poisons every row (as the math
  // form: inf * 0 or inf - inf in the scores).
  Tensor q = randn({1, 4, 8}), k = randn({1, 6, 8}), v = randn({1, 6, 3});
  Tensor qn = q.clone();
  qn.select(1, 2).select(1, 0).fill_(std::numeric_limits<double>::quiet_NaN());
  const Tensor fused = scaled_dot_product_attention(qn, k, v), math = scaled_dot_product_attention_math(qn, k, v);
  for (int64_t i = 0; i < 4; ++i) {
    const bool nan_row = std::isnan(fused.select(1, i).sum().item<double>());
    CHECK(nan_row == (i == 2));
    CHECK(nan_row == std::isnan(math.select(1, i).sum().item<double>()));
  }
  check_close(fused.select(1, 0), math.select(1, 0), 1e-6, "a clean row beside a NaN one");
  Tensor kinf = k.clone();
  kinf.select(1, 1).select(1, 0).fill_(std::numeric_limits<double>::infinity());
  const Tensor fi = scaled_dot_product_attention(q, kinf, v), mi = scaled_dot_product_attention_math(q, kinf, v);
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(std::isnan(fi.select(1, i).sum().item<double>()) == std::isnan(mi.select(1, i).sum().item<double>()));
  }
}

TEST_CASE("attention: bad shapes, masks and dropout are errors naming the call and the shapes") {
  Tensor q = randn({2, 5, 8}), k = randn({2, 7, 8}), v = randn({2, 7, 4});
  CHECK(test::error_text([&] {
          scaled_dot_product_attention(q, randn({2, 7, 6}), v);
        }).find("scaled_dot_product_attention: q (2, 5, 8), k (2, 7, 6), v (2, 7, 4) do not fit") != std::string::npos);
  CHECK(test::error_text([&] {
          scaled_dot_product_attention(q, k, v, ones({5, 6}));
        }).find("does not broadcast") != std::string::npos);
  CHECK(test::error_text([&] {
          scaled_dot_product_attention(q, k, v, ones({5, 7}, DType::I64));
        }).find("mask must be Bool (true = attend) or floating") != std::string::npos);
  CHECK(test::error_text([&] { scaled_dot_product_attention(q, k, v, {}, 1.0); }).find("dropout_p must be in [0, 1)") !=
        std::string::npos);
  CHECK(test::error_text([&] {
          scaled_dot_product_attention(q, randn({3, 7, 8}), randn({3, 7, 4}));
        }).find("attention: q (2, 5, 8), k (3, 7, 8), v (3, 7, 4) do not fit") != std::string::npos);
}
