// kvtile/device/attention/detail/tiles.cuh: the math of one tile: query load and rotation,
// the fp16 tile (tail, sink, fp16 baseline) and the quantized tile (QK on
// tensor cores over raw codes, softmax, PV).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../../config.hpp"
#include "../../../packing/fp16_scales.hpp"
#include "../../../packing/fp8_scales.hpp"
#include "../../../rotation/hadamard.hpp"
#include "../../warp/warp_fwht.cuh"
#include "common.cuh"
#include "fragments.cuh"
#include "softmax.cuh"
#include "tile_layout.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// Rotates (FWHT), scales and normalizes the CTA's query rows into shared memory:
// qn[row][d] = (q H)[d] * scale * log2(e) / nf[row], nf[row] a power of two with
// max |qn[row]| in [1, 2). Rows past the group are zero. The fragments qf follow
// the QK channel order key_order<D> (tile_layout.cuh); Rows = 8 x n-blocks
// (block nb's fragments at qf + qf_block<D>(nb)).
template <class QT, int D, int W, bool Rotate, bool KeepQn, int Rows = max_group>
KVTILE_DEVICE void load_queries(const kernel_params& p, int seq, int kvh, int qg, float* qn, float* nf, uint4* qf) {
  static_assert(KeepQn || Rows == max_group, "the overlaid fragments (fp16 kernel) hold one n-block");
  constexpr int q_stride = D + 16;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  std::int64_t first;
  int n;
  query_tokens(p, seq, first, n);
  for (int row = warp; row < Rows; row += W) {
    float* v = qn + row * q_stride;
    const int f = qg * Rows + row, i = f / p.group, gi = f % p.group;  // row f: token i, head gi of the group
    const bool valid = f < p.rows_total && i < n;
    const QT* src = static_cast<const QT*>(p.q) + ((first + i) * p.q_heads + kvh * p.group + gi) * D;
    for (int d = lane; d < D; d += 32) v[d] = valid ? load_q<QT>(src + d) : 0.0f;
    __syncwarp();
    if constexpr (Rotate) {  // warp_fwht.cuh, strided layout: x[j] = channel lane + 32 j
      float x[D / 32];
#pragma unroll
      for (int j = 0; j < D / 32; ++j) x[j] = v[lane + 32 * j];
      kvtile::device::warp_fwht_unnormalized(x);
#pragma unroll
      for (int j = 0; j < D / 32; ++j) v[lane + 32 * j] = x[j];
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
    for (int d = lane; d < D; d += 32) v[d] = ldexpf(v[d], -k);
    if (lane == 0) nf[row] = ldexpf(1.0f, k);
    __syncwarp();
    // The row's QK B fragments (fp16 hi, lo of 4 channels per (k-step, t)), made once per CTA.
    for (int u = lane; KeepQn && u < D / 4; u += 32) {
      const float4 x = *reinterpret_cast<const float4*>(v + 4 * u);
      std::uint32_t b[4] = {0u, 0u, 0u, 0u};
      split_b(x.x, x.y, x.z, x.w, b);
      qf[qf_block<D>(row / max_group) +
         qf_index(key_order<D>::unit_kk(u), row % max_group, key_order<D>::unit_t(u))] =
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
      if (u < units) qf[qf_index(key_order<D>::unit_kk(g), row, key_order<D>::unit_t(g))] = f[k];
    }
  }
}

// ---------------------------------------------------------------- fp16 tile
// K, V: GT x D fp16, token-major (shared or global memory); tokens >= n_valid
// are masked (their V is never read). H warps share the tile: warp `sub` takes
// the MMA token blocks i in [sub * GM / H, (sub + 1) * GM / H). The QK channel
// and PV output orders are the quantized tiles' (tile_layout.cuh).
template <int D, int GT, int H = 1, bool PK = false>
KVTILE_DEVICE void fp16_tile(const std::uint16_t* K, const std::uint16_t* V, int n_valid, const tile_mod& md,
                             const uint4* qf, const float (&nfq)[2], warp_state<D, PK ? 1 : 2>& st, int sub = 0) {
  using OO = out_order<D>;
  constexpr int E = GT / 8, GM = GT / 16 / H, KT = D / 16, MC = (D / 16) < 8 ? (D / 16) : 8, NCH = (D / 16) / MC,
                CE = 2 * MC;
  const int lane = threadIdx.x & 31, r = lane >> 2, t = lane & 3;
  float s[GM][4];
#pragma unroll
  for (int i = 0; i < GM; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    const int c0 = key_order<D>::chan0(kk, t);
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
      if constexpr (!PK) mma_f16(s[i], k0.x, k1.x, k0.y, k1.y, b[2], b[3]);  // lo part
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
        sc[i][h] = tok < n_valid ? modify_score((s[i][2 * h] + s[i][2 * h + 1]) * nfq[0], tok, md, 0) : -INFINITY;
      }
    online_softmax1<GM>(sc, st.m, st.l, alpha[0]);
    p_to_b_split<GM>(sc, pb0, pb1);
  } else {
#pragma unroll
    for (int i = 0; i < GM; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tok = E * r + 2 * (sub * GM + i) + (c >> 1);
        s[i][c] = tok < n_valid ? modify_score(s[i][c] * nfq[c & 1], tok, md, c & 1) : -INFINITY;
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
          load_words<2 * CE>(reinterpret_cast<const std::uint8_t*>(V + toks[u] * D + OO::run(ch, r, CE)),
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
// (Hand-written xor butterfly: every lane needs the maximum; CUB's
// WarpReduce leaves it in lane 0 and would need a broadcast per tile.)
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

// One record, or the part sub (of H) of it: MMA token blocks i in
// [sub * GM / H, (sub + 1) * GM / H). `rec` is the stage, laid out by
// stage_layout (tile_layout.cuh: the record as stored). WB n-blocks of 8
// query rows (8-query layout; rows of qn + 8 b, nfq[b], st[b], md[b] for
// n-block b): each code register is converted once and fed to the MMAs of
// every n-block (the A operands, codes, are the same for all of them).
// XB (WB = 2, the two warps of a ring splitting the tokens, H = 2): each warp
// makes the query B operands of half the k-steps and takes the other half from
// the other warp through `xb` (token_split_xchg_bytes, one per ring), meeting
// it on named barrier `xbar` twice per tile.
//
// Who reads what (lane = 4 r + t; E = G/8 tokens per row group, EH = E/H):
//  - QK, tokens on M: lane r owns the EH key tokens token_base(r, sub) ..
//    + EH - 1 (MMA block i: M-row r = token base + 2i, row r + 8 = base + 2i + 1);
//    lane t owns channels chan0(kk, t) .. + 3 at k-step kk (key_order).
//  - PV, tokens on K: lane t's tokens are those of M-rows 2t, 2t+1 (+8) of the
//    QK blocks (movmatrix): tA = token_base(2t) + 2i, tB = token_base(2t+1) + 2i,
//    tA + 1, tB + 1; lane r owns the output channels out_order::run(ch, r) ..
//    + CE - 1 of chunk ch.
template <class Config, class Packer, int H, bool PK = false, int WB = 1, bool XB = false>
KVTILE_DEVICE void quant_tile(const std::uint8_t* rec, const float* qn, const float (&nfq)[WB][2],
                              warp_state<Config::head_dim, PK ? 1 : 2> (&st)[WB], int sub, const tile_mod (&md)[WB],
                              std::uint8_t* xb = nullptr, int xbar = 0) {
  static_assert(WB == 1 || !PK, "n-blocks per warp: the 8-query layout");
  static_assert(!XB || (H == 2 && WB == 2), "the B-operand exchange: two warps splitting a tile's tokens");
  using SL = stage_layout<Config, Packer, H>;
  using KO = key_order<Config::head_dim>;
  using OO = out_order<Config::head_dim>;
  constexpr bool fp8 = std::is_same_v<Packer, fp8_scales>;
  constexpr int D = Config::head_dim, G = Config::tile_tokens, KB = Config::key_bits, VB = Config::value_bits;
  // EH, GM: this warp's share of a row group's tokens / of the MMA token blocks.
  constexpr int EH = SL::EH, GM = G / 16 / H, KT = D / 16, MC = (D / 16) < 4 ? (D / 16) : 4, NCH = (D / 16) / MC,
                CE = 2 * MC;
  constexpr int q_stride = D + 16;
  constexpr int krow = G * KB / 8, ksh = EH * KB / 8, vrow = D * VB / 8, vsb = CE * VB / 8;
  constexpr int kwords = ksh >= 4 ? ksh / 4 : 1, vwords = vsb >= 4 ? vsb / 4 : 1;
  constexpr int sb = fp8 ? 1 : 2;  // bytes per scale entry
  // Raw (subnormal) codes for every key and for values in the packed layout;
  // values otherwise are converted centered: x - vmid.
  constexpr bool raw_values = PK;
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
    f_k = fp16_field_norm(rec + SL::key_scale_s, D);
    f_v = fp16_field_norm(rec + SL::value_scale_s, G);
    vs_ak = 1.0f / f_k;
    vs_av = 1.0f / f_v;
    vs_t = 1.0f;
    vs_c = 1.0f;
  }

  // ---- S^T = codes^T (q a)^T: tokens on M, channels on K, queries on N
  float s[WB][GM][4];
#pragma unroll
  for (int b = 0; b < WB; ++b)
#pragma unroll
    for (int i = 0; i < GM; ++i) s[b][i][0] = s[b][i][1] = s[b][i][2] = s[b][i][3] = 0.0f;
  // The key rows (at this lane's token run), a_K and z_K: channel chan0(kk, t)
  // is row / entry c0.
  const std::uint8_t* kc = rec + SL::key_codes_s + tok0 * KB / 8;
  const std::uint8_t* ka = rec + SL::key_scale_s;
  const std::uint8_t* kz = rec + SL::key_zero_s;
  float bq0[WB], bq1[WB];  // beta = sum_d q z for queries 2t, 2t+1
  {
    float beta[WB];
#pragma unroll
    for (int b = 0; b < WB; ++b) beta[b] = 0.0f;
    const float lo_part = (r & 1) ? 1.0f : 0.0f;  // packed: odd r holds the lo part
    // k-step kk: the B operands (q a, split) and beta's terms from the record's
    // scales (made), or the B operands the ring's other warp made (!made), then
    // the MMAs over this warp's key tokens.
    auto k_step = [&](int kk, bool made) {
      const int c0 = KO::chan0(kk, t);
      std::uint32_t bf[WB][4];
      if (made) {
        float a[4], z[4];
        load_scales<fp8, 4>(ka + sb * c0, a, f_k);
        load_halves<4>(kz + 2 * c0, z);
#pragma unroll
        for (int b = 0; b < WB; ++b) {
          // packed: this lane's B column is part r & 1 of query r / 2 (and so is its beta)
          const float4 qv =
              *reinterpret_cast<const float4*>(qn + (b * max_group + (PK ? r >> 1 : r)) * q_stride + c0);
          beta[b] = fmaf(qv.x, z[0], beta[b]);
          beta[b] = fmaf(qv.y, z[1], beta[b]);
          beta[b] = fmaf(qv.z, z[2], beta[b]);
          beta[b] = fmaf(qv.w, z[3], beta[b]);
          if constexpr (PK) {
            std::uint32_t bp[2];
            split_b_part(qv.x * a[0], qv.y * a[1], qv.z * a[2], qv.w * a[3], lo_part, bp);
            bf[b][0] = bp[0];
            bf[b][1] = bp[1];
          } else {
            split_b(qv.x * a[0], qv.y * a[1], qv.z * a[2], qv.w * a[3], bf[b]);
          }
          if constexpr (XB) {
            uint4* dst = reinterpret_cast<uint4*>(xb) + (kk * WB + b) * 32 + lane;
            *dst = make_uint4(bf[b][0], bf[b][1], bf[b][2], bf[b][3]);
          }
        }
      } else {
#pragma unroll
        for (int b = 0; b < WB; ++b) {
          const uint4 v = reinterpret_cast<const uint4*>(xb)[(kk * WB + b) * 32 + lane];
          bf[b][0] = v.x;
          bf[b][1] = v.y;
          bf[b][2] = v.z;
          bf[b][3] = v.w;
        }
      }
      std::uint32_t x[4][kwords];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_words<ksh>(kc + (c0 + u) * krow, x[u]);
      std::uint32_t r01[EH], r23[EH];
      pair_extract<KB, EH>(x[0], x[1], r01);
      pair_extract<KB, EH>(x[2], x[3], r23);
#pragma unroll
      for (int i = 0; i < GM; ++i)
#pragma unroll
        for (int b = 0; b < WB; ++b) {
          mma_f16(s[b][i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], bf[b][0], bf[b][1]);
          if constexpr (!PK)  // lo part
            mma_f16(s[b][i], r01[2 * i], r01[2 * i + 1], r23[2 * i], r23[2 * i + 1], bf[b][2], bf[b][3]);
        }
    };
    if constexpr (XB) {
      // The ring's two warps (sub 0, 1) make the B operands of k-steps
      // [sub KT/2, (sub + 1) KT/2) and their beta terms, exchange them through
      // xb, and meet on named barrier xbar before and after reading the other
      // half. Both warps' beta is (half 0) + (half 1): the same value.
      constexpr int KH = KT / 2;
      float* xbeta = reinterpret_cast<float*>(xb + token_split_xchg_fragment_bytes<Config::head_dim>());
#pragma unroll
      for (int k = 0; k < KH; ++k) k_step(sub * KH + k, true);
#pragma unroll
      for (int b = 0; b < WB; ++b) xbeta[(sub * WB + b) * 32 + lane] = beta[b];
      named_barrier_sync(xbar, 64);
#pragma unroll
      for (int k = 0; k < KH; ++k) k_step((1 - sub) * KH + k, false);
      float other[WB];
#pragma unroll
      for (int b = 0; b < WB; ++b) other[b] = xbeta[((1 - sub) * WB + b) * 32 + lane];
      named_barrier_sync(xbar, 64);
#pragma unroll
      for (int b = 0; b < WB; ++b) beta[b] += other[b];
    } else {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) k_step(kk, true);
    }
    // beta: thread (r, t) summed query r (packed: r / 2) over its channels; reduce
    // over t, move to queries 2t, 2t+1 (packed: query t, from lane 8t, r = 2t).
#pragma unroll
    for (int b = 0; b < WB; ++b) {
      beta[b] += __shfl_xor_sync(0xffffffffu, beta[b], 1);
      beta[b] += __shfl_xor_sync(0xffffffffu, beta[b], 2);
      bq0[b] = __shfl_sync(0xffffffffu, beta[b], 8 * t);
      bq1[b] = __shfl_sync(0xffffffffu, beta[b], 8 * t + 4);
    }
  }
  // ---- scores: t[g] (vs_ak S + beta) nf, then the online softmax. Packed
  // layout: score of (token of M-row r / r + 8, query t) = hi + lo columns.
  float sc[PK ? GM : 1][2];
  float alpha[WB][2];  // packed: alpha[0][0]
  {
    float tk[EH];
    load_scales<fp8, EH>(rec + SL::key_token_scale_s + sb * tok0, tk, 1.0f);
#pragma unroll
    for (int b = 0; b < WB; ++b) {
      const float n0 = nfq[b][0] * vs_t, n1 = nfq[b][1] * vs_t;
#pragma unroll
      for (int i = 0; i < GM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float tt = tk[2 * i + h];
          // token 2i + h of the run: raw codes carry its position factor
          const float ak = vs_ak * raw_unscale<KB>(2 * i + h);
          if constexpr (PK) {
            sc[i][h] = fmaf(ak, s[b][i][2 * h] + s[b][i][2 * h + 1], bq0[b]) * (tt * n0);
          } else {
            s[b][i][2 * h + 0] = fmaf(ak, s[b][i][2 * h + 0], bq0[b]) * (tt * n0);
            s[b][i][2 * h + 1] = fmaf(ak, s[b][i][2 * h + 1], bq1[b]) * (tt * n1);
          }
        }
    }
  }
#pragma unroll
  for (int b = 0; b < WB; ++b) {
    // Window boundary tile, causal mask of multi-query rows, soft-cap: off the common path.
    if (md[b].on) {
#pragma unroll
      for (int i = 0; i < GM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int tok = tok0 + 2 * i + h;
          if constexpr (PK) {
            sc[i][h] = modify_score(sc[i][h], tok, md[b], 0);
          } else {
            s[b][i][2 * h + 0] = modify_score(s[b][i][2 * h + 0], tok, md[b], 0);
            s[b][i][2 * h + 1] = modify_score(s[b][i][2 * h + 1], tok, md[b], 1);
          }
        }
    }
    if constexpr (PK) {
      online_softmax1<GM>(sc, st[b].m, st[b].l, alpha[b][0]);
    } else {
      online_softmax<GM>(s[b], st[b].m, st[b].l, alpha[b]);
    }
  }

  // ---- P' = p * a_V (per token), zsum = sum p (z_V + vs_av a_V vmid) (the centered codes' offset)
  constexpr int NQ = PK ? 1 : 2;
  float zsum[WB][2];
  std::uint32_t pb0[WB][GM], pb1[WB][GM];
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
    for (int b = 0; b < WB; ++b) {
      zsum[b][0] = zsum[b][1] = 0.0f;
#pragma unroll
      for (int i = 0; i < GM; ++i)
#pragma unroll
        for (int c = 0; c < 2 * NQ; ++c) {
          const int e = 2 * i + c / NQ;  // M-row r + 8 (c / NQ) of block i
          float* pv;
          if constexpr (PK) {
            pv = &sc[i][c];
          } else {
            pv = &s[b][i][c];
          }
          zsum[b][c % NQ] = fmaf(*pv, zv[e], zsum[b][c % NQ]);
          *pv *= av[e];
        }
#pragma unroll
      for (int qq = 0; qq < NQ; ++qq)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) zsum[b][qq] += __shfl_xor_sync(0xffffffffu, zsum[b][qq], o);
      if constexpr (PK) {
        p_to_b_split<GM>(sc, pb0[b], pb1[b]);
      } else {
        p_to_b<GM>(s[b], pb0[b], pb1[b]);
      }
    }
  }

  // ---- O^T += c_V * (vs_av * (codes - vmid)^T P'^T + zsum): channels on M, tokens on K
  // Lane t's PV tokens tA = ta0 + 2i, tB = tA + dAB (+1 each).
  const int ta0 = SL::token_base(2 * t, sub);
  constexpr int dAB = SL::token_base(1, 0) - SL::token_base(0, 0);  // token_base(2t+1) - token_base(2t)
  const std::uint8_t* vc = rec + SL::value_codes_s + ta0 * vrow;
  const std::uint8_t* cvp = rec + SL::value_channel_scale_s;
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    float acc[WB][MC][4];
#pragma unroll
    for (int b = 0; b < WB; ++b)
#pragma unroll
      for (int j = 0; j < MC; ++j) acc[b][j][0] = acc[b][j][1] = acc[b][j][2] = acc[b][j][3] = 0.0f;
    const int run = OO::run(ch, r, CE);  // first output channel of this lane's run
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
      for (int b = 0; b < WB; ++b)
#pragma unroll
        for (int j = 0; j < MC; ++j)
          mma_f16(acc[b][j], rab[2 * j], rab[2 * j + 1], rcd[2 * j], rcd[2 * j + 1], pb0[b][i], pb1[b][i]);
    }
    float cv[CE];
    load_scales<fp8, CE>(cvp + sb * run, cv, 1.0f);
    // packed: the (hi, lo) columns of query t are summed; st.o[m][h] is M-row r + 8 h
#pragma unroll
    for (int b = 0; b < WB; ++b)
#pragma unroll
      for (int j = 0; j < MC; ++j)
#pragma unroll
        for (int c = 0; c < 2 * NQ; ++c) {
          const float cc = cv[2 * j + c / NQ] * vs_c;
          // channel 2j + c/NQ of the run: raw codes carry its position factor
          const float va = raw_values ? vs_av * raw_unscale<VB>(2 * j + c / NQ) : vs_av;
          float a;
          if constexpr (PK) {
            a = acc[b][j][2 * c] + acc[b][j][2 * c + 1];
          } else {
            a = acc[b][j][c];
          }
          float& o = st[b].o[ch * MC + j][c];
          o = fmaf(alpha[b][c % NQ], o, cc * fmaf(va, a, zsum[b][c % NQ]));
        }
  }
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
