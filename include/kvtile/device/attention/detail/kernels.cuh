// kvtile/device/attention/detail/kernels.cuh: the two attention kernels (quantized cache, fp16
// baseline): per chunk, barriers, prologue, query, tile loop, partial.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../../config.hpp"
#include "../../../paged/fp16_paged_cache.hpp"
#include "../../../paged/paged_cache.hpp"
#include "common.cuh"
#include "merge.cuh"
#include "pipeline.cuh"
#include "tiles.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// Whether policy P compiles its kernels for target `arch` (10 x compute
// capability): the kernels' bodies (has_body) and the host's selection of a
// policy from the image a device runs (paged_decode.cuh) follow this one rule.
template <class P>
KVTILE_HOST_DEVICE constexpr bool compiled_for(int arch) {
  return arch >= P::min_arch && arch < P::max_arch;
}

// Whether policy P's kernels have a body on the target being compiled; other
// targets get an empty body that traps.
template <class P>
KVTILE_DEVICE constexpr bool has_body() {
#if defined(__CUDA_ARCH__)
  return compiled_for<P>(__CUDA_ARCH__);
#else
  return true;
#endif
}

// The quantized kernel's body. P: the decode policy (its load path); NB
// n-blocks (query rows 8 NB per unit): each ring has NB warps that run every
// tile of the ring, so a record is fetched once for all of them (the ring's
// warps meet on a named barrier before warp 0 refills a stage: warp_loop's
// H = NB path). WB = 1: warp k of the ring holds n-block k (query rows 8 k ..
// 8 k + 7) over the whole tile; WB = NB: warp k holds every n-block over
// half k of the tile's tokens, each code register converted once for all
// of them (quant_tile), the halves merged with the other warp states.
template <class P, class Config, class Packer, class QT, int R, int Stages, bool PK, int Pool, int NB, int WB>
KVTILE_DEVICE void quant_decode_body(const paged_cache_view& cache, const kernel_params& p) {
  constexpr bool Bulk = bulk_path<P>();
  constexpr int D = Config::head_dim, G = Config::tile_tokens, H = warps_per_record<Config>(), W = R * H * NB;
  static_assert(Pool == 0 || (H == 1 && Stages == 1 && Pool > W), "a stage pool: one warp per record, > W stages");
  static_assert(NB == 1 || (H == 1 && Pool == 0 && !PK), "n-blocks: one warp per record and n-block, rings");
  static_assert(WB == 1 || (WB == NB && NB == 2), "a warp holds one n-block, or both over half the tokens");
  constexpr int HT = WB > 1 ? NB : H;  // the warps that share a record's tokens
  using SL = stage_layout<Config, Packer, H>;  // the record in a stage
  // Pool: R x Stages = Pool stages; the 2 Pool barrier slots are Pool full barriers and the tickets.
  // The epilogue's scratch holds W x WB warp states.
  using plan = smem_plan<D, W * WB, Stages, SL::bytes, (Pool > 0 ? Pool : R), true, NB * max_group>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  float* qn = reinterpret_cast<float*>(smem + plan::qn);
  float* nf = reinterpret_cast<float*>(smem + plan::nf);
  uint4* qf = reinterpret_cast<uint4*>(smem + plan::qf);
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(smem + plan::bars);
  std::uint8_t* stages = smem + plan::stages;
  std::uint32_t* tickets = reinterpret_cast<std::uint32_t*>(bars + Pool);
  constexpr int nbars = Pool > 0 ? Pool : R * Stages;  // the full barriers
  // The token split's B-operand exchange, one region per ring behind the plan
  // (where the budget holds it; the launch sizes the same), and its named
  // barriers 1 + R + ring (the rings' refill barriers are 1 + ring).
  constexpr bool XB = WB == 2 && token_split_xchg_total<P, D, R, plan::bytes>() > 0;
  static_assert(!XB || 2 * R + 1 <= 15, "named barriers 1..15");
  std::uint8_t* xb = XB ? smem + plan::bytes + (threadIdx.x >> 5) / NB * token_split_xchg_bytes<D>() : nullptr;
  const int xbar = 1 + R + (threadIdx.x >> 5) / NB;

  int first = 0;
  const int count = chunk_count(p, first);
  // Stage-pool kernels: the CTA's own chunks, then tail pieces it takes (pipeline.cuh, "Tail pieces";
  // the plan lists pieces only for pool steps). The barrier area's second half: the pool's Pool
  // tickets, the tail words (tw) and, in its last word, the next chunk's index.
  constexpr bool Tails = tails_on<P, Pool>();
  static_assert(!Tails || Pool + tail_words < 2 * nbars, "the tail words fit the barrier area");
  int* const tw = reinterpret_cast<int*>(tickets + Pool);
  // One chunk: ci (its work list index), own (one of the CTA's own chunks, not a taken piece).
  auto chunk = [&](int ci, bool first_chunk, bool own) {
    const chunk_ref c = chunk_at(p, ci, cache.seq_lens, G);
    const int seq = c.seq, kvh = c.u / p.qgroups, qg = c.u % p.qgroups;
    init_barriers<nbars, Pool, Bulk>(bars, tickets, first_chunk);
    const tile_span ts = tile_range(cache.seq_lens[seq], G, p.max_len, p.window_left, p.q_span);
    const int n_full = ts.len / G, tail = ts.len % G;
    const int j0 = max(c.j0, ts.jlo), j1 = min(c.j1, ts.n_tiles);
    // A cut chunk of the CTA's own: its pieces start at local tile tw[tw_base] (shared memory, so
    // that the tile loop holds no register for it).
    const int cut = Tails && own && p.tail_pieces > 0 ? p.tail_of[ci] : -1;
    if (Tails && threadIdx.x == 0) start_tail(p, cut, c.j1 - p.tail_pieces * p.piece_tiles - j0, Pool, tw);
    const bool sink = cache.has_sink();
    const std::int32_t* ptab = cache.page_table + static_cast<std::int64_t>(seq) * cache.max_pages_per_seq;
    auto is_quant = [&](int j) { return j < n_full && !(sink && j == 0); };
    // Out-of-range page ids (a corrupt page table) are never dereferenced: the
    // stage's barrier completes without a copy and the tile contributes nothing.
    auto page_ok = [&](int j) {
      const std::int32_t pg = ptab[j];
      return pg >= 0 && pg < cache.num_pages;
    };
    const int lane = threadIdx.x & 31;
    auto stage_src = [&](int j, std::uint8_t* dst, std::uint64_t* bar) {  // issues_copies<Bulk> lanes (pipeline.cuh)
      if (!is_quant(j)) return;
      if (page_ok(j)) {
        stage_record<SL, Bulk>(dst, cache.record(ptab[j], kvh), bar, lane);
      } else {
        stage_skip(bar);
      }
    };
    __syncthreads();  // barriers initialized: the first records fly while the queries are rotated
    if constexpr (Pool > 0) {
      pool_prologue<W, Pool, Bulk>(j0, j1, stages, plan::stage_bytes, bars, tickets, stage_src);
    } else {
      ring_prologue<R, H * NB, Stages, Bulk>(j0, j1, stages, plan::stage_bytes, bars, stage_src);
    }
    load_queries<QT, D, W, true, true, NB * max_group>(p, seq, kvh, qg, qn, nf, qf);
    __syncthreads();

    const int sub = (threadIdx.x >> 5) % HT;                 // this warp's part of the tokens
    const int nb = WB > 1 ? 0 : (threadIdx.x >> 5) % NB;       // its first n-block (H = 1 when NB > 1)
    const int t = (threadIdx.x & 31) & 3;
    const float* qnb = qn + nb * max_group * (D + 16);
    float nfq[WB][2];
    row_bounds rb[WB][2];  // visible tokens of this thread's query columns (packed: query t in both)
    warp_state<D, PK ? 1 : 2> st[WB];
    {
      std::int64_t qfirst;
      int qcount;
      query_tokens(p, seq, qfirst, qcount);
#pragma unroll
      for (int b = 0; b < WB; ++b) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int row = (nb + b) * max_group + (PK ? t : 2 * t + q);
          nfq[b][q] = nf[row];
          rb[b][q] = bounds_of_row(p, qg * NB * max_group + row, ts.len, qcount);
        }
        st[b].reset();
      }
    }

    int xphases = 0;  // phases of this ring's exchange barrier (XB)
    auto run = [&](int j, std::uint8_t* buf, std::uint64_t* bar, std::uint32_t par) -> bool {
      tile_mod md[WB];  // on only at window / causal boundaries or a cap
#pragma unroll
      for (int b = 0; b < WB; ++b) md[b] = make_tile_mod(rb[b], j * G, G, p.cap);
      if (is_quant(j)) {
        mbar_wait(bar, par);
        if (page_ok(j)) {
          quant_tile<Config, Packer, HT, PK, WB, XB>(buf, qnb, nfq, st, sub, md, xb, xbar);
          if constexpr (XB) xphases += 2;
        }
        return true;
      }
      const std::int64_t off = cache.tile_offset(seq, kvh);
#pragma unroll
      for (int b = 0; b < WB; ++b) {
        const uint4* qfb = qf + qf_block<D>(nb + b);
        if (j < n_full) {  // the sink
          fp16_tile<D, G, HT, PK>(reinterpret_cast<const std::uint16_t*>(cache.sink_k + off),
                                  reinterpret_cast<const std::uint16_t*>(cache.sink_v + off), G, md[b], qfb, nfq[b],
                                  st[b], sub);
        } else {
          fp16_tile<D, G, HT, PK>(reinterpret_cast<const std::uint16_t*>(cache.tail_k + off),
                                  reinterpret_cast<const std::uint16_t*>(cache.tail_v + off), tail, md[b], qfb, nfq[b],
                                  st[b], sub);
        }
      }
      return false;
    };
    if constexpr (Pool > 0) {
      // Whether tile k (local; a piece's from tw[tw_base] on) is run here; lane 0 decides, warp-uniform.
      auto keep = [&](int k, int* w) -> bool {
        const int base = reinterpret_cast<const volatile int*>(w)[tw_base];
        if (k < base) return true;
        int s = 0;
        if (lane == 0) s = decide_piece(p, (k - base) / p.piece_tiles, base, w);
        return __shfl_sync(0xffffffffu, s, 0) == 1;
      };
      pool_loop<W, Pool, Bulk, Tails>(j0, j1, sink && j0 == 0, stages, plan::stage_bytes, bars, tickets, stage_src,
                                      run, keep);
    } else {
      warp_loop<R, H * NB, Stages, Bulk, false>(j0, j1, stages, plan::stage_bytes, bars, stage_src, run);
    }
    if constexpr (XB) {
      // Every ring's exchange barrier ends the chunk at the same phase count
      // (two per tile of the ring with the most), as warp_loop pads the refill
      // barriers: with unequal counts compute-sanitizer's racecheck reports
      // write_partial's scratch accesses across its __syncthreads.
      const int most = 2 * ((j1 - j0 + R - 1) / R);
      for (; xphases < most; xphases += 1) named_barrier_sync(xbar, 64);
    }
    if (ci + 1 == first + count) trigger_dependents();  // the merge kernel may start launching
    // The fused merge's code (a unit's sole chunk written as outputs, the
    // last chunk's merge) is compiled in only for such policies: its registers, its spills.
    [[maybe_unused]] const bool sole =
        write_partial<QT, D, W, true, P::fused_merge, PK ? 1 : 2, NB, WB>(st, stages, p, seq, c.u, qg, c.slot);
    if constexpr (P::fused_merge) {
      if (p.counters && !sole) finish_chunk<QT, D, true, W>(p, seq, c.u, stages);  // planned: the fused merge
    }
    if (Tails && tw[tw_cut] >= 0) {  // block-uniform (written before the chunk's first __syncthreads)
      if (threadIdx.x == 0) close_tail(p, tw);
      __syncthreads();
      write_kept_pieces<D, W * 32>(p, c.slot, tw);
    }
    fence_proxy_async();  // the stage area was scratch (generic proxy) before the next chunk's bulk copies
  };
  if constexpr (!Tails) {
    for (int ci = first; ci < first + count; ++ci) {
      chunk(ci, ci == first, true);
      __syncthreads();
    }
  } else {
    // One call of chunk (its code once): the CTA's own chunks, then pieces while any is free. A CTA
    // without chunks of its own takes none: at 16 x 64K (128 units on 132 CTAs) that was 1.1% faster
    // for k2v2_g128, 0.8% with 2 new tokens, the same for k4v2_g128 (H100, 2026-12-07-h100-tail-pieces.md).
    int* const next_slot = reinterpret_cast<int*>(bars + nbars) + 2 * nbars - 1;
    const bool tails = p.tail_pieces > 0;
    int ci = count > 0 ? first : -1;
    for (bool first_chunk = true; ci >= 0; first_chunk = false) {
      chunk(ci, first_chunk, ci < first + count);
      __syncthreads();
      if (ci + 1 < first + count) {
        ++ci;
        continue;
      }
      if (!tails) break;
      if (threadIdx.x < 32) take_piece(p, next_slot);
      __syncthreads();
      ci = *next_slot;
    }
  }
}

template <class P, class Config, class Packer, class QT, int R, int Stages, bool PK, int Pool = 0, int NB = 1,
          int WB = 1>
__global__ void __launch_bounds__(R * warps_per_record<Config>() * NB * 32, 1)
    quant_decode_kernel(const __grid_constant__ paged_cache_view cache, const __grid_constant__ kernel_params p) {
  if constexpr (has_body<P>()) {
    quant_decode_body<P, Config, Packer, QT, R, Stages, PK, Pool, NB, WB>(cache, p);
  } else {
    __trap();
  }
}

template <class P, int D, int PT, class QT, int W, int Stages>
KVTILE_DEVICE void fp16_decode_body(const fp16_paged_cache_view& cache, const kernel_params& p) {
  constexpr bool Bulk = bulk_path<P>();
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
    init_barriers<W * Stages, 0, Bulk>(bars, nullptr, ci == first);
    load_queries<QT, D, W, false, false>(p, seq, kvh, qg, qn, nf, qf);
    __syncthreads();

    const tile_span ts = tile_range(cache.seq_lens[seq], PT, p.max_len, p.window_left, p.q_span);
    const int len = ts.len;
    const int j0 = max(c.j0, ts.jlo), j1 = min(c.j1, ts.n_tiles);
    const std::int32_t* ptab = cache.page_table + static_cast<std::int64_t>(seq) * cache.max_pages_per_seq;
    auto page_ok = [&](int j) {
      const std::int32_t pg = ptab[j];
      return pg >= 0 && pg < cache.num_pages;
    };

    const int t = (threadIdx.x & 31) & 3;
    const float nfq[2] = {nf[2 * t], nf[2 * t + 1]};
    row_bounds rb[2];
    {
      std::int64_t qfirst;
      int qcount;
      query_tokens(p, seq, qfirst, qcount);
#pragma unroll
      for (int q = 0; q < 2; ++q) rb[q] = bounds_of_row(p, qg * max_group + 2 * t + q, len, qcount);
    }
    warp_state<D> st[1];
    st[0].reset();

    const int lane = threadIdx.x & 31;
    auto stage_src = [&](int j, std::uint8_t* dst, std::uint64_t* bar) {  // issues_copies<Bulk> lanes (pipeline.cuh)
      if (!page_ok(j)) {
        stage_skip(bar);
        return;
      }
      const std::int64_t off = cache.block_offset(ptab[j], kvh);
      const auto* k = reinterpret_cast<const std::uint8_t*>(cache.k + off);
      const auto* v = reinterpret_cast<const std::uint8_t*>(cache.v + off);
      if constexpr (Bulk) {
        mbar_expect_tx(bar, static_cast<std::uint32_t>(2 * half_bytes));
        bulk_copy_g2s(dst, k, static_cast<std::uint32_t>(half_bytes), bar);
        bulk_copy_g2s(dst + half_bytes, v, static_cast<std::uint32_t>(half_bytes), bar);
      } else {
        warp_copy_async(dst, k, static_cast<std::uint32_t>(half_bytes), lane);
        warp_copy_async(dst + half_bytes, v, static_cast<std::uint32_t>(half_bytes), lane);
        cp_async_arrive(bar);
      }
    };
    auto run = [&](int j, std::uint8_t* buf, std::uint64_t* bar, std::uint32_t par) -> bool {
      mbar_wait(bar, par);
      if (page_ok(j)) {
        const int nv = min(PT, len - j * PT);
        fp16_tile<D, PT>(reinterpret_cast<const std::uint16_t*>(buf),
                         reinterpret_cast<const std::uint16_t*>(buf + half_bytes), nv, make_tile_mod(rb, j * PT, PT, p.cap),
                         qf, nfq, st[0]);
      }
      return true;
    };
    warp_loop<W, 1, Stages, Bulk>(j0, j1, stages, plan::stage_bytes, bars, stage_src, run);
    if (ci + 1 == first + count) trigger_dependents();  // the merge kernel may start launching
    [[maybe_unused]] const bool sole =
        write_partial<QT, D, W, false, P::fused_merge>(st, stages, p, seq, c.u, qg, c.slot);
    if constexpr (P::fused_merge) {
      if (p.counters && !sole) finish_chunk<QT, D, false, W>(p, seq, c.u, stages);  // planned: the fused merge
    }
    fence_proxy_async();
    __syncthreads();
  }
}

template <class P, int D, int PT, class QT, int W, int Stages>
__global__ void __launch_bounds__(W * 32, 1)
    fp16_decode_kernel(const __grid_constant__ fp16_paged_cache_view cache, const __grid_constant__ kernel_params p) {
  if constexpr (has_body<P>()) {
    fp16_decode_body<P, D, PT, QT, W, Stages>(cache, p);
  } else {
    __trap();
  }
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
