// kvtile/numeric/bfloat16.hpp: bfloat16 storage type (an input dtype), host and device.
// Integer-only conversions, the same bits on the host and the device:
//  * float -> bfloat16 is bit-identical to CUDA's __float2bfloat16_rn: round to
//    nearest even (fp32 subnormals round like any value, to bfloat16
//    subnormals), overflow to +-Inf, any NaN to the canonical 0x7fff.
//  * bfloat16 -> float is exact (the code shifted left by 16, NaN payload and
//    sign kept), bit-identical to __bfloat162float.
// tests/host/numeric/bfloat16.cpp and tests/device/numeric.cu check both.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN

struct alignas(2) bfloat16_t {
  std::uint16_t storage;

  bfloat16_t() = default;
  KVTILE_HOST_DEVICE explicit bfloat16_t(float f) : storage(from_float_bits(f)) {}

  KVTILE_HOST_DEVICE static constexpr bfloat16_t from_bits(std::uint16_t b) noexcept {
    bfloat16_t h{};
    h.storage = b;
    return h;
  }
  KVTILE_HOST_DEVICE constexpr std::uint16_t bits() const noexcept { return storage; }

  KVTILE_HOST_DEVICE float to_float() const { return detail::float_from_bits(static_cast<std::uint32_t>(storage) << 16); }
  KVTILE_HOST_DEVICE explicit operator float() const { return to_float(); }

  KVTILE_HOST_DEVICE static std::uint16_t from_float_bits(float f) {
    const std::uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    // Adds just under half an ulp, plus one when the kept part is odd (ties to
    // even); the carry can reach the exponent (and Inf), which is right.
    const std::uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(r >> 16);
  }
};

static_assert(sizeof(bfloat16_t) == 2, "bfloat16_t must be 2 bytes");

KVTILE_NAMESPACE_END
