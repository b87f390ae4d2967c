// kvtile/packing/scale_format.hpp: how a record stores a vector of positive scales.
//
// e4m3_vector: E4M3 codes times one power-of-two fp32 vector scale 2^k, the
//   smallest with max(vector) <= 448 * 2^k (k in [-126, 127]). Power-of-two
//   vector scales make code * 2^k exact, so storage-aware rounding is exact.
// fp16_vector: plain fp16 values (the KVarN vLLM layout); no vector scale.
// Both give round_up (the smallest stored value >= v), round_down (the largest
// stored value <= v) and nearest rounding, for v >= 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"
#include "../numeric/float_e4m3.hpp"
#include "../numeric/half.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

struct e4m3_vector {
  using code_type = std::uint8_t;
  static constexpr bool has_vector_scale = true;
  static constexpr std::size_t code_bytes = 1;

  KVTILE_HOST_DEVICE static float vector_scale(float vmax) {
    if (!(vmax > 0.0f)) return 1.0f;
    const std::uint32_t b = float_bits(vmax);
    if (b < 0x00800000u) return exp2i(-126);
    const int e = static_cast<int>(b >> 23) - 127;
    int k = (b & 0x7fffffu) <= 0x600000u ? e - 8 : e - 7;  // 448 = 1.75 * 2^8
    if (k < -126) k = -126;
    if (k > 127) k = 127;
    return exp2i(k);
  }
  // A stored vector scale is valid when it is a power of two encode can write.
  KVTILE_HOST_DEVICE static bool valid_vector_scale(float vs) {
    const std::uint32_t b = float_bits(vs);
    return (b & 0x807fffffu) == 0u && b >= 0x00800000u && b < 0x7f800000u;
  }
  KVTILE_HOST_DEVICE static float decode(code_type c, float vs) { return mul(float_e4m3_t::to_float_bits(c), vs); }
  KVTILE_HOST_DEVICE static bool valid_code(code_type c) { return c <= float_e4m3_t::max_code; }
  KVTILE_HOST_DEVICE static code_type nearest(float v, float vs) { return float_e4m3_t::from_float_bits(div(v, vs)); }
  // Smallest code whose decoded value is >= v (v >= 0). False when none is.
  KVTILE_HOST_DEVICE static bool round_up(float v, float vs, code_type& c) {
    c = e4m3_round_up(div(v, vs)).storage;
    while (decode(c, vs) < v) {
      if (c >= float_e4m3_t::max_code) return false;
      ++c;
    }
    return true;
  }
  // Largest code whose decoded value is <= v (v >= 0; 0 when v is below the smallest).
  KVTILE_HOST_DEVICE static void round_down(float v, float vs, code_type& c) {
    c = e4m3_round_down(div(v, vs)).storage & 0x7fu;
    while (c > 0 && decode(c, vs) > v) --c;
  }
  KVTILE_HOST_DEVICE static bool next_up(code_type& c) {
    if (c >= float_e4m3_t::max_code) return false;
    ++c;
    return true;
  }
};

struct fp16_vector {
  using code_type = std::uint16_t;
  static constexpr bool has_vector_scale = false;
  static constexpr std::size_t code_bytes = 2;

  KVTILE_HOST_DEVICE static float vector_scale(float) { return 1.0f; }
  KVTILE_HOST_DEVICE static bool valid_vector_scale(float vs) { return vs == 1.0f; }
  KVTILE_HOST_DEVICE static float decode(code_type c, float) { return half_t::to_float_bits(c); }
  // Finite and non-negative (sign bit clear).
  KVTILE_HOST_DEVICE static bool valid_code(code_type c) { return c < 0x7c00u; }
  KVTILE_HOST_DEVICE static code_type nearest(float v, float) { return half_t::from_float_bits(v); }
  KVTILE_HOST_DEVICE static bool round_up(float v, float, code_type& c) {
    c = half_round_up(v).storage;
    return c < 0x7c00u;
  }
  KVTILE_HOST_DEVICE static void round_down(float v, float, code_type& c) {
    c = half_round_down(v).storage & 0x7fffu;
    if (c > 0x7bffu) c = 0x7bffu;
  }
  KVTILE_HOST_DEVICE static bool next_up(code_type& c) {
    if (c >= 0x7bffu) return false;
    ++c;
    return true;
  }
};

}  // namespace detail
KVTILE_NAMESPACE_END
