// tile_config.hpp: compile-time shape and sizes (all constexpr; most checks
// are static_asserts, evaluated by the compiler).
#include "test_util.hpp"

namespace {
using kvtile::tile_config;

template <int D, int G, int BK, int BV>
constexpr bool sizes_ok() {
  using C = tile_config<D, G, BK, BV>;
  return C::head_dim == D && C::tile_tokens == G && C::key_bits == BK && C::value_bits == BV &&
         C::elements == D * G && C::key_code_bytes == static_cast<std::size_t>(D) * G * BK / 8 &&
         C::value_code_bytes == static_cast<std::size_t>(D) * G * BV / 8 &&
         C::fp16_bytes == static_cast<std::size_t>(D) * G * 4;
}

static_assert(sizes_ok<128, 128, 4, 2>());
static_assert(sizes_ok<64, 32, 2, 2>());
static_assert(sizes_ok<256, 256, 8, 8>());
static_assert(sizes_ok<128, 64, 4, 4>());
static_assert(tile_config<128, 128, 4, 2>::key_code_bytes == 8192);
static_assert(tile_config<128, 128, 4, 2>::value_code_bytes == 4096);
static_assert(tile_config<128, 128, 4, 2>::fp16_bytes == 65536);
static_assert(tile_config<64, 32, 2, 8>::key_code_bytes == 512);
static_assert(tile_config<64, 32, 2, 8>::value_code_bytes == 2048);
static_assert(kvtile::detail::is_pow2(64) && !kvtile::detail::is_pow2(96) && !kvtile::detail::is_pow2(0));
static_assert(kvtile::detail::log2i(1) == 0 && kvtile::detail::log2i(128) == 7 && kvtile::detail::log2i(256) == 8);
// Codec constants are constexpr too.
static_assert(kvtile::presets::k4v2_g128<128>::record_bytes == 13328);
static_assert(kvtile::presets::k4v2_g128<128>::E == 128 * 128);
constexpr double bpe = kvtile::presets::k4v2_g128<128>::bits_per_element;
static_assert(bpe > 3.25 && bpe < 3.26);
}  // namespace

TEST_CASE("tile_config: constexpr sizes") {
  // The same facts at run time (so they show in the test report).
  CHECK(sizes_ok<128, 128, 4, 2>());
  CHECK(sizes_ok<64, 64, 4, 4>());
  CHECK(sizes_ok<256, 128, 2, 2>());
  CHECK(sizes_ok<128, 256, 8, 2>());
  CHECK(tile_config<256, 128, 8, 8>::key_code_bytes == 32768);
  CHECK(tile_config<64, 64, 2, 4>::value_code_bytes == 2048);
  // The smallest shape: 32 tokens x 2 bits = 8 bytes per key row.
  CHECK(tile_config<64, 32, 2, 2>::key_code_bytes == 64 * 8);
}
