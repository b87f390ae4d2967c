// kvtile/normalization/sinkhorn.hpp: log-domain Sinkhorn variance normalization,
// best-so-far (method.md section 2).
//
// On one tile X[R x C] (keys: R = D channels, C = G tokens; values: R = G
// tokens, C = D channels) it finds a column scale Sc[C] and a row scale Sr[R]
// such that X / Sc / Sr has balanced row and column standard deviations.
// Only Sc reaches the record: per-row min-max RTN absorbs Sr exactly.
//
// The iterate is cur = X * rc * rr with per-column / per-row reciprocals
// rc = 1 / e^Lc, rr = 1 / e^Lr (each an IEEE division, computed once per
// update), i.e. cur[r][c] = mul(mul(X[r][c], rc[c]), rr[r]). This is method.md's
// X / e^Lc / e^Lr up to rounding (four roundings instead of two: relative
// difference below 2^-21) with 2 multiplications per element and iteration
// instead of 4 divisions; the scales returned are still e^Lc, e^Lr (not
// reciprocals).
//
// Every float operation is a detail:: call in a fixed order (canonical
// halving-tree sums, kvtile's own exp/log), so the device implementation in
// device/block/ can reproduce the host's scales bit for bit.
#pragma once

#include <cstddef>

#include "../config.hpp"
#include "../detail/bits.hpp"
#include "../detail/fastmath.hpp"
#include "../detail/reduce.hpp"

KVTILE_NAMESPACE_BEGIN

namespace detail {
// Constants of method.md section 2 (fp32).
struct sinkhorn_constants {
  static constexpr float std_min = 1e-3f;
  static constexpr float std_max = 1e3f;
  static constexpr float log_min = -0.3f;
  static constexpr float log_max = 10.0f;
  static constexpr float imb_floor = 1e-8f;
};

// imb = max(col std) / max(min(col std), 1e-8) + max(row std) / max(min(row std), 1e-8)
KVTILE_HOST_DEVICE float imbalance_term(float vmax, float vmin) {
  return div(vmax, fmax(vmin, sinkhorn_constants::imb_floor));
}

// One log-domain update: L = clip(L + ln(clamp(std)), -0.3, 10); returns e^L.
KVTILE_HOST_DEVICE float sinkhorn_update(float& log_scale, float std_dev) {
  using k = sinkhorn_constants;
  const float s = clamp(std_dev, k::std_min, k::std_max);
  log_scale = clamp(add(log_scale, detail::log(s)), k::log_min, k::log_max);
  return detail::exp(log_scale);
}
}  // namespace detail

template <int Iterations = 8>
struct sinkhorn {
  static_assert(Iterations >= 0 && Iterations <= 64, "sinkhorn iterations must be in [0, 64]");
  static constexpr int iterations = Iterations;
  static constexpr bool is_none = false;
  static constexpr const char* name = "sinkhorn";

  template <int R, int C>
  static constexpr std::size_t scratch_floats = 2u * R * C + 3u * (R + C);

  // X: row-major R x C. Writes the best column scale to col_scale[C] and row
  // scale to row_scale[R]; returns the best imbalance (2 = perfectly balanced).
  // Ties go to the later iterate. scratch holds scratch_floats<R, C> floats.
  template <int R, int C>
  static float run(const float* X, float* col_scale, float* row_scale, float* scratch) {
    float* cur = scratch;
    float* tmp = cur + R * C;
    float* col_std = tmp + R * C;
    float* row_std = col_std + C;
    float* lc = row_std + R;
    float* lr = lc + C;
    float* ec = lr + R;
    float* er = ec + C;
    // layout: cur[RC] tmp[RC] col_std[C] row_std[R] lc[C] lr[R] ec[C] er[R]
    // (tmp's first C + R floats also hold the reciprocals rc[C], rr[R] between
    // updates: tmp is only scratch inside the std passes, which run after the
    // rescale that consumes them.)

    for (int i = 0; i < R * C; ++i) cur[i] = X[i];
    for (int c = 0; c < C; ++c) { lc[c] = 0.0f; ec[c] = 1.0f; col_scale[c] = 1.0f; }
    for (int r = 0; r < R; ++r) { lr[r] = 0.0f; er[r] = 1.0f; row_scale[r] = 1.0f; }

    auto row_stds = [&]() {
      for (int r = 0; r < R; ++r) row_std[r] = detail::canonical_std(cur + r * C, C, tmp);
    };
    auto imbalance = [&]() {
      float cmin, cmax, rmin, rmax;
      detail::min_max(col_std, C, cmin, cmax);
      detail::min_max(row_std, R, rmin, rmax);
      return detail::add(detail::imbalance_term(cmax, cmin), detail::imbalance_term(rmax, rmin));
    };
    // cur = X * (1 / ec) * (1 / er): reciprocals once per rescale.
    auto rescale = [&]() {
      float* rc = tmp;
      float* rr = tmp + C;
      for (int c = 0; c < C; ++c) rc[c] = detail::div(1.0f, ec[c]);
      for (int r = 0; r < R; ++r) rr[r] = detail::div(1.0f, er[r]);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) cur[r * C + c] = detail::mul(detail::mul(X[r * C + c], rc[c]), rr[r]);
    };

    detail::canonical_col_std(cur, R, C, col_std, tmp);
    row_stds();
    float best = imbalance();

    for (int it = 0; it < Iterations; ++it) {
      for (int c = 0; c < C; ++c) ec[c] = detail::sinkhorn_update(lc[c], col_std[c]);
      rescale();
      row_stds();
      for (int r = 0; r < R; ++r) er[r] = detail::sinkhorn_update(lr[r], row_std[r]);
      rescale();
      detail::canonical_col_std(cur, R, C, col_std, tmp);
      row_stds();
      const float m = imbalance();
      if (m <= best) {
        best = m;
        for (int c = 0; c < C; ++c) col_scale[c] = ec[c];
        for (int r = 0; r < R; ++r) row_scale[r] = er[r];
      }
    }
    return best;
  }
};

KVTILE_NAMESPACE_END
