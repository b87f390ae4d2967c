// Size computations that must not overflow, the length-checked record decode,
// the paged flags' status rule and the host-safe tail offset (issue 31 items
// 7, 8, 9, 15, 17).
#include "test_util.hpp"

#include <kvtile/codec/record_span.hpp>
#include <kvtile/detail/checked.hpp>
#include <kvtile/paged/paged_record.hpp>
#include <kvtile/paged/sequence_pack.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {
using kvtile::status;

kvtile::paged_cache_view shape_view(int G, int D, int kv_heads, int max_pages) {
  kvtile::paged_cache_view v;
  v.num_seqs = 4;
  v.kv_heads = kv_heads;
  v.head_dim = D;
  v.tile_tokens = G;
  v.max_pages_per_seq = max_pages;
  v.num_pages = 16;
  v.record_bytes = 13328;
  return v;
}
}  // namespace

TEST_CASE("checked arithmetic reports overflow and negative operands") {
  using kvtile::detail::checked_add;
  using kvtile::detail::checked_mul;
  using kvtile::detail::checked_product;
  std::int64_t r = 7;
  CHECK(checked_mul<std::int64_t>(INT64_MAX / 2, 2, r));
  CHECK(r == INT64_MAX - 1);
  r = 7;
  CHECK_FALSE(checked_mul<std::int64_t>(INT64_MAX / 2 + 1, 2, r));
  CHECK(r == 7);  // unchanged on failure
  CHECK_FALSE(checked_mul<std::int64_t>(-1, 2, r));
  CHECK(checked_mul<std::int64_t>(0, INT64_MAX, r));
  CHECK(r == 0);
  CHECK_FALSE(checked_add<std::int64_t>(INT64_MAX, 1, r));
  CHECK(checked_add<std::int64_t>(INT64_MAX - 1, 1, r));
  CHECK(r == INT64_MAX);
  std::size_t z = 0;
  CHECK_FALSE(checked_add<std::size_t>(SIZE_MAX, 1, z));
  CHECK_FALSE(checked_product<std::size_t>(z, std::size_t{1} << 32, std::size_t{1} << 31, std::size_t{2}));
  CHECK(checked_product<std::size_t>(z, std::size_t{1} << 32, std::size_t{1} << 31, std::size_t{1}));
  CHECK(z == (std::size_t{1} << 63));
  // kvtile's own ranges: int32 sizes multiplied into int64 (the workspace-query reproducer of issue 31).
  CHECK_FALSE(checked_product<std::int64_t>(r, std::int64_t{INT32_MAX}, std::int64_t{1} << 20, std::int64_t{1} << 30));
}

TEST_CASE("prefill_grid_tiles: INT64_MAX means no bound, never overflows (issue 31 item 7)") {
  const auto v = shape_view(128, 128, 2, 100);
  std::int64_t tiles = -1;
  // The old formula (max + G - 1) / G + 1 overflowed here (UBSan: signed
  // integer overflow) and wrapped to a negative count that passed the check.
  REQUIRE(kvtile::prefill_grid_tiles(v, INT64_MAX, &tiles) == status::success);
  CHECK(tiles == 100 + 2);  // capacity 100 * 128 + 127 tokens: 101 tiles, + 1 for an unaligned start
  REQUIRE(kvtile::prefill_grid_tiles(v, INT64_MAX - 5, &tiles) == status::success);
  CHECK(tiles == 102);
  REQUIRE(kvtile::prefill_grid_tiles(v, 128, &tiles) == status::success);
  CHECK(tiles == 2);
  REQUIRE(kvtile::prefill_grid_tiles(v, 129, &tiles) == status::success);
  CHECK(tiles == 3);
  REQUIRE(kvtile::prefill_grid_tiles(v, 0, &tiles) == status::success);
  CHECK(tiles == 1);
  CHECK(kvtile::prefill_grid_tiles(v, -1, &tiles) == status::invalid_argument);
  CHECK(kvtile::prefill_grid_tiles(v, 5, nullptr) == status::null_pointer);
  auto big = shape_view(128, 128, 2, INT32_MAX);
  REQUIRE(kvtile::prefill_grid_tiles(big, INT64_MAX, &tiles) == status::success);
  CHECK(tiles == std::int64_t{INT32_MAX} + 2);  // the launcher refuses a grid this large
}

TEST_CASE("sequence_pack_layout_of refuses sizes whose byte counts overflow (issue 31 item 8)") {
  auto v = shape_view(256, 1 << 30, 1 << 30, 4);
  v.record_bytes = std::int64_t{1} << 40;
  kvtile::sequence_pack_layout L;
  // 3 tiles of records: 3 * 2^30 heads * 2^40 bytes, and tail bytes 2^30 * 255 * 2^30 * 2: both wrap 64 bits.
  CHECK(kvtile::sequence_pack_layout_of(v, 0, 3 * 256 + 255, L) == status::invalid_argument);
  v = shape_view(64, 64, 3, 4);
  v.record_bytes = 6928;
  REQUIRE(kvtile::sequence_pack_layout_of(v, 0, 2 * 64 + 5, L) == status::success);
  CHECK(L.tail_bytes == std::size_t{3} * 5 * 64 * 2);
  CHECK(L.total == 64 + 2 * std::size_t{3} * 6928 + 2 * ((L.tail_bytes + 15) / 16 * 16));
}

TEST_CASE("tile_offset_of_slot reads no view memory (issue 31 item 17)") {
  auto v = shape_view(128, 128, 8, 4);
  // A device pointer, as host code holding a device view has it: tile_offset()
  // would dereference it; tile_offset_of_slot takes the slot the host knows.
  v.tail_slots = reinterpret_cast<const std::int32_t*>(std::uintptr_t{0x10});
  v.num_slots = 9;
  CHECK(v.tile_offset_of_slot(5, 3) == (std::int64_t{5} * 8 + 3) * 128 * 128);
  const std::int32_t slots[4] = {2, 0, 5, 1};
  v.tail_slots = slots;
  for (int s = 0; s < 4; ++s) CHECK(v.tile_offset(s, 7) == v.tile_offset_of_slot(slots[s], 7));
}

TEST_CASE("paged_flags_status: saturation is out_of_range, like the codec's own range error (issue 31 item 9)") {
  using namespace kvtile::device;
  CHECK(paged_flags_status(0) == status::success);
  CHECK(paged_flags_status(paged_flag_non_finite) == status::non_finite_input);
  CHECK(paged_flags_status(paged_flag_saturated) == status::out_of_range);
  CHECK(paged_flags_status(paged_flag_saturated | paged_flag_non_finite) == status::out_of_range);
  CHECK(paged_flags_status(paged_flag_encode_failed) == status::out_of_range);
  CHECK(paged_flags_status(paged_flag_bad_page | paged_flag_saturated) == status::invalid_argument);
  CHECK(paged_flags_status(paged_flag_bad_length) == status::invalid_argument);
  // The host model of the paged writers flags what it clamps: 1e5 in every
  // channel rotates to 1e5 * sqrt(128) in one channel, beyond fp16.
  float tok[128];
  for (float& x : tok) x = 1e5f;
  kvtile::half_t h[128];
  const unsigned f = host_rotate_to_half<kvtile::hadamard, 128>(tok, h);
  CHECK(paged_flags_status(f) == status::out_of_range);
  for (float& x : tok) x = 1.0f;
  CHECK(paged_flags_status(host_rotate_to_half<kvtile::hadamard, 128>(tok, h)) == status::success);
}

TEST_CASE("record_span: a short buffer is truncated_record before any read (issue 31 item 15)") {
  using Codec = kvtile::presets::k4v2_g128<128>;
  constexpr int D = Codec::D, G = Codec::G;
  const kvtest::tile t = kvtest::gaussian_tile(G, D, 3);
  std::vector<std::uint8_t> rec(Codec::record_bytes);
  REQUIRE(Codec::encode(t.data(), D, t.data(), D, rec.data()) == status::success);
  std::vector<float> k(G * D, 7.0f), v(G * D, 7.0f);
  // A buffer one byte short, at the end of its allocation: the span API refuses it, writes nothing.
  std::vector<std::uint8_t> shorter(rec.begin(), rec.end() - 1);
  const kvtile::record_span cut{shorter.data(), shorter.size()};
  CHECK(Codec::decode(cut, k.data(), D, v.data(), D) == status::truncated_record);
  CHECK(Codec::decode_keys(cut, k.data(), D) == status::truncated_record);
  CHECK(Codec::decode_values(cut, v.data(), D) == status::truncated_record);
  CHECK(Codec::validate(cut) == status::truncated_record);
  CHECK(k[0] == 7.0f);
  CHECK(v[0] == 7.0f);
  CHECK(Codec::decode(kvtile::record_span{nullptr, 0}, k.data(), D, v.data(), D) == status::null_pointer);
  // The whole record (or more) decodes as the pointer API does.
  rec.push_back(0xee);
  const kvtile::record_span whole{rec.data(), rec.size()};
  REQUIRE(Codec::decode(whole, k.data(), D, v.data(), D) == status::success);
  std::vector<float> k2(G * D), v2(G * D);
  REQUIRE(Codec::decode(rec.data(), k2.data(), D, v2.data(), D) == status::success);
  CHECK(k == k2);
  CHECK(v == v2);
  CHECK(Codec::validate(whole) == status::success);
  // Several records: counts, overflow, null.
  CHECK(kvtile::check_records(whole, 1, Codec::record_bytes) == status::success);
  CHECK(kvtile::check_records(whole, 2, Codec::record_bytes) == status::truncated_record);
  CHECK(kvtile::check_records(whole, 0, Codec::record_bytes) == status::success);
  CHECK(kvtile::check_records(whole, -1, Codec::record_bytes) == status::invalid_argument);
  CHECK(kvtile::check_records(whole, INT64_MAX, Codec::record_bytes) == status::invalid_argument);
  CHECK(kvtile::check_records(kvtile::record_span{nullptr, 100}, 1, 10) == status::null_pointer);
  CHECK(std::string(kvtile::to_string(status::truncated_record)).find("shorter") != std::string::npos);
}
