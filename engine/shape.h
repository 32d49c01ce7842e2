// engine/shape.h: Shape, a small fixed-capacity list of dimension sizes (or strides).
// Tensors have at most kMaxDims dims; keeping shapes inline (no heap) is what makes a small
// op cost well under a microsecond.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <vector>

#include "engine/error.h"

namespace brisk {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.data(), dims.size()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }
  static Shape filled(int n, int64_t value) {
    Shape s;
    for (int i = 0; i < n; ++i) s.push_back(value);
    return s;
  }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t back() const { return d_[n_ - 1]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* data() const { return d_; }

  void push_back(int64_t v) {
    BRISK_CHECK(n_ < kMaxDims, "shape: more than ", kMaxDims, " dims are not supported");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t v = 0) {
    BRISK_CHECK(n <= kMaxDims, "shape: more than ", kMaxDims, " dims are not supported");
    for (int i = n_; i < n; ++i) d_[i] = v;
    n_ = uint8_t(n);
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[i];
    return n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void assign(const int64_t* p, size_t n) {
    BRISK_CHECK(n <= size_t(kMaxDims), "shape: ", n, " dims given, at most ", kMaxDims, " are supported");
    std::copy(p, p + n, d_);
    n_ = uint8_t(n);
  }
  int64_t d_[kMaxDims] = {};
  uint8_t n_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '(';
  for (int i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ')';
}

// Note [Checked sizes]: sizes that come from outside (a file's header, a user's shape) are
// checked once, where they enter, so that every later product (element count, byte count,
// contiguous strides, an index times a stride) fits in int64 and `Shape::numel()` can stay an
// unchecked loop on the hot path. The bound is the extent: the product of max(size, 1) over
// all dims, which is at least the numel and every contiguous stride. A shape with a zero
// dim still has to pass, because its strides are computed from the other dims.

// a * b for non-negative a and b, or false when the product does not fit in int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Checks that a dense tensor of `sizes` with `element_size`-byte elements can be described:
// no negative size, and extent times element_size fits in int64. Returns the element count.
// `what` starts the error ("empty", "load_safetensors(f): tensor \"w\"").
inline int64_t checked_numel(const Shape& sizes, size_t element_size, const char* what) {
  int64_t extent = 1, numel = 1;
  for (int i = 0; i < sizes.size(); ++i) {
    BRISK_CHECK(sizes[i] >= 0, what, ": negative size ", sizes[i], " in shape ", sizes);
    bool fits = checked_mul(extent, std::max<int64_t>(sizes[i], 1), extent);
    BRISK_CHECK(fits, what, ": shape ", sizes, " has more elements than fit in 64 bits");
    numel *= sizes[i];  // <= extent, cannot overflow
  }
  int64_t bytes = 0;
  BRISK_CHECK(checked_mul(extent, int64_t(element_size), bytes), what, ": shape ", sizes, " with ", element_size,
              "-byte elements has more bytes than fit in 64 bits");
  return numel;
}

// Row-major strides (in elements) of a dense tensor of `sizes`, whose extent was checked
// (checked_numel; see Note [Checked sizes]).
inline Shape contiguous_strides(const Shape& sizes) {
  Shape st = Shape::filled(sizes.size(), 1);
  for (int i = sizes.size() - 2; i >= 0; --i) st[i] = st[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  return st;
}

// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
inline int wrap_dim(int64_t dim, int ndim, const char* op) {
  int n = std::max(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, as in PyTorch
  BRISK_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim, " dims");
  return int(dim < 0 ? dim + n : dim);
}

// NumPy broadcasting of two shapes; `op` names the caller in the error.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    BRISK_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast (dim ", i, ": ",
                da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace brisk
