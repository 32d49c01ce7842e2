// examples/lecture/main.cpp: autograd for a lecture, in about 30 lines of user code: a function
// with a hand-written backward (autograd::Function), the tape it records printed as a tree with
// PyTorch's node names, a gradient hook and its handle, double backward (the gradient is itself a
// graph), and gradcheck / gradgradcheck catching a wrong derivative.
#include <iostream>

#include "brisk.h"
#include "engine/explain.h"

using namespace brisk;

// softplus(x) = log(1 + e^x); its derivative is sigmoid(x). The backward is written in ops, so it
// is recorded under create_graph and can be differentiated again.
struct Softplus : autograd::Function<Softplus> {
  static std::string name() { return "Softplus"; }
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return log1p(exp(x));
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * sigmoid(ctx.get_saved_variables()[0])};
  }
};

// The same function with a deliberate mistake in backward (e^x / 2 instead of sigmoid).
struct WrongSoftplus : autograd::Function<WrongSoftplus> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return log1p(exp(x));
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * exp(ctx.get_saved_variables()[0]) * 0.5};
  }
};

int main() {
  Tensor x = from_vector({-1, 0, 2}, {3}, DType::F64).requires_grad_();
  Tensor w = from_vector({0.5, -1, 2}, {3}, DType::F64).requires_grad_();
  Tensor y = Softplus::apply(x * w).sum();
  std::cout << "y = " << y << "\n\nthe tape:\n";
  explain::print_graph(y, std::cout, {{"x", x}, {"w", w}});

  HookHandle hook = w.register_hook([](const Tensor& g) {
    std::cout << "hook on w sees dy/dw = " << g << "\n";
    return Tensor();  // keep the gradient as it is
  });
  y.backward(Tensor(), /*retain_graph=*/true);
  hook.remove();  // later backwards run without it
  std::cout << "x.grad = " << x.grad() << "\n";

  // Double backward: d/dx of (dy/dx . 1) is w^2 sigmoid'(x w), the diagonal of the Hessian.
  Tensor outs[1] = {y}, wrt[1] = {x};
  Tensor dydx = grad(outs, wrt, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  std::cout << "dy/dx = " << dydx << "\n";
  Tensor second[1] = {dydx.sum()};
  std::cout << "d2y/dx2 (diagonal) = " << grad(second, wrt)[0] << "\n\n";

  TensorFn right = [](const std::vector<Tensor>& in) { return Softplus::apply(in[0] * in[1]); };
  TensorFn wrong = [](const std::vector<Tensor>& in) { return WrongSoftplus::apply(in[0] * in[1]); };
  std::cout << "Softplus       " << gradcheck_report(right, {x, w}).str() << "\n";
  std::cout << "Softplus       " << gradgradcheck_report(right, {x, w}).str() << "\n";
  std::cout << "WrongSoftplus  " << gradcheck_report(wrong, {x, w}, {.max_reported = 3}).str() << "\n";
  return gradcheck(right, {x, w}, {.raise = false}) && !gradcheck(wrong, {x, w}, {.raise = false}) ? 0 : 1;
}
