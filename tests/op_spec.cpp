// tests/op_spec.cpp: the spec registry and the helpers for writing specs.
#include "tests/op_spec.h"

#include <random>

namespace brisk::test {

std::vector<OpSpec>& op_specs() {
  static std::vector<OpSpec> specs;
  return specs;
}

Tensor uniform_values(const Shape& shape, double lo, double hi, uint64_t seed, DType dtype) {
  std::mt19937_64 rng(seed * 7919 + 17);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(shape.numel()));
  for (double& x : v) x = dist(rng);
  return from_vector(v, shape, dtype);
}

Tensor noncontiguous(const Tensor& t) {
  if (t.dim() == 0 || t.numel() == 0) return t.clone();
  Shape wide = t.sizes();
  wide[wide.size() - 1] *= 2;
  Tensor buf = zeros(wide, t.dtype());
  Tensor view = slice(buf, -1, 0, wide.back(), 2);
  NoGradGuard ng;
  view.copy_(t);
  return view;
}

Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  if (is_floating(c.dtype())) c.requires_grad_();
  return c;
}

Tensor ints(const std::vector<int64_t>& values, const Shape& shape) {
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, DType::I64);
}

Tensor map_reference(const std::vector<Tensor>& inputs, const std::function<double(const std::vector<double>&)>& f,
                     DType out) {
  Shape shape = inputs[0].sizes();
  for (size_t i = 1; i < inputs.size(); ++i) shape = broadcast_shapes(shape, inputs[i].sizes(), "reference");
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : inputs) vals.push_back(expand(t.detach(), shape).to_vector<double>());
  std::vector<double> result(size_t(shape.numel()));
  std::vector<double> args(inputs.size());
  for (size_t k = 0; k < result.size(); ++k) {
    for (size_t i = 0; i < inputs.size(); ++i) args[i] = vals[i][k];
    result[k] = f(args);
  }
  return from_vector(result, shape, out);
}

double tolerance(const OpSpec& spec, DType t) {
  switch (t) {
    case DType::F64: return 1e-12;
    case DType::F32: return spec.tol_f32;
    case DType::F16:
    case DType::BF16: return spec.tol_half;
    default: return 0;
  }
}

}  // namespace brisk::test
