// opcheck/specs_scan.cpp: op specs of the scan family (cumsum, cumprod, logcumsumexp, argsort)
// and of the composites a PyTorch port reaches for first: sort, topk, prod, max/min over a dim,
// flip, roll, repeat/tile, tril/triu, split/chunk/unbind, norms, einsum, bmm/addmm/baddbmm/outer,
// masked_select and tensor indexing. References are plain loops over the values.
// Not here: the runner that checks every spec (tests/test_op_specs.cpp, tests/test_cuda.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/indexing.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;
using LineFn = std::function<V(const V&)>;

// Applies f to every line of x along dim (x read as F64); f may change the line's length.
Tensor along_dim(const Tensor& x, int64_t dim, const LineFn& f) {
  const Tensor c = cast(x, DType::F64).contiguous();
  const V v = c.to_vector<double>();
  const int nd = std::max(c.dim(), 1);
  const int d = int(dim < 0 ? dim + nd : dim);
  Shape s = c.dim() == 0 ? Shape{1} : c.sizes();
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= s[k];
  for (int k = d + 1; k < s.size(); ++k) inner *= s[k];
  const int64_t n = s[d];
  int64_t m = -1;
  V out;
  std::vector<V> lines;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      V line(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) line[size_t(k)] = v[size_t((o * n + k) * inner + i)];
      lines.push_back(f(line));
      m = int64_t(lines.back().size());
    }
  if (m < 0) m = int64_t(f(V(size_t(n))).size());
  out.assign(size_t(outer * m * inner), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t k = 0; k < m; ++k) out[size_t((o * m + k) * inner + i)] = lines[size_t(o * inner + i)][size_t(k)];
  Shape os = s;
  os[d] = m;
  if (c.dim() == 0) os = Shape{};
  return from_vector(out, os, DType::F64);
}

// log(sum_{j <= i} exp(l[j])) for each i, from each prefix's maximum (no overflow); NaN
// propagates, a prefix whose maximum is infinite gives that infinity.
V ref_logcumsumexp(const V& l) {
  V o;
  for (size_t i = 0; i < l.size(); ++i) {
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (size_t j = 0; j <= i; ++j) {
      nan = nan || l[j] != l[j];
      m = std::max(m, l[j]);
    }
    double s = 0;
    for (size_t j = 0; j <= i && !std::isinf(m); ++j) s += std::exp(l[j] - m);
    o.push_back(nan ? l[0] + std::numeric_limits<double>::quiet_NaN() : std::isinf(m) ? m : m + std::log(s));
  }
  return o;
}

std::vector<size_t> stable_order(const V& line, bool descending) {
  std::vector<size_t> order(line.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return descending ? line[a] > line[b] : line[a] < line[b]; });
  return order;
}

std::function<std::vector<OpCase>()> line_cases(double lo, double hi) {
  return [lo, hi] {
    return std::vector<OpCase>{
        {"(3, 5)", {uniform_values({3, 5}, lo, hi, 1)}},
        {"(2, 3, 4)", {uniform_values({2, 3, 4}, lo, hi, 2)}},
        {"(4, 1)", {uniform_values({4, 1}, lo, hi, 3)}},
    };
  };
}

OpSpec spec(const std::string& name, std::vector<OpId> covers, TensorFn fn, TensorFn ref,
            std::function<std::vector<OpCase>()> cases) {
  OpSpec s;
  s.name = name;
  s.covers = std::move(covers);
  s.fn = std::move(fn);
  s.reference = std::move(ref);
  s.cases = std::move(cases);
  return s;
}

void add_scan_op_specs(std::vector<OpSpec>& specs) {
  for (int64_t dim : {int64_t(1), int64_t(-1), int64_t(0)}) {
    const std::string d = std::to_string(dim);
    OpSpec s = spec(
        "cumsum dim " + d, {OpId::Cumsum}, [dim](const std::vector<Tensor>& in) { return cumsum(in[0], dim); },
        [dim](const std::vector<Tensor>& in) {
          return along_dim(in[0], dim, [](const V& l) {
            V o(l.size());
            std::partial_sum(l.begin(), l.end(), o.begin());
            return o;
          });
        },
        line_cases(-1, 1));
    s.dtypes = {DType::F32, DType::F64, DType::BF16};
    specs.push_back(s);
    s = spec(
        "cumprod dim " + d, {OpId::Cumprod}, [dim](const std::vector<Tensor>& in) { return cumprod(in[0], dim); },
        [dim](const std::vector<Tensor>& in) {
          return along_dim(in[0], dim, [](const V& l) {
            V o(l.size());
            std::partial_sum(l.begin(), l.end(), o.begin(), std::multiplies<double>());
            return o;
          });
        },
        line_cases(0.5, 1.5));
    specs.push_back(s);
    s = spec(
        "logcumsumexp dim " + d, {OpId::Logcumsumexp},
        [dim](const std::vector<Tensor>& in) { return logcumsumexp(in[0], dim); },
        [dim](const std::vector<Tensor>& in) { return along_dim(in[0], dim, ref_logcumsumexp); }, line_cases(-3, 3));
    s.dtypes = {DType::F32, DType::F64, DType::BF16};
    specs.push_back(s);
  }
  {
    // Edge values: all -inf, +inf, NaN, huge values (exp would overflow), -inf after finite.
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    OpSpec e = spec(
        "logcumsumexp (edge values)", {OpId::Logcumsumexp},
        [](const std::vector<Tensor>& in) { return logcumsumexp(in[0], 1); },
        [](const std::vector<Tensor>& in) { return along_dim(in[0], 1, ref_logcumsumexp); },
        [inf, nan] {
          return std::vector<OpCase>{{"rows of edge values",
                                      {from_vector({-inf, -inf, 1,    -inf, inf,   2,    -inf, inf,  1,    nan,
                                                    2,    3,    1000, 1001, -1000, 1000, 2,    -inf, -inf, 5},
                                                   {5, 4}, DType::F64)}}};
        });
    e.grad = false;
    e.integers = false;
    specs.push_back(e);
  }
  for (bool desc : {false, true}) {
    OpSpec s = spec(
        desc ? "argsort descending" : "argsort", {OpId::Argsort},
        [desc](const std::vector<Tensor>& in) { return argsort(in[0], -1, desc); },
        [desc](const std::vector<Tensor>& in) {
          return along_dim(in[0], -1, [desc](const V& l) {
            V o;
            for (size_t i : stable_order(l, desc)) o.push_back(double(i));
            return o;
          });
        },
        line_cases(-1, 1));
    s.grad = false;
    specs.push_back(s);
    OpSpec t = spec(
        desc ? "sort values descending (composite)" : "sort values (composite)", {},
        [desc](const std::vector<Tensor>& in) { return sort(in[0], 0, desc).values; },
        [desc](const std::vector<Tensor>& in) {
          return along_dim(in[0], 0, [desc](const V& l) {
            V o;
            for (size_t i : stable_order(l, desc)) o.push_back(l[i]);
            return o;
          });
        },
        line_cases(-1, 1));
    specs.push_back(t);
  }
  {
    OpSpec s = spec(
        "topk k 2 (composite)", {}, [](const std::vector<Tensor>& in) { return topk(in[0], 2, 0).values; },
        [](const std::vector<Tensor>& in) {
          return along_dim(in[0], 0, [](const V& l) {
            V o;
            for (size_t i : stable_order(l, true)) o.push_back(l[i]);
            o.resize(std::min<size_t>(2, o.size()));
            return o;
          });
        },
        [] {
          return std::vector<OpCase>{{"(5, 3)", {uniform_values({5, 3}, -1, 1, 4)}},
                                     {"(2, 4)", {uniform_values({2, 4}, -1, 1, 5)}}};
        });
    specs.push_back(s);
    OpSpec p = spec(
        "prod over a dim (composite)", {}, [](const std::vector<Tensor>& in) { return prod(in[0], -1, true); },
        [](const std::vector<Tensor>& in) {
          return along_dim(in[0], -1, [](const V& l) {
            return V{std::accumulate(l.begin(), l.end(), 1.0, std::multiplies<double>())};
          });
        },
        line_cases(0.5, 1.5));
    specs.push_back(p);
  }
  for (bool is_max : {true, false}) {
    specs.push_back(spec(
        is_max ? "max over a dim, values (composite)" : "min over a dim, values (composite)", {},
        [is_max](const std::vector<Tensor>& in) { return (is_max ? max(in[0], 1) : min(in[0], 1)).values; },
        [is_max](const std::vector<Tensor>& in) {
          Tensor r = along_dim(in[0], 1, [is_max](const V& l) {
            return V{is_max ? *std::max_element(l.begin(), l.end()) : *std::min_element(l.begin(), l.end())};
          });
          return r.squeeze(1);
        },
        line_cases(-1, 1)));
  }
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    specs.push_back(spec(
        "norm p " + std::to_string(p) + " over dim 1 (composite)", {},
        [p](const std::vector<Tensor>& in) { return norm(in[0], p, {1}); },
        [p](const std::vector<Tensor>& in) {
          return along_dim(in[0], 1,
                           [p](const V& l) {
                             double acc = 0;
                             for (double v : l)
                               acc = std::isinf(p) ? std::max(acc, std::fabs(v)) : acc + std::pow(std::fabs(v), p);
                             return V{std::isinf(p) ? acc : std::pow(acc, 1 / p)};
                           })
              .squeeze(1);
        },
        line_cases(0.2, 1)));
  }
}

void add_shape_specs(std::vector<OpSpec>& specs) {
  specs.push_back(spec(
      "flip dims 0 and -1 (composite)", {},
      [](const std::vector<Tensor>& in) {
        return flip(in[0], {0, -1});
      },
      [](const std::vector<Tensor>& in) {
        Tensor a = along_dim(in[0], 0, [](const V& l) { return V(l.rbegin(), l.rend()); });
        return along_dim(a, -1, [](const V& l) { return V(l.rbegin(), l.rend()); });
      },
      line_cases(-1, 1)));
  specs.push_back(spec(
      "roll by 2 and -7 (composite)", {}, [](const std::vector<Tensor>& in) { return roll(roll(in[0], 2, 0), -7, -1); },
      [](const std::vector<Tensor>& in) {
        auto rolled = [](int64_t k) {
          return [k](const V& l) {
            const int64_t n = int64_t(l.size());
            V o(l.size());
            for (int64_t i = 0; i < n; ++i) o[size_t(((i + k) % n + n) % n)] = l[size_t(i)];
            return o;
          };
        };
        return along_dim(along_dim(in[0], 0, rolled(2)), -1, rolled(-7));
      },
      line_cases(-1, 1)));
  specs.push_back(spec(
      "repeat (2, 1, 3) of a (2, 3) (composite)", {},
      [](const std::vector<Tensor>& in) {
        return repeat(in[0], {2, 1, 3});
      },
      [](const std::vector<Tensor>& in) {
        const V v = in[0].to_vector<double>();
        const int64_t r = in[0].size(0), c = in[0].size(1);
        V o;
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < 3 * c; ++j) o.push_back(v[size_t(i * c + j % c)]);
        return from_vector(o, {2, r, 3 * c}, DType::F64);
      },
      [] {
        return std::vector<OpCase>{{"(2, 3)", {uniform_values({2, 3}, -1, 1, 1)}}};
      }));
  for (bool lower : {true, false}) {
    for (int64_t k : {int64_t(0), int64_t(1), int64_t(-1)}) {
      specs.push_back(spec(
          std::string(lower ? "tril" : "triu") + " diagonal " + std::to_string(k) + " (composite)", {},
          [lower, k](const std::vector<Tensor>& in) { return lower ? tril(in[0], k) : triu(in[0], k); },
          [lower, k](const std::vector<Tensor>& in) {
            const int64_t m = in[0].size(-2), n = in[0].size(-1);
            V v = in[0].to_vector<double>();
            for (size_t e = 0; e < v.size(); ++e) {
              const int64_t i = int64_t(e) / n % m, j = int64_t(e) % n;
              if (lower ? j - k > i : j - k < i) v[e] = 0;
            }
            return from_vector(v, in[0].sizes(), DType::F64);
          },
          [] {
            return std::vector<OpCase>{{"(3, 4)", {uniform_values({3, 4}, -1, 1, 1)}},
                                       {"(2, 4, 3)", {uniform_values({2, 4, 3}, -1, 1, 2)}}};
          }));
    }
  }
  // split / chunk / unbind: the pieces put back in reverse order must be the reversed blocks.
  specs.push_back(spec(
      "split by sizes, chunk, unbind (composites)", {},
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> p = split(in[0], std::vector<int64_t>{1, 3, 1}, 1);
        std::vector<Tensor> c = chunk(in[0], 2, 0);
        std::vector<Tensor> u = unbind(in[0], 0);
        return cat({p[2], p[1], p[0]}, 1) + cat({c[1], c[0]}, 0) * 0.0 + stack({u[1], u[0]}, 0).sum() * 0.0;
      },
      [](const std::vector<Tensor>& in) {
        const V v = in[0].to_vector<double>();
        const int64_t r = in[0].size(0);
        V o;
        const int order[] = {4, 1, 2, 3, 0};
        for (int64_t i = 0; i < r; ++i)
          for (int j : order) o.push_back(v[size_t(i * 5 + j)]);
        return from_vector(o, {r, 5}, DType::F64);
      },
      [] {
        return std::vector<OpCase>{{"(2, 5)", {uniform_values({2, 5}, -1, 1, 3)}}};
      }));
}

void add_linalg_index_specs(std::vector<OpSpec>& specs) {
  auto mm_ref = [](const Tensor& a, const Tensor& b) {  // (B, n, k) @ (B, k, m), plain loops
    const V x = a.to_vector<double>(), y = b.to_vector<double>();
    const int64_t B = a.size(0), n = a.size(1), k = a.size(2), m = b.size(2);
    V o(size_t(B * n * m), 0);
    for (int64_t q = 0; q < B; ++q)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j)
          for (int64_t t = 0; t < k; ++t)
            o[size_t((q * n + i) * m + j)] += x[size_t((q * n + i) * k + t)] * y[size_t((q * k + t) * m + j)];
    return from_vector(o, {B, n, m}, DType::F64);
  };
  auto bmm_cases = [] {
    return std::vector<OpCase>{
        {"(2, 3, 4) @ (2, 4, 5)", {uniform_values({2, 3, 4}, -1, 1, 1), uniform_values({2, 4, 5}, -1, 1, 2)}}};
  };
  specs.push_back(spec(
      "einsum bij,bjk->bik (composite)", {},
      [](const std::vector<Tensor>& in) {
        return einsum("bij,bjk->bik", {in[0], in[1]});
      },
      [mm_ref](const std::vector<Tensor>& in) { return mm_ref(in[0], in[1]); }, bmm_cases));
  specs.push_back(spec(
      "einsum bij,bjk (implicit output: the letters seen once, ik) (composite)", {},
      [](const std::vector<Tensor>& in) {
        return einsum("bij,bjk", {in[0], in[1]});
      },
      [mm_ref](const std::vector<Tensor>& in) { return mm_ref(in[0], in[1]).sum({0}); }, bmm_cases));
  specs.push_back(spec(
      "einsum bij,bjk->kb (sum over i, j) (composite)", {},
      [](const std::vector<Tensor>& in) {
        return einsum("bij,bjk->kb", {in[0], in[1]});
      },
      [mm_ref](const std::vector<Tensor>& in) { return mm_ref(in[0], in[1]).sum({1}).transpose(0, 1).contiguous(); },
      bmm_cases));
  specs.push_back(spec(
      "baddbmm beta 0.5 alpha 2 (composite)", {},
      [](const std::vector<Tensor>& in) { return baddbmm(in[2], in[0], in[1], 0.5, 2.0); },
      [mm_ref](const std::vector<Tensor>& in) { return in[2] * 0.5 + mm_ref(in[0], in[1]) * 2.0; },
      [] {
        return std::vector<OpCase>{{"(2, 3, 4) @ (2, 4, 5) + (3, 5)",
                                    {uniform_values({2, 3, 4}, -1, 1, 1), uniform_values({2, 4, 5}, -1, 1, 2),
                                     uniform_values({3, 5}, -1, 1, 3)}}};
      }));
  specs.push_back(spec(
      "outer (composite)", {}, [](const std::vector<Tensor>& in) { return outer(in[0], in[1]); },
      [](const std::vector<Tensor>& in) {
        const V a = in[0].to_vector<double>(), b = in[1].to_vector<double>();
        V o;
        for (double x : a)
          for (double y : b) o.push_back(x * y);
        return from_vector(o, {int64_t(a.size()), int64_t(b.size())}, DType::F64);
      },
      [] {
        return std::vector<OpCase>{{"(3) x (4)", {uniform_values({3}, -1, 1, 1), uniform_values({4}, -1, 1, 2)}}};
      }));
  {
    // x.index({Slice(1, None), None, Ellipsis, Slice(None, None, 2)}) on (3, 2, 5) -> (2, 1, 2, 3)
    using namespace indexing;
    specs.push_back(spec(
        "index: slices, None, Ellipsis (composite)", {},
        [](const std::vector<Tensor>& in) {
          return in[0].index({Slice(1, std::nullopt), None, Ellipsis, Slice(std::nullopt, std::nullopt, 2)}) * 1.0;
        },
        [](const std::vector<Tensor>& in) {
          const V v = in[0].to_vector<double>();
          V o;
          for (int64_t i = 1; i < 3; ++i)
            for (int64_t j = 0; j < 2; ++j)
              for (int64_t k = 0; k < 5; k += 2) o.push_back(v[size_t((i * 2 + j) * 5 + k)]);
          return from_vector(o, {2, 1, 2, 3}, DType::F64);
        },
        [] {
          return std::vector<OpCase>{{"(3, 2, 5)", {uniform_values({3, 2, 5}, -1, 1, 1)}}};
        }));
    specs.push_back(spec(
        "index: integer tensor and mask; masked_select (composites)", {},
        [](const std::vector<Tensor>& in) {
          Tensor rows = in[0].index({Slice(), ints({2, 0, 2, 1}, {2, 2})});  // (3, 2, 2)
          Tensor picked = in[0].index({gt(in[0], zeros({}, DType::F64))});
          Tensor selected = masked_select(in[0], gt(in[0], zeros({}, DType::F64)));
          return cat({rows.reshape({-1}), picked, selected}, 0);
        },
        [](const std::vector<Tensor>& in) {
          const V v = in[0].to_vector<double>();
          V o;
          const int cols[] = {2, 0, 2, 1};
          for (int64_t i = 0; i < 3; ++i)
            for (int c : cols) o.push_back(v[size_t(i * 3 + c)]);
          for (int rep = 0; rep < 2; ++rep)
            for (double x : v)
              if (x > 0) o.push_back(x);
          return from_vector(o, {int64_t(o.size())}, DType::F64);
        },
        [] {
          return std::vector<OpCase>{{"(3, 3)", {uniform_values({3, 3}, -1, 1, 7)}}};
        }));
    specs.push_back(spec(
        "index_put with accumulate (composite)", {},
        [](const std::vector<Tensor>& in) {
          return index_put(in[0], {Slice(), ints({0, 2, 0}, {3})}, in[1], true);
        },
        [](const std::vector<Tensor>& in) {
          V x = in[0].to_vector<double>();
          const V val = in[1].to_vector<double>();  // (3) broadcast over rows
          const int cols[] = {0, 2, 0};
          for (int64_t i = 0; i < 2; ++i)
            for (int t = 0; t < 3; ++t) x[size_t(i * 4 + cols[t])] += val[size_t(t)];
          return from_vector(x, {2, 4}, DType::F64);
        },
        [] {
          return std::vector<OpCase>{
              {"(2, 4) with (3)", {uniform_values({2, 4}, -1, 1, 1), uniform_values({3}, -1, 1, 2)}}};
        }));
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_scan_specs(std::vector<OpSpec>& specs) {
  add_scan_op_specs(specs);
  add_shape_specs(specs);
  add_linalg_index_specs(specs);
}

}  // namespace brisk::opcheck
