// Bad input (issue 2 item 7). Each TEST_CASE documents the behaviour it
// checks; docs/reliability.md should state the same.
#include "test_util.hpp"

namespace {
using kvtile::fp16_scales;
using kvtile::half_t;
using kvtile::status;
namespace P = kvtile::presets;
using kvtest::tile;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <class Codec>
void check_decodes_finite(const std::vector<std::uint8_t>& rec) {
  constexpr int D = Codec::D, G = Codec::G;
  REQUIRE(Codec::validate(rec.data()) == status::success);
  tile k(G, D), v(G, D);
  REQUIRE(Codec::decode(rec.data(), k.data(), D, v.data(), D) == status::success);
  CHECK(kvtest::all_finite(k));
  CHECK(kvtest::all_finite(v));
  REQUIRE(Codec::decode(rec.data(), k.data(), D, v.data(), D, kvtile::frame::rotated) == status::success);
  CHECK(kvtest::all_finite(k));
  CHECK(kvtest::all_finite(v));
  std::vector<half_t> kh(static_cast<std::size_t>(G) * D), vh(kh.size());
  REQUIRE(Codec::decode(rec.data(), kh.data(), D, vh.data(), D) == status::success);
  long inf = 0;
  for (std::size_t i = 0; i < kh.size(); ++i) inf += ((kh[i].bits() & 0x7c00u) == 0x7c00u) + ((vh[i].bits() & 0x7c00u) == 0x7c00u);
  CHECK(inf == 0);  // fp16 output saturates at +-65504, never Inf/NaN
}

// Encodes k and v (float), expects `want`, checks the record is valid, decodes
// finite, and meets the rotated-frame bound.
template <class Codec>
std::vector<std::uint8_t> encode_ok(const tile& k, const tile& v, status want = status::success) {
  constexpr int D = Codec::D;
  auto rec = kvtest::make_record<Codec>();
  REQUIRE(Codec::encode(k.data(), D, v.data(), D, rec.data()) == want);
  check_decodes_finite<Codec>(rec);
  return rec;
}

template <class Codec>
void check_bound(const std::vector<std::uint8_t>& rec, const tile& k, const tile& v) {
  constexpr int D = Codec::D, G = Codec::G;
  tile kh(G, D), vh(G, D);
  REQUIRE(Codec::decode(rec.data(), kh.data(), D, vh.data(), D, kvtile::frame::rotated) == status::success);
  const auto b = kvtest::check_rotated_bound<Codec>(rec, k, v, kh, vh);
  CHECK(b.violations == 0);
}

}  // namespace

#define BAD_INPUT_CODECS P::k4v2_g128<128>, P::k2v2_g128<64, fp16_scales>, P::k8v8_g128<256>, P::kivi<128>, P::k4v4_g64<64>

// NaN and +-Inf elements are replaced by 0 before encoding; the call returns
// status::non_finite_input and the record IS written and valid: byte for byte
// the record of the same tile with those elements set to 0.
TEST_CASE_TEMPLATE("bad_input: NaN and Inf become 0, status non_finite_input, record valid", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  tile k = kvtest::gaussian_tile(G, D, 1), v = kvtest::gaussian_tile(G, D, 2);
  tile k0 = k, v0 = v;
  kvtest::rng r(3);
  const float bad[3] = {kNaN, kInf, -kInf};
  for (int i = 0; i < 40; ++i) {
    const int gk = r.below(G), dk = r.below(D), gv = r.below(G), dv = r.below(D);
    k.at(gk, dk) = bad[i % 3];
    k0.at(gk, dk) = 0.0f;
    v.at(gv, dv) = bad[(i + 1) % 3];
    v0.at(gv, dv) = 0.0f;
  }
  const auto rec = encode_ok<Codec>(k, v, status::non_finite_input);
  const auto rec0 = encode_ok<Codec>(k0, v0, status::success);
  CHECK(rec == rec0);
  check_bound<Codec>(rec0, k0, v0);
  // Separately: keys only / values only report it too.
  auto r1 = kvtest::make_record<Codec>();
  CHECK(Codec::encode_keys(k.data(), D, r1.data()) == status::non_finite_input);
  CHECK(Codec::encode_values(v0.data(), D, r1.data()) == status::success);
  CHECK(Codec::encode_values(v.data(), D, r1.data()) == status::non_finite_input);
  CHECK(kvtile::ok(status::non_finite_input));
  // A tile entirely NaN encodes as the zero tile.
  tile kn(G, D), zero(G, D);
  std::fill(kn.v.begin(), kn.v.end(), kNaN);
  const auto rn = encode_ok<Codec>(kn, kn, status::non_finite_input);
  const auto rz = encode_ok<Codec>(zero, zero);
  CHECK(rn == rz);
}

// Non-finite fp16 / bf16 codes (Inf, NaN with any payload or sign) are handled the same way.
TEST_CASE("bad_input: non-finite half and bfloat16 elements") {
  using C = P::k4v2_g128<128>;
  const tile kf = kvtest::gaussian_tile(128, 128, 4);
  std::vector<half_t> h(kf.v.size());
  std::vector<kvtile::bfloat16_t> b(kf.v.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i] = half_t(kf.v[i]);
    b[i] = kvtile::bfloat16_t(kf.v[i]);
  }
  h[5] = half_t::from_bits(0x7c00);   // +Inf
  h[77] = half_t::from_bits(0xfc00);  // -Inf
  h[900] = half_t::from_bits(0x7e01); // NaN with payload
  h[901] = half_t::from_bits(0xfe00); // negative NaN
  b[5] = kvtile::bfloat16_t(kInf);
  b[6] = kvtile::bfloat16_t(kNaN);
  auto rec = kvtest::make_record<C>();
  CHECK(C::encode(h.data(), 128, h.data(), 128, rec.data()) == status::non_finite_input);
  check_decodes_finite<C>(rec);
  CHECK(C::encode(b.data(), 128, b.data(), 128, rec.data()) == status::non_finite_input);
  check_decodes_finite<C>(rec);
}

// fp16 extremes: +-65504 everywhere, or mixed with random signs / ordinary
// values, encode with status::success; decode is finite (fp16 output
// saturates to +-65504) and the rotated-frame bound holds.
TEST_CASE_TEMPLATE("bad_input: fp16 max magnitudes", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  kvtest::rng r(5);
  for (int pattern = 0; pattern < 4; ++pattern) {
    CAPTURE(pattern);
    std::vector<half_t> k(static_cast<std::size_t>(G) * D), v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      float x;
      switch (pattern) {
        case 0: x = 65504.0f; break;
        case 1: x = -65504.0f; break;
        case 2: x = r.uniform() < 0.5 ? 65504.0f : -65504.0f; break;
        default: x = r.uniform() < 0.1 ? (r.uniform() < 0.5 ? 65504.0f : -65504.0f) : static_cast<float>(r.normal()); break;
      }
      k[i] = half_t(x);
      v[i] = half_t(pattern == 2 ? -x : x);
    }
    auto rec = kvtest::make_record<Codec>();
    REQUIRE(Codec::encode(k.data(), D, v.data(), D, rec.data()) == status::success);
    check_decodes_finite<Codec>(rec);
    tile kf(G, D), vf(G, D);
    for (std::size_t i = 0; i < k.size(); ++i) { kf.v[i] = k[i].to_float(); vf.v[i] = v[i].to_float(); }
    check_bound<Codec>(rec, kf, vf);
  }
}

// Denormals (fp32 subnormals, fp16 subnormals, and both mixed with normal
// values) are ordinary finite input: status::success, finite decode, bound holds.
TEST_CASE_TEMPLATE("bad_input: denormals", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  kvtest::rng r(6);
  for (int pattern = 0; pattern < 4; ++pattern) {
    CAPTURE(pattern);
    tile k(G, D), v(G, D);
    for (std::size_t i = 0; i < k.v.size(); ++i) {
      const double n = r.normal();
      switch (pattern) {
        case 0: k.v[i] = static_cast<float>(n * 1e-40); v.v[i] = static_cast<float>(-n * 1e-42); break;   // fp32 subnormal
        case 1: k.v[i] = half_t(static_cast<float>(n * 3e-6)).to_float(); v.v[i] = k.v[i]; break;       // fp16 subnormal
        case 2: k.v[i] = kvtest::float_of(static_cast<std::uint32_t>(r.next() & 0x807fffffu)); v.v[i] = k.v[i]; break;  // any fp32 subnormal
        default: k.v[i] = r.uniform() < 0.5 ? static_cast<float>(n * 1e-41) : static_cast<float>(n); v.v[i] = k.v[i]; break;
      }
    }
    const auto rec = encode_ok<Codec>(k, v);
    check_bound<Codec>(rec, k, v);
  }
}

// An all-zero tile decodes exactly to zero (every scale step is 0, every zero
// point +0), in both frames.
TEST_CASE_TEMPLATE("bad_input: all-zero tiles decode exactly zero", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  tile z(G, D);
  const auto rec = encode_ok<Codec>(z, z);
  for (auto f : {kvtile::frame::original, kvtile::frame::rotated}) {
    tile k(G, D), v(G, D);
    std::fill(k.v.begin(), k.v.end(), 1.0f);
    std::fill(v.v.begin(), v.v.end(), 1.0f);
    REQUIRE(Codec::decode(rec.data(), k.data(), D, v.data(), D, f) == status::success);
    long nz = 0;
    for (std::size_t i = 0; i < k.v.size(); ++i) nz += (k.v[i] != 0.0f) + (v.v[i] != 0.0f);
    CHECK(nz == 0);
  }
  // A -0 tile also decodes to zeros. (Its record differs from the +0 tile's:
  // zero points are rounded toward -Inf and keep the sign, so they are stored
  // as fp16 -0, 0x8000; decode then yields -0 == 0.)
  tile mz(G, D);
  std::fill(mz.v.begin(), mz.v.end(), -0.0f);
  const auto rm = encode_ok<Codec>(mz, mz);
  tile k(G, D), v(G, D);
  REQUIRE(Codec::decode(rm.data(), k.data(), D, v.data(), D) == status::success);
  long nz = 0;
  for (std::size_t i = 0; i < k.v.size(); ++i) nz += (k.v[i] != 0.0f) + (v.v[i] != 0.0f);
  CHECK(nz == 0);
}

// Constant token vectors (rows of the engine layout), constant channels
// (columns), and a fully constant tile: finite decode within the bound.
// (Exactness of constant quantization rows is checked in rtn.cpp.)
TEST_CASE_TEMPLATE("bad_input: constant rows and constant columns", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  tile rows = kvtest::gaussian_tile(G, D, 7), cols = kvtest::gaussian_tile(G, D, 8), full(G, D);
  for (int g = 0; g < G; g += 3)
    for (int d = 0; d < D; ++d) rows.at(g, d) = 1.5f + g;  // every 3rd token constant
  for (int d = 0; d < D; d += 5)
    for (int g = 0; g < G; ++g) cols.at(g, d) = -0.75f * d;  // every 5th channel constant
  std::fill(full.v.begin(), full.v.end(), 3.0f);
  for (const tile* t : {&rows, &cols, &full}) {
    const auto rec = encode_ok<Codec>(*t, *t);
    check_bound<Codec>(rec, *t, *t);
  }
}

// Finite |x| > 2^48 (kvtile::max_input_magnitude) in float / bf16 input:
// status::out_of_range and the record is left untouched (not a single byte
// written, also by encode() when only the values are out of range).
// Exactly 2^48 is accepted by fp8_scales. fp16_scales has a smaller range:
// its Sinkhorn scales are fp16 (<= 65504) and |X / s^| must stay <= 65280, so
// rotated magnitudes above ~65504 * 65280 (~4.3e9) are out_of_range too.
TEST_CASE("bad_input: magnitudes beyond 2^48 -> out_of_range, record untouched") {
  using C = P::k4v2_g128<128>;
  const tile good = kvtest::gaussian_tile(128, 128, 9);
  for (float big : {2.0f * kvtile::max_input_magnitude, -1e38f, std::numeric_limits<float>::max(),
                    std::nextafter(kvtile::max_input_magnitude, kInf)}) {
    CAPTURE(big);
    tile bad = good;
    bad.at(17, 3) = big;
    auto rec = kvtest::make_record<C>(0x5a);
    const auto before = rec;
    CHECK(C::encode(bad.data(), 128, good.data(), 128, rec.data()) == status::out_of_range);
    CHECK(C::encode(good.data(), 128, bad.data(), 128, rec.data()) == status::out_of_range);
    CHECK(C::encode_keys(bad.data(), 128, rec.data()) == status::out_of_range);
    CHECK(C::encode_values(bad.data(), 128, rec.data()) == status::out_of_range);
    CHECK(rec == before);
    // Out of range wins over NaN elsewhere in the tile.
    bad.at(0, 0) = kNaN;
    CHECK(C::encode(bad.data(), 128, bad.data(), 128, rec.data()) == status::out_of_range);
    CHECK(rec == before);
  }
  // bf16 carries fp32's range.
  std::vector<kvtile::bfloat16_t> b(128 * 128, kvtile::bfloat16_t(1.0f));
  b[100] = kvtile::bfloat16_t(1e20f);
  auto rec = kvtest::make_record<C>(0x5a);
  const auto before = rec;
  CHECK(C::encode(b.data(), 128, b.data(), 128, rec.data()) == status::out_of_range);
  CHECK(rec == before);
  // The limit itself, everywhere and mixed with ordinary values, is accepted.
  tile lim(128, 128), mixed = good;
  std::fill(lim.v.begin(), lim.v.end(), kvtile::max_input_magnitude);
  for (int g = 0; g < 128; g += 7) mixed.at(g, g % 128) = -kvtile::max_input_magnitude;
  check_bound<C>(encode_ok<C>(lim, lim), lim, lim);
  check_bound<C>(encode_ok<C>(mixed, mixed), mixed, mixed);
  // fp16_scales: the fp16 scale range is the limit.
  using F = P::k4v2_g128<128, fp16_scales>;
  tile f = good;
  f.at(3, 3) = 1e12f;
  auto rf = kvtest::make_record<F>(0x5a);
  const auto rf0 = rf;
  CHECK(F::encode(f.data(), 128, good.data(), 128, rf.data()) == status::out_of_range);
  CHECK(rf == rf0);
  f.at(3, 3) = 1e8f;  // well inside
  check_bound<F>(encode_ok<F>(f, good), f, good);
}

// Pointer and stride checks, in this order: null (data or record) ->
// null_pointer; token_stride < D -> invalid_argument; data not aligned to its
// element type -> misaligned. Nothing is written on any of them.
TEST_CASE("bad_input: null pointers, short strides, misaligned pointers") {
  using C = P::k4v2_g128<128>;
  const tile t = kvtest::gaussian_tile(128, 128, 10);
  auto rec = kvtest::make_record<C>(0x5a);
  const auto before = rec;
  const float* nullf = nullptr;
  CHECK(C::encode(nullf, 128, t.data(), 128, rec.data()) == status::null_pointer);
  CHECK(C::encode(t.data(), 128, nullf, 128, rec.data()) == status::null_pointer);
  CHECK(C::encode(t.data(), 128, t.data(), 128, nullptr) == status::null_pointer);
  CHECK(C::encode_keys(nullf, 128, rec.data()) == status::null_pointer);
  CHECK(C::encode_values(t.data(), 128, nullptr) == status::null_pointer);
  for (std::ptrdiff_t s : {std::ptrdiff_t{127}, std::ptrdiff_t{0}, std::ptrdiff_t{-128}}) {
    CHECK(C::encode(t.data(), s, t.data(), 128, rec.data()) == status::invalid_argument);
    CHECK(C::encode(t.data(), 128, t.data(), s, rec.data()) == status::invalid_argument);
    CHECK(C::encode_keys(t.data(), s, rec.data()) == status::invalid_argument);
  }
  // Misaligned element pointers (never dereferenced: the check comes first).
  std::vector<std::uint8_t> raw(128 * 128 * 4 + 8);
  const auto* mf = reinterpret_cast<const float*>(raw.data() + 2);
  const auto* mh = reinterpret_cast<const half_t*>(raw.data() + 1);
  CHECK(C::encode(mf, 128, mf, 128, rec.data()) == status::misaligned);
  CHECK(C::encode_keys(mh, 128, rec.data()) == status::misaligned);
  CHECK(rec == before);
  // The record itself may have any alignment on the host.
  std::vector<std::uint8_t> buf(C::record_bytes + 3);
  CHECK(C::encode(t.data(), 128, t.data(), 128, buf.data() + 3) == status::success);
  // Decode: same checks on the output.
  REQUIRE(C::encode(t.data(), 128, t.data(), 128, rec.data()) == status::success);
  tile out(128, 128);
  float* nullo = nullptr;
  CHECK(C::decode(nullptr, out.data(), 128, out.data(), 128) == status::null_pointer);
  CHECK(C::decode(rec.data(), nullo, 128, out.data(), 128) == status::null_pointer);
  CHECK(C::decode_keys(rec.data(), nullo, 128) == status::null_pointer);
  CHECK(C::decode_values(rec.data(), out.data(), 100) == status::invalid_argument);
  CHECK(C::decode_keys(rec.data(), reinterpret_cast<float*>(raw.data() + 1), 128) == status::misaligned);
  CHECK(C::validate(nullptr) == status::null_pointer);
}

namespace {

// Decoding `rec` must fail with corrupt_record and leave the outputs untouched.
template <class Codec>
void expect_corrupt(const std::vector<std::uint8_t>& rec, bool key_field) {
  constexpr int D = Codec::D, G = Codec::G;
  CHECK(Codec::validate(rec.data()) == status::corrupt_record);
  tile k(G, D), v(G, D);
  std::fill(k.v.begin(), k.v.end(), 42.0f);
  std::fill(v.v.begin(), v.v.end(), 43.0f);
  CHECK(Codec::decode(rec.data(), k.data(), D, v.data(), D) == status::corrupt_record);
  if (key_field) {
    CHECK(Codec::decode_keys(rec.data(), k.data(), D) == status::corrupt_record);
    CHECK(Codec::decode_values(rec.data(), v.data(), D) == status::success);  // the V half is intact
    std::fill(v.v.begin(), v.v.end(), 43.0f);
  } else {
    CHECK(Codec::decode_values(rec.data(), v.data(), D) == status::corrupt_record);
    CHECK(Codec::validate_keys(rec.data()) == status::success);
  }
  long touched = 0;
  for (std::size_t i = 0; i < k.v.size(); ++i) touched += (k.v[i] != 42.0f) + (v.v[i] != 43.0f);
  CHECK(touched == 0);
}

}  // namespace

// A record field holding a value encode never writes (NaN / Inf / negative
// scale code, Inf or NaN zero point, a vector scale that is not a normal
// power of two, or scales so large that decode could overflow: bound 2^120)
// makes decode return status::corrupt_record, writing nothing. decode()
// validates both halves first; decode_keys / decode_values validate their own.
TEST_CASE("bad_input: corrupt fp8_scales records") {
  using C = P::k4v2_g128<128>;
  using L = C::layout;
  const tile t = kvtest::outlier_key_tile(128, 128, 11);
  const auto good = encode_ok<C>(t, t);
  struct field { std::size_t off; bool key; };
  const field e4m3_fields[] = {{L::key_scale + 3, true}, {L::key_token_scale + 100, true},
                               {L::value_channel_scale + 0, false}, {L::value_scale + 127, false}};
  for (auto f : e4m3_fields)
    for (std::uint8_t bad : {std::uint8_t{0x7f}, std::uint8_t{0xff}, std::uint8_t{0x81}, std::uint8_t{0xb8}, std::uint8_t{0x80}}) {
      CAPTURE(f.off);
      CAPTURE(int(bad));  // NaN, -NaN, negative subnormal, -1.0, -0
      auto r = good;
      r[f.off] = bad;
      expect_corrupt<C>(r, f.key);
    }
  const field zero_fields[] = {{L::key_zero + 2 * 9, true}, {L::value_zero + 2 * 64, false}};
  for (auto f : zero_fields)
    for (std::uint16_t bad : {std::uint16_t{0x7c00}, std::uint16_t{0xfc00}, std::uint16_t{0x7e00}, std::uint16_t{0xfd01}}) {
      auto r = good;
      kvtest::wr_u16(&r[f.off], bad);
      expect_corrupt<C>(r, f.key);
    }
  for (int vf = 0; vf < 4; ++vf)
    for (float bad : {1.5f, -1.0f, 0.0f, -0.0f, kNaN, kInf, 1e-40f, 0x1p127f}) {
      CAPTURE(vf);
      CAPTURE(bad);
      auto r = good;
      kvtest::wr_f32(&r[L::vector_scales + 4 * vf], bad);
      expect_corrupt<C>(r, vf < 2);
    }
  // Scale codes at E4M3 max (448) with a 2^110 vector scale: finite fields,
  // but the reconstruction bound (448 * 2^110 * 15 + |z|) * max t > 2^120 -> corrupt.
  auto r = good;
  kvtest::wr_f32(&r[L::vector_scales + 0], 0x1p110f);
  for (int d = 0; d < 128; ++d) r[L::key_scale + d] = 0x7e;
  expect_corrupt<C>(r, true);
}

TEST_CASE("bad_input: corrupt fp16_scales records") {
  using C = P::k4v2_g128<128, fp16_scales>;
  using L = C::layout;
  const tile t = kvtest::outlier_key_tile(128, 128, 12);
  const auto good = encode_ok<C>(t, t);
  struct field { std::size_t off; bool key; };
  const field fields[] = {{L::key_scale + 2 * 5, true},          {L::key_token_scale + 2 * 127, true},
                          {L::value_channel_scale + 2 * 1, false}, {L::value_scale + 2 * 33, false},
                          {L::key_zero + 2 * 7, true},            {L::value_zero + 2 * 8, false}};
  for (auto f : fields) {
    const bool is_zero = f.off >= L::key_zero && f.off < L::key_token_scale ? true : f.off >= L::value_zero;
    for (std::uint16_t bad : {std::uint16_t{0x7e00}, std::uint16_t{0x7c00}, std::uint16_t{0xfc00}, std::uint16_t{0x8001},
                              std::uint16_t{0xbc00}}) {
      // Zero points may be negative: only Inf / NaN are corrupt there.
      if (is_zero && (bad == 0x8001 || bad == 0xbc00)) continue;
      CAPTURE(f.off);
      CAPTURE(bad);
      auto r = good;
      kvtest::wr_u16(&r[f.off], bad);
      expect_corrupt<C>(r, f.key);
    }
  }
}

// Every record encode produces decodes to finite values, whatever the input:
// wide dynamic ranges, fp16 extremes, sparse spikes, NaN/Inf sprinkled in.
TEST_CASE_TEMPLATE("bad_input: any record encode produced decodes finite", Codec, BAD_INPUT_CODECS) {
  constexpr int D = Codec::D, G = Codec::G;
  kvtest::rng r(13);
  const double max_log2 = std::is_same_v<typename Codec::packer, fp16_scales> ? 24.0 : 47.0;
  for (int trial = 0; trial < 12; ++trial) {
    tile k(G, D), v(G, D);
    const double lo = r.uniform(-130, 0), hi = r.uniform(lo, max_log2);
    for (std::size_t i = 0; i < k.v.size(); ++i) {
      const double mag = std::exp2(r.uniform(lo, hi));
      k.v[i] = static_cast<float>((r.uniform() < 0.5 ? -1 : 1) * mag);
      v.v[i] = static_cast<float>(r.normal() * mag);
      if (trial % 3 == 0 && r.uniform() < 0.01) k.v[i] = r.uniform() < 0.5 ? kNaN : -kInf;
      if (trial % 4 == 1 && r.uniform() < 0.02) v.v[i] = 0.0f;
    }
    auto rec = kvtest::make_record<Codec>();
    const status s = Codec::encode(k.data(), D, v.data(), D, rec.data());
    CAPTURE(trial);
    REQUIRE(kvtile::ok(s));
    check_decodes_finite<Codec>(rec);
  }
}

// Records that are not from encode: random codes and fields with valid vector
// scales. Either validate rejects it (corrupt_record, nothing written) or
// decode is finite: decode never produces Inf/NaN from any accepted record.
TEST_CASE("bad_input: random records are rejected or decode finite") {
  using C = P::k4v2_g128<128>;
  using F = P::k2v2_g128<64, fp16_scales>;
  kvtest::rng r(14);
  long accepted = 0, rejected = 0;
  for (int trial = 0; trial < 60; ++trial) {
    auto rec = kvtest::make_record<C>();
    for (auto& b : rec) b = static_cast<std::uint8_t>(r.next());
    // Mostly-plausible fields: E4M3 codes below NaN, fp16 zeros finite, power-of-two vector scales.
    for (std::size_t i = C::layout::key_scale; i < C::layout::key_zero; ++i) rec[i] &= (trial % 5 == 0) ? 0xff : 0x7e;
    for (std::size_t i = C::layout::key_zero; i < C::layout::key_codes; i += 2)
      if ((rec[i + 1] & 0x7c) == 0x7c && trial % 7 != 0) rec[i + 1] &= 0xbb;
    for (int f = 0; f < 4; ++f) kvtest::wr_f32(&rec[4 * f], std::ldexp(1.0f, r.below(250) - 125));
    if (C::validate(rec.data()) == status::success) {
      ++accepted;
      check_decodes_finite<C>(rec);
    } else {
      ++rejected;
      tile k(128, 128), v(128, 128);
      CHECK(C::decode(rec.data(), k.data(), 128, v.data(), 128) == status::corrupt_record);
      CHECK(kvtest::sq_norm(k) == 0.0);
      CHECK(kvtest::sq_norm(v) == 0.0);
    }
  }
  for (int trial = 0; trial < 40; ++trial) {
    auto rec = kvtest::make_record<F>();
    for (auto& b : rec) b = static_cast<std::uint8_t>(r.next());
    if (trial % 4 != 0)  // make all fp16 fields plausible: clear sign/Inf/NaN-ness of scales
      for (std::size_t i = F::layout::key_scale; i < F::layout::value_codes; i += 2) rec[i + 1] &= 0x3b;
    if (trial % 4 != 0)
      for (std::size_t i = F::layout::value_channel_scale; i < F::layout::bytes; i += 2) rec[i + 1] &= 0x3b;
    if (F::validate(rec.data()) == status::success) {
      ++accepted;
      check_decodes_finite<F>(rec);
    } else {
      ++rejected;
    }
  }
  MESSAGE("random records: " << accepted << " accepted (decoded finite), " << rejected << " rejected");
  CHECK(accepted > 0);
  CHECK(rejected > 0);
}
