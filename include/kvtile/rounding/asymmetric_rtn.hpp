// kvtile/rounding/asymmetric_rtn.hpp: asymmetric round-to-nearest per row
// (method.md sections 3 and 5, docs/format.md "Encoding rule").
//
// A row y is mapped to codes in [0, 2^Bits - 1] with a real zero point z and
// step a: code = clamp(round_half_even((y - z) / a), 0, qmax), y^ = code * a + z.
// The step is stored on the packing's scale grid (E4M3 times a power-of-two
// vector scale, or fp16) and the zero as fp16; how (a, z) are chosen on those
// grids is the row rounding policy (row_rounding). Every decision is one
// KVTILE_HOST_DEVICE function here, called by the host codec (tile_codec.hpp)
// and by the block codec (device/block/) alike, so both make the same choice
// bit for bit.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"
#include "../numeric/half.hpp"

KVTILE_NAMESPACE_BEGIN

// How a row's stored step and zero are chosen (docs/format.md states each exactly).
//  * cover (format 0.1's rule): zero = the largest fp16 <= lo, step = the
//    smallest stored value >= (hi - zero) / qmax, raised until the grid's top
//    reaches hi. Covers [lo, hi]; wastes up to one step of range on a coarse grid.
//  * nearest: step = the stored value nearest (hi - lo) / qmax, grid centred on
//    [lo, hi] (zero = the fp16 nearest mid - qmax * step / 2).
//  * min_max_error (default): of the two stored neighbours of (hi - lo) / qmax
//    (the largest <= and the smallest >=), the one whose centred grid has the
//    smaller maximum error over [lo, hi]; ties take the larger step.
// [lo, hi] is the row's range after the clip ratio (a centred shrink).
enum class row_rounding : int { cover = 0, nearest = 1, min_max_error = 2 };

constexpr const char* to_string(row_rounding p) noexcept {
  return p == row_rounding::cover ? "cover" : (p == row_rounding::nearest ? "nearest" : "min_max_error");
}

namespace detail {

// Row range after a clip ratio in (0, 1]: [lo, hi] shrinks around its centre
// (ratio 1: unchanged). mid = lo + (hi - lo) / 2, half width r = (hi - lo) / 2 * ratio.
KVTILE_HOST_DEVICE void clip_range(float lo, float hi, float ratio, float& out_lo, float& out_hi) {
  if (!(ratio < 1.0f)) {
    out_lo = lo;
    out_hi = hi;
    return;
  }
  const float half = mul(sub(hi, lo), 0.5f);
  const float mid = add(lo, half);
  const float r = mul(half, ratio);
  out_lo = sub(mid, r);
  out_hi = add(mid, r);
}

// code = clamp(round_half_even((y - zero) / scale), 0, qmax); a step that is
// not > 0 (constant row) gives code 0, reconstructed exactly by the zero.
KVTILE_HOST_DEVICE std::uint32_t rtn_quantize(float y, float scale, float zero, std::uint32_t qmax) {
  if (!(scale > 0.0f)) return 0u;
  const float q = rint(div(sub(y, zero), scale));
  return static_cast<std::uint32_t>(clamp(q, 0.0f, static_cast<float>(qmax)));
}

KVTILE_HOST_DEVICE float rtn_dequantize(std::uint32_t code, float scale, float zero) {
  return fma(static_cast<float>(code), scale, zero);
}

// The step the row asks for before storage rounding (the row vector scale of
// the side is taken from the largest over its rows). cover: (hi - z) / qmax
// with z the zero it stores; centred policies: (hi - lo) / qmax.
KVTILE_HOST_DEVICE float row_step_wanted(float lo, float hi, std::uint32_t qmax, row_rounding policy) {
  const float base = policy == row_rounding::cover ? half_round_down(lo).to_float() : lo;
  return div(sub(hi, base), static_cast<float>(qmax));
}

// The fp16 zero of a grid of step a centred on [lo, hi]: nearest fp16 to
// (lo + (hi - lo) / 2) - qmax * a / 2, the argument clamped to +-65504.
KVTILE_HOST_DEVICE std::uint16_t centred_zero(float lo, float hi, float a, std::uint32_t qmax) {
  const float mid = add(lo, mul(sub(hi, lo), 0.5f));
  const float z = clamp(sub(mid, mul(mul(a, static_cast<float>(qmax)), 0.5f)), -65504.0f, 65504.0f);
  return half_t::from_float_bits(z);
}

// Maximum reconstruction error over [lo, hi] of the grid (a, z): the larger of
// a / 2 (inside the grid) and the errors at the two ends (outside it, which
// grow toward the ends).
KVTILE_HOST_DEVICE float grid_max_error(float lo, float hi, float a, float z, std::uint32_t qmax) {
  const float elo = sub(rtn_dequantize(rtn_quantize(lo, a, z, qmax), a, z), lo);
  const float ehi = sub(rtn_dequantize(rtn_quantize(hi, a, z, qmax), a, z), hi);
  return fmax(mul(a, 0.5f), fmax(elo < 0.0f ? -elo : elo, ehi < 0.0f ? -ehi : ehi));
}

// The stored step code and fp16 zero of one row (method.md section 5 step 3).
// Format: a scale format of packing/scale_format.hpp; vs its vector scale.
// lo <= hi is the clipped range. False when the packing cannot store the step.
template <class Format>
KVTILE_HOST_DEVICE bool fit_row(float lo, float hi, float vs, std::uint32_t qmax, row_rounding policy,
                                typename Format::code_type& step_code, std::uint16_t& zero_bits) {
  using code_type = typename Format::code_type;
  if (policy == row_rounding::cover) {
    const half_t z = half_round_down(lo);
    const float zf = z.to_float();
    zero_bits = z.bits();
    code_type c;
    if (!Format::round_up(div(sub(hi, zf), static_cast<float>(qmax)), vs, c)) return false;
    while (rtn_dequantize(qmax, Format::decode(c, vs), zf) < hi)
      if (!Format::next_up(c)) return false;
    step_code = c;
    return true;
  }
  const float want = div(sub(hi, lo), static_cast<float>(qmax));
  if (policy == row_rounding::nearest) {
    const code_type c = Format::nearest(want, vs);
    if (!Format::valid_code(c)) return false;
    step_code = c;
    zero_bits = centred_zero(lo, hi, Format::decode(c, vs), qmax);
    return true;
  }
  code_type up, dn;
  if (!Format::round_up(want, vs, up)) return false;
  Format::round_down(want, vs, dn);
  const float a_up = Format::decode(up, vs);
  const std::uint16_t z_up = centred_zero(lo, hi, a_up, qmax);
  step_code = up;
  zero_bits = z_up;
  if (dn != up) {
    const float a_dn = Format::decode(dn, vs);
    const std::uint16_t z_dn = centred_zero(lo, hi, a_dn, qmax);
    const float e_dn = grid_max_error(lo, hi, a_dn, half_t::to_float_bits(z_dn), qmax);
    const float e_up = grid_max_error(lo, hi, a_up, half_t::to_float_bits(z_up), qmax);
    if (e_dn < e_up) {
      step_code = dn;
      zero_bits = z_dn;
    }
  }
  return true;
}

}  // namespace detail

// Rounder of one side (keys or values) at one bit width. ClipPermille in
// (0, 1000]: the row range shrinks around its centre to ClipPermille / 1000 of
// its width (values outside saturate); 1000 = no clipping.
template <int Bits, int ClipPermille = 1000, row_rounding Policy = row_rounding::min_max_error>
struct asymmetric_rtn {
  static_assert(Bits == 2 || Bits == 4 || Bits == 8, "rounding bits must be 2, 4 or 8");
  static_assert(ClipPermille > 0 && ClipPermille <= 1000, "clip ratio must be in (0, 1]");

  static constexpr int bits = Bits;
  static constexpr std::uint32_t qmax = (1u << Bits) - 1u;
  static constexpr int clip_permille = ClipPermille;
  static constexpr float clip_ratio = static_cast<float>(ClipPermille) / 1000.0f;
  static constexpr row_rounding policy = Policy;

  // The range the grid is fitted to, after clipping.
  KVTILE_HOST_DEVICE static void clipped_range(float lo, float hi, float& out_lo, float& out_hi) {
    detail::clip_range(lo, hi, clip_ratio, out_lo, out_hi);
  }
  // The step the clipped row [lo, hi] asks for (sets the side's vector scale).
  KVTILE_HOST_DEVICE static float step_wanted(float lo, float hi) {
    return detail::row_step_wanted(lo, hi, qmax, Policy);
  }
  // Stored step code and fp16 zero of the clipped row [lo, hi] (see row_rounding).
  template <class Format>
  KVTILE_HOST_DEVICE static bool fit(float lo, float hi, float vs, typename Format::code_type& step_code,
                                     std::uint16_t& zero_bits) {
    return detail::fit_row<Format>(lo, hi, vs, qmax, Policy, step_code, zero_bits);
  }

  // The smallest step that lets `zero + qmax * step` reach hi (before storage rounding).
  KVTILE_HOST_DEVICE static float required_scale(float hi, float zero) {
    return detail::div(detail::sub(hi, zero), static_cast<float>(qmax));
  }
  // True when the top of the grid, evaluated as decode evaluates it, reaches hi.
  KVTILE_HOST_DEVICE static bool covers(float hi, float scale, float zero) {
    return !(dequantize(qmax, scale, zero) < hi);
  }

  KVTILE_HOST_DEVICE static std::uint32_t quantize(float y, float scale, float zero) {
    return detail::rtn_quantize(y, scale, zero, qmax);
  }
  KVTILE_HOST_DEVICE static float dequantize(std::uint32_t code, float scale, float zero) {
    return detail::rtn_dequantize(code, scale, zero);
  }
};

namespace detail {
template <int Bits, int C2, int C4, int C8>
constexpr int clip_for_bits() {
  return Bits == 2 ? C2 : (Bits == 4 ? C4 : C8);
}
}  // namespace detail

// The rounding family the codec takes: the row policy and a clip ratio per side
// and bit width, in permille (1000 = no clip). Keys and values get their own
// rounders (Rounding::key_rounder<bK>, Rounding::value_rounder<bV>).
// Defaults chosen by next-token KL on a trained model, never by MSE
// (docs/accuracy.md): min_max_error, 2-bit rows clipped to 85% of their range
// (keys and values), 4- and 8-bit rows unclipped.
template <row_rounding Policy = row_rounding::min_max_error, int KeyClip2 = 850, int KeyClip4 = 1000,
          int KeyClip8 = 1000, int ValueClip2 = 850, int ValueClip4 = 1000, int ValueClip8 = 1000>
struct rtn {
  static constexpr row_rounding policy = Policy;
  template <int Bits>
  using key_rounder = asymmetric_rtn<Bits, detail::clip_for_bits<Bits, KeyClip2, KeyClip4, KeyClip8>(), Policy>;
  template <int Bits>
  using value_rounder =
      asymmetric_rtn<Bits, detail::clip_for_bits<Bits, ValueClip2, ValueClip4, ValueClip8>(), Policy>;
};

// Format 0.1's rule (covering grid, no clip), for comparison and reproduction.
using rtn_cover = rtn<row_rounding::cover, 1000, 1000, 1000, 1000, 1000, 1000>;

// One clip ratio for every side and bit width.
template <int ClipPermille, row_rounding Policy = row_rounding::min_max_error>
using rtn_clip = rtn<Policy, ClipPermille, ClipPermille, ClipPermille, ClipPermille, ClipPermille, ClipPermille>;

KVTILE_NAMESPACE_END
