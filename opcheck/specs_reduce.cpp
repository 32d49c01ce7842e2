// opcheck/specs_reduce.cpp: specs of the reductions (nansum and logsumexp included), softmax and losses
// (engine/ops/reduce.cpp), each against a plain-loop F64 reference. A reduction case carries its dims and keepdim as
// two extra I64 inputs, so that one spec covers many dim lists. Not here: what does not fit the table
// (tests/test_reductions.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- cases: inputs {x, dims (I64, 1-D), keepdim (I64, 0-dim)}
OpCase reduce_case(const std::string& label, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return {label, {x, ints(dims, {int64_t(dims.size())}), ints({keepdim ? 1 : 0}, {})}};
}
Shape dims_of(const std::vector<Tensor>& in) { return Shape(in[1].to_vector<int64_t>()); }
bool keepdim_of(const std::vector<Tensor>& in) { return in[2].item<int64_t>() != 0; }
int64_t dim_of(const std::vector<Tensor>& in) { return in[1].to_vector<int64_t>().at(0); }

// Cases where every output reduces at least one element.
std::vector<OpCase> nonempty_cases() {
  return {
      reduce_case("(3, 4) over all dims", uniform_values({3, 4}, -1, 1, 1), {}, false),
      reduce_case("(3, 4) over dim 1", uniform_values({3, 4}, -1, 1, 2), {1}, false),
      reduce_case("(3, 4) over dim 0, keepdim", uniform_values({3, 4}, -1, 1, 3), {0}, true),
      reduce_case("(2, 3, 4) over dims (0, 2)", uniform_values({2, 3, 4}, -1, 1, 4), {0, 2}, false),
      reduce_case("(2, 3, 4) over dims (-1, -3), keepdim", uniform_values({2, 3, 4}, -1, 1, 5), {-1, -3}, true),
      reduce_case("(2, 3, 4, 5) over dims (1, 3)", uniform_values({2, 3, 4, 5}, -1, 1, 6), {1, 3}, false),
      reduce_case("(2, 3, 4) over all dims, keepdim", uniform_values({2, 3, 4}, -1, 1, 7), {}, true),
      reduce_case("(2, 3, 4) over dim 1 (middle)", uniform_values({2, 3, 4}, -1, 1, 8), {1}, false),
      reduce_case("(37, 70) over dim 0 (rows, a partial column tile)", uniform_values({37, 70}, -1, 1, 9), {0}, false),
      reduce_case("(3, 1100) over dim 1 (pairwise leaves)", uniform_values({3, 1100}, -1, 1, 10), {1}, false),
      reduce_case("(1, 5) over dim 0 (size 1)", uniform_values({1, 5}, -1, 1, 11), {0}, false),
      reduce_case("0-dim over all dims", uniform_values({}, -1, 1, 12), {}, false),
      reduce_case("0-dim over dim -1", uniform_values({}, -1, 1, 13), {-1}, false),
  };
}

// Size-0 cases where no output exists or every output reduces nothing.
std::vector<OpCase> empty_cases() {
  return {
      reduce_case("(0, 3) over dim 0 (sums of nothing)", uniform_values({0, 3}, -1, 1, 20), {0}, false),
      reduce_case("(0, 3) over all dims", uniform_values({0, 3}, -1, 1, 21), {}, false),
      reduce_case("(0, 3) over dim 1 (no outputs)", uniform_values({0, 3}, -1, 1, 22), {1}, false),
  };
}

// Only the cases without any reduction of zero elements (max, argmax, var: NaN or error).
std::vector<OpCase> no_outputs_case() { return {empty_cases()[2]}; }

template <class... Lists>
std::function<std::vector<OpCase>()> concat(Lists... lists) {
  return [=] {
    std::vector<OpCase> all;
    for (const auto& list : {lists()...}) all.insert(all.end(), list.begin(), list.end());
    return all;
  };
}

// ---- references
// Groups x's elements by output (row-major within each group) and applies f to each group.
Tensor reduce_reference(const Tensor& x, const Shape& dims, bool keepdim, const std::function<double(const V&)>& f,
                        DType out = DType::F64) {
  const int nd = x.dim();
  std::vector<bool> reduced(size_t(nd), dims.empty());
  for (int64_t d : dims) {
    if (nd > 0) reduced[size_t(d < 0 ? d + nd : d)] = true;
  }
  Shape out_shape;
  for (int d = 0; d < nd; ++d) {
    if (!reduced[size_t(d)]) {
      out_shape.push_back(x.sizes()[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  std::vector<V> groups(size_t(out_shape.numel()));
  const V values = x.detach().to_vector<double>();
  for (int64_t k = 0; k < int64_t(values.size()); ++k) {
    int64_t rest = k;
    int64_t o = 0;
    int64_t scale = 1;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t i = rest % x.sizes()[d];
      rest /= x.sizes()[d];
      if (!reduced[size_t(d)]) {
        o += i * scale;
        scale *= x.sizes()[d];
      }
    }
    groups[size_t(o)].push_back(values[size_t(k)]);
  }
  V result;
  for (const V& g : groups) result.push_back(f(g));
  return from_vector(result, out_shape, out);
}

// Applies f to each line of x along `dim` (softmax-like: the output has x's shape).
Tensor along_dim_reference(const Tensor& x, int64_t dim, const std::function<V(const V&)>& f) {
  const V values = x.detach().to_vector<double>();
  if (x.dim() == 0) return from_vector(f(values), {}, DType::F64);
  const int d = int(dim < 0 ? dim + x.dim() : dim);
  const int64_t n = x.sizes()[d];
  int64_t inner = 1;
  for (int k = d + 1; k < x.dim(); ++k) inner *= x.sizes()[k];
  const int64_t outer = n == 0 ? 0 : int64_t(values.size()) / (n * inner);
  V result(values.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      V line;
      for (int64_t j = 0; j < n; ++j) line.push_back(values[size_t((o * n + j) * inner + i)]);
      const V out = f(line);
      for (int64_t j = 0; j < n; ++j) result[size_t((o * n + j) * inner + i)] = out[size_t(j)];
    }
  }
  return from_vector(result, x.sizes(), DType::F64);
}

double ref_sum(const V& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double ref_mean(const V& v) { return ref_sum(v) / double(v.size()); }
double ref_nansum(const V& v) {
  double s = 0;
  for (double x : v) s += x != x ? 0 : x;
  return s;
}
double ref_max(const V& v) { return *std::max_element(v.begin(), v.end()); }
double ref_min(const V& v) { return *std::min_element(v.begin(), v.end()); }
double ref_var(const V& v, double correction) {
  const double m = ref_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(0.0, double(v.size()) - correction);
}
double ref_argmax(const V& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); }
double ref_argmin(const V& v) { return double(std::min_element(v.begin(), v.end()) - v.begin()); }
V ref_softmax(const V& v) {
  const double m = v.empty() ? 0 : ref_max(v);
  V e;
  for (double x : v) e.push_back(std::exp(x - m));
  const double s = ref_sum(e);
  for (double& x : e) x /= s;
  return e;
}
V ref_log_softmax(const V& v) {
  V p = ref_softmax(v);
  for (double& x : p) x = std::log(x);
  return p;
}
// torch.logsumexp: NaN propagates, an infinite maximum is the result, no elements give -inf.
double ref_logsumexp(const V& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) {
    if (x != x) return x;
    m = std::max(m, x);
  }
  if (std::isinf(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// ---- specs
using ReduceFn = std::function<Tensor(const Tensor&, const Shape&, bool)>;

OpSpec reduce_spec(const std::string& name, OpId id, ReduceFn op, std::function<double(const V&)> ref,
                   std::function<std::vector<OpCase>()> cases) {
  OpSpec s;
  s.name = name;
  s.covers = {id};
  s.fn = [op](const std::vector<Tensor>& in) { return op(in[0], dims_of(in), keepdim_of(in)); };
  s.reference = [ref](const std::vector<Tensor>& in) {
    return reduce_reference(in[0], dims_of(in), keepdim_of(in), ref);
  };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  s.tol_half = 3e-2;  // sums of up to 1100 rounded 16-bit inputs
  return s;
}

// Distinct values on a 0.25 grid (exact in BF16), shuffled: argmax is the same in every dtype.
Tensor grid_values(const Shape& shape, uint64_t seed) {
  V v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * double(i) - 2.0;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return from_vector(v, shape, DType::F64);
}

std::vector<OpCase> arg_cases() {
  return {
      reduce_case("(3, 4) dim 1", grid_values({3, 4}, 1), {1}, false),
      reduce_case("(3, 4) dim 0, keepdim", grid_values({3, 4}, 2), {0}, true),
      reduce_case("(2, 3, 4) dim -1", grid_values({2, 3, 4}, 3), {-1}, false),
      reduce_case("(2, 3, 4) dim 1", grid_values({2, 3, 4}, 4), {1}, false),
      reduce_case("0-dim dim 0", grid_values({}, 5), {0}, false),
      reduce_case("ties: the first one wins", from_vector({1, 3, 3, 2, 5, 5, 0, 5}, {2, 4}, DType::F64), {1}, false),
      reduce_case("(0, 3) dim 1 (no outputs)", uniform_values({0, 3}, -1, 1, 6), {1}, false),
  };
}

// Cross-entropy cases: logits (N, C) and targets (some ignored with -100).
std::vector<OpCase> ce_cases() {
  return {
      {"(4, 5)", {uniform_values({4, 5}, -2, 2, 1), ints({0, 3, 4, 1}, {4})}},
      {"(3, 7), one ignored", {uniform_values({3, 7}, -2, 2, 2), ints({6, -100, 2}, {3})}},
      {"(6, 2)", {uniform_values({6, 2}, -3, 3, 3), ints({0, 1, 1, 0, 1, 0}, {6})}},
      {"(2, 300) (long rows)", {uniform_values({2, 300}, -2, 2, 4), ints({17, 299}, {2})}},
  };
}

// Plain-loop cross-entropy over rows of logits (N, C).
Tensor ce_reference(const Tensor& logits, const Tensor& target, Reduction reduction, double eps) {
  const int64_t n = logits.sizes()[0];
  const int64_t c = logits.sizes()[1];
  const V x = logits.detach().to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  V loss;
  double total = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[size_t(i)] == -100) {
      loss.push_back(0);
      continue;
    }
    const V row(x.begin() + i * c, x.begin() + (i + 1) * c);
    const V logp = ref_log_softmax(row);
    double l = -(1 - eps) * logp[size_t(t[size_t(i)])];
    for (double v : logp) l -= eps / double(c) * v;
    loss.push_back(l);
    total += l;
    ++valid;
  }
  if (reduction == Reduction::None) return from_vector(loss, {n}, DType::F64);
  if (reduction == Reduction::Sum) return from_vector({total}, {}, DType::F64);
  return from_vector({total / double(valid)}, {}, DType::F64);
}

void add_specs(std::vector<OpSpec>& specs) {
  auto general = [] { return nonempty_cases(); };
  auto empty = [] { return empty_cases(); };
  auto no_outputs = [] { return no_outputs_case(); };

  // sum, mean
  {
    OpSpec s = reduce_spec(
        "sum", OpId::Sum, [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, ref_sum,
        concat(general, empty));
    specs.push_back(s);
    OpSpec i = s;
    i.name = "sum of I64 (gives I64)";
    i.cases = [] {
      return std::vector<OpCase>{reduce_case("(2, 3) over dim 1", ints({1, -2, 3, 4, 5, 6}, {2, 3}), {1}, false),
                                 reduce_case("(2, 3) over all dims", ints({1, -2, 3, 4, 5, 6}, {2, 3}), {}, false)};
    };
    i.reference = [](const std::vector<Tensor>& in) {
      return reduce_reference(in[0], dims_of(in), keepdim_of(in), ref_sum, DType::I64);
    };
    i.dtypes = {};
    specs.push_back(i);
    // nansum: as sum without NaN, then NaN among the elements (counted as 0, no gradient)
    ReduceFn ns = [](const Tensor& x, const Shape& d, bool k) { return nansum(x, d, k); };
    specs.push_back(reduce_spec("nansum", OpId::Nansum, ns, ref_nansum, concat(general, empty)));
    OpSpec n = reduce_spec("nansum (NaN elements)", OpId::Nansum, ns, ref_nansum, [] {
      Tensor x = from_vector({1, kNaN, 3, -2, kNaN, kNaN, 0.5, 4, 2, -1, kNaN, 6}, {3, 4}, DType::F64);
      return std::vector<OpCase>{reduce_case("(3, 4) over dim 1", x, {1}, false),
                                 reduce_case("(3, 4) over dim 0, keepdim", x, {0}, true),
                                 reduce_case("(3, 4) over all dims", x, {}, false)};
    });
    n.integers = false;
    specs.push_back(n);
    specs.push_back(reduce_spec(
        "mean", OpId::Sum, [](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }, ref_mean,
        concat(general, no_outputs)));
  }
  // amax, amin, max, min
  specs.push_back(reduce_spec(
      "amax", OpId::Amax, [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }, ref_max,
      concat(general, no_outputs)));
  specs.push_back(reduce_spec(
      "amin", OpId::Amin, [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); }, ref_min,
      concat(general, no_outputs)));
  specs.push_back(reduce_spec(
      "max (all elements)", OpId::Amax, [](const Tensor& x, const Shape&, bool) { return max(x); }, ref_max, general));
  specs.back().reference = [](const std::vector<Tensor>& in) { return reduce_reference(in[0], {}, false, ref_max); };
  specs.push_back(reduce_spec(
      "min (all elements)", OpId::Amin, [](const Tensor& x, const Shape&, bool) { return min(x); }, ref_min, general));
  specs.back().reference = [](const std::vector<Tensor>& in) { return reduce_reference(in[0], {}, false, ref_min); };
  // logsumexp, and its edge values (infinite and NaN elements, huge values)
  {
    ReduceFn lse = [](const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); };
    specs.push_back(reduce_spec("logsumexp", OpId::Logsumexp, lse, ref_logsumexp, concat(general, empty)));
    const double inf = std::numeric_limits<double>::infinity();
    OpSpec e = reduce_spec("logsumexp (edge values)", OpId::Logsumexp, lse, ref_logsumexp, [inf] {
      Tensor x = from_vector({-inf, -inf, -inf, -inf, 1,    inf,  2,    3,    kNaN, 1,    inf,      -inf,
                              inf,  -inf, 0,    0,    -inf, 1000, 1000, -inf, -1e4, -1e4, -1e4 + 1, -inf},
                             {6, 4}, DType::F64);
      return std::vector<OpCase>{reduce_case("rows of edge values, dim 1", x, {1}, false),
                                 reduce_case("columns of edge values, dim 0, keepdim", x, {0}, true)};
    });
    e.grad = false;
    e.dtypes = {DType::F32};
    specs.push_back(e);
  }
  // var, std: cases where every output has more elements than the correction
  {
    auto several = [] {
      std::vector<OpCase> cases;
      for (const OpCase& c : nonempty_cases()) {
        const Tensor& x = c.inputs[0];
        const Shape dims(c.inputs[1].to_vector<int64_t>());
        int64_t n = 1;
        for (int d = 0; d < x.dim(); ++d) {
          bool r = dims.empty();
          for (int64_t k : dims) r = r || (k < 0 ? k + x.dim() : k) == d;
          if (r) n *= x.sizes()[d];
        }
        if (n > 1) cases.push_back(c);
      }
      return cases;
    };
    for (int64_t correction : {1, 0, 2}) {
      specs.push_back(reduce_spec(
          "var correction " + std::to_string(correction), OpId::Var,
          [correction](const Tensor& x, const Shape& d, bool k) { return var(x, d, correction, k); },
          [correction](const V& v) { return ref_var(v, double(correction)); }, concat(several, no_outputs)));
    }
    specs.push_back(reduce_spec(
        "std", OpId::Var, [](const Tensor& x, const Shape& d, bool k) { return std(x, d, 1, k); },
        [](const V& v) { return std::sqrt(ref_var(v, 1)); }, concat(several, no_outputs)));
  }
  // Edge values: NaN wins max/min and argmax/argmin (the first NaN), infinities and ties.
  {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    auto nan_max = [](const V& v) {
      for (double x : v) {
        if (x != x) return x;
      }
      return ref_max(v);
    };
    auto nan_min = [](const V& v) {
      for (double x : v) {
        if (x != x) return x;
      }
      return ref_min(v);
    };
    auto first_nan_or = [](double (*f)(const V&)) {
      return [f](const V& v) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i] != v[i]) return double(i);
        }
        return f(v);
      };
    };
    auto edge_cases = [nan, inf] {
      Tensor x = from_vector({1, nan, 3, nan, 2, 2, -inf, 1, inf, -inf, 0, -0.0, 5, 5, 5, 5, -inf, -inf, -inf, -inf},
                             {5, 4}, DType::F64);
      return std::vector<OpCase>{reduce_case("rows of edge values, dim 1", x, {1}, false),
                                 reduce_case("columns of edge values, dim 0", x, {0}, false)};
    };
    auto add = [&](const std::string& name, OpId id, ReduceFn op, std::function<double(const V&)> ref, DType out) {
      OpSpec s = reduce_spec(name + " (edge values)", id, op, ref, edge_cases);
      s.reference = [ref, out](const std::vector<Tensor>& in) {
        return reduce_reference(in[0], dims_of(in), keepdim_of(in), ref, out);
      };
      s.grad = false;
      s.dtypes = {DType::F32};
      specs.push_back(s);
    };
    add(
        "amax", OpId::Amax, [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }, nan_max, DType::F64);
    add(
        "amin", OpId::Amin, [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); }, nan_min, DType::F64);
    add(
        "argmax", OpId::Argmax, [](const Tensor& x, const Shape& d, bool k) { return argmax(x, d[0], k); },
        first_nan_or(ref_argmax), DType::I64);
    add(
        "argmin", OpId::Argmin, [](const Tensor& x, const Shape& d, bool k) { return argmin(x, d[0], k); },
        first_nan_or(ref_argmin), DType::I64);
  }
  // argmax, argmin
  {
    OpSpec s;
    s.name = "argmax over a dim";
    s.covers = {OpId::Argmax};
    s.fn = [](const std::vector<Tensor>& in) { return argmax(in[0], dim_of(in), keepdim_of(in)); };
    s.reference = [](const std::vector<Tensor>& in) {
      return reduce_reference(in[0], {dim_of(in)}, keepdim_of(in), ref_argmax, DType::I64);
    };
    s.cases = arg_cases;
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
    OpSpec m = s;
    m.name = "argmin over a dim";
    m.covers = {OpId::Argmin};
    m.fn = [](const std::vector<Tensor>& in) { return argmin(in[0], dim_of(in), keepdim_of(in)); };
    m.reference = [](const std::vector<Tensor>& in) {
      return reduce_reference(in[0], {dim_of(in)}, keepdim_of(in), ref_argmin, DType::I64);
    };
    specs.push_back(m);
    OpSpec f = s;
    f.name = "argmax of all elements (flat index)";
    f.fn = [](const std::vector<Tensor>& in) { return argmax(in[0]); };
    f.reference = [](const std::vector<Tensor>& in) {
      return reduce_reference(in[0], {}, false, ref_argmax, DType::I64);
    };
    f.cases = [] {
      std::vector<OpCase> cases = arg_cases();
      cases.pop_back();  // argmax of no elements is an error
      return cases;
    };
    specs.push_back(f);
    OpSpec i = s;
    i.name = "argmax of I64";
    i.cases = [] {
      return std::vector<OpCase>{reduce_case("(2, 3) dim 1", ints({4, 9, 9, -1, -7, 0}, {2, 3}), {1}, false)};
    };
    i.dtypes = {};
    specs.push_back(i);
  }
  // softmax, log_softmax: inputs {x, dim (I64, 1-D)}
  {
    auto cases = [] {
      auto c = [](const std::string& label, const Tensor& x, int64_t dim) {
        return OpCase{label, {x, ints({dim}, {1})}};
      };
      return std::vector<OpCase>{
          c("(3, 4) dim 1", uniform_values({3, 4}, -2, 2, 1), 1),
          c("(3, 4) dim 0", uniform_values({3, 4}, -2, 2, 2), 0),
          c("(2, 3, 4) dim -2", uniform_values({2, 3, 4}, -2, 2, 3), -2),
          c("(4, 300) dim 1 (long rows)", uniform_values({4, 300}, -3, 3, 4), 1),
          c("(5, 1) dim 1 (one element)", uniform_values({5, 1}, -2, 2, 5), 1),
          c("0-dim dim 0", uniform_values({}, -2, 2, 6), 0),
          c("(0, 3) dim 1 (size 0)", uniform_values({0, 3}, -2, 2, 7), 1),
      };
    };
    OpSpec s;
    s.name = "softmax";
    s.covers = {OpId::Softmax};
    s.fn = [](const std::vector<Tensor>& in) { return softmax(in[0], dim_of(in)); };
    s.reference = [](const std::vector<Tensor>& in) { return along_dim_reference(in[0], dim_of(in), ref_softmax); };
    s.cases = cases;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
    OpSpec l = s;
    l.name = "log_softmax";
    l.covers = {OpId::LogSoftmax};
    l.fn = [](const std::vector<Tensor>& in) { return log_softmax(in[0], dim_of(in)); };
    l.reference = [](const std::vector<Tensor>& in) { return along_dim_reference(in[0], dim_of(in), ref_log_softmax); };
    l.tol_half = 3e-2;  // values near -6 in BF16
    specs.push_back(l);
  }
  // cross_entropy (forward kernel; gradcheck runs the fused backward kernel)
  {
    for (const CrossEntropyVariant& v : cross_entropy_variants()) {
      OpSpec s;
      s.name = "cross_entropy " + v.name;
      s.covers = {OpId::CrossEntropy, OpId::CrossEntropyBackward};
      s.fn = [v](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], v.reduction, v.eps); };
      s.reference = [v](const std::vector<Tensor>& in) { return ce_reference(in[0], in[1], v.reduction, v.eps); };
      s.cases = ce_cases;
      s.dtypes = {DType::F32, DType::F16, DType::BF16};
      s.tol_half = 3e-2;
      specs.push_back(s);
    }
    OpSpec e;
    e.name = "cross_entropy sum of an empty batch";
    e.covers = {OpId::CrossEntropy};
    e.fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], Reduction::Sum); };
    e.reference = [](const std::vector<Tensor>& in) { return ce_reference(in[0], in[1], Reduction::Sum, 0); };
    e.cases = [] { return std::vector<OpCase>{{"(0, 3)", {uniform_values({0, 3}, -1, 1, 1), ints({}, {0})}}}; };
    specs.push_back(e);
    OpSpec one;
    one.name = "cross_entropy of one sample: logits (C), 0-dim target";
    one.covers = {OpId::CrossEntropy};
    one.fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], Reduction::None); };
    one.reference = [](const std::vector<Tensor>& in) {
      return reshape(ce_reference(reshape(in[0], {1, -1}), reshape(in[1], {1}), Reduction::None, 0), {});
    };
    one.cases = [] { return std::vector<OpCase>{{"(5)", {uniform_values({5}, -2, 2, 1), ints({3}, {})}}}; };
    specs.push_back(one);
    OpSpec k = one;
    k.name = "cross_entropy of (N, C, d): classes in dim 1";
    k.fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], Reduction::None); };
    k.reference = [](const std::vector<Tensor>& in) {
      // (N, C, d) -> rows (N * d, C) in (n, d) order.
      const Tensor rows = reshape(contiguous(permute(in[0], {0, 2, 1})), {-1, in[0].sizes()[1]});
      return reshape(ce_reference(rows, reshape(in[1], {-1}), Reduction::None, 0), in[1].sizes());
    };
    k.cases = [] {
      Tensor target = ints({0, 3, 1, 2, -100, 3}, {2, 3});
      return std::vector<OpCase>{{"(2, 4, 3)", {uniform_values({2, 4, 3}, -2, 2, 1), target}}};
    };
    specs.push_back(k);
  }
  // mse_loss (composite)
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    OpSpec s;
    s.name = std::string("mse_loss ") + (r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none");
    s.covers = {OpId::Sum};
    s.fn = [r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); };
    s.reference = [r](const std::vector<Tensor>& in) {
      const V a = in[0].detach().to_vector<double>();
      const V b = in[1].detach().to_vector<double>();
      V sq;
      for (size_t i = 0; i < a.size(); ++i) sq.push_back((a[i] - b[i]) * (a[i] - b[i]));
      if (r == Reduction::None) return from_vector(sq, in[0].sizes(), DType::F64);
      const double total = ref_sum(sq);
      return from_vector({r == Reduction::Sum ? total : total / double(sq.size())}, {}, DType::F64);
    };
    s.cases = [] {
      return std::vector<OpCase>{{"(3, 4)", {uniform_values({3, 4}, -1, 1, 1), uniform_values({3, 4}, -1, 1, 2)}},
                                 {"0-dim", {uniform_values({}, -1, 1, 3), uniform_values({}, -1, 1, 4)}}};
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
  // sum_to: inputs {x, target shape (I64, 1-D)}
  {
    OpSpec s;
    s.name = "sum_to";
    s.covers = {OpId::Sum};
    s.fn = [](const std::vector<Tensor>& in) { return sum_to(in[0], Shape(in[1].to_vector<int64_t>())); };
    s.reference = [](const std::vector<Tensor>& in) {
      const Shape target(in[1].to_vector<int64_t>());
      const Tensor& x = in[0];
      const int lead = x.dim() - target.size();
      std::vector<int64_t> dims;
      for (int d = 0; d < x.dim(); ++d) {
        if (d < lead || target[d - lead] == 1) dims.push_back(d);
      }
      if (dims.empty()) return reshape(x.detach(), target);
      return reshape(reduce_reference(x, Shape(dims), true, ref_sum), target);
    };
    auto c = [](const std::string& label, const Shape& from, const std::vector<int64_t>& to, uint64_t seed) {
      return OpCase{label, {uniform_values(from, -1, 1, seed), ints(to, {int64_t(to.size())})}};
    };
    s.cases = [c] {
      return std::vector<OpCase>{
          c("(2, 3, 4) to (3, 1)", {2, 3, 4}, {3, 1}, 1),
          c("(2, 3) to (2, 3) (unchanged)", {2, 3}, {2, 3}, 2),
          c("(1, 3) to (3) (a view)", {1, 3}, {3}, 3),
          c("(4, 1, 3) to (1, 3)", {4, 1, 3}, {1, 3}, 4),
          c("(3) to 0-dim", {3}, {}, 5),
          c("(2, 5) to (5)", {2, 5}, {5}, 6),
      };
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_reduce_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
