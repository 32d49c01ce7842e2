// kernels/functors.h: elementwise math written once, as __host__ __device__ functors used by
// the CPU loops (kernels/cpu/loops.h) and the CUDA launcher (kernels/cuda/). Each takes and
// returns compute types (float for F16/BF16, see compute_t). Scalar parameters (alpha, clamp
// bounds, exponent) are members filled from the op's Attrs.
#pragma once

#include <cmath>
#include <type_traits>

#include "engine/macros.h"

namespace brisk::functors {

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

// GELU, exact (erf) and tanh forms, with their derivatives.
struct Gelu {
  bool tanh_form = false;
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

struct GeluBackward {
  bool tanh_form = false;
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
  template <class T> BRISK_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x != x) return x;  // NaN passes through, as in PyTorch
      return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
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
struct Constant {
  double v;
  template <class T = double> BRISK_HD double operator()() const { return v; }
};

// ---- binary
struct Add {
  double alpha = 1;
  template <class T> BRISK_HD T operator()(T a, T b) const { return alpha == 1 ? a + b : a + T(alpha) * b; }
};
struct Sub {
  double alpha = 1;
  template <class T> BRISK_HD T operator()(T a, T b) const { return alpha == 1 ? a - b : a - T(alpha) * b; }
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
  template <class T> BRISK_HD T operator()(T x, bool m) const {
    const T v = T(value);
    return m ? v : x;
  }
};

}  // namespace brisk::functors
