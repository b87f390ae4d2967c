// kvtile/rounding/asymmetric_rtn.hpp: asymmetric round-to-nearest per row (method.md sections 3 and 5).
//
// A row y is mapped to codes in [0, 2^Bits - 1] with a real zero point z and
// step a: code = clamp(round_half_even((y - z) / a), 0, qmax), y^ = code * a + z.
// The codec chooses z and a storage-aware (z rounded down, a rounded up to
// what the record stores, grid covering [lo, hi]); this policy holds the
// per-element math both the host and the device run.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN

// ClipPermille in (0, 1000]: the row range [lo, hi] shrinks around its centre
// by ClipPermille / 1000 (values outside saturate). 1000 = no clipping.
template <int Bits, int ClipPermille = 1000>
struct asymmetric_rtn {
  static_assert(Bits == 2 || Bits == 4 || Bits == 8, "rounding bits must be 2, 4 or 8");
  static_assert(ClipPermille > 0 && ClipPermille <= 1000, "clip ratio must be in (0, 1]");

  static constexpr int bits = Bits;
  static constexpr std::uint32_t qmax = (1u << Bits) - 1u;
  static constexpr int clip_permille = ClipPermille;
  static constexpr float clip_ratio = static_cast<float>(ClipPermille) / 1000.0f;

  // The range the grid must cover, after clipping.
  KVTILE_HOST_DEVICE static void clipped_range(float lo, float hi, float& out_lo, float& out_hi) {
    if (ClipPermille == 1000) {
      out_lo = lo;
      out_hi = hi;
      return;
    }
    const float half = detail::mul(detail::sub(hi, lo), 0.5f);
    const float mid = detail::add(lo, half);
    const float r = detail::mul(half, clip_ratio);
    out_lo = detail::sub(mid, r);
    out_hi = detail::add(mid, r);
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
    if (!(scale > 0.0f)) return 0u;  // constant row stored exactly by its zero point
    const float q = detail::rint(detail::div(detail::sub(y, zero), scale));
    const float c = detail::clamp(q, 0.0f, static_cast<float>(qmax));
    return static_cast<std::uint32_t>(c);
  }

  KVTILE_HOST_DEVICE static float dequantize(std::uint32_t code, float scale, float zero) {
    return detail::fma(static_cast<float>(code), scale, zero);
  }
};

// The rounding family the codec takes: keys and values get their own bit widths.
template <int ClipPermille = 1000>
struct rtn {
  static constexpr int clip_permille = ClipPermille;
  template <int Bits>
  using rounder = asymmetric_rtn<Bits, ClipPermille>;
};

KVTILE_NAMESPACE_END
