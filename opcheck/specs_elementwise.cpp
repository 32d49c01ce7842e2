// opcheck/specs_elementwise.cpp: specs of the elementwise ops (engine/ops/elementwise.cpp).
#include <cmath>
#include <limits>

#include "kernels/functors.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

// Note [Functor parameters]: a functor with parameters is built only through its from(); one
// without from() does not compile as a kernel's functor.
struct ParameterWithoutFrom {
  double slope;
  double operator()(double x) const { return x < 0 ? slope * x : x; }
};
static_assert(!functors::Buildable<ParameterWithoutFrom>);
static_assert(functors::Buildable<functors::Softplus> && functors::Buildable<functors::Relu>);

using V = std::vector<double>;
using Fn1 = double (*)(double);

// Cases for a unary op on values in [lo, hi): a matrix, a scalar, an empty tensor.
std::function<std::vector<OpCase>()> unary_cases(double lo, double hi) {
  return [lo, hi] {
    return std::vector<OpCase>{
        {"(3, 4)", {uniform_values({3, 4}, lo, hi, 1)}},
        {"0-dim", {uniform_values({}, lo, hi, 2)}},
        {"size 0", {uniform_values({0, 3}, lo, hi, 3)}},
        {"(2, 3, 5)", {uniform_values({2, 3, 5}, lo, hi, 4)}},
    };
  };
}

// Cases for a binary op: same shape, broadcasting both ways, a scalar, empty.
std::function<std::vector<OpCase>()> binary_cases(double lo, double hi) {
  return [lo, hi] {
    return std::vector<OpCase>{
        {"(3, 4) with (3, 4)", {uniform_values({3, 4}, lo, hi, 1), uniform_values({3, 4}, lo, hi, 2)}},
        {"broadcast (3, 1) with (4)", {uniform_values({3, 1}, lo, hi, 3), uniform_values({4}, lo, hi, 4)}},
        {"broadcast (2, 1, 3) with (4, 1)", {uniform_values({2, 1, 3}, lo, hi, 5), uniform_values({4, 1}, lo, hi, 6)}},
        {"with a 0-dim", {uniform_values({2, 3}, lo, hi, 7), uniform_values({}, lo, hi, 8)}},
        {"size 0", {uniform_values({0, 3}, lo, hi, 9), uniform_values({3}, lo, hi, 10)}},
    };
  };
}

OpSpec unary(const std::string& name, OpId id, Tensor (*op)(const Tensor&), Fn1 ref, double lo, double hi) {
  OpSpec s;
  s.name = name;
  s.covers = {id};
  s.fn = [op](const std::vector<Tensor>& in) { return op(in[0]); };
  s.reference = [ref](const std::vector<Tensor>& in) {
    return map_reference(in, [ref](const V& a) { return ref(a[0]); });
  };
  s.cases = unary_cases(lo, hi);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec binary(const std::string& name, OpId id, std::function<Tensor(const Tensor&, const Tensor&)> op,
              double (*ref)(double, double), double lo, double hi) {
  OpSpec s;
  s.name = name;
  s.covers = {id};
  s.fn = [op](const std::vector<Tensor>& in) { return op(in[0], in[1]); };
  s.reference = [ref](const std::vector<Tensor>& in) {
    return map_reference(in, [ref](const V& a) { return ref(a[0], a[1]); });
  };
  s.cases = binary_cases(lo, hi);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec compare(const std::string& name, OpId id, Tensor (*op)(const Tensor&, const Tensor&),
               bool (*ref)(double, double)) {
  OpSpec s = binary(name, id, op, nullptr, -1, 1);
  s.reference = [ref](const std::vector<Tensor>& in) {
    return map_reference(
        in, [ref](const V& a) { return double(ref(a[0], a[1])); }, DType::Bool);
  };
  s.cases = [] {
    // Values on a coarse grid so that ties (equal elements) occur.
    Tensor a = from_vector({0, 1, 2, 1, 0, 2}, {2, 3}, DType::F64);
    Tensor b = from_vector({1, 1, 0}, {3}, DType::F64);
    return std::vector<OpCase>{{"ties, broadcast (2, 3) with (3)", {a, b}},
                               {"ints", {ints({1, 2, 3}, {3}), ints({2, 2, 2}, {3})}}};
  };
  s.grad = false;
  s.dtypes = {DType::F32, DType::BF16};
  return s;
}

// Edge values, and every pair of a smaller set for binary ops: PyTorch's NaN, infinity and
// signed-zero rules in the references below. Forward only (no derivative at most of them; the
// gradients there are tested in test_edge_values.cpp and test_pytorch_edge.cpp).
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const V kEdge = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, kInf, -kInf, kNan, 1e-40, -1e-40, 1e30, -1e30, 7.0};

std::function<std::vector<OpCase>()> edge_cases() {
  return [] {
    Tensor x = from_vector(kEdge, {int64_t(kEdge.size())}, DType::F64);
    return std::vector<OpCase>{{"edge values", {x}}, {"edge values (2, 7)", {reshape(x, {2, 7})}}};
  };
}

std::function<std::vector<OpCase>()> edge_pair_cases() {
  return [] {
    const V b = {0.0, -0.0, 1.0, -2.0, kInf, -kInf, kNan};
    V x, y;
    for (double u : b) {
      for (double v : b) x.push_back(u), y.push_back(v);
    }
    const int64_t n = int64_t(x.size());
    return std::vector<OpCase>{
        {"all pairs of edge values", {from_vector(x, {n}, DType::F64), from_vector(y, {n}, DType::F64)}},
        {"broadcast (7, 1) with (7)", {from_vector(b, {7, 1}, DType::F64), from_vector(b, {7}, DType::F64)}}};
  };
}

OpSpec edge(OpSpec s) {
  s.name += " (edge values)";
  s.grad = false;
  s.dtypes = {DType::F32};
  return s;
}

double nan_max(double a, double b) { return a != a || b != b ? kNan : (a > b ? a : b); }
double nan_min(double a, double b) { return a != a || b != b ? kNan : (a < b ? a : b); }

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

void add_specs(std::vector<OpSpec>& specs) {
  // Unary math. Ranges keep away from points where the derivative does not exist.
  specs.push_back(unary(
      "neg", OpId::Neg, neg, [](double x) { return -x; }, -2, 2));
  specs.push_back(unary(
      "exp", OpId::Exp, exp, [](double x) { return std::exp(x); }, -2, 2));
  specs.push_back(unary(
      "log", OpId::Log, log, [](double x) { return std::log(x); }, 0.5, 3));
  specs.push_back(unary(
      "sqrt", OpId::Sqrt, sqrt, [](double x) { return std::sqrt(x); }, 0.5, 3));
  specs.push_back(unary(
      "rsqrt", OpId::Rsqrt, rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.5, 3));
  specs.push_back(unary(
      "abs", OpId::Abs, abs, [](double x) { return std::fabs(x); }, -2, 2));
  {
    OpSpec s = unary(
        "relu", OpId::Relu, relu, [](double x) { return x > 0 ? x : 0; }, -2, 2);
    s.covers = {OpId::Relu, OpId::ReluBackward};
    specs.push_back(s);
  }
  specs.push_back(unary(
      "sigmoid", OpId::Sigmoid, sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3));
  specs.push_back(unary(
      "tanh", OpId::Tanh, tanh, [](double x) { return std::tanh(x); }, -2, 2));
  specs.push_back(unary(
      "silu", OpId::Silu, silu, [](double x) { return x / (1 + std::exp(-x)); }, -3, 3));
  // softplus in both regions (beta x crosses the threshold), then with its defaults.
  specs.push_back(unary(
      "softplus beta 2 threshold 1.5", OpId::Softplus, [](const Tensor& x) { return softplus(x, 2, 1.5); },
      [](double x) { return 2 * x > 1.5 ? x : std::log1p(std::exp(2 * x)) / 2; }, -2, 2));
  specs.push_back(unary(
      "softplus", OpId::Softplus, [](const Tensor& x) { return softplus(x); },
      [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, -30, 30));
  {
    // A composite op (no OpId of its own): the table checks it all the same.
    OpSpec s = unary(
        "logsigmoid (composite)", OpId::Softplus, logsigmoid,
        [](double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); }, -4, 4);
    s.covers = {};  // no op of its own
    specs.push_back(s);
  }
  {
    OpSpec s = unary(
        "sign", OpId::Sign, sign, [](double x) { return double((x > 0) - (x < 0)); }, -2, 2);
    s.grad = false;
    specs.push_back(s);
  }
  {
    OpSpec s = unary("gelu (erf)", OpId::Gelu, nullptr, gelu_ref, -3, 3);
    s.covers = {OpId::Gelu, OpId::GeluBackward};
    s.fn = [](const std::vector<Tensor>& in) { return gelu(in[0]); };
    specs.push_back(s);
    s.name = "gelu (tanh)";
    s.fn = [](const std::vector<Tensor>& in) { return gelu(in[0], true); };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return gelu_tanh_ref(a[0]); });
    };
    specs.push_back(s);
  }
  // ---- the breadth a PyTorch port reaches for first
  specs.push_back(unary(
      "sin", OpId::Sin, sin, [](double x) { return std::sin(x); }, -4, 4));
  specs.push_back(unary(
      "cos", OpId::Cos, cos, [](double x) { return std::cos(x); }, -4, 4));
  specs.push_back(unary(
      "log1p", OpId::Log1p, log1p, [](double x) { return std::log1p(x); }, -0.5, 2));
  specs.push_back(unary(
      "log2", OpId::Log2, log2, [](double x) { return std::log2(x); }, 0.25, 4));
  specs.push_back(unary(
      "expm1", OpId::Expm1, expm1, [](double x) { return std::expm1(x); }, -2, 2));
  specs.push_back(unary(
      "erf", OpId::Erf, erf, [](double x) { return std::erf(x); }, -2, 2));
  specs.push_back(unary(
      "reciprocal", OpId::Reciprocal, reciprocal, [](double x) { return 1 / x; }, 0.5, 3));
  {
    // Step functions: gradient 0 (gradcheck agrees away from the steps); F32 only, since a
    // half-precision input can land on the other side of a step than its F64 original.
    const std::pair<const char*, std::pair<OpId, std::pair<Tensor (*)(const Tensor&), Fn1>>> steps[] = {
        {"floor", {OpId::Floor, {floor, [](double x) { return std::floor(x); }}}},
        {"ceil", {OpId::Ceil, {ceil, [](double x) { return std::ceil(x); }}}},
        {"trunc", {OpId::Trunc, {trunc, [](double x) { return std::trunc(x); }}}},
        {"round (half to even)", {OpId::Round, {round, [](double x) { return std::nearbyint(x); }}}},
    };
    for (const auto& [name, op] : steps) {
      OpSpec s = unary(name, op.first, op.second.first, op.second.second, -3, 3);
      s.dtypes = {DType::F32};
      specs.push_back(s);
    }
  }
  specs.push_back(unary(
      "leaky_relu", OpId::LeakyRelu, [](const Tensor& x) { return leaky_relu(x, 0.2); },
      [](double x) { return x > 0 ? x : 0.2 * x; }, -2, 2));
  specs.push_back(unary(
      "elu", OpId::Elu, [](const Tensor& x) { return elu(x, 1.5); },
      [](double x) { return x > 0 ? x : 1.5 * std::expm1(x); }, -2, 2));
  specs.push_back(unary(
      "hardsigmoid", OpId::Hardsigmoid, hardsigmoid, [](double x) { return std::min(std::max(x / 6 + 0.5, 0.0), 1.0); },
      -5, 5));
  specs.push_back(unary(
      "hardswish", OpId::Hardswish, hardswish, [](double x) { return x * std::min(std::max(x / 6 + 0.5, 0.0), 1.0); },
      -5, 5));
  {
    OpSpec s = unary(
        "mish (composite)", OpId::Softplus, mish, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -3,
        3);
    s.covers = {};
    specs.push_back(s);
  }
  {
    // Ternary composites on broadcast inputs.
    const std::pair<const char*, std::pair<TensorFn, std::function<double(const V&)>>> ternary[] = {
        {"lerp (composite)",
         {[](const std::vector<Tensor>& in) { return lerp(in[0], in[1], in[2]); },
          [](const V& a) { return a[0] + a[2] * (a[1] - a[0]); }}},
        {"addcmul (composite)",
         {[](const std::vector<Tensor>& in) { return addcmul(in[0], in[1], in[2], 0.5); },
          [](const V& a) { return a[0] + 0.5 * a[1] * a[2]; }}},
        {"addcdiv (composite)",
         {[](const std::vector<Tensor>& in) { return addcdiv(in[0], in[1], in[2], -2.0); },
          [](const V& a) { return a[0] - 2.0 * a[1] / a[2]; }}},
    };
    for (const auto& [name, fns] : ternary) {
      OpSpec s;
      s.name = name;
      s.fn = fns.first;
      s.reference = [f = fns.second](const std::vector<Tensor>& in) { return map_reference(in, f); };
      s.cases = [] {
        return std::vector<OpCase>{
            {"(3, 4) with (4) and (3, 1)",
             {uniform_values({3, 4}, -2, 2, 1), uniform_values({4}, 0.5, 2, 2), uniform_values({3, 1}, 0.5, 2, 3)}},
            {"0-dim", {uniform_values({}, -2, 2, 4), uniform_values({}, 0.5, 2, 5), uniform_values({}, 0.5, 2, 6)}},
        };
      };
      specs.push_back(s);
    }
  }
  {
    OpSpec s = unary("clamp", OpId::Clamp, nullptr, nullptr, -2, 2);
    s.fn = [](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, 0.7); };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return std::min(std::max(a[0], -0.5), 0.7); });
    };
    s.covers.push_back(OpId::ClampBackward);  // by the gradcheck
    specs.push_back(s);
  }
  for (double e : {2.0, 3.0, 0.5, -1.5}) {
    OpSpec s = unary("pow_scalar " + std::to_string(e), OpId::PowScalar, nullptr, nullptr, 0.5, 2);
    s.fn = [e](const std::vector<Tensor>& in) { return pow(in[0], e); };
    s.reference = [e](const std::vector<Tensor>& in) {
      return map_reference(in, [e](const V& a) { return std::pow(a[0], e); });
    };
    specs.push_back(s);
  }
  {
    OpSpec s = unary(
        "cast F64->F32->F64", OpId::Cast, nullptr, [](double x) { return double(float(x)); }, -2, 2);
    s.fn = [](const std::vector<Tensor>& in) { return cast(cast(in[0], DType::F32), in[0].dtype()); };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return double(float(a[0])); });
    };
    s.tol_f32 = 1e-6;
    s.gradcheck_options.eps = 1e-2;  // the F32 round trip is exact to ~1e-7 only
    s.gradcheck_options.atol = 1e-3;
    specs.push_back(s);
    OpSpec t = s;
    t.name = "cast to I64 (truncates)";
    t.fn = [](const std::vector<Tensor>& in) { return cast(in[0] * 3.0, DType::I64); };
    t.reference = [](const std::vector<Tensor>& in) {
      return map_reference(
          in, [](const V& a) { return double(int64_t(a[0] * 3.0)); }, DType::I64);
    };
    t.grad = false;
    t.dtypes = {};
    specs.push_back(t);
  }
  {
    OpSpec s;
    s.name = "full / fill";
    s.covers = {OpId::Fill};
    s.fn = [](const std::vector<Tensor>& in) {
      return in[0] + full(in[0].sizes(), 2.5, in[0].dtype(), in[0].device());
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return a[0] + 2.5; });
    };
    s.cases = unary_cases(-1, 1);
    s.integers = false;  // full(2.5) in an integer dtype is 2 (truncated, as in PyTorch), not 2.5
    specs.push_back(s);
  }

  // Edge values through the ops whose rules are PyTorch's (not IEEE's defaults): NaN passes
  // relu and clamp, abs(-0) = +0, sign(NaN) = 0, maximum/minimum propagate NaN, and pow's
  // special exponents take sqrt / rsqrt / reciprocal forms.
  {
    auto with_cases = [](OpSpec s, std::function<std::vector<OpCase>()> cases) {
      s = edge(s);
      s.cases = std::move(cases);
      return s;
    };
    specs.push_back(with_cases(unary(
                                   "relu", OpId::Relu, relu, [](double x) { return x < 0 ? 0.0 : x; }, -1, 1),
                               edge_cases()));
    specs.push_back(with_cases(unary(
                                   "softplus", OpId::Softplus, [](const Tensor& x) { return softplus(x); },
                                   [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, -1, 1),
                               edge_cases()));
    specs.push_back(with_cases(unary(
                                   "abs", OpId::Abs, abs, [](double x) { return std::fabs(x); }, -1, 1),
                               edge_cases()));
    specs.push_back(with_cases(unary(
                                   "sign", OpId::Sign, sign, [](double x) { return double((x > 0) - (x < 0)); }, -1, 1),
                               edge_cases()));
    OpSpec c = unary("clamp [-1, 0.5]", OpId::Clamp, nullptr, nullptr, -1, 1);
    c.fn = [](const std::vector<Tensor>& in) { return clamp(in[0], -1.0, 0.5); };
    c.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return a[0] != a[0] ? kNan : std::min(std::max(a[0], -1.0), 0.5); });
    };
    specs.push_back(with_cases(c, edge_cases()));
    for (double e : {0.5, -0.5}) {  // (-1, -2, 3 overflow F32 on these values: the F64 comparison fails)
      OpSpec p = unary("pow_scalar " + std::to_string(e), OpId::PowScalar, nullptr, nullptr, -1, 1);
      p.fn = [e](const std::vector<Tensor>& in) { return pow(in[0], e); };
      p.reference = [e](const std::vector<Tensor>& in) {
        return map_reference(in, [e](const V& a) {
          const double x = a[0];
          return e == 0.5 ? std::sqrt(x) : 1 / std::sqrt(x);  // not std::pow: they differ at -0 and -inf
        });
      };
      specs.push_back(with_cases(p, edge_cases()));
    }
    specs.push_back(with_cases(binary("maximum", OpId::Maximum, maximum, nan_max, -1, 1), edge_pair_cases()));
    specs.push_back(with_cases(binary("minimum", OpId::Minimum, minimum, nan_min, -1, 1), edge_pair_cases()));
  }

  // Binary arithmetic.
  specs.push_back(binary(
      "add", OpId::Add, [](const Tensor& a, const Tensor& b) { return add(a, b); },
      [](double a, double b) { return a + b; }, -2, 2));
  specs.push_back(binary(
      "add alpha", OpId::Add, [](const Tensor& a, const Tensor& b) { return add(a, b, -0.5); },
      [](double a, double b) { return a - 0.5 * b; }, -2, 2));
  specs.push_back(binary(
      "sub", OpId::Sub, [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.0); },
      [](double a, double b) { return a - 2 * b; }, -2, 2));
  specs.push_back(binary(
      "mul", OpId::Mul, mul, [](double a, double b) { return a * b; }, -2, 2));
  specs.push_back(binary(
      "div", OpId::Div, div, [](double a, double b) { return a / b; }, 0.5, 2));
  specs.push_back(binary(
      "pow", OpId::Pow, [](const Tensor& a, const Tensor& b) { return pow(a, b); },
      [](double a, double b) { return std::pow(a, b); }, 0.5, 2));
  specs.push_back(binary(
      "maximum", OpId::Maximum, maximum, [](double a, double b) { return std::max(a, b); }, -2, 2));
  specs.push_back(binary(
      "minimum", OpId::Minimum, minimum, [](double a, double b) { return std::min(a, b); }, -2, 2));

  specs.push_back(compare("eq", OpId::Eq, eq, [](double a, double b) { return a == b; }));
  specs.push_back(compare("ne", OpId::Ne, ne, [](double a, double b) { return a != b; }));
  specs.push_back(compare("lt", OpId::Lt, lt, [](double a, double b) { return a < b; }));
  specs.push_back(compare("le", OpId::Le, le, [](double a, double b) { return a <= b; }));
  specs.push_back(compare("gt", OpId::Gt, gt, [](double a, double b) { return a > b; }));
  specs.push_back(compare("ge", OpId::Ge, ge, [](double a, double b) { return a >= b; }));

  {
    OpSpec s;
    s.name = "where";
    s.covers = {OpId::Where};
    s.fn = [](const std::vector<Tensor>& in) {
      return where(gt(in[0], scalar_tensor(0, in[0].dtype(), in[0].device())), in[1], in[2]);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return a[0] > 0 ? a[1] : a[2]; });
    };
    s.cases = [] {
      return std::vector<OpCase>{
          {"(3, 4)",
           {uniform_values({3, 4}, -1, 1, 1), uniform_values({3, 4}, -1, 1, 2), uniform_values({3, 4}, -1, 1, 3)}},
          {"broadcast cond (3, 1), x (4), y 0-dim",
           {uniform_values({3, 1}, -1, 1, 4), uniform_values({4}, -1, 1, 5), uniform_values({}, -1, 1, 6)}},
      };
    };
    s.dtypes = {DType::F32, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "masked_fill";
    s.covers = {OpId::MaskedFill};
    s.fn = [](const std::vector<Tensor>& in) {
      return masked_fill(in[0], gt(in[1], scalar_tensor(0, in[1].dtype(), in[1].device())), -7.0);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const V& a) { return a[1] > 0 ? -7.0 : a[0]; });
    };
    s.cases = [] {
      return std::vector<OpCase>{
          {"(3, 4) mask (3, 4)", {uniform_values({3, 4}, -1, 1, 1), uniform_values({3, 4}, -1, 1, 2)}},
          {"(3, 4) mask (4)", {uniform_values({3, 4}, -1, 1, 3), uniform_values({4}, -1, 1, 4)}},
      };
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_elementwise_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
