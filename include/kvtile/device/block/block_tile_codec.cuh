// kvtile/device/block/block_tile_codec.cuh: block-cooperative encode/decode of
// one (tile, KV head), bit-identical to the host tile_codec.
//
//   using Codec = kvtile::presets::k4v2_g128<128>;
//   using BlockCodec = kvtile::device::block_tile_codec<Codec, 512>;
//   __global__ void k(...) {
//     extern __shared__ __align__(16) unsigned char smem[];   // or a static __shared__
//     auto& ts = *reinterpret_cast<BlockCodec::TempStorage*>(smem);
//     kvtile::status s = BlockCodec(ts).encode(keys, stride, values, stride, record);
//   }
//
// Every thread of the block must call encode/decode (they contain
// __syncthreads); the returned status is the same in every thread.
// sizeof(TempStorage) is large (about 90 KB for D = G = 128, 180 KB for
// D = 256, G = 128), so use dynamic shared memory with
// cudaFuncAttributeMaxDynamicSharedMemorySize.
//
// Strategy. The rotated fp32 tile lives in shared memory, token-major with a
// row stride of D + 1 floats (odd, so both channel lines and token lines are
// bank-conflict free). The Sinkhorn iterate `cur` is never stored: each
// standard-deviation pass recomputes cur = X * rc[c] * rr[r] from X (the
// host's exact expression, sinkhorn.hpp: reciprocals rc = 1/e^Lc, rr = 1/e^Lr
// computed once per update), one warp per line in the strided layout of
// warp_primitives.cuh, so the canonical tree order holds; a warp works on up
// to 4 lines at once (independent dependency chains: the passes are latency
// bound). After the scale stage x holds Y = X / s^, which the code stage
// reads. This supports every tile with D * G <= 32768 (all presets: up to
// D = 256 x G = 128 = 128 KB of fp32). D = 256 x G = 256 (256 KB) does not fit
// and is rejected by a static_assert; it would need X kept in registers across
// several blocks or re-read and re-rotated from global memory for every pass.
//
// Register path. Where the side's matrix fits register_sinkhorn_shape and the
// block has <= 512 threads (every Sinkhorn preset with D <= 128 at 512
// threads; see fast_scales), the Sinkhorn (register_sinkhorn.cuh) AND the
// scale and code stages run from registers in the same layout: X is read once more from x, column max |X|
// by integer max (order free), Y = X / s^ stays in registers, the row range
// is reduced per row by integer order keys (first-wins zero sign on a rare
// path), and the codes are computed from registers into s_.codes. Other
// shapes use the shared-memory stages (x holds Y between them). On both
// paths the code uses quantize_rcp_fast: a multiplication by the row's
// reciprocal with a tie-zone check, falling back to the exact division (see there).
//
// Status (same values as the host):
//  * success;
//  * non_finite_input: NaN/Inf elements were replaced by 0; record written;
//  * out_of_range: an input |x| > 2^48, or a scale the packing cannot store;
//    NOTHING of the record is written (the key side is kept in shared memory
//    until the value side has passed its scale stage), as on the host.
// decode does not validate the record (the host validate() does); it expects
// records written by encode.
#pragma once

#include "../../config.hpp"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../codec/encode_rules.hpp"
#include "../../codec/tile_codec.hpp"
#include "../../detail/bits.hpp"
#include "../../detail/fastmath.hpp"
#include "../../normalization/sinkhorn.hpp"
#include "../../numeric/half.hpp"
#include "../../status.hpp"
#include "../warp/warp_primitives.cuh"
#include "register_sinkhorn.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// Per-token flags a loader reports (load_non_finite / load_out_of_range are
// detail::sanitize_input's flags).
enum : unsigned {
  load_ok = detail::input_ok,
  load_non_finite = detail::input_non_finite,
  load_out_of_range = detail::input_out_of_range,
  load_saturated = 4u
};

// Loader for engine-layout input: token g at src + g * stride, element type T;
// NaN/Inf -> 0 (flagged), |x| > 2^48 flagged out of range, then Rotation.
template <class T, class Rotation>
struct global_token_loader {
  const T* src;
  std::ptrdiff_t stride;
  template <int J>
  KVTILE_DEVICE unsigned operator()(int g, float (&v)[J]) const {
    const T* row = src + static_cast<std::ptrdiff_t>(g) * stride;
    const int lane = lane_id();
    unsigned f = load_ok;
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = detail::sanitize_input(detail::element_to_float(row[lane + 32 * j]), f);
    warp_rotate_forward<Rotation, fwht_lane_op::signed_fma_local>(v);
    return f;
  }
};

// A loader with raw_type, fetch(g, raw_type (&)[J]), finish(g, raw, float
// (&)[J]) and flush() (paged_tile_loader) is called in two phases by load():
// the fetches of a group of tokens, then their finishes (the global loads
// overlap); flush() after the last (every thread).
template <class L, class = void>
struct two_phase_loader : std::false_type {};
template <class L>
struct two_phase_loader<L, std::void_t<typename L::raw_type>> : std::true_type {};

// A loader whose values are all half-precision values (`static constexpr bool
// half_values = true`: paged_tile_loader, fp16 tails and tokens rounded to
// fp16) lets the scale stage divide by a reciprocal (detail::div_half_by: the
// same bits as the division for such values).
template <class L, class = void>
struct half_value_loader : std::false_type {};
template <class L>
struct half_value_loader<L, std::enable_if_t<L::half_values>> : std::true_type {};

// MIN_BLOCKS: the resident blocks per SM the calling kernel is compiled for
// (its __launch_bounds__ minimum). At >= 2 the registers are capped (64 per
// thread at 512 threads), and the scale and code stages run from shared
// memory (the register scale stage would spill); records are the same.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS = 1>
class block_tile_codec {
 public:
  using codec = Codec;
  using config = typename Codec::config;
  using rotation = typename Codec::rotation;
  using normalizer = typename Codec::normalizer;
  using key_rounder = typename Codec::key_rounder;
  using value_rounder = typename Codec::value_rounder;
  using layout = typename Codec::layout;
  using format = typename Codec::format;
  using code_type = typename format::code_type;

  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int L = D > G ? D : G;
  static constexpr int XS = D + 1;  // shared row stride (floats)
  static constexpr int WARPS = BLOCK_THREADS / 32;
  static constexpr int iterations = normalizer::is_none ? 0 : normalizer::iterations;

  static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
                "BLOCK_THREADS must be a multiple of 32 in [64, 1024]");
  static_assert(D * G <= 32768, "block_tile_codec keeps the fp32 tile in shared memory: D * G must be <= 32768");
  static_assert(layout::key_codes % 16 == 0 && layout::value_codes % 16 == 0,
                "code sections must be 16-byte aligned in the record (16-byte stores)");

  struct side_fields {
    code_type col[L];
    code_type row[L];
    std::uint16_t zero[L];
    float col_vs, row_vs;
  };

  // Register Sinkhorn (register_sinkhorn.cuh) per side where the shape fits.
  template <bool Key>
  using fast_shape = register_sinkhorn_shape<Key ? D : G, Key ? G : D, BLOCK_THREADS>;
  template <bool Key>
  static constexpr bool fast_sinkhorn = iterations > 0 && fast_shape<Key>::ok;
  // Scale and code stages from registers (same layout) where the register
  // Sinkhorn runs at <= 512 threads without a register cap (MIN_BLOCKS 1).
  // Not without iterations (sinkhorn<0>, rotate_rtn: the shared path fits in
  // 64 registers, two blocks per SM), and not under a 64-register cap (1024
  // threads, or MIN_BLOCKS >= 2), where the register stage would spill more.
  template <bool Key>
  static constexpr bool fast_scales = fast_sinkhorn<Key> && BLOCK_THREADS <= 512 && MIN_BLOCKS == 1;
  template <bool Key>
  using side_regs = register_tile<Key ? D : G, Key ? G : D, BLOCK_THREADS>;

  // Shared state of the shared-memory Sinkhorn (the fallback).
  struct slow_sinkhorn_storage {
    float lcol[L], lrow[L], ecol[L], erow[L], rcol[L], rrow[L], col_std[L], row_std[L];
  };
  union sinkhorn_storage {
    slow_sinkhorn_storage slow;
    typename register_sinkhorn_storage<D, G, BLOCK_THREADS>::type key;    // keys: M = XK[D x G]
    typename register_sinkhorn_storage<G, D, BLOCK_THREADS>::type value;  // values: M = XV[G x D]
  };

  struct TempStorage {
    float x[G * XS];
    alignas(16) std::uint8_t codes[D * G];
    sinkhorn_storage sk;
    float best_col[L];
    float col_hat[L], col_lower[L], row_lo[L], row_hi[L], row_need[L], row_a[L], row_z[L], row_inv[L];
    std::uint32_t col_max[L];  // bits of max |X| per column, gathered by load (see there)
    side_fields key, value;
    float best;
    int improved;
    unsigned flags;
    int fail;
  };

  KVTILE_DEVICE explicit block_tile_codec(TempStorage& ts) : s_(ts) {}

  // ------------------------------------------------------------------ encode

  // Engine layout: G tokens of D elements, `stride` elements between tokens.
  template <class T>
  KVTILE_DEVICE status encode(const T* keys, std::ptrdiff_t key_stride, const T* values, std::ptrdiff_t value_stride,
                              void* record) {
    global_token_loader<T, rotation> kl{keys, key_stride};
    global_token_loader<T, rotation> vl{values, value_stride};
    return encode_with(kl, vl, record);
  }

  // Loaders: callables `unsigned (int g, float (&v)[D/32])` called by one warp,
  // filling element lane + 32 j of token g already in the rotated frame (the
  // codec's rotation is NOT applied here), returning load_* flags.
  template <class KeyLoader, class ValueLoader>
  KVTILE_DEVICE status encode_with(KeyLoader& key_loader, ValueLoader& value_loader, void* record) {
    auto* out = static_cast<std::uint8_t*>(record);
    __syncthreads();  // every thread is done with a previous call's TempStorage
    if (threadIdx.x == 0) {
      s_.flags = 0u;
      s_.fail = 0;
    }
    __syncthreads();
    load<true>(key_loader);
    if (s_.flags & load_out_of_range) return status::out_of_range;  // uniform after load's sync
    sinkhorn<true>();
    {
      side_regs<true> ky;  // fast path: Y = X / s^ of the key side, in registers
      if (!scales<true, key_rounder, half_value_loader<KeyLoader>::value>(s_.key, ky.v)) return status::out_of_range;
      make_codes<true, key_rounder>(ky.v);
    }
    __syncthreads();
    load<false>(value_loader);  // x is free again: the key codes are in s_.codes
    if (s_.flags & load_out_of_range) return status::out_of_range;
    sinkhorn<false>();
    side_regs<false> vy;  // fast path: Y of the value side, kept until s_.codes is free
    if (!scales<false, value_rounder, half_value_loader<ValueLoader>::value>(s_.value, vy.v))
      return status::out_of_range;
    // Both sides succeeded: commit.
    write_fields<true>(s_.key, out);
    write_codes<config::key_bits, D * G>(out + layout::key_codes);
    __syncthreads();
    make_codes<false, value_rounder>(vy.v);
    __syncthreads();
    write_fields<false>(s_.value, out);
    write_codes<config::value_bits, D * G>(out + layout::value_codes);
    if constexpr (layout::bytes > layout::unpadded)
      for (int i = threadIdx.x; i < static_cast<int>(layout::bytes - layout::unpadded); i += BLOCK_THREADS)
        out[layout::unpadded + i] = 0;
    const unsigned f = s_.flags;
    __syncthreads();  // TempStorage may be reused after return
    return (f & load_non_finite) ? status::non_finite_input : status::success;
  }

  // ------------------------------------------------------------------ decode
  // Same as block_tile_decoder (below), using this TempStorage.
  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode(const void* record, T* keys, std::ptrdiff_t key_stride, T* values,
                            std::ptrdiff_t value_stride, frame f = frame::original);

 private:
  static constexpr int JD = D / 32;  // per-lane values of a line over channels
  static constexpr int JG = G / 32;  // per-lane values of a line over tokens

  TempStorage& s_;

  KVTILE_DEVICE int warp_id() const { return static_cast<int>(threadIdx.x >> 5); }

  // Also gathers each column's max |X| into col_max (bits; order-free: for
  // non-NaN floats the bits of |x| order as |x|, and the host's fmax chain
  // from +0 ends with the largest magnitude as a non-negative float): keys
  // (column = token) by one redux.sync per token, values (column = channel)
  // by a running max per lane over the warp's tokens and one shared atomicMax
  // per column and warp (col_max is zeroed by the key side's
  // col_lower_from_max).
  template <bool Key, class Loader>
  KVTILE_DEVICE void load(Loader& loader) {
    const int lane = lane_id();
    unsigned f = 0u;
    float vmax[JD];  // values: max |X| of the lane's channels over the warp's tokens
#pragma unroll
    for (int j = 0; j < JD; ++j) vmax[j] = 0.0f;
    // K tokens per warp at once: independent load + rotate chains.
    constexpr int per_warp = (G + WARPS - 1) / WARPS;
    constexpr int K = per_warp < 4 ? per_warp : 4;
    constexpr bool even = G % WARPS == 0 && per_warp % K == 0;
    for (int i0 = 0; i0 < per_warp; i0 += K) {
      float v[K][JD];
      if constexpr (two_phase_loader<Loader>::value) {  // every fetch of the group before the first finish
        typename Loader::raw_type raw[K][JD];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int g = warp_id() + WARPS * (i0 + k);
          if (even || ((i0 + k) < per_warp && g < G)) loader.fetch(g, raw[k]);  // warp-uniform
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int g = warp_id() + WARPS * (i0 + k);
          if (even || ((i0 + k) < per_warp && g < G)) f |= loader.finish(g, raw[k], v[k]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int g = warp_id() + WARPS * (i0 + k);
          if (even || ((i0 + k) < per_warp && g < G)) f |= loader(g, v[k]);  // warp-uniform
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int g = warp_id() + WARPS * (i0 + k);
        if (even || ((i0 + k) < per_warp && g < G)) {  // warp-uniform
#pragma unroll
          for (int j = 0; j < JD; ++j) s_.x[g * XS + lane + 32 * j] = v[k][j];
          if constexpr (Key) {
            float m = 0.0f;
#pragma unroll
            for (int j = 0; j < JD; ++j) m = fmaxf(m, fabsf(v[k][j]));
            const std::uint32_t b = __reduce_max_sync(full_warp_mask, detail::float_bits(m));
            if (lane == 0) s_.col_max[g] = b;
          } else {
#pragma unroll
            for (int j = 0; j < JD; ++j) vmax[j] = fmaxf(vmax[j], fabsf(v[k][j]));
          }
        }
      }
    }
    if constexpr (!Key) {
#pragma unroll
      for (int j = 0; j < JD; ++j) atomicMax(&s_.col_max[lane + 32 * j], detail::float_bits(vmax[j]));
    }
    if constexpr (two_phase_loader<Loader>::value) loader.flush();
    f = __reduce_or_sync(full_warp_mask, f);  // flags are per lane
    if (f && lane == 0) atomicOr(&s_.flags, f);
    __syncthreads();
  }

  // Element (r, c) of the side's matrix M: keys M = XK[D x G] (r = channel,
  // c = token), values M = XV[G x D] (r = token, c = channel).
  template <bool Key>
  KVTILE_DEVICE float X(int r, int c) const {
    return Key ? s_.x[c * XS + r] : s_.x[r * XS + c];
  }
  template <bool Key>
  KVTILE_DEVICE float& Xref(int r, int c) {
    return Key ? s_.x[c * XS + r] : s_.x[r * XS + c];
  }
  // The Sinkhorn (sinkhorn.hpp), with the reciprocals rc = 1 / ecol,
  // rr = 1 / erow computed once per update: column c's std of the iterate is
  // rc[c] * std_r(X[r][c] * rr[r]), row r's is rr[r] * std_c(X[r][c] * rc[c]).

  // Cols: col_std[c] = rc[c] * std_r(X[r][c] * rr[r]) (the iterate's column
  // stds); rows: row_std[r] = std_c(X[r][c] * rc[c]) (the caller multiplies by
  // rr). A lane's rows (columns) are the same for every line, so their
  // reciprocals are loaded once per pass. Each std is a long dependent chain (two shuffle
  // trees, a division, a square root), so a warp works on NB lines at once
  // (independent chains in one basic block: the scheduler interleaves them).
  static constexpr int NB = 4;
  template <bool Key, bool Cols>
  KVTILE_DEVICE void line_stds() {
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
  template <bool Key>
  KVTILE_DEVICE void col_stds() { line_stds<Key, true>(); }
  template <bool Key>
  KVTILE_DEVICE void row_stds() { line_stds<Key, false>(); }

  // imb of method.md section 2, computed by warp 0, valid in its lane 0
  // (values are >= +0: order free).
  template <bool Key>
  KVTILE_DEVICE float imbalance_warp0() const {
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

  // sinkhorn<N>::run on the shared tile; leaves the best column scale in best_col.
  template <bool Key>
  KVTILE_DEVICE void sinkhorn() {
    constexpr int R = Key ? D : G, C = Key ? G : D;
    if constexpr (fast_sinkhorn<Key>) {
      // Iterate in registers (register_sinkhorn.cuh); x is only read.
      using rs = register_sinkhorn<R, C, BLOCK_THREADS>;
      typename rs::storage* sm;
      if constexpr (Key) sm = &s_.sk.key;
      else sm = &s_.sk.value;
      // M[r][c] = X<Key>(r, c)
      rs::template run<iterations>(*sm, s_.x, Key ? 1 : XS, Key ? XS : 1, s_.best_col);
      __syncthreads();
    } else {
      sinkhorn_smem<Key>();
    }
  }

  // The shared-memory Sinkhorn: any shape.
  template <bool Key>
  KVTILE_DEVICE void sinkhorn_smem() {
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

  // quantize_side's scale stage: column scale codes, row zeros and steps.
  // Fast path (fast_scales<Key>): X is read once into the register layout of
  // register_sinkhorn.cuh and Y = X / s^ stays in `y` for make_codes; else the
  // shared-memory path (x holds Y afterwards). `y` is unused on the slow path.
  // HalfX: every X is a half-precision value (half_value_loader).
  template <bool Key, class Rounder, bool HalfX, class YRegs>
  KVTILE_DEVICE bool scales(side_fields& st, YRegs& y) {
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
  KVTILE_DEVICE static float col_lower_of(float max_abs) { return detail::column_scale_lower(max_abs); }

  // lo/hi of a row (first-wins min/max) -> clipped range and the step it asks
  // for (the host's calls, in its order). One thread per row.
  template <class Rounder>
  KVTILE_DEVICE void row_stats(int r, float lo, float hi) {
    Rounder::clipped_range(lo, hi, lo, hi);
    s_.row_lo[r] = lo;
    s_.row_hi[r] = hi;
    s_.row_need[r] = Rounder::step_wanted(lo, hi);
  }

  // Register path of the scale stage (every thread; the tile is in s_.x).
  template <bool Key, class Rounder, bool HalfX, class YRegs>
  KVTILE_DEVICE bool scales_fast(side_fields& st, YRegs& y) {
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
  template <bool Key>
  KVTILE_DEVICE void col_lower_from_max() {
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
  template <bool Key>
  KVTILE_DEVICE bool col_codes(side_fields& st) {
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
  template <bool Key, class Rounder, bool HalfX>
  KVTILE_DEVICE void row_ranges_smem() {
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
  template <bool ByReciprocal>
  KVTILE_DEVICE static float quotient(float x, float s, float inv) {
    if constexpr (ByReciprocal) return detail::div_half_by(x, s, inv);
    else return detail::div(x, s);
  }
  // inv[j] = 1 / s^ of the lane's columns; true (warp-uniform) where every
  // s^ of the warp is within div_half_by's range (the caller knows that every
  // X is a half value: half_value_loader).
  template <int J>
  KVTILE_DEVICE static bool reciprocals(const float (&ch)[J], float (&inv)[J]) {
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
  template <bool Key, class Rounder>
  KVTILE_DEVICE bool row_codes(side_fields& st) {
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
  KVTILE_DEVICE static float quantize_reciprocal(float scale) {
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
  template <class Rounder>
  KVTILE_DEVICE static std::uint32_t quantize_rcp_fast(float y, float inv, float zero, bool& exact) {
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
  template <class Rounder, int N>
  KVTILE_DEVICE static void quantize_line(const float (&vals)[N], float a, float inv, float z,
                                          std::uint32_t (&code)[N]) {
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
  template <bool Key, class Rounder, class YRegs>
  KVTILE_DEVICE void make_codes(const YRegs& y) {
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

  template <bool Key>
  KVTILE_DEVICE void write_fields(const side_fields& st, std::uint8_t* out) const {
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
  template <int Bits, int N>
  KVTILE_DEVICE void write_codes(std::uint8_t* dst) const {
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
};


// Block-cooperative decode of one (tile, KV head) record into engine layout
// (G tokens x D, `stride` elements between tokens), bit-identical to the host
// tile_codec::decode_keys / decode_values (no validation: records must come
// from encode; run Codec::validate on untrusted records). Smaller shared
// footprint than block_tile_codec: G * (D + 1) + 3 * max(D, G) floats.
// Storage: any struct with members x, row_a, row_z, col_hat of at least these
// sizes (block_tile_codec passes its own TempStorage); void = TempStorage.
template <class Codec, int BLOCK_THREADS, class Storage = void>
class block_tile_decoder {
 public:
  using config = typename Codec::config;
  using rotation = typename Codec::rotation;
  using key_rounder = typename Codec::key_rounder;
  using value_rounder = typename Codec::value_rounder;
  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int L = D > G ? D : G;
  static constexpr int XS = D + 1;
  static constexpr int WARPS = BLOCK_THREADS / 32;
  static constexpr int JD = D / 32;
  static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
                "BLOCK_THREADS must be a multiple of 32 in [64, 1024]");

  struct TempStorage {
    float x[G * XS];
    float row_a[L], row_z[L], col_hat[L];
  };
  using storage_type = std::conditional_t<std::is_void_v<Storage>, TempStorage, Storage>;

  KVTILE_DEVICE explicit block_tile_decoder(storage_type& ts) : s_(ts) {}

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode(const void* record, T* keys, std::ptrdiff_t key_stride, T* values,
                            std::ptrdiff_t value_stride, frame f = frame::original) {
    decode_keys<T, InverseRotation>(record, keys, key_stride, f);
    decode_values<T, InverseRotation>(record, values, value_stride, f);
  }

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode_keys(const void* record, T* keys, std::ptrdiff_t stride, frame f) {
    using view = record_view<config, typename Codec::packer>;
    const view v(record);
    float* a = s_.row_a;
    float* z = s_.row_z;
    float* t = s_.col_hat;
    for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
      if (i < D) {
        a[i] = v.key_scale(i);
        z[i] = v.key_zero(i);
      }
      if (i < G) t[i] = v.key_token_scale(i);
    }
    __syncthreads();
    // Codes: one 32-bit word per thread (32/b tokens of one channel), lanes
    // over channels so the shared writes are conflict free.
    constexpr int b = config::key_bits;
    constexpr int per_word = 32 / b;
    constexpr int row_words = G / per_word;
    const auto* words = reinterpret_cast<const std::uint32_t*>(v.key_codes());
    for (int i = threadIdx.x; i < D * row_words; i += BLOCK_THREADS) {
      const int d = i % D, w = i / D;
      const std::uint32_t word = words[d * row_words + w];
#pragma unroll
      for (int k = 0; k < per_word; ++k) {
        const int g = w * per_word + k;
        const std::uint32_t code = (word >> (k * b)) & ((1u << b) - 1u);
        s_.x[g * XS + d] = detail::mul(key_rounder::dequantize(code, a[d], z[d]), t[g]);
      }
    }
    __syncthreads();
    store_tokens<T, InverseRotation>(keys, stride, f);
  }

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode_values(const void* record, T* values, std::ptrdiff_t stride, frame f) {
    using view = record_view<config, typename Codec::packer>;
    const view v(record);
    float* c = s_.col_hat;
    float* a = s_.row_a;
    float* z = s_.row_z;
    for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
      if (i < D) c[i] = v.value_channel_scale(i);
      if (i < G) {
        a[i] = v.value_scale(i);
        z[i] = v.value_zero(i);
      }
    }
    __syncthreads();
    constexpr int b = config::value_bits;
    constexpr int per_word = 32 / b;
    constexpr int row_words = D / per_word;
    const auto* words = reinterpret_cast<const std::uint32_t*>(v.value_codes());
    for (int i = threadIdx.x; i < G * row_words; i += BLOCK_THREADS) {
      const int g = i / row_words, w = i % row_words;
      const std::uint32_t word = words[i];
#pragma unroll
      for (int k = 0; k < per_word; ++k) {
        const int d = w * per_word + k;
        const std::uint32_t code = (word >> (k * b)) & ((1u << b) - 1u);
        s_.x[g * XS + d] = detail::mul(value_rounder::dequantize(code, a[g], z[g]), c[d]);
      }
    }
    __syncthreads();
    store_tokens<T, InverseRotation>(values, stride, f);
  }

 private:
  storage_type& s_;
  KVTILE_DEVICE int warp_id() const { return static_cast<int>(threadIdx.x >> 5); }

  template <class T, class InverseRotation>
  KVTILE_DEVICE void store_tokens(T* dst, std::ptrdiff_t stride, frame f) {
    const int lane = lane_id();
    for (int g = warp_id(); g < G; g += WARPS) {
      float v[JD];
#pragma unroll
      for (int j = 0; j < JD; ++j) v[j] = s_.x[g * XS + lane + 32 * j];
      if (f == frame::original) warp_rotate_inverse<InverseRotation>(v);
      T* row = dst + static_cast<std::ptrdiff_t>(g) * stride;
#pragma unroll
      for (int j = 0; j < JD; ++j) row[lane + 32 * j] = detail::element_from_float<T>(v[j]);
    }
    __syncthreads();
  }

};

template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
template <class T, class InverseRotation>
KVTILE_DEVICE void block_tile_codec<Codec, BLOCK_THREADS, MIN_BLOCKS>::decode(const void* record, T* keys,
                                                                  std::ptrdiff_t key_stride, T* values,
                                                                  std::ptrdiff_t value_stride, frame f) {
  block_tile_decoder<Codec, BLOCK_THREADS, TempStorage>(s_).template decode<T, InverseRotation>(
      record, keys, key_stride, values, value_stride, f);
}

}  // namespace device
KVTILE_NAMESPACE_END
