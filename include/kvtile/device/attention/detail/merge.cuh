// kvtile/device/attention/detail/merge.cuh: merging the partial softmax states: the warps of a
// CTA into the chunk's workspace slot (write_partial), and the chunks of a
// unit by log-sum-exp (combine_row): in the merge kernel (combine_kernel) or,
// fused, by the CTA that finishes a unit's last chunk (finish_chunk).
#pragma once

#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>
#include <cuda_runtime.h>
#include <nv/target>

#include <cstdint>

#include "../../../config.hpp"
#include "../../../rotation/hadamard.hpp"
#include "../../warp/warp_fwht.cuh"
#include "common.cuh"
#include "softmax.cuh"
#include "tile_layout.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// ---------------------------------------------------------------- epilogue
// Full-warp reductions of the (m, l) pairs: CUB (the aggregate is valid in
// lane 0, broadcast with one shuffle).
using warp_reduce = cub::WarpReduce<float>;

// The end of one output row, by one whole warp (lane L holds channels E L ..
// E L + E - 1 of the merged, unnormalized o; E = D / 32): normalizes by l,
// un-rotates (Rotated: the inverse FWHT in registers and shuffles) and stores
// the row in the query type at dst (the row's first channel); lse (or null):
// the row's log-sum-exp, ln sum exp s = (mx + log2 l) ln 2, -inf when l = 0.
template <class QT, int D, bool Rotated>
KVTILE_DEVICE void finish_row(float (&o)[D / 32], float mx, float l, QT* dst, float* lse) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = l > 0.0f ? o[e] * inv : 0.0f;
  if constexpr (Rotated) {
    using kvtile::device::fwht_lane_op;
    kvtile::device::lane_fwht_unnormalized<32, E, fwht_lane_op::signed_fma>(o);  // warp_fwht.cuh, blocked layout
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = __fmul_rn(o[e], kvtile::detail::hadamard_norm<D>::value);
  }
  dst += E * lane;
#pragma unroll
  for (int e = 0; e < E; ++e) store_q<QT>(dst + e, o[e]);
  if (lse && lane == 0) *lse = l > 0.0f ? (mx + log2f(l)) * ln2 : -INFINITY;
}

// Output row of row f of KV head kvh of sequence seq (f = token x group +
// head of the group), or -1 when the token is past the sequence's count
// (not written). qfirst, qcount: query_tokens of seq.
KVTILE_DEVICE std::int64_t output_row(const kernel_params& p, int kvh, int f, std::int64_t qfirst, int qcount) {
  const int i = f / p.group;
  return i < qcount ? (qfirst + i) * p.q_heads + kvh * p.group + f % p.group : -1;
}

// Whether unit u of sequence seq has a single chunk (planned: its span).
KVTILE_DEVICE bool sole_chunk(const kernel_params& p, int seq, int u) {
  return p.spans[static_cast<std::int64_t>(seq) * p.units + u].count == 1;
}

// Row q of a chunk merged over the warps w0, w0 + NB, ... that hold it
// (write_partial's shared memory: wo [W x 8][D + 4], wm and wl [W x 8]):
// the maximum of their m (row_max), then o and l rescaled to it, in warp order (row_sum).
template <int W, int NB>
KVTILE_DEVICE float row_max(const float* wm, int q) {
  float mx = -INFINITY;
#pragma unroll
  for (int w = q / max_group; w < W; w += NB) mx = fmaxf(mx, wm[w * max_group + q % max_group]);
  return mx;
}
// Channels d0 .. d0 + E - 1 of row q: each warp's factor exp2(m - mx) once
// for all E channels.
template <int D, int W, int NB, int E = 1>
KVTILE_DEVICE void row_sum(const float* wo, const float* wm, const float* wl, int q, float mx, int d0, float (&o)[E],
                           float& l) {
  constexpr int os = D + 4;
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.0f;
  l = 0.0f;
  if (mx == -INFINITY) return;
  const int qr = q % max_group;
#pragma unroll
  for (int w = q / max_group; w < W; w += NB) {
    const float wmv = wm[w * max_group + qr];
    if (wmv == -INFINITY) continue;
    const float f = exp2f(wmv - mx);
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = fmaf(wo[(w * max_group + qr) * os + d0 + e], f, o[e]);
    l = fmaf(wl[w * max_group + qr], f, l);
  }
}

// The output rows of a unit whose only chunk the CTA has merged in shared
// memory (write_partial), one warp per row: the rows' ends (finish_row).
// Compiled into the fused_merge kernels only: in the default 255-register
// kernels this code moved the tile loop's register allocation (more spills,
// 2-6% slower; docs/attention.md step 7).
template <class QT, int D, int W, bool Rotated, int NB, int VW = W>
KVTILE_DEVICE void write_rows(const float* wo, const float* wm, const float* wl, const kernel_params& p, int seq,
                              int u) {
  constexpr int E = D / 32, rows = NB * max_group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, qg = u % p.qgroups, kvh = u / p.qgroups;
  const int nq = min(rows, p.rows_total - qg * rows);
  std::int64_t qfirst;
  int qcount;
  query_tokens(p, seq, qfirst, qcount);
  for (int q = warp; q < nq; q += W) {  // warp-uniform
    const std::int64_t orow = output_row(p, kvh, qg * rows + q, qfirst, qcount);
    if (orow < 0) continue;
    const float mx = row_max<VW, NB>(wm, q);
    float o[E], l;
    row_sum<D, VW, NB, E>(wo, wm, wl, q, mx, E * lane, o, l);
    finish_row<QT, D, Rotated>(o, mx, l, static_cast<QT*>(p.out) + orow * D, p.lse ? p.lse + orow : nullptr);
  }
}

// Merges the warps of a CTA (log-sum-exp over the warps' (m, l, O), in
// shared memory) for query group qg of unit u (= kvh x qgroups + qg); the
// accumulators are in out_order<D> (tile_layout.cuh). NB
// n-blocks, WB warp states per warp (st[b]): state v = WB w + b of the
// W x WB holds query rows 8 (v % NB) .. + 7. A unit with several
// chunks: the chunk's partial (m, l, O), in the rotated frame (unnormalized,
// relative to m), goes to its workspace slot for the merge. Fused (a policy
// with fused_merge, planned: p.counters) and the unit's only chunk
// (sole_chunk): the CTA writes the unit's output rows and lse itself, one
// warp per row (finish_row, the same arithmetic as the merge of one split),
// and returns true; its slot is never written or read. Not in the other
// policies' kernels: measured slower there (docs/attention.md, step 7).
template <class QT, int D, int W, bool Rotated, bool Fused, int NQ = 2, int NB = 1, int WB = 1>
KVTILE_DEVICE bool write_partial(warp_state<D, NQ> (&st)[WB], std::uint8_t* scratch, const kernel_params& p, int seq,
                                 int u, int qg, int slot) {
  constexpr int os = D + 4, VW = W * WB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, t = lane & 3;
  // Requested before the barrier: its latency overlaps the stores below.
  const bool sole = Fused && p.counters && sole_chunk(p, seq, u);
#pragma unroll
  for (int b = 0; b < WB; ++b)
#pragma unroll
    for (int qq = 0; qq < NQ; ++qq)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) st[b].l[qq] += __shfl_xor_sync(0xffffffffu, st[b].l[qq], o);
  float* wo = reinterpret_cast<float*>(scratch);
  float* wm = wo + VW * max_group * os;
  float* wl = wm + VW * max_group;
  __syncthreads();  // every warp is done with its stages
  // thread (r, t) holds queries NQ t + q, q < NQ (o[m][NQ h + q]: M-row r + 8 h)
#pragma unroll
  for (int b = 0; b < WB; ++b) {
    const int v = warp * WB + b;
#pragma unroll
    for (int m = 0; m < D / 16; ++m)
#pragma unroll
      for (int c = 0; c < 2 * NQ; ++c)
        wo[(v * max_group + NQ * t + c % NQ) * os + out_order<D>::chan(r, m, c / NQ)] = st[b].o[m][c];
    if (r == 0) {
#pragma unroll
      for (int q = 0; q < NQ; ++q) {
        wm[v * max_group + NQ * t + q] = st[b].m[q];
        wl[v * max_group + NQ * t + q] = st[b].l[q];
      }
    }
  }
  __syncthreads();
  if (sole) {  // block-uniform
    write_rows<QT, D, W, Rotated, NB, VW>(wo, wm, wl, p, seq, u);
    return true;
  }
  constexpr int rows = NB * max_group;
  const int nq = min(rows, p.rows_total - qg * rows);
  // Each thread a run of E channels: row_max and each warp state's factor once per run.
  constexpr int E = 4, runs = D / E;
  static_assert(D % E == 0, "write_partial: D is a multiple of 4");
  for (int idx = threadIdx.x; idx < nq * runs; idx += W * 32) {
    const int q = idx / runs, d = (idx % runs) * E;
    const float mx = row_max<VW, NB>(wm, q);
    float o[E], l;
    row_sum<D, VW, NB, E>(wo, wm, wl, q, mx, d, o, l);
    const std::int64_t r = static_cast<std::int64_t>(slot) * p.slot_rows + q;
    *reinterpret_cast<float4*>(p.ws_o + r * D + d) = make_float4(o[0], o[1], o[2], o[3]);
    if (d == 0) {
      p.ws_ml[2 * r] = mx;
      p.ws_ml[2 * r + 1] = l;
    }
  }
  return false;
}

// Merges the splits of each (sequence, query token, query head) row, normalizes, un-rotates
// (Rotated) and writes the output and the log-sum-exp. One warp per row,
// combine_rows rows per block; lane L holds channels E L .. E L + E - 1
// (E = D / 32). The per-split (m, l) pairs are read one split per lane, the
// partial outputs E floats per lane with merge_splits_in_flight splits' loads in flight, and the
// inverse FWHT runs in registers (stages h < E) and across lanes with
// shuffles (h >= E): no shared memory, no block barrier.
inline constexpr int combine_rows = 4;

// Where one output row (sequence, query token, query head; row < num_seqs x
// q_span x q_heads) comes from and goes to: its unit's partial slots and its
// row of out / lse. Reads only the step's inputs (qo_indptr, the plan's
// spans), never the attention kernel's results, so the merge kernel reads it
// before its grid dependency (PDL) is resolved.
struct row_loc {
  std::int64_t out_row = -1;  // -1: a token past the sequence's count (not written)
  std::int64_t r0 = 0;        // partial row of the first slot
  int S = 0;                  // the unit's slots (chunks)
};
KVTILE_DEVICE row_loc locate_row(const kernel_params& p, std::int64_t row) {
  row_loc L;
  const std::int64_t seq = row / (static_cast<std::int64_t>(p.q_span) * p.q_heads);
  const int rem = static_cast<int>(row % (static_cast<std::int64_t>(p.q_span) * p.q_heads));
  const int i = rem / p.q_heads, qh = rem % p.q_heads, gi = i * p.group + qh % p.group;  // gi: row f of the KV head
  std::int64_t qfirst;
  int qcount;
  query_tokens(p, static_cast<int>(seq), qfirst, qcount);
  if (i >= qcount) return L;
  L.out_row = (qfirst + i) * p.q_heads + qh;
  // The row's partials: slots first .. first + S - 1 of its unit, row gi % unit_rows of each.
  const std::int64_t unit = seq * p.units + (qh / p.group) * p.qgroups + gi / p.unit_rows;
  std::int64_t first;
  if (p.spans) {
    const unit_span sp = p.spans[unit];
    first = sp.first;
    L.S = sp.count;
  } else {
    first = unit * p.num_splits;
    L.S = p.num_splits;
  }
  L.r0 = first * p.slot_rows + gi % p.unit_rows;
  return L;
}

// One output row merged from its unit's partial slots (L: locate_row, a row
// to be written), by one whole warp.
template <class QT, int D, bool Rotated>
KVTILE_DEVICE void merge_row(const kernel_params& p, QT* out, float* lse, const row_loc& L,
                             typename warp_reduce::TempStorage& reduce_tmp) {
  constexpr int E = D / 32;
  static_assert(E == 2 || E == 4 || E == 8, "head_dim 64, 128 or 256");
  const int lane = threadIdx.x & 31;
  const int S = L.S;
  const std::int64_t r0 = L.r0, out_row = L.out_row;
  const int ml_stride = 2 * p.slot_rows, o_stride = p.slot_rows * D;
  const float* ml = p.ws_ml + 2 * r0;
  // Global max of m over the splits, then l = sum f_s l_s, f_s = 2^(m_s - max).
  float mx = -INFINITY;
  for (int s = lane; s < S; s += 32) mx = fmaxf(mx, __ldcg(ml + ml_stride * s));
  mx = __shfl_sync(0xffffffffu, warp_reduce(reduce_tmp).Reduce(mx, cuda::maximum<float>{}), 0);
  __syncwarp();  // reduce_tmp is reused below
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
      constexpr int F = merge_splits_in_flight;  // schedule.hpp: the plan's merge cost counts these rounds
      for (int j0 = 0; j0 < n; j0 += F) {
        float x[F][E];
#pragma unroll
        for (int j = 0; j < F; ++j)
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
        for (int j = 0; j < F; ++j) {
          const float fj = __shfl_sync(0xffffffffu, f, (j0 + j) & 31);
          if (j0 + j < n) {
#pragma unroll
            for (int e = 0; e < E; ++e) o[e] = fmaf(x[j][e], fj, o[e]);
          }
        }
      }
    }
    l = __shfl_sync(0xffffffffu, warp_reduce(reduce_tmp).Sum(l), 0);
  }
  finish_row<QT, D, Rotated>(o, mx, l, out + out_row * D, lse ? lse + out_row : nullptr);
}

// One output row, located and merged (the fused merge's path: no grid dependency).
template <class QT, int D, bool Rotated>
KVTILE_DEVICE void combine_row(const kernel_params& p, QT* out, float* lse, std::int64_t row,
                               typename warp_reduce::TempStorage& reduce_tmp) {
  const row_loc L = locate_row(p, row);
  if (L.out_row >= 0) merge_row<QT, D, Rotated>(p, out, lse, L, reduce_tmp);  // warp-uniform
}

template <class QT, int D, bool Rotated>
__global__ void __launch_bounds__(32 * combine_rows) combine_kernel(kernel_params p, QT* out, float* lse,
                                                                    std::int64_t rows) {
  __shared__ typename warp_reduce::TempStorage reduce_tmp[combine_rows];
  const int warp = threadIdx.x >> 5;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * combine_rows + warp;
  // The row's span and query count are inputs: read while the attention grid runs.
  const row_loc L = row < rows ? locate_row(p, row) : row_loc{};
  // Launched with programmatic stream serialization: wait for the attention grid.
  NV_IF_TARGET(NV_PROVIDES_SM_90, (cudaGridDependencySynchronize();));
  if (L.out_row >= 0) merge_row<QT, D, Rotated>(p, out, lse, L, reduce_tmp[warp]);  // warp-uniform
  // The attention grid is done with the tail pieces' claim words: zeroed for
  // the next run without a new plan (a graph replay).
  const int words = p.tail_pieces * p.tail_cuts;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x) p.claims[i] = 0;
}

// The fused merge (p.counters): after a chunk's partial is written, the CTA
// counts the chunk for its unit; the CTA of the unit's last chunk merges the
// unit's rows (warp w: rows w, w + W, ...) and resets the counter. Every
// thread's partial stores are made visible device-wide before the count
// (__threadfence), and the merging CTA fences again before reading the
// other CTAs' slots (through L2, __ldcg). scratch: 16-byte aligned, room for
// one int and W warp_reduce temp storages, free (the CTA's stages after
// write_partial).
template <class QT, int D, bool Rotated, int W>
KVTILE_DEVICE void finish_chunk(const kernel_params& p, int seq, int u, std::uint8_t* scratch) {
  using temp = typename warp_reduce::TempStorage;
  static_assert(alignof(temp) <= 16, "the temp storages start 16 bytes into the scratch");
  int* last = reinterpret_cast<int*>(scratch);
  temp* tmp = reinterpret_cast<temp*>(scratch + 16);
  const std::int64_t unit = static_cast<std::int64_t>(seq) * p.units + u;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(p.counters + unit, 1) + 1;
    const bool is_last = done >= p.spans[unit].count;
    if (is_last) p.counters[unit] = 0;  // the next run starts from 0
    *last = is_last;
  }
  __syncthreads();
  if (*last) {
    __threadfence();
    const int kvh = u / p.qgroups, qg = u % p.qgroups, warp = threadIdx.x >> 5;
    const int f0 = qg * p.unit_rows, f1 = min(f0 + p.unit_rows, p.rows_total);
    for (int f = f0 + warp; f < f1; f += W) {  // row f of the KV head: token f / group, head f % group
      const std::int64_t row = (static_cast<std::int64_t>(seq) * p.q_span + f / p.group) * p.q_heads +
                               kvh * p.group + f % p.group;
      combine_row<QT, D, Rotated>(p, static_cast<QT*>(p.out), p.lse, row, tmp[warp]);
    }
  }
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
