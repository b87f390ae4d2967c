// kvtile/device/attention/detail/common.cuh: what every part of the decode kernels shares:
// constants, the kernel parameters, the score modifiers (window, soft-cap)
// and the query operand split.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../../../config.hpp"
#include "fragments.cuh"
#include "schedule.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.69314718055994531f;

template <class QT>
KVTILE_DEVICE float load_q(const QT* p) {
  return QT::from_bits(*reinterpret_cast<const std::uint16_t*>(p)).to_float();
}
template <class QT>
KVTILE_DEVICE void store_q(QT* p, float v) {
  *reinterpret_cast<std::uint16_t*>(p) = QT::from_float_bits(v);
}

struct kernel_params {
  const void* q;
  int q_heads;
  int group;      // q_heads / kv_heads
  // Multi-query: a KV head's query rows are f = i * group + g (new token i,
  // query head g of the group), rows_total = q_span * group of them.
  const std::int32_t* qo_indptr;  // null: one token per sequence (q_span 1)
  int q_span;     // max_q_tokens
  int rows_total; // q_span * group
  int unit_rows;  // query rows of a unit: 8 x the kernel's n-blocks (8 or 16)
  int qgroups;    // ceil(rows_total / unit_rows)
  int units;      // units per sequence: kv_heads * qgroups
  int slot_rows;  // partial rows per slot: min(rows_total, unit_rows)
  float scale_log2;
  int num_splits; // without a plan: chunks per unit (grid (num_splits, units, num_seqs))
  int window_left;
  float cap;      // logit soft-cap in the log2 domain (cap * log2 e), 0: off
  int max_len;    // tile_range's clamp of the device lengths
  // With a plan (decode_plan): CTA c runs work[cta_begin[c] .. cta_begin[c + 1]);
  // spans[unit] lists the unit's partial slots for the merge. Null: no plan.
  const work_item* work;
  const std::int32_t* cta_begin;
  const unit_span* spans;
  float* ws_o;    // [slot][slot_rows][D]
  float* ws_ml;   // [slot][slot_rows][2]
  // Merge in the attention kernel (a plan of a policy with fused_merge): the
  // CTA that finishes a unit's last chunk merges the unit's rows into out and
  // lse; counters[unit] counts the finished chunks (zeroed by the plan, reset
  // by that CTA). Null: the merge kernel merges.
  std::int32_t* counters;
  // Planned tail pieces (schedule::tail_of; pipeline.cuh, "Tail pieces"):
  // tail_of per work item, claims[i x tail_cuts + k] the state of piece i of
  // cut chunk k (0 free, 1 kept by its owner, 2 taken; zeroed by the plan and
  // by the merge kernel after each run). tail_pieces = 0: none.
  const std::int32_t* tail_of;
  std::int32_t* claims;
  int tail_pieces, piece_tiles, tail_cuts;
  void* out;      // decode_args::out (QT), with counters
  float* lse;     // decode_args::lse or null, with counters
};

// The query tokens of sequence seq: first row of q / out and count n (clamped
// to [0, q_span]).
KVTILE_DEVICE void query_tokens(const kernel_params& p, int seq, std::int64_t& first, int& n) {
  if (p.qo_indptr) {
    const std::int32_t a = p.qo_indptr[seq], b = p.qo_indptr[seq + 1];
    first = a;
    n = b - a < 0 ? 0 : (b - a > p.q_span ? p.q_span : b - a);
  } else {
    first = seq;
    n = 1;
  }
}

// Visible tokens [lo, hi) of query row f of a sequence of (clamped) length
// len with n query tokens: token i = f / group sits at len - n + i.
struct row_bounds {
  int lo, hi;
};
KVTILE_DEVICE row_bounds bounds_of_row(const kernel_params& p, int f, int len, int n) {
  const int i = f / p.group;
  const int hi = i < n ? len - (n - 1 - i) : len;  // rows past n: never written out
  return {window_lo(hi, p.window_left), hi};
}

// Score modifiers of a thread's two query columns for one tile: tokens (tile
// positions) outside [lo[q], hi[q]) are masked; cap > 0 applies cap tanh(x / cap).
struct tile_mod {
  int lo[2], hi[2];
  float cap;
  bool on;  // anything to apply (masked tokens in this tile, or the cap)
};
KVTILE_DEVICE tile_mod make_tile_mod(const row_bounds (&b)[2], int start, int T, float cap) {
  tile_mod m;
  m.cap = cap;
  m.on = cap > 0.0f;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    m.lo[q] = b[q].lo - start;
    m.hi[q] = b[q].hi - start;
    m.on = m.on || m.lo[q] > 0 || m.hi[q] < T;
  }
  return m;
}
KVTILE_DEVICE float modify_score(float x, int tok, const tile_mod& m, int q) {
  if (tok < m.lo[q] || tok >= m.hi[q]) return -INFINITY;
  return m.cap > 0.0f ? m.cap * tanhf(x / m.cap) : x;
}

// The QK B operand (the scaled query) is split into fp16 hi + lo parts and run
// as two MMAs: one fp16 rounding of the query costs ~2^-12 relative per score,
// which at realistic score ranges is ~1e-3 in the output (measured); hi + lo
// brings it to ~2^-22. The tensor cores have the headroom (docs/attention.md).

// Raw codes (pair_extract, fragments.cuh): codes whose conversion only undoes
// the magic number enter the MMA as fp16 subnormals, one LOP3 per register
// instead of LOP3 + fma.f16x2; the position factor is a constant of the
// accumulator, removed in the fp32 scale that follows anyway. Used for every
// key (the per-channel key scale goes into the query, split hi + lo per tile)
// and for values in the packed layout (P is hi + lo there, so the codes need
// no centering); the 8-query layout converts values centered. The measured
// alternatives (scale folded into the conversion, no raw codes, partial QK
// unrolling) are in docs/attention.md.

KVTILE_DEVICE void split_b(float x0, float x1, float x2, float x3, std::uint32_t (&b)[4]) {
  b[0] = pack_half2(x0, x1);
  b[1] = pack_half2(x2, x3);
  float h0, h1, h2, h3;
  half2_to_float2(b[0], h0, h1);
  half2_to_float2(b[1], h2, h3);
  b[2] = pack_half2(x0 - h0, x1 - h1);
  b[3] = pack_half2(x2 - h2, x3 - h3);
}

// Packed layout: only the part of split_b's output that this lane's B column
// holds, the hi part (lo = 0) or the lo part x - hi (lo = 1; FMA with 1 gives
// the same exact difference): 2 conversions and no select instead of 4.
KVTILE_DEVICE void split_b_part(float x0, float x1, float x2, float x3, float lo, std::uint32_t (&b)[2]) {
  const std::uint32_t h01 = pack_half2(x0, x1), h23 = pack_half2(x2, x3);
  float h0, h1, h2, h3;
  half2_to_float2(h01, h0, h1);
  half2_to_float2(h23, h2, h3);
  b[0] = pack_half2(fmaf(-lo, h0, x0), fmaf(-lo, h1, x1));
  b[1] = pack_half2(fmaf(-lo, h2, x2), fmaf(-lo, h3, x3));
}

// Index of the uint4 fragment of query row r, k-step kk, lane t%4 (channels
// 16 kk + 4 t .. + 3): a warp's 16-byte reads of one k-step are contiguous.
// Rows r >= 8 (the second n-block) follow the first block's D / 16 k-steps.
KVTILE_DEVICE constexpr int qf_index(int kk, int r, int t) { return (kk * max_group + r) * 4 + t; }
template <int D>
KVTILE_DEVICE constexpr int qf_block(int nb) { return nb * (D / 16) * max_group * 4; }

}  // namespace attention::detail
KVTILE_NAMESPACE_END
