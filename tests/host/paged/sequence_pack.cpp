// paged/sequence_pack.hpp: a sequence packed from one host-memory cache and
// unpacked into another (other page ids, other slot) decodes bit-identically,
// carries its tail and sink, and bad headers / sizes are refused.
#include "test_util.hpp"

#include <kvtile/paged/sequence_pack.hpp>

#include <cstring>
#include <random>
#include <vector>

namespace {
using kvtile::status;
using Codec = kvtile::presets::k4v2_g64<64>;
constexpr int D = Codec::D, G = Codec::G, H = 3;
constexpr std::size_t RB = Codec::record_bytes;

struct host_cache {
  std::vector<std::uint8_t> pages;
  std::vector<std::int32_t> table, lens;
  std::vector<kvtile::half_t> tk, tv, sk, sv;
  kvtile::paged_cache_view view{};
  host_cache(int seqs, int maxp, int npages, bool sink)
      : pages(static_cast<std::size_t>(npages) * H * RB + 16), table(static_cast<std::size_t>(seqs) * maxp, -1),
        lens(seqs, 0), tk(static_cast<std::size_t>(seqs) * H * G * D + 8), tv(tk), sk(tk), sv(tk) {
    // 16-byte aligned record base (std::vector<uint8_t> gives no such promise).
    auto* base = pages.data();
    while (reinterpret_cast<std::uintptr_t>(base) % 16) ++base;
    view.pages = base;
    view.page_table = table.data();
    view.seq_lens = lens.data();
    view.tail_k = tk.data();
    view.tail_v = tv.data();
    view.sink_k = sink ? sk.data() : nullptr;
    view.sink_v = sink ? sv.data() : nullptr;
    view.num_seqs = seqs;
    view.kv_heads = H;
    view.head_dim = D;
    view.tile_tokens = G;
    view.max_pages_per_seq = maxp;
    view.num_pages = npages;
    view.record_bytes = static_cast<std::int64_t>(RB);
  }
};

// Fills sequence s of c with `len` tokens: records encoded from random tiles,
// random fp16 tail and sink values.
void fill(host_cache& c, int s, int len, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> k(G * D), v(G * D);
  c.lens[s] = len;
  const int full = len / G;
  for (int t = c.view.has_sink() ? 1 : 0; t < full; ++t)
    for (int h = 0; h < H; ++h) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      const std::int32_t page = c.table[static_cast<std::size_t>(s) * c.view.max_pages_per_seq + t];
      REQUIRE(kvtile::ok(Codec::encode(k.data(), D, v.data(), D, c.view.record(page, h))));
    }
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < G * D; ++i) {
      const auto o = static_cast<std::size_t>(c.view.tile_offset(s, h)) + i;
      c.tk[o] = kvtile::half_t(nd(rng));
      c.tv[o] = kvtile::half_t(nd(rng));
      if (c.view.has_sink() && full >= 1) {
        c.sk[o] = kvtile::half_t(nd(rng));
        c.sv[o] = kvtile::half_t(nd(rng));
      }
    }
}

std::vector<float> decode_tile(const kvtile::paged_cache_view& v, std::int32_t page, int h) {
  std::vector<float> out(2 * G * D);
  REQUIRE(kvtile::ok(Codec::decode(v.record(page, h), out.data(), D, out.data() + G * D, D)));
  return out;
}
}  // namespace

TEST_CASE("sequence_pack: pack, unpack to other page ids and slot, decode bit-identical") {
  for (bool sink : {false, true})
    for (int len : {0, 1, G - 1, G, G + 5, 3 * G, 5 * G + 7}) {
      CAPTURE(sink);
      CAPTURE(len);
      std::mt19937 rng(static_cast<unsigned>(len * 2 + sink));
      host_cache a(2, 8, 20, sink), b(3, 8, 24, sink);
      for (int t = 0; t < 8; ++t) {
        a.table[8 + t] = (t * 7 + 3) % 20;  // sequence 1 of a: scattered pages (3, 10, 17, 4, ...)
        a.table[t] = 19 - t;                // sequence 0: another sequence's pages
      }
      fill(a, 0, 2 * G, rng);
      fill(a, 1, len, rng);
      kvtile::sequence_pack_layout L;
      REQUIRE(kvtile::sequence_pack_layout_of(a.view, 1, len, L) == status::success);
      const int full = len / G;
      CHECK(L.header.n_records == std::max(0, full - (sink ? 1 : 0)));
      CHECK(L.header.has_sink == (sink && full >= 1 ? 1 : 0));
      CHECK(L.total % 16 == 0);
      std::vector<std::uint8_t> buf(L.total, 0xCD);
      CHECK(kvtile::pack_sequence(a.view, 1, len, &a.table[8], buf.data(), L.total - 1) == status::insufficient_space);
      REQUIRE(kvtile::pack_sequence(a.view, 1, len, &a.table[8], buf.data(), buf.size()) == status::success);
      // Into slot 2 of b, pages 5, 6, 7, ... (consecutive: one merged range), then 23 - i.
      std::vector<std::int32_t> np(static_cast<std::size_t>(L.header.n_records));
      for (std::size_t i = 0; i < np.size(); ++i) np[i] = i < 2 ? static_cast<std::int32_t>(5 + i) : static_cast<std::int32_t>(23 - i);
      kvtile::sequence_pack_header got;
      REQUIRE(kvtile::unpack_sequence(buf.data(), buf.size(), b.view, 2, np.data(), &got) == status::success);
      CHECK(got.length == len);
      const int first = sink ? 1 : 0;
      for (int t = first; t < full; ++t)
        for (int h = 0; h < H; ++h) {
          const std::int32_t pa = a.table[8 + t], pb = np[static_cast<std::size_t>(t - first)];
          CHECK(std::memcmp(a.view.record(pa, h), b.view.record(pb, h), RB) == 0);
          const auto da = decode_tile(a.view, pa, h), db = decode_tile(b.view, pb, h);
          CHECK(std::memcmp(da.data(), db.data(), da.size() * sizeof(float)) == 0);
        }
      for (int h = 0; h < H; ++h) {
        const auto oa = static_cast<std::size_t>(a.view.tile_offset(1, h)), ob = static_cast<std::size_t>(b.view.tile_offset(2, h));
        const std::size_t live = static_cast<std::size_t>(len % G) * D * 2;
        CHECK(std::memcmp(&a.tk[oa], &b.tk[ob], live) == 0);
        CHECK(std::memcmp(&a.tv[oa], &b.tv[ob], live) == 0);
        if (sink && full >= 1) {
          CHECK(std::memcmp(&a.sk[oa], &b.sk[ob], G * D * 2) == 0);
          CHECK(std::memcmp(&a.sv[oa], &b.sv[ob], G * D * 2) == 0);
        }
      }
    }
}

TEST_CASE("sequence_pack: bad arguments and headers are refused with a status") {
  host_cache a(2, 4, 8, false), b(2, 4, 8, false), s(2, 4, 8, true);
  for (int t = 0; t < 4; ++t) a.table[4 + t] = t;
  std::mt19937 rng(7);
  fill(a, 1, 2 * G + 3, rng);
  kvtile::sequence_pack_layout L;
  CHECK(kvtile::sequence_pack_layout_of(a.view, 2, 5, L) == status::invalid_argument);       // no such slot
  CHECK(kvtile::sequence_pack_layout_of(a.view, 1, 5 * G, L) == status::invalid_argument);   // more tiles than the row holds
  CHECK(kvtile::sequence_pack_layout_of(a.view, 1, -1, L) == status::invalid_argument);
  REQUIRE(kvtile::sequence_pack_layout_of(a.view, 1, 2 * G + 3, L) == status::success);
  std::vector<std::uint8_t> buf(L.total);
  CHECK(kvtile::pack_sequence(a.view, 1, 2 * G + 3, nullptr, buf.data(), buf.size()) == status::null_pointer);
  a.table[5] = 8;  // page id out of [0, num_pages)
  CHECK(kvtile::pack_sequence(a.view, 1, 2 * G + 3, &a.table[4], buf.data(), buf.size()) == status::invalid_argument);
  a.table[5] = 1;
  REQUIRE(kvtile::pack_sequence(a.view, 1, 2 * G + 3, &a.table[4], buf.data(), buf.size()) == status::success);
  const std::int32_t np[2] = {6, 7};
  CHECK(kvtile::unpack_sequence(buf.data(), buf.size() - 1, b.view, 0, np) == status::insufficient_space);
  CHECK(kvtile::unpack_sequence(buf.data(), buf.size(), s.view, 0, np) == status::invalid_argument);  // sink mismatch
  const std::int32_t bad[2] = {6, 8};
  CHECK(kvtile::unpack_sequence(buf.data(), buf.size(), b.view, 0, bad) == status::invalid_argument);
  auto corrupt = buf;
  corrupt[0] ^= 1;  // magic
  CHECK(kvtile::unpack_sequence(corrupt.data(), corrupt.size(), b.view, 0, np) == status::corrupt_record);
  corrupt = buf;
  corrupt[32] = 9;  // n_records disagrees with the length
  CHECK(kvtile::unpack_sequence(corrupt.data(), corrupt.size(), b.view, 0, np) == status::corrupt_record);
  CHECK(kvtile::unpack_sequence(buf.data(), buf.size(), b.view, 0, np) == status::success);
}
