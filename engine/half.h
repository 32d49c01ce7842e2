// engine/half.h: the 16-bit float storage types Half (IEEE binary16) and BFloat16.
// They are storage only: arithmetic converts to float, computes, and rounds once on the way
// back (round to nearest even; NaN stays NaN, Inf stays Inf). Usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/macros.h"

namespace brisk {

namespace detail {
BRISK_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
BRISK_INLINE float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  BRISK_HD BFloat16(float f) : bits(from_float(f)) {}
  BRISK_HD operator float() const { return detail::bits_float(uint32_t(bits) << 16); }

  static BRISK_HD uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      return uint16_t((u >> 16) | 0x40);  // NaN: keep sign, force a quiet NaN
    }
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return uint16_t((u + rounding) >> 16);
  }
  static BRISK_HD BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;

  Half() = default;
  BRISK_HD Half(float f) : bits(from_float(f)) {}
  BRISK_HD operator float() const { return to_float(bits); }

  static BRISK_HD uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (after rounding) or Inf
    if (a < 0x38800000u) {
      // Result is subnormal or zero: let the FPU do the rounding by adding 0.5 (2^-1),
      // which aligns the binary point so the low mantissa bits are exactly the half's bits.
      float shifted = detail::bits_float(a) + 0.5f;
      return uint16_t(sign | (detail::float_bits(shifted) - 0x3f000000u));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return uint16_t(sign | (a >> 13));
  }
  static BRISK_HD float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));  // Inf/NaN
    if (exp == 0) {
      // zero or subnormal: mant * 2^-24
      float v = float(mant) * 5.9604644775390625e-8f;
      return detail::bits_float(sign | detail::float_bits(v));
    }
    return detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
  static BRISK_HD Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

}  // namespace brisk
