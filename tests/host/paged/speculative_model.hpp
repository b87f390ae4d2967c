// tests/host/paged/speculative_model.hpp: a host paged cache for the draft / fork
// tests (tests/host/paged/speculative.cpp, tests/device/speculative.cu). plain_append
// is the reference: tokens appended ONE BY ONE (rotate to fp16 into the tail, a
// complete tile encoded with paged_record_codec or copied to the sink), written
// here from the contract of paged_cache.hpp, not with the code under test.
// readable_equal compares what a reader of the cache reads.
#pragma once

#include <kvtile/kvtile.hpp>
#include <kvtile/paged/paged_cache.hpp>
#include <kvtile/paged/paged_record.hpp>
#include <kvtile/paged/speculative.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace spectest {

using kvtile::half_t;

template <class Codec>
struct host_cache {
  static constexpr int D = Codec::D, G = Codec::G;
  static constexpr std::size_t RB = Codec::record_bytes;
  using PC = kvtile::device::paged_record_codec<Codec>;
  int S, H, maxp, npages, slots;
  bool sink;
  std::vector<unsigned char> pages;
  std::vector<std::int32_t> table, lens, tslots, state;
  std::vector<half_t> tk, tv, sk, sv, dk, dv;

  // Row r uses slot slots - 1 - r; pages come from a shuffled pool.
  host_cache(int s, int h, int mp, bool sink_on, int extra_slots = 0, std::uint64_t seed = 1)
      : S(s), H(h), maxp(mp), npages(s * mp + 5), slots(s + extra_slots), sink(sink_on),
        pages(static_cast<std::size_t>(npages) * h * RB, 0xAB), table(static_cast<std::size_t>(s) * mp),
        lens(s, 0), tslots(s), state(static_cast<std::size_t>(slots) * h * 2, 0),
        tk(static_cast<std::size_t>(slots) * h * G * D, half_t::from_bits(0x1234)), tv(tk), sk(tk), sv(tk),
        dk(static_cast<std::size_t>(slots) * h * (G + kvtile::max_draft_tokens) * D, half_t::from_bits(0x4321)),
        dv(dk) {
    std::vector<std::int32_t> perm(npages);
    for (int i = 0; i < npages; ++i) perm[i] = i;
    std::uint64_t x = seed;
    for (int i = npages - 1; i > 0; --i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(perm[i], perm[static_cast<int>((x >> 33) % static_cast<std::uint64_t>(i + 1))]);
    }
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = perm[i];
    for (int r = 0; r < s; ++r) tslots[r] = slots - 1 - r;  // slot != row
  }
  kvtile::paged_cache_view view() {
    kvtile::paged_cache_view v;
    v.pages = pages.data();
    v.page_table = table.data();
    v.seq_lens = lens.data();
    v.tail_k = tk.data();
    v.tail_v = tv.data();
    v.sink_k = sink ? sk.data() : nullptr;
    v.sink_v = sink ? sv.data() : nullptr;
    v.num_seqs = S;
    v.kv_heads = H;
    v.head_dim = D;
    v.tile_tokens = G;
    v.max_pages_per_seq = maxp;
    v.num_pages = npages;
    v.record_bytes = static_cast<std::int64_t>(RB);
    v.tail_slots = tslots.data();
    v.num_slots = slots;
    return v;
  }
  kvtile::draft_view drafts() { return {dk.data(), dv.data(), state.data()}; }
  std::size_t off(int row, int h) const { return (static_cast<std::size_t>(tslots[row]) * H + h) * G * D; }

  // The reference: one token (k, v [H][D]) appended to row s.
  template <class T>
  void plain_append(int s, const T* k, const T* v) {
    const int pos = lens[s];
    for (int h = 0; h < H; ++h) {
      kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(k + h * D, &tk[off(s, h) + (pos % G) * D]);
      kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(v + h * D, &tv[off(s, h) + (pos % G) * D]);
    }
    lens[s] = pos + 1;
    if ((pos + 1) % G != 0) return;
    const int tile = pos / G;
    for (int h = 0; h < H; ++h) {
      if (sink && tile == 0) {
        std::memcpy(&sk[off(s, h)], &tk[off(s, h)], sizeof(half_t) * G * D);
        std::memcpy(&sv[off(s, h)], &tv[off(s, h)], sizeof(half_t) * G * D);
        continue;
      }
      const int page = table[static_cast<std::size_t>(s) * maxp + tile];
      (void)PC::encode(&tk[off(s, h)], D, &tv[off(s, h)], D, pages.data() + (static_cast<std::size_t>(page) * H + h) * RB);
    }
  }
};

// What a reader reads of row a of cache x and row b of cache y is the same:
// lengths, records of complete tiles, the sink once tile 0 is complete, tail
// slots [0, L % G). Returns "" or what differs.
template <class Codec>
std::string readable_diff(const host_cache<Codec>& x, int a, const host_cache<Codec>& y, int b) {
  constexpr int D = Codec::D, G = Codec::G;
  constexpr std::size_t RB = Codec::record_bytes;
  if (x.lens[a] != y.lens[b]) return "lengths " + std::to_string(x.lens[a]) + " != " + std::to_string(y.lens[b]);
  const int L = x.lens[a];
  for (int h = 0; h < x.H; ++h) {
    for (int t = 0; t < L / G; ++t) {
      if (x.sink && t == 0) {
        if (std::memcmp(&x.sk[x.off(a, h)], &y.sk[y.off(b, h)], sizeof(half_t) * G * D) ||
            std::memcmp(&x.sv[x.off(a, h)], &y.sv[y.off(b, h)], sizeof(half_t) * G * D))
          return "sink of head " + std::to_string(h);
        continue;
      }
      const int px = x.table[static_cast<std::size_t>(a) * x.maxp + t], py = y.table[static_cast<std::size_t>(b) * y.maxp + t];
      if (std::memcmp(x.pages.data() + (static_cast<std::size_t>(px) * x.H + h) * RB,
                      y.pages.data() + (static_cast<std::size_t>(py) * y.H + h) * RB, RB))
        return "record of tile " + std::to_string(t) + " head " + std::to_string(h);
    }
    const std::size_t n = static_cast<std::size_t>(L % G) * D * sizeof(half_t);
    if (std::memcmp(&x.tk[x.off(a, h)], &y.tk[y.off(b, h)], n) || std::memcmp(&x.tv[x.off(a, h)], &y.tv[y.off(b, h)], n))
      return "tail of head " + std::to_string(h);
  }
  return "";
}

// Deterministic token values (fp16), a few of them large.
inline void make_tokens(std::vector<half_t>& out, std::size_t n, std::uint64_t seed) {
  out.resize(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
    out[i] = half_t(static_cast<float>((u - 0.5) * ((x & 255) == 0 ? 40.0 : 4.0)));
  }
}

}  // namespace spectest
