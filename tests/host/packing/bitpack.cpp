// packing/bitpack.hpp: code packing. Documented order (method.md section 6):
// element i of a row goes to byte i / (8/b) at bit shift (i % (8/b)) * b,
// lowest index in the lowest bits. Expected bytes below are written by hand.
#include "test_util.hpp"

using kvtile::detail::get_code;
using kvtile::detail::pack_row;

TEST_CASE("bitpack: 2-bit hand-written bytes") {
  // codes 1,2,3,0 -> 0b00'11'10'01 = 0x39; 3,3,3,3 -> 0xff; 0,1,0,1 -> 0b01'00'01'00 = 0x44
  const std::uint8_t codes[12] = {1, 2, 3, 0, 3, 3, 3, 3, 0, 1, 0, 1};
  std::uint8_t out[3] = {0xaa, 0xaa, 0xaa};
  pack_row<2>(codes, 12, out);
  CHECK(out[0] == 0x39);
  CHECK(out[1] == 0xff);
  CHECK(out[2] == 0x44);
  for (int i = 0; i < 12; ++i) CHECK(get_code<2>(out, i) == codes[i]);
}

TEST_CASE("bitpack: 4-bit hand-written bytes") {
  // codes 0xA,0x5 -> 0x5A; 0x0,0xF -> 0xF0; 0x1,0x2 -> 0x21
  const std::uint8_t codes[6] = {0xa, 0x5, 0x0, 0xf, 0x1, 0x2};
  std::uint8_t out[3] = {};
  pack_row<4>(codes, 6, out);
  CHECK(out[0] == 0x5a);
  CHECK(out[1] == 0xf0);
  CHECK(out[2] == 0x21);
  for (int i = 0; i < 6; ++i) CHECK(get_code<4>(out, i) == codes[i]);
}

TEST_CASE("bitpack: 8-bit is the identity") {
  const std::uint8_t codes[4] = {0x00, 0xff, 0x12, 0x80};
  std::uint8_t out[4] = {};
  pack_row<8>(codes, 4, out);
  CHECK(std::memcmp(out, codes, 4) == 0);
  for (int i = 0; i < 4; ++i) CHECK(get_code<8>(out, i) == codes[i]);
}

namespace {
template <int B>
void round_trip(int n, std::uint64_t seed) {
  kvtest::rng r(seed);
  std::vector<std::uint8_t> codes(n), out(static_cast<std::size_t>(n) * B / 8 + 1, 0xee);
  for (auto& c : codes) c = static_cast<std::uint8_t>(r.next() & ((1u << B) - 1u));
  pack_row<B>(codes.data(), n, out.data());
  long bad = 0;
  for (int i = 0; i < n; ++i) {
    if (get_code<B>(out.data(), i) != codes[i]) ++bad;
    if (kvtest::ref_code(out.data(), i, B) != codes[i]) ++bad;  // the documented rule, independently
  }
  CHECK(bad == 0);
  CHECK(out[static_cast<std::size_t>(n) * B / 8] == 0xee);  // writes exactly n*b/8 bytes
}
}  // namespace

TEST_CASE("bitpack: random round trips for 2, 4, 8 bits at row lengths 32..256") {
  for (int n : {32, 64, 128, 256}) {
    round_trip<2>(n, 100 + n);
    round_trip<4>(n, 200 + n);
    round_trip<8>(n, 300 + n);
  }
}
