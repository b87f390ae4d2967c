// kvtile/device/attention/paged_decode.cuh: paged decode attention over the quantized
// KV cache (method.md sections 7-8), and the same kernel over an fp16 paged
// cache as a baseline. docs/attention.md describes the design and its numbers.
//
//   kvtile::attention::decode_args<half_t> a{q, out, lse, q_heads, 1/sqrt(D)};
//   size_t ws = kvtile::attention::workspace_bytes<Codec>(cache, q_heads);  // then allocate, set a.workspace
//   status s = kvtile::attention::paged_decode<Codec>(cache, a, stream);
//
// Inputs: queries [num_seqs][q_heads][D] (half_t or bfloat16_t, original frame),
// the paged cache view (records per (page, KV head), fp16 tail and optional
// sink in the rotated frame). Output [num_seqs][q_heads][D] in the query type
// (original frame) and optionally lse[num_seqs][q_heads] = ln sum_t exp(scale q.k_t)
// (-inf for an empty sequence, whose output is 0).
//
// Structure: grid (split, KV head x query group, sequence); a query group is up
// to 8 query heads of one KV head (the MMA's N). Each ring of (usually) two
// warps takes whole tiles (a record, the sink or the tail; each warp half of
// the tile's tokens), fetched by cp.async.bulk into the ring's shared-memory
// stages (full/empty mbarriers; one copy per record; -DKVTILE_ATTENTION_SWIZZLE=1
// copies it in padded pieces so that the per-tile loads are free of bank
// conflicts, detail/tile_layout.cuh, measured slower); QK and PV run on
// mma.sync m16n8k16 with codes converted in registers; the scales are folded
// out of the inner loop; the softmax is online in fp32. Warps merge in shared
// memory, splits merge by log-sum-exp in a second kernel that also un-rotates.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../codec/tile_codec.hpp"
#include "../../config.hpp"
#include "../../numeric/bfloat16.hpp"
#include "../../numeric/half.hpp"
#include "../../packing/fp16_scales.hpp"
#include "../../packing/fp8_scales.hpp"
#include "../../paged/paged_cache.hpp"
#include "../../rotation/hadamard.hpp"
#include "../../status.hpp"
#include "../../paged/fp16_paged_cache.hpp"
#include "detail/fragments.cuh"
#include "detail/launch.cuh"
#include "detail/schedule.hpp"
#include "detail/tile_layout.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention {

// Arguments of one decode step. QT: half_t or bfloat16_t.
template <class QT>
struct decode_args {
  const QT* q = nullptr;   // [num_seqs][q_heads][D]
  QT* out = nullptr;       // [num_seqs][q_heads][D]
  float* lse = nullptr;    // [num_seqs][q_heads] or null
  int q_heads = 0;         // a multiple of the cache's kv_heads
  float softmax_scale = 0; // usually 1/sqrt(D)
  void* workspace = nullptr;  // workspace_bytes(...) bytes of device memory, 16-byte aligned
  std::size_t workspace_bytes = 0;
  int num_splits = 0;      // > 0: every sequence's tiles cut into this many chunks (tests); 0: automatic
  // Left window: the query (at position len - 1) attends keys at positions
  // >= len - 1 - window_left (window_left + 1 tokens); < 0: no window. Tiles
  // entirely left of the window are skipped, the boundary tile is masked.
  int window_left = -1;
  // > 0: logit soft-cap, every score s = softmax_scale q.k becomes cap tanh(s / cap).
  float logit_softcap = 0.0f;
  // Programmatic dependent launch of the merge kernel (overlaps its launch
  // with the attention kernel's tail). A failed launch returns cuda_error.
  bool pdl = true;
};

namespace detail {

inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.69314718055994531f;
inline constexpr int max_group = 8;  // query heads per CTA (the MMA's N)

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
  int qgroups;    // ceil(group / 8)
  int units;      // units per sequence: kv_heads * qgroups
  int slot_rows;  // partial rows per slot: min(group, 8)
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
};

// Window mask and soft-cap of one tile's scores (log2 domain): tokens below
// lo are masked; cap > 0 applies cap tanh(x / cap).
KVTILE_DEVICE float modify_score(float x, int tok, int lo, float cap) {
  if (tok < lo) return -INFINITY;
  return cap > 0.0f ? cap * tanhf(x / cap) : x;
}

// Shared-memory plan of a decode CTA.
// W warps share R rings of Stages stages (W / R warps per ring, each taking
// part of every tile); each stage has a "full" and an "empty" mbarrier.
// KeepQn: the fp32 query rows stay live next to the fragments (the quantized
// kernel's per-tile q a path); otherwise the fragments overwrite them once made.
template <int D, int W, int Stages, std::size_t StageBytes, int R = W, bool KeepQn = false>
struct smem_plan {
  static constexpr int q_stride = D + 16;  // floats; keeps the 16-byte query reads conflict-free
  static constexpr std::size_t qn = 0;
  static constexpr std::size_t nf = qn + sizeof(float) * max_group * q_stride;
  // qf: the query as QK B-operand fragments, fp16 hi and lo (qf_index below).
  static constexpr std::size_t qf = KeepQn ? (nf + sizeof(float) * max_group + 15) / 16 * 16 : qn;
  static constexpr std::size_t bars = KeepQn ? qf + sizeof(std::uint32_t) * 4 * max_group * D / 4
                                             : nf + sizeof(float) * max_group;
  static constexpr std::size_t stages = (bars + 2 * 8 * R * Stages + 127) / 128 * 128;
  static constexpr std::size_t stage_bytes = (StageBytes + 127) / 128 * 128;
  static constexpr std::size_t bytes = stages + stage_bytes * R * Stages;
  // Epilogue reuse of the stage area: per warp O [8][D + 4], m [8], l [8].
  static constexpr int o_stride = D + 4;
  static constexpr std::size_t merge_bytes = sizeof(float) * W * max_group * (o_stride + 2);
  static_assert(merge_bytes <= stage_bytes * R * Stages, "epilogue scratch must fit in the stage area");
};

inline constexpr std::size_t smem_budget = 222 * 1024;

template <std::size_t StageBytes, int Stages, int MaxW = 8>
constexpr int warps_for() {
  const std::size_t per_warp = (StageBytes + 127) / 128 * 128 * Stages + 16 * Stages;
  const std::size_t w = (smem_budget - 8 * 1024) / per_warp;
  return w >= MaxW ? MaxW : (w < 1 ? 1 : static_cast<int>(w));
}

// Quantized kernel: stages per ring and the most rings per CTA. Default: 2
// stages, 8 rings (8 warps, 255 registers). Stages = 1 with more rings trades
// the second record in flight per warp for more warps per SM (the register
// budget per thread falls to 65536 / threads).
#ifndef KVTILE_ATTENTION_STAGES
#define KVTILE_ATTENTION_STAGES 2
#endif
#ifndef KVTILE_ATTENTION_MAX_RINGS
#define KVTILE_ATTENTION_MAX_RINGS 8
#endif

// The largest ring count <= R whose plan (stages of StageBytes) fits the SM's
// 227 KB (warps_for keeps 8 KB of slack; the padded stages of tile_layout.cuh
// need part of it: k4v2_g128 D = 128 fp8 keeps 8 rings with 224,128 of 232,448
// bytes). See quant_swizzled.
template <int D, int Stages, std::size_t StageBytes, bool KeepQn, int R>
constexpr int fit_rings() {
  if constexpr (R <= 1) {
    return 1;
  } else if constexpr (smem_plan<D, R, Stages, StageBytes, R, KeepQn>::bytes <= 227 * 1024) {
    return R;
  } else {
    return fit_rings<D, Stages, StageBytes, KeepQn, R - 1>();
  }
}

// Stage-pool kernel (pool_loop below): KVTILE_ATTENTION_POOL stages (0: none)
// shared by KVTILE_ATTENTION_POOL_WARPS warps. H200, k4v2_g128 D = 128,
// 2026-11-29: 12 warps / 16 stages (168 registers) vs 8 warps x 2 stages:
// 16 x 64K 279 vs 298 us, 32 x 16K 161 vs 164 us, but 1 x 128K (16 splits)
// 59.8 vs 56.5 us and 8 x 16K 57.0 vs 54.3 us, so paged_decode takes it only
// for single-split launches over >= 128 tiles per sequence.
#ifndef KVTILE_ATTENTION_POOL
#define KVTILE_ATTENTION_POOL 16
#endif
#ifndef KVTILE_ATTENTION_POOL_WARPS
#define KVTILE_ATTENTION_POOL_WARPS 12
#endif
// The largest pool size <= P (stages shared by W warps) that fits, or 0 when
// that is not more than W (a pool needs spare stages).
template <int D, int W, std::size_t StageBytes, bool KeepQn, int P>
constexpr int fit_pool() {
  if constexpr (P <= W) {
    return 0;
  } else if constexpr (smem_plan<D, W, 1, StageBytes, P, KeepQn>::bytes <= 227 * 1024) {
    return P;
  } else {
    return fit_pool<D, W, StageBytes, KeepQn, P - 1>();
  }
}
template <int D, int W, std::size_t StageBytes, bool KeepQn, int P>
constexpr std::size_t pool_smem_bytes() {
  if constexpr (P > 0) {
    return smem_plan<D, W, 1, StageBytes, P, KeepQn>::bytes;
  } else {
    return 0;
  }
}

// The QK B operand (the scaled query) is split into fp16 hi + lo parts and run
// as two MMAs: one fp16 rounding of the query costs ~2^-12 relative per score,
// which at realistic score ranges is ~1e-3 in the output (measured); hi + lo
// brings it to ~2^-22. The tensor cores have the headroom (docs/attention.md).
#ifndef KVTILE_ATTENTION_SPLIT_QUERY
#define KVTILE_ATTENTION_SPLIT_QUERY 1
#endif
inline constexpr bool split_query = KVTILE_ATTENTION_SPLIT_QUERY != 0;

// Raw codes (pair_extract, fragments.cuh): codes whose conversion only undoes
// the magic number (no scale folded in) enter the MMA as fp16 subnormals, one
// LOP3 per register instead of LOP3 + fma.f16x2; the position factor is a
// constant of the accumulator, removed in the fp32 scale that follows anyway.
// Used for values in the packed layout (P is hi + lo there, so the codes need
// no centering) and for keys whose scale goes into the query (always, unless
// KVTILE_ATTENTION_FOLD_KEY_SCALE below). -DKVTILE_ATTENTION_RAW_CODES=0: off.
#ifndef KVTILE_ATTENTION_RAW_CODES
#define KVTILE_ATTENTION_RAW_CODES 1
#endif
inline constexpr bool raw_codes = KVTILE_ATTENTION_RAW_CODES != 0;
// fp8_scales keys, -DKVTILE_ATTENTION_FOLD_KEY_SCALE=1: fold the E4M3
// per-channel key scale into the code -> fp16 conversion (exact, see
// pair_convert_scaled) instead of into the query, so the QK B operands are the
// query's hi/lo fragments made once per CTA, and beta = sum q z_K takes two
// more MMAs per k-step instead of fp32 FMAs and shuffles. That was the faster
// path while every code conversion had its fma.f16x2 anyway; with raw codes
// the per-tile q a split is faster (H200, k4v2_g128 D = 128, 16 x 64K,
// 2026-11-29, one call: 246.7 us vs 253.3 us folded), so folding is the
// default only with -DKVTILE_ATTENTION_RAW_CODES=0.
#ifndef KVTILE_ATTENTION_FOLD_KEY_SCALE
#define KVTILE_ATTENTION_FOLD_KEY_SCALE (KVTILE_ATTENTION_RAW_CODES ? 0 : 1)
#endif
inline constexpr bool fold_key_scale = KVTILE_ATTENTION_FOLD_KEY_SCALE != 0;
// Whether the quantized kernel reads the fp32 query rows per tile (not the fold path).
template <class Packer>
constexpr bool keep_qn() {
  return !(std::is_same_v<Packer, fp8_scales> && fold_key_scale);
}

// Experimental, NOT measured on a GPU yet (docs/attention.md, next steps):
// -DKVTILE_ATTENTION_QK_UNROLL=n unrolls the quantized QK loop over 16-channel
// k-steps n times instead of fully (n = 2 shrinks the k4v2 D128 kernel's code
// from 90 KB to 79 KB; the results are the same, the MMAs accumulate in the
// same order). Default: fully unrolled, the measured configuration.
#ifdef KVTILE_ATTENTION_QK_UNROLL
inline constexpr int qk_unroll = KVTILE_ATTENTION_QK_UNROLL;
#endif

KVTILE_DEVICE void split_b(float x0, float x1, float x2, float x3, std::uint32_t (&b)[4]) {
  b[0] = pack_half2(x0, x1);
  b[1] = pack_half2(x2, x3);
  if constexpr (split_query) {
    float h0, h1, h2, h3;
    half2_to_float2(b[0], h0, h1);
    half2_to_float2(b[1], h2, h3);
    b[2] = pack_half2(x0 - h0, x1 - h1);
    b[3] = pack_half2(x2 - h2, x3 - h3);
  }
}

// Packed layout: only the part of split_b's output that this lane's B column
// holds, the hi part (lo = 0) or the lo part x - hi (lo = 1; FMA with 1 gives
// the same exact difference): 2 conversions and no select instead of 4.
KVTILE_DEVICE void split_b_part(float x0, float x1, float x2, float x3, float lo, std::uint32_t (&b)[2]) {
  if constexpr (split_query) {
    const std::uint32_t h01 = pack_half2(x0, x1), h23 = pack_half2(x2, x3);
    float h0, h1, h2, h3;
    half2_to_float2(h01, h0, h1);
    half2_to_float2(h23, h2, h3);
    b[0] = pack_half2(fmaf(-lo, h0, x0), fmaf(-lo, h1, x1));
    b[1] = pack_half2(fmaf(-lo, h2, x2), fmaf(-lo, h3, x3));
  } else {  // no lo part: its columns are zero
    b[0] = lo != 0.0f ? 0u : pack_half2(x0, x1);
    b[1] = lo != 0.0f ? 0u : pack_half2(x2, x3);
  }
}

// Index of the uint4 fragment of query row r, k-step kk, lane t%4 (channels
// 16 kk + 4 t .. + 3): a warp's 16-byte reads of one k-step are contiguous.
KVTILE_DEVICE constexpr int qf_index(int kk, int r, int t) { return (kk * max_group + r) * 4 + t; }

// Rotates (FWHT), scales and normalizes the CTA's query rows into shared memory:
// qn[row][d] = (q H)[d] * scale * log2(e) / nf[row], nf[row] a power of two with
// max |qn[row]| in [1, 2). Rows past the group are zero. The fragments qf follow
// the QK channel order key_order<D, Swz> (tile_layout.cuh).
template <class QT, int D, int W, bool Rotate, bool KeepQn, bool Swz>
KVTILE_DEVICE void load_queries(const kernel_params& p, int seq, int kvh, int qg, float* qn, float* nf, uint4* qf) {
  constexpr int q_stride = D + 16;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int row = warp; row < max_group; row += W) {
    float* v = qn + row * q_stride;
    const int gi = qg * max_group + row;
    const bool valid = gi < p.group;
    const QT* src = static_cast<const QT*>(p.q) + (static_cast<std::int64_t>(seq) * p.q_heads + kvh * p.group + gi) * D;
    for (int d = lane; d < D; d += 32) v[d] = valid ? load_q<QT>(src + d) : 0.0f;
    __syncwarp();
    for (int h = 1; Rotate && h < D; h *= 2) {
      for (int i = lane; i < D / 2; i += 32) {
        const int a = (i / h) * 2 * h + (i % h);
        const float x = v[a], y = v[a + h];
        v[a] = x + y;
        v[a + h] = x - y;
      }
      __syncwarp();
    }
    float amax = 0.0f;
    for (int d = lane; d < D; d += 32) {
      const float x = Rotate ? __fmul_rn(__fmul_rn(v[d], kvtile::detail::hadamard_norm<D>::value), p.scale_log2)
                             : __fmul_rn(v[d], p.scale_log2);
      v[d] = x;
      amax = fmaxf(amax, fabsf(x));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    int e = 0;
    if (amax > 0.0f) frexpf(amax, &e);  // amax in [2^(e-1), 2^e)
    const int k = amax > 0.0f ? e - 1 : 0;
    __syncwarp();
    if constexpr (KeepQn && Swz) {  // kept rows are padded (key_order::qpad) for the per-tile k-step reads
      float x[D / 32];
#pragma unroll
      for (int i = 0; i < D / 32; ++i) x[i] = ldexpf(v[lane + 32 * i], -k);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < D / 32; ++i) v[key_order<D, Swz>::qpad(lane + 32 * i)] = x[i];
    } else {
      for (int d = lane; d < D; d += 32) v[d] = ldexpf(v[d], -k);
    }
    if (lane == 0) nf[row] = ldexpf(1.0f, k);
    __syncwarp();
    // The row's QK B fragments (fp16 hi, lo of 4 channels per (k-step, t)), made once per CTA.
    for (int u = lane; KeepQn && u < D / 4; u += 32) {
      const float4 x = *reinterpret_cast<const float4*>(v + key_order<D, Swz>::qpad(4 * u));
      std::uint32_t b[4] = {0u, 0u, 0u, 0u};
      split_b(x.x, x.y, x.z, x.w, b);
      qf[qf_index(key_order<D, Swz>::unit_kk(u), row, key_order<D, Swz>::unit_t(u))] =
          make_uint4(b[0], b[1], b[2], b[3]);
    }
  }
  if constexpr (!KeepQn) {  // qf overlays qn: read every row, then write the fragments
    constexpr int units = max_group * D / 4, per = (units + W * 32 - 1) / (W * 32);
    uint4 f[per];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < per; ++k) {
      const int u = threadIdx.x + k * W * 32;
      if (u < units) {
        const float4 x = *reinterpret_cast<const float4*>(qn + (u / (D / 4)) * q_stride + 4 * (u % (D / 4)));
        std::uint32_t b[4] = {0u, 0u, 0u, 0u};
        split_b(x.x, x.y, x.z, x.w, b);
        f[k] = make_uint4(b[0], b[1], b[2], b[3]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < per; ++k) {
      const int u = threadIdx.x + k * W * 32;
      const int row = u / (D / 4), g = u % (D / 4);
      if (u < units) qf[qf_index(key_order<D, Swz>::unit_kk(g), row, key_order<D, Swz>::unit_t(g))] = f[k];
    }
  }
}

// Per-warp online-softmax state; thread (r = lane/4, t = lane%4) holds queries
// 2t, 2t+1 (NQ = 2; o[m][2h + q]) or query t (NQ = 1, the packed layout below;
// o[m][h]) and output channels out_order<D, Swz>::chan(r, m, h), m < D/16,
// h < 2 ((D/8) r + 2m + h without Swz; tile_layout.cuh).
template <int D, int NQ = 2>
struct warp_state {
  static_assert(NQ == 1 || NQ == 2, "one or two queries per thread");
  float m[NQ];
  float l[NQ];
  float o[D / 16][2 * NQ];
  KVTILE_DEVICE void reset() {  // empty softmax: max -inf, sum 0, output 0
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      m[q] = -INFINITY;
      l[q] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
#pragma unroll
      for (int c = 0; c < 2 * NQ; ++c) o[i][c] = 0.0f;
  }
};

// Packed layout (groups of at most 4 query heads, template flag PK): the MMAs'
// N = 8 columns hold (query j hi, query j lo) pairs, column 2j + h, instead of
// 8 queries. QK: the B operand of column n is the hi (n even) or lo (n odd)
// fp16 part of query n/2, so ONE MMA per token block does the split-precision
// product that takes two otherwise, and thread (r, t)'s accumulator columns
// 2t, 2t+1 are the two parts of query t's score (summed in fp32). Every lane
// then holds a real query (no padding columns in the softmax). PV: P is split
// the same way (column 2j + h = part h of query j's probabilities), which costs
// no MMA and makes the probabilities exact to ~2^-22 instead of one fp16
// rounding. Packed B fragments of the query: the uint2 half h of qf[...].
#ifndef KVTILE_ATTENTION_PACKED
#define KVTILE_ATTENTION_PACKED 1  // 0: groups of <= 4 query heads take the 8-query layout too
#endif
inline constexpr bool packed_layout = KVTILE_ATTENTION_PACKED != 0;
KVTILE_DEVICE uint2 packed_qf(const uint4* qf, int kk, int r, int t) {
  return reinterpret_cast<const uint2*>(qf)[2 * qf_index(kk, r >> 1, t) + (r & 1)];
}

// 2^x for x <= 0 in the online softmax. exp2f is ex2.approx.f32 wrapped in a
// subnormal-result fixup (compare + two multiplies per call: ~48 instructions
// per half tile); the .ftz form only differs for results below 2^-126, which
// are negligible next to the running sum (>= 1). -DKVTILE_ATTENTION_FAST_EXP2=0: exp2f.
#ifndef KVTILE_ATTENTION_FAST_EXP2
#define KVTILE_ATTENTION_FAST_EXP2 1
#endif
KVTILE_DEVICE float softmax_exp2(float x) {
#if KVTILE_ATTENTION_FAST_EXP2
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// Online softmax over one tile's scores s[i][2h + qq] (log2 domain): updates m,
// l (per-thread partial sums), returns alpha, replaces s by p.
template <int GM>
KVTILE_DEVICE void online_softmax(float (&s)[GM][4], float (&m)[2], float (&l)[2], float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < GM; ++i) {
    mx[0] = fmaxf(mx[0], fmaxf(s[i][0], s[i][2]));
    mx[1] = fmaxf(mx[1], fmaxf(s[i][1], s[i][3]));
  }
#pragma unroll
  for (int qq = 0; qq < 2; ++qq) {
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) mx[qq] = fmaxf(mx[qq], __shfl_xor_sync(0xffffffffu, mx[qq], o));
    const float mn = fmaxf(m[qq], mx[qq]);
    alpha[qq] = mn == -INFINITY ? 1.0f : softmax_exp2(m[qq] - mn);
    m[qq] = mn;
    mx[qq] = mn == -INFINITY ? 0.0f : mn;  // subtrahend
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < GM; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float pv = softmax_exp2(s[i][c] - mx[c & 1]);
      s[i][c] = pv;
      sum[c & 1] += pv;
    }
  l[0] = fmaf(l[0], alpha[0], sum[0]);
  l[1] = fmaf(l[1], alpha[1], sum[1]);
}

// Packed layout: online softmax over s[i][h] (tokens of M-rows r, r + 8, the
// thread's one query t), same contract as online_softmax.
template <int GM>
KVTILE_DEVICE void online_softmax1(float (&s)[GM][2], float (&m)[1], float (&l)[1], float& alpha) {
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < GM; ++i) mx = fmaxf(mx, fmaxf(s[i][0], s[i][1]));
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float mn = fmaxf(m[0], mx);
  alpha = mn == -INFINITY ? 1.0f : softmax_exp2(m[0] - mn);
  m[0] = mn;
  const float sub = mn == -INFINITY ? 0.0f : mn;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < GM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float pv = softmax_exp2(s[i][h] - sub);
      s[i][h] = pv;
      sum += pv;
    }
  l[0] = fmaf(l[0], alpha, sum);
}

// Packed layout: P (already scaled) -> PV B operands, each value as fp16 hi + lo
// in columns (2t, 2t + 1) of the movmatrix input, so that after the transpose
// lane (r, t) holds part r & 1 of query r / 2 for K rows 2t, 2t + 1 (+ 8).
template <int GM>
KVTILE_DEVICE void p_to_b_split(const float (&s)[GM][2], std::uint32_t (&b0)[GM], std::uint32_t (&b1)[GM]) {
#pragma unroll
  for (int i = 0; i < GM; ++i) {
    const std::uint32_t hi = pack_half2(s[i][0], s[i][1]);
    float h0, h1;
    half2_to_float2(hi, h0, h1);
    const std::uint32_t lo = pack_half2(s[i][0] - h0, s[i][1] - h1);
    b0[i] = movmatrix_trans(prmt(hi, lo, 0x5410u));  // (hi, lo) of the M-row r token
    b1[i] = movmatrix_trans(prmt(hi, lo, 0x7632u));  // (hi, lo) of the M-row r + 8 token
  }
}

// Packs P (already scaled) of QK m-tile i into the PV B operands via movmatrix.
template <int GM>
KVTILE_DEVICE void p_to_b(const float (&s)[GM][4], std::uint32_t (&b0)[GM], std::uint32_t (&b1)[GM]) {
#pragma unroll
  for (int i = 0; i < GM; ++i) {
    b0[i] = movmatrix_trans(pack_half2(s[i][0], s[i][1]));
    b1[i] = movmatrix_trans(pack_half2(s[i][2], s[i][3]));
  }
}

// ---------------------------------------------------------------- fp16 tile
// K, V: GT x D fp16, token-major (shared or global memory); tokens >= n_valid
// are masked (their V is never read). H warps share the tile: warp `sub` takes
// the MMA token blocks i in [sub * GM / H, (sub + 1) * GM / H). Swz: the QK
// channel and PV output orders of the quantized tiles (tile_layout.cuh; the
// tile's own token order is free, it does not outlive the tile).
template <int D, int GT, int H = 1, bool Swz = false, bool PK = false>
KVTILE_DEVICE void fp16_tile(const std::uint16_t* K, const std::uint16_t* V, int n_valid, int lo, float cap, const uint4* qf,
                             const float (&nfq)[2], warp_state<D, PK ? 1 : 2>& st, int sub = 0) {
  using OO = out_order<D, Swz>;
  constexpr int E = GT / 8, GM = GT / 16 / H, KT = D / 16,
                MC = OO::OC > 1 ? OO::MCo : ((D / 16) < 8 ? (D / 16) : 8), NCH = (D / 16) / MC, CE = 2 * MC;
  const int lane = threadIdx.x & 31, r = lane >> 2, t = lane & 3;
  float s[GM][4];
#pragma unroll
  for (int i = 0; i < GM; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    const int c0 = key_order<D, Swz>::chan0(kk, t);
    std::uint32_t b[4];
    if constexpr (PK) {
      const uint2 bq = packed_qf(qf, kk, r, t);
      b[0] = bq.x;
      b[1] = bq.y;
    } else {
      const uint4 bq = qf[qf_index(kk, r, t)];
      b[0] = bq.x;
      b[1] = bq.y;
      b[2] = bq.z;
      b[3] = bq.w;
    }
#pragma unroll
    for (int i = 0; i < GM; ++i) {
      const int T0 = E * r + 2 * (sub * GM + i);
      const uint2 k0 = *reinterpret_cast<const uint2*>(K + T0 * D + c0);
      const uint2 k1 = *reinterpret_cast<const uint2*>(K + (T0 + 1) * D + c0);
      mma_f16(s[i], k0.x, k1.x, k0.y, k1.y, b[0], b[1]);
      if constexpr (split_query && !PK) mma_f16(s[i], k0.x, k1.x, k0.y, k1.y, b[2], b[3]);
    }
  }
  std::uint32_t pb0[GM], pb1[GM];
  float alpha[2];
  if constexpr (PK) {
    float sc[GM][2];
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = E * r + 2 * (sub * GM + i) + h;
        sc[i][h] = tok < n_valid ? modify_score((s[i][2 * h] + s[i][2 * h + 1]) * nfq[0], tok, lo, cap) : -INFINITY;
      }
    online_softmax1<GM>(sc, st.m, st.l, alpha[0]);
    p_to_b_split<GM>(sc, pb0, pb1);
  } else {
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tok = E * r + 2 * (sub * GM + i) + (c >> 1);
        s[i][c] = tok < n_valid ? modify_score(s[i][c] * nfq[c & 1], tok, lo, cap) : -INFINITY;
      }
    online_softmax<GM>(s, st.m, st.l, alpha);
    p_to_b<GM>(s, pb0, pb1);
#pragma unroll
    for (int m = 0; m < D / 16; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) st.o[m][c] *= alpha[c & 1];
  }
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    float acc[PK ? MC : 1][4];  // packed: this chunk's (hi, lo) columns, summed into st.o below
    if constexpr (PK) {
#pragma unroll
      for (int jj = 0; jj < MC; ++jj) acc[jj][0] = acc[jj][1] = acc[jj][2] = acc[jj][3] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < GM; ++i) {
      const int tA = E * 2 * t + 2 * (sub * GM + i), tB = tA + E;
      const int toks[4] = {tA, tB, tA + 1, tB + 1};
      std::uint32_t w[4][CE / 2];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (toks[u] < n_valid) {
          load_words<2 * CE>(reinterpret_cast<const std::uint8_t*>(V + toks[u] * D + OO::template run<NCH, CE>(ch, r)),
                             w[u]);
        } else {
#pragma unroll
          for (int x = 0; x < CE / 2; ++x) w[u][x] = 0u;
        }
      }
#pragma unroll
      for (int jj = 0; jj < MC; ++jj) {
        const std::uint32_t a0 = prmt(w[0][jj], w[1][jj], 0x5410u), a1 = prmt(w[0][jj], w[1][jj], 0x7632u),
                            a2 = prmt(w[2][jj], w[3][jj], 0x5410u), a3 = prmt(w[2][jj], w[3][jj], 0x7632u);
        if constexpr (PK) {
          mma_f16(acc[jj], a0, a1, a2, a3, pb0[i], pb1[i]);
        } else {
          mma_f16(st.o[ch * MC + jj], a0, a1, a2, a3, pb0[i], pb1[i]);
        }
      }
    }
    if constexpr (PK) {
#pragma unroll
      for (int jj = 0; jj < MC; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& o = st.o[ch * MC + jj][h];
          o = fmaf(alpha[0], o, acc[jj][2 * h] + acc[jj][2 * h + 1]);
        }
    }
  }
}

// ---------------------------------------------------------------- quantized tile

// N consecutive scale entries of a record field -> floats (E4M3 without its
// vector scale, or fp16 times `mult`).
template <bool Fp8, int N>
KVTILE_DEVICE void load_scales(const std::uint8_t* p, float* f, float mult) {
  if constexpr (Fp8) {
    std::uint32_t w[N / 4];
    load_words<N>(p, w);
#pragma unroll
    for (int i = 0; i < N / 4; ++i) e4m3x4_to_float(w[i], f + 4 * i);
  } else {
    std::uint32_t w[N / 2];
    load_words<2 * N>(p, w);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      half2_to_float2(w[i], f[2 * i], f[2 * i + 1]);
      f[2 * i] *= mult;
      f[2 * i + 1] *= mult;
    }
  }
}

template <int N>
KVTILE_DEVICE void load_halves(const std::uint8_t* p, float* f) {
  std::uint32_t w[N / 2];
  load_words<2 * N>(p, w);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) half2_to_float2(w[i], f[2 * i], f[2 * i + 1]);
}

// The power of two f with m * f in [256, 512) for the warp-wide maximum m of
// the lanes' amax (1 when every value is 0).
KVTILE_DEVICE float pow2_norm_of_warp_max(float amax) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!(amax > 0.0f)) return 1.0f;
  int e;
  frexpf(amax, &e);
  return ldexpf(1.0f, 9 - e);
}

// fp16_scales: power of two f with max(a) * f in [256, 512) over n fp16 entries.
KVTILE_DEVICE float fp16_field_norm(const std::uint8_t* p, int n) {
  float amax = 0.0f;
  for (int i = threadIdx.x & 31; i < n; i += 32) {
    float lo, hi;
    half2_to_float2(static_cast<std::uint32_t>(reinterpret_cast<const std::uint16_t*>(p)[i]), lo, hi);
    amax = fmaxf(amax, fabsf(lo));
  }
  return pow2_norm_of_warp_max(amax);
}

// fp16_field_norm over the D entries of a field stored as 4 quarters of D/4
// entries, quarter k at p + k * qstride bytes (qstride = 0: contiguous).
KVTILE_DEVICE float fp16_field_norm_quartered(const std::uint8_t* p, std::size_t qstride, int n) {
  if (qstride == 0) return fp16_field_norm(p, n);
  float amax = 0.0f;
  const int q = n / 4;
  for (int i = threadIdx.x & 31; i < n; i += 32) {
    float lo, hi;
    const std::uint8_t* e = p + (i / q) * qstride + 2 * (i % q);
    half2_to_float2(static_cast<std::uint32_t>(*reinterpret_cast<const std::uint16_t*>(e)), lo, hi);
    amax = fmaxf(amax, fabsf(lo));
  }
  return pow2_norm_of_warp_max(amax);
}

// Warps per record: two when each half of a thread's token run is a whole
// number of 16-bit code chunks (halves the per-warp tile state, so twice the
// warps fit in the register file).
#ifndef KVTILE_ATTENTION_PAIR
#define KVTILE_ATTENTION_PAIR 0  // 1: two warps per record (16 warps x 128 registers); 0 measured 5-8% faster (H200, session 2)
#endif
template <class Config>
constexpr int warps_per_record() {
  return KVTILE_ATTENTION_PAIR && (Config::tile_tokens / 16) % 2 == 0 && (Config::tile_tokens / 16) * Config::key_bits % 16 == 0 ? 2 : 1;
}

// Whether the quantized kernel of (Config, Packer) uses the conflict-free stage
// layout (tile_layout.cuh): with KVTILE_ATTENTION_SWIZZLE, unless its padding
// would cost a ring (a record in flight per stage pair) under the 227 KB of
// shared memory; of the presets only k4v2_g128 D = 256 fp16_scales (4 rings,
// 256 bytes to spare) keeps the previous layout.
template <class Config, class Packer, int Stages>
constexpr bool quant_swizzled() {
  if constexpr (!conflict_free_layout) {
    return false;
  } else {
    constexpr int r0 = warps_for<Packer::template layout<Config>::bytes, Stages, KVTILE_ATTENTION_MAX_RINGS>();
    using SL = stage_layout<Config, Packer, warps_per_record<Config>(), true>;
    return fit_rings<Config::head_dim, Stages, SL::bytes, keep_qn<Packer>(), r0>() == r0;
  }
}

// One record, or the part sub (of H) of it: MMA token blocks i in
// [sub * GM / H, (sub + 1) * GM / H). `rec` is the stage, laid out by
// stage_layout<..., Swz> (tile_layout.cuh: code pieces with padding so that
// every code load is free of bank conflicts; Swz = false: the record as is).
//
// Who reads what (lane = 4 r + t; E = G/8 tokens per row group, EH = E/H):
//  - QK, tokens on M: lane r owns the EH key tokens token_base(r, sub) ..
//    + EH - 1 (MMA block i: M-row r = token base + 2i, row r + 8 = base + 2i + 1);
//    lane t owns channels chan0(kk, t) .. + 3 at k-step kk (key_order).
//  - PV, tokens on K: lane t's tokens are those of M-rows 2t, 2t+1 (+8) of the
//    QK blocks (movmatrix): tA = token_base(2t) + 2i, tB = token_base(2t+1) + 2i,
//    tA + 1, tB + 1; lane r owns the output channels out_order::run(ch, r) ..
//    + CE - 1 of chunk ch.
template <class Config, class Packer, int H, bool Swz, bool PK = false>
KVTILE_DEVICE void quant_tile(const std::uint8_t* rec, const float* qn, const uint4* qf, const float (&nfq)[2],
                              warp_state<Config::head_dim, PK ? 1 : 2>& st, int sub, int lo, float cap) {
  using SL = stage_layout<Config, Packer, H, Swz>;
  using KO = key_order<Config::head_dim, Swz>;
  using OO = out_order<Config::head_dim, Swz>;
  constexpr bool fp8 = std::is_same_v<Packer, fp8_scales>;
  constexpr int D = Config::head_dim, G = Config::tile_tokens, KB = Config::key_bits, VB = Config::value_bits;
  // EH, GM: this warp's share of a row group's tokens / of the MMA token blocks.
  constexpr int EH = SL::EH, GM = G / 16 / H, KT = D / 16, MC = (D / 16) < 4 ? (D / 16) : 4, NCH = (D / 16) / MC,
                CE = 2 * MC;
  constexpr int q_stride = D + 16;
  constexpr int krow = G * KB / 8, ksh = EH * KB / 8, vrow = D * VB / 8, vsb = CE * VB / 8;
  constexpr int kwords = ksh >= 4 ? ksh / 4 : 1, vwords = vsb >= 4 ? vsb / 4 : 1;
  constexpr int sb = fp8 ? 1 : 2;  // bytes per scale entry
  // Raw (subnormal) codes, see raw_codes: keys unless their scale is folded
  // into the conversion, values in the packed layout. Values otherwise are
  // converted centered: x - vmid.
  constexpr bool raw_keys = raw_codes && !(fp8 && fold_key_scale);
  constexpr bool raw_values = raw_codes && PK;
  constexpr float vmid = raw_values ? 0.0f : static_cast<float>(1 << (VB - 1));
  const int lane = threadIdx.x & 31, r = lane >> 2, t = lane & 3;
  const int tok0 = SL::token_base(r, sub);  // first token of this thread's key/scale run

  float vs_ak, vs_t, vs_c, vs_av, f_k = 1.0f, f_v = 1.0f;
  if constexpr (fp8) {
    const float4 vs = *reinterpret_cast<const float4*>(rec + SL::vector_scales_s);
    vs_ak = vs.x;  // vector_field order: key_scale, key_token_scale, value_channel_scale, value_scale
    vs_t = vs.y;
    vs_c = vs.z;
    vs_av = vs.w;
  } else {
    f_k = fp16_field_norm_quartered(rec + SL::key_scale_s, SL::key_scale_q, D);
    f_v = fp16_field_norm(rec + SL::value_scale_s, G);
    vs_ak = 1.0f / f_k;
    vs_av = 1.0f / f_v;
    vs_t = 1.0f;
    vs_c = 1.0f;
  }

  // ---- S^T = codes^T (q a)^T: tokens on M, channels on K, queries on N
  float s[GM][4];
#pragma unroll
  for (int i = 0; i < GM; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
  // This lane's quarter of the key rows (at its token run), of a_K and of z_K;
  // channel chan0(kk, t) is row / entry cw = chan0 - first(t) of the quarter.
  const std::uint8_t* kc = rec + SL::key_codes_s + t * SL::key_codes_q + tok0 * KB / 8;
  const std::uint8_t* ka = rec + SL::key_scale_s + t * SL::key_scale_q;
  const std::uint8_t* kz = rec + SL::key_zero_s + t * SL::key_zero_q;
  float bq0, bq1;  // beta = sum_d q z for queries 2t, 2t+1
  if constexpr (fp8 && fold_key_scale) {
    // The E4M3 key scale goes into the code conversion (exact, a / 8 per code, see
    // pair_convert_scaled), the B operand is the query itself (hi/lo fragments
    // made once per CTA), and beta runs on the tensor cores: A = the zero points
    // in every row, so every row of the accumulator is beta (no shuffles).
    float bacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#ifdef KVTILE_ATTENTION_QK_UNROLL
#pragma unroll qk_unroll
#else
#pragma unroll
#endif
    for (int kk = 0; kk < KT; ++kk) {
      const int cw = KO::chan0(kk, t) - KO::first(t);  // 4 channels: rows / entries cw .. cw + 3 of the quarter
      uint4 bq;
      if constexpr (PK) {
        const uint2 b = packed_qf(qf, kk, r, t);
        bq = make_uint4(b.x, b.y, 0u, 0u);
      } else {
        bq = qf[qf_index(kk, r, t)];
      }
      const std::uint32_t aw = *reinterpret_cast<const std::uint32_t*>(ka + cw);
      const uint2 zw = *reinterpret_cast<const uint2*>(kz + 2 * cw);
      mma_f16(bacc, zw.x, zw.x, zw.y, zw.y, bq.x, bq.y);
      if constexpr (split_query && !PK) mma_f16(bacc, zw.x, zw.x, zw.y, zw.y, bq.z, bq.w);
      std::uint32_t x[4][kwords];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_words<ksh>(kc + (cw + u) * krow, x[u]);
      std::uint32_t r01[EH], r23[EH];
      pair_convert_scaled<KB, EH>(x[0], x[1], e4m3x2_to_half2(static_cast<std::uint16_t>(aw)), r01);
      pair_convert_scaled<KB, EH>(x[2], x[3], e4m3x2_to_half2(static_cast<std::uint16_t>(aw >> 16)), r23);
#pragma unroll
      for (int i = 0; i < GM; ++i) {
        mma_f16(s[i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], bq.x, bq.y);
        if constexpr (split_query && !PK)
          mma_f16(s[i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], bq.z, bq.w);
      }
    }
    bq0 = PK ? bacc[0] + bacc[1] : bacc[0];  // packed: the hi and lo columns of query t
    bq1 = bacc[1];
    vs_ak *= 8.0f;  // the codes came out as x a / 8
  } else {
    float beta = 0.0f;
    const float lo_part = (r & 1) ? 1.0f : 0.0f;  // packed: odd r holds the lo part
#ifdef KVTILE_ATTENTION_QK_UNROLL
#pragma unroll qk_unroll
#else
#pragma unroll
#endif
    for (int kk = 0; kk < KT; ++kk) {
      const int c0 = KO::chan0(kk, t), cw = c0 - KO::first(t);
      // packed: this lane's B column is part r & 1 of query r / 2 (and so is its beta)
      const float4 qv = *reinterpret_cast<const float4*>(qn + (PK ? r >> 1 : r) * q_stride + KO::qpad(c0));
      float a[4], z[4];
      load_scales<fp8, 4>(ka + sb * cw, a, f_k);
      load_halves<4>(kz + 2 * cw, z);
      beta = fmaf(qv.x, z[0], beta);
      beta = fmaf(qv.y, z[1], beta);
      beta = fmaf(qv.z, z[2], beta);
      beta = fmaf(qv.w, z[3], beta);
      std::uint32_t b[4];
      if constexpr (PK) {
        std::uint32_t bp[2];
        split_b_part(qv.x * a[0], qv.y * a[1], qv.z * a[2], qv.w * a[3], lo_part, bp);
        b[0] = bp[0];
        b[1] = bp[1];
      } else {
        split_b(qv.x * a[0], qv.y * a[1], qv.z * a[2], qv.w * a[3], b);
      }
      std::uint32_t x[4][kwords];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_words<ksh>(kc + (cw + u) * krow, x[u]);
      std::uint32_t r01[EH], r23[EH];
      if constexpr (raw_keys) {
        pair_extract<KB, EH>(x[0], x[1], r01);
        pair_extract<KB, EH>(x[2], x[3], r23);
      } else {
        pair_convert<KB, EH>(x[0], x[1], r01);
        pair_convert<KB, EH>(x[2], x[3], r23);
      }
#pragma unroll
      for (int i = 0; i < GM; ++i) {
        mma_f16(s[i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], b[0], b[1]);
        if constexpr (split_query && !PK)
          mma_f16(s[i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], b[2], b[3]);
      }
    }
    // beta: thread (r, t) summed query r (packed: r / 2) over its channels; reduce
    // over t, move to queries 2t, 2t+1 (packed: query t, from lane 8t, r = 2t).
    beta += __shfl_xor_sync(0xffffffffu, beta, 1);
    beta += __shfl_xor_sync(0xffffffffu, beta, 2);
    bq0 = __shfl_sync(0xffffffffu, beta, 8 * t);
    bq1 = __shfl_sync(0xffffffffu, beta, 8 * t + 4);
  }
  // ---- scores: t[g] (vs_ak S + beta) nf, then the online softmax. Packed
  // layout: score of (token of M-row r / r + 8, query t) = hi + lo columns.
  float sc[PK ? GM : 1][2];
  float alpha[2];  // packed: alpha[0]
  {
    float tk[EH];
    load_scales<fp8, EH>(rec + SL::key_token_scale_s + sb * tok0, tk, 1.0f);
    const float n0 = nfq[0] * vs_t, n1 = nfq[1] * vs_t;
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float tt = tk[2 * i + h];
        // token 2i + h of the run: raw codes carry its position factor
        const float ak = raw_keys ? vs_ak * raw_unscale<KB>(2 * i + h) : vs_ak;
        if constexpr (PK) {
          sc[i][h] = fmaf(ak, s[i][2 * h] + s[i][2 * h + 1], bq0) * (tt * n0);
        } else {
          s[i][2 * h + 0] = fmaf(ak, s[i][2 * h + 0], bq0) * (tt * n0);
          s[i][2 * h + 1] = fmaf(ak, s[i][2 * h + 1], bq1) * (tt * n1);
        }
      }
  }
  // Window boundary tile (tokens below lo) and soft-cap: off the common path.
  if (lo > 0 || cap > 0.0f) {
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = tok0 + 2 * i + h;
        if constexpr (PK) {
          sc[i][h] = modify_score(sc[i][h], tok, lo, cap);
        } else {
          s[i][2 * h + 0] = modify_score(s[i][2 * h + 0], tok, lo, cap);
          s[i][2 * h + 1] = modify_score(s[i][2 * h + 1], tok, lo, cap);
        }
      }
  }
  if constexpr (PK) {
    online_softmax1<GM>(sc, st.m, st.l, alpha[0]);
  } else {
    online_softmax<GM>(s, st.m, st.l, alpha);
  }

  // ---- P' = p * a_V (per token), zsum = sum p (z_V + vs_av a_V vmid) (the centered codes' offset)
  constexpr int NQ = PK ? 1 : 2;
  float zsum[2] = {0.0f, 0.0f};
  {
    float av[EH], zv[EH];
    load_scales<fp8, EH>(rec + SL::value_scale_s + sb * tok0, av, f_v);
    load_halves<EH>(rec + SL::value_zero_s + 2 * tok0, zv);
    if constexpr (!raw_values) {
      const float vm = vs_av * vmid;
#pragma unroll
      for (int e = 0; e < EH; ++e) zv[e] = fmaf(vm, av[e], zv[e]);
    }
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int c = 0; c < 2 * NQ; ++c) {
        const int e = 2 * i + c / NQ;  // M-row r + 8 (c / NQ) of block i
        float* pv;
        if constexpr (PK) {
          pv = &sc[i][c];
        } else {
          pv = &s[i][c];
        }
        zsum[c % NQ] = fmaf(*pv, zv[e], zsum[c % NQ]);
        *pv *= av[e];
      }
#pragma unroll
    for (int qq = 0; qq < NQ; ++qq)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) zsum[qq] += __shfl_xor_sync(0xffffffffu, zsum[qq], o);
  }
  std::uint32_t pb0[GM], pb1[GM];
  if constexpr (PK) {
    p_to_b_split<GM>(sc, pb0, pb1);
  } else {
    p_to_b<GM>(s, pb0, pb1);
  }

  // ---- O^T += c_V * (vs_av * (codes - vmid)^T P'^T + zsum): channels on M, tokens on K
  // Lane t's PV tokens tA = ta0 + 2i, tB = tA + dAB (+1 each) lie in one value piece.
  const int ta0 = SL::token_base(2 * t, sub);
  constexpr int dAB = SL::token_base(1, 0) - SL::token_base(0, 0);  // token_base(2t+1) - token_base(2t)
  const int vk = SL::value_piece(ta0);  // 4 sub + t (Swz) or 0
  const std::uint8_t* vc =
      rec + SL::value_codes_s + vk * SL::value_codes_q + (ta0 - vk * SL::vpiece_tokens) * vrow;
  const std::uint8_t* cvp = rec + SL::value_channel_scale_s;
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    float acc[MC][4];
#pragma unroll
    for (int j = 0; j < MC; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int run = OO::template run<NCH, CE>(ch, r);  // first output channel of this lane's run
    const int coff = run * VB / 8;
#pragma unroll
    for (int i = 0; i < GM; ++i) {
      const int tA = 2 * i, tB = tA + dAB;  // relative to ta0
      std::uint32_t x[4][vwords];
      load_words<vsb>(vc + tA * vrow + coff, x[0]);
      load_words<vsb>(vc + tB * vrow + coff, x[1]);
      load_words<vsb>(vc + (tA + 1) * vrow + coff, x[2]);
      load_words<vsb>(vc + (tB + 1) * vrow + coff, x[3]);
      std::uint32_t rab[CE], rcd[CE];
      if constexpr (raw_values) {
        pair_extract<VB, CE>(x[0], x[1], rab);
        pair_extract<VB, CE>(x[2], x[3], rcd);
      } else {
        pair_convert<VB, CE, true>(x[0], x[1], rab);
        pair_convert<VB, CE, true>(x[2], x[3], rcd);
      }
#pragma unroll
      for (int j = 0; j < MC; ++j) mma_f16(acc[j], rab[2 * j], rab[2 * j + 1], rcd[2 * j], rcd[2 * j + 1], pb0[i], pb1[i]);
    }
    float cv[CE];
    load_scales<fp8, CE>(cvp + sb * run, cv, 1.0f);
    // packed: the (hi, lo) columns of query t are summed; st.o[m][h] is M-row r + 8 h
#pragma unroll
    for (int j = 0; j < MC; ++j)
#pragma unroll
      for (int c = 0; c < 2 * NQ; ++c) {
        const float cc = cv[2 * j + c / NQ] * vs_c;
        // channel 2j + c/NQ of the run: raw codes carry its position factor
        const float va = raw_values ? vs_av * raw_unscale<VB>(2 * j + c / NQ) : vs_av;
        float a;
        if constexpr (PK) {
          a = acc[j][2 * c] + acc[j][2 * c + 1];
        } else {
          a = acc[j][c];
        }
        float& o = st.o[ch * MC + j][c];
        o = fmaf(alpha[c % NQ], o, cc * fmaf(va, a, zsum[c % NQ]));
      }
  }
}

// ---------------------------------------------------------------- epilogue
// Merges the warps of a CTA and writes the split's partial (m, l, O) in the
// rotated frame (unnormalized, relative to m) to the workspace. Swz: the
// accumulators are in out_order<D, true> (tile_layout.cuh).
template <int D, int W, bool Swz = false, int NQ = 2>
KVTILE_DEVICE void write_partial(warp_state<D, NQ>& st, std::uint8_t* scratch, const kernel_params& p, int qg,
                                 int slot) {
  constexpr int os = D + 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, t = lane & 3;
#pragma unroll
  for (int qq = 0; qq < NQ; ++qq)
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) st.l[qq] += __shfl_xor_sync(0xffffffffu, st.l[qq], o);
  float* wo = reinterpret_cast<float*>(scratch);
  float* wm = wo + W * max_group * os;
  float* wl = wm + W * max_group;
  __syncthreads();  // every warp is done with its stages
  // thread (r, t) holds queries NQ t + q, q < NQ (o[m][NQ h + q]: M-row r + 8 h)
#pragma unroll
  for (int m = 0; m < D / 16; ++m)
#pragma unroll
    for (int c = 0; c < 2 * NQ; ++c)
      wo[(warp * max_group + NQ * t + c % NQ) * os + out_order<D, Swz>::chan(r, m, c / NQ)] = st.o[m][c];
  if (r == 0) {
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      wm[warp * max_group + NQ * t + q] = st.m[q];
      wl[warp * max_group + NQ * t + q] = st.l[q];
    }
  }
  __syncthreads();
  const int nq = min(max_group, p.group - qg * max_group);
  for (int idx = threadIdx.x; idx < nq * D; idx += W * 32) {
    const int q = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, wm[w * max_group + q]);
    float o = 0.0f, l = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float wmv = wm[w * max_group + q];
        if (wmv == -INFINITY) continue;
        const float f = exp2f(wmv - mx);
        o = fmaf(wo[(w * max_group + q) * os + d], f, o);
        l = fmaf(wl[w * max_group + q], f, l);
      }
    }
    const std::int64_t r = static_cast<std::int64_t>(slot) * p.slot_rows + q;
    p.ws_o[r * D + d] = o;
    if (d == 0) {
      p.ws_ml[2 * r] = mx;
      p.ws_ml[2 * r + 1] = l;
    }
  }
}

// Warp loop shared by both kernels: tiles j in [j0, j1) of one sequence. The
// W = R * H warps form R rings of H warps; ring w takes tiles j0 + w, j0 + w + R,
// ..., every warp of the ring runs every tile of it (each its part).
// stage_src(j, dst, bar) issues the copies of an async tile (nothing if the tile
// is not staged); run(j, stage, bar, parity) processes tile j and returns
// whether it was staged. Lane 0 of the ring's warp 0 issues the copies; with
// H = 2 it waits on the stage's "empty" mbarrier, which the other warp arrives
// on when it is done with the stage.
template <int R, int H, int Stages, class StageFn>
KVTILE_DEVICE void ring_prologue(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* bars,
                                 StageFn&& stage_src) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ring = warp / H, sub = warp % H;
  std::uint8_t* my = stages + static_cast<std::size_t>(ring) * Stages * stage_bytes;
#pragma unroll
  for (int k = 0; k < Stages; ++k) {
    const int j = j0 + ring + k * R;
    if (j < j1 && sub == 0 && lane == 0) stage_src(j, my + k * stage_bytes, bars + ring * Stages + k);
  }
}

// Prologue = false: the caller has run ring_prologue already.
template <int R, int H, int Stages, bool Prologue = true, class StageFn, class RunFn>
KVTILE_DEVICE void warp_loop(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* bars,
                             StageFn&& stage_src, RunFn&& run) {
  static_assert(H == 1 || H == 2, "one or two warps per ring");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ring = warp / H, sub = warp % H;
  std::uint8_t* my = stages + static_cast<std::size_t>(ring) * Stages * stage_bytes;
  std::uint64_t* full = bars + ring * Stages;
  std::uint64_t* empty = bars + (R + ring) * Stages;
  std::uint32_t parity = 0, eparity = 0;
  if constexpr (Prologue) ring_prologue<R, H, Stages>(j0, j1, stages, stage_bytes, bars, stage_src);
  for (int k = 0;; ++k) {
    const int j = j0 + ring + k * R;
    if (j >= j1) break;
    const int sidx = k % Stages;
    std::uint8_t* buf = my + sidx * stage_bytes;
    const bool staged = run(j, buf, full + sidx, (parity >> sidx) & 1u);
    if (staged) parity ^= 1u << sidx;
    __syncwarp();
    const int jn = j + Stages * R;
    if constexpr (H > 1) {
      if (sub != 0) {
        if (staged && lane == 0) mbar_arrive(empty + sidx);
        continue;
      }
    }
    if (jn < j1 && lane == 0) {
      if constexpr (H > 1) {
        if (staged) mbar_wait(empty + sidx, (eparity >> sidx) & 1u);
      }
      fence_proxy_async();
      stage_src(jn, buf, full + sidx);
    }
    if (staged) eparity ^= 1u << sidx;
  }
}

// Stage pool (KVTILE_ATTENTION_POOL): S stages shared by W warps (S > W, one
// warp per record). Local tile k = j - j0 goes to warp k % W and stage k % S.
// The warp that finishes tile k issues tile k + S into the stage it just freed,
// so S - W records are in flight beyond the W being computed, with fewer than 2
// stages per warp. tickets[s] counts the tiles released into stage s (issued,
// or skipped when not staged): the consumer of tile k (use u = k / S of stage
// s) first waits for tickets[s] > u, which orders it after the consumer of
// tile k - S and so after that tile's load, so the full barrier's phase parity
// (the staged uses before k; only tile 0 can be an unstaged one, the sink)
// cannot alias an older phase.
// Ticket accesses are shared-memory atomics with CTA fences (release: fence,
// then the atomic store; acquire: the atomic load, then a fence), which
// compute-sanitizer's racecheck treats as synchronized.
KVTILE_DEVICE std::uint32_t ticket_acquire(std::uint32_t* p) {
  const std::uint32_t v = atomicAdd(p, 0u);
  __threadfence_block();
  return v;
}
KVTILE_DEVICE void ticket_release(std::uint32_t* p, std::uint32_t v) {
  __threadfence_block();
  atomicExch(p, v);
}

template <int W, int S, class StageFn>
KVTILE_DEVICE void pool_prologue(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* full,
                                 std::uint32_t* tickets, StageFn&& stage_src) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane != 0) return;
  for (int k = warp; k < S; k += W) {
    if (j0 + k < j1) stage_src(j0 + k, stages + k * stage_bytes, full + k);
    ticket_release(tickets + k, 1u);
  }
}

template <int W, int S, class StageFn, class RunFn>
KVTILE_DEVICE void pool_loop(int j0, int j1, bool skip0, std::uint8_t* stages, std::size_t stage_bytes,
                             std::uint64_t* full, std::uint32_t* tickets, StageFn&& stage_src, RunFn&& run) {
  static_assert(S > W, "a pool has more stages than warps");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = j1 - j0;
  for (int k = warp; k < n; k += W) {
    const int sidx = k % S, u = k / S;
    if (lane == 0)
      while (ticket_acquire(tickets + sidx) <= static_cast<std::uint32_t>(u)) {
      }
    __syncwarp();
    const int staged_before = u - (skip0 && sidx == 0 && u > 0 ? 1 : 0);
    std::uint8_t* buf = stages + sidx * stage_bytes;
    run(j0 + k, buf, full + sidx, static_cast<std::uint32_t>(staged_before) & 1u);
    __syncwarp();
    if (lane == 0 && k + S < n) {
      fence_proxy_async();
      stage_src(j0 + k + S, buf, full + sidx);
      ticket_release(tickets + sidx, static_cast<std::uint32_t>(u + 2));
    }
  }
}

// The chunk a CTA runs: from the plan's work list, or (no plan) from the grid
// (num_splits, units, num_seqs): split blockIdx.x of unit blockIdx.y of
// sequence blockIdx.z, the sequence's visible tiles cut into num_splits ranges.
struct chunk_ref {
  int seq, u, slot, j0, j1;  // j0, j1: requested tiles (clamped to the device length by the caller)
};
KVTILE_DEVICE int chunk_count(const kernel_params& p, int& first) {
  if (p.work) {
    first = p.cta_begin[blockIdx.x];
    return p.cta_begin[blockIdx.x + 1] - first;
  }
  first = 0;
  return 1;
}
KVTILE_DEVICE chunk_ref chunk_at(const kernel_params& p, int ci, const std::int32_t* seq_lens, int T) {
  chunk_ref c;
  if (p.work) {
    const work_item w = p.work[ci];
    c.seq = w.unit / p.units;
    c.u = w.unit % p.units;
    c.slot = w.slot;
    c.j0 = w.j0;
    c.j1 = w.j1;
  } else {
    c.seq = blockIdx.z;
    c.u = blockIdx.y;
    c.slot = (blockIdx.z * p.units + blockIdx.y) * p.num_splits + blockIdx.x;
    const tile_span ts = tile_range(seq_lens[c.seq], T, p.max_len, p.window_left);
    const int n = ts.n_tiles - ts.jlo, per = (n + p.num_splits - 1) / p.num_splits;
    c.j0 = min(ts.n_tiles, ts.jlo + static_cast<int>(blockIdx.x) * per);
    c.j1 = min(ts.n_tiles, c.j0 + per);
  }
  return c;
}

// (Re)initializes the CTA's mbarriers (and pool tickets) before a chunk; the
// previous chunk's phases are all complete (every issued copy was waited for).
template <int NBars, int Pool>
KVTILE_DEVICE void init_barriers(std::uint64_t* bars, std::uint32_t* tickets, bool again) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < NBars; ++i) {
      if (again) mbar_inval(bars + i);
      mbar_init(bars + i, 1);
    }
    for (int i = 0; i < Pool; ++i) tickets[i] = 0u;
    mbar_init_fence();
  }
}

template <class Config, class Packer, class QT, int R, int Stages, bool PK, int Pool = 0>
__global__ void __launch_bounds__(R * warps_per_record<Config>() * 32, 1)
    quant_decode_kernel(const __grid_constant__ paged_cache_view cache, const __grid_constant__ kernel_params p) {
  constexpr int D = Config::head_dim, G = Config::tile_tokens, H = warps_per_record<Config>(), W = R * H;
  constexpr bool Swz = quant_swizzled<Config, Packer, Stages>();
  static_assert(Pool == 0 || (H == 1 && Stages == 1 && Pool > W), "a stage pool: one warp per record, > W stages");
  using SL = stage_layout<Config, Packer, H, Swz>;  // the record in a stage (code pieces, padding)
  // Pool: R x Stages = Pool stages; the 2 Pool barrier slots are Pool full barriers and the tickets.
  using plan = smem_plan<D, W, Stages, SL::bytes, (Pool > 0 ? Pool : R), keep_qn<Packer>()>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  float* qn = reinterpret_cast<float*>(smem + plan::qn);
  float* nf = reinterpret_cast<float*>(smem + plan::nf);
  uint4* qf = reinterpret_cast<uint4*>(smem + plan::qf);
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(smem + plan::bars);
  std::uint8_t* stages = smem + plan::stages;
  std::uint32_t* tickets = reinterpret_cast<std::uint32_t*>(bars + Pool);
  constexpr int nbars = Pool > 0 ? Pool : 2 * R * Stages;

  int first = 0;
  const int count = chunk_count(p, first);
  for (int ci = first; ci < first + count; ++ci) {
    const chunk_ref c = chunk_at(p, ci, cache.seq_lens, G);
    const int seq = c.seq, kvh = c.u / p.qgroups, qg = c.u % p.qgroups;
    init_barriers<nbars, Pool>(bars, tickets, ci > first);
    const tile_span ts = tile_range(cache.seq_lens[seq], G, p.max_len, p.window_left);
    const int n_full = ts.len / G, tail = ts.len % G;
    const int j0 = max(c.j0, ts.jlo), j1 = min(c.j1, ts.n_tiles);
    const bool sink = cache.has_sink();
    const std::int32_t* ptab = cache.page_table + static_cast<std::int64_t>(seq) * cache.max_pages_per_seq;
    auto is_quant = [&](int j) { return j < n_full && !(sink && j == 0); };
    // Out-of-range page ids (a corrupt page table) are never dereferenced: the
    // stage's barrier completes without a copy and the tile contributes nothing.
    auto page_ok = [&](int j) {
      const std::int32_t pg = ptab[j];
      return pg >= 0 && pg < cache.num_pages;
    };
    auto stage_src = [&](int j, std::uint8_t* dst, std::uint64_t* bar) {
      if (!is_quant(j)) return;
      if (page_ok(j)) {
        stage_record<SL>(dst, cache.record(ptab[j], kvh), bar);
      } else {
        mbar_arrive(bar);
      }
    };
    __syncthreads();  // barriers initialized: the first records fly while the queries are rotated
    if constexpr (Pool > 0) {
      pool_prologue<W, Pool>(j0, j1, stages, plan::stage_bytes, bars, tickets, stage_src);
    } else {
      ring_prologue<R, H, Stages>(j0, j1, stages, plan::stage_bytes, bars, stage_src);
    }
    load_queries<QT, D, W, true, keep_qn<Packer>(), Swz>(p, seq, kvh, qg, qn, nf, qf);
    __syncthreads();

    const int sub = (threadIdx.x >> 5) % H;
    const int t = (threadIdx.x & 31) & 3;
    const float nfq[2] = {nf[PK ? t : 2 * t], nf[PK ? t : 2 * t + 1]};
    warp_state<D, PK ? 1 : 2> st;
    st.reset();

    auto run = [&](int j, std::uint8_t* buf, std::uint64_t* bar, std::uint32_t par) -> bool {
      const int lo = ts.lo - j * G;  // > 0 only in the window's boundary tile
      if (is_quant(j)) {
        mbar_wait(bar, par);
        if (page_ok(j)) quant_tile<Config, Packer, H, Swz, PK>(buf, qn, qf, nfq, st, sub, lo, p.cap);
        return true;
      }
      const std::int64_t off = cache.tile_offset(seq, kvh);
      if (j < n_full) {  // the sink
        fp16_tile<D, G, H, Swz, PK>(reinterpret_cast<const std::uint16_t*>(cache.sink_k + off),
                                    reinterpret_cast<const std::uint16_t*>(cache.sink_v + off), G, lo, p.cap, qf, nfq,
                                    st, sub);
      } else {
        fp16_tile<D, G, H, Swz, PK>(reinterpret_cast<const std::uint16_t*>(cache.tail_k + off),
                                    reinterpret_cast<const std::uint16_t*>(cache.tail_v + off), tail, lo, p.cap, qf,
                                    nfq, st, sub);
      }
      return false;
    };
    if constexpr (Pool > 0) {
      pool_loop<W, Pool>(j0, j1, sink && j0 == 0, stages, plan::stage_bytes, bars, tickets, stage_src, run);
    } else {
      warp_loop<R, H, Stages, false>(j0, j1, stages, plan::stage_bytes, bars, stage_src, run);
    }
    if (ci + 1 == first + count)
      asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the merge kernel may start launching
    write_partial<D, W, Swz, PK ? 1 : 2>(st, stages, p, qg, c.slot);
    fence_proxy_async();  // the stage area was scratch (generic proxy) before the next chunk's bulk copies
    __syncthreads();
  }
}

template <int D, int PT, class QT, int W, int Stages>
__global__ void __launch_bounds__(W * 32, 1)
    fp16_decode_kernel(const __grid_constant__ fp16_paged_cache_view cache, const __grid_constant__ kernel_params p) {
  constexpr std::size_t half_bytes = static_cast<std::size_t>(PT) * D * 2;
  using plan = smem_plan<D, W, Stages, 2 * half_bytes>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  float* qn = reinterpret_cast<float*>(smem + plan::qn);
  float* nf = reinterpret_cast<float*>(smem + plan::nf);
  uint4* qf = reinterpret_cast<uint4*>(smem + plan::qf);
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(smem + plan::bars);
  std::uint8_t* stages = smem + plan::stages;

  int first = 0;
  const int count = chunk_count(p, first);
  for (int ci = first; ci < first + count; ++ci) {
    const chunk_ref c = chunk_at(p, ci, cache.seq_lens, PT);
    const int seq = c.seq, kvh = c.u / p.qgroups, qg = c.u % p.qgroups;
    init_barriers<2 * W * Stages, 0>(bars, nullptr, ci > first);
    load_queries<QT, D, W, false, false, false>(p, seq, kvh, qg, qn, nf, qf);
    __syncthreads();

    const tile_span ts = tile_range(cache.seq_lens[seq], PT, p.max_len, p.window_left);
    const int len = ts.len;
    const int j0 = max(c.j0, ts.jlo), j1 = min(c.j1, ts.n_tiles);
    const std::int32_t* ptab = cache.page_table + static_cast<std::int64_t>(seq) * cache.max_pages_per_seq;
    auto page_ok = [&](int j) {
      const std::int32_t pg = ptab[j];
      return pg >= 0 && pg < cache.num_pages;
    };

    const int t = (threadIdx.x & 31) & 3;
    const float nfq[2] = {nf[2 * t], nf[2 * t + 1]};
    warp_state<D> st;
    st.reset();

    auto stage_src = [&](int j, std::uint8_t* dst, std::uint64_t* bar) {
      if (!page_ok(j)) {
        mbar_arrive(bar);
        return;
      }
      const std::int64_t off = cache.block_offset(ptab[j], kvh);
      mbar_expect_tx(bar, static_cast<std::uint32_t>(2 * half_bytes));
      bulk_copy_g2s(dst, cache.k + off, static_cast<std::uint32_t>(half_bytes), bar);
      bulk_copy_g2s(dst + half_bytes, cache.v + off, static_cast<std::uint32_t>(half_bytes), bar);
    };
    auto run = [&](int j, std::uint8_t* buf, std::uint64_t* bar, std::uint32_t par) -> bool {
      mbar_wait(bar, par);
      if (page_ok(j)) {
        const int nv = min(PT, len - j * PT);
        fp16_tile<D, PT>(reinterpret_cast<const std::uint16_t*>(buf),
                         reinterpret_cast<const std::uint16_t*>(buf + half_bytes), nv, ts.lo - j * PT, p.cap, qf, nfq,
                         st);
      }
      return true;
    };
    warp_loop<W, 1, Stages>(j0, j1, stages, plan::stage_bytes, bars, stage_src, run);
    if (ci + 1 == first + count)
      asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the merge kernel may start launching
    write_partial<D, W>(st, stages, p, qg, c.slot);
    fence_proxy_async();
    __syncthreads();
  }
}

// Merges the splits of each (sequence, query head) row, normalizes, un-rotates
// (Rotated) and writes the output and the log-sum-exp. One warp per row,
// combine_rows rows per block; lane L holds channels E L .. E L + E - 1
// (E = D / 32). The per-split (m, l) pairs are read one split per lane, the
// partial outputs E floats per lane with 8 splits' loads in flight, and the
// inverse FWHT runs in registers (stages h < E) and across lanes with
// shuffles (h >= E): no shared memory, no block barrier. (The previous
// version, one row per block with a serial split loop and a shared-memory
// FWHT, took 11.5K cycles at batch 1 under Nsight; this one made 1 x 16K
// 1 us faster end to end on the H200, 19.7 -> 18.7 us.)
inline constexpr int combine_rows = 4;

template <class QT, int D, bool Rotated>
__global__ void __launch_bounds__(32 * combine_rows) combine_kernel(kernel_params p, QT* out, float* lse,
                                                                    std::int64_t rows) {
  constexpr int E = D / 32;
  static_assert(E == 2 || E == 4 || E == 8, "head_dim 64, 128 or 256");
  // Launched with programmatic stream serialization: wait for the attention grid.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * combine_rows + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform
  // The row's partials: slots first .. first + S - 1 of its unit, row q of each.
  const std::int64_t seq = row / p.q_heads;
  const int qh = static_cast<int>(row % p.q_heads), gi = qh % p.group;
  const std::int64_t unit = seq * p.units + (qh / p.group) * p.qgroups + gi / max_group;
  std::int64_t first;
  int S;
  if (p.spans) {
    const unit_span sp = p.spans[unit];
    first = sp.first;
    S = sp.count;
  } else {
    first = unit * p.num_splits;
    S = p.num_splits;
  }
  const std::int64_t r0 = first * p.slot_rows + gi % max_group;  // partial row of slot first
  const int ml_stride = 2 * p.slot_rows, o_stride = p.slot_rows * D;
  const float* ml = p.ws_ml + 2 * r0;
  // Global max of m over the splits, then l = sum f_s l_s, f_s = 2^(m_s - max).
  float mx = -INFINITY;
  for (int s = lane; s < S; s += 32) mx = fmaxf(mx, __ldcg(ml + ml_stride * s));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.0f;
  float l = 0.0f;
  if (mx != -INFINITY) {
    const float* wo = p.ws_o + r0 * D + E * lane;
    for (int c = 0; c < S; c += 32) {
      float f = 0.0f;  // this lane's split c + lane
      if (c + lane < S) {
        const float ms = __ldcg(ml + ml_stride * (c + lane));
        f = ms == -INFINITY ? 0.0f : exp2f(ms - mx);
        l = fmaf(__ldcg(ml + ml_stride * (c + lane) + 1), f, l);
      }
      const int n = min(32, S - c);
      for (int j0 = 0; j0 < n; j0 += 8) {
        float x[8][E];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (j0 + j < n) {
#pragma unroll
            for (int e = 0; e < E; e += 4) {
              if constexpr (E == 2) {
                const float2 v = __ldcg(reinterpret_cast<const float2*>(wo + (c + j0 + j) * o_stride));
                x[j][0] = v.x;
                x[j][1] = v.y;
              } else {
                const float4 v = __ldcg(reinterpret_cast<const float4*>(wo + (c + j0 + j) * o_stride + e));
                x[j][e] = v.x;
                x[j][e + 1] = v.y;
                x[j][e + 2] = v.z;
                x[j][e + 3] = v.w;
              }
            }
          }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float fj = __shfl_sync(0xffffffffu, f, (j0 + j) & 31);
          if (j0 + j < n) {
#pragma unroll
            for (int e = 0; e < E; ++e) o[e] = fmaf(x[j][e], fj, o[e]);
          }
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = l > 0.0f ? o[e] * inv : 0.0f;
  if constexpr (Rotated) {
#pragma unroll
    for (int h = 1; h < E; h *= 2)  // inside the lane
#pragma unroll
      for (int e = 0; e < E; ++e)
        if ((e & h) == 0) {
          const float a = o[e], b = o[e + h];
          o[e] = a + b;
          o[e + h] = a - b;
        }
#pragma unroll
    for (int h = 1; h < 32; h *= 2) {  // across lanes: channel stride E h
      const bool hi = (lane & h) != 0;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, o[e], h);
        o[e] = hi ? other - o[e] : o[e] + other;
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = __fmul_rn(o[e], kvtile::detail::hadamard_norm<D>::value);
  }
  QT* dst = out + row * D + E * lane;
#pragma unroll
  for (int e = 0; e < E; ++e) store_q<QT>(dst + e, o[e]);
  if (lse && lane == 0) lse[row] = l > 0.0f ? (mx + log2f(l)) * ln2 : -INFINITY;
}

// Splits of the one-call path (no plan): enough CTAs for one wave when batch x
// KV heads x groups is small, never more splits than tiles / 8.
inline int choose_splits(int units, int max_tiles, int warps, int requested, int sms) {
  if (requested > 0) return requested;
  if (units <= 0 || units >= sms) return 1;
  int s = sms / units;  // one CTA per SM: never spill into a second wave
  // at least ~8 tiles per CTA (fewer leave warps idle; with more than 8 warps
  // per CTA a CTA with 8 tiles still beats an idle SM)
  const int per = warps < 8 ? warps : 8;
  const int smax = (max_tiles + per - 1) / per;
  if (s > smax) s = smax;
  return s < 1 ? 1 : s;
}

inline int current_sm_count() {
  int dev = 0;
  return cudaGetDevice(&dev) == cudaSuccess ? sm_count(dev) : 1;
}

template <class QT>
status check_common(const decode_args<QT>& a, int num_seqs, int kv_heads) {
  static_assert(std::is_same_v<QT, half_t> || std::is_same_v<QT, bfloat16_t>, "queries must be half_t or bfloat16_t");
  if (!a.q || !a.out) return status::null_pointer;
  if (a.q_heads <= 0 || kv_heads <= 0 || a.q_heads % kv_heads != 0 || num_seqs < 0) return status::invalid_argument;
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale)) return status::invalid_argument;
  if (!(a.logit_softcap >= 0.0f) || !std::isfinite(a.logit_softcap)) return status::invalid_argument;
  if (a.num_splits < 0 || a.num_splits > 4096) return status::invalid_argument;
  if (num_seqs > 65535 || kv_heads * ((a.q_heads / kv_heads + max_group - 1) / max_group) > 65535)
    return status::invalid_argument;
  return status::success;
}

// Workspace: the partials of every slot, then the plan's work list, CTA ranges
// and unit spans (written by decode_plan::plan; unused by the one-call path).
struct ws_layout {
  std::size_t o = 0, ml = 0, work = 0, cta = 0, spans = 0, bytes = 0;
  std::int64_t chunks = 0;
};
inline ws_layout layout_for(int num_seqs, int kv_heads, int q_heads, int num_splits, int ctas, int d) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const int group = q_heads / kv_heads, qgroups = (group + max_group - 1) / max_group;
  const int slot_rows = group < max_group ? group : max_group;
  const std::int64_t units = static_cast<std::int64_t>(num_seqs) * kv_heads * qgroups;
  ws_layout L;
  L.chunks = max_chunks(units, ctas, num_splits);  // also the one-call path's bound: units x splits <= max(units, ctas)
  const std::size_t rows = static_cast<std::size_t>(L.chunks) * slot_rows;
  L.ml = up(rows * d * sizeof(float));
  L.work = L.ml + up(rows * 2 * sizeof(float));
  L.cta = L.work + up(static_cast<std::size_t>(L.chunks) * sizeof(work_item));
  L.spans = L.cta + up((static_cast<std::size_t>(ctas) + 1) * sizeof(std::int32_t));
  L.bytes = L.spans + up(static_cast<std::size_t>(units) * sizeof(unit_span));
  return L;
}

template <class QT>
kernel_params make_params(int kv_heads, const decode_args<QT>& a, int splits, int max_len, const ws_layout& L,
                          bool planned) {
  kernel_params p{};
  p.q = a.q;
  p.q_heads = a.q_heads;
  p.group = a.q_heads / kv_heads;
  p.qgroups = (p.group + max_group - 1) / max_group;
  p.units = kv_heads * p.qgroups;
  p.slot_rows = p.group < max_group ? p.group : max_group;
  p.scale_log2 = a.softmax_scale * log2e;
  p.num_splits = splits;
  p.window_left = a.window_left < 0 ? -1 : a.window_left;
  p.cap = a.logit_softcap > 0.0f ? a.logit_softcap * log2e : 0.0f;
  p.max_len = max_len;
  auto* base = static_cast<std::uint8_t*>(a.workspace);
  p.ws_o = reinterpret_cast<float*>(base + L.o);
  p.ws_ml = reinterpret_cast<float*>(base + L.ml);
  p.work = planned ? reinterpret_cast<const work_item*>(base + L.work) : nullptr;
  p.cta_begin = planned ? reinterpret_cast<const std::int32_t*>(base + L.cta) : nullptr;
  p.spans = planned ? reinterpret_cast<const unit_span*>(base + L.spans) : nullptr;
  return p;
}

// Launches the attention kernel and the merge kernel; every error is the
// launch's own (cudaLaunchKernelEx's return), none is cleared or reported twice.
template <class QT, int D, bool Rotated, class KernelT, class View>
status launch(KernelT kernel, std::size_t smem, int threads, dim3 grid, const View& view, const kernel_params& p,
              const decode_args<QT>& a, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (cudaLaunchKernelEx(&cfg, kernel, view, p) != cudaSuccess) return status::cuda_error;
  const std::int64_t out_rows = static_cast<std::int64_t>(view.num_seqs) * a.q_heads;
  cudaLaunchConfig_t mc = {};
  mc.gridDim = dim3(static_cast<unsigned>((out_rows + combine_rows - 1) / combine_rows));
  mc.blockDim = dim3(32 * combine_rows);
  mc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  mc.attrs = attr;
  mc.numAttrs = a.pdl ? 1 : 0;
  if (cudaLaunchKernelEx(&mc, combine_kernel<QT, D, Rotated>, p, a.out, a.lse, out_rows) != cudaSuccess)
    return status::cuda_error;
  return status::success;
}

template <class T>
struct type_tag {
  static constexpr char id = 0;
};

}  // namespace detail

// ---------------------------------------------------------------- quantized cache

// Launch configuration of the quantized kernel for Codec (a tile_codec).
template <class Codec>
struct quant_kernel_traits {
  using config = typename Codec::config;
  using packer = typename Codec::packer;
  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int stages = KVTILE_ATTENTION_STAGES;
  static constexpr std::size_t record_bytes = Codec::record_bytes;
  static constexpr int warps_per_record = detail::warps_per_record<config>();
  // The record as laid out in a stage (tile_layout.cuh).
  static constexpr bool swizzled = detail::quant_swizzled<config, packer, stages>();
  using stage = detail::stage_layout<config, packer, warps_per_record, swizzled>;
  // records in flight per CTA / stages: as many rings as the stages, the query
  // rows and the fragments leave room for
  static constexpr int rings =
      detail::fit_rings<D, stages, stage::bytes, detail::keep_qn<packer>(),
                        detail::warps_for<record_bytes, stages, KVTILE_ATTENTION_MAX_RINGS>()>();
  static constexpr int warps = rings * warps_per_record;
  using plan = detail::smem_plan<D, warps, stages, stage::bytes, rings, detail::keep_qn<packer>()>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  // The stage-pool kernel for long chunks: pool_warps warps share `pool`
  // stages (0: no pool kernel).
  static constexpr int pool_warps = warps_per_record == 1 ? KVTILE_ATTENTION_POOL_WARPS : 0;
  static constexpr int pool =
      pool_warps > 0 ? detail::fit_pool<D, pool_warps, stage::bytes, detail::keep_qn<packer>(), KVTILE_ATTENTION_POOL>()
                     : 0;
  static constexpr std::size_t pool_smem_bytes =
      detail::pool_smem_bytes<D, pool_warps, stage::bytes, detail::keep_qn<packer>(), pool>();
  static constexpr std::size_t max_smem_bytes = pool_smem_bytes > smem_bytes ? pool_smem_bytes : smem_bytes;
  static_assert(config::key_bits != 8 && config::value_bits != 8, "the decode kernel supports 2- and 4-bit codes");
  static_assert(std::is_same_v<typename Codec::rotation, hadamard>, "the decode kernel un-rotates with plain Hadamard");
  static_assert(smem_bytes <= 227 * 1024, "shared memory plan exceeds the SM");
  // tile_range's clamp: every complete tile in the page table, plus the tail.
  static int max_len(const paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * G + G - 1;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
};

// Splits of the one-call path (num_splits = 0: automatic).
template <class Codec>
int plan_splits(const paged_cache_view& cache, int q_heads, int num_splits = 0) {
  const int group = cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1;
  const int units = cache.num_seqs * cache.kv_heads * ((group + detail::max_group - 1) / detail::max_group);
  return detail::choose_splits(units, cache.max_pages_per_seq + 1, quant_kernel_traits<Codec>::rings, num_splits,
                               detail::current_sm_count());
}

// Workspace of paged_decode and of decode_plan (the same bound), for the
// current device.
template <class Codec>
std::size_t workspace_bytes(const paged_cache_view& cache, int q_heads, int num_splits = 0) {
  if (cache.kv_heads <= 0 || q_heads <= 0 || cache.num_seqs < 0) return 0;
  return detail::layout_for(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(), Codec::D)
      .bytes;
}

// Checks everything that can be checked without reading device memory, and the
// current device (compute capability 9.0, opt-in shared memory):
// unsupported_arch elsewhere, no_device without a GPU.
template <class Codec, class QT>
status can_implement(const paged_cache_view& cache, const decode_args<QT>& a) {
  using cfg = typename Codec::config;
  if (cache.head_dim != 64 && cache.head_dim != 128 && cache.head_dim != 256) return status::unsupported_head_dim;
  if (status s = validate_structure(cache, static_cast<std::int64_t>(Codec::record_bytes), cfg::head_dim,
                                    cfg::tile_tokens);
      s != status::success)
    return s;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (!a.workspace || a.workspace_bytes < workspace_bytes<Codec>(cache, a.q_heads, a.num_splits))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  int dev = 0;
  return detail::current_device(dev, quant_kernel_traits<Codec>::max_smem_bytes);
}

namespace detail {
// Launches the quantized kernel variant (pool or rings, packed or 8-query layout).
template <class Codec, class QT>
status launch_quant(const paged_cache_view& cache, const decode_args<QT>& a, bool pool, dim3 grid,
                    const kernel_params& p, cudaStream_t stream) {
  using tr = quant_kernel_traits<Codec>;
  using cfg = typename tr::config;
  using pk = typename tr::packer;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return status::cuda_error;
  const bool packed = packed_layout && a.q_heads / cache.kv_heads <= max_group / 2;
  auto go = [&](auto kernel, std::size_t smem, int warps, std::atomic<std::uint64_t>& configured) {
    if (status s = configure_kernel(kernel, smem, dev, configured); s != status::success) return s;
    return launch<QT, tr::D, true>(kernel, smem, warps * 32, grid, cache, p, a, stream);
  };
  if constexpr (tr::pool > 0) {
    if (pool && packed) {
      static std::atomic<std::uint64_t> configured{0};  // per instantiation (one kernel), bit per device
      return go(quant_decode_kernel<cfg, pk, QT, tr::pool_warps, 1, true, tr::pool>, tr::pool_smem_bytes,
                tr::pool_warps, configured);
    }
    if (pool) {
      static std::atomic<std::uint64_t> configured{0};
      return go(quant_decode_kernel<cfg, pk, QT, tr::pool_warps, 1, false, tr::pool>, tr::pool_smem_bytes,
                tr::pool_warps, configured);
    }
  }
  if (packed) {
    static std::atomic<std::uint64_t> configured{0};
    return go(quant_decode_kernel<cfg, pk, QT, tr::rings, tr::stages, true>, tr::smem_bytes, tr::warps, configured);
  }
  static std::atomic<std::uint64_t> configured{0};
  return go(quant_decode_kernel<cfg, pk, QT, tr::rings, tr::stages, false>, tr::smem_bytes, tr::warps, configured);
}
}  // namespace detail

// Decode attention over the quantized paged cache in one call (no host
// lengths): every sequence's visible tiles are cut into the same number of
// splits (plan_splits, from max_pages_per_seq), two kernels on `stream`.
// Capturable in a CUDA graph (reads the lengths on the device); decode_plan
// balances ragged batches.
template <class Codec, class QT>
status paged_decode(const paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) {
  using tr = quant_kernel_traits<Codec>;
  if (status s = can_implement<Codec>(cache, a); s != status::success) return s;
  if (cache.num_seqs == 0) return status::success;
  const int splits = plan_splits<Codec>(cache, a.q_heads, a.num_splits);
  const detail::ws_layout L = detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits,
                                                 detail::current_sm_count(), tr::D);
  if (static_cast<std::int64_t>(cache.num_seqs) * cache.kv_heads * splits > L.chunks) return status::invalid_argument;
  const detail::kernel_params p = detail::make_params(cache.kv_heads, a, splits, tr::max_len(cache), L, false);
  // Single-split launches over long sequences: the stage-pool kernel (more warps per SM).
  const bool pool = splits == 1 && cache.max_pages_per_seq >= 128;
  return detail::launch_quant<Codec, QT>(cache, a, pool, dim3(splits, p.units, cache.num_seqs), p, stream);
}

// ---------------------------------------------------------------- fp16 baseline

// The baseline's page size (tokens) and launch configuration for head_dim D.
template <int D>
struct fp16_kernel_traits {
  static constexpr int page_tokens = 64;
  static constexpr int stages = 2;
  static constexpr std::size_t stage_bytes = static_cast<std::size_t>(page_tokens) * D * 2 * 2;
  static constexpr int warps = detail::warps_for<stage_bytes, stages>();
  using plan = detail::smem_plan<D, warps, stages, stage_bytes>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  static_assert(smem_bytes <= 227 * 1024, "shared memory plan exceeds the SM");
  static int max_len(const fp16_paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * page_tokens;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
};

template <int D>
int plan_splits_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  const int group = cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1;
  const int units = cache.num_seqs * cache.kv_heads * ((group + detail::max_group - 1) / detail::max_group);
  return detail::choose_splits(units, cache.max_pages_per_seq, fp16_kernel_traits<D>::warps, num_splits,
                               detail::current_sm_count());
}

template <int D>
std::size_t workspace_bytes_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  if (cache.kv_heads <= 0 || q_heads <= 0 || cache.num_seqs < 0) return 0;
  return detail::layout_for(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(), D).bytes;
}

template <int D, class QT>
status can_implement_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a) {
  if (cache.head_dim != D) return status::unsupported_head_dim;
  if (cache.page_tokens != fp16_kernel_traits<D>::page_tokens) return status::unsupported_tile_tokens;
  if (!cache.k || !cache.v || !cache.page_table || !cache.seq_lens) return status::null_pointer;
  if (cache.max_pages_per_seq < 0 || cache.num_pages < 0) return status::invalid_argument;
  if (reinterpret_cast<std::uintptr_t>(cache.k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(cache.v) % 16 != 0)
    return status::misaligned;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (!a.workspace || a.workspace_bytes < workspace_bytes_fp16<D>(cache, a.q_heads, a.num_splits))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  int dev = 0;
  return detail::current_device(dev, fp16_kernel_traits<D>::smem_bytes);
}

namespace detail {
template <int D, class QT>
status launch_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, dim3 grid, const kernel_params& p,
                   cudaStream_t stream) {
  using tr = fp16_kernel_traits<D>;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return status::cuda_error;
  auto kernel = fp16_decode_kernel<D, tr::page_tokens, QT, tr::warps, tr::stages>;
  static std::atomic<std::uint64_t> configured{0};  // per instantiation (one kernel), bit per device
  if (status s = configure_kernel(kernel, tr::smem_bytes, dev, configured); s != status::success) return s;
  return launch<QT, D, false>(kernel, tr::smem_bytes, tr::warps * 32, grid, cache, p, a, stream);
}
}  // namespace detail

// fp16 baseline: same kernel structure over fp16 pages, original frame (no rotation).
template <int D, class QT>
status paged_decode_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) {
  if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
  if (cache.num_seqs == 0) return status::success;
  const int splits = plan_splits_fp16<D>(cache, a.q_heads, a.num_splits);
  const detail::ws_layout L =
      detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits, detail::current_sm_count(), D);
  if (static_cast<std::int64_t>(cache.num_seqs) * cache.kv_heads * splits > L.chunks) return status::invalid_argument;
  const detail::kernel_params p =
      detail::make_params(cache.kv_heads, a, splits, fp16_kernel_traits<D>::max_len(cache), L, false);
  return detail::launch_fp16<D, QT>(cache, a, dim3(splits, p.units, cache.num_seqs), p, stream);
}

// ---------------------------------------------------------------- plan / run

// A decode step split into a host plan and a launch. plan() reads a HOST copy
// of the lengths, cuts every (sequence, KV head, query group) into chunks of
// whole tiles and assigns them to one persistent CTA per SM (balanced over
// ragged lengths; small batches are cut finer to fill the GPU), then copies
// the work list into the workspace on `stream` (stream-ordered: the previous
// step on the same stream finishes first). run() launches the attention and
// merge kernels with a grid and workspace fixed by the plan's sizes: it can be
// captured in a CUDA graph, and the graph replayed after plan() was called
// again (outside the capture) with new lengths for the same cache shape
// (num_seqs, kv_heads, max_pages_per_seq), q_heads, window and workspace.
// The kernel variant is chosen by the first plan after construction or a
// shape change; every later plan's work list is valid for it. The device
// lengths must equal the planned host lengths for a correct result; if they
// do not, the kernel still reads only within the page table, tails and sinks.
// Not thread-safe: one plan per stream.
class decode_plan {
 public:
  template <class Codec, class QT>
  status plan(const paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
              cudaStream_t stream = nullptr) {
    using tr = quant_kernel_traits<Codec>;
    if (!host_seq_lens) return status::null_pointer;
    if (status s = can_implement<Codec>(cache, a); s != status::success) return s;
    const key k = make_key<Codec, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a);
    const int ctas = detail::current_sm_count();
    const bool fresh = !(k == key_) || ctas != ctas_;
    if (status s = build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::G, tr::max_len(cache), ctas,
                         tr::rings, Codec::D);
        s != status::success)
      return s;
    if (fresh) pool_ = tr::pool > 0 && sched_.chunks > 0 && total_tiles_ >= 128LL * sched_.chunks;
    key_ = k;
    return upload(a, stream);
  }

  template <class Codec, class QT>
  status run(const paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) const {
    using tr = quant_kernel_traits<Codec>;
    if (!(make_key<Codec, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a) == key_))
      return status::invalid_argument;  // not the planned shape, options or workspace
    if (status s = can_implement<Codec>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, 1, tr::max_len(cache), layout_, true);
    return detail::launch_quant<Codec, QT>(cache, a, pool_, dim3(ctas_), p, stream);
  }

  template <int D, class QT>
  status plan_fp16(const fp16_paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
                   cudaStream_t stream = nullptr) {
    using tr = fp16_kernel_traits<D>;
    if (!host_seq_lens) return status::null_pointer;
    if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
    const key k = make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a);
    const int ctas = detail::current_sm_count();
    if (status s = build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::page_tokens, tr::max_len(cache), ctas,
                         tr::warps, D);
        s != status::success)
      return s;
    key_ = k;
    return upload(a, stream);
  }

  template <int D, class QT>
  status run_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) const {
    using tr = fp16_kernel_traits<D>;
    if (!(make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a) == key_))
      return status::invalid_argument;
    if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, 1, tr::max_len(cache), layout_, true);
    return detail::launch_fp16<D, QT>(cache, a, dim3(ctas_), p, stream);
  }

  int ctas() const { return ctas_; }                // the grid of run()
  int chunks() const { return sched_.chunks; }      // partials of the last plan
  long long makespan() const { return sched_.makespan; }  // the scheduler's cost estimate (tiles)
  bool stage_pool() const { return pool_; }         // the kernel variant run() launches
  const detail::schedule& last_schedule() const { return sched_; }

 private:
  struct key {
    const void* type = nullptr;
    int num_seqs = -1, kv_heads = 0, max_pages = 0, q_heads = 0, window_left = -1, num_splits = 0;
    const void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    int device = -1;
    bool operator==(const key& o) const {
      return type == o.type && num_seqs == o.num_seqs && kv_heads == o.kv_heads && max_pages == o.max_pages &&
             q_heads == o.q_heads && window_left == o.window_left && num_splits == o.num_splits &&
             workspace == o.workspace && workspace_bytes == o.workspace_bytes && device == o.device;
    }
  };
  template <class Kind, class QT>
  static key make_key(int num_seqs, int kv_heads, int max_pages, const decode_args<QT>& a) {
    key k;
    k.type = &detail::type_tag<std::pair<Kind, QT>>::id;
    k.num_seqs = num_seqs;
    k.kv_heads = kv_heads;
    k.max_pages = max_pages;
    k.q_heads = a.q_heads;
    k.window_left = a.window_left < 0 ? -1 : a.window_left;
    k.num_splits = a.num_splits;
    k.workspace = a.workspace;
    k.workspace_bytes = a.workspace_bytes;
    if (cudaGetDevice(&k.device) != cudaSuccess) k.device = -1;
    return k;
  }

  template <class QT>
  status build(int num_seqs, int kv_heads, const std::int32_t* lens, const decode_args<QT>& a, int T, int max_len,
               int ctas, int rings, int d) {
    const int group = a.q_heads / kv_heads;
    detail::schedule_request r;
    r.seq_lens = lens;
    r.num_seqs = num_seqs;
    r.units_per_seq = kv_heads * ((group + detail::max_group - 1) / detail::max_group);
    r.tile_tokens = T;
    r.max_len = max_len;
    r.window_left = a.window_left < 0 ? -1 : a.window_left;
    r.ctas = ctas;
    r.rings = rings;
    r.forced_splits = a.num_splits;
    layout_ = detail::layout_for(num_seqs, kv_heads, a.q_heads, a.num_splits, ctas, d);
    sched_ = detail::make_schedule(r);
    if (sched_.chunks > layout_.chunks) return status::invalid_argument;  // cannot happen (max_chunks)
    total_tiles_ = 0;
    for (const detail::work_item& w : sched_.items) total_tiles_ += w.j1 - w.j0;
    ctas_ = ctas;
    return status::success;
  }

  template <class QT>
  status upload(const decode_args<QT>& a, cudaStream_t stream) {
    // One copy of [work list | CTA ranges | spans], laid out as in the workspace.
    const std::size_t n = layout_.bytes - layout_.work;
    staging_.assign(n, 0);
    std::memcpy(staging_.data(), sched_.items.data(), sched_.items.size() * sizeof(detail::work_item));
    std::memcpy(staging_.data() + (layout_.cta - layout_.work), sched_.cta_begin.data(),
                sched_.cta_begin.size() * sizeof(std::int32_t));
    std::memcpy(staging_.data() + (layout_.spans - layout_.work), sched_.spans.data(),
                sched_.spans.size() * sizeof(detail::unit_span));
    // Pageable source: the call returns once the bytes are staged, so the
    // buffer may be refilled by the next plan() at once.
    if (cudaMemcpyAsync(static_cast<std::uint8_t*>(a.workspace) + layout_.work, staging_.data(), n,
                        cudaMemcpyHostToDevice, stream) != cudaSuccess)
      return status::cuda_error;
    return status::success;
  }

  key key_;
  detail::schedule sched_;
  detail::ws_layout layout_;
  std::vector<std::uint8_t> staging_;
  long long total_tiles_ = 0;
  int ctas_ = 0;
  bool pool_ = false;
};

}  // namespace attention
KVTILE_NAMESPACE_END
