// Draft tokens and fork on the host path (paged/speculative.hpp): after
// append_drafts + commit(a) the cache reads exactly as a cache into which only
// the a accepted tokens were appended one by one (the reference of
// speculative_model.hpp), for a = 0, 1, k and random a, drafts that complete a
// tile (accepted or rejected), the sink on and off, rows on permuted slots;
// during the verify step it reads as a plain append of all k drafts. A fork
// shares pages and continues like an unshared copy. Bad input gets a status and
// changes nothing.
#include <doctest/doctest.h>

#include "speculative_model.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using spectest::host_cache;
using spectest::readable_diff;
using kvtile::half_t;
using small_codec = kvtile::presets::kvarn<64, 32, 4, 2>;  // G = 32: many tile boundaries

// One verify step on `spec` and the same accepted tokens on `ref`: row s gets
// n[s] drafts and keeps a[s] of them. Checks the verify state (against ref
// with all drafts appended) and the committed state (against ref).
template <class Codec>
void verify_step(host_cache<Codec>& spec, host_cache<Codec>& ref, const std::vector<int>& n, const std::vector<int>& a,
                 std::uint64_t seed, int* rejected_tile, int* accepted_tile) {
  constexpr int D = Codec::D, G = Codec::G;
  const int S = spec.S, H = spec.H;
  std::vector<std::int32_t> cu(S + 1, 0);
  for (int s = 0; s < S; ++s) cu[s + 1] = cu[s] + n[s];
  std::vector<half_t> k, v;
  spectest::make_tokens(k, static_cast<std::size_t>(cu[S]) * H * D, seed);
  spectest::make_tokens(v, static_cast<std::size_t>(cu[S]) * H * D, seed + 7);
  for (int s = 0; s < S; ++s) spec.lens[s] += n[s];
  REQUIRE(kvtile::host_append_drafts<Codec>(spec.view(), spec.drafts(), k.data(), v.data(), cu.data()) ==
          kvtile::status::success);
  host_cache<Codec> all = ref;  // plain append of every draft
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < n[s]; ++i)
      all.plain_append(s, &k[(static_cast<std::size_t>(cu[s]) + i) * H * D], &v[(static_cast<std::size_t>(cu[s]) + i) * H * D]);
  for (int s = 0; s < S; ++s) {
    INFO("verify state, row ", s);
    CHECK(readable_diff(spec, s, all, s) == "");
  }
  std::vector<std::int32_t> acc(a.begin(), a.end());
  for (int s = 0; s < S; ++s)
    if (ref.lens[s] == 0 && n[s] == 0) acc[s] = -1;  // an empty row without drafts is padding: skipped
  REQUIRE(kvtile::host_commit_drafts<Codec>(spec.view(), spec.drafts(), acc.data(), spec.lens.data()) ==
          kvtile::status::success);
  for (int s = 0; s < S; ++s) {
    const int l0 = ref.lens[s];
    for (int i = 0; i < a[s]; ++i)
      ref.plain_append(s, &k[(static_cast<std::size_t>(cu[s]) + i) * H * D], &v[(static_cast<std::size_t>(cu[s]) + i) * H * D]);
    if ((l0 + n[s]) / G > l0 / G) ++*((l0 + a[s]) / G > l0 / G ? accepted_tile : rejected_tile);
    INFO("committed state, row ", s, ": L0 ", l0, ", ", n[s], " drafts, ", a[s], " accepted");
    CHECK(readable_diff(spec, s, ref, s) == "");
  }
  CHECK(std::all_of(spec.state.begin(), spec.state.end(), [](std::int32_t x) { return x == 0; }));
}

template <class Codec>
void run_rollback(bool sink) {
  constexpr int G = Codec::G;
  const int S = 3, H = 2;
  host_cache<Codec> spec(S, H, 8, sink, 2), ref(S, H, 8, sink, 2);
  int rejected_tile = 0, accepted_tile = 0;
  std::uint64_t x = 99;
  auto rnd = [&](int m) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((x >> 33) % static_cast<std::uint64_t>(m));
  };
  // Forced cases first: row 0 sits 3 tokens before a tile boundary and gets 5
  // drafts, keeping 0, then 1 (still short of the boundary), then all 5; row 1
  // is empty and gets drafts from position 0; row 2 no drafts (commit 0 of 0).
  std::vector<int> warm(S, 0);
  for (int i = 0; i < G - 3; ++i) {
    std::vector<half_t> k, v;
    spectest::make_tokens(k, static_cast<std::size_t>(H) * Codec::D, 1000 + i);
    spectest::make_tokens(v, static_cast<std::size_t>(H) * Codec::D, 2000 + i);
    spec.plain_append(0, k.data(), v.data());
    ref.plain_append(0, k.data(), v.data());
  }
  std::uint64_t seed = 5;
  verify_step(spec, ref, {5, 3, 0}, {0, 0, 0}, seed++, &rejected_tile, &accepted_tile);
  verify_step(spec, ref, {5, 3, 0}, {1, 3, 0}, seed++, &rejected_tile, &accepted_tile);
  verify_step(spec, ref, {8, 8, 8}, {8, 1, 8}, seed++, &rejected_tile, &accepted_tile);
  CHECK(spec.lens[0] == G - 3 + 1 + 8);
  for (int step = 0; step < 60; ++step) {
    std::vector<int> n(S), a(S);
    for (int s = 0; s < S; ++s) {
      if (spec.lens[s] + 8 > 8 * G) {
        n[s] = a[s] = 0;
        continue;
      }
      n[s] = rnd(9);
      const int pick = rnd(4);
      a[s] = pick == 0 ? 0 : pick == 1 ? std::min(1, n[s]) : pick == 2 ? n[s] : rnd(n[s] + 1);
    }
    verify_step(spec, ref, n, a, seed++, &rejected_tile, &accepted_tile);
  }
  CHECK(rejected_tile > 0);  // a draft completed a tile and was rolled back
  CHECK(accepted_tile > 0);  // an accepted draft completed a tile
}

}  // namespace

TEST_CASE("speculative: commit of any draft prefix equals appending only the accepted tokens (G 32)") {
  SUBCASE("sink off") { run_rollback<small_codec>(false); }
  SUBCASE("sink on") { run_rollback<small_codec>(true); }
}

TEST_CASE("speculative: a draft across a 128-token tile boundary rolls back exactly (k4v2_g128, D 128)") {
  using C = kvtile::presets::k4v2_g128<128>;
  for (bool sink : {false, true}) {
    host_cache<C> spec(1, 1, 3, sink), ref(1, 1, 3, sink);
    for (int i = 0; i < 125; ++i) {
      std::vector<half_t> k, v;
      spectest::make_tokens(k, 128, 10 + i);
      spectest::make_tokens(v, 128, 500 + i);
      spec.plain_append(0, k.data(), v.data());
      ref.plain_append(0, k.data(), v.data());
    }
    int rej = 0, acc = 0;
    verify_step(spec, ref, {6}, {2}, 1, &rej, &acc);  // tile 0 completed by a rejected draft (the sink when on)
    verify_step(spec, ref, {7}, {7}, 2, &rej, &acc);  // completed by accepted drafts
    verify_step(spec, ref, {8}, {0}, 3, &rej, &acc);
    CHECK(rej == 1);
    CHECK(acc == 1);
  }
}

TEST_CASE("speculative: bad input gets invalid_argument and changes nothing") {
  using C = small_codec;
  host_cache<C> c(2, 2, 4, true);
  const int D = C::D, H = 2;
  std::vector<half_t> k, v;
  spectest::make_tokens(k, 16 * H * D, 3);
  spectest::make_tokens(v, 16 * H * D, 4);
  for (int i = 0; i < 5; ++i) c.plain_append(0, &k[i * H * D], &v[i * H * D]);
  auto same_as = [](const host_cache<C>& a, const host_cache<C>& b) {
    return a.pages == b.pages && a.lens == b.lens && a.state == b.state &&
           std::memcmp(a.tk.data(), b.tk.data(), a.tk.size() * 2) == 0 &&
           std::memcmp(a.dk.data(), b.dk.data(), a.dk.size() * 2) == 0 &&
           std::memcmp(a.sk.data(), b.sk.data(), a.sk.size() * 2) == 0;
  };
  std::vector<std::int32_t> acc = {0, -1};
  {
    const host_cache<C> before = c;
    CHECK(kvtile::host_commit_drafts<C>(c.view(), c.drafts(), acc.data()) == kvtile::status::invalid_argument);
    CHECK(same_as(c, before));  // rollback with no pending drafts
  }
  {
    std::vector<std::int32_t> cu = {0, 9, 9};  // 9 drafts: more than max_draft_tokens
    c.lens[0] += 9;
    const host_cache<C> before = c;
    CHECK(kvtile::host_append_drafts<C>(c.view(), c.drafts(), k.data(), v.data(), cu.data()) ==
          kvtile::status::invalid_argument);
    CHECK(same_as(c, before));
    c.lens[0] -= 9;
  }
  {
    std::vector<std::int32_t> cu = {0, 0, 3};  // row 1 has length 0 but 3 drafts (seq_lens must include them)
    const host_cache<C> before = c;
    CHECK(kvtile::host_append_drafts<C>(c.view(), c.drafts(), k.data(), v.data(), cu.data()) ==
          kvtile::status::invalid_argument);
    CHECK(same_as(c, before));
  }
  std::vector<std::int32_t> cu = {0, 3, 3};
  c.lens[0] += 3;
  REQUIRE(kvtile::host_append_drafts<C>(c.view(), c.drafts(), k.data(), v.data(), cu.data()) == kvtile::status::success);
  {
    const host_cache<C> before = c;  // drafts while drafts are pending
    c.lens[0] += 3;
    CHECK(kvtile::host_append_drafts<C>(c.view(), c.drafts(), k.data(), v.data(), cu.data()) ==
          kvtile::status::invalid_argument);
    c.lens[0] -= 3;
    CHECK(same_as(c, before));
  }
  {
    const host_cache<C> before = c;  // commit more than appended
    acc = {4, -1};
    CHECK(kvtile::host_commit_drafts<C>(c.view(), c.drafts(), acc.data()) == kvtile::status::invalid_argument);
    CHECK(same_as(c, before));
  }
  {
    // fork of a slot with pending drafts
    const std::int32_t src = c.tslots[0], dst = c.tslots[1];
    CHECK(kvtile::host_fork(c.view(), c.drafts(), &src, &dst, 1) == kvtile::status::invalid_argument);
  }
  acc = {3, -1};
  CHECK(kvtile::host_commit_drafts<C>(c.view(), c.drafts(), acc.data(), c.lens.data()) == kvtile::status::success);
  CHECK(c.lens[0] == 8);
  // fork into a live slot, onto itself, twice into one slot, out of range
  {
    const auto v = c.view();
    const std::int32_t src = c.tslots[0];
    std::int32_t dst = c.tslots[0];
    CHECK(kvtile::validate_fork(v, &src, &dst, 1, c.tslots.data(), c.lens.data()) == kvtile::status::invalid_argument);
    c.lens[1] = 1;  // row 1 live: its slot is taken
    dst = c.tslots[1];
    CHECK(kvtile::validate_fork(v, &src, &dst, 1, c.tslots.data(), c.lens.data()) == kvtile::status::invalid_argument);
    c.lens[1] = 0;
    CHECK(kvtile::validate_fork(v, &src, &dst, 1, c.tslots.data(), c.lens.data()) == kvtile::status::success);
    const std::int32_t srcs[2] = {src, src}, dsts[2] = {dst, dst};
    CHECK(kvtile::validate_fork(v, srcs, dsts, 2, c.tslots.data(), c.lens.data()) == kvtile::status::invalid_argument);
    std::int32_t far = c.slots;
    CHECK(kvtile::validate_fork(v, &src, &far, 1, c.tslots.data(), c.lens.data()) == kvtile::status::invalid_argument);
    CHECK(kvtile::host_fork(v, c.drafts(), &src, &far, 1) == kvtile::status::invalid_argument);
  }
}

TEST_CASE("speculative: fork shares pages; divergent continuations equal unshared copies") {
  using C = small_codec;
  constexpr int D = C::D, G = C::G;
  for (bool sink : {false, true}) {
    const int H = 2, S = 3;
    host_cache<C> a(S, H, 6, sink), b(S, H, 6, sink);  // a: forked, b: every row appended on its own
    std::vector<half_t> k, v;
    const int prefix = 2 * G + 11;
    spectest::make_tokens(k, static_cast<std::size_t>(prefix) * H * D, 21);
    spectest::make_tokens(v, static_cast<std::size_t>(prefix) * H * D, 22);
    for (int i = 0; i < prefix; ++i) {
      a.plain_append(0, &k[i * H * D], &v[i * H * D]);
      for (int r = 0; r < S; ++r) b.plain_append(r, &k[i * H * D], &v[i * H * D]);
    }
    // Fork row 0 into rows 1 and 2 (their slots free: lengths 0).
    const std::int32_t src[2] = {a.tslots[0], a.tslots[0]}, dst[2] = {a.tslots[1], a.tslots[2]};
    REQUIRE(kvtile::validate_fork(a.view(), src, dst, 2, a.tslots.data(), a.lens.data()) == kvtile::status::success);
    REQUIRE(kvtile::host_fork(a.view(), a.drafts(), src, dst, 2) == kvtile::status::success);
    for (int r = 1; r < S; ++r) {
      for (int t = 0; t < prefix / G; ++t) a.table[r * a.maxp + t] = a.table[t];  // shared by page id
      a.lens[r] = a.lens[0];
    }
    std::vector<unsigned char> shared;
    for (int t = sink ? 1 : 0; t < prefix / G; ++t)
      shared.insert(shared.end(), a.pages.begin() + a.table[t] * H * C::record_bytes,
                    a.pages.begin() + (a.table[t] + 1) * H * C::record_bytes);
    for (int r = 0; r < S; ++r) CHECK(readable_diff(a, r, b, r) == "");
    // Divergent continuations: plain appends, then draft steps, different tokens per row.
    std::uint64_t seed = 300;
    int rej = 0, acc = 0;
    for (int step = 0; step < 12; ++step) {
      std::vector<half_t> kk, vv;
      spectest::make_tokens(kk, static_cast<std::size_t>(S) * H * D, seed++);
      spectest::make_tokens(vv, static_cast<std::size_t>(S) * H * D, seed++);
      for (int r = 0; r < S; ++r) {
        a.plain_append(r, &kk[r * H * D], &vv[r * H * D]);
        b.plain_append(r, &kk[r * H * D], &vv[r * H * D]);
      }
      // The same verify step on a (drafts) and on b (accepted tokens appended one by one).
      verify_step(a, b, {3 + step % 6, 8, step % 9}, {step % 4, 8 - step % 3, 0}, seed, &rej, &acc);
      for (int r = 0; r < S; ++r) CHECK(readable_diff(a, r, b, r) == "");
    }
    std::vector<unsigned char> after;
    for (int t = sink ? 1 : 0; t < prefix / G; ++t)
      after.insert(after.end(), a.pages.begin() + a.table[t] * H * C::record_bytes,
                   a.pages.begin() + (a.table[t] + 1) * H * C::record_bytes);
    CHECK(after == shared);  // shared pages never written
    CHECK(acc > 0);
  }
}

TEST_CASE("speculative: the per-row rules") {
  using kvtile::check_append_drafts;
  using kvtile::check_commit;
  constexpr std::int32_t bad = kvtile::device::paged_flag_bad_drafts;
  CHECK(check_append_drafts(10, 0, 0) == 0);  // a live row with no drafts: pending with 0
  CHECK(check_append_drafts(10, 8, 0) == 0);
  CHECK(check_append_drafts(8, 8, 0) == 0);   // drafts from position 0
  CHECK(check_append_drafts(10, 9, 0) == bad);  // more than max_draft_tokens
  CHECK(check_append_drafts(3, 4, 0) == bad);   // seq_lens must include the drafts
  CHECK(check_append_drafts(10, -1, 0) == bad);
  CHECK(check_append_drafts(10, 2, 3) == bad);  // drafts pending
  CHECK(check_commit(0, 5, 1) == 0);            // 0 of 0
  CHECK(check_commit(3, 5, 4) == 0);
  CHECK(check_commit(4, 5, 4) == bad);          // more than appended
  CHECK(check_commit(0, 5, 0) == bad);          // nothing pending
  CHECK(check_commit(0, 5, 10) == bad);         // a state no append_drafts writes
  CHECK(check_commit(0, -1, 1) == bad);
  CHECK(check_commit(0, INT32_MAX - 7, 1) == bad);  // L0 + 8 would overflow int32
  CHECK(kvtile::draft_bytes(3, 2, 128, 128) == 3 * 2 * (2 * 136 * 128 * 2 + 8));
}
