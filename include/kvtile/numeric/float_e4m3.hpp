// kvtile/numeric/float_e4m3.hpp: FP8 E4M3 (OCP "fn" variant: no Inf, NaN = 0x7f/0xff,
// max 448) storage type, host and device.
//
// Conversions are integer-only software, so they give the same bits on the host
// and the device whatever the floating-point environment (rounding mode,
// flush-to-zero):
//  * float -> E4M3 rounds to nearest even and saturates to +-448 (Inf too),
//    bit-identical to CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)
//    (host code and cvt.rn.satfinite.e4m3x2.f32): any NaN -> 0x7f (sign
//    dropped), magnitudes <= 2^-10 and fp32 subnormals -> +-0 (sign kept).
//  * E4M3 -> float is exact and bit-identical to CUDA's fp8 -> half -> float
//    path: 0x7f and 0xff give the canonical float NaN 0x7fffffff.
// Directed variants (e4m3_round_up / e4m3_round_down) serve storage-aware
// rounding of scales (method.md section 5).
// tests/host/numeric/float_e4m3.cpp checks every code and every rounding boundary;
// tests/device/numeric.cu checks all 2^32 floats against CUDA.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN

struct alignas(1) float_e4m3_t {
  std::uint8_t storage;

  static constexpr float max_finite = 448.0f;
  static constexpr std::uint8_t max_code = 0x7e;

  float_e4m3_t() = default;
  KVTILE_HOST_DEVICE explicit float_e4m3_t(float f) : storage(from_float_bits(f)) {}

  KVTILE_HOST_DEVICE static constexpr float_e4m3_t from_bits(std::uint8_t b) noexcept {
    float_e4m3_t v{};
    v.storage = b;
    return v;
  }
  KVTILE_HOST_DEVICE constexpr std::uint8_t bits() const noexcept { return storage; }

  KVTILE_HOST_DEVICE float to_float() const { return to_float_bits(storage); }
  KVTILE_HOST_DEVICE explicit operator float() const { return to_float(); }

  KVTILE_HOST_DEVICE static std::uint8_t from_float_bits(float f) {
    const std::uint32_t x = detail::float_bits(f);
    const std::uint32_t sign = (x >> 24) & 0x80u;
    const std::uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fu;                                          // NaN
    if (ax >= 0x43e00000u) return static_cast<std::uint8_t>(sign | max_code);   // >= 448 (and Inf): saturate
    std::uint32_t code;
    if (ax >= 0x3c800000u) {  // normal E4M3 (>= 2^-6)
      const std::uint32_t e = (ax >> 23) - 127u + 7u;
      const std::uint32_t m = ax & 0x7fffffu;
      code = (e << 3) | (m >> 20);
      const std::uint32_t rem = m & 0xfffffu;
      // ax < 448 = 0x1.cp8: the carry reaches at most 0x7e (448), never 0x7f.
      if (rem > 0x80000u || (rem == 0x80000u && (code & 1u))) ++code;
    } else if (ax > 0x3a800000u) {  // subnormal E4M3, (2^-10, 2^-6): units of 2^-9
      const std::uint32_t e = ax >> 23;  // in [117, 120]
      const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
      const std::uint32_t shift = 141u - e;  // m * 2^(e - 150) / 2^-9 = m >> (141 - e); in [21, 24]
      code = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (code & 1u))) ++code;  // 8 is the smallest normal: same code
    } else {  // <= 2^-10 (half the smallest subnormal; the tie goes to the even 0) -> +-0
      code = 0;
    }
    return static_cast<std::uint8_t>(sign | code);
  }

  KVTILE_HOST_DEVICE static float to_float_bits(std::uint8_t c) {
    const std::uint32_t sign = (c & 0x80u) << 24;
    const std::uint32_t e = (c >> 3) & 0xfu;
    const std::uint32_t m = c & 7u;
    if (e == 0xfu && m == 7u) return detail::float_from_bits(0x7fffffffu);
    if (e != 0) return detail::float_from_bits(sign | ((e + 120u) << 23) | (m << 20));
    const float v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
    return sign ? -v : v;
  }
};

static_assert(sizeof(float_e4m3_t) == 1, "float_e4m3_t must be 1 byte");

namespace detail {
// E4M3 codes 0x00..0x7e and 0x80..0xfe in value order (-0 and +0 both map to 0).
KVTILE_HOST_DEVICE int e4m3_order_key(std::uint8_t c) {
  return (c & 0x80u) ? -static_cast<int>(c & 0x7fu) : static_cast<int>(c);
}
// Nearest E4M3 to v, then one step toward -Inf (dir < 0) or +Inf (dir > 0) if
// it lies on the wrong side of v, saturating at +-448. Integer compares only.
KVTILE_HOST_DEVICE float_e4m3_t e4m3_round_directed(float v, int dir) {
  const std::uint32_t x = float_bits(v);
  const float_e4m3_t c(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return c;  // NaN -> 0x7f
  const std::int32_t kc = float_order_key(float_bits(c.to_float()));
  const std::int32_t kv = float_order_key(x);
  if (dir < 0 ? kc <= kv : kc >= kv) return c;
  int k = e4m3_order_key(c.storage) + (dir < 0 ? -1 : 1);
  if (k > float_e4m3_t::max_code) k = float_e4m3_t::max_code;    // v > 448 (round up)
  if (k < -float_e4m3_t::max_code) k = -float_e4m3_t::max_code;  // v < -448 (round down)
  // A zero result keeps v's sign, as IEEE directed rounding does.
  const std::uint32_t code = k > 0 ? static_cast<std::uint32_t>(k)
                             : k < 0 ? 0x80u | static_cast<std::uint32_t>(-k)
                                     : (x >> 24) & 0x80u;
  return float_e4m3_t::from_bits(static_cast<std::uint8_t>(code));
}
}  // namespace detail

// Smallest E4M3 value >= v. Saturating: v > 448 (and +Inf) gives 448 (callers
// choose vector scales so that this never happens); -Inf gives -448; NaN gives
// 0x7f; a zero result has the sign of v.
KVTILE_HOST_DEVICE float_e4m3_t e4m3_round_up(float v) { return detail::e4m3_round_directed(v, 1); }

// Largest E4M3 value <= v. Saturating: v < -448 (and -Inf) gives -448; +Inf
// gives 448; NaN gives 0x7f; a zero result has the sign of v.
KVTILE_HOST_DEVICE float_e4m3_t e4m3_round_down(float v) { return detail::e4m3_round_directed(v, -1); }

KVTILE_NAMESPACE_END
