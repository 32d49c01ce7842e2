// engine/dtype.cpp: type promotion.
#include "engine/dtype.h"

namespace brisk {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // a float beats any integer
  auto rank = [](DType t) {
    switch (t) {
      case DType::F16:
      case DType::BF16:
      case DType::I8:
      case DType::U8: return 1;
      case DType::F32:
      case DType::I32: return 2;
      default: return 3;  // F64, I64
    }
  };
  int ra = rank(a), rb = rank(b);
  if (ra != rb) return ra > rb ? a : b;
  // Same width, different kind: F16 with BF16, or I8 with U8 (no I16 here).
  return fa ? DType::F32 : DType::I32;
}

}  // namespace brisk
