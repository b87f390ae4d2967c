// kvtile/device/block/detail/smem_sinkhorn.cuh: block_tile_codec's
// shared-memory Sinkhorn, for any shape (the register Sinkhorn,
// register_sinkhorn.cuh, serves the shapes that fit it): line_stds, col_stds,
// row_stds (one warp per line, NB lines at once), imbalance_warp0 and
// sinkhorn_smem, on the shared tile and slow_sinkhorn_storage. Member
// functions of block_tile_codec, declared in block_tile_encoder.cuh, which
// includes this file at its end.
#pragma once

#include "../block_tile_encoder.cuh"

#include <cstdint>

#include "../../../detail/bits.hpp"
#include "../../../detail/fastmath.hpp"
#include "../../../normalization/sinkhorn.hpp"
#include "../../warp/warp_primitives.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// The Sinkhorn (sinkhorn.hpp), with the reciprocals rc = 1 / ecol,
// rr = 1 / erow computed once per update: column c's std of the iterate is
// rc[c] * std_r(X[r][c] * rr[r]), row r's is rr[r] * std_c(X[r][c] * rc[c]).

// Cols: col_std[c] = rc[c] * std_r(X[r][c] * rr[r]) (the iterate's column
// stds); rows: row_std[r] = std_c(X[r][c] * rc[c]) (the caller multiplies by
// rr). A lane's rows (columns) are the same for every line, so their
// reciprocals are loaded once per pass. Each std is a long dependent chain (two shuffle
// trees, a division, a square root), so a warp works on NB lines at once
// (independent chains in one basic block: the scheduler interleaves them).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, bool Cols>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::line_stds() {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  constexpr int N = Cols ? C : R;        // lines
  constexpr int J = (Cols ? R : C) / 32;  // per-lane values of a line
  constexpr int per_warp = (N + WARPS - 1) / WARPS;
  constexpr int K = per_warp < NB ? per_warp : NB;
  const int lane = lane_id();
  float rl[J];  // reciprocals along the line (fixed per lane)
#pragma unroll
  for (int j = 0; j < J; ++j) rl[j] = Cols ? s_.sk.slow.rrow[lane + 32 * j] : s_.sk.slow.rcol[lane + 32 * j];
  for (int i0 = 0; i0 < per_warp; i0 += K) {
    float v[K][J];
    float sd[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int line = warp_id() + WARPS * (i0 + k);
      // warp-uniform; compile-time true when the lines split evenly
      const bool valid = (N % WARPS == 0 && per_warp % K == 0) || ((i0 + k) < per_warp && line < N);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const float x = valid ? (Cols ? X<Key>(lane + 32 * j, line) : X<Key>(line, lane + 32 * j)) : 0.0f;
        v[k][j] = detail::mul(x, rl[j]);
      }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) sd[k] = warp_canonical_std(v[k]);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int line = warp_id() + WARPS * (i0 + k);
        if ((N % WARPS == 0 && per_warp % K == 0) || ((i0 + k) < per_warp && line < N)) {
          if constexpr (Cols) s_.sk.slow.col_std[line] = detail::mul(sd[k], s_.sk.slow.rcol[line]);
          else s_.sk.slow.row_std[line] = sd[k];
        }
      }
    }
  }
}

template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::col_stds() { line_stds<Key, true>(); }

template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::row_stds() { line_stds<Key, false>(); }

// imb of method.md section 2, computed by warp 0, valid in its lane 0
// (values are >= +0: order free).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE float block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::imbalance_warp0() const {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  const int lane = lane_id();
  float cmin = s_.sk.slow.col_std[lane], cmax = cmin, rmin = s_.sk.slow.row_std[lane], rmax = rmin;
  for (int i = lane + 32; i < C; i += 32) {
    cmin = detail::fmin(cmin, s_.sk.slow.col_std[i]);
    cmax = detail::fmax(cmax, s_.sk.slow.col_std[i]);
  }
  for (int i = lane + 32; i < R; i += 32) {
    rmin = detail::fmin(rmin, s_.sk.slow.row_std[i]);
    rmax = detail::fmax(rmax, s_.sk.slow.row_std[i]);
  }
  std::uint32_t c0, c1, r0, r1;  // stds: >= +0, never -0 or NaN
  warp_min_max_bits_lane0(cmin, cmax, c0, c1);
  warp_min_max_bits_lane0(rmin, rmax, r0, r1);
  return detail::add(detail::imbalance_term(detail::float_from_bits(c1), detail::float_from_bits(c0)),
                     detail::imbalance_term(detail::float_from_bits(r1), detail::float_from_bits(r0)));
}

// The shared-memory Sinkhorn: any shape.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::sinkhorn_smem() {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
    s_.sk.slow.lcol[i] = 0.0f;
    s_.sk.slow.ecol[i] = 1.0f;
    s_.sk.slow.rcol[i] = 1.0f;
    s_.best_col[i] = 1.0f;
    s_.sk.slow.lrow[i] = 0.0f;
    s_.sk.slow.erow[i] = 1.0f;
    s_.sk.slow.rrow[i] = 1.0f;
  }
  if constexpr (iterations > 0) {
    __syncthreads();
    col_stds<Key>();
    row_stds<Key>();
    __syncthreads();
    if (warp_id() == 0) {
      const float m = imbalance_warp0<Key>();
      if (lane_id() == 0) s_.best = m;
    }
    for (int it = 0; it < iterations; ++it) {
      for (int c = threadIdx.x; c < C; c += BLOCK_THREADS) {
        s_.sk.slow.ecol[c] = detail::sinkhorn_update(s_.sk.slow.lcol[c], s_.sk.slow.col_std[c], s_.sk.slow.rcol[c]);
      }
      __syncthreads();
      row_stds<Key>();
      __syncthreads();
      for (int r = threadIdx.x; r < R; r += BLOCK_THREADS) {
        const float sw = s_.sk.slow.row_std[r];  // std of X * rc along row r
        s_.sk.slow.erow[r] =
            detail::sinkhorn_update(s_.sk.slow.lrow[r], detail::mul(sw, s_.sk.slow.rrow[r]), s_.sk.slow.rrow[r]);
        s_.sk.slow.row_std[r] = detail::mul(sw, s_.sk.slow.rrow[r]);
      }
      __syncthreads();
      col_stds<Key>();
      __syncthreads();
      if (warp_id() == 0) {
        const float m = imbalance_warp0<Key>();
        if (lane_id() == 0) {
          const bool better = m <= s_.best;
          if (better) s_.best = m;
          s_.improved = better;
        }
      }
      __syncthreads();
      if (s_.improved)
        for (int c = threadIdx.x; c < C; c += BLOCK_THREADS) s_.best_col[c] = s_.sk.slow.ecol[c];
      // The next write of ecol[c] is by the same thread (same loop mapping).
    }
  }
  __syncthreads();
}

}  // namespace device
KVTILE_NAMESPACE_END
