// tools/kvtile-eval/token_rtn.hpp: the per-token RTN baseline's row math.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <kvtile/kvtile.hpp>

namespace kvtile_eval {

// Per-token asymmetric RTN of one row with fp16 zero (rounded down) and fp16
// step (rounded up until the grid covers the row), kvtile's row math.
template <int Bits>
bool token_rtn_row(const float* x, int n, float* y) {
  using R = kvtile::asymmetric_rtn<Bits>;
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float z = kvtile::half_round_down(lo).to_float();
  if (!std::isfinite(z)) return false;
  kvtile::half_t a = kvtile::half_round_up(R::required_scale(hi, z));
  while (!R::covers(hi, a.to_float(), z)) {
    if ((a.bits() & 0x7fffu) >= 0x7bffu) return false;
    a = kvtile::half_t::from_bits(static_cast<std::uint16_t>(a.bits() + 1));
  }
  const float af = a.to_float();
  if (!std::isfinite(af)) return false;
  for (int i = 0; i < n; ++i) y[i] = R::dequantize(R::quantize(x[i], af, z), af, z);
  return true;
}

inline bool token_rtn_row(int bits, const float* x, int n, float* y) {
  switch (bits) {
    case 2: return token_rtn_row<2>(x, n, y);
    case 4: return token_rtn_row<4>(x, n, y);
    default: return token_rtn_row<8>(x, n, y);
  }
}

}  // namespace kvtile_eval
