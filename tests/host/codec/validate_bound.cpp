// tile_codec::validate's reconstruction bound (2^126 / D): every record that
// validates decodes to finite values, for every head_dim, packing and frame,
// including records exactly at the bound (issue 16 item 5: a D = 256 fp8
// record with every element 2^120 used to validate and decode to +Inf).
#include "test_util.hpp"

#include <fstream>
#include <iterator>

namespace {
using kvtile::frame;
using kvtile::status;
namespace P = kvtile::presets;

// Key side: all codes qmax, steps 0, zeros `zero_bits`, token scales 1.0 x 2^e
// (vector scale 2^e). Value side: zero. Every key element reconstructs to
// zero * 2^e. (fp16_scales records cannot get near the bound: every field is
// an fp16, so a reconstruction is below 2^16 * 256 * 2^16.)
template <class Codec>
std::vector<std::uint8_t> uniform_key_record(std::uint16_t zero_bits, int e) {
  using L = typename Codec::layout;
  constexpr int D = Codec::D, G = Codec::G;
  std::vector<std::uint8_t> r(Codec::record_bytes, 0);
  std::memset(r.data() + L::key_codes, 0xff, Codec::config::key_code_bytes);
  for (int d = 0; d < D; ++d) kvtest::wr_u16(&r[L::key_zero + 2 * d], zero_bits);
  static_assert(std::is_same_v<typename Codec::packer, kvtile::fp8_scales>, "fp8_scales records");
  for (int f = 0; f < 4; ++f) kvtest::wr_f32(&r[L::vector_scales + 4 * f], 1.0f);
  kvtest::wr_f32(&r[L::vector_scales + 4 * int(kvtile::vector_field::key_token_scale)], std::ldexp(1.0f, e));
  for (int g = 0; g < G; ++g) r[L::key_token_scale + g] = 0x38;  // 1.0
  for (int d = 0; d < D; ++d) r[L::value_channel_scale + d] = 0x38;
  return r;
}

template <class Codec>
void check_every_valid_record_is_finite(int e_lo, int e_hi) {
  constexpr int D = Codec::D, G = Codec::G;
  int accepted = 0, rejected = 0;
  for (std::uint16_t zero : {std::uint16_t{0x7800}, std::uint16_t{0xf800}, std::uint16_t{0x7bff}}) {  // +-32768, 65504
    for (int e = e_lo; e <= e_hi; ++e) {
      CAPTURE(zero);
      CAPTURE(e);
      const auto r = uniform_key_record<Codec>(zero, e);
      const double magnitude = std::fabs(kvtile::half_t::from_bits(zero).to_float()) * std::ldexp(1.0, e);
      const status s = Codec::validate(r.data());
      CHECK((s == status::success) == (magnitude <= Codec::max_reconstructed_magnitude));
      if (s != status::success) {
        ++rejected;
        continue;
      }
      ++accepted;
      std::vector<float> k(static_cast<std::size_t>(G) * D), v(k.size());
      for (frame f : {frame::original, frame::rotated}) {
        REQUIRE(Codec::decode(r.data(), k.data(), D, v.data(), D, f) == status::success);
        long bad = 0;
        for (float x : k) bad += !std::isfinite(x);
        CHECK(bad == 0);
      }
      std::vector<kvtile::half_t> kh(k.size()), vh(k.size());
      REQUIRE(Codec::decode(r.data(), kh.data(), D, vh.data(), D, frame::rotated) == status::success);
    }
  }
  CHECK(accepted > 0);  // the bound itself is reached
  CHECK(rejected > 0);
}
}  // namespace

TEST_CASE("validate: the reconstruction bound is 2^126 / D") {
  CHECK(P::k4v2_g128<64>::max_reconstructed_magnitude == std::ldexp(1.0, 120));
  CHECK(P::k4v2_g128<128>::max_reconstructed_magnitude == std::ldexp(1.0, 119));
  CHECK(P::k4v2_g128<256>::max_reconstructed_magnitude == std::ldexp(1.0, 118));
}

TEST_CASE_TEMPLATE("validate: every record at or below the bound decodes finite, for every D", Codec,
                   P::k4v2_g128<64>, P::k4v2_g128<128>, P::k4v2_g128<256>, P::k2v2_g128<256>, P::k8v8_g128<256>) {
  check_every_valid_record_is_finite<Codec>(95, 115);  // element = 2^15 * 2^e: 2^110 .. 2^130
}

TEST_CASE("validate: the D = 256 fp8 record of fuzz regression d256-fp8-inf-at-bound is rejected") {
  // The record: scale 2^105, zero 32768, every element 2^120 (the old
  // bound); the inverse FWHT summed 256 x 2^120 = 2^128 = +Inf.
  using C = P::k4v2_g128<256>;
  const auto r = uniform_key_record<C>(0x7800, 105);
  CHECK(C::validate(r.data()) == status::corrupt_record);
  std::vector<float> k(256 * 128, 7.0f), v(k.size(), 7.0f);
  CHECK(C::decode(r.data(), k.data(), 256, v.data(), 256) == status::corrupt_record);
  for (float x : k) REQUIRE(x == 7.0f);  // nothing written
  // The fuzzer input itself is in the tree (replayed by tests/fuzz/run.sh).
  std::ifstream f(KVTILE_SOURCE_DIR "/tests/fuzz/regressions/decode_record/d256-fp8-inf-at-bound", std::ios::binary);
  REQUIRE(f.good());
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(bytes.size() == 25);
}
