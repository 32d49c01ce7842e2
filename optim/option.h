// optim/option.h: Option<T>, one field of an optimizer's options struct that knows whether the
// caller set it. A struct built with designated initializers, `{.weight_decay = 0.0}`, has that
// field set and every other one at its default, unset; add_param_group gives a new group the
// fields it sets and the optimizer's own values for the rest, as PyTorch's param_groups do
// (Note [Group options inherit] in optim/optimizer.h). Reads convert to T, so update rules use
// the fields as plain numbers. Not here: the optimizers' option structs (sgd.h, adam.h, ...).
#pragma once

#include <ostream>
#include <type_traits>

namespace brisk::optim {

// The value an options struct declares as its default: `Option<double> lr = by_default(1e-3);`
template <class T>
struct DefaultValue {
  T value;
};
template <class T>
constexpr DefaultValue<T> by_default(T v) {
  return {v};
}

template <class T>
class Option {
 public:
  constexpr Option(DefaultValue<T> d) : value_(d.value), set_(false) {}  // NOLINT: the default
  constexpr Option(T v) : value_(v), set_(true) {}                       // NOLINT: a caller's value
  template <class U>
  requires(std::is_arithmetic_v<U> && !std::is_same_v<U, T> && !std::is_same_v<U, bool> &&
           !std::is_same_v<T, bool>) constexpr Option(U v)
      : value_(T(v)), set_(true) {}  // NOLINT: `.lr = 1` for a double field
  Option& operator=(T v) {
    value_ = v;
    set_ = true;
    return *this;
  }
  constexpr operator T() const { return value_; }  // NOLINT: read as a plain number
  constexpr T get() const { return value_; }
  constexpr bool is_set() const { return set_; }
  T& ref() { return value_; }  // for the by-name access of Optimizer::get/set

 private:
  T value_;
  bool set_;
};

template <class T>
std::ostream& operator<<(std::ostream& os, const Option<T>& o) {
  return os << o.get();
}

template <class T>
struct is_option : std::false_type {};
template <class T>
struct is_option<Option<T>> : std::true_type {};

}  // namespace brisk::optim
