// tests/test_custom_function.cpp: autograd functions with a hand-written backward
// (engine/custom_function.h): gradients, double backward through a backward made of ops,
// saved tensors and their checks, non-differentiable outputs, non-tensor arguments, the errors;
// and gradcheck's reports (every mismatch, Jacobians) and gradgradcheck.
#include <doctest/doctest.h>

#include <cmath>

#include "brisk.h"

using namespace brisk;
using autograd::FunctionCtx;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return from_vector(v, s, DType::F64); }

// y = x^3 with backward 3 x^2 g, written in ops: differentiable again.
struct Cube : autograd::Function<Cube> {
  static std::string name() { return "Cube"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    Tensor x = ctx.get_saved_variables()[0];
    return {g[0] * 3.0 * x * x};
  }
};

// y = alpha * x * w with a double argument; saves its output to show that outputs can be saved.
struct ScaledMul : autograd::Function<ScaledMul> {
  static std::string name() { return "ScaledMul"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const Tensor& w, double alpha) {
    ctx.saved_data["alpha"] = alpha;
    Tensor y = x * w * alpha;
    ctx.save_for_backward({x, w, y});
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto s = ctx.get_saved_variables();
    const double alpha = std::any_cast<double>(ctx.saved_data["alpha"]);
    CHECK(s[2].sizes() == g[0].sizes());  // the saved output comes back
    Tensor gx = ctx.needs_input_grad(0) ? g[0] * s[1] * alpha : Tensor();
    Tensor gw = ctx.needs_input_grad(1) ? g[0] * s[0] * alpha : Tensor();
    return {gx, gw, Tensor()};  // none for alpha
  }
};

// Returns (x sorted ascending, the positions as F64), the positions marked non-differentiable.
struct SortWithIndex : autograd::Function<SortWithIndex> {
  static std::vector<Tensor> forward(FunctionCtx& ctx, const Tensor& x) {
    Tensor idx = argsort(x, 0);
    Tensor values = gather(x, 0, idx);
    Tensor pos = idx.to(DType::F64);
    ctx.mark_non_differentiable({pos});
    ctx.save_for_backward({idx});
    return {values, pos};
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    REQUIRE(g.size() == 2);
    REQUIRE(g[1].defined());  // materialized: zeros for the output that got no gradient
    CHECK(g[1].abs().sum().item<double>() == 0.0);
    Tensor idx = ctx.get_saved_variables()[0];
    return {scatter_add(zeros_like(g[0]), 0, idx, g[0])};
  }
};

}  // namespace

TEST_CASE("custom function: gradients, node name, saved tensors") {
  Tensor x = f64({1, -2, 3}, {3}).requires_grad_();
  Tensor y = Cube::apply(x);
  CHECK(y.to_vector<double>() == std::vector<double>{1, -8, 27});
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "CubeBackward");
  CHECK(y.grad_fn()->op_label() == "Cube");
  CHECK(y.grad_fn()->saved_tensors().size() == 1);
  CHECK(y.grad_fn()->next_edges[0].node->name() == "AccumulateGrad");
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 12, 27});
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return Cube::apply(in[0]); }, {x}));
}

TEST_CASE("custom function: double backward through a backward made of ops, gradgradcheck") {
  Tensor x = f64({0.5, -1.5, 2}, {3}).requires_grad_();
  Tensor y = Cube::apply(x).sum();
  Tensor outs[1] = {y}, ins[1] = {x};
  Tensor dx = grad(outs, ins, {}, false, /*create_graph=*/true)[0];
  CHECK(dx.requires_grad());
  Tensor d2[1] = {dx.sum()};
  Tensor ddx = grad(d2, ins)[0];
  const std::vector<double> got = ddx.to_vector<double>();
  CHECK(got[0] == doctest::Approx(3.0));  // 6x
  CHECK(got[1] == doctest::Approx(-9.0));
  CHECK(got[2] == doctest::Approx(12.0));

  TensorFn cube = [](const std::vector<Tensor>& in) { return Cube::apply(in[0]); };
  CHECK(gradgradcheck(cube, {x}));
  Tensor w = randn({3}, DType::F64).requires_grad_();
  TensorFn smul = [](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], in[1], 1.5); };
  CHECK(gradcheck(smul, {x, w}));
  CHECK(gradgradcheck(smul, {x, w}));
}

TEST_CASE("custom function: non-tensor arguments, needs_input_grad, saved outputs") {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  Tensor w = f64({3, 4}, {2});  // needs no gradient
  Tensor y = ScaledMul::apply(x, w, 2.0);
  CHECK(y.to_vector<double>() == std::vector<double>{6, 16});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 8});
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("custom function: non-differentiable outputs and materialized gradients") {
  Tensor x = f64({3, 1, 2}, {3}).requires_grad_();
  std::vector<Tensor> out = SortWithIndex::apply(x);
  REQUIRE(out.size() == 2);
  CHECK(out[0].to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(out[0].requires_grad());
  CHECK_FALSE(out[1].requires_grad());
  CHECK(out[1].to_vector<double>() == std::vector<double>{1, 2, 0});
  (out[0] * f64({10, 20, 30}, {3})).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{30, 10, 20});
}

TEST_CASE("custom function: no graph without grad, and the untemplated form") {
  Tensor x = f64({2}, {1}).requires_grad_();
  {
    NoGradGuard ng;
    CHECK_FALSE(Cube::apply(x).requires_grad());
  }
  CHECK_FALSE(Cube::apply(f64({2}, {1})).requires_grad());

  Tensor a = f64({1, 2}, {2}).requires_grad_();
  std::vector<Tensor> y = autograd::apply_function(
      "Twice", {a}, [&](FunctionCtx&) { return std::vector<Tensor>{a * 2.0}; },
      [](FunctionCtx&, std::vector<Tensor> g) { return std::vector<Tensor>{g[0] * 2.0}; });
  CHECK(y[0].grad_fn()->name() == "TwiceBackward");
  y[0].sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 2});

  // An input returned as is becomes a copy that carries the history; the input stays a leaf.
  Tensor b = f64({5}, {1}).requires_grad_();
  std::vector<Tensor> same = autograd::apply_function(
      "Identity", {b}, [&](FunctionCtx&) { return std::vector<Tensor>{b}; },
      [](FunctionCtx&, std::vector<Tensor> g) { return g; });
  CHECK(same[0].impl() != b.impl());
  CHECK(b.is_leaf());
  same[0].sum().backward();
  CHECK(b.grad().to_vector<double>() == std::vector<double>{1});
}

TEST_CASE("custom function: errors name the function") {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  auto wrong_count = autograd::apply_function(
      "WrongCount", {x}, [&](FunctionCtx&) { return std::vector<Tensor>{x * 1.0}; },
      [](FunctionCtx&, std::vector<Tensor> g) {
        return std::vector<Tensor>{g[0], g[0]};
      });
  CHECK_THROWS_WITH_AS(wrong_count[0].sum().backward(), doctest::Contains("WrongCount: backward returned 2"), Error);

  auto wrong_shape = autograd::apply_function(
      "WrongShape", {x}, [&](FunctionCtx&) { return std::vector<Tensor>{x * 1.0}; },
      [](FunctionCtx&, std::vector<Tensor>) { return std::vector<Tensor>{zeros({3}, DType::F64)}; });
  CHECK_THROWS_WITH_AS(wrong_shape[0].sum().backward(), doctest::Contains("WrongShape"), Error);

  // A saved input changed in place after forward.
  Tensor z = f64({1, 2}, {2}).requires_grad_();
  Tensor base = z * 1.0;
  Tensor y = Cube::apply(base);
  base.mul_(2.0);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("in-place"), Error);

  // Backward twice without retain_graph; then saved_tensors on the freed node.
  Tensor c = Cube::apply(x).sum();
  c.backward(Tensor(), /*retain_graph=*/true);
  c.backward();
  CHECK_THROWS_WITH_AS(c.backward(), doctest::Contains("retain_graph"), Error);
  auto node = c.grad_fn()->next_edges[0].node;
  CHECK_THROWS_WITH_AS(node->saved_tensors(), doctest::Contains("freed"), Error);

  auto undefined_out = [&] {
    autograd::apply_function(
        "NoOutput", {x}, [](FunctionCtx&) { return std::vector<Tensor>{Tensor()}; },
        [](FunctionCtx&, std::vector<Tensor> g) { return g; });
  };
  CHECK_THROWS_WITH_AS(undefined_out(), doctest::Contains("NoOutput: forward's output 0 is undefined"), Error);
}

TEST_CASE("gradcheck: the report lists every mismatch with indices, the Jacobians on request") {
  // A wrong backward: the gradient of x^3 given as 2 x^2 (off for every element but 0).
  TensorFn wrong = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return autograd::apply_function(
        "WrongCube", {x},
        [&](FunctionCtx& ctx) {
          ctx.save_for_backward({x});
          return std::vector<Tensor>{x * x * x};
        },
        [](FunctionCtx& ctx, std::vector<Tensor> g) {
          Tensor s = ctx.get_saved_variables()[0];
          return std::vector<Tensor>{g[0] * 2.0 * s * s};
        })[0];
  };
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  GradcheckReport r = gradcheck_report(wrong, {x}, {.max_reported = 4});
  CHECK_FALSE(r.ok);
  CHECK(r.checked == 6);
  CHECK(r.num_mismatches == 6);
  REQUIRE(r.mismatches.size() == 4);
  CHECK(r.mismatches[1].element == 1);
  CHECK(r.mismatches[1].element_index == "[0, 1]");
  CHECK(r.str().find("6 of 6 values disagree (the first 4 listed)") != std::string::npos);
  CHECK_THROWS_WITH_AS(gradcheck(wrong, {x}), doctest::Contains("input 0 element [1, 2]"), Error);

  GradcheckReport j = gradcheck_report(wrong, {x}, {.max_reported = 100, .jacobians = true});
  REQUIRE(j.numeric_jacobians.size() == 1);
  CHECK(j.numeric_jacobians[0].sizes() == Shape{6, 6});
  CHECK(j.checked == 36);
  CHECK(j.num_mismatches == 6);  // the diagonal; the zeros off it agree
  const std::vector<double> jn = j.numeric_jacobians[0].to_vector<double>();
  const std::vector<double> ja = j.analytic_jacobians[0].to_vector<double>();
  CHECK(jn[1 * 6 + 1] == doctest::Approx(12.0).epsilon(1e-6));  // 3 x^2 at x = 2
  CHECK(ja[1 * 6 + 1] == doctest::Approx(8.0));                 // the wrong 2 x^2
  CHECK(ja[1 * 6 + 2] == 0.0);
  CHECK(j.mismatches[1].output_index == "[0, 1]");

  TensorFn right = [](const std::vector<Tensor>& in) { return Cube::apply(in[0]); };
  GradcheckReport ok = gradcheck_report(right, {x}, {.jacobians = true});
  CHECK(ok.ok);
  CHECK(ok.str() == "gradcheck: all 36 values agree");
}

TEST_CASE("gradgradcheck: a wrong second derivative is caught") {
  // First derivative right, second wrong: the backward leaves the tape for a constant 3 x^2.
  TensorFn first_only = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return autograd::apply_function(
        "OffTape", {x},
        [&](FunctionCtx& ctx) {
          ctx.save_for_backward({x});
          return std::vector<Tensor>{x * x * x};
        },
        [](FunctionCtx& ctx, std::vector<Tensor> g) {
          Tensor s = ctx.get_saved_variables()[0].detach();  // cut from the graph
          return std::vector<Tensor>{g[0] * 3.0 * s * s};
        })[0];
  };
  Tensor x = f64({0.5, 1.5}, {2}).requires_grad_();
  CHECK(gradcheck(first_only, {x}));
  CHECK_FALSE(gradgradcheck(first_only, {x}, {.raise = false}));
  CHECK_THROWS_WITH_AS(gradgradcheck(first_only, {x}), doctest::Contains("gradgradcheck"), Error);
  TensorFn f32 = [](const std::vector<Tensor>& in) { return in[0].to(DType::F32); };
  CHECK_THROWS_WITH_AS(gradgradcheck(f32, {x}), doctest::Contains("F64"), Error);
}
