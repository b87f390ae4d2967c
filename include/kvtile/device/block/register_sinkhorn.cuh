// kvtile/device/block/register_sinkhorn.cuh: the Sinkhorn normalization of
// normalization/sinkhorn.hpp for one tile side, with the fp32 tile held in
// REGISTERS of a whole thread block, bit-identical to the host.
//
// Used by block_tile_codec (block_tile_codec.cuh) when the side's matrix
// M[R x C] fits: see register_sinkhorn_shape::ok. The codec's scale and code
// stages use the same layout (load, row_broadcast, row_reduce_with,
// register_tile). CUDA only (.cuh).
//
// Register layout. With W = BLOCK_THREADS / 32 warps, MR = R / W and
// JC = C / 32, thread (warp w, lane l) holds the MR x JC elements
//     x[a][j] = M[r][c],  r = w + W * m,  m = a ^ s(l),  c = l + 32 j,
// where s(l) = l >> (5 - S), S = log2(MR): the row slot m of register a is
// XOR-permuted by the lane's top S bits. The permutation is what makes the
// row reduce-scatter below free of selects, and it is invisible to every
// per-element operation (the per-row values rr[a], rmean[a] use the same
// permuted index). Per-column values (rc) are the same in every warp.
//
// Canonical order (detail/reduce.hpp: halving trees, most significant index
// bit first; IEEE addition is commutative, so a pair may be added in either
// operand order):
//  * row sums, over c = l + 32 j: the j bits (c's high bits) lane-locally,
//    then lane bits 16, 8, 4, 2, 1. The first S lane stages are a
//    reduce-scatter: at lane bit 16 >> t, a lane keeps the registers
//    a < MR >> (t+1) and adds the partner's registers a + (MR >> (t+1)),
//    which hold the SAME row slots (the partner's s differs in exactly that
//    bit) and the partner's positions p ^ (16 >> t). After S stages register
//    0 holds row slot s(l) (the lane's "own" row), summed over the positions
//    congruent to l modulo 32 >> S; the remaining 5 - S stages are ordinary
//    butterflies. A row's statistics (mean, std, the log-domain update) are
//    therefore computed once per lane instead of MR times, and broadcast back
//    with one shuffle per register (the owner of register a's row slot is
//    lane l ^ (a << (5 - S))).
//  * column sums, over r = w + W m: the m bits (r's high bits) lane-locally
//    (a halving tree over the register index a: XOR-permuting a keeps every
//    pair {m, m ^ h} of the host's tree), then the warp bits W/2, ..., 1
//    through shared memory: column c is "owned" by thread t = c (the first
//    C / 32 warps), which loads the W warps' partials of its column and sums
//    them by a halving tree over the warp index. Column statistics and the
//    column update are computed by the owners (the other warps skip them),
//    the reciprocal 1/e^Lc is broadcast through shared memory.
//  * imbalance: min/max of non-negative, non-NaN stds (never -0: sqrt of a
//    sum of squares, times a positive reciprocal), so order-free; done on
//    the float bits (for non-negative
//    floats, unsigned order == float order): per warp by cub::WarpReduce
//    (redux.sync on sm_80+), across the warps' partials by __reduce_*_sync
//    directly, where every lane needs the result (CUB's is lane 0's).
// The float sums (row_reduce, col_gather, tree) stay hand-written: their
// order decides bytes. row_reduce_with is a reduce-scatter (each lane keeps a
// different row), which no CUB warp primitive does.
//
// Per iteration (sinkhorn.hpp): column update (done eagerly at the end of the
// previous column pass, by the owners), W = X * rc, row stds of W
// (warp-local), row update, Z = X * rr, column stds of Z (4 block barriers),
// imbalance, best-so-far with ties to the later iterate. X is re-read from
// shared memory for W and for Z.
#pragma once

#include "../../config.hpp"

#include <cstdint>

#include "../../detail/bits.hpp"
#include "../../detail/fastmath.hpp"
#include "../../detail/reduce.hpp"
#include "../../normalization/sinkhorn.hpp"
#include "../warp/warp_primitives.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// Which (R, C, BLOCK_THREADS) the register Sinkhorn supports.
template <int R, int C, int BLOCK_THREADS>
struct register_sinkhorn_shape {
  static constexpr bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
  static constexpr int log2i(int n) { return n <= 1 ? 0 : 1 + log2i(n / 2); }
  static constexpr int WARPS = BLOCK_THREADS / 32;
  static constexpr int MR = WARPS > 0 ? R / WARPS : 0;
  static constexpr int JC = C / 32;
  // Elements per thread: at 512 threads (128 registers per thread at most)
  // the tile and the iterate take 2 * 32 registers.
  static constexpr int max_elements = 32;
  static constexpr bool ok = pow2(R) && pow2(C) && pow2(BLOCK_THREADS) && BLOCK_THREADS >= 32 &&
                             R % WARPS == 0 && MR >= 1 && MR <= 32 && C % 32 == 0 && C >= WARPS &&
                             C <= BLOCK_THREADS && MR * JC <= max_elements && R >= 2 && C >= 2;
};

template <int R, int C, int BLOCK_THREADS>
struct register_sinkhorn {
  using shape = register_sinkhorn_shape<R, C, BLOCK_THREADS>;
  static_assert(shape::ok, "register_sinkhorn: unsupported tile shape / block size");

  static constexpr int WARPS = shape::WARPS;
  static constexpr int MR = shape::MR;                 // row slots per thread
  static constexpr int JC = shape::JC;                 // columns per lane
  static constexpr int S = shape::log2i(MR);           // reduce-scatter stages
  // Column statistics by the first CW warps, thread t < C owning column t
  // (one column per thread; every thread, BLOCK_THREADS / C per column, was
  // slower with the same bits: docs/gpu-codec.md, "Tuning: paged_policy").
  static constexpr int CW = C / 32;
  // Stride of the per-warp column partials. The padding (32 / (BLOCK_THREADS
  // / C) mod 32 floats) served the former multi-owner gather; the one-owner
  // accesses are conflict free at any stride. Kept so the layout (and the
  // generated code) is unchanged.
  static constexpr int CS = C + ((32 / (BLOCK_THREADS / C)) & 31);

  // Shared memory of the register path (a few KB).
  struct storage {
    float part[WARPS * CS];      // per-warp column partials, warp-major
    float cmean[C];              // column means (broadcast)
    float rc[C];                 // 1 / e^Lc (broadcast)
    std::uint32_t mm[4][WARPS];  // per-warp min/max of col stds, row sums of squares (float bits)
  };

  // Loads x[a][j] = M[w + W (a ^ s)][l + 32 j] where M[r][c] = tile[r * rs + c * cs]
  // (the shared tile of block_tile_codec, row stride odd: conflict free).
  KVTILE_DEVICE static void load(const float* tile, int rs, int cs, float (&x)[MR][JC]) {
    const int lane = lane_id(), warp = static_cast<int>(threadIdx.x >> 5);
    const int s = row_slot();
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      const int r = warp + WARPS * (a ^ s);
#pragma unroll
      for (int j = 0; j < JC; ++j) x[a][j] = tile[r * rs + (lane + 32 * j) * cs];
    }
  }

  // Row slot owned by this lane (the slot of register 0).
  KVTILE_DEVICE static int row_slot() { return S == 0 ? 0 : lane_id() >> (5 - S); }

  // out[a] = the own-row value of the lane owning register a's row slot.
  KVTILE_DEVICE static void row_broadcast(float own, float (&out)[MR]) {
    out[0] = own;
#pragma unroll
    for (int a = 1; a < MR; ++a) out[a] = __shfl_xor_sync(full_warp_mask, own, a << (5 - S));
  }

  // Helpers of the register scale / code stages (block_tile_codec). Unlike the
  // sums below, the reductions here are ORDER-FREE (integer min / max), so
  // any pairing gives the host's result.

  // v[a]: this lane's value for row slot a ^ s (already reduced over its JC
  // columns). Returns op over the whole row of the lane's own row slot s,
  // in every lane (reduce-scatter + butterflies, as row_reduce).
  template <class T, class Op>
  KVTILE_DEVICE static T row_reduce_with(T (&v)[MR], Op op) {
    scatter_stages_with<0>(v, op);
    T r = v[0];
#pragma unroll
    for (int b = 16 >> S; b >= 1; b /= 2) r = op(r, __shfl_xor_sync(full_warp_mask, r, b));
    return r;
  }

  // sinkhorn<Iterations>::run on the side's matrix M[r][c] = tile[r * rs + c * cs]
  // (shared memory, read-only here). W and Z live in registers; X is re-read
  // from the tile for each (keeping it in registers too would exceed 128
  // registers per thread at 32 elements). Writes the best column
  // scale to best_col[C] (one writer per column). No barrier at the end: the
  // caller synchronizes before reading best_col. Every thread of the block
  // must call it.
  template <int Iterations>
  KVTILE_DEVICE static void run(storage& sm, const float* tile, int rs, int cs, float* best_col) {
    static_assert(Iterations >= 1, "register_sinkhorn: use unit scales for 0 iterations");
    const int t = static_cast<int>(threadIdx.x);
    const int c_own = t;            // owned column (t < C)
    const bool col_writer = t < C;  // its one writer
    // Column owner state (column c_own): log scale, e^Lc of the current
    // iterate, of the next one, of the best iterate so far, and 1 / e^Lc of
    // the current and the next iterate.
    float lc = 0.0f, ec = 1.0f, ec_next = 1.0f, best_ec = 1.0f, rc_cur = 1.0f, rc_next = 1.0f;
    // Row owner state (row slot row_slot() of this warp): log scale and
    // 1 / e^Lr (register a's value is broadcast from lane l ^ (a << (5 - S))).
    float lr = 0.0f, rr_own = 1.0f;
    // 1 / e^Lc of the lane's columns.
    float rc[JC];
#pragma unroll
    for (int j = 0; j < JC; ++j) rc[j] = 1.0f;

    float cur[MR][JC];  // X, then W = X * rc or Z = X * rr
    load(tile, rs, cs, cur);
    float rsd = row_std_own(cur);  // row std of X
    float best = col_stats(sm, cur, c_own, col_writer, lc, ec_next, rc_cur, rc_next, rc, rsd, true);

#pragma unroll 1
    for (int it = 0; it < Iterations; ++it) {
      ec = ec_next;  // column update (computed by col_stats); rc[] already holds 1 / ec
      rc_cur = rc_next;
      // W = X * rc: row stds, row update (host: sw * rr before and after it)
      load(tile, rs, cs, cur);
#pragma unroll
      for (int a = 0; a < MR; ++a)
#pragma unroll
        for (int j = 0; j < JC; ++j) cur[a][j] = detail::mul(cur[a][j], rc[j]);
      const float sw = row_std_own(cur);
      detail::sinkhorn_update(lr, detail::mul(sw, rr_own), rr_own);
      rsd = detail::mul(sw, rr_own);
      // Z = X * rr: column stds (times rc), imbalance, next column update
      {
        float rr[MR];
        row_broadcast(rr_own, rr);
        load(tile, rs, cs, cur);
#pragma unroll
        for (int a = 0; a < MR; ++a)
#pragma unroll
          for (int j = 0; j < JC; ++j) cur[a][j] = detail::mul(cur[a][j], rr[a]);
      }
      const float m = col_stats(sm, cur, c_own, col_writer, lc, ec_next, rc_cur, rc_next, rc, rsd, it + 1 < Iterations);
      if (m <= best) {  // ties go to the later iterate
        best = m;
        best_ec = ec;
      }
    }
    if (col_writer) best_col[c_own] = best_ec;
  }

 private:
  // In-place halving-tree sum of N lane-local values (destroys v); canonical
  // order (it decides bytes), so hand-written. Stages are
  // template-recursive so every index is a compile-time constant (a loop the
  // unroller leaves rolled would put v in local memory).
  template <int H, int N>
  KVTILE_DEVICE static void tree_stages(float (&v)[N]) {
    if constexpr (H >= 1) {
#pragma unroll
      for (int i = 0; i < H; ++i) v[i] = detail::add(v[i], v[i + H]);
      tree_stages<H / 2>(v);
    }
  }
  template <int N>
  KVTILE_DEVICE static float tree(float (&v)[N]) {
    tree_stages<N / 2>(v);
    return v[0];
  }

  // Reduce-scatter stage st (lane bit 16 >> st): keep registers a < H, add the
  // partner's registers a + H (the same row slots), H = MR >> (st + 1).
  template <int St>
  KVTILE_DEVICE static void scatter_stages(float (&v)[MR]) {
    if constexpr (St < S) {
      constexpr int H = MR >> (St + 1);
#pragma unroll
      for (int a = 0; a < H; ++a) v[a] = detail::add(v[a], __shfl_xor_sync(full_warp_mask, v[a + H], 16 >> St));
      scatter_stages<St + 1>(v);
    }
  }

  template <int St, class T, class Op>
  KVTILE_DEVICE static void scatter_stages_with(T (&v)[MR], Op op) {
    if constexpr (St < S) {
      constexpr int H = MR >> (St + 1);
#pragma unroll
      for (int a = 0; a < H; ++a) v[a] = op(v[a], __shfl_xor_sync(full_warp_mask, v[a + H], 16 >> St));
      scatter_stages_with<St + 1>(v, op);
    }
  }

  // v[a]: this lane's partial of row slot a ^ s over its positions. Returns the
  // full canonical row sum of the lane's own row slot s (see the file comment).
  // Hand-written: canonical order (decides bytes) and a reduce-scatter.
  KVTILE_DEVICE static float row_reduce(float (&v)[MR]) {
    scatter_stages<0>(v);
    float s = v[0];
#pragma unroll
    for (int b = 16 >> S; b >= 1; b /= 2) s = detail::add(s, __shfl_xor_sync(full_warp_mask, s, b));
    return s;
  }

  // Row partial sums of cur over this lane's JC columns (j bits: c's high bits).
  KVTILE_DEVICE static void row_partials(const float (&cur)[MR][JC], float (&rp)[MR]) {
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      float v[JC];
#pragma unroll
      for (int j = 0; j < JC; ++j) v[j] = cur[a][j];
      rp[a] = tree(v);
    }
  }
  // Row partial sums of squared deviations from the row means rm[a].
  KVTILE_DEVICE static void row_dev_partials(const float (&cur)[MR][JC], const float (&rm)[MR], float (&rp)[MR]) {
#pragma unroll
    for (int a = 0; a < MR; ++a) {
      float v[JC];
#pragma unroll
      for (int j = 0; j < JC; ++j) {
        const float d = detail::sub(cur[a][j], rm[a]);
        v[j] = detail::mul(d, d);
      }
      rp[a] = tree(v);
    }
  }

  // Std (detail::canonical_std over the C columns) of the lane's own row slot.
  KVTILE_DEVICE static float row_std_own(const float (&cur)[MR][JC]) {
    float rp[MR], rm[MR];
    row_partials(cur, rp);
    row_broadcast(detail::div_by<C>(row_reduce(rp)), rm);
    row_dev_partials(cur, rm, rp);
    return detail::sqrt(detail::div_by<C - 1>(row_reduce(rp)));
  }

  // Publishes this warp's column partials p[j] (column lane + 32 j).
  KVTILE_DEVICE static void col_publish(storage& sm, const float (&p)[JC]) {
    const int lane = lane_id(), warp = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
    for (int j = 0; j < JC; ++j) sm.part[warp * CS + lane + 32 * j] = p[j];
  }
  // After a barrier, in thread t < C: the full canonical column sum of
  // column t, a halving tree over the warp index (hand-written: the order
  // decides bytes). Bank-conflict free: a warp reads 32 consecutive floats.
  KVTILE_DEVICE static float col_gather(const storage& sm) {
    const int t = static_cast<int>(threadIdx.x);
    float v[WARPS];
#pragma unroll
    for (int i = 0; i < WARPS; ++i) v[i] = sm.part[i * CS + t];
    return tree(v);
  }

  // Column stds of cur (= rc_cur * the column stds of z = X * rr: the host's
  // canonical_col_std and mul) and the imbalance with the row stds of cur
  // (rsd: the lane's own row). The column owners also do the next column
  // update (sinkhorn_update on lc) when `update`, leaving ec_next, rc_next =
  // 1 / ec_next and, in every thread, rc[] = 1 / ec_next of its columns.
  KVTILE_DEVICE static float col_stats(storage& sm, const float (&z)[MR][JC], int c_own, bool col_writer, float& lc,
                                       float& ec_next, float rc_cur, float& rc_next, float (&rc)[JC], float rsd,
                                       bool update) {
    const int lane = lane_id(), warp = static_cast<int>(threadIdx.x >> 5);
    // Pass 1: sums.
    {
      float cp[JC];
#pragma unroll
      for (int j = 0; j < JC; ++j) {
        float v[MR];
#pragma unroll
        for (int a = 0; a < MR; ++a) v[a] = z[a][j];
        cp[j] = tree(v);  // m bits (r's high bits)
      }
      col_publish(sm, cp);
    }
    __syncthreads();  // (1) partial sums published
    if (warp < CW) {  // warp-uniform
      const float mean = detail::div_by<R>(col_gather(sm));
      if (col_writer) sm.cmean[c_own] = mean;
    }
    __syncthreads();  // (2) column means published; part is free again
    // Pass 2: squared deviations.
    {
      float cm[JC], cp[JC];
#pragma unroll
      for (int j = 0; j < JC; ++j) cm[j] = sm.cmean[lane + 32 * j];
#pragma unroll
      for (int j = 0; j < JC; ++j) {
        float v[MR];
#pragma unroll
        for (int a = 0; a < MR; ++a) {
          const float d = detail::sub(z[a][j], cm[j]);
          v[a] = detail::mul(d, d);
        }
        cp[j] = tree(v);
      }
      col_publish(sm, cp);
    }
    {
      // Row stds (>= +0, never NaN) only enter the imbalance, through their
      // min and max: order free, taken on the float bits.
      std::uint32_t lo, hi;
      warp_min_max_bits_lane0(rsd, rsd, lo, hi);
      if (lane == 0) {
        sm.mm[2][warp] = lo;
        sm.mm[3][warp] = hi;
      }
    }
    __syncthreads();  // (3) squared-deviation partials and row min/max published
    if (warp < CW) {  // warp-uniform
      const float csd = detail::mul(detail::sqrt(detail::div_by<R - 1>(col_gather(sm))), rc_cur);
      std::uint32_t lo, hi;
      warp_min_max_bits_lane0(csd, csd, lo, hi);
      if (lane == 0) {
        sm.mm[0][warp] = lo;
        sm.mm[1][warp] = hi;
      }
      if (update) {  // block-uniform
        ec_next = detail::sinkhorn_update(lc, csd, rc_next);
        if (col_writer) sm.rc[c_own] = rc_next;
      }
    }
    __syncthreads();  // (4) column min/max and rc published
    if (update)
#pragma unroll
      for (int j = 0; j < JC; ++j) rc[j] = sm.rc[lane + 32 * j];
    if (warp >= CW) return 0.0f;  // only the column writers use the imbalance
    const int k = lane % WARPS, kc = lane % CW;
    const float cmin = detail::float_from_bits(__reduce_min_sync(full_warp_mask, sm.mm[0][kc]));
    const float cmax = detail::float_from_bits(__reduce_max_sync(full_warp_mask, sm.mm[1][kc]));
    const float rmin = detail::float_from_bits(__reduce_min_sync(full_warp_mask, sm.mm[2][k]));
    const float rmax = detail::float_from_bits(__reduce_max_sync(full_warp_mask, sm.mm[3][k]));
    return detail::add(detail::imbalance_term(cmax, cmin), detail::imbalance_term(rmax, rmin));
    // Reuse of the shared arrays by the next call: part is rewritten before
    // the next (1) (read before (2) and before (4)) and after (2); cmean after
    // the next (1) (read before (3)); mm[2..3] after the next (2), rc and
    // mm[0..1] after the next (3) (all read right after (4), before the next
    // (1)). row_std_own and load between two calls touch no shared array.
  }
};

// register_sinkhorn<R, C, BLOCK_THREADS>::storage where the shape is
// supported, else a one-byte placeholder (for unions in TempStorage).
template <int R, int C, int BLOCK_THREADS, bool = register_sinkhorn_shape<R, C, BLOCK_THREADS>::ok>
struct register_sinkhorn_storage {
  struct type {
    char unused;
  };
};
template <int R, int C, int BLOCK_THREADS>
struct register_sinkhorn_storage<R, C, BLOCK_THREADS, true> {
  using type = typename register_sinkhorn<R, C, BLOCK_THREADS>::storage;
};

// Per-thread registers of one side's tile in the register layout (float
// v[MR][JC]) where the shape is supported, else a 1 x 1 placeholder.
template <int R, int C, int BLOCK_THREADS, bool = register_sinkhorn_shape<R, C, BLOCK_THREADS>::ok>
struct register_tile {
  float v[1][1];
};
template <int R, int C, int BLOCK_THREADS>
struct register_tile<R, C, BLOCK_THREADS, true> {
  float v[register_sinkhorn_shape<R, C, BLOCK_THREADS>::MR][register_sinkhorn_shape<R, C, BLOCK_THREADS>::JC];
};

}  // namespace device
KVTILE_NAMESPACE_END
