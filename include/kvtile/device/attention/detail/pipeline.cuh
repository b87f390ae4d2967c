// kvtile/device/attention/detail/pipeline.cuh: shared-memory plan and tile pipelines of the decode
// kernels: the stage layout budget, the ring loop (W warps, 2 stages each),
// the stage pool (W warps share S > W stages), the CTA's chunks (plan or grid)
// and the barriers' phases from chunk to chunk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../../config.hpp"
#include "common.cuh"
#include "fragments.cuh"
#include "schedule.hpp"
#include "tile_layout.cuh"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// The epilogue's reuse of the stage area: per warp state O [8][D + 4], m [8], l [8].
template <int D, int WarpStates>
constexpr std::size_t merge_scratch_bytes() {
  return sizeof(float) * WarpStates * max_group * (D + 4 + 2);
}

// The exchange's bytes for R rings behind a plan of PlanBytes under policy P
// (decode_policy::token_split_exchange), or 0 where it is off or does not fit
// the policy's budget (each warp then makes every k-step's operands).
template <class P, int D, int R, std::size_t PlanBytes>
constexpr std::size_t token_split_xchg_total() {
  constexpr std::size_t bytes = R * token_split_xchg_bytes<D>();
  return P::token_split_exchange && PlanBytes + bytes <= P::smem_budget ? bytes : 0;
}

// Shared-memory plan of a decode CTA.
// W warps share R rings of Stages stages (W / R warps per ring, each taking
// part of every tile); each stage has a "full" mbarrier and a second 8-byte
// slot (the stage pool's tickets).
// KeepQn: the fp32 query rows stay live next to the fragments (the quantized
// kernel's per-tile q a path); otherwise the fragments overwrite them once made.
// Rows: query rows of the CTA (8 per n-block).
template <int D, int W, int Stages, std::size_t StageBytes, int R = W, bool KeepQn = false, int Rows = max_group>
struct smem_plan {
  static constexpr int q_stride = D + 16;  // floats; keeps the 16-byte query reads conflict-free
  static constexpr std::size_t qn = 0;
  static constexpr std::size_t nf = qn + sizeof(float) * Rows * q_stride;
  // qf: the query as QK B-operand fragments, fp16 hi and lo (qf_index below).
  static constexpr std::size_t qf = KeepQn ? (nf + sizeof(float) * Rows + 15) / 16 * 16 : qn;
  static constexpr std::size_t bars = KeepQn ? qf + sizeof(std::uint32_t) * 4 * Rows * D / 4
                                             : nf + sizeof(float) * Rows;
  static constexpr std::size_t stages = (bars + 2 * 8 * R * Stages + 127) / 128 * 128;
  static constexpr std::size_t stage_bytes = (StageBytes + 127) / 128 * 128;
  static constexpr std::size_t stage_area = stage_bytes * R * Stages;
  static constexpr std::size_t bytes = stages + stage_area;
  static constexpr std::size_t merge_bytes = merge_scratch_bytes<D, W>();
  static_assert(merge_bytes <= stage_area, "epilogue scratch must fit in the stage area");
};

// Budget: the shared memory a policy may plan for (decode_policy::smem_budget,
// a device's opt-in limit per block).
// Warps (rings) whose stages fit the budget less 13 KB for the query rows, the
// fragments and the barriers; fit_rings then checks the whole plan.
template <std::size_t StageBytes, int Stages, int MaxW, std::size_t Budget>
constexpr int warps_for() {
  const std::size_t per_warp = (StageBytes + 127) / 128 * 128 * Stages + 16 * Stages;
  const std::size_t w = (Budget - 13 * 1024) / per_warp;
  return w >= MaxW ? MaxW : (w < 1 ? 1 : static_cast<int>(w));
}

// The largest ring count <= R whose plan (stages of StageBytes) fits Budget
// (1 if none does: the policy's static_assert then rejects it).
template <int D, int Stages, std::size_t StageBytes, bool KeepQn, int R, std::size_t Budget, int Rows = max_group>
constexpr int fit_rings() {
  if constexpr (R <= 1) {
    return 1;
  } else if constexpr (smem_plan<D, R * (Rows / max_group), Stages, StageBytes, R, KeepQn, Rows>::bytes <= Budget) {
    return R;
  } else {
    return fit_rings<D, Stages, StageBytes, KeepQn, R - 1, Budget, Rows>();
  }
}

// The largest pool size <= P (stages shared by W warps) that fits Budget, or
// 0 when that is not more than W (a pool needs spare stages).
template <int D, int W, std::size_t StageBytes, bool KeepQn, int P, std::size_t Budget>
constexpr int fit_pool() {
  if constexpr (P <= W) {
    return 0;
  } else if constexpr (smem_plan<D, W, 1, StageBytes, P, KeepQn>::bytes <= Budget) {
    return P;
  } else {
    return fit_pool<D, W, StageBytes, KeepQn, P - 1, Budget>();
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

// Warps per record: one (two warps sharing a record measured 5-8% slower on
// the H200; docs/attention.md).
template <class Config>
constexpr int warps_per_record() {
  return 1;
}

// Warp loop shared by both kernels: tiles j in [j0, j1) of one sequence. The
// W = R * H warps form R rings of H warps; ring w takes tiles j0 + w, j0 + w + R,
// ..., every warp of the ring runs every tile of it (each its part).
// stage_src(j, dst, bar) issues the copies of an async tile (nothing if the tile
// is not staged), called by lane 0 of the issuing warp with bulk copies and by
// every lane of it with cp.async (Bulk: the load path, fragments.cuh);
// run(j, stage, bar, parity) processes tile j and returns whether it was
// staged. The ring's warp 0 issues the copies; with
// H = 2 both warps of the ring meet on named barrier 1 + ring (bar.sync) after
// each staged tile that is followed by a refill, so the other warp's reads of
// the stage precede the refill (bar.arrive alone would not do: a warp a tile
// ahead would arrive twice in one barrier phase).
template <bool Bulk>
KVTILE_DEVICE bool issues_copies(int lane) {
  return !Bulk || lane == 0;
}

template <int R, int H, int Stages, bool Bulk, class StageFn>
KVTILE_DEVICE void ring_prologue(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* bars,
                                 StageFn&& stage_src) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ring = warp / H, sub = warp % H;
  std::uint8_t* my = stages + static_cast<std::size_t>(ring) * Stages * stage_bytes;
#pragma unroll
  for (int k = 0; k < Stages; ++k) {
    const int j = j0 + ring + k * R;
    if (j < j1 && sub == 0 && issues_copies<Bulk>(lane)) stage_src(j, my + k * stage_bytes, bars + ring * Stages + k);
  }
}

// Prologue = false: the caller has run ring_prologue already.
template <int R, int H, int Stages, bool Bulk, bool Prologue = true, class StageFn, class RunFn>
KVTILE_DEVICE void warp_loop(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* bars,
                             StageFn&& stage_src, RunFn&& run) {
  static_assert(H == 1 || H == 2, "one or two warps per ring");
  static_assert(H == 1 || R <= 15, "named barriers 1..15, one per ring");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ring = warp / H, sub = warp % H;
  std::uint8_t* my = stages + static_cast<std::size_t>(ring) * Stages * stage_bytes;
  std::uint64_t* full = bars + ring * Stages;
  std::uint32_t parity = 0;
  int phases = 0;  // named-barrier phases of this ring (H = 2)
  if constexpr (Prologue) ring_prologue<R, H, Stages, Bulk>(j0, j1, stages, stage_bytes, bars, stage_src);
  for (int k = 0;; ++k) {
    const int j = j0 + ring + k * R;
    if (j >= j1) break;
    const int sidx = k % Stages;
    std::uint8_t* buf = my + sidx * stage_bytes;
    const bool staged = run(j, buf, full + sidx, (parity >> sidx) & 1u);
    if (staged) parity ^= 1u << sidx;
    __syncwarp();
    const int jn = j + Stages * R;
    if (jn >= j1) continue;
    if constexpr (H > 1) {
      // Both warps, same condition: one barrier phase per refilled staged stage.
      if (staged) {
        named_barrier_sync(1 + ring, 32 * H);
        ++phases;
      }
      if (sub != 0) continue;
    }
    if (issues_copies<Bulk>(lane)) {
      fence_proxy_async();
      stage_src(jn, buf, full + sidx);
    }
  }
  if constexpr (H > 1) {
    // Every ring ends with the same number of phases (the iterations of ring 0,
    // a bound on any ring's count) before the CTA's merge. With unequal counts,
    // compute-sanitizer's racecheck reports write_partial's stores after the
    // __syncthreads against the stage reads (tests/device/attention.cu --small:
    // hazards unpadded, none padded). The extra phases cost little on the
    // GQA 16 and multi-query rows (docs/attention.md).
    const int most = (j1 - j0 + R - 1) / R;
    for (; phases < most; ++phases) named_barrier_sync(1 + ring, 32 * H);
  }
}

// Stage pool (decode_policy::pool_stages): S stages shared by W warps (S > W, one
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

// With cp.async every lane issues copies: the warp meets before lane 0 hands
// the stage on (the copies, and their barrier arrivals, precede the ticket).
template <int W, int S, bool Bulk, class StageFn>
KVTILE_DEVICE void pool_prologue(int j0, int j1, std::uint8_t* stages, std::size_t stage_bytes, std::uint64_t* full,
                                 std::uint32_t* tickets, StageFn&& stage_src) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (!issues_copies<Bulk>(lane)) return;
  for (int k = warp; k < S; k += W) {
    if (j0 + k < j1) stage_src(j0 + k, stages + k * stage_bytes, full + k);
    if constexpr (!Bulk) {
      __syncwarp();
      if (lane == 0) ticket_release(tickets + k, 1u);
    } else {
      ticket_release(tickets + k, 1u);
    }
  }
}

// Tails (tail pieces, below; the tail words tw follow the S tickets):
// keep(k, tw) (every lane, warp-uniform result) says whether tile k is to be
// issued; a tile that is not is released to its consumer without a copy, and
// every tile from tw[0] on (lowered by keep before the release) is skipped:
// its consumer stops.
template <int W, int S, bool Bulk, bool Tails, class StageFn, class RunFn, class KeepFn>
KVTILE_DEVICE void pool_loop(int j0, int j1, bool skip0, std::uint8_t* stages, std::size_t stage_bytes,
                             std::uint64_t* full, std::uint32_t* tickets, StageFn&& stage_src, RunFn&& run,
                             KeepFn&& keep) {
  static_assert(S > W, "a pool has more stages than warps");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = j1 - j0;
  int* const end = reinterpret_cast<int*>(tickets + S);
  for (int k = warp; k < n; k += W) {
    const int sidx = k % S, u = k / S;
    if (lane == 0)
      while (ticket_acquire(tickets + sidx) <= static_cast<std::uint32_t>(u)) {
      }
    __syncwarp();
    if constexpr (Tails) {
      if (k >= *reinterpret_cast<const volatile int*>(end)) break;  // warp-uniform
    }
    const int staged_before = u - (skip0 && sidx == 0 && u > 0 ? 1 : 0);
    std::uint8_t* buf = stages + sidx * stage_bytes;
    run(j0 + k, buf, full + sidx, static_cast<std::uint32_t>(staged_before) & 1u);
    __syncwarp();
    if (k + S < n) {
      bool go = true;
      if constexpr (Tails) go = keep(k + S, end);
      if (issues_copies<Bulk>(lane)) {
        fence_proxy_async();
        if (go) stage_src(j0 + k + S, buf, full + sidx);
        if constexpr (!Bulk) {
          __syncwarp();
          if (lane == 0) ticket_release(tickets + sidx, static_cast<std::uint32_t>(u + 2));
        } else {
          ticket_release(tickets + sidx, static_cast<std::uint32_t>(u + 2));
        }
      }
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
    const tile_span ts = tile_range(seq_lens[c.seq], T, p.max_len, p.window_left, p.q_span);
    const int n = ts.n_tiles - ts.jlo, per = (n + p.num_splits - 1) / p.num_splits;
    c.j0 = min(ts.n_tiles, ts.jlo + static_cast<int>(blockIdx.x) * per);
    c.j1 = min(ts.n_tiles, c.j0 + per);
  }
  return c;
}

// Tail pieces (schedule.hpp tail_of; decode_policy::steal_tail_tiles). A cut
// chunk's item spans the whole chunk; its last pieces can also be run by
// other CTAs. Each piece has a global claim word (kernel_params::claims):
// 0 free, 1 kept by the owner, 2 taken (zeroed by the plan and, after each
// run, by the merge kernel). The owner claims piece i (CAS 0 -> 1)
// when it is about to issue the piece's first tile and stops at the first
// piece it finds taken; a CTA whose own chunks are done takes a free piece
// (CAS 0 -> 2), scanning the last pieces first, and runs it as a chunk into
// the piece's slot. So taken pieces are always a suffix of the chunk's
// pieces, the owner never pays a chunk boundary for a piece nobody took, and
// a fast SM takes the tails of slow ones. The owner writes an empty partial
// (m = -inf, l = 0, O = 0) into the slot of every piece it kept.
// Shared-memory words of the chunk (tw): tw[0] the first local tile not to
// run, tw[1 + i] piece i's state here (0 undecided, then 1 or 2; 3 while one
// warp decides it, so each piece is claimed once), tw[tw_base] the local tile
// where the pieces start (INT_MAX: no pieces), tw[tw_cut] the cut index.
inline constexpr int tw_base = 1 + max_tail_pieces, tw_cut = tw_base + 1, tail_words = tw_cut + 1;
// Whether the stage-pool kernel of policy P with Pool stages has tail pieces
// (the plan lists pieces only for such kernels): a tail of at least Pool
// tiles, room for the tail words behind the tickets, bulk copies (the cp.async
// pool forced on an H100 was 1.5-4.6% slower with pieces, and its spills grow),
// and the merge kernel (it zeroes the claim words).
template <class P, int Pool>
KVTILE_HOST_DEVICE constexpr bool tails_on() {
  return Pool > tail_words && P::steal_tail_tiles >= Pool && P::bulk_copies && !P::fused_merge;
}
KVTILE_DEVICE std::int32_t* piece_word(const kernel_params& p, int cut, int i) {
  return p.claims + i * p.tail_cuts + cut;
}
// The owner's claim of piece i of cut: 1 kept (CAS 0 -> 1) or 2 taken.
KVTILE_DEVICE int claim_piece(const kernel_params& p, int cut, int i) {
  return atomicCAS(piece_word(p, cut, i), 0, 1) == 2 ? 2 : 1;
}
// Lane 0 of a warp about to issue a tile of piece i (pieces from local tile
// base): whether the owner runs the piece (1) or stops before it (2).
KVTILE_DEVICE int decide_piece(const kernel_params& p, int i, int base, int* tw) {
  int* state = tw + 1 + i;
  int s = atomicCAS(state, 0, 3);
  if (s == 0) {
    s = claim_piece(p, tw[tw_cut], i);
    if (s == 2) atomicMin(tw, base + i * p.piece_tiles);
    __threadfence_block();  // the stop before the state
    atomicExch(state, s);
  } else {
    while (s == 3) s = atomicAdd(state, 0);
    __threadfence_block();
  }
  return s;
}
// Thread 0 at the start of a chunk (cut: its tail_of, or -1; base: the local
// tile where its pieces start): tw set. Pieces that would start within the
// pool's first Pool tiles (possible only when the device lengths differ from
// the planned ones) are all claimed now and the whole chunk runs here (a
// piece already taken is then counted twice: a wrong result, as documented
// for such lengths, but no hang and no read outside the cache).
KVTILE_DEVICE void start_tail(const kernel_params& p, int cut, int base, int pool, int* tw) {
  tw[0] = 0x7fffffff;
  for (int i = 0; i < max_tail_pieces; ++i) tw[1 + i] = 0;
  tw[tw_base] = cut >= 0 && base >= pool ? base : 0x7fffffff;
  tw[tw_cut] = cut;
  if (cut < 0 || base >= pool) return;
  for (int i = 0; i < p.tail_pieces; ++i) tw[1 + i] = claim_piece(p, cut, i);
}
// Thread 0 after the owner's tile loop (every warp done with it): the pieces
// it never reached (the device length ends before them) are kept unless taken.
KVTILE_DEVICE void close_tail(const kernel_params& p, int* tw) {
  for (int i = 0; i < p.tail_pieces; ++i)
    if (tw[1 + i] == 0) tw[1 + i] = claim_piece(p, tw[tw_cut], i);
}
// Every thread: empty partials into the slots of the pieces the owner kept
// (slot0: the chunk's slot; piece i's is slot0 + 1 + i).
template <int D, int Threads>
KVTILE_DEVICE void write_kept_pieces(const kernel_params& p, int slot0, const int* tw) {
  const int per = p.slot_rows * D / 4;
  for (int i = 0; i < p.tail_pieces; ++i) {
    if (tw[1 + i] != 1) continue;
    const std::int64_t r0 = static_cast<std::int64_t>(slot0 + 1 + i) * p.slot_rows;
    for (int x = threadIdx.x; x < per; x += Threads)
      reinterpret_cast<float4*>(p.ws_o + r0 * D)[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = threadIdx.x; q < p.slot_rows; q += Threads) {
      p.ws_ml[2 * (r0 + q)] = -INFINITY;
      p.ws_ml[2 * (r0 + q) + 1] = 0.0f;
    }
  }
}
// Warp 0, once the CTA's own chunks are done: a free piece taken (its work
// list index, written to *slot by lane 0), or -1 when none is left. Lane l
// reads the claim words top - 1 - l - 32 e (plain loads: a word read as free
// is then claimed with a CAS; 8 per lane in flight, so up to 256 pieces in one
// round trip), the highest word first: the last pieces of the chunks first,
// so taken pieces stay a suffix of their chunk's.
KVTILE_DEVICE void take_piece(const kernel_params& p, int* slot) {
  constexpr int E = 8;
  const int lane = threadIdx.x & 31;
  const int base = p.cta_begin[gridDim.x], words = p.tail_pieces * p.tail_cuts;
  const volatile std::int32_t* w = p.claims;
  int got = -1;
  for (int top = words; top > 0 && got < 0; top -= 32 * E) {
    int v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int x = top - 1 - lane - 32 * e;
      v[e] = x >= 0 ? w[x] : 1;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      unsigned free = __ballot_sync(0xffffffffu, v[e] == 0);
      while (free && got < 0) {
        const int l = __ffs(free) - 1;  // the highest free word of this group
        const int x = top - 1 - l - 32 * e;
        int won = 0;
        if (lane == l) won = atomicCAS(p.claims + x, 0, 2) == 0;
        if (__shfl_sync(0xffffffffu, won, l)) got = base + x;
        free &= free - 1;
      }
    }
  }
  if (lane == 0) *slot = got;
}

// Before each chunk (thread 0; the caller's __syncthreads follows): the stage
// pool's tickets to 0 and the full barriers at parity 0. The barriers are
// initialized once, before the first chunk. At a later chunk's start every
// copy the previous chunk issued has been waited for, so a barrier whose
// count of completed phases is odd (its parity-1 phase incomplete) gets an
// empty phase, stage_skip once per expected arrival without a copy, which
// thread 0 waits for. An mbarrier.inval + init between chunks instead made
// compute-sanitizer's racecheck report the bulk copies on either side of it
// (tests/device/ring_sync.cu, mode 4). Bulk: the load path (stage_arrivals).
template <int NBars, int Pool, bool Bulk>
KVTILE_DEVICE void init_barriers(std::uint64_t* bars, std::uint32_t* tickets, bool first_chunk) {
  if (threadIdx.x != 0) return;
  if (first_chunk) {
    for (int i = 0; i < NBars; ++i) mbar_init(bars + i, stage_arrivals<Bulk>);
    mbar_init_fence();
  } else {
    // Rolled loops: unrolled and merged with the first chunk's, they cost 4-8 B more
    // spill loads in four of sm_90a's five quant kernels (ptxas, 2026-12-07).
#pragma unroll 1
    for (int i = 0; i < NBars; ++i) {
      if (mbar_test(bars + i, 1u)) continue;
#pragma unroll 1
      for (std::uint32_t a = 0; a < stage_arrivals<Bulk>; ++a) stage_skip(bars + i);
      mbar_wait(bars + i, 1u);
    }
  }
  for (int i = 0; i < Pool; ++i) tickets[i] = 0u;
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
