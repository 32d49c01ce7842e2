// opcheck/spec.cpp: the spec table and the helpers for writing specs.
#include "opcheck/spec.h"

#include <random>

namespace brisk::opcheck {

// One per spec file (opcheck/specs_<family>.cpp). Called explicitly rather than by static
// registrars: brisk::opcheck is a static library, and a linker drops object files nothing
// refers to.
void add_attention_specs(std::vector<OpSpec>& specs);
void add_elementwise_specs(std::vector<OpSpec>& specs);
void add_index_specs(std::vector<OpSpec>& specs);
void add_linalg_specs(std::vector<OpSpec>& specs);
void add_linalg_decomp_specs(std::vector<OpSpec>& specs);
void add_linear_cross_entropy_specs(std::vector<OpSpec>& specs);
void add_nn_specs(std::vector<OpSpec>& specs);
void add_norm_specs(std::vector<OpSpec>& specs);
void add_optim_specs(std::vector<OpSpec>& specs);
void add_quantized_specs(std::vector<OpSpec>& specs);
void add_random_specs(std::vector<OpSpec>& specs);
void add_recurrent_specs(std::vector<OpSpec>& specs);
void add_reduce_specs(std::vector<OpSpec>& specs);
void add_resize_specs(std::vector<OpSpec>& specs);
void add_scan_specs(std::vector<OpSpec>& specs);
void add_shape_specs(std::vector<OpSpec>& specs);

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = [] {
    std::vector<OpSpec> s;
    for (auto add :
         {add_attention_specs, add_elementwise_specs, add_index_specs, add_linalg_specs, add_linalg_decomp_specs,
          add_linear_cross_entropy_specs, add_nn_specs, add_norm_specs, add_optim_specs, add_quantized_specs,
          add_random_specs, add_recurrent_specs, add_reduce_specs, add_resize_specs, add_scan_specs, add_shape_specs}) {
      add(s);
    }
    return s;
  }();
  return specs;
}

std::vector<const OpSpec*> specs_for(OpId op) {
  std::vector<const OpSpec*> found;
  for (const OpSpec& s : op_specs()) {
    for (OpId id : s.covers) {
      if (id == op) {
        found.push_back(&s);
        break;
      }
    }
  }
  return found;
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

const std::vector<CrossEntropyVariant>& cross_entropy_variants() {
  static const std::vector<CrossEntropyVariant> variants = {
      {"mean", Reduction::Mean, 0.0},
      {"sum", Reduction::Sum, 0.0},
      {"none", Reduction::None, 0.0},
      {"mean, label smoothing 0.1", Reduction::Mean, 0.1},
      {"none, label smoothing 0.25", Reduction::None, 0.25},
  };
  return variants;
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

Tensor mT(const Tensor& x) { return transpose(x, -2, -1); }

Tensor eye_like(int64_t n) {
  std::vector<double> v(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1.0;
  return from_vector(v, {n, n}, DType::F64);
}

Tensor well_conditioned(const Shape& shape, uint64_t seed) {
  return uniform_values(shape, -1, 1, seed) + eye_like(shape.back()) * double(shape.back());
}

Tensor spd(const Shape& shape, uint64_t seed) {
  Tensor x = uniform_values(shape, -1, 1, seed);
  return matmul(x, mT(x)) + eye_like(shape.back()) * double(shape.back());
}

// cholesky and eigh read one triangle, so their specs symmetrize first and the gradcheck's
// one-element perturbations stay symmetric.
Tensor sym(const Tensor& a) { return (a + mT(a)) * 0.5; }

}  // namespace brisk::opcheck
