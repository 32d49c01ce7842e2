// engine/dtype.h: the element types brisk knows, one constexpr traits table, promotion, and
// the dispatch helpers that turn a runtime DType into a C++ type for kernels.
// Not here: how values are converted (half.h) or computed (kernels/functors.h).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "engine/error.h"
#include "engine/half.h"

namespace brisk {

enum class DType : uint8_t { F32, F64, F16, BF16, I8, U8, I32, I64, Bool };
inline constexpr int kNumDTypes = 9;

struct DTypeInfo {
  const char* name;         // as printed in errors: "F32"
  const char* safetensors;  // as written in safetensors headers: "F32"
  uint8_t size;             // bytes per element
  bool is_float;
  bool is_signed;
};

// Hand-aligned tables:
// clang-format off
inline constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    // name    st      size float  signed
    {"F32",  "F32",  4, true,  true},
    {"F64",  "F64",  8, true,  true},
    {"F16",  "F16",  2, true,  true},
    {"BF16", "BF16", 2, true,  true},
    {"I8",   "I8",   1, false, true},
    {"U8",   "U8",   1, false, false},
    {"I32",  "I32",  4, false, true},
    {"I64",  "I64",  8, false, true},
    {"Bool", "BOOL", 1, false, false},
};

constexpr const DTypeInfo& info(DType t) { return kDTypeInfo[static_cast<int>(t)]; }
constexpr size_t dtype_size(DType t) { return info(t).size; }
constexpr const char* dtype_name(DType t) { return info(t).name; }
constexpr bool is_floating(DType t) { return info(t).is_float; }
constexpr bool is_reduced_float(DType t) { return t == DType::F16 || t == DType::BF16; }
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::I8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;
// clang-format on

// The C++ types a tensor stores (those with a DType). Constraining templates by it makes
// `t.data<unsigned short>()` a one-line "constraints not satisfied" error, not a page.
template <class T>
concept Element = requires {
  DTypeOf<T>::value;
};
// The types item<T>() and to_vector<T>() convert to.
template <class T>
concept ValueType = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, int64_t> ||
    std::same_as<T, int32_t> || std::same_as<T, int8_t> || std::same_as<T, uint8_t> || std::same_as<T, bool>;

// The type arithmetic happens in: float for the 16-bit floats, the type itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// Result dtype of a binary op on a and b (PyTorch's rules for tensors of equal rank class):
// floats beat integers, wider beats narrower, F16 with BF16 gives F32, Bool is the lowest.
DType promote_types(DType a, DType b);

// Calls f(T{}) with T the C++ type of `t`. `op` names the caller in the error for a dtype that
// the chosen set does not cover. Sets: floating (F32 F64 F16 BF16), all.
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::F16: return f(Half{});
    case DType::BF16: return f(BFloat16{});
    default: BRISK_FAIL(op, ": no kernel for dtype ", t, " (floating dtypes only)");
  }
}

template <class F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::F16: return f(Half{});
    case DType::BF16: return f(BFloat16{});
    case DType::I8: return f(int8_t{});
    case DType::U8: return f(uint8_t{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::Bool: return f(bool{});
  }
  BRISK_FAIL(op, ": unknown dtype ", int(t));
}

// Numeric types only (no Bool): arithmetic ops.
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  if (t == DType::Bool) BRISK_FAIL(op, ": no kernel for dtype Bool");
  return dispatch_all(t, op, std::forward<F>(f));
}

}  // namespace brisk
