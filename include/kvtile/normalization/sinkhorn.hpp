// kvtile/normalization/sinkhorn.hpp: log-domain Sinkhorn variance normalization,
// best-so-far (method.md section 2).
//
// On one tile X[R x C] (keys: R = D channels, C = G tokens; values: R = G
// tokens, C = D channels) it finds a column scale Sc[C] and a row scale Sr[R]
// such that X / Sc / Sr has balanced row and column standard deviations.
// Only Sc reaches the record: per-row min-max RTN absorbs Sr exactly.
//
// The iterate is cur = X / e^Lc / e^Lr, which is never formed. With the
// reciprocals rc = 1 / e^Lc, rr = 1 / e^Lr (each an IEEE division, computed
// once per update), a row std of cur is rr[r] * std_c(X[r][c] * rc[c]) and a
// column std is rc[c] * std_r(X[r][c] * rr[r]), and that is how they are
// computed: per iteration one pass over W = X * rc (row stds, used before and
// after the row update) and one over Z = X * rr (column stds, used by the
// imbalance and the next column update), 2 multiplications and 2 two-pass
// stds per element instead of 4 multiplications and 3 stds. The result is
// method.md's up to rounding (a few ulp in each std); the scales returned are
// still e^Lc, e^Lr (not reciprocals).
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
// The same update, also leaving recip = 1 / e^L (the iterate's reciprocal
// scale: one IEEE division per update, never per element).
KVTILE_HOST_DEVICE float sinkhorn_update(float& log_scale, float std_dev, float& recip) {
  const float e = sinkhorn_update(log_scale, std_dev);
  recip = div(1.0f, e);
  return e;
}
}  // namespace detail

// Default 2 iterations (method.md's reference used 16, "converges by ~4"):
// next-token KL on the dev model and attention KL / error on every data set
// of docs/kvtile-eval.md "Sinkhorn iterations" equal to 4 and 8 iterations
// within the measurements' noise (docs/accuracy.md); 1 iteration costs KL on
// 2-bit tiles with strong key outliers. Every iteration is a fixed share of
// the GPU prefill encoder's time (docs/gpu-codec.md), so the default is the
// fewest iterations that keep that quality.
template <int Iterations = 2>
struct sinkhorn {
  static_assert(Iterations >= 0 && Iterations <= 64, "sinkhorn iterations must be in [0, 64]");
  static constexpr int iterations = Iterations;
  static constexpr bool is_none = false;
  static constexpr const char* name = "sinkhorn";

  template <int R, int C>
  static constexpr std::size_t scratch_floats = 2u * R * C + 4u * (R + C);

  // X: row-major R x C. Writes the best column scale to col_scale[C] and row
  // scale to row_scale[R]; returns the best imbalance (2 = perfectly balanced).
  // Ties go to the later iterate. scratch holds scratch_floats<R, C> floats.
  template <int R, int C>
  static float run(const float* X, float* col_scale, float* row_scale, float* scratch) {
    float* cur = scratch;  // W = X * rc or Z = X * rr
    float* tmp = cur + R * C;
    float* col_std = tmp + R * C;
    float* row_std = col_std + C;
    float* lc = row_std + R;
    float* lr = lc + C;
    float* rc = lr + R;
    float* rr = rc + C;
    float* ec = rr + R;
    float* er = ec + C;
    // layout: cur[RC] tmp[RC] col_std[C] row_std[R] lc[C] lr[R] rc[C] rr[R] ec[C] er[R]

    for (int c = 0; c < C; ++c) { lc[c] = 0.0f; ec[c] = 1.0f; rc[c] = 1.0f; col_scale[c] = 1.0f; }
    for (int r = 0; r < R; ++r) { lr[r] = 0.0f; er[r] = 1.0f; rr[r] = 1.0f; row_scale[r] = 1.0f; }

    auto imbalance = [&]() {
      float cmin, cmax, rmin, rmax;
      detail::min_max(col_std, C, cmin, cmax);
      detail::min_max(row_std, R, rmin, rmax);
      return detail::add(detail::imbalance_term(cmax, cmin), detail::imbalance_term(rmax, rmin));
    };

    detail::canonical_col_std(X, R, C, col_std, tmp);
    for (int r = 0; r < R; ++r) row_std[r] = detail::canonical_std(X + r * C, C, tmp);
    float best = imbalance();

    for (int it = 0; it < Iterations; ++it) {
      // Column update from the column stds of the previous iterate.
      for (int c = 0; c < C; ++c) ec[c] = detail::sinkhorn_update(lc[c], col_std[c], rc[c]);
      // Row stds of W = X * rc: before the row update the row std of cur is
      // sw * rr (old rr), after it sw * rr (new rr).
      for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) cur[c] = detail::mul(X[r * C + c], rc[c]);
        const float sw = detail::canonical_std(cur, C, tmp);
        er[r] = detail::sinkhorn_update(lr[r], detail::mul(sw, rr[r]), rr[r]);
        row_std[r] = detail::mul(sw, rr[r]);
      }
      // Column stds of Z = X * rr, times rc: the column stds of cur.
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) cur[r * C + c] = detail::mul(X[r * C + c], rr[r]);
      detail::canonical_col_std(cur, R, C, col_std, tmp);
      for (int c = 0; c < C; ++c) col_std[c] = detail::mul(col_std[c], rc[c]);
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
