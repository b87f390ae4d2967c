// kvtile/device/attention/detail/schedule.hpp: the host side of decode_plan
// (paged_decode.cuh): which tiles of which (sequence, KV head, query group)
// each persistent CTA of the attention kernel processes. Plain C++ (no CUDA
// headers), so the scheduler is tested on the host.
//
// Work: a unit is one (sequence, KV head, query group); its tiles are
// [jlo, n_tiles) of the sequence (tile_range below, which the kernel computes
// the same way from the device lengths). A unit is cut into chunks of
// near-equal whole-tile ranges; each chunk is one partial (m, l, O) in the
// workspace, merged by log-sum-exp in the second kernel. Chunks go to a fixed
// number of CTAs (one per SM) by longest-processing-time list scheduling; the
// chunk size is the candidate with the smallest estimated makespan.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "../../../config.hpp"
#include "../decode_args.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

inline constexpr int max_group = 8;  // query rows per n-block (the MMA's N)

// The launch shapes the kernels' grids (and the workspace sizes, computed in
// 64 bits) can hold: q_heads a positive multiple of kv_heads, 0 <= num_seqs <=
// 65535 (grid z), max_q_tokens in [1, 8], and kv_heads x query groups (units
// per sequence, grid y) <= 65535; a query group is up to 8 query rows (rows
// per KV head: max_q_tokens x q_heads / kv_heads). Checked before any size is
// computed from them.
inline bool launch_shape_ok(int num_seqs, int kv_heads, int q_heads, int max_q) {
  if (q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0 || num_seqs < 0 || num_seqs > 65535) return false;
  if (max_q < 1 || max_q > max_q_tokens) return false;
  const std::int64_t rows = static_cast<std::int64_t>(max_q) * (q_heads / kv_heads);
  return static_cast<std::int64_t>(kv_heads) * ((rows + max_group - 1) / max_group) <= 65535;
}

// One chunk: tiles [j0, j1) of unit `unit` (seq * units_per_seq + u), partial slot `slot`.
struct work_item {
  std::int32_t unit;
  std::int32_t j0;
  std::int32_t j1;
  std::int32_t slot;
};
// The partial slots of one unit: first, first + 1, ..., first + count - 1.
struct unit_span {
  std::int32_t first;
  std::int32_t count;
};

// First token visible to a query at position end - 1 under a left window
// (window_left < 0: no window): max(0, end - 1 - window_left).
KVTILE_HOST_DEVICE int window_lo(int end, int window_left) {
  return window_left >= 0 && end - 1 - window_left > 0 ? end - 1 - window_left : 0;
}

// Tiles of a sequence of (device or host) length len, in tiles of T tokens,
// clamped so that no tile outside the page table (and the tail) is ever read:
// len is clamped to [0, max_len]. With a left window (window_left >= 0) the
// query at position len - 1 sees tokens [lo, len), lo = max(0, len - 1 - window_left);
// tiles below jlo = lo / T are skipped, the tokens below lo masked. span > 1
// (multi-query: up to span queries at positions len - span .. len - 1): lo is
// that of the first, max(0, len - span - window_left).
struct tile_span {
  int len;      // clamped length
  int lo;       // first visible token
  int jlo;      // first visible tile
  int n_tiles;  // tiles of the sequence (ceil(len / T))
};
KVTILE_HOST_DEVICE tile_span tile_range(int len, int T, int max_len, int window_left, int span = 1) {
  tile_span s;
  s.len = len < 0 ? 0 : (len > max_len ? max_len : len);
  s.lo = window_lo(s.len - span + 1, window_left);  // the first query's
  s.jlo = s.lo / T;
  s.n_tiles = (s.len + T - 1) / T;
  return s;
}

struct schedule_request {
  const std::int32_t* seq_lens = nullptr;  // host copy, num_seqs entries
  int num_seqs = 0;
  int units_per_seq = 1;  // kv_heads x query groups
  // Multi-query with host counts (decode_plan's host_qo_indptr): sequence s
  // has q_tokens[s] in [0, q_span] new tokens, so only its query groups that
  // hold rows (rows f = i * group + g, i < q_tokens[s]) are units with work,
  // and its window starts at the first of its own queries. Null: every
  // sequence has q_span tokens. Units are KV-head major: u = h * qgroups + qg.
  const std::int32_t* q_tokens = nullptr;
  int qgroups = 1;        // query groups per KV head (units_per_seq / kv_heads)
  int group = 1;          // query rows per new token (q_heads / kv_heads)
  int unit_rows = 8;      // query rows per unit
  int tile_tokens = 128;
  int max_len = 0;        // tile_range's clamp
  int window_left = -1;
  int q_span = 1;         // query tokens per sequence (bound): tile_range's span
  int ctas = 1;           // persistent CTAs (the grid)
  int rings = 8;          // tiles a CTA processes at once (cost model)
  int forced_splits = 0;  // > 0: every unit cut into min(forced_splits, tiles) chunks (tests)
  // A unit with query rows but no visible tile (a sequence of length 0) gets
  // one empty chunk [jlo, jlo): the fused merge writes its rows (0, lse -inf)
  // from there. Off: such units have no chunk (the merge kernel writes them).
  bool empty_chunks = false;
  // Shared tail pieces (decode_policy::steal_tail_tiles / steal_piece_tiles; 0: off):
  // every chunk of at least 2 x steal_tail tiles stays whole on its CTA, and
  // its last steal_tail tiles, in pieces of steal_piece, are also listed for
  // the CTAs whose own chunks are done: at run time the owner keeps a piece
  // unless another CTA took it first (pipeline.cuh, "Tail pieces"). Each
  // piece has its own slot, after its chunk's. Only where every piece fits
  // chunk_limit slots and a chunk has at most max_tail_pieces.
  int steal_tail = 0;
  int steal_piece = 0;
  std::int64_t chunk_limit = 0;
};

inline constexpr int max_tail_pieces = 4;

struct schedule {
  // CTA-major: CTA c runs items[cta_begin[c] .. cta_begin[c + 1]); then the
  // tail pieces items[cta_begin[ctas] .. cta_begin[ctas + 1]), piece-major:
  // piece i of cut chunk k at cta_begin[ctas] + i x cuts + k.
  std::vector<work_item> items;
  std::vector<std::int32_t> cta_begin;  // ctas + 2 entries
  // Per item: the cut index k of a chunk with tail pieces (its item spans the
  // whole chunk; piece i has slot item.slot + 1 + i and covers tiles
  // [j1 - (tail_pieces - i) x piece_tiles, + piece_tiles)), else -1.
  std::vector<std::int32_t> tail_of;
  int tail_pieces = 0;  // pieces per cut chunk (0: none)
  int piece_tiles = 0;
  int cuts = 0;
  std::vector<unit_span> spans;      // per unit
  int chunks = 0;
  long long makespan = 0;            // cost model units (tiles), for reports and tests
};

// Most chunks any request with these sizes can produce (the workspace bound).
inline std::int64_t max_chunks(std::int64_t units, int ctas, int forced_splits) {
  const std::int64_t a = 4 * static_cast<std::int64_t>(ctas) + units;
  const std::int64_t b = forced_splits > 0 ? units * forced_splits : 0;
  return a > b ? a : b;
}

// Cost of a chunk of n tiles in tile units: the tiles (at least half a round
// of `rings`: a CTA with few tiles runs each faster, as its warps share the SM
// with fewer others) plus a fixed per-chunk overhead (query load, pipeline
// fill, partial write, merge).
inline long long chunk_cost(int n, int rings) {
  // overhead: a chunk boundary inside a CTA (pipeline drain and refill, query
  // reload, partial write, merge) costs about 13 tiles' time, measured as two
  // chunks per CTA against one (docs/attention.md, "Schedule").
  constexpr int overhead = 12;
  const int floor = rings / 2;
  return static_cast<long long>(n > floor ? n : floor) + overhead;
}

// Query tokens of sequence s (q_tokens, else q_span) and whether unit u of it
// holds query rows.
inline int q_tokens_of(const schedule_request& r, int s) { return r.q_tokens ? r.q_tokens[s] : r.q_span; }
inline bool unit_active(const schedule_request& r, int s, int u) {
  if (!r.q_tokens) return true;
  return static_cast<long long>(u % r.qgroups) * r.unit_rows < static_cast<long long>(r.q_tokens[s]) * r.group;
}
// Units of sequence s that hold query rows.
inline int active_units(const schedule_request& r, int s) {
  if (!r.q_tokens) return r.units_per_seq;
  const long long rows = static_cast<long long>(r.q_tokens[s]) * r.group;
  const long long qg = (rows + r.unit_rows - 1) / r.unit_rows;
  return static_cast<int>((qg < r.qgroups ? qg : r.qgroups) * (r.units_per_seq / r.qgroups));
}

// Chunks of a unit of n tiles for chunk size c (forced: min(forced, n)).
inline int chunks_of(int n, int c, int forced) {
  if (n <= 0) return 0;
  return forced > 0 ? (forced < n ? forced : n) : (n + c - 1) / c;
}

// Splits whose partial outputs the merge loads at once per row (merge.cuh,
// combine_row).
inline constexpr int merge_splits_in_flight = 8;

// Cost of the merge in tile units, for a step whose unit with the most chunks
// has `max_chunks`: a row's partials are read merge_splits_in_flight at a
// time, each round about one dependent global load, and every row merges at
// once, so that unit sets it. 3/2 tile per round (rounded down from 1.66,
// least squares over the forced-split runs of the H100 small-batch sweep,
// docs/attention.md "Schedule"); a unit of at most 8 chunks costs 1.
inline long long merge_cost(int max_chunks) {
  const long long rounds = (max_chunks + merge_splits_in_flight - 1) / merge_splits_in_flight;
  return rounds * 3 / 2;
}

// LPT list scheduling on `ctas` CTAs of chunk costs given as a histogram
// (hist[n] chunks of n tiles), longest first; returns the makespan and, when
// owner_of_size is given, calls it (n, cta) for every chunk in that order.
template <class F>
long long lpt(const std::vector<long long>& hist, int ctas, int rings, F&& assign) {
  using load = std::pair<long long, int>;
  std::priority_queue<load, std::vector<load>, std::greater<load>> heap;
  for (int i = 0; i < ctas; ++i) heap.push({0, i});
  long long makespan = 0;
  for (std::size_t n = hist.size(); n-- > 0;)  // n = 0: empty chunks (schedule_request::empty_chunks)
    for (long long k = 0; k < hist[n]; ++k) {
      load l = heap.top();
      heap.pop();
      l.first += chunk_cost(static_cast<int>(n), rings);
      makespan = l.first > makespan ? l.first : makespan;
      assign(static_cast<int>(n), l.second);
      heap.push(l);
    }
  return makespan;
}

// Chunk-size histogram of chunk size c: a unit of n tiles in m chunks has
// chunks of floor(n / m) and floor(n / m) + 1 tiles (the near-equal cut below).
inline std::vector<long long> size_histogram(const schedule_request& r, const std::vector<int>& jlo,
                                             const std::vector<int>& ntile, int longest, int c) {
  std::vector<long long> hist(static_cast<std::size_t>(longest) + 2, 0);
  for (int s = 0; s < r.num_seqs; ++s) {
    const int n = ntile[s] - jlo[s], m = chunks_of(n, c, r.forced_splits);
    if (m == 0) continue;
    const int q = n / m, hi = n % m, units = active_units(r, s);
    hist[q] += static_cast<long long>(m - hi) * units;
    if (hi) hist[q + 1] += static_cast<long long>(hi) * units;
  }
  return hist;
}

// The full schedule for chunk size c: chunks (slots unit-major, so each
// unit's slots are consecutive), LPT assignment, CTA-major work list.
inline schedule build_schedule(const schedule_request& r, const std::vector<int>& jlo, const std::vector<int>& ntile,
                               int longest, int c) {
  schedule out;
  out.spans.resize(static_cast<std::size_t>(r.num_seqs) * r.units_per_seq);
  // Tail pieces: on when every cut chunk's pieces fit the slot limit.
  const int tail = r.steal_tail, piece = r.steal_piece;
  int np = 0;
  if (tail > 0 && piece > 0 && tail % piece == 0 && tail / piece <= max_tail_pieces && r.forced_splits == 0) {
    long long chunks = 0, cuts = 0;
    for (int s = 0; s < r.num_seqs; ++s) {
      const int n = ntile[s] - jlo[s], m = n == 0 && r.empty_chunks ? 1 : chunks_of(n, c, 0);
      const int units = active_units(r, s);
      chunks += static_cast<long long>(m) * units;
      if (m > 0 && n / m >= 2 * tail) cuts += static_cast<long long>(m) * units;  // every chunk of s has >= n / m tiles
    }
    if (cuts > 0 && chunks + cuts * (tail / piece) <= r.chunk_limit) np = tail / piece;
  }
  // Per size, the chunks of that size in slot order (LPT takes them in this
  // order); a cut chunk counts as its head (its tail is spread below).
  std::vector<std::vector<work_item>> by_size(static_cast<std::size_t>(longest) + 2);
  std::vector<work_item> cut_items;  // the cut chunks, cut index order
  std::int32_t slot = 0;
  for (int s = 0; s < r.num_seqs; ++s) {
    const int n = ntile[s] - jlo[s], m = n == 0 && r.empty_chunks ? 1 : chunks_of(n, c, r.forced_splits);
    const bool cut = np > 0 && m > 0 && n / m >= 2 * tail;
    for (int u = 0; u < r.units_per_seq; ++u) {
      const std::int32_t unit = s * r.units_per_seq + u;
      if (!unit_active(r, s, u)) {
        out.spans[unit] = {slot, 0};  // no query rows: no work, nothing to merge
        continue;
      }
      out.spans[unit] = {slot, m * (cut ? 1 + np : 1)};
      for (int k = 0; k < m; ++k) {
        const int a = jlo[s] + static_cast<int>(static_cast<long long>(n) * k / m);
        const int b = jlo[s] + static_cast<int>(static_cast<long long>(n) * (k + 1) / m);
        by_size[cut ? b - a - tail : b - a].push_back({unit, a, b, slot});
        if (cut) cut_items.push_back({unit, a, b, slot});
        slot += cut ? 1 + np : 1;
      }
    }
  }
  out.chunks = slot;
  std::vector<std::int32_t> cut_of_slot(static_cast<std::size_t>(slot), -1);
  for (std::size_t k = 0; k < cut_items.size(); ++k) cut_of_slot[cut_items[k].slot] = static_cast<std::int32_t>(k);
  std::vector<long long> hist(by_size.size());
  for (std::size_t n = 0; n < by_size.size(); ++n) hist[n] = static_cast<long long>(by_size[n].size());
  std::vector<std::vector<work_item>> per_cta(static_cast<std::size_t>(r.ctas));
  std::vector<std::size_t> next(by_size.size(), 0);
  out.makespan = lpt(hist, r.ctas, r.rings, [&](int n, int cta) { per_cta[cta].push_back(by_size[n][next[n]++]); });
  out.cta_begin.assign(static_cast<std::size_t>(r.ctas) + 2, 0);
  out.items.reserve(static_cast<std::size_t>(out.chunks));
  for (int i = 0; i < r.ctas; ++i) {
    out.items.insert(out.items.end(), per_cta[i].begin(), per_cta[i].end());  // longest chunk first
    out.cta_begin[i + 1] = static_cast<std::int32_t>(out.items.size());
  }
  out.tail_of.assign(out.items.size(), -1);
  for (std::size_t i = 0; i < out.items.size(); ++i) out.tail_of[i] = cut_of_slot[out.items[i].slot];
  // The pieces, piece-major; in the cost model spread evenly over the CTAs.
  long long shared_cost = 0;
  for (int i = 0; i < np; ++i)
    for (const work_item& w : cut_items) {
      out.items.push_back({w.unit, w.j1 - (np - i) * piece, w.j1 - (np - 1 - i) * piece, w.slot + 1 + i});
      out.tail_of.push_back(-1);
      shared_cost += chunk_cost(piece, r.rings);
    }
  out.cta_begin[static_cast<std::size_t>(r.ctas) + 1] = static_cast<std::int32_t>(out.items.size());
  out.makespan += (shared_cost + r.ctas - 1) / r.ctas;
  out.tail_pieces = cut_items.empty() ? 0 : np;
  out.piece_tiles = cut_items.empty() ? 0 : piece;
  out.cuts = static_cast<int>(cut_items.size());
  return out;
}

// The schedule of one decode step. Deterministic for a given request.
inline schedule make_schedule(const schedule_request& r) {
  std::vector<int> jlo(r.num_seqs), ntile(r.num_seqs);
  long long total = 0;
  int longest = 0;
  for (int s = 0; s < r.num_seqs; ++s) {
    const int span = q_tokens_of(r, s) > 0 ? q_tokens_of(r, s) : 1;
    const tile_span t = tile_range(r.seq_lens[s], r.tile_tokens, r.max_len, r.window_left, span);
    const int units = active_units(r, s);
    jlo[s] = t.jlo;
    ntile[s] = units > 0 ? t.n_tiles : t.jlo;  // a sequence without query rows has no work
    total += static_cast<long long>(ntile[s] - t.jlo) * units;
    longest = std::max(longest, ntile[s] - t.jlo);
  }
  if (r.forced_splits > 0 || longest == 0) return build_schedule(r, jlo, ntile, longest, 1);
  // Candidates: no split, and chunk sizes for 1, 1.5, ..., 4 chunks per CTA on
  // average (at least one round of `rings` tiles unless the unit is shorter).
  std::vector<int> cand{longest};
  for (int k2 = 2; k2 <= 8; ++k2) {
    const long long den = static_cast<long long>(k2) * r.ctas;  // k = k2 / 2 chunks per CTA
    long long c = (2 * total + den - 1) / den;
    c = std::max<long long>(c, std::min(r.rings, longest));
    cand.push_back(static_cast<int>(std::min<long long>(c, longest)));
  }
  // Fewer chunks than CTAs (the merge's cost can outweigh idle SMs): 2, 4, 8,
  // ... chunks for the longest unit.
  for (long long m = 2; m < longest; m *= 2) cand.push_back(static_cast<int>((longest + m - 1) / m));
  // And the smallest chunk size that still gives at most one chunk per CTA.
  {
    int lo = 1, hi = longest;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      long long k = 0;
      for (int s = 0; s < r.num_seqs; ++s)
        k += static_cast<long long>(chunks_of(ntile[s] - jlo[s], mid, 0)) * active_units(r, s);
      if (k <= r.ctas) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    cand.push_back(lo);
  }
  std::sort(cand.begin(), cand.end(), std::greater<int>());  // larger chunks first: fewer partials on ties
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  long long best_cost = -1;
  int best_c = longest;
  for (int c : cand) {
    const std::vector<long long> h = size_histogram(r, jlo, ntile, longest, c);
    long long k = 0, top = 0, sum = 0;
    for (std::size_t n = 1; n < h.size(); ++n)
      if (h[n]) {
        k += h[n];
        top = chunk_cost(static_cast<int>(n), r.rings);
        sum += h[n] * top;
      }
    const long long merge = merge_cost(chunks_of(longest, c, 0));  // the longest unit has the most chunks
    // A lower bound no better than the best so far: skip the simulation.
    const long long bound = std::max(top, (sum + r.ctas - 1) / r.ctas) + merge;
    if (best_cost >= 0 && bound >= best_cost) continue;
    // At most one chunk per CTA: the makespan is the longest chunk's cost.
    const long long m = (k <= r.ctas ? top : lpt(h, r.ctas, r.rings, [](int, int) {})) + merge;
    if (best_cost < 0 || m < best_cost) {
      best_cost = m;
      best_c = c;
    }
  }
  return build_schedule(r, jlo, ntile, longest, best_c);
}

// Workspace: the partials of every slot, then the plan's work list, its
// tail_of, CTA ranges, unit spans, the fused merge's per-unit counters and the
// tail pieces' claim words (one per piece) (written by decode_plan::plan,
// counters and claims zeroed; unused by the one-call path).
struct ws_layout {
  std::size_t o = 0, ml = 0, work = 0, tails = 0, cta = 0, spans = 0, counters = 0, claims = 0, bytes = 0;
  std::int64_t chunks = 0;
};
// unit_rows: query rows of a unit (8 or 16, unit_rows_for); q_span: query
// tokens per sequence.
inline ws_layout layout_for(int num_seqs, int kv_heads, int q_heads, int num_splits, int ctas, int d,
                            int unit_rows = max_group, int q_span = 1) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const int rows_total = q_span * (q_heads / kv_heads), qgroups = (rows_total + unit_rows - 1) / unit_rows;
  const int slot_rows = rows_total < unit_rows ? rows_total : unit_rows;
  const std::int64_t units = static_cast<std::int64_t>(num_seqs) * kv_heads * qgroups;
  ws_layout L;
  L.chunks = max_chunks(units, ctas, num_splits);  // also the one-call path's bound: units x splits <= max(units, ctas)
  const std::size_t rows = static_cast<std::size_t>(L.chunks) * slot_rows;
  const std::size_t chunks = static_cast<std::size_t>(L.chunks);
  L.ml = up(rows * d * sizeof(float));
  L.work = L.ml + up(rows * 2 * sizeof(float));
  L.tails = L.work + up(chunks * sizeof(work_item));
  L.cta = L.tails + up(chunks * sizeof(std::int32_t));
  L.spans = L.cta + up((static_cast<std::size_t>(ctas) + 2) * sizeof(std::int32_t));
  L.counters = L.spans + up(static_cast<std::size_t>(units) * sizeof(unit_span));
  L.claims = L.counters + up(static_cast<std::size_t>(units) * sizeof(std::int32_t));
  L.bytes = L.claims + up(chunks * sizeof(std::int32_t));
  return L;
}

// The larger workspace of the two unit sizes (8 and 16 query rows): a bound
// for every policy. 0 for a shape launch_shape_ok rejects or num_splits
// outside [0, 4096] (no size is computed from those).
inline std::size_t workspace_bound(int num_seqs, int kv_heads, int q_heads, int num_splits, int ctas, int d,
                                   int q_span = 1) {
  if (!launch_shape_ok(num_seqs, kv_heads, q_heads, q_span) || num_splits < 0 || num_splits > 4096 || ctas < 1)
    return 0;
  const std::size_t a = layout_for(num_seqs, kv_heads, q_heads, num_splits, ctas, d, max_group, q_span).bytes;
  const std::size_t b = layout_for(num_seqs, kv_heads, q_heads, num_splits, ctas, d, 2 * max_group, q_span).bytes;
  return a > b ? a : b;
}

// Query rows of a unit for `rows` query rows per KV head (q_span x group): 16
// (two n-blocks) when there are more than 8 and the policy allows it, else 8.
inline int unit_rows_for(int rows, int max_unit_rows) {
  return rows > max_group && max_unit_rows >= 2 * max_group ? 2 * max_group : max_group;
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
