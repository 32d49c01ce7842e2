// tests/test_linear_gelu.cpp: linear_gelu (Note [Linear with GELU] in engine/ops/linalg.cpp)
// against linear then gelu: the same bits in F32 (on the AVX-512 GEMM and on Eigen's), F64, F16
// and BF16 (plain, and mixed under autocast, on each BF16 GEMM path), at edge values; the same
// gradients; the errors; and GPT-2's and TransformerEncoderLayer's fused MLPs against the
// unfused calls a hook forces (the hooks still fire).
// Not here: the conformance rows against plain loops and the F64 gradchecks
// (opcheck/specs_linalg.cpp); speed (examples/bench/bench_linear_ce.cpp, its gelu mode).
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/autocast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "nn/models/gpt2.h"
#include "nn/transformer.h"

using namespace brisk;

namespace {

// Equal values of one dtype and sizes, NaN where NaN (every dtype here widens exactly to F64).
bool same_bits(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.dtype() == b.dtype());
  const std::vector<double> u = a.to_vector<double>(), v = b.to_vector<double>();
  for (size_t i = 0; i < u.size(); ++i) {
    const bool same = u[i] == v[i] ? std::signbit(u[i]) == std::signbit(v[i]) : std::isnan(u[i]) && std::isnan(v[i]);
    if (!same) return false;
  }
  return true;
}

// linear_gelu against gelu(linear) on the same operands, both forms, both weight layouts.
void check_same(const Tensor& x, const Tensor& w, const Tensor& b) {
  for (bool tanh_form : {true, false}) {
    CAPTURE(tanh_form);
    CHECK(same_bits(linear_gelu(x, w, b, tanh_form), gelu(linear(x, w, b), tanh_form)));
    const Tensor wt = w.transpose(0, 1).contiguous();
    CHECK(
        same_bits(linear_gelu(x, wt, b, tanh_form, /*weight_in_out=*/true), gelu(linear_in_out(x, wt, b), tanh_form)));
  }
}

void check_shapes(DType dtype) {
  CAPTURE(dtype_name(dtype));
  manual_seed(21);
  auto r = [&](Shape s) { return cast(randn(s), dtype); };
  check_same(r({3, 4}), r({5, 4}), r({5}));
  check_same(r({3, 4}), r({5, 4}), Tensor());
  check_same(r({4}), r({6, 4}), r({6}));
  // Blocked and threaded, with partial register tiles along both dims (70 = 4 * 16 + 6 rows,
  // 130 = 2 * 48 + 34 columns).
  check_same(r({70, 300}), r({130, 300}) * 0.1, r({130}));
  check_same(r({2, 37, 64}), r({96, 64}) * 0.2, r({96}));
}

struct Grads {
  Tensor y{}, dx{}, dw{}, db{};
};

Grads run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy, bool tanh_form) {
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
         b = b0.detach().requires_grad_(true);
  Tensor y = fused ? linear_gelu(x, w, b, tanh_form) : gelu(linear(x, w, b), tanh_form);
  sum(y * gy).backward();
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return amax(abs(cast(a, DType::F64) - cast(b, DType::F64))).item<double>();
}

// A model's output with its MLPs fused, then with a forward hook on each `fc_name` module
// (which makes them run unfused); the hooks must fire once per call each.
template <class Model, class Call>
void check_model_fusion(Model& model, const std::string& fc_name, Call call) {
  const Tensor fused = call();
  int calls = 0, hooked = 0;
  for (auto& [name, m] : model.named_modules()) {
    if (name.size() >= fc_name.size() && name.compare(name.size() - fc_name.size(), fc_name.size(), fc_name) == 0) {
      m->register_forward_hook([&calls](nn::Module&, const Tensor&, Tensor&) { ++calls; });
      ++hooked;
    }
  }
  REQUIRE(hooked > 0);
  const Tensor unfused = call();
  CHECK(calls == hooked);
  CHECK(same_bits(fused, unfused));
}

}  // namespace

TEST_CASE("linear_gelu: the bits of linear then gelu in F32 (AVX-512 GEMM and Eigen), F64 and F16") {
  check_shapes(DType::F32);
  check_shapes(DType::F64);
  check_shapes(DType::F16);
  kernels::cpu::set_f32_gemm_path(kernels::cpu::F32GemmPath::Eigen);
  check_shapes(DType::F32);
  kernels::cpu::set_f32_gemm_path(kernels::cpu::F32GemmPath::Auto);
}

namespace {

void check_bf16() {
  check_shapes(DType::BF16);
  manual_seed(22);
  for (const Shape& xs : {Shape{5, 6}, Shape{70, 300}, Shape{2, 9, 300}}) {
    const Tensor x = randn(xs), w = randn({130, xs.back()}) * 0.1, b = randn({130});
    for (bool tanh_form : {true, false}) {
      CAPTURE(tanh_form);
      {
        AutocastGuard guard(DeviceType::CPU, DType::BF16);
        const Tensor got = linear_gelu(x, w, b, tanh_form);
        CHECK(got.dtype() == DType::BF16);
        CHECK(same_bits(got, gelu(linear(x, w, b), tanh_form)));
      }
      // The mixed form (BF16 x, F32 weight and bias) outside autocast as well.
      const Tensor xb = x.to(DType::BF16);
      CHECK(same_bits(linear_gelu(xb, w, b, tanh_form), gelu(linear(xb, w, b), tanh_form)));
    }
  }
}

}  // namespace

TEST_CASE("linear_gelu: the bits of linear then gelu in BF16, plain and mixed under autocast, every GEMM path") {
  namespace cpu = kernels::cpu;
  for (cpu::Bf16GemmPath path : {cpu::Bf16GemmPath::Auto, cpu::Bf16GemmPath::Avx512, cpu::Bf16GemmPath::Fallback}) {
    cpu::set_bf16_gemm_path(path);
    CAPTURE(cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()));
    check_bf16();
  }
  cpu::set_bf16_gemm_path(cpu::Bf16GemmPath::Auto);
  CHECK(autocast::policy("linear_gelu", DeviceType::CPU) == CastPolicy::LowerMixed);
}

// NaN and infinities in the input and the weight, a bias of -inf, no rows, K = 0.
TEST_CASE("linear_gelu: edge values equal linear then gelu (NaN, inf, no rows, K = 0)") {
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    manual_seed(23);
    Tensor x = randn({40, 20}, dtype), w = randn({50, 20}, dtype), b = randn({50}, dtype);
    {
      NoGradGuard no_grad;
      x.narrow(0, 1, 1).fill_(NAN);
      x.narrow(0, 2, 1).narrow(1, 3, 1).fill_(INFINITY);
      x.narrow(0, 5, 1).narrow(1, 3, 1).fill_(-INFINITY);
      w.narrow(0, 3, 1).narrow(1, 0, 1).fill_(-INFINITY);
      b.narrow(0, 2, 1).fill_(-INFINITY);
      b.narrow(0, 7, 1).fill_(INFINITY);
    }
    check_same(x, w, b);
    check_same(x, w, Tensor());
    check_same(randn({0, 20}, dtype), w, b);                     // no rows
    check_same(randn({7, 0}, dtype), randn({50, 0}, dtype), b);  // K = 0: gelu of the bias
    check_same(randn({7, 0}, dtype), randn({50, 0}, dtype), Tensor());
    CHECK(linear_gelu(randn({0, 20}, dtype), w, b).sizes() == Shape{0, 50});
  }
}

TEST_CASE("linear_gelu: the gradients of linear then gelu (F64 to 1e-12, F32, BF16)") {
  manual_seed(24);
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    CAPTURE(dtype_name(dtype));
    const double tol = dtype == DType::F64 ? 1e-12 : 0;  // the same ops: F32 and BF16 to the bit
    for (const Shape& xs : {Shape{6, 5}, Shape{2, 33, 40}}) {
      const Tensor x = cast(randn(xs), dtype), w = cast(randn({70, xs.back()}) * 0.3, dtype),
                   b = cast(randn({70}), dtype);
      const Tensor gy = cast(randn(linear(x, w).sizes()), dtype);
      for (bool tanh_form : {true, false}) {
        CAPTURE(tanh_form);
        const Grads f = run(true, x, w, b, gy, tanh_form), u = run(false, x, w, b, gy, tanh_form);
        CHECK(max_diff(f.y, u.y) <= tol);
        CHECK(max_diff(f.dx, u.dx) <= tol);
        CHECK(max_diff(f.dw, u.dw) <= tol);
        CHECK(max_diff(f.db, u.db) <= tol);
      }
    }
  }
}

// Double backward: gelu_backward has no derivative with respect to its input, so the fused op's
// second derivative is the same error as the pair's, not a silently wrong value.
TEST_CASE("linear_gelu: a second derivative is gelu_backward's error, as for linear then gelu") {
  manual_seed(26);
  const Tensor x0 = randn({4, 6}, DType::F64), w = randn({5, 6}, DType::F64), b = randn({5}, DType::F64);
  for (int fused = 0; fused < 2; ++fused) {
    CAPTURE(fused);
    Tensor x = x0.detach().requires_grad_(true);
    const Tensor y = fused ? linear_gelu(x, w, b, true) : gelu(linear(x, w, b), true);
    const Tensor out[1] = {sum(y * y)}, in[1] = {x};
    const std::vector<Tensor> gx = grad(out, in, {}, false, /*create_graph=*/true);
    CHECK_THROWS_WITH_AS(sum(gx[0]).backward(), doctest::Contains("gelu_backward: the second derivative"), Error);
  }
}

TEST_CASE("linear_gelu: bad input is an error naming the op") {
  const Tensor x = zeros({4, 3});
  CHECK_THROWS_WITH_AS(linear_gelu(x, zeros({5, 2})),
                       doctest::Contains("linear_gelu: input (4, 3) does not have the 2 features"), Error);
  CHECK_THROWS_WITH_AS(linear_gelu(x, zeros({5, 3}), zeros({4})), doctest::Contains("linear_gelu: bias"), Error);
  CHECK_THROWS_WITH_AS(linear_gelu(x, zeros({5, 3}, DType::F64)), doctest::Contains("linear_gelu: dtypes differ"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_gelu(x, zeros({5})), doctest::Contains("linear_gelu: weight must be 2-D"), Error);
  CHECK_THROWS_WITH_AS(linear_gelu(Tensor(), zeros({5, 3})), doctest::Contains("linear_gelu: undefined"), Error);
}

TEST_CASE("linear_gelu: GPT-2's and TransformerEncoderLayer's MLPs fuse only without hooks, with the same bits") {
  for (DType dtype : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    nn::models::GPT2Config c;
    c.vocab_size = 97;
    c.n_positions = 16;
    c.n_embd = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.dropout = 0;
    manual_seed(25);
    nn::models::GPT2 gpt2(c);
    gpt2.to(dtype);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 2 * 9; ++i) ids.push_back((i * 31 + 5) % 97);
    const Tensor idx = from_data(ids.data(), {2, 9}, Device::cpu());
    check_model_fusion(gpt2, "mlp.c_fc", [&] { return gpt2(idx); });

    nn::TransformerEncoderLayer layer(16, 2, {.dim_feedforward = 40, .dropout = 0, .activation = "gelu"});
    layer.to(dtype);
    layer.eval();
    const Tensor src = cast(randn({5, 3, 16}), dtype);
    check_model_fusion(layer, "linear1", [&] { return layer(src); });
  }
}
