// kvtile/device/block/block_tile_encoder.cuh: the class block_tile_codec:
// its TempStorage, encode / encode_with (the order of the stages, the commit
// of both sides), the tile load, the choice between the register and the
// shared-memory Sinkhorn, and decode (block_tile_decoder on this TempStorage).
// The stages are member functions defined in
//   detail/smem_sinkhorn.cuh  the shared-memory Sinkhorn (any shape)
//   detail/tile_quantize.cuh  scale stages, reciprocal quantization, code stage, record writers
// which this header includes at its end (each includes this header first, so
// each compiles alone). Users include block_tile_codec.cuh (its comment
// describes the codec).
#pragma once

#include "../../config.hpp"

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
#include "block_tile_decoder.cuh"
#include "register_sinkhorn.cuh"
#include "tile_loaders.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

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
  // NB: lines a warp works on at once in the shared-memory passes (line_stds,
  // row_ranges_smem): independent dependency chains.
  static constexpr int NB = 4;

  // The shared-memory Sinkhorn (detail/smem_sinkhorn.cuh).
  template <bool Key, bool Cols>
  KVTILE_DEVICE void line_stds();
  template <bool Key>
  KVTILE_DEVICE void col_stds();
  template <bool Key>
  KVTILE_DEVICE void row_stds();
  template <bool Key>
  KVTILE_DEVICE float imbalance_warp0() const;

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

  template <bool Key>
  KVTILE_DEVICE void sinkhorn_smem();

  // Scale stages, reciprocal quantization, code stage and record writers
  // (detail/tile_quantize.cuh).
  template <bool Key, class Rounder, bool HalfX, class YRegs>
  KVTILE_DEVICE bool scales(side_fields& st, YRegs& y);
  KVTILE_DEVICE static float col_lower_of(float max_abs);
  template <class Rounder>
  KVTILE_DEVICE void row_stats(int r, float lo, float hi);
  template <bool Key, class Rounder, bool HalfX, class YRegs>
  KVTILE_DEVICE bool scales_fast(side_fields& st, YRegs& y);
  template <bool Key>
  KVTILE_DEVICE void col_lower_from_max();
  template <bool Key>
  KVTILE_DEVICE bool col_codes(side_fields& st);
  template <bool Key, class Rounder, bool HalfX>
  KVTILE_DEVICE void row_ranges_smem();
  template <bool ByReciprocal>
  KVTILE_DEVICE static float quotient(float x, float s, float inv);
  template <int J>
  KVTILE_DEVICE static bool reciprocals(const float (&ch)[J], float (&inv)[J]);
  template <bool Key, class Rounder>
  KVTILE_DEVICE bool row_codes(side_fields& st);
  KVTILE_DEVICE static float quantize_reciprocal(float scale);
  template <class Rounder>
  KVTILE_DEVICE static std::uint32_t quantize_rcp_fast(float y, float inv, float zero, bool& exact);
  template <class Rounder, int N>
  KVTILE_DEVICE static void quantize_line(const float (&vals)[N], float a, float inv, float z,
                                          std::uint32_t (&code)[N]);
  template <bool Key, class Rounder, class YRegs>
  KVTILE_DEVICE void make_codes(const YRegs& y);
  template <bool Key>
  KVTILE_DEVICE void write_fields(const side_fields& st, std::uint8_t* out) const;
  template <int Bits, int N>
  KVTILE_DEVICE void write_codes(std::uint8_t* dst) const;
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

// The member functions of the stages (each of these includes this header first).
#include "detail/smem_sinkhorn.cuh"
#include "detail/tile_quantize.cuh"
