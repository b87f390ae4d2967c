// kvtile/numeric/half.hpp: IEEE binary16 storage type, host and device.
//
// Conversions are integer-only software, so they give the same bits on the host
// and the device whatever the floating-point environment (rounding mode,
// flush-to-zero):
//  * float -> half is bit-identical to CUDA's __float2half_rn: round to nearest
//    even, overflow (|f| >= 65520) to +-Inf, fp32 subnormals to +-0, any NaN to
//    the canonical 0x7fff (sign and payload dropped, as CUDA does).
//  * half -> float is exact and bit-identical to CUDA's __half2float: every NaN
//    code gives the canonical float NaN 0x7fffffff (sign and payload dropped).
//  * half_round_down / half_round_up are __float2half_rd / __float2half_ru.
// tests/host/numeric/half.cpp checks every code and every rounding boundary;
// tests/device/numeric.cu checks all 2^32 floats against CUDA's host code and
// the device instructions.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN

struct alignas(2) half_t {
  std::uint16_t storage;

  static constexpr float max_finite = 65504.0f;

  half_t() = default;
  KVTILE_HOST_DEVICE explicit half_t(float f) : storage(from_float_bits(f)) {}

  KVTILE_HOST_DEVICE static constexpr half_t from_bits(std::uint16_t b) noexcept {
    half_t h{};
    h.storage = b;
    return h;
  }
  KVTILE_HOST_DEVICE constexpr std::uint16_t bits() const noexcept { return storage; }

  KVTILE_HOST_DEVICE float to_float() const { return to_float_bits(storage); }
  KVTILE_HOST_DEVICE explicit operator float() const { return to_float(); }

  // float -> binary16, round to nearest even. NaN -> 0x7fff (sign dropped),
  // overflow -> +-Inf. The device pass uses the hardware conversion
  // (cvt.rn.f16.f32), which tests/device/numeric.cu showed bit-identical to the
  // integer path below for all 2^32 floats; the integer path is the reference
  // (host, and device code compiled for other targets).
  KVTILE_HOST_DEVICE static std::uint16_t from_float_bits(float f) {
#if KVTILE_DEVICE_PASS
    std::uint16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    return from_float_bits_reference(f);
#endif
  }

  // The integer implementation of from_float_bits (exact under -ftz).
  KVTILE_HOST_DEVICE static std::uint16_t from_float_bits_reference(float f) {
    const std::uint32_t x = detail::float_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fffu;                 // NaN
    if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 -> Inf
    if (ax >= 0x38800000u) {                              // normal half (>= 2^-14)
      const std::uint32_t e = (ax >> 23) - 127u + 15u;
      const std::uint32_t m = ax & 0x7fffffu;
      std::uint32_t h = (e << 10) | (m >> 13);
      const std::uint32_t rem = m & 0x1fffu;
      // A carry out of the mantissa moves to the next binade, which is right;
      // it never reaches Inf because ax < 0x477ff000 here.
      if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
      return static_cast<std::uint16_t>(sign | h);
    }
    // <= 2^-25 (half the smallest subnormal; the tie goes to the even 0) -> +-0
    if (ax <= 0x33000000u) return static_cast<std::uint16_t>(sign);
    // subnormal half: units of 2^-24
    const std::uint32_t e = ax >> 23;
    const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // in [14, 24]: e in [102, 112]
    std::uint32_t h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }

  // binary16 -> float (exact; NaN -> 0x7fffffff). Device pass: cvt.f32.f16,
  // bit-identical (tests/device/numeric.cu, all 65536 codes).
  KVTILE_HOST_DEVICE static float to_float_bits(std::uint16_t h) {
#if KVTILE_DEVICE_PASS
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
#else
    return to_float_bits_reference(h);
#endif
  }

  KVTILE_HOST_DEVICE static float to_float_bits_reference(std::uint16_t h) {
    const std::uint32_t sign = (h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu;
    const std::uint32_t m = h & 0x3ffu;
    if (e == 0x1fu) return detail::float_from_bits(m != 0 ? 0x7fffffffu : (sign | 0x7f800000u));
    if (e != 0) return detail::float_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    // zero or subnormal: m * 2^-24, exact in float (a normal float, so also
    // under flush-to-zero)
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
};

static_assert(sizeof(half_t) == 2, "half_t must be 2 bytes");

namespace detail {
// Codes of non-NaN halves in value order: maps a code to a signed integer key
// (-0 and +0 both map to 0; +-Inf to +-0x7c00).
KVTILE_HOST_DEVICE int half_order_key(std::uint16_t h) {
  return (h & 0x8000u) ? -static_cast<int>(h & 0x7fffu) : static_cast<int>(h);
}
// Inverse of half_order_key; key 0 gives the zero whose sign bit is `zero_sign`
// (0 or 0x8000).
KVTILE_HOST_DEVICE std::uint16_t half_from_order_key(int k, std::uint32_t zero_sign = 0u) {
  if (k == 0) return static_cast<std::uint16_t>(zero_sign);
  return k > 0 ? static_cast<std::uint16_t>(k) : static_cast<std::uint16_t>(0x8000u | static_cast<std::uint32_t>(-k));
}
// Nearest half to f, then one step toward -Inf (dir < 0) or +Inf (dir > 0) if
// it lies on the wrong side of f. Integer compares only (exact under -ftz).
KVTILE_HOST_DEVICE half_t half_round_directed(float f, int dir) {
  const std::uint32_t x = float_bits(f);
  const half_t h(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return h;  // NaN -> 0x7fff
  const std::int32_t kh = float_order_key(float_bits(h.to_float()));
  const std::int32_t kf = float_order_key(x);
  if (dir < 0 ? kh <= kf : kh >= kf) return h;
  // Adjacent codes are adjacent values, and a zero result keeps f's sign
  // (IEEE 754 and cvt.rm/cvt.rp: round_up(-2^-25) is -0, not +0).
  return half_t::from_bits(half_from_order_key(half_order_key(h.storage) + (dir < 0 ? -1 : 1), (x >> 16) & 0x8000u));
}
}  // namespace detail

// Largest half <= f: IEEE round toward -Inf, bit-identical to __float2half_rd
// for every float. Above 65504 this is 65504, below -65504 it is -Inf; +-Inf
// map to themselves and NaN to 0x7fff; a zero result has the sign of f.
KVTILE_HOST_DEVICE half_t half_round_down(float f) { return detail::half_round_directed(f, -1); }

// Smallest half >= f: IEEE round toward +Inf, bit-identical to __float2half_ru
// for every float. Above 65504 this is +Inf, below -65504 it is -65504; +-Inf
// map to themselves and NaN to 0x7fff; a zero result has the sign of f.
KVTILE_HOST_DEVICE half_t half_round_up(float f) { return detail::half_round_directed(f, 1); }

KVTILE_NAMESPACE_END
