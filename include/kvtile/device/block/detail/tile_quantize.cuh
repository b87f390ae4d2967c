// kvtile/device/block/detail/tile_quantize.cuh: block_tile_codec's scale
// stages (column scale codes, row ranges, row step codes and zeros; register
// and shared-memory paths), its code stage (quantize_rcp_fast, the
// quantization by a row's reciprocal, with the proof that it gives
// Rounder::quantize's codes; quantize_line, make_codes) and the record
// writers (write_fields, write_codes). Member functions of block_tile_codec,
// declared in block_tile_encoder.cuh, which includes this file at its end.
#pragma once

#include "../block_tile_encoder.cuh"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../../detail/bits.hpp"
#include "../../../detail/fastmath.hpp"
#include "../../../numeric/half.hpp"
#include "../../warp/warp_primitives.cuh"
#include "../register_sinkhorn.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// quantize_side's scale stage: column scale codes, row zeros and steps.
// Fast path (fast_scales<Key>): X is read once into the register layout of
// register_sinkhorn.cuh and Y = X / s^ stays in `y` for make_codes; else the
// shared-memory path (x holds Y afterwards). `y` is unused on the slow path.
// HalfX: every X is a half-precision value (half_value_loader).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, class Rounder, bool HalfX, class YRegs>
KVTILE_DEVICE bool block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::scales(side_fields& st, YRegs& y) {
  if constexpr (fast_scales<Key>) {
    return scales_fast<Key, Rounder, HalfX>(st, y);
  } else {
    col_lower_from_max<Key>();
    if (!col_codes<Key>(st)) return false;
    row_ranges_smem<Key, Rounder, HalfX>();
    return row_codes<Key, Rounder>(st);
  }
}

// col_lower[c] = detail::column_scale_lower(max_r |X[r][c]|).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
KVTILE_DEVICE float block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::col_lower_of(float max_abs) {
  return detail::column_scale_lower(max_abs);
}

// lo/hi of a row (first-wins min/max) -> clipped range and the step it asks
// for (the host's calls, in its order). One thread per row.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <class Rounder>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::row_stats(int r, float lo, float hi) {
  Rounder::clipped_range(lo, hi, lo, hi);
  s_.row_lo[r] = lo;
  s_.row_hi[r] = hi;
  s_.row_need[r] = Rounder::step_wanted(lo, hi);
}

// Register path of the scale stage (every thread; the tile is in s_.x).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, class Rounder, bool HalfX, class YRegs>
KVTILE_DEVICE bool block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::scales_fast(side_fields& st, YRegs& y) {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  using rs = register_sinkhorn<R, C, BLOCK_THREADS>;
  constexpr int MR = rs::MR, JC = rs::JC, S = rs::S;
  const int lane = lane_id();
  rs::load(s_.x, Key ? 1 : XS, Key ? XS : 1, y);  // y = X for now
  col_lower_from_max<Key>();
  if (!col_codes<Key>(st)) return false;
  // Rows: Y = X / s^ (the host's IEEE division, or the same bits by
  // reciprocal: quotient), then the row range
  // with detail::min_max's first-wins semantics: the extremes by integer
  // order keys (order-free, detail::min_max_key), and, where an extreme is
  // zero, the sign of the row's lowest-index zero.
  float ch[JC], inv[JC] = {};
#pragma unroll
  for (int j = 0; j < JC; ++j) ch[j] = s_.col_hat[lane + 32 * j];
  std::int32_t kmin[MR], kmax[MR];
  auto divide = [&](auto by_reciprocal) {
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      kmin[a] = INT_MAX;
      kmax[a] = INT_MIN;
#pragma unroll
      for (int j = 0; j < JC; ++j) {
        y[a][j] = quotient<decltype(by_reciprocal)::value>(y[a][j], ch[j], inv[j]);
        const std::int32_t k = detail::min_max_key(detail::float_bits(y[a][j]));
        kmin[a] = k < kmin[a] ? k : kmin[a];
        kmax[a] = k > kmax[a] ? k : kmax[a];
      }
    }
  };
  if constexpr (HalfX) {
    if (reciprocals(ch, inv)) divide(std::true_type{});
    else divide(std::false_type{});
  } else {
    divide(std::false_type{});
  }
  const std::int32_t lo_key =
      rs::row_reduce_with(kmin, [](std::int32_t p, std::int32_t q) { return p < q ? p : q; });
  const std::int32_t hi_key =
      rs::row_reduce_with(kmax, [](std::int32_t p, std::int32_t q) { return p > q ? p : q; });
  std::uint32_t zero_sign = 0u;
  if (__any_sync(full_warp_mask, detail::is_zero_key(lo_key) || detail::is_zero_key(hi_key))) {  // rare; warp-uniform
    // Key (c << 1 | sign) of the lowest-index zero of each row slot; the
    // minimum over the row is its first zero (no zero: all ones).
    std::uint32_t zk[MR];
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      zk[a] = 0xffffffffu;
#pragma unroll
      for (int j = JC - 1; j >= 0; --j) {
        const std::uint32_t b = detail::float_bits(y[a][j]);
        if ((b & 0x7fffffffu) == 0u) zk[a] = (static_cast<std::uint32_t>(lane + 32 * j) << 1) | (b >> 31);
      }
    }
    const std::uint32_t first =
        rs::row_reduce_with(zk, [](std::uint32_t p, std::uint32_t q) { return p < q ? p : q; });
    zero_sign = (first & 1u) << 31;
  }
  if ((lane & ((32 >> S) - 1)) == 0) {  // one lane per row slot (its lowest)
    const int r = warp_id() + WARPS * rs::row_slot();
    row_stats<Rounder>(r, detail::from_min_max_key(lo_key, zero_sign), detail::from_min_max_key(hi_key, zero_sign));
  }
  __syncthreads();
  return row_codes<Key, Rounder>(st);
}

// col_lower of the side's columns from load's col_max (one thread per
// column); the key side also zeroes col_max for the value side's load.
// Ends with a barrier.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::col_lower_from_max() {
  constexpr int C = Key ? G : D;
  for (int c = threadIdx.x; c < L; c += BLOCK_THREADS) {
    if (c < C) s_.col_lower[c] = col_lower_of(detail::float_from_bits(s_.col_max[c]));
    if constexpr (Key) s_.col_max[c] = 0u;
  }
  __syncthreads();
}

// Column scale codes from best_col and col_lower (both paths): vector
// scale, nearest code raised to cover col_lower; col_hat. Ends with a
// barrier; false (in every thread) when a code cannot be stored.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE bool block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::col_codes(side_fields& st) {
  constexpr int C = Key ? G : D;
  const int lane = lane_id();
  float vmax = 0.0f;
  // positive, non-NaN values: any max order and fmaxf give the host's bits
  for (int c = lane; c < C; c += 32) vmax = fmaxf(vmax, fmaxf(s_.best_col[c], s_.col_lower[c]));
  vmax = warp_max_nonnegative(vmax);  // every warp computes it (cheap), no broadcast needed
  const float col_vs = format::vector_scale(vmax);
  for (int c = threadIdx.x; c < C; c += BLOCK_THREADS) {
    code_type code;
    if (!detail::column_scale_code<format>(s_.best_col[c], s_.col_lower[c], col_vs, code)) s_.fail = 1;
    st.col[c] = code;
    s_.col_hat[c] = format::decode(code, col_vs);
  }
  if (threadIdx.x == 0) st.col_vs = col_vs;
  __syncthreads();
  return !s_.fail;
}

// Shared-memory path: rows, one warp per row (K rows at once); x := Y.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, class Rounder, bool HalfX>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::row_ranges_smem() {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  const int lane = lane_id();
  constexpr int J = C / 32;
  constexpr int per_warp = (R + WARPS - 1) / WARPS;
  constexpr int K = per_warp < NB ? per_warp : NB;
  constexpr bool even = R % WARPS == 0 && per_warp % K == 0;
  float ch[J], inv[J] = {};  // s^ of the lane's columns, and 1 / s^
#pragma unroll
  for (int j = 0; j < J; ++j) ch[j] = s_.col_hat[lane + 32 * j];
  auto rows = [&](auto by_reciprocal) {
    for (int i0 = 0; i0 < per_warp; i0 += K) {  // K rows at once (independent chains)
      float lo[K], hi[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int r = warp_id() + WARPS * (i0 + k);
        const bool valid = even || ((i0 + k) < per_warp && r < R);  // warp-uniform
        const int rr = valid ? r : 0;
        float y[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
          y[j] = quotient<decltype(by_reciprocal)::value>(X<Key>(rr, lane + 32 * j), ch[j], inv[j]);
          if (valid) Xref<Key>(rr, lane + 32 * j) = y[j];  // x now holds Y = X / s^ (make_codes reads it)
        }
        warp_line_min_max(y, lo[k], hi[k]);
      }
      if (lane < K) {  // lane k: row k of the group (lo, hi are warp-uniform)
        float l = lo[0], h = hi[0];
#pragma unroll
        for (int k = 1; k < K; ++k)
          if (lane == k) {
            l = lo[k];
            h = hi[k];
          }
        const int r = warp_id() + WARPS * (i0 + lane);
        if (even || ((i0 + lane) < per_warp && r < R)) row_stats<Rounder>(r, l, h);
      }
    }
  };
  if constexpr (HalfX) {
    if (reciprocals(ch, inv)) rows(std::true_type{});
    else rows(std::false_type{});
  } else {
    rows(std::false_type{});
  }
  __syncthreads();
}

// Y = X / s^: the division, or (ByReciprocal) detail::div_half_by.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool ByReciprocal>
KVTILE_DEVICE float block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::quotient(float x, float s, float inv) {
  if constexpr (ByReciprocal) return detail::div_half_by(x, s, inv);
  else return detail::div(x, s);
}

// inv[j] = 1 / s^ of the lane's columns; true (warp-uniform) where every
// s^ of the warp is within div_half_by's range (the caller knows that every
// X is a half value: half_value_loader).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <int J>
KVTILE_DEVICE bool block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::reciprocals(const float (&ch)[J],
                                                                                   float (&inv)[J]) {
  bool ok = true;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    ok &= detail::div_half_by_ok(ch[j]);
    inv[j] = detail::div(1.0f, ch[j]);
  }
  return __all_sync(full_warp_mask, ok);
}

// Row step codes and zeros from row_need / row_lo / row_hi (both paths):
// the side's vector scale, then Rounder::fit per row (one thread per row);
// row_a, row_z, row_inv for the code stage.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, class Rounder>
KVTILE_DEVICE bool block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::row_codes(side_fields& st) {
  constexpr int R = Key ? D : G;
  const int lane = lane_id();
  float need_max = 0.0f;
  // steps wanted: >= +0 (never -0: hi - lo), non-NaN; any max order and fmaxf give the host's bits
  for (int r = lane; r < R; r += 32) need_max = fmaxf(need_max, s_.row_need[r]);
  need_max = warp_max_nonnegative(need_max);
  const float row_vs = format::vector_scale(need_max);
  for (int r = threadIdx.x; r < R; r += BLOCK_THREADS) {
    code_type code;
    std::uint16_t zero;
    if (!Rounder::template fit<format>(s_.row_lo[r], s_.row_hi[r], row_vs, code, zero)) s_.fail = 1;
    st.row[r] = code;
    st.zero[r] = zero;
    s_.row_a[r] = format::decode(code, row_vs);
    s_.row_z[r] = half_t::to_float_bits(zero);
    s_.row_inv[r] = quantize_reciprocal(s_.row_a[r]);
  }
  if (threadIdx.x == 0) st.row_vs = row_vs;
  __syncthreads();
  return !s_.fail;
}

// 1 / scale where quantize_rcp_fast may use it: scale in [2^-126, 2^126] (so
// the reciprocal is a correctly rounded NORMAL float); else NaN, which
// sends every element of the row to the exact Rounder::quantize.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
KVTILE_DEVICE float block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::quantize_reciprocal(float scale) {
  const std::uint32_t b = detail::float_bits(scale);
  return (b >= 0x00800000u && b <= 0x7e800000u) ? detail::div(1.0f, scale) : __int_as_float(0x7fffffff);
}

// Rounder::quantize(y, scale, zero), bit for bit, with a multiplication by
// inv = quantize_reciprocal(scale) instead of the division where that
// cannot change the code. Only the code matters, not the quotient:
// t = (y - zero) / scale (real), qr = RN(t) the host's quotient, q =
// RN((y - zero) * inv). With u = 2^-24, inv = (1/scale)(1 + e1), |e1| <= u,
// so |q - qr| <= 3.01 u |t| + 2^-125 (the last term covers subnormal
// results, also under flush-to-zero).
//  * |t| <= 2^10: |q - qr| < 1.9e-4 < 2^-12. The fast path requires
//    |q - rint(q)| <= 1/2 - 2^-12 (the subtraction is exact: Sterbenz, or
//    q integral), so qr lies strictly inside (k - 1/2, k + 1/2) with
//    k = rint(q): rint(qr) = k (no tie). The clamp then agrees (a -0/+0
//    difference converts to the same code 0).
//  * |t| > 2^10 >= 4 (qmax + 1): q and qr have the sign of t and both
//    magnitudes exceed qmax + 1/2, so both clamp to 0 or to qmax.
// Anything else (near a tie, q = +-Inf, inv = NaN) takes the exact path:
// `exact` is set, and the caller (quantize_line) calls Rounder::quantize
// after a warp vote, so the common case has no branch. k is integral: the
// float-to-unsigned conversion saturates at 0 (-0 -> 0), min() clamps at qmax.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <class Rounder>
KVTILE_DEVICE std::uint32_t block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::quantize_rcp_fast(
    float y, float inv, float zero, bool& exact) {
  static_assert(Rounder::qmax <= 255, "quantize_rcp: the bound 2^10 assumes qmax + 1 <= 2^10");
  const float q = detail::mul(detail::sub(y, zero), inv);
  const float k = detail::rint(q);
  exact = !(fabsf(detail::sub(q, k)) <= 0.5f - 0x1p-12f);  // true for NaN
  const std::uint32_t u = __float2uint_rz(k);
  return u < Rounder::qmax ? u : Rounder::qmax;
}

// Codes of N values of one row (step a, zero z, reciprocal inv) held by
// this lane: the fast path, and the exact path for the values it leaves
// (rare: near a tie, constant row, or no usable reciprocal), decided per warp.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <class Rounder, int N>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::quantize_line(
    const float (&vals)[N], float a, float inv, float z, std::uint32_t (&code)[N]) {
  bool exact = false;  // one predicate, OR-ed by the comparisons themselves
#pragma unroll
  for (int n = 0; n < N; ++n) {
    bool e;
    code[n] = quantize_rcp_fast<Rounder>(vals[n], inv, z, e);
    exact |= e;
  }
  if (__any_sync(full_warp_mask, exact)) {  // rare: ask the fast path again which values it leaves
#pragma unroll
    for (int n = 0; n < N; ++n) {
      bool e;
      (void)quantize_rcp_fast<Rounder>(vals[n], inv, z, e);
      if (e) code[n] = Rounder::quantize(vals[n], a, z);
    }
  }
}

// Codes of the side, row-major R x C bytes in s_.codes. Fast path: from
// the registers y (Y in the register layout); else from x (holds Y).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key, class Rounder, class YRegs>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::make_codes(const YRegs& y) {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  const int lane = lane_id();
  if constexpr (fast_scales<Key>) {
    using rs = register_sinkhorn<R, C, BLOCK_THREADS>;
    constexpr int MR = rs::MR, JC = rs::JC;
    // The own row slot's step, zero and reciprocal, broadcast per register.
    const int s = rs::row_slot();
    const int r_own = warp_id() + WARPS * s;
    const float a_own = s_.row_a[r_own];
    float av[MR], zv[MR], iv[MR];
    rs::row_broadcast(a_own, av);
    rs::row_broadcast(s_.row_z[r_own], zv);
    rs::row_broadcast(s_.row_inv[r_own], iv);
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      const int r = warp_id() + WARPS * (a ^ s);
      std::uint32_t code[JC];
      quantize_line<Rounder>(y[a], av[a], iv[a], zv[a], code);
#pragma unroll
      for (int j = 0; j < JC; ++j) s_.codes[r * C + lane + 32 * j] = static_cast<std::uint8_t>(code[j]);
    }
  } else {
    constexpr int J = C / 32;
    for (int r = warp_id(); r < R; r += WARPS) {
      const float a = s_.row_a[r], z = s_.row_z[r], inv = s_.row_inv[r];
      float yv[J];
      std::uint32_t code[J];
#pragma unroll
      for (int j = 0; j < J; ++j) yv[j] = X<Key>(r, lane + 32 * j);  // x holds Y (written by scales)
      quantize_line<Rounder>(yv, a, inv, z, code);
#pragma unroll
      for (int j = 0; j < J; ++j) s_.codes[r * C + lane + 32 * j] = static_cast<std::uint8_t>(code[j]);
    }
  }
}

template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <bool Key>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::write_fields(const side_fields& st,
                                                                                    std::uint8_t* out) const {
  constexpr int R = Key ? D : G, C = Key ? G : D;
  constexpr std::size_t row_off = Key ? layout::key_scale : layout::value_scale;
  constexpr std::size_t col_off = Key ? layout::key_token_scale : layout::value_channel_scale;
  constexpr std::size_t zero_off = Key ? layout::key_zero : layout::value_zero;
  auto* rowp = reinterpret_cast<code_type*>(out + row_off);
  auto* colp = reinterpret_cast<code_type*>(out + col_off);
  auto* zp = reinterpret_cast<std::uint16_t*>(out + zero_off);
  for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
    if (i < R) {
      rowp[i] = st.row[i];
      zp[i] = st.zero[i];
    }
    if (i < C) colp[i] = st.col[i];
  }
  if constexpr (format::has_vector_scale) {
    if (threadIdx.x == 0) {
      auto* vs = reinterpret_cast<float*>(out + layout::vector_scales);
      vs[Key ? int(vector_field::key_scale) : int(vector_field::value_scale)] = st.row_vs;
      vs[Key ? int(vector_field::key_token_scale) : int(vector_field::value_channel_scale)] = st.col_vs;
    }
  }
}

// Packs s_.codes (N codes, row-major, rows contiguous as in the record) into
// 16-byte stores: element i -> bit (i % (32/b)) * b of 32-bit word i / (32/b).
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <int Bits, int N>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::write_codes(std::uint8_t* dst) const {
  constexpr int per_word = 32 / Bits;
  constexpr int vecs = N / per_word / 4;  // uint4 stores
  auto* out = reinterpret_cast<uint4*>(dst);
  for (int i = threadIdx.x; i < vecs; i += BLOCK_THREADS) {
    std::uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const std::uint8_t* c = s_.codes + (i * 4 + q) * per_word;
      std::uint32_t word = 0;
      if constexpr (Bits == 8) {
        word = *reinterpret_cast<const std::uint32_t*>(c);
      } else {
        std::uint32_t bytes[per_word / 4];
#pragma unroll
        for (int k = 0; k < per_word / 4; ++k) bytes[k] = reinterpret_cast<const std::uint32_t*>(c)[k];
#pragma unroll
        for (int k = 0; k < per_word; ++k) word |= ((bytes[k / 4] >> (8 * (k % 4))) & 0xffu) << (k * Bits);
      }
      w[q] = word;
    }
    out[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace device
KVTILE_NAMESPACE_END
