// kvtile/device/attention/detail/softmax.cuh: the online softmax of the decode kernels (fp32, log2
// domain) and the probabilities as PV operands.
#pragma once

#include <cstdint>

#include "../../../config.hpp"
#include "common.cuh"
#include "fragments.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// Per-warp online-softmax state; thread (r = lane/4, t = lane%4) holds queries
// 2t, 2t+1 (NQ = 2; o[m][2h + q]) or query t (NQ = 1, the packed layout below;
// o[m][h]) and output channels out_order<D>::chan(r, m, h) = (D/8) r + 2m + h,
// m < D/16, h < 2 (tile_layout.cuh).
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
KVTILE_DEVICE uint2 packed_qf(const uint4* qf, int kk, int r, int t) {
  return reinterpret_cast<const uint2*>(qf)[2 * qf_index(kk, r >> 1, t) + (r & 1)];
}

// 2^x for x <= 0 in the online softmax. exp2f is ex2.approx.f32 wrapped in a
// subnormal-result fixup (compare + two multiplies per call: ~48 instructions
// per half tile); the .ftz form only differs for results below 2^-126, which
// are negligible next to the running sum (>= 1).
KVTILE_DEVICE float softmax_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
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
    // Hand-written: the reduction runs over the 8 lanes of one fragment column
    // (strided by 4), which cub::WarpReduce (contiguous logical warps) cannot express.
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

}  // namespace attention::detail
KVTILE_NAMESPACE_END
