// device/attention/detail/schedule.hpp: the host scheduler of decode_plan.
// Every visible tile of every unit is covered exactly once (ragged lengths
// including 0, 1 and lengths ending inside a tile, windows), the chunk count
// stays within the workspace bound, and the makespan is close to the ideal.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <kvtile/device/attention/detail/schedule.hpp>

namespace {

using kvtile::attention::detail::make_schedule;
using kvtile::attention::detail::max_chunks;
using kvtile::attention::detail::schedule;
using kvtile::attention::detail::schedule_request;
using kvtile::attention::detail::tile_range;

// Checks coverage and structure; returns the number of visible tiles.
long long check_schedule(const schedule_request& r, const schedule& s) {
  const int units = r.num_seqs * r.units_per_seq;
  REQUIRE(s.spans.size() == static_cast<std::size_t>(units));
  REQUIRE(s.cta_begin.size() == static_cast<std::size_t>(r.ctas) + 2);  // CTA ranges, then the shared pieces
  CHECK(s.cta_begin.front() == 0);
  CHECK(s.cta_begin.back() == s.chunks);
  CHECK(std::is_sorted(s.cta_begin.begin(), s.cta_begin.end()));
  CHECK(s.chunks <= max_chunks(units, r.ctas, r.forced_splits));
  const int own = s.cta_begin[r.ctas], pieces = s.cta_begin[r.ctas + 1] - own;
  if (r.steal_tail == 0) CHECK(pieces == 0);
  CHECK(pieces == s.cuts * s.tail_pieces);
  CHECK(s.tail_pieces <= kvtile::attention::detail::max_tail_pieces);
  REQUIRE(s.items.size() == static_cast<std::size_t>(s.chunks));
  REQUIRE(s.tail_of.size() == s.items.size());
  // slot -> item; spans list consecutive slots; every slot used once
  std::vector<int> item_of_slot(s.chunks, -1);
  for (int i = 0; i < s.chunks; ++i) {
    const auto& w = s.items[i];
    REQUIRE(w.slot >= 0);
    REQUIRE(w.slot < s.chunks);
    CHECK(item_of_slot[w.slot] == -1);
    item_of_slot[w.slot] = i;
  }
  long long tiles = 0;
  for (int u = 0; u < units; ++u) {
    const int seq = u / r.units_per_seq;
    const auto t = tile_range(r.seq_lens[seq], r.tile_tokens, r.max_len, r.window_left);
    const auto sp = s.spans[u];
    int next = t.jlo;
    for (int k = 0; k < sp.count; ++k) {
      const int item = item_of_slot[sp.first + k];
      const auto& w = s.items[item];
      CHECK(w.unit == u);
      CHECK(w.j0 == next);
      CHECK(w.j1 > w.j0);
      next = w.j1;
      const int cut = s.tail_of[item];
      if (item >= own) {
        CHECK(cut == -1);  // pieces are never cut
        continue;
      }
      if (cut < 0) continue;
      // A cut chunk: its item spans the whole chunk, its pieces follow in slot
      // order and in the piece-major list.
      REQUIRE(cut < s.cuts);
      REQUIRE(k + s.tail_pieces < sp.count);
      CHECK(w.j1 - w.j0 >= 2 * s.tail_pieces * s.piece_tiles);
      next = w.j1 - s.tail_pieces * s.piece_tiles;
      for (int i = 0; i < s.tail_pieces; ++i) {
        const int pi = own + i * s.cuts + cut;
        CHECK(item_of_slot[w.slot + 1 + i] == pi);
        CHECK(s.items[pi].j1 - s.items[pi].j0 == s.piece_tiles);
      }
    }
    if (sp.count > 0) {
      CHECK(next == t.n_tiles);
    } else {
      CHECK(t.n_tiles - t.jlo == 0);
    }
    tiles += t.n_tiles - t.jlo;
  }
  return tiles;
}

}  // namespace

TEST_CASE("attention schedule: tile_range clamps and windows") {
  auto t = tile_range(300, 128, 128 * 4 + 127, -1);
  CHECK(t.len == 300);
  CHECK(t.lo == 0);
  CHECK(t.jlo == 0);
  CHECK(t.n_tiles == 3);
  t = tile_range(-5, 128, 1000, -1);
  CHECK(t.len == 0);
  CHECK(t.n_tiles == 0);
  t = tile_range(1 << 30, 128, 128 * 4 + 127, -1);  // corrupt length: clamped to the page table
  CHECK(t.len == 128 * 4 + 127);
  CHECK(t.n_tiles == 5);
  t = tile_range(1000, 128, 1 << 20, 200);  // query at 999 sees [799, 1000)
  CHECK(t.lo == 799);
  CHECK(t.jlo == 6);
  CHECK(t.n_tiles == 8);
  t = tile_range(1000, 128, 1 << 20, 0);  // only the query's own token
  CHECK(t.lo == 999);
  t = tile_range(100, 128, 1 << 20, 5000);  // window longer than the sequence
  CHECK(t.lo == 0);
  t = tile_range(1000, 128, 1 << 20, 200, 4);  // 4 queries at 996..999: the first sees [796, 997)
  CHECK(t.lo == 796);
  CHECK(t.jlo == 6);
  CHECK(t.n_tiles == 8);
  t = tile_range(900, 128, 1 << 20, 0, 8);  // window 0, 8 queries at 892..899
  CHECK(t.lo == 892);
  CHECK(t.jlo == 6);
}

TEST_CASE("attention schedule: ragged lengths covered exactly once") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int S = 1 + static_cast<int>(rng() % 40);
    std::vector<std::int32_t> lens(S);
    for (auto& l : lens) {
      const int kind = static_cast<int>(rng() % 5);
      l = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? 128 * static_cast<int>(rng() % 20) : static_cast<int>(rng() % 70000);
    }
    schedule_request r;
    r.seq_lens = lens.data();
    r.num_seqs = S;
    r.units_per_seq = 1 + static_cast<int>(rng() % 16);
    r.tile_tokens = trial % 2 ? 128 : 64;
    r.max_len = 1 << 20;
    r.window_left = trial % 3 == 0 ? static_cast<int>(rng() % 9000) : -1;
    r.ctas = trial % 4 == 0 ? 7 : 132;
    r.rings = trial % 5 == 0 ? 12 : 8;
    r.forced_splits = trial % 7 == 0 ? 1 + static_cast<int>(rng() % 5) : 0;
    const schedule s = make_schedule(r);
    check_schedule(r, s);
  }
}

TEST_CASE("attention schedule: balance") {
  // 32 sequences, lengths log-uniform over [256, 64K].
  std::mt19937 rng(3);
  std::vector<std::int32_t> lens(32);
  std::uniform_real_distribution<double> u(std::log(256.0), std::log(65536.0));
  for (auto& l : lens) l = static_cast<std::int32_t>(std::exp(u(rng)));
  schedule_request r;
  r.seq_lens = lens.data();
  r.num_seqs = 32;
  r.units_per_seq = 8;
  r.tile_tokens = 128;
  r.max_len = 1 << 20;
  r.ctas = 132;
  const schedule s = make_schedule(r);
  const long long tiles = check_schedule(r, s);
  // List scheduling's bound: makespan <= total cost / CTAs + the largest chunk's cost.
  long long cost = 0, top = 0;
  for (const auto& w : s.items) {
    const long long c = kvtile::attention::detail::chunk_cost(w.j1 - w.j0, r.rings);
    cost += c;
    top = std::max(top, c);
  }
  CHECK(s.makespan <= cost / r.ctas + 1 + top);
  // And within 40% of the ideal (tiles / CTAs, no overheads).
  const double ideal = static_cast<double>(tiles) / r.ctas;
  CHECK(static_cast<double>(s.makespan) <= 1.4 * ideal);
  // Batch 1, 8 KV heads, 16K tokens: the 8 units are cut to fill the SMs.
  std::vector<std::int32_t> one{16384};
  r.seq_lens = one.data();
  r.num_seqs = 1;
  const schedule s1 = make_schedule(r);
  check_schedule(r, s1);
  CHECK(s1.chunks >= 100);
  CHECK(s1.chunks <= 132);
  // Batch 1 at 256K: 128 chunks of 128 tiles (one per CTA) beat 2 per CTA.
  std::vector<std::int32_t> one_long{262144};
  r.seq_lens = one_long.data();
  const schedule s4 = make_schedule(r);
  check_schedule(r, s4);
  CHECK(s4.chunks == 128);
  // 16 x 64K, 8 KV heads: 128 units for 132 CTAs, no split is best.
  std::vector<std::int32_t> big(16, 65536);
  r.seq_lens = big.data();
  r.num_seqs = 16;
  const schedule s2 = make_schedule(r);
  check_schedule(r, s2);
  CHECK(s2.chunks == 128);
  // One KV head at 16K (128 tiles): 128 one-tile chunks would fill more SMs,
  // but each row's merge would read 128 partials, 16 rounds of loads; the merge
  // cost makes 32 chunks of 4 tiles the choice (measured best on the H100:
  // 22.4 us against 27.8 for 128 chunks, docs/attention.md "Schedule").
  CHECK(kvtile::attention::detail::merge_cost(8) == 1);
  CHECK(kvtile::attention::detail::merge_cost(9) == 3);
  CHECK(kvtile::attention::detail::merge_cost(128) == 24);
  r.units_per_seq = 1;
  r.num_seqs = 1;
  r.seq_lens = one.data();
  const schedule s5 = make_schedule(r);
  check_schedule(r, s5);
  CHECK(s5.chunks == 32);
  r.units_per_seq = 8;
  // Empty batch: no chunks, every span empty.
  std::vector<std::int32_t> zeros(5, 0);
  r.seq_lens = zeros.data();
  r.num_seqs = 5;
  const schedule s3 = make_schedule(r);
  check_schedule(r, s3);
  CHECK(s3.chunks == 0);
}

// Launch shapes and workspace sizes: every size is computed in 64 bits from a
// shape the grid can hold; anything else is rejected before a size exists.
TEST_CASE("attention schedule: launch shapes and workspace sizes never overflow") {
  using kvtile::attention::detail::launch_shape_ok;
  using kvtile::attention::detail::layout_for;
  using kvtile::attention::detail::workspace_bound;
  CHECK(launch_shape_ok(16, 8, 32, 1));
  CHECK(launch_shape_ok(0, 8, 32, 8));
  CHECK(launch_shape_ok(65535, 8, 128, 8));
  CHECK_FALSE(launch_shape_ok(65536, 8, 32, 1));       // grid z
  CHECK_FALSE(launch_shape_ok(-1, 8, 32, 1));
  CHECK_FALSE(launch_shape_ok(1, 8, 12, 1));           // q_heads not a multiple of kv_heads
  CHECK_FALSE(launch_shape_ok(1, 0, 32, 1));
  CHECK_FALSE(launch_shape_ok(1, 8, 0, 1));
  CHECK_FALSE(launch_shape_ok(1, 8, 32, 0));
  CHECK_FALSE(launch_shape_ok(1, 8, 32, 9));
  // 8 x 2^30 rows per KV head overflowed an int; kv_heads x groups over 65535 (grid y).
  CHECK_FALSE(launch_shape_ok(1, 1, 1 << 30, 8));
  CHECK_FALSE(launch_shape_ok(1, 1 << 20, 1 << 30, 1));
  CHECK_FALSE(launch_shape_ok(1, 65536, 65536, 1));
  CHECK(launch_shape_ok(1, 65535, 65535, 1));
  // The reported combination answered 6.9e18 bytes: now no size at all.
  CHECK(workspace_bound(2147483647, 1 << 20, 1 << 30, 0, 132, 128, 1) == 0);
  CHECK(workspace_bound(16, 8, 32, -1, 132, 128, 1) == 0);
  CHECK(workspace_bound(16, 8, 32, 4097, 132, 128, 1) == 0);
  CHECK(workspace_bound(16, 8, 32, 0, 0, 128, 1) == 0);
  // The largest accepted shape: sizes exact in 64 bits (checked against long double).
  const std::size_t big = workspace_bound(65535, 65535, 65535 * 2, 4096, 1024, 256, 1);
  REQUIRE(big > 0);
  const auto L = layout_for(65535, 65535, 65535 * 2, 4096, 1024, 256, 16, 1);
  const long double rows = static_cast<long double>(L.chunks) * 2;  // slot rows: 2 query rows per KV head
  CHECK(static_cast<long double>(L.ml) >= rows * 256 * 4);
  CHECK(static_cast<long double>(big) < 1.0e19L);
  CHECK(big >= L.bytes);
  // Ordinary shapes are unchanged: batch 16, 32 / 8 heads, D 128 on 132 SMs.
  CHECK(workspace_bound(16, 8, 32, 0, 132, 128, 1) == layout_for(16, 8, 32, 0, 132, 128, 8, 1).bytes);
}

// Multi-query with host counts: sequence s has q_tokens[s] new tokens, so only
// the query groups its rows fill are units with work (the others get empty
// spans), each active unit covers [jlo, n_tiles) of its own first query
// exactly once, and a ragged batch makes fewer chunks than one planned at
// q_span for every sequence.
TEST_CASE("attention schedule: host query counts") {
  using kvtile::attention::detail::active_units;
  using kvtile::attention::detail::unit_active;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int S = 1 + static_cast<int>(rng() % 24), kv = 1 + static_cast<int>(rng() % 4);
    const int group = 1 << (rng() % 5), q_span = 1 + static_cast<int>(rng() % 8);  // GQA 1..16, 1..8 tokens
    const int unit_rows = trial % 2 ? 16 : 8, rows = q_span * group;
    std::vector<std::int32_t> lens(S), counts(S);
    for (int s = 0; s < S; ++s) {
      lens[s] = static_cast<std::int32_t>(rng() % 40000);
      counts[s] = std::min<std::int32_t>(lens[s], static_cast<std::int32_t>(rng() % (q_span + 1)));
    }
    schedule_request r;
    r.seq_lens = lens.data();
    r.num_seqs = S;
    r.qgroups = (rows + unit_rows - 1) / unit_rows;
    r.units_per_seq = kv * r.qgroups;
    r.group = group;
    r.unit_rows = unit_rows;
    r.q_span = q_span;
    r.q_tokens = counts.data();
    r.tile_tokens = 128;
    r.max_len = 1 << 20;
    r.window_left = trial % 3 == 0 ? static_cast<int>(rng() % 3000) : -1;
    r.ctas = trial % 4 == 0 ? 7 : 132;
    r.forced_splits = trial % 5 == 0 ? 1 + static_cast<int>(rng() % 4) : 0;
    const schedule s = make_schedule(r);
    REQUIRE(s.spans.size() == static_cast<std::size_t>(S) * r.units_per_seq);
    CHECK(s.chunks <= max_chunks(static_cast<std::int64_t>(S) * r.units_per_seq, r.ctas, r.forced_splits));
    std::vector<int> item_of_slot(s.chunks, -1);
    for (int i = 0; i < s.chunks; ++i) item_of_slot[s.items[i].slot] = i;
    for (int seq = 0; seq < S; ++seq) {
      int active = 0;
      for (int u = 0; u < r.units_per_seq; ++u) {
        const int unit = seq * r.units_per_seq + u;
        const bool holds_rows = (u % r.qgroups) * unit_rows < counts[seq] * group;
        CHECK(unit_active(r, seq, u) == holds_rows);
        const auto sp = s.spans[unit];
        const auto t = tile_range(lens[seq], 128, r.max_len, r.window_left, counts[seq] > 0 ? counts[seq] : 1);
        if (!holds_rows || t.n_tiles == t.jlo) {
          CHECK(sp.count == 0);
          continue;
        }
        ++active;
        int next = t.jlo;
        for (int k = 0; k < sp.count; ++k) {
          const auto& w = s.items[item_of_slot[sp.first + k]];
          CHECK(w.unit == unit);
          CHECK(w.j0 == next);
          next = w.j1;
        }
        CHECK(next == t.n_tiles);
      }
      CHECK(active <= active_units(r, seq));
    }
    // The same batch planned at q_span for every sequence: never fewer chunks.
    schedule_request all = r;
    all.q_tokens = nullptr;
    const schedule b = make_schedule(all);
    if (r.forced_splits > 0) CHECK(s.chunks <= b.chunks);
  }
  // GQA 4, 8 tokens at most (two 16-row units per KV head): a batch of 1-4 token rows uses one.
  std::vector<std::int32_t> lens(16, 32768), counts(16);
  for (int s = 0; s < 16; ++s) counts[s] = 1 + s % 4;
  schedule_request r;
  r.seq_lens = lens.data();
  r.num_seqs = 16;
  r.qgroups = 2;
  r.units_per_seq = 8 * 2;
  r.group = 4;
  r.unit_rows = 16;
  r.q_span = 8;
  r.q_tokens = counts.data();
  r.max_len = 1 << 20;
  r.ctas = 132;
  long long tiles = 0, tiles_all = 0;
  for (const auto& w : make_schedule(r).items) tiles += w.j1 - w.j0;
  r.q_tokens = nullptr;
  for (const auto& w : make_schedule(r).items) tiles_all += w.j1 - w.j0;
  CHECK(tiles == 16LL * 8 * 256);
  CHECK(tiles_all == 2 * tiles);
}

// The fused merge's plans (empty_chunks): a unit with query rows and no
// visible tile (length 0) gets one empty chunk, so some CTA writes its rows;
// every other unit is cut as without the option.
TEST_CASE("attention schedule: empty chunks for the fused merge") {
  std::vector<std::int32_t> lens{0, 300, 0, 70000, 1};
  schedule_request r;
  r.seq_lens = lens.data();
  r.num_seqs = 5;
  r.units_per_seq = 4;
  r.max_len = 1 << 20;
  r.ctas = 132;
  r.empty_chunks = true;
  const schedule s = make_schedule(r);
  std::vector<int> item_of_slot(s.chunks, -1);
  for (int i = 0; i < s.chunks; ++i) item_of_slot[s.items[i].slot] = i;
  long long items = 0;
  for (int c = 0; c < r.ctas; ++c) items += s.cta_begin[c + 1] - s.cta_begin[c];
  CHECK(items == s.chunks);
  for (int u = 0; u < 5 * 4; ++u) {
    const auto sp = s.spans[u];
    REQUIRE(sp.count >= 1);
    if (lens[u / 4] == 0) {
      CHECK(sp.count == 1);
      const auto& w = s.items[item_of_slot[sp.first]];
      CHECK(w.unit == u);
      CHECK(w.j0 == 0);
      CHECK(w.j1 == 0);
    }
  }
  r.empty_chunks = false;
  const schedule b = make_schedule(r);
  CHECK(b.spans[0].count == 0);
  CHECK(s.chunks == b.chunks + 2 * 4);
  // All lengths 0: one empty chunk per unit, spread over the CTAs.
  std::vector<std::int32_t> zeros(3, 0);
  r.seq_lens = zeros.data();
  r.num_seqs = 3;
  r.empty_chunks = true;
  const schedule z = make_schedule(r);
  CHECK(z.chunks == 12);
  CHECK(z.items.size() == 12u);
}

// Tail pieces (schedule_request::steal_tail): chunks of at least twice the
// tail stay whole on their CTA and list their tail's pieces behind the CTA
// ranges, piece-major; coverage and spans as without them, and only where
// every piece fits the slot limit.
TEST_CASE("attention schedule: tail pieces") {
  std::vector<std::int32_t> lens(16, 65536);  // 16 x 8 units x 512 tiles: one chunk per unit on 132 CTAs
  schedule_request r;
  r.seq_lens = lens.data();
  r.num_seqs = 16;
  r.units_per_seq = 8;
  r.max_len = 1 << 20;
  r.ctas = 132;
  const schedule plain = make_schedule(r);
  check_schedule(r, plain);
  REQUIRE(plain.chunks == 128);
  CHECK(plain.cuts == 0);
  r.steal_tail = 128;
  r.steal_piece = 64;
  r.chunk_limit = max_chunks(128, 132, 0);
  const schedule s = make_schedule(r);
  check_schedule(r, s);
  CHECK(s.chunks == 128 + 128 * 2);
  CHECK(s.cuts == 128);
  CHECK(s.tail_pieces == 2);
  CHECK(s.piece_tiles == 64);
  CHECK(s.cta_begin[132] == 128);
  CHECK(s.cta_begin[133] == s.chunks);
  std::vector<int> seen(128, 0);
  for (int i = 0; i < 128; ++i) {
    CHECK(s.items[i].j1 - s.items[i].j0 == 512);  // whole chunks
    REQUIRE(s.tail_of[i] >= 0);
    REQUIRE(s.tail_of[i] < 128);
    ++seen[s.tail_of[i]];
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == 128);
  for (int i = 0; i < 128; ++i) CHECK(s.items[s.cta_begin[132] + i].j0 == 384);  // every first piece first
  for (int i = 128; i < 256; ++i) CHECK(s.items[s.cta_begin[132] + i].j0 == 448);
  for (int u = 0; u < 128; ++u) CHECK(s.spans[u].count == 3);
  CHECK(s.makespan == (384 + 12) + (256 * (64 + 12) + 131) / 132);  // heads on their CTAs, pieces spread over all
  // Pieces that would not fit the slot limit: none.
  r.chunk_limit = 128 + 128 * 2 - 1;
  const schedule tight = make_schedule(r);
  check_schedule(r, tight);
  CHECK(tight.chunks == 128);
  CHECK(tight.cuts == 0);
  CHECK(tight.cta_begin[132] == tight.cta_begin[133]);
  // More than max_tail_pieces per chunk: none.
  r.chunk_limit = max_chunks(128, 132, 0);
  r.steal_piece = 16;
  const schedule many = make_schedule(r);
  check_schedule(r, many);
  CHECK(many.cuts == 0);
  r.steal_piece = 64;
  // Chunks shorter than twice the tail: none (lengths of 255 tiles).
  std::vector<std::int32_t> shorter(16, 255 * 128);
  r.seq_lens = shorter.data();
  const schedule sh = make_schedule(r);
  check_schedule(r, sh);
  CHECK(sh.cta_begin[132] == sh.cta_begin[133]);
  // Forced splits: none.
  r.seq_lens = lens.data();
  r.forced_splits = 2;
  r.chunk_limit = max_chunks(128, 132, 2);
  const schedule f = make_schedule(r);
  check_schedule(r, f);
  CHECK(f.chunks == 256);
  CHECK(f.cta_begin[132] == f.cta_begin[133]);
  // Ragged lengths and a window: coverage holds wherever pieces are cut.
  std::vector<std::int32_t> ragged{70000, 1, 0, 40000, 129 * 128, 300 * 128 + 5};
  r.seq_lens = ragged.data();
  r.num_seqs = 6;
  r.units_per_seq = 2;
  r.forced_splits = 0;
  r.ctas = 3;
  r.window_left = 50000;
  r.chunk_limit = max_chunks(6 * 2, 3, 0);
  const schedule g = make_schedule(r);
  check_schedule(r, g);
  CHECK(g.cuts == 2);  // two chunks of 391 visible tiles cut
  CHECK(g.cta_begin[4] - g.cta_begin[3] == 4);
  for (int i = g.cta_begin[3]; i < g.cta_begin[4]; ++i) CHECK(g.items[i].j1 - g.items[i].j0 == 64);
}
