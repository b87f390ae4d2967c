// kvtile/detail/bits.hpp: bit casts and non-contractible float arithmetic that
// give the same result on the host and the device.
//
// Bit-identical host/device math needs two guarantees (method.md section 10):
//  * a*b + c is either one explicit fma or two roundings, never "whatever the
//    compiler chose". kvtile writes every fused operation as detail::fma and
//    every product that must stay unfused as detail::mul, which hides the
//    product from the host compiler's contraction (GCC contracts across
//    statements under -ffp-contract=fast, its default in GNU modes) and uses
//    __fmul_rn / __fadd_rn on the device.
//  * no libm transcendental: see detail/fastmath.hpp for exp/log.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

KVTILE_HOST_DEVICE std::uint32_t float_bits(float f) {
#if KVTILE_DEVICE_PASS
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVTILE_HOST_DEVICE float float_from_bits(std::uint32_t u) {
#if KVTILE_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Keeps `v` opaque to the host optimizer so a product cannot be fused with a
// later addition. Free at run time (an empty asm on a register).
KVTILE_HOST_DEVICE float opaque(float v) {
#if !KVTILE_DEVICE_PASS && (defined(__GNUC__) || defined(__clang__))
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#else
  volatile float t = v;
  v = t;
#endif
#endif
  return v;
}

// Correctly rounded product, never fused with a following add.
KVTILE_HOST_DEVICE float mul(float a, float b) {
#if KVTILE_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return opaque(a * b);
#endif
}

// Correctly rounded sum. On the host every product kvtile computes goes through
// mul() (opaque to contraction) or fma(), so a plain + cannot be fused.
KVTILE_HOST_DEVICE float add(float a, float b) {
#if KVTILE_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KVTILE_HOST_DEVICE float sub(float a, float b) {
#if KVTILE_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Single-rounding fused multiply-add, identical on both sides.
KVTILE_HOST_DEVICE float fma(float a, float b, float c) {
#if KVTILE_DEVICE_PASS
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// IEEE division (correctly rounded on both sides unless built with fast math).
KVTILE_HOST_DEVICE float div(float a, float b) {
#if KVTILE_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// div(a, b) by the reciprocal inv = div(1, b) and one correction step
// (Markstein): q = RN(a inv), r = b q - a (exact: fma), RN(q - r inv).
// Equal to div(a, b) bit for bit, signed zeros included, for every
// half-precision value a (0 or 2^-24 <= |a| <= 65504) and 2^-80 <= b <= 2^80:
// there every intermediate is normal (no underflow or overflow), so the
// result scales exactly with the exponents of a and b, and
// tests/device/numeric.cu checks every pair of significands (each of the 1024
// of a half with each of the 2^23 of a float, a and b in [1, 2)) against
// div. (r is bq - a, not a - bq, so a = -0 gives -0.) Three operations
// instead of a division; callers check the range of b and keep a in fp16.
KVTILE_HOST_DEVICE float div_half_by(float a, float b, float inv) {
  const float q = mul(a, inv);
  const float r = fma(b, q, -a);
  return fma(-r, inv, q);
}
// The range of b in which div_half_by equals div.
KVTILE_HOST_DEVICE bool div_half_by_ok(float b) { return b >= 0x1p-80f && b <= 0x1p80f; }

KVTILE_HOST_DEVICE float sqrt(float a) {
#if KVTILE_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Round half to even. The host side follows the current rounding mode, so this
// assumes the default one (round to nearest even), like all host float math here.
KVTILE_HOST_DEVICE float rint(float a) {
#if KVTILE_DEVICE_PASS
  return ::rintf(a);
#else
  return std::nearbyint(a);
#endif
}

KVTILE_HOST_DEVICE bool is_finite(float f) { return (float_bits(f) & 0x7f800000u) != 0x7f800000u; }
KVTILE_HOST_DEVICE bool is_nan(float f) { return (float_bits(f) & 0x7fffffffu) > 0x7f800000u; }

// Maps the bits of a non-NaN float to an integer that orders like the value:
// a < b  <=>  float_order_key(a) < float_order_key(b), and -0 and +0 both map to
// 0. Integer-only, so unaffected by flush-to-zero: lets a comparison that must
// give the same answer on the host and the device avoid float compares, which
// flush subnormal operands under -ftz.
KVTILE_HOST_DEVICE std::int32_t float_order_key(std::uint32_t bits) {
  const std::int32_t mag = static_cast<std::int32_t>(bits & 0x7fffffffu);
  return (bits & 0x80000000u) ? -mag : mag;
}

KVTILE_HOST_DEVICE float fmin(float a, float b) { return b < a ? b : a; }
KVTILE_HOST_DEVICE float fmax(float a, float b) { return a < b ? b : a; }
KVTILE_HOST_DEVICE float clamp(float v, float lo, float hi) { return fmin(fmax(v, lo), hi); }

// 2^e as a float for e in [-126, 127] (exact).
KVTILE_HOST_DEVICE float exp2i(int e) { return float_from_bits(static_cast<std::uint32_t>(e + 127) << 23); }

}  // namespace detail
KVTILE_NAMESPACE_END
