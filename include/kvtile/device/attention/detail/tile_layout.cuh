// kvtile/device/attention/detail/tile_layout.cuh: where the decode kernel's lanes read
// a quantized record in a shared-memory stage: the QK channel order, the PV
// output channel order, the stage layout (the record as stored, one copy) and
// the copy itself on both load paths.
//
// Codes are packed row by row (docs/format.md: key rows = channels, value rows
// = tokens). A warp's code load has the 8 lanes r = lane / 4 reading adjacent
// bytes of one row and the 4 lanes t = lane % 4 reading 4 rows 256 B (keys) or
// 1 KB (values) apart, at the same banks: 4-way conflicts. A layout free of
// them (code pieces padded per lane quarter, with matching channel and token
// orders) was measured slower on the H200 (docs/attention.md, "Shared-memory
// bank conflicts") and removed: the conflicts are not the limit.
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
template <int D>
struct key_order {
  KVTILE_HOST_DEVICE static constexpr int chan0(int kk, int t) { return 16 * kk + 4 * t; }
  // Inverse for the 4-channel unit u (channels 4u .. 4u + 3).
  KVTILE_HOST_DEVICE static constexpr int unit_t(int u) { return u % 4; }
  KVTILE_HOST_DEVICE static constexpr int unit_kk(int u) { return u / 4; }
};

// PV output channel order (the M rows of the PV MMA, the layout of
// warp_state::o): o-block m, M-row r + 8 h holds channel chan(r, m, h); lane r
// owns the D / 8 consecutive channels from (D / 8) r.
template <int D>
struct out_order {
  // First channel of lane r's run of CE channels in chunk ch of a loop over
  // D / 8 channels per lane in chunks of CE.
  KVTILE_HOST_DEVICE static constexpr int run(int ch, int r, int CE) { return (D / 8) * r + ch * CE; }
  KVTILE_HOST_DEVICE static constexpr int chan(int r, int m, int h) { return (D / 8) * r + 2 * m + h; }
};

// Stage (shared-memory) layout of one quantized record: the record as stored.
// Packer: fp8_scales or fp16_scales; H: warps per record. Offsets named *_s
// are stage offsets.
template <class Config, class Packer, int H>
struct stage_layout {
  using L = typename Packer::template layout<Config>;
  static constexpr int D = Config::head_dim, G = Config::tile_tokens;
  static constexpr bool fp8 = std::is_same_v<Packer, fp8_scales>;
  static constexpr std::size_t record_bytes = L::bytes;
  static constexpr std::size_t bytes = record_bytes;
  static_assert(record_bytes % 16 == 0, "records are copied in 16-byte pieces");
  static_assert(L::key_codes + Config::key_code_bytes <= L::value_codes, "key codes precede value codes");

  static constexpr std::size_t vector_scales_s = fp8 ? L::vector_scales : 0;
  static constexpr std::size_t key_token_scale_s = L::key_token_scale;
  static constexpr std::size_t value_channel_scale_s = L::value_channel_scale;
  static constexpr std::size_t value_scale_s = L::value_scale;
  static constexpr std::size_t value_zero_s = L::value_zero;
  static constexpr std::size_t key_scale_s = L::key_scale;
  static constexpr std::size_t key_zero_s = L::key_zero;
  static constexpr std::size_t key_codes_s = L::key_codes;
  static constexpr std::size_t value_codes_s = L::value_codes;

  // First key token of lane group r of warp sub (EH consecutive tokens).
  static constexpr int E = G / 8, EH = E / H;
  KVTILE_HOST_DEVICE static constexpr int token_base(int r, int sub) { return E * r + EH * sub; }
};

// Issues the copies of one record into a stage laid out by SL, completing on
// `bar`. Bulk: called by one lane, which issues one expect_tx and one bulk
// copy for the whole record; otherwise called by every lane of a warp, each
// copying 16-byte pieces and arriving when they have landed.
template <class SL, bool Bulk>
KVTILE_DEVICE void stage_record(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t* bar, int lane) {
  constexpr auto n = static_cast<std::uint32_t>(SL::bytes);
  if constexpr (Bulk) {
    mbar_expect_tx(bar, n);
    bulk_copy_g2s(dst, src, n, bar);
  } else {
    warp_copy_async(dst, src, n, lane);
    cp_async_arrive(bar);
  }
}

// A stage whose tile is not copied (a page id outside the pool) completes
// without data: called as stage_record, each caller arrives once (1 or 32
// arrivals, the load path's barrier count).
KVTILE_DEVICE void stage_skip(std::uint64_t* bar) { mbar_arrive(bar); }

// The token split's exchange (quant_tile XB) per ring: the query B operands of
// every k-step and n-block (two n-blocks, 16 bytes per lane), then the two
// warps' beta partials (pipeline.cuh places it behind the plan).
template <int D>
constexpr std::size_t token_split_xchg_fragment_bytes() {
  return static_cast<std::size_t>(D / 16) * 2 * 32 * 16;
}
template <int D>
constexpr std::size_t token_split_xchg_bytes() {
  return token_split_xchg_fragment_bytes<D>() + 2 * 2 * 32 * sizeof(float);
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
