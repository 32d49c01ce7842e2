// kernels/functors.h: elementwise math written once, as __host__ __device__ functors used by
// the CPU loops (kernels/cpu/loops.h) and the CUDA launcher (kernels/cuda/), and THE list of
// elementwise kernels (at the end) that both backends register. Each functor takes and
// returns compute types (float for F16/BF16, see compute_t). A functor with parameters (alpha,
// clamp bounds, exponent) builds itself from the op's Attrs with a static from(), beside its
// math (Note [Functor parameters]).
#pragma once

#include <cmath>
#include <concepts>
#include <type_traits>

#include "engine/macros.h"
#include "engine/op.h"

namespace brisk::functors {

// Note [Functor parameters]
// Kernels build their functor with make<F>(attrs). A functor with data members must say which
// Attrs fields fill them, in a `static F from(const Attrs&)` next to its math; one without
// members is default-constructed. A functor with members and no from() is not Buildable, so
// make<F> does not compile for it: a forgotten parameter can never run as a silent zero.
template <class F>
concept HasFrom = requires(const Attrs& a) {
  { F::from(a) } -> std::same_as<F>;
};
template <class F>
concept Buildable = HasFrom<F> || std::is_empty_v<F>;

template <Buildable F>
F make(const Attrs& attrs) {
  if constexpr (HasFrom<F>) {
    return F::from(attrs);
  } else {
    return F{};
  }
}

// Note [Scalars into integer dtypes]
// A double attribute (the value of fill and masked_fill) becomes an element of an integer
// dtype through int64, wrapping to the dtype's width (-7 in U8 is 249), as the x86 conversion
// did before; converting a double straight to an integer type it does not fit is undefined
// behaviour (UBSan's float-cast-overflow found it). Floating dtypes and Bool convert directly.
template <class T>
BRISK_HD T scalar_as(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

// A table of one-line functors, easier to scan aligned:
// clang-format off
// ---- unary
struct Neg { template <class T> BRISK_HD T operator()(T x) const { return -x; } };
struct Exp { template <class T> BRISK_HD T operator()(T x) const { return std::exp(x); } };
struct Log { template <class T> BRISK_HD T operator()(T x) const { return std::log(x); } };
struct Sqrt { template <class T> BRISK_HD T operator()(T x) const { return std::sqrt(x); } };
struct Rsqrt { template <class T> BRISK_HD T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct Abs {
  template <class T> BRISK_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_floating_point_v<T>) return std::fabs(x);  // abs(-0) = +0, as PyTorch
    else return x < T(0) ? -x : x;
  }
};
struct Sign {
  template <class T> BRISK_HD T operator()(T x) const { return T((T(0) < x) - (x < T(0))); }
};
// PyTorch's relu: NaN and -0 pass through (x < 0 is false for both); one select, vectorized.
struct Relu {
  template <class T> BRISK_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? T(0) : x;
  }
};
struct Sigmoid {
  template <class T> BRISK_HD T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); }
};
struct Tanh { template <class T> BRISK_HD T operator()(T x) const { return std::tanh(x); } };
struct Silu {
  template <class T> BRISK_HD T operator()(T x) const { return x / (T(1) + std::exp(-x)); }
};
// PyTorch's softplus: linear where beta * x > threshold, else log1p(exp(beta * x)) / beta.
struct Softplus {
  double beta, threshold;
  static Softplus from(const Attrs& a) { return {a.a, a.b}; }
  template <class T> BRISK_HD T operator()(T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? x : T(std::log1p(std::exp(bx))) / T(beta);
  }
};

struct Sin { template <class T> BRISK_HD T operator()(T x) const { return std::sin(x); } };
struct Cos { template <class T> BRISK_HD T operator()(T x) const { return std::cos(x); } };
struct Log1p { template <class T> BRISK_HD T operator()(T x) const { return std::log1p(x); } };
struct Log2 { template <class T> BRISK_HD T operator()(T x) const { return std::log2(x); } };
struct Expm1 { template <class T> BRISK_HD T operator()(T x) const { return std::expm1(x); } };
struct Erf { template <class T> BRISK_HD T operator()(T x) const { return std::erf(x); } };
struct Reciprocal { template <class T> BRISK_HD T operator()(T x) const { return T(1) / x; } };
struct Floor { template <class T> BRISK_HD T operator()(T x) const { return std::floor(x); } };
struct Ceil { template <class T> BRISK_HD T operator()(T x) const { return std::ceil(x); } };
struct Trunc { template <class T> BRISK_HD T operator()(T x) const { return std::trunc(x); } };
// Half to even, as torch.round (std::nearbyint in the default rounding mode).
struct Round { template <class T> BRISK_HD T operator()(T x) const { return std::nearbyint(x); } };
// leaky_relu(x) = x for x > 0, slope * x otherwise; NaN passes through.
struct LeakyRelu {
  double slope;
  static LeakyRelu from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T x) const { return x > T(0) ? x : x * T(slope); }
};
// elu(x) = x for x > 0, alpha * (e^x - 1) otherwise.
struct Elu {
  double alpha;
  static Elu from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T x) const { return x > T(0) ? x : T(alpha) * std::expm1(x); }
};
// hardsigmoid(x) = clamp(x / 6 + 1/2, 0, 1); hardswish(x) = x * hardsigmoid(x) (PyTorch's forms).
struct Hardsigmoid {
  template <class T> BRISK_HD T operator()(T x) const {
    if (x != x) return x;
    return x <= T(-3) ? T(0) : (x >= T(3) ? T(1) : x / T(6) + T(0.5));
  }
};
struct Hardswish {
  template <class T> BRISK_HD T operator()(T x) const {
    if (x != x) return x;
    return x <= T(-3) ? T(0) : (x >= T(3) ? x : x * (x + T(3)) / T(6));
  }
};

// GELU, exact (erf) and tanh forms, with their derivatives.
struct Gelu {
  bool tanh_form = false;
  static Gelu from(const Attrs& a) { return {a.flag}; }
  template <class T> BRISK_HD T operator()(T x) const {
    if (tanh_form) {
      const T k = T(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
};
// relu's backward from its output: the gradient passes where y > 0 (and where y is NaN, as the
// masked_fill(g, y <= 0, 0) it replaces: one pass instead of a compare and a select).
struct ReluBackward {
  template <class T> BRISK_HD T operator()(T g, T y) const { return y <= T(0) ? T(0) : g; }
};

// clamp's gradient from its input: g where lo <= x <= hi, else g * 0 (0, or NaN for an
// infinite or NaN g: the product the composite formula it replaced gave; NaN x counts as
// outside).
struct ClampBackward {
  double lo, hi;
  static ClampBackward from(const Attrs& a) { return {a.a, a.b}; }
  template <class T> BRISK_HD T operator()(T g, T x) const {
    const bool keep = (x >= T(lo)) & (x <= T(hi));  // no short circuit: the loop vectorizes
    return keep ? g : g * T(0);
  }
};

struct GeluBackward {
  bool tanh_form = false;
  static GeluBackward from(const Attrs& a) { return {a.flag}; }
  template <class T> BRISK_HD T operator()(T g, T x) const {
    if (tanh_form) {
      const T k = T(0.7978845608028654);
      T inner = k * (x + T(0.044715) * x * x * x);
      T th = std::tanh(inner);
      T dinner = k * (T(1) + T(3 * 0.044715) * x * x);
      return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * dinner);
    }
    T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};

struct Clamp {
  double lo, hi;
  static Clamp from(const Attrs& a) { return {a.a, a.b}; }
  template <class T> BRISK_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      // Selects only (no early return), so the loop vectorizes: NaN fails both compares and
      // passes through, as in PyTorch. (The branchy form kept MobileNetV2's ReLU6 scalar:
      // 28% of its inference.)
      const T l = T(lo), h = T(hi);
      const T r = x < l ? l : x;
      return r > h ? h : r;
    } else {
      // Compare in double so that infinite bounds (clamp_min/clamp_max) never convert to T.
      double d = double(x);
      return d < lo ? T(lo) : (d > hi ? T(hi) : x);
    }
  }
};
// The special exponents take PyTorch's forms (sqrt, rsqrt, reciprocals, products), which
// differ from std::pow at -0 and -inf (pow(-0, -0.5) = +inf, rsqrt(-0) = -inf).
struct PowScalar {
  double e;
  static PowScalar from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T x) const {
    if (e == 2.0) return x * x;
    if (e == 1.0) return x;
    if (e == 0.5) return std::sqrt(x);
    if (e == 3.0) return x * x * x;
    if (e == -0.5) return T(1) / std::sqrt(x);
    if (e == -1.0) return T(1) / x;
    if (e == -2.0) return T(1) / (x * x);
    return T(std::pow(x, T(e)));
  }
};
struct Identity { template <class T> BRISK_HD T operator()(T x) const { return x; } };

// ---- binary
// a + alpha * b in one rounding for floating types, as PyTorch's kernels compute it (-inf +
// 2.5 * 3e38 is -inf, not inf - inf = NaN); the compiler's contraction must not decide it.
template <class T> BRISK_HD T add_scaled(T a, T alpha, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fma(alpha, b, a); else return a + alpha * b;
}
struct Add {
  double alpha = 1;
  static Add from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T a, T b) const { return alpha == 1 ? a + b : add_scaled(a, T(alpha), b); }
};
struct Sub {
  double alpha = 1;
  static Sub from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T a, T b) const { return alpha == 1 ? a - b : add_scaled(a, T(-T(alpha)), b); }
};
struct Mul {
  template <class T> BRISK_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else {
      return a * b;
    }
  }
};
struct Div { template <class T> BRISK_HD T operator()(T a, T b) const { return a / b; } };
struct Pow { template <class T> BRISK_HD T operator()(T a, T b) const { return T(std::pow(a, b)); } };
struct Maximum {
  template <class T> BRISK_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return a + b;  // NaN propagates
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <class T> BRISK_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return a + b;
    }
    return a < b ? a : b;
  }
};

// ---- comparisons (output bool)
struct Eq { template <class T> BRISK_HD bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> BRISK_HD bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> BRISK_HD bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> BRISK_HD bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> BRISK_HD bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> BRISK_HD bool operator()(T a, T b) const { return a >= b; } };

// ---- ternary and masked
struct Where {
  template <class T> BRISK_HD T operator()(bool c, T a, T b) const { return c ? a : b; }
};
struct MaskedFill {
  double value;
  static MaskedFill from(const Attrs& a) { return {a.a}; }
  template <class T> BRISK_HD T operator()(T x, bool m) const {
    const T v = scalar_as<T>(value);
    return m ? v : x;
  }
};

// ---- THE list of elementwise kernels, registered by both backends from this one place:
// kernels/cpu/elementwise_unary.cpp, kernels/cpu/elementwise_binary.cpp and
// kernels/cpu/compare.cpp, kernels/cuda/elementwise.cu (Unary, Binary) and
// kernels/cuda/compare.cu (Compare). An entry names the op, its functor and the dtypes it has
// kernels for:
//   Unary<op, functor, dtypes>   out = f(x)
//   Binary<op, functor, dtypes>  out = f(a, b), a and b of out's dtype
//   Compare<op, functor>         Bool out = f(a, b), a and b of any one dtype
// Float: F32, F64, F16, BF16. Numeric: every dtype but Bool. Not here: cast, fill, where and
// masked_fill, whose CUDA kernels move raw bits instead of running a typed functor.
enum DtypeClass { Float, Numeric, AnyToBool };
template <OpId Id, class Fn, int Arity, DtypeClass Dtypes>
struct Entry {
  static constexpr OpId id = Id;
  using F = Fn;
  static constexpr int arity = Arity;
  static constexpr DtypeClass dtypes = Dtypes;
};
template <OpId Id, class Fn, DtypeClass Dtypes> using Unary = Entry<Id, Fn, 1, Dtypes>;
template <OpId Id, class Fn, DtypeClass Dtypes> using Binary = Entry<Id, Fn, 2, Dtypes>;
template <OpId Id, class Fn> using Compare = Entry<Id, Fn, 2, AnyToBool>;
template <class... E> struct List {};

using Kernels = List<
    Unary<OpId::Neg, Neg, Numeric>,
    Unary<OpId::Exp, Exp, Float>,
    Unary<OpId::Log, Log, Float>,
    Unary<OpId::Sqrt, Sqrt, Float>,
    Unary<OpId::Rsqrt, Rsqrt, Float>,
    Unary<OpId::Abs, Abs, Numeric>,
    Unary<OpId::Sign, Sign, Numeric>,
    Unary<OpId::Relu, Relu, Numeric>,
    Unary<OpId::Gelu, Gelu, Float>,
    Unary<OpId::Sigmoid, Sigmoid, Float>,
    Unary<OpId::Tanh, Tanh, Float>,
    Unary<OpId::Silu, Silu, Float>,
    Unary<OpId::Softplus, Softplus, Float>,
    Unary<OpId::Sin, Sin, Float>,
    Unary<OpId::Cos, Cos, Float>,
    Unary<OpId::Log1p, Log1p, Float>,
    Unary<OpId::Log2, Log2, Float>,
    Unary<OpId::Expm1, Expm1, Float>,
    Unary<OpId::Erf, Erf, Float>,
    Unary<OpId::Reciprocal, Reciprocal, Float>,
    Unary<OpId::Floor, Floor, Float>,
    Unary<OpId::Ceil, Ceil, Float>,
    Unary<OpId::Trunc, Trunc, Float>,
    Unary<OpId::Round, Round, Float>,
    Unary<OpId::LeakyRelu, LeakyRelu, Float>,
    Unary<OpId::Elu, Elu, Float>,
    Unary<OpId::Hardsigmoid, Hardsigmoid, Float>,
    Unary<OpId::Hardswish, Hardswish, Float>,
    Unary<OpId::Clamp, Clamp, Numeric>,
    Unary<OpId::PowScalar, PowScalar, Float>,
    Binary<OpId::ReluBackward, ReluBackward, Float>,
    Binary<OpId::ClampBackward, ClampBackward, Float>,
    Binary<OpId::GeluBackward, GeluBackward, Float>,
    Binary<OpId::Add, Add, Numeric>,
    Binary<OpId::Sub, Sub, Numeric>,
    Binary<OpId::Mul, Mul, Numeric>,
    Binary<OpId::Div, Div, Numeric>,
    Binary<OpId::Pow, Pow, Float>,
    Binary<OpId::Maximum, Maximum, Numeric>,
    Binary<OpId::Minimum, Minimum, Numeric>,
    Compare<OpId::Eq, Eq>,
    Compare<OpId::Ne, Ne>,
    Compare<OpId::Lt, Lt>,
    Compare<OpId::Le, Le>,
    Compare<OpId::Gt, Gt>,
    Compare<OpId::Ge, Ge>>;

// clang-format on
}  // namespace brisk::functors
