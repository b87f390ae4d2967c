// kvtile/device/attention/detail/tile_layout.cuh: where the decode kernel's lanes read
// a quantized record in shared memory, chosen so that the per-tile loads are
// free of shared-memory bank conflicts WITHOUT changing the record format.
//
// The problem (format v1, docs/format.md): codes are packed row by row (key
// rows = channels, 64 B for G = 128 4-bit; value rows = tokens, 32 B for
// D = 128 2-bit). A warp's code load has the 8 lanes r = lane / 4 reading
// adjacent bytes of one row and the 4 lanes t = lane % 4 reading 4 different
// rows; with the previous order those rows were 256 B (keys: channels 4t
// apart) or 1 KB (values: tokens 32t apart) apart, i.e. at the SAME banks:
// every code load was 4-way conflicted (8 wavefronts per key LDS.64 instead
// of 2, 4 per value LDS.U16 instead of 1: 512 of the ~587 wavefronts of a
// k4v2 D128 tile; Nsight Compute: 25.4M of 38.5M wavefronts excessive).
//
// The conflict-free layout (decode_policy::conflict_free_layout = true) is OFF by default:
// on the H200 it removes the conflicts but the kernel is slower (the
// conflicts are not the limit; docs/attention.md has the numbers). Its three
// parts:
//  1. Lane t owns one quarter of each per-tile stream it reads:
//     - keys (QK, channels on K): lane t contributes the channels
//       [t D/4, (t+1) D/4), 4 consecutive ones per k-step (key_order); the
//       query B fragments are built for that order once per CTA;
//     - values (PV, tokens on K): lane t's tokens already are one quarter of
//       the tile (one eighth of it with two warps per record, whose halves
//       are token halves: token_base is sub-major);
//     - value channels (PV, channels on M): lane r reads a contiguous run of
//       8 channels per 64-channel chunk (out_order) instead of 8 of its D/8
//       channels, so the 8 lanes r of a load cover <= 32 contiguous bytes;
//       the output accumulators (warp_state::o) follow that order.
//  2. The record still arrives by cp.async.bulk, but in pieces: the stage
//     inserts 32 bytes of padding at "cuts" (record offsets): between the
//     quarters of the key codes, between the value-code pieces (4 per warp),
//     and between the quarters of a_K and z_K where a quarter is a multiple of
//     64 bytes. Piece k of a section then starts 32 k bytes (8 k banks) off
//     the 128-byte bank period, so the 4 lanes t of a load, reading the same
//     relative offset of 4 different pieces, meet 4 disjoint 8-bank windows,
//     and the 8 lanes r read inside one window: every phase (32 lanes; 16 for
//     an LDS.64, 8 for an LDS.128) touches distinct banks. Each range between
//     cuts is one cp.async.bulk (10 per k4v2 D128 fp8 record with one warp
//     per record; 288 bytes of padding). Every record offset x lands at stage
//     offset at(x) = x + 32 * (cuts <= x).
//  3. The unfolded key-scale path (fp16_scales) reads the fp32 query rows per
//     k-step: they are stored with 4 floats of padding per quarter (qpad).
// Token and channel permutations are free inside a contraction (A and B use
// the same one); results change only by fp32 summation order.
//
// conflict_free_layout = false (the default) keeps the previous layout and orders exactly
// (one bulk copy per record, channels 16 kk + 4 t, token runs r-major). A
// preset whose padding would cost a ring of stages keeps the previous layout
// too (quant_swizzled in paged_decode.cuh: only k4v2_g128 D = 256 fp16_scales).
// The fp16 baseline kernel always uses the previous orders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../../config.hpp"
#include "../../../packing/fp8_scales.hpp"
#include "fragments.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// QK channel order: lane t (= lane % 4) contributes the 4 consecutive channels
// chan0(kk, t) .. + 3 to k-step kk (MMA K columns 2t, 2t+1, 2t+8, 2t+9), for
// the query fragments (qf) and the key codes, scales and zeros alike.
template <int D, bool Swz>
struct key_order {
  static constexpr int KT = D / 16;  // k-steps
  // First channel of lane t's quarter (Swz) or 0; chan0 - first(t) is affine in kk.
  KVTILE_HOST_DEVICE static constexpr int first(int t) { return Swz ? t * (D / 4) : 0; }
  KVTILE_HOST_DEVICE static constexpr int chan0(int kk, int t) { return Swz ? first(t) + 4 * kk : 16 * kk + 4 * t; }
  // Inverse for the 4-channel unit u (channels 4u .. 4u + 3).
  KVTILE_HOST_DEVICE static constexpr int unit_t(int u) { return Swz ? u / KT : u % 4; }
  KVTILE_HOST_DEVICE static constexpr int unit_kk(int u) { return Swz ? u % KT : u / 4; }
  // Index of channel c in a padded fp32 query row (4 floats after each quarter;
  // the row stride D + 16 has room): the k-step reads of lanes t then hit banks
  // 4t apart instead of D/4 floats (a multiple of 32 banks for D >= 128).
  KVTILE_HOST_DEVICE static constexpr int qpad(int c) { return Swz ? c + 4 * (c / (D / 4)) : c; }
};

// PV output channel order (the M rows of the PV MMA, the layout of
// warp_state::o): o-block m, M-row r + 8 h holds channel chan(r, m, h). With
// OC > 1 chunks of D / OC channels, lane r owns a contiguous run of
// 2 * (D / 16 / OC) channels of each chunk; with OC = 1 it owns D / 8
// consecutive channels (the previous order).
template <int D, bool Swz>
struct out_order {
  static constexpr int OC = Swz ? D / 64 : 1;
  static constexpr int MCo = D / 16 / OC;  // o-blocks per chunk
  // First channel of lane r's run of CE channels in chunk ch of a loop with
  // NCH chunks of CE channels each (for OC = 1 any split of the D/8 run).
  template <int NCH, int CE>
  KVTILE_HOST_DEVICE static constexpr int run(int ch, int r) {
    static_assert(OC == 1 || (NCH == OC && CE == 2 * MCo), "chunks must follow the output order");
    return OC == 1 ? (D / 8) * r + ch * CE : ch * (D / OC) + CE * r;
  }
  KVTILE_HOST_DEVICE static constexpr int chan(int r, int m, int h) {
    return OC == 1 ? (D / 8) * r + 2 * m + h : (m / MCo) * (D / OC) + 2 * MCo * r + 2 * (m % MCo) + h;
  }
};

// Up to 20 sorted record offsets.
struct cut_list {
  std::size_t v[20] = {};
  int n = 0;
  constexpr void add(std::size_t x) {
    int i = n++;
    while (i > 0 && v[i - 1] > x) {
      v[i] = v[i - 1];
      --i;
    }
    v[i] = x;
  }
};

// Stage (shared-memory) layout of one quantized record: its geometry, the cut
// list, then the offsets (stage_layout). Packer: fp8_scales or fp16_scales;
// H: warps per record. Offsets named *_s are stage offsets.
template <class Config, class Packer, int H, bool Swz>
struct stage_geometry {
  using L = typename Packer::template layout<Config>;
  static constexpr bool swizzled = Swz;
  static constexpr int D = Config::head_dim, G = Config::tile_tokens, KB = Config::key_bits,
                      VB = Config::value_bits;
  static constexpr bool fp8 = std::is_same_v<Packer, fp8_scales>;
  static constexpr std::size_t sb = fp8 ? 1 : 2;  // bytes per a_K entry
  static constexpr std::size_t record_bytes = L::bytes;
  static constexpr std::size_t pad = Swz ? 32 : 0;
  static constexpr std::size_t krow = static_cast<std::size_t>(G) * KB / 8;
  static constexpr std::size_t vrow = static_cast<std::size_t>(D) * VB / 8;
  static constexpr std::size_t kpiece = krow * (D / 4);  // key codes of one lane t
  static constexpr int vpieces = 4 * H;                  // value pieces: one per (warp sub, lane t)
  static constexpr int vpiece_tokens = G / vpieces;
  static constexpr std::size_t vpiece = vrow * vpiece_tokens;
  // a_K / z_K quarters (lane t's channels): cut where 4 quarters would share banks.
  static constexpr std::size_t qa = sb * (D / 4), qz = 2 * (D / 4);
  static constexpr bool cut_a = Swz && qa % 64 == 0, cut_z = Swz && qz % 64 == 0;
  static_assert(!Swz || (kpiece % 128 == 0 && vpiece % 128 == 0), "code pieces must be whole bank periods");
  static_assert(!Swz || (qa % 16 == 0 && qz % 16 == 0), "bulk copies need 16-byte pieces");
  static_assert(L::key_codes + Config::key_code_bytes <= L::value_codes, "key codes precede value codes");
};

template <class Geo>
KVTILE_HOST_DEVICE constexpr cut_list stage_cuts() {
  using L = typename Geo::L;
  cut_list c;
  if (Geo::swizzled) {
    for (int i = 1; i < 4; ++i) c.add(L::key_codes + i * Geo::kpiece);
    for (int i = 1; i < Geo::vpieces; ++i) c.add(L::value_codes + i * Geo::vpiece);
    for (int i = 1; Geo::cut_a && i < 4; ++i) c.add(L::key_scale + i * Geo::qa);
    for (int i = 1; Geo::cut_z && i < 4; ++i) c.add(L::key_zero + i * Geo::qz);
  }
  return c;
}

// Stage offset of record offset x: x + pad * (cuts <= x).
template <class Geo>
KVTILE_HOST_DEVICE constexpr std::size_t stage_at(std::size_t x) {
  const cut_list c = stage_cuts<Geo>();
  std::size_t n = 0;
  for (int i = 0; i < c.n; ++i) n += c.v[i] <= x ? 1 : 0;
  return x + Geo::pad * n;
}

template <class Config, class Packer, int H, bool Swz>
struct stage_layout : stage_geometry<Config, Packer, H, Swz> {
  using geo = stage_geometry<Config, Packer, H, Swz>;
  using L = typename geo::L;
  static constexpr int cuts = stage_cuts<geo>().n;
  static constexpr std::size_t bytes = geo::record_bytes + geo::pad * cuts;

  // Fields read the same way by every lane t.
  static constexpr std::size_t vector_scales_s = geo::fp8 ? stage_at<geo>(L::vector_scales) : 0;
  static constexpr std::size_t key_token_scale_s = stage_at<geo>(L::key_token_scale);
  static constexpr std::size_t value_channel_scale_s = stage_at<geo>(L::value_channel_scale);
  static constexpr std::size_t value_scale_s = stage_at<geo>(L::value_scale);
  static constexpr std::size_t value_zero_s = stage_at<geo>(L::value_zero);
  // Quartered fields: lane t's quarter starts at *_s + t * *_q (Swz; inside it,
  // channel chan0 - first(t) / key row chan0 - first(t)); without Swz *_q = 0.
  static constexpr std::size_t key_scale_s = stage_at<geo>(L::key_scale);
  static constexpr std::size_t key_scale_q = Swz ? geo::qa + (geo::cut_a ? geo::pad : 0) : 0;
  static constexpr std::size_t key_zero_s = stage_at<geo>(L::key_zero);
  static constexpr std::size_t key_zero_q = Swz ? geo::qz + (geo::cut_z ? geo::pad : 0) : 0;
  static constexpr std::size_t key_codes_s = stage_at<geo>(L::key_codes);
  static constexpr std::size_t key_codes_q = Swz ? geo::kpiece + geo::pad : 0;
  // Value piece k = tok / vpiece_tokens (Swz) starts at value_codes_s + k * value_codes_q.
  static constexpr std::size_t value_codes_s = stage_at<geo>(L::value_codes);
  static constexpr std::size_t value_codes_q = Swz ? geo::vpiece + geo::pad : 0;
  KVTILE_HOST_DEVICE static constexpr int value_piece(int tok) { return Swz ? tok / geo::vpiece_tokens : 0; }

  // First key token of lane group r of warp sub (EH consecutive tokens): r-major
  // (E r + EH sub, previous) or sub-major (sub G/H + EH r: the 8 lanes r of a
  // key load read one contiguous run, and lane t's PV tokens stay in one piece).
  static constexpr int E = geo::G / 8, EH = E / H;
  KVTILE_HOST_DEVICE static constexpr int token_base(int r, int sub) {
    return Swz ? sub * (geo::G / H) + EH * r : E * r + EH * sub;
  }

  // Copy segments (record ranges between cuts), one cp.async.bulk each.
  static constexpr int segments = cuts + 1;
  KVTILE_HOST_DEVICE static constexpr std::size_t seg_begin(int s) { return s == 0 ? 0 : stage_cuts<geo>().v[s - 1]; }
  KVTILE_HOST_DEVICE static constexpr std::size_t seg_end(int s) {
    return s == cuts ? geo::record_bytes : stage_cuts<geo>().v[s];
  }
  KVTILE_HOST_DEVICE static constexpr std::size_t at(std::size_t x) { return stage_at<geo>(x); }
};

template <class SL, int S>
KVTILE_DEVICE void stage_segments(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t* bar) {
  if constexpr (S < SL::segments) {
    constexpr std::size_t b = SL::seg_begin(S), e = SL::seg_end(S), d = SL::at(b);
    static_assert(b % 16 == 0 && e % 16 == 0 && d % 16 == 0 && e > b, "bulk copy pieces");
    bulk_copy_g2s(dst + d, src + b, static_cast<std::uint32_t>(e - b), bar);
    stage_segments<SL, S + 1>(dst, src, bar);
  }
}

// Issues the copies of one record into a stage laid out by SL, completing on
// `bar` (one expect_tx for the whole record). Called by one lane.
template <class SL>
KVTILE_DEVICE void stage_record(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t* bar) {
  mbar_expect_tx(bar, static_cast<std::uint32_t>(SL::record_bytes));
  stage_segments<SL, 0>(dst, src, bar);
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
