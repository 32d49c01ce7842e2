// opcheck/specs_linear_cross_entropy.cpp: specs of linear_cross_entropy
// (engine/ops/linear_cross_entropy.cpp, kernels/cpu/linear_cross_entropy.cpp) against the
// unfused head and loss written as plain loops in F64: logits = x @ w^T + bias, then
// cross_entropy's loss (reductions, ignore_index, label smoothing). Small cases with gradcheck;
// one case over several vocabulary chunks without it (its gradients: tests/test_linear_cross_entropy.cpp).
// Not here: the errors, autocast and the GPT-2 loss (tests/test_linear_cross_entropy.cpp); speed
// (examples/bench/bench_linear_ce.cpp).
#include <cmath>

#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;

// in: x (N, K), w (V, K), target (N)[, bias (V)] -> the loss of torch's
// cross_entropy(linear(x, w, bias), target, reduction=..., label_smoothing=eps), ignore_index -100.
Tensor lce_reference(const std::vector<Tensor>& in, Reduction reduction, double eps) {
  const int64_t n = in[0].size(0), k = in[0].size(1), nv = in[1].size(0);
  const V x = in[0].detach().to_vector<double>(), w = in[1].detach().to_vector<double>();
  const std::vector<int64_t> t = in[2].to_vector<int64_t>();
  const V b = in.size() == 4 ? in[3].detach().to_vector<double>() : V(size_t(nv), 0.0);
  V losses;
  double total = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) {
    V logits(static_cast<size_t>(nv));
    double m = -INFINITY;
    for (int64_t c = 0; c < nv; ++c) {
      double acc = b[size_t(c)];
      for (int64_t p = 0; p < k; ++p) acc += x[size_t(i * k + p)] * w[size_t(c * k + p)];
      logits[size_t(c)] = acc;
      m = std::max(m, acc);
    }
    double s = 0, sum = 0;
    for (double l : logits) {
      s += std::exp(l - m);
      sum += l;
    }
    const int64_t ti = t[size_t(i)];
    double loss = 0;
    if (ti != -100) {
      loss = m + std::log(s) - (1 - eps) * logits[size_t(ti)] - eps / double(nv) * sum;
      ++valid;
    }
    losses.push_back(loss);
    total += loss;
  }
  if (reduction == Reduction::None) return from_vector(losses, {n}, DType::F64);
  if (reduction == Reduction::Mean) total /= double(valid);
  return from_vector({total}, {}, DType::F64);
}

OpCase lce_case(const std::string& label, int64_t n, int64_t k, int64_t nv, const std::vector<int64_t>& targets,
                bool bias, uint64_t seed) {
  OpCase c{label, {uniform_values({n, k}, -1, 1, seed), uniform_values({nv, k}, -1, 1, seed + 1), ints(targets, {n})}};
  if (bias) c.inputs.push_back(uniform_values({nv}, -1, 1, seed + 2));
  return c;
}

}  // namespace

void add_linear_cross_entropy_specs(std::vector<OpSpec>& specs) {
  for (const CrossEntropyVariant& v : cross_entropy_variants()) {
    OpSpec s;
    s.name = "linear_cross_entropy " + v.name;
    s.covers = {OpId::LinearCrossEntropy, OpId::LinearCrossEntropyBackward};
    s.fn = [v](const std::vector<Tensor>& in) {
      return linear_cross_entropy(in[0], in[1], in[2], in.size() == 4 ? in[3] : Tensor(), v.reduction, v.eps);
    };
    s.reference = [v](const std::vector<Tensor>& in) { return lce_reference(in, v.reduction, v.eps); };
    s.cases = [v] {
      std::vector<OpCase> cases = {
          lce_case("x (4, 3), w (5, 3)", 4, 3, 5, {0, 4, 2, 1}, false, 11),
          lce_case("x (5, 6), w (7, 6) + bias, an ignored row", 5, 6, 7, {6, -100, 0, 3, 3}, true, 21),
          lce_case("x (3, 2), w (70, 2): more classes than the smallest chunk", 3, 2, 70, {69, 0, 64}, false, 31),
          lce_case("K = 0: the bias alone", 2, 0, 3, {1, 2}, true, 51),
      };
      // The mean of no rows is NaN (0 / 0, as cross_entropy's): no finite differences to check.
      if (v.reduction != Reduction::Mean) cases.push_back(lce_case("no rows: x (0, 3)", 0, 3, 4, {}, true, 41));
      return cases;
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.integers = false;
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  {
    // Three vocabulary chunks (Note [Linear cross-entropy chunks] in
    // kernels/cpu/linear_cross_entropy.cpp: 2^21 / 100 rows -> 20928 classes a chunk) with the
    // target in each; no gradcheck (one evaluation per weight element).
    OpSpec s;
    s.name = "linear_cross_entropy over several vocabulary chunks";
    s.covers = {OpId::LinearCrossEntropy};
    s.fn = [](const std::vector<Tensor>& in) {
      return linear_cross_entropy(in[0], in[1], in[2], in[3], Reduction::None, 0.1);
    };
    s.reference = [](const std::vector<Tensor>& in) { return lce_reference(in, Reduction::None, 0.1); };
    s.cases = [] {
      std::vector<int64_t> t;
      for (int64_t i = 0; i < 100; ++i) t.push_back(i % 5 == 4 ? -100 : (i * 997) % 50000);
      return std::vector<OpCase>{lce_case("x (100, 8), w (50000, 8) + bias", 100, 8, 50000, t, true, 61)};
    };
    s.grad = false;
    s.integers = false;
    s.dtypes = {DType::F32};
    specs.push_back(s);
  }
}

}  // namespace brisk::opcheck
