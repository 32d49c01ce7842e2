// tests/test_attention.cpp: the fused scaled_dot_product_attention against PyTorch 2.15's
// (tests/data/attention/reference.safetensors, made by tests/make_attention_reference.py):
// values and gradients in F32 over head sizes 32-128, odd T and S, causal (square and
// end-aligned), Bool and float masks and a custom scale; the allocator's peak for forward and
// backward at T = 2048 against the math form's; 16-bit inputs; the BF16 kernel (values and
// gradients near PyTorch's F32 on every BF16 GEMM path, the op's dtypes, autocast); a row with
// no key; errors.
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
#include "engine/dispatch.h"
#include "kernels/cpu/gemm_bf16.h"
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

TEST_CASE("attention: BF16 inputs give PyTorch's F32 values and gradients within BF16 rounding, on every GEMM path") {
  using kernels::cpu::Bf16GemmPath;
  struct PathGuard {
    explicit PathGuard(Bf16GemmPath p) { kernels::cpu::set_bf16_gemm_path(p); }
    ~PathGuard() { kernels::cpu::set_bf16_gemm_path(Bf16GemmPath::Auto); }
  };
  for (const Bf16GemmPath path : {Bf16GemmPath::Amx, Bf16GemmPath::Avx512, Bf16GemmPath::Fallback}) {
    PathGuard guard(path);  // a path the CPU lacks takes the best one below it
    CAPTURE(kernels::cpu::bf16_gemm_path_name(kernels::cpu::bf16_gemm_path()));
    for (const auto& [key, options_text] : reference().metadata) {
      const std::string name = key;
      if (name == "torch_version") continue;
      const nlohmann::json o = nlohmann::json::parse(options_text);
      CAPTURE(name);
      const std::optional<double> scale =
          o.contains("scale") ? std::optional<double>(o["scale"].get<double>()) : std::nullopt;
      Tensor q = case_tensor(name + ".q").to(DType::BF16).requires_grad_(true);
      Tensor k = case_tensor(name + ".k").to(DType::BF16).requires_grad_(true);
      Tensor v = case_tensor(name + ".v").to(DType::BF16).requires_grad_(true);
      Tensor out =
          scaled_dot_product_attention(q, k, v, case_tensor(name + ".mask"), 0.0, o.value("causal", false), scale);
      REQUIRE(out.dtype() == DType::BF16);
      (out * case_tensor(name + ".gout").to(DType::BF16)).sum().backward();
      REQUIRE(q.grad().dtype() == DType::BF16);
      // Inputs rounded to BF16 (2^-9) and P rounded before P v: about 1e-2 of the largest value.
      check_close(out, case_tensor(name + ".out"), 2e-2, "out (BF16)");
      check_close(q.grad(), case_tensor(name + ".dq"), 3e-2, "dq (BF16)");
      check_close(k.grad(), case_tensor(name + ".dk"), 3e-2, "dk (BF16)");
      check_close(v.grad(), case_tensor(name + ".dv"), 3e-2, "dv (BF16)");
    }
  }
}

TEST_CASE("attention: the op runs BF16 on the CPU (BF16 out, F32 lse) and autocast runs it as PyTorch's does") {
  manual_seed(14);
  const Tensor q = randn({2, 3, 40, 64}), k = randn({2, 3, 57, 64}), v = randn({2, 3, 57, 32});
  const Tensor q16 = q.to(DType::BF16), k16 = k.to(DType::BF16), v16 = v.to(DType::BF16);
  Attrs attrs;
  attrs.b = 0.125;
  Tensor out[2];
  call(OpId::Attention, std::vector<Tensor>{q16, k16, v16}, attrs, out);
  CHECK(out[0].dtype() == DType::BF16);
  CHECK(out[1].dtype() == DType::F32);
  // The same values through the F32 kernel: BF16's products round P, so the two differ, but
  // only by BF16 rounding.
  Tensor out32[2];
  call(OpId::Attention, std::vector<Tensor>{q16.to(DType::F32), k16.to(DType::F32), v16.to(DType::F32)}, attrs, out32);
  check_close(out[0], out32[0], 1e-2, "BF16 kernel against F32 kernel");
  check_close(out[1], out32[1], 1e-3, "lse");
  CHECK(!equal(out[0], out32[0].to(DType::BF16)));
  // An additive mask: BF16 or F32 with BF16 q, nothing else.
  attrs.flag2 = true;
  CHECK(test::error_text([&] {
          call(OpId::Attention, std::vector<Tensor>{q16, k16, v16, zeros({2, 3, 40, 57}, DType::F16)}, attrs, out);
        }).find("must have q's dtype (additive; F32 also with BF16 q)") != std::string::npos);
  attrs.flag2 = false;
  // Autocast on the CPU: BF16 out, F32 gradients for F32 leaves, near the F32 result.
  const Tensor want = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  {
    Tensor ql = q.clone().requires_grad_(true);
    AutocastGuard ac(DeviceType::CPU, DType::BF16);
    const Tensor got = scaled_dot_product_attention(ql, k, v, {}, 0.0, true);
    CHECK(got.dtype() == DType::BF16);
    got.to(DType::F32).sum().backward();
    CHECK(ql.grad().dtype() == DType::F32);
    check_close(got, want, 2e-2, "under BF16 autocast");
  }
  {  // F16 autocast on the CPU: no F16 kernel, so F32 rounded once to F16
    AutocastGuard ac(DeviceType::CPU, DType::F16);
    const Tensor got = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    CHECK(got.dtype() == DType::F16);
    check_close(got, want, 2e-3, "under F16 autocast");
  }
  {  // the policy table decides: Fp32 keeps the op in F32
    struct Reset {
      ~Reset() { autocast::reset_policies(); }
    } reset;
    autocast::set_policy("attention", DeviceType::CPU, CastPolicy::Fp32);
    AutocastGuard ac(DeviceType::CPU, DType::BF16);
    const Tensor got = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    CHECK(got.dtype() == DType::F32);
    check_close(got, want, 1e-6, "attention set to fp32 under autocast");
  }
}

TEST_CASE("attention: F32 on strided views (heads split from (B, T, H, D)) with masks matches the F64 math form") {
  // The F32 tile kernels read k and v in place with their strides and the masks element by
  // element; the gradients come from the transposed backward (Note [Fused attention]).
  manual_seed(15);
  const int64_t B = 2, H = 3, T = 70, S = 131, D = 64;
  auto heads = [&](int64_t len) { return randn({B, len, H, D}).transpose(1, 2); };  // (B, H, len, D), strided
  const Tensor q = heads(T), k = heads(S), v = heads(S);
  Tensor pad = ones({B, 1, 1, S}, DType::Bool);
  pad.select(0, 1).narrow(-1, S - 40, 40).fill_(0.0);
  const Tensor additive = randn({T, S}) * 0.5;
  for (int which = 0; which < 3; ++which) {  // causal, key padding, additive
    CAPTURE(which);
    const Tensor mask = which == 1 ? pad : which == 2 ? additive : Tensor();
    const bool causal = which == 0;
    Tensor q32 = q.clone().requires_grad_(true), k32 = k.clone().requires_grad_(true);
    Tensor v32 = v.clone().requires_grad_(true);
    Tensor q64 = q.to(DType::F64).requires_grad_(true), k64 = k.to(DType::F64).requires_grad_(true);
    Tensor v64 = v.to(DType::F64).requires_grad_(true);
    const Tensor gout = randn({B, H, T, D});
    const Tensor out32 = scaled_dot_product_attention(q32.transpose(1, 2).transpose(1, 2), k32, v32, mask, 0.0, causal);
    const Tensor out64 = scaled_dot_product_attention_math(
        q64, k64, v64, mask.defined() && mask.dtype() != DType::Bool ? mask.to(DType::F64) : mask, 0.0, causal);
    (out32 * gout).sum().backward();
    (out64 * gout.to(DType::F64)).sum().backward();
    check_close(out32, out64, 1e-5, "out");
    check_close(q32.grad(), q64.grad(), 1e-5, "dq");
    check_close(k32.grad(), k64.grad(), 1e-5, "dk");
    check_close(v32.grad(), v64.grad(), 1e-5, "dv");
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

TEST_CASE("attention: 16-bit inputs keep their dtype; a row with no key gives NaN as the math form") {
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
