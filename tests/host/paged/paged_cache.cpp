// The engine-facing layout of paged_cache_view: tails and sinks addressed
// through tail_slots, the structural checks of the slot fields, and
// validate_slots on a host copy.
#include <doctest/doctest.h>

#include <kvtile/kvtile.hpp>
#include <kvtile/paged/paged_cache.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// A view over fake, 16-byte aligned addresses (validate_structure reads no memory).
kvtile::paged_cache_view fake_view(std::int32_t num_seqs, std::int32_t num_slots, const std::int32_t* slots) {
  using codec = kvtile::presets::k4v2_g128<128>;
  alignas(16) static std::uint8_t pages[16];
  alignas(16) static kvtile::half_t tails[8];
  static const std::int32_t table[1] = {0}, lens[1] = {0};
  kvtile::paged_cache_view v;
  v.pages = pages;
  v.page_table = table;
  v.seq_lens = lens;
  v.tail_k = v.tail_v = tails;
  v.num_seqs = num_seqs;
  v.kv_heads = 2;
  v.head_dim = 128;
  v.tile_tokens = 128;
  v.max_pages_per_seq = 4;
  v.num_pages = 8;
  v.record_bytes = static_cast<std::int64_t>(codec::record_bytes);
  v.tail_slots = slots;
  v.num_slots = num_slots;
  return v;
}

kvtile::status structure(const kvtile::paged_cache_view& v) {
  using codec = kvtile::presets::k4v2_g128<128>;
  return kvtile::validate_structure(v, static_cast<std::int64_t>(codec::record_bytes), 128, 128);
}

}  // namespace

TEST_CASE("paged slots: tile_offset follows tail_slots") {
  const std::int32_t slots[3] = {5, 0, 2};
  auto v = fake_view(3, 6, slots);
  const std::int64_t tile = 128 * 128;
  CHECK(v.slots() == 6);
  CHECK(v.tail_slot(0) == 5);
  CHECK(v.tile_offset(0, 1) == (5 * 2 + 1) * tile);
  CHECK(v.tile_offset(1, 0) == 0);
  CHECK(v.tile_offset(2, 1) == (2 * 2 + 1) * tile);
  auto plain = fake_view(3, 0, nullptr);  // no slot index: slot = row
  CHECK(plain.slots() == 3);
  CHECK(plain.tile_offset(2, 1) == (2 * 2 + 1) * tile);
}

TEST_CASE("paged slots: structural checks of the slot fields") {
  const std::int32_t slots[3] = {1, 0, 2};
  CHECK(structure(fake_view(3, 4, slots)) == kvtile::status::success);
  CHECK(structure(fake_view(3, 0, nullptr)) == kvtile::status::success);
  CHECK(structure(fake_view(3, 8, nullptr)) == kvtile::status::success);           // a pool larger than the batch
  CHECK(structure(fake_view(3, 2, nullptr)) == kvtile::status::invalid_argument);  // fewer slots than rows, no index
  CHECK(structure(fake_view(3, 0, slots)) == kvtile::status::invalid_argument);    // an index needs a pool size
  CHECK(structure(fake_view(3, -1, slots)) == kvtile::status::invalid_argument);
  // a pool of 2^31 - 1 slots still has every tail offset in int64
  CHECK(structure(fake_view(3, 0x7fffffff, slots)) == kvtile::status::success);
}

TEST_CASE("paged slots: validate_slots on a host copy") {
  const std::int32_t lens[4] = {10, 0, 300, 1};
  std::vector<std::uint8_t> marks(4, 0);
  const std::int32_t good[4] = {3, 3, 0, 1};  // row 1 is empty: its slot is not used
  auto v = fake_view(4, 4, good);
  CHECK(kvtile::validate_slots(v, good, lens, marks.data()) == kvtile::status::success);
  const std::int32_t dup[4] = {2, 0, 2, 1};
  std::fill(marks.begin(), marks.end(), 0);
  CHECK(kvtile::validate_slots(fake_view(4, 4, dup), dup, lens, marks.data()) == kvtile::status::invalid_argument);
  const std::int32_t out_of_range[4] = {0, 0, 4, 1};
  CHECK(kvtile::validate_slots(fake_view(4, 4, out_of_range), out_of_range, lens) == kvtile::status::invalid_argument);
  const std::int32_t negative[4] = {-1, 0, 2, 1};
  CHECK(kvtile::validate_slots(fake_view(4, 4, negative), negative, lens) == kvtile::status::invalid_argument);
  CHECK(kvtile::validate_slots(fake_view(4, 4, good), nullptr, lens) == kvtile::status::null_pointer);
  CHECK(kvtile::validate_slots(fake_view(4, 0, nullptr), nullptr, nullptr) == kvtile::status::success);  // no index
}
