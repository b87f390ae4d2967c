// packing/fp16_scales.hpp and packing/fp8_scales.hpp: record layouts and sizes.
//
// Expected offsets are computed here from the text (method.md section 6 for
// fp16_scales; the format-version-1 comment of fp8_scales.hpp / docs/format.md
// for fp8_scales), not from the layout structs. Then a tile is encoded and
// every field is decoded manually from the raw bytes (reference fp16 / E4M3
// decoders, the documented code bit order) and the reconstruction compared,
// bit for bit, with the codec's decode in the rotated frame.
#include "test_util.hpp"

namespace {

struct fp16_offsets {  // [K codes][a_K x D][z_K x D][t_K x G][V codes][c_V x D][a_V x G][z_V x G], pad 8
  std::size_t key_codes, key_scale, key_zero, key_token_scale, value_codes, value_channel_scale, value_scale,
      value_zero, bytes;
  fp16_offsets(std::size_t D, std::size_t G, std::size_t bk, std::size_t bv) {
    std::size_t o = 0;
    key_codes = o; o += D * G * bk / 8;
    key_scale = o; o += 2 * D;
    key_zero = o; o += 2 * D;
    key_token_scale = o; o += 2 * G;
    value_codes = o; o += G * D * bv / 8;
    value_channel_scale = o; o += 2 * D;
    value_scale = o; o += 2 * G;
    value_zero = o; o += 2 * G;
    bytes = (o + 7) / 8 * 8;
  }
};

struct fp8_offsets {  // [vs fp32 x 4][a_K e4m3 x D][t_K x G][c_V x D][a_V x G][z_K fp16 x D][z_V fp16 x G][K codes][V codes]
  std::size_t vector_scales, key_scale, key_token_scale, value_channel_scale, value_scale, key_zero, value_zero,
      key_codes, value_codes, bytes;
  fp8_offsets(std::size_t D, std::size_t G, std::size_t bk, std::size_t bv) {
    std::size_t o = 0;
    vector_scales = o; o += 16;
    key_scale = o; o += D;
    key_token_scale = o; o += G;
    value_channel_scale = o; o += D;
    value_scale = o; o += G;
    key_zero = o; o += 2 * D;
    value_zero = o; o += 2 * G;
    key_codes = o; o += D * G * bk / 8;
    value_codes = o; o += G * D * bv / 8;
    bytes = o;
  }
};

template <int D, int G, int BK, int BV>
void check_layout_offsets() {
  using cfg = kvtile::tile_config<D, G, BK, BV>;
  {
    using L = kvtile::fp16_scales::layout<cfg>;
    const fp16_offsets e(D, G, BK, BV);
    CHECK(L::key_codes == e.key_codes);
    CHECK(L::key_scale == e.key_scale);
    CHECK(L::key_zero == e.key_zero);
    CHECK(L::key_token_scale == e.key_token_scale);
    CHECK(L::value_codes == e.value_codes);
    CHECK(L::value_channel_scale == e.value_channel_scale);
    CHECK(L::value_scale == e.value_scale);
    CHECK(L::value_zero == e.value_zero);
    CHECK(L::bytes == e.bytes);
    CHECK(L::bytes % 16 == 0);
  }
  {
    using L = kvtile::fp8_scales::layout<cfg>;
    const fp8_offsets e(D, G, BK, BV);
    CHECK(L::vector_scales == e.vector_scales);
    CHECK(L::key_scale == e.key_scale);
    CHECK(L::key_token_scale == e.key_token_scale);
    CHECK(L::value_channel_scale == e.value_channel_scale);
    CHECK(L::value_scale == e.value_scale);
    CHECK(L::key_zero == e.key_zero);
    CHECK(L::value_zero == e.value_zero);
    CHECK(L::key_codes == e.key_codes);
    CHECK(L::value_codes == e.value_codes);
    CHECK(L::bytes == e.bytes);
    CHECK(L::key_codes % 16 == 0);
    CHECK(L::value_codes % 16 == 0);
    CHECK(L::bytes % 16 == 0);
  }
}

}  // namespace

TEST_CASE("packing_layout: record sizes of method.md's table (D = 128)") {
  using namespace kvtile::presets;
  using kvtile::fp16_scales;
  CHECK(k4v2_g128<128>::record_bytes == 13328);
  CHECK(k4v2_g128<128, fp16_scales>::record_bytes == 13824);
  CHECK(k4v4_g128<128>::record_bytes == 17424);
  CHECK(k4v4_g128<128, fp16_scales>::record_bytes == 17920);
  CHECK(k2v2_g128<128>::record_bytes == 9232);
  CHECK(k2v2_g128<128, fp16_scales>::record_bytes == 9728);
  CHECK(k4v2_g64<128>::record_bytes == 6928);
  CHECK(k4v2_g64<128, fp16_scales>::record_bytes == 7296);
  // Bits per element (K and V together, metadata included), 3 decimals as in the table.
  auto b3 = [](double b) { return std::round(b * 1000) / 1000; };
  CHECK(b3(k4v2_g128<128>::bits_per_element) == 3.254);
  CHECK(b3(k4v2_g128<128, fp16_scales>::bits_per_element) == 3.375);
  CHECK(b3(k4v4_g128<128>::bits_per_element) == 4.254);
  CHECK(b3(k4v4_g128<128, fp16_scales>::bits_per_element) == 4.375);
  CHECK(b3(k2v2_g128<128>::bits_per_element) == 2.254);
  CHECK(b3(k2v2_g128<128, fp16_scales>::bits_per_element) == 2.375);
  CHECK(b3(k4v2_g64<128>::bits_per_element) == 3.383);
  CHECK(b3(k4v2_g64<128, fp16_scales>::bits_per_element) == 3.563);
  auto c2 = [](double c) { return std::round(c * 100) / 100; };
  CHECK(c2(k4v2_g128<128>::compression_vs_fp16) == 4.92);
  CHECK(c2(k4v2_g128<128, fp16_scales>::compression_vs_fp16) == 4.74);
  CHECK(c2(k4v4_g128<128>::compression_vs_fp16) == 3.76);
  CHECK(c2(k2v2_g128<128>::compression_vs_fp16) == 7.10);
  CHECK(c2(k4v2_g64<128>::compression_vs_fp16) == 4.73);
}

TEST_CASE("packing_layout: field offsets match the documented layouts for every dispatched shape") {
  check_layout_offsets<128, 128, 4, 2>();
  check_layout_offsets<128, 128, 4, 4>();
  check_layout_offsets<128, 128, 2, 2>();
  check_layout_offsets<128, 128, 8, 8>();
  check_layout_offsets<128, 64, 4, 2>();
  check_layout_offsets<128, 64, 4, 4>();
  check_layout_offsets<64, 128, 4, 2>();
  check_layout_offsets<64, 64, 4, 4>();
  check_layout_offsets<256, 128, 8, 8>();
  check_layout_offsets<256, 64, 4, 2>();
  check_layout_offsets<64, 32, 2, 2>();   // tile_config extremes (not dispatched)
  check_layout_offsets<256, 256, 2, 8>();
}

namespace {

// Decodes every field of a record from raw bytes with the reference decoders
// and rebuilds K^ and V^ (rotated frame) as method.md section 4 states, with
// one fma and one rounded product; compares bit for bit with the codec.
template <class Codec, bool Fp8>
void check_manual_decode(std::uint64_t seed) {
  constexpr int D = Codec::D, G = Codec::G, BK = Codec::config::key_bits, BV = Codec::config::value_bits;
  const auto k = kvtest::outlier_key_tile(G, D, seed);
  const auto v = kvtest::gaussian_tile(G, D, seed + 1, 2.0);
  auto rec = kvtest::make_record<Codec>(0x00);
  REQUIRE(Codec::encode(k.data(), D, v.data(), D, rec.data()) == kvtile::status::success);
  // Every byte is written by encode: a record prefilled differently is identical.
  auto rec2 = kvtest::make_record<Codec>(0xff);
  REQUIRE(Codec::encode(k.data(), D, v.data(), D, rec2.data()) == kvtile::status::success);
  CHECK(rec == rec2);

  const std::uint8_t* p = rec.data();
  std::vector<float> aK(D), zK(D), tK(G), cV(D), aV(G), zV(G);
  std::size_t kc_off, vc_off;
  if constexpr (Fp8) {
    const fp8_offsets o(D, G, BK, BV);
    const float vs_aK = kvtest::rd_f32(p + 0), vs_tK = kvtest::rd_f32(p + 4), vs_cV = kvtest::rd_f32(p + 8),
                vs_aV = kvtest::rd_f32(p + 12);
    for (float vs : {vs_aK, vs_tK, vs_cV, vs_aV}) {  // powers of two
      int e;
      CHECK(std::frexp(vs, &e) == 0.5f);
    }
    auto e4 = [&](std::size_t off, int i, float vs) {
      return static_cast<float>(kvtest::ref_e4m3_to_double(p[off + i]) * vs);
    };
    for (int d = 0; d < D; ++d) {
      aK[d] = e4(o.key_scale, d, vs_aK);
      cV[d] = e4(o.value_channel_scale, d, vs_cV);
      zK[d] = static_cast<float>(kvtest::ref_half_to_double(kvtest::rd_u16(p + o.key_zero + 2 * d)));
    }
    for (int g = 0; g < G; ++g) {
      tK[g] = e4(o.key_token_scale, g, vs_tK);
      aV[g] = e4(o.value_scale, g, vs_aV);
      zV[g] = static_cast<float>(kvtest::ref_half_to_double(kvtest::rd_u16(p + o.value_zero + 2 * g)));
    }
    kc_off = o.key_codes;
    vc_off = o.value_codes;
  } else {
    const fp16_offsets o(D, G, BK, BV);
    auto h = [&](std::size_t off, int i) { return static_cast<float>(kvtest::ref_half_to_double(kvtest::rd_u16(p + off + 2 * i))); };
    for (int d = 0; d < D; ++d) {
      aK[d] = h(o.key_scale, d);
      zK[d] = h(o.key_zero, d);
      cV[d] = h(o.value_channel_scale, d);
    }
    for (int g = 0; g < G; ++g) {
      tK[g] = h(o.key_token_scale, g);
      aV[g] = h(o.value_scale, g);
      zV[g] = h(o.value_zero, g);
    }
    kc_off = o.key_codes;
    vc_off = o.value_codes;
    for (std::size_t i = o.value_zero + 2 * G; i < o.bytes; ++i) CHECK(p[i] == 0);  // padding
  }
  // Scales are positive and finite; Sinkhorn scales within [e^-0.3, e^10] up to storage rounding.
  for (int d = 0; d < D; ++d) { CHECK(aK[d] >= 0); CHECK(cV[d] > 0); }
  for (int g = 0; g < G; ++g) { CHECK(tK[g] > 0); CHECK(aV[g] >= 0); }

  kvtest::tile kh(G, D), vh(G, D);
  REQUIRE(Codec::decode(rec.data(), kh.data(), D, vh.data(), D, kvtile::frame::rotated) == kvtile::status::success);
  long mismatch = 0;
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < D; ++d) {
      // K rows are channels over G tokens; V rows are tokens over D channels.
      const unsigned ck = kvtest::ref_code(p + kc_off + static_cast<std::size_t>(d) * G * BK / 8, g, BK);
      const unsigned cv = kvtest::ref_code(p + vc_off + static_cast<std::size_t>(g) * D * BV / 8, d, BV);
      volatile float kk = std::fma(static_cast<float>(ck), aK[d], zK[d]);
      volatile float kprod = kk * tK[g];
      volatile float vv = std::fma(static_cast<float>(cv), aV[g], zV[g]);
      volatile float vprod = vv * cV[d];
      if (kvtest::bits_of(kprod) != kvtest::bits_of(kh.at(g, d))) ++mismatch;
      if (kvtest::bits_of(vprod) != kvtest::bits_of(vh.at(g, d))) ++mismatch;
    }
  CHECK(mismatch == 0);
  // And the fields land where record_view reads them.
  const typename Codec::view view(rec.data());
  for (int d = 0; d < D; ++d) {
    CHECK(view.key_scale(d) == aK[d]);
    CHECK(view.key_zero(d) == zK[d]);
    CHECK(view.value_channel_scale(d) == cV[d]);
  }
  for (int g = 0; g < G; ++g) {
    CHECK(view.key_token_scale(g) == tK[g]);
    CHECK(view.value_scale(g) == aV[g]);
    CHECK(view.value_zero(g) == zV[g]);
  }
}

}  // namespace

TEST_CASE("packing_layout: fp16_scales fields decoded manually from raw bytes") {
  using kvtile::fp16_scales;
  check_manual_decode<kvtile::presets::k4v2_g128<128, fp16_scales>, false>(1);
  check_manual_decode<kvtile::presets::k2v2_g128<64, fp16_scales>, false>(2);
  check_manual_decode<kvtile::presets::k4v4_g64<256, fp16_scales>, false>(3);
  check_manual_decode<kvtile::presets::k8v8_g128<128, fp16_scales>, false>(4);
}

TEST_CASE("packing_layout: fp8_scales fields decoded manually from raw bytes") {
  check_manual_decode<kvtile::presets::k4v2_g128<128>, true>(5);
  check_manual_decode<kvtile::presets::k2v2_g128<256>, true>(6);
  check_manual_decode<kvtile::presets::k4v2_g64<64>, true>(7);
  check_manual_decode<kvtile::presets::k8v8_g128<128>, true>(8);
}

TEST_CASE("packing_layout: hand-checked bytes of a tiny known record (kivi, fp16_scales)") {
  // kivi keeps values as given (no rotation, stored column scales exactly 1).
  // Value token g holds channel d = (d % 4) for every token: each value row
  // is 0,1,2,3,0,1,2,3,... with lo = 0, hi = 3 -> z = 0, a = 1 at 2 bits, codes
  // equal the values, so each packed byte is 0b11'10'01'00 = 0xE4. Unclipped
  // rounding (the default clips 2-bit rows): the step 1 is exact on the fp16
  // grid, so the grid centred on [0, 3] starts at 0.
  using C = kvtile::tile_codec<kvtile::tile_config<64, 128, 2, 2>, kvtile::identity, kvtile::no_normalization,
                               kvtile::rtn_clip<1000>, kvtile::fp16_scales>;
  kvtest::tile k(128, 64), v(128, 64);
  for (int g = 0; g < 128; ++g)
    for (int d = 0; d < 64; ++d) {
      v.at(g, d) = static_cast<float>(d % 4);
      k.at(g, d) = static_cast<float>(g % 4);  // key row d (a channel over tokens): 0,1,2,3,...
    }
  auto rec = kvtest::make_record<C>();
  REQUIRE(C::encode(k.data(), 64, v.data(), 64, rec.data()) == kvtile::status::success);
  const fp16_offsets o(64, 128, 2, 2);
  for (std::size_t i = o.key_codes; i < o.key_codes + 64 * 128 / 4; ++i) CHECK(rec[i] == 0xe4);
  for (std::size_t i = o.value_codes; i < o.value_codes + 64 * 128 / 4; ++i) CHECK(rec[i] == 0xe4);
  for (int d = 0; d < 64; ++d) {
    CHECK(kvtest::rd_u16(&rec[o.key_scale + 2 * d]) == 0x3c00);           // a_K = 1.0
    CHECK(kvtest::rd_u16(&rec[o.key_zero + 2 * d]) == 0x0000);            // z_K = +0
    CHECK(kvtest::rd_u16(&rec[o.value_channel_scale + 2 * d]) == 0x3c00); // c_V = 1.0
  }
  for (int g = 0; g < 128; ++g) {
    CHECK(kvtest::rd_u16(&rec[o.key_token_scale + 2 * g]) == 0x3c00);     // t_K = 1.0
    CHECK(kvtest::rd_u16(&rec[o.value_scale + 2 * g]) == 0x3c00);         // a_V = 1.0
    CHECK(kvtest::rd_u16(&rec[o.value_zero + 2 * g]) == 0x0000);          // z_V = +0
  }
}
