// tests/test_autograd.cpp: the tape: backward on scalars and with explicit gradients,
// accumulation, retain_graph, no_grad, detach, hooks, functional grad, double backward,
// the in-place checks, and a 100,000-op chain.
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/allocator.h"

using namespace brisk;

namespace {
Tensor vec(std::vector<double> v, DType t = DType::F64) {
  int64_t n = int64_t(v.size());
  return from_vector(std::move(v), {n}, t);
}
}  // namespace

TEST_CASE("autograd: backward of a scalar fills .grad of the leaves") {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor w = vec({4, 5, 6}).requires_grad_();
  Tensor y = (x * w).sum();
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 5, 6});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "SumBackward0");  // as PyTorch names the node
  CHECK(y.grad_fn()->op_label() == "sum");       // the forward op it came from
}

TEST_CASE("autograd: explicit gradient for a non-scalar output") {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * x;
  y.backward(vec({1, 0.5, 2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 12});
}

TEST_CASE("autograd: gradients accumulate across backward calls until zeroed") {
  Tensor x = vec({1, 2}).requires_grad_();
  (x * 3.0).sum().backward();
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 6});
  x.zero_grad(/*set_to_none=*/false);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: a tensor used twice gets the sum of both paths") {
  Tensor x = vec({2}).requires_grad_();
  Tensor y = x * x + x * 3.0;  // dy/dx = 2x + 3
  y.sum().backward();
  CHECK(x.grad().item<double>() == 7.0);
}

// Note [Accumulating in place]: a sum goes into the first gradient's buffer only when nothing
// else holds it. Here add's backward hands one (dense) gradient to both a2 and b2; a2's node
// waits for a second contribution (from t1) while b2's node, not yet run, still holds the
// same tensor, which the sum at a2 must not change.
TEST_CASE("autograd: summing gradients in place never writes into a gradient another slot holds") {
  Tensor a = vec({1, 2, 3}).requires_grad_();
  Tensor b = vec({4, 5, 6}).requires_grad_();
  const Tensor w = vec({1, 2, 3});
  Tensor b2 = b * 2.0;
  Tensor a2 = a * 1.0;
  Tensor t1 = a2 * 3.0;
  Tensor h = (a2 + b2) * w;
  (t1.sum() + h.sum()).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{4, 5, 6});  // 3 + w
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 4, 6});  // 2 w
  // A gradient kept by a hook is not summed into either.
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor seen;
  y.register_hook([&seen](const Tensor& g) {
    seen = g;
    return Tensor();
  });
  Tensor z = y * 1.0;
  (y.sum() * 0.0 + (z * y).sum()).backward();                         // y gets 0, then z = y's share, then z's
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 16});  // d/dx (2x)^2 = 8x
  CHECK(seen.to_vector<double>() == std::vector<double>{4, 8});       // the full gradient of y: 2 y
  // With create_graph the sum stays differentiable.
  Tensor p = vec({3}).requires_grad_();
  Tensor q = p * p + p * p * p;  // dq/dp = 2p + 3p^2 = 33, d2q/dp2 = 2 + 6p = 20
  const std::vector<Tensor> outs = {q.sum()}, ins = {p};
  Tensor gp = grad(outs, ins, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  CHECK(gp.item<double>() == doctest::Approx(33));
  gp.sum().backward();
  CHECK(p.grad().item<double>() == doctest::Approx(20));
}

// Note [Adding into a pending gradient]: a tied weight (an embedding and a head, GPT-2's wte)
// gets the embedding's rows added into the head's waiting gradient in place.
TEST_CASE("autograd: an embedding adds its rows into a tied weight's pending gradient: same sum, one buffer") {
  manual_seed(4);
  const int64_t V = 2000, D = 256;  // 2 MB per dense gradient
  const Tensor idx = from_vector({3, 7, 3, 1999, 0, 7}, {6}, DType::I64);
  const Tensor w0 = randn({V, D}) * 0.1;
  auto run = [&](bool tied, size_t* peak) {
    Tensor w = w0.clone().requires_grad_();
    Tensor w2 = w0.clone().requires_grad_();   // the untied model's head
    Tensor h = embedding(w, idx);              // (6, D)
    Tensor logits = linear(h, tied ? w : w2);  // (6, V)
    Tensor loss = (logits * logits).sum();
    cpu_allocator().empty_cache();
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    loss.backward();
    *peak = cpu_allocator().stats().peak - base;
    return tied ? w.grad() : w.grad() + w2.grad();
  };
  size_t tied_peak = 0, untied_peak = 0;
  const Tensor tied = run(true, &tied_peak);
  const Tensor untied = run(false, &untied_peak);
  // The same parts; repeated rows are summed in another order, so to rounding.
  CHECK(allclose(tied, untied, 1e-6, 1e-7));
  CHECK_FALSE(allclose(tied, untied * 1.001, 1e-6, 1e-7));
  // Untied: two dense V x D gradients; tied: the head's, with the embedding's rows added in.
  const double dense = double(V * D * 4);
  INFO("tied peak ", tied_peak, " bytes, untied ", untied_peak);
  CHECK(double(tied_peak) < 1.5 * dense);
  CHECK(double(untied_peak) >= 2.0 * dense);
  // With create_graph the sum stays an op of the graph (nothing is taken in place).
  Tensor w = w0.clone().requires_grad_();
  Tensor loss = pow(linear(embedding(w, idx), w), 2.0).sum();
  const std::vector<Tensor> outs = {loss}, ins = {w};
  Tensor g = grad(outs, ins, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  CHECK(g.requires_grad());
  CHECK(allclose(g, tied));
}

TEST_CASE("autograd: retain_graph allows a second backward, otherwise it is an error") {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = (x.exp()).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  CHECK(allclose(x.grad(), exp(vec({1, 2})) * 2.0));
  Tensor z = (x.exp()).sum();
  z.backward();
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("retain_graph"), Error);
}

TEST_CASE("autograd: NoGradGuard records nothing; detach cuts the graph") {
  Tensor x = vec({1, 2}).requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(GradMode::enabled());
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK((d * x).requires_grad());
  Tensor y = (d * x).sum();
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});  // d is a constant
}

TEST_CASE("autograd: requires_grad_ only on floating leaves") {
  Tensor i = full({2}, 1, DType::I64);
  CHECK_THROWS_AS(i.requires_grad_(), Error);
  Tensor x = vec({1}).requires_grad_();
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.requires_grad_(false), Error);
  CHECK(full({2}, 1.0).requires_grad_().requires_grad());
}

TEST_CASE("autograd: hooks see and can replace gradients; post-accumulate hooks run after .grad is set") {
  Tensor x = vec({1, 2}).requires_grad_();
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return g * 10.0;
  });
  int post_calls = 0;
  std::vector<double> grad_at_post;
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    ++post_calls;
    grad_at_post = leaf.grad().to_vector<double>();
  });
  (x * 3.0).sum().backward();
  CHECK(seen == std::vector<double>{3, 3});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{30, 30});
  CHECK(post_calls == 1);
  CHECK(grad_at_post == std::vector<double>{30, 30});

  // A hook on an intermediate tensor.
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = a * 2.0;
  b.register_hook([](const Tensor& g) { return g * 0.0; });
  (b * 5.0).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0, 0});
}

TEST_CASE("autograd: retain_grad keeps the gradient of an intermediate tensor") {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = a * 2.0;
  b.retain_grad();
  (b * b).sum().backward();
  CHECK(b.grad().to_vector<double>() == std::vector<double>{4, 8});
  CHECK(a.grad().to_vector<double>() == std::vector<double>{8, 16});
}

TEST_CASE("autograd: grad() returns gradients without touching .grad") {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor w = vec({3, 4}).requires_grad_();
  Tensor y = (x * w).sum();
  Tensor outs[1] = {y};
  Tensor ins[1] = {x};
  std::vector<Tensor> g = grad(outs, ins);
  CHECK(g[0].to_vector<double>() == std::vector<double>{3, 4});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  // An unused input is an error unless allowed.
  Tensor u = vec({1}).requires_grad_();
  Tensor y2 = (x * 2.0).sum();
  Tensor outs2[1] = {y2};
  Tensor ins2[2] = {x, u};
  CHECK_THROWS_AS(grad(outs2, ins2, {}, true), Error);
  std::vector<Tensor> g2 = grad(outs2, ins2, {}, false, false, /*allow_unused=*/true);
  CHECK(g2[0].to_vector<double>() == std::vector<double>{2, 2});
  CHECK_FALSE(g2[1].defined());
}

TEST_CASE("autograd: grad() runs only the nodes on a path to its inputs, and no leaf's accumulator") {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = vec({3, 4}).requires_grad_();
  CHECK(gradient_edge(a).node->is_accumulator());
  Tensor e = b.exp();  // exp saves its output: running its backward after the change below throws
  Tensor y = (a * 2.0).sum() + e.sum();
  CHECK_FALSE(y.grad_fn()->is_accumulator());
  {
    NoGradGuard ng;
    e.add_(full({}, 1.0, DType::F64));
  }
  Tensor outs[1] = {y};
  Tensor ins[1] = {a};
  std::vector<Tensor> g = grad(outs, ins, {}, /*retain_graph=*/true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2, 2});
  CHECK_FALSE(a.grad().defined());
  // backward() runs every node, so the changed saved tensor is found there.
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("exp"), Error);
}

TEST_CASE("autograd: grad() with respect to an intermediate tensor") {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 3.0;
  Tensor y = (h * h).sum();
  Tensor outs[1] = {y};
  Tensor ins[1] = {h};
  std::vector<Tensor> g = grad(outs, ins);
  CHECK(g[0].to_vector<double>() == std::vector<double>{6, 12});
}

TEST_CASE("autograd: double backward through create_graph") {
  Tensor x = vec({2, 3}).requires_grad_();
  Tensor y = (x * x * x).sum();  // dy/dx = 3x^2, d2y/dx2 = 6x
  Tensor outs[1] = {y};
  Tensor ins[1] = {x};
  std::vector<Tensor> g = grad(outs, ins, {}, false, /*create_graph=*/true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{12, 27});
  CHECK(g[0].requires_grad());
  g[0].sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{12, 18});
  // Through a saved output (exp saves its result).
  Tensor z = vec({0.5}).requires_grad_();
  Tensor e = exp(z).sum();
  Tensor eo[1] = {e};
  Tensor zi[1] = {z};
  std::vector<Tensor> ge = grad(eo, zi, {}, false, true);
  std::vector<Tensor> gge = grad(std::vector<Tensor>{ge[0].sum()}, std::vector<Tensor>{z});
  CHECK(gge[0].item<double>() == doctest::Approx(std::exp(0.5)));
}

TEST_CASE("autograd: changing a saved tensor in place is an error that names the op") {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = h.exp();  // exp saves its output y
  {
    NoGradGuard ng;
    y.add_(full({}, 1.0, DType::F64));
  }
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("exp"), Error);
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = a * 2.0;
  Tensor c = b * b;  // mul saves b
  b.add_(full({}, 1.0, DType::F64));
  CHECK_THROWS_WITH_AS(c.sum().backward(), doctest::Contains("modified by an in-place operation"), Error);
}

TEST_CASE("autograd: in-place ops on leaves that require grad are refused; on others they are recorded") {
  Tensor x = vec({1, 2}).requires_grad_();
  CHECK_THROWS_WITH_AS(x.add_(vec({1, 1})), doctest::Contains("leaf"), Error);
  {
    NoGradGuard ng;
    x.add_(vec({1, 1}));  // allowed without recording (optimizer updates)
  }
  CHECK(x.to_vector<double>() == std::vector<double>{2, 3});
  Tensor h = x * 1.0;
  h.mul_(vec({3, 4}));  // recorded: dh/dx = 3, 4
  h.add_(x);            // + x: total 4, 5
  h.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 5});
  // A tensor that did not require grad starts to after an in-place op with one that does.
  Tensor z = zeros({2}, DType::F64);
  Tensor w = vec({1, 1}).requires_grad_();
  z.add_(w * 2.0);
  CHECK(z.requires_grad());
  z.sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 2});
}

TEST_CASE("autograd: a chain of 100,000 ops backpropagates and frees without overflowing the stack") {
  Tensor x = vec({0.5}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  y.sum().backward();
  CHECK(x.grad().item<double>() == 1.0);
  y = Tensor();  // frees the whole chain iteratively
  // And a chain dropped without ever running backward.
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z + 0.0;
  z = Tensor();
  CHECK(true);
}

TEST_CASE("autograd: gradients of broadcast inputs are summed to their shape") {
  Tensor a = uniform(Shape{3, 1}, -1, 1, DType::F64).requires_grad_();
  Tensor b = uniform(Shape{4}, -1, 1, DType::F64).requires_grad_();
  (a * b).sum().backward();
  CHECK(a.grad().sizes() == Shape{3, 1});
  CHECK(b.grad().sizes() == Shape{4});
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(b.sum().item<double>()));
}

TEST_CASE("autograd: anomaly mode names the op that produced NaN") {
  AnomalyGuard guard;
  Tensor x = vec({-1.0});
  CHECK_THROWS_WITH_AS(log(x), doctest::Contains("log"), Error);
}

TEST_CASE("autograd: gradcheck catches a wrong gradient") {
  // A function whose backward is wrong: detach hides the dependence on x from backward.
  TensorFn f = [](const std::vector<Tensor>& in) { return in[0] * in[0].detach(); };
  Tensor x = vec({1.5, -0.5}).requires_grad_();
  CHECK_FALSE(gradcheck(f, {x}, {.raise = false}));
  CHECK_THROWS_AS(gradcheck(f, {x}), Error);
  TensorFn g = [](const std::vector<Tensor>& in) { return in[0] * in[0]; };
  CHECK(gradcheck(g, {x}));
}
