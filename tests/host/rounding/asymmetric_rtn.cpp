// rounding/asymmetric_rtn.hpp and the codec's storage-aware rounding
// (method.md sections 3 and 5).
//
// Error bound used throughout: for a row y of the normalized tile Y = X / s^
// with stored zero z^ and stored step a^, every element satisfies
//   |fma(code, a^, z^) - y| <= a^/2 + eps,  eps = 2^-21 * max(|y|, |y^|)
// (two ulp of the values involved: (y - z^)/a^ rounds twice before rint, and
// the reconstruction fma rounds once).
#include "test_util.hpp"

using kvtile::asymmetric_rtn;

namespace {

double eps_of(double y, double yh) { return std::ldexp(1.0, -21) * std::max(std::fabs(y), std::fabs(yh)); }

template <int B>
void check_rounder_bound() {
  using Q = asymmetric_rtn<B>;
  kvtest::rng r(B);
  long viol = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const double sc = std::exp(r.uniform(-20, 20)), off = r.normal() * sc * (trial % 3);
    std::vector<float> y(128);
    for (auto& v : y) v = static_cast<float>(off + sc * r.normal());
    const float lo = *std::min_element(y.begin(), y.end()), hi = *std::max_element(y.begin(), y.end());
    float a = Q::required_scale(hi, lo);
    while (!Q::covers(hi, a, lo)) a = std::nextafter(a, 1e30f);
    for (float v : y) {
      const std::uint32_t c = Q::quantize(v, a, lo);
      if (c > Q::qmax) ++viol;
      const float vh = Q::dequantize(c, a, lo);
      if (!(std::fabs(static_cast<double>(vh) - v) <= a / 2.0 + eps_of(v, vh))) ++viol;
    }
    CHECK(Q::quantize(lo, a, lo) == 0u);
    CHECK(Q::quantize(hi, a, lo) == Q::qmax);
  }
  CHECK(viol == 0);
}

}  // namespace

TEST_CASE("rtn: per-element error <= step/2 for 2, 4, 8 bits") {
  check_rounder_bound<2>();
  check_rounder_bound<4>();
  check_rounder_bound<8>();
  CHECK(asymmetric_rtn<2>::qmax == 3u);
  CHECK(asymmetric_rtn<4>::qmax == 15u);
  CHECK(asymmetric_rtn<8>::qmax == 255u);
}

TEST_CASE("rtn: round half to even, clamping, zero step") {
  using Q = asymmetric_rtn<4>;
  CHECK(Q::quantize(0.5f, 1.0f, 0.0f) == 0u);
  CHECK(Q::quantize(1.5f, 1.0f, 0.0f) == 2u);
  CHECK(Q::quantize(2.5f, 1.0f, 0.0f) == 2u);
  CHECK(Q::quantize(3.5f, 1.0f, 0.0f) == 4u);
  CHECK(Q::quantize(-7.0f, 1.0f, 0.0f) == 0u);    // below the grid: 0
  CHECK(Q::quantize(100.0f, 1.0f, 0.0f) == 15u);  // above: qmax
  // A zero (or negative, or NaN) step is a constant row stored by its zero point.
  CHECK(Q::quantize(3.0f, 0.0f, 3.0f) == 0u);
  CHECK(Q::quantize(3.0f, -1.0f, 3.0f) == 0u);
  CHECK(Q::quantize(3.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f) == 0u);
  CHECK(Q::dequantize(0, 0.0f, 3.0f) == 3.0f);
  // dequantize is one fma: code * a + z rounded once.
  CHECK(Q::dequantize(15, 0.1f, 1e-9f) == std::fma(15.0f, 0.1f, 1e-9f));
}

TEST_CASE("rtn: clip ratio shrinks the range around its centre, values outside saturate") {
  using Q = asymmetric_rtn<2, 500>;  // r = 0.5
  float lo, hi;
  Q::clipped_range(0.0f, 8.0f, lo, hi);
  CHECK(lo == 2.0f);
  CHECK(hi == 6.0f);
  Q::clipped_range(-3.0f, 1.0f, lo, hi);
  CHECK(lo == -2.0f);
  CHECK(hi == 0.0f);
  // Unclipped policy leaves the range alone.
  asymmetric_rtn<2>::clipped_range(-3.0f, 1.0f, lo, hi);
  CHECK(lo == -3.0f);
  CHECK(hi == 1.0f);
  // Saturation: step for [2, 6] at 2 bits is 4/3.
  const float a = Q::required_scale(6.0f, 2.0f);
  CHECK(Q::quantize(0.0f, a, 2.0f) == 0u);
  CHECK(Q::quantize(1.9f, a, 2.0f) == 0u);
  CHECK(Q::quantize(8.0f, a, 2.0f) == 3u);
  CHECK(Q::quantize(6.5f, a, 2.0f) == 3u);
}

namespace {

using cover_k4v2 = kvtile::presets::kvarn<128, 128, 4, 2, kvtile::fp8_scales, kvtile::rtn_cover>;
using cover_k2v2_fp16 = kvtile::presets::kvarn<64, 128, 2, 2, kvtile::fp16_scales, kvtile::rtn_cover>;
using nearest_k2v2 = kvtile::presets::kvarn<128, 128, 2, 2, kvtile::fp8_scales, kvtile::rtn<kvtile::row_rounding::nearest>>;

// Checks the storage-aware rounding of one encoded record against the input,
// reading every stored field through record_view. Returns violations.
template <class Codec>
long check_record_rtn(const kvtest::tile& k, const kvtest::tile& v, const std::vector<std::uint8_t>& rec,
                      bool check_clip = false, long* clipped = nullptr) {
  constexpr int D = Codec::D, G = Codec::G;
  using KR = typename Codec::key_rounder;
  using VR = typename Codec::value_rounder;
  const typename Codec::view view(rec.data());
  const kvtest::tile kr = kvtest::rotated<typename Codec::rotation, D>(k);
  const kvtest::tile vr = kvtest::rotated<typename Codec::rotation, D>(v);
  long viol = 0;
  // One row: y (normalized), stored step a and zero z, codes via getter.
  double vs = 1;
  auto row = [&](auto rounder, const std::vector<float>& y, float a, float z, auto code_of) {
    using Q = decltype(rounder);
    const float lo0 = *std::min_element(y.begin(), y.end()), hi0 = *std::max_element(y.begin(), y.end());
    float lo, hi;
    Q::clipped_range(lo0, hi0, lo, hi);
    const bool covering = Q::policy == kvtile::row_rounding::cover;
    const kvtile::half_t zh(z);
    if (zh.to_float() != z) ++viol;  // z is an fp16 value
    if (covering) {
      // Storage-aware: zero rounded down (z <= lo), grid top reaches hi.
      if (!(z <= lo)) ++viol;
      if (!(Q::dequantize(Q::qmax, a, z) >= hi)) ++viol;
      // z is the largest fp16 <= lo: the next fp16 up is above lo.
      std::uint16_t b = zh.bits();
      const std::uint16_t up = (b & 0x8000u) ? (b == 0x8000u ? 0x0001u : static_cast<std::uint16_t>(b - 1))
                                             : static_cast<std::uint16_t>(b + 1);
      if (!(kvtile::half_t::from_bits(up).to_float() > lo) && b != 0x7bffu) ++viol;
    } else {
      // Centred grid: z within one fp16 ulp of mid - qmax a / 2 (double).
      const double zc = (static_cast<double>(lo) + hi) / 2 - Q::qmax * static_cast<double>(a) / 2;
      const double ulp = std::max(std::ldexp(std::fabs(zc), -10), std::ldexp(1.0, -24));
      if (!(std::fabs(z - zc) <= ulp)) ++viol;
      // The step is a stored neighbour of (hi - lo) / qmax.
      const double want = (static_cast<double>(hi) - lo) / Q::qmax;
      if (!(a <= kvtest::next_step_bound<Codec>(want, vs) * (1 + 1e-6) &&
            kvtest::next_step_bound<Codec>(a, vs) >= want * (1 - 1e-6)))
        ++viol;
    }
    for (std::size_t i = 0; i < y.size(); ++i) {
      const std::uint32_t c = code_of(static_cast<int>(i));
      if (c > Q::qmax) ++viol;
      const float yh = Q::dequantize(c, a, z);
      const double half_step = covering ? a / 2.0 : kvtest::next_step_bound<Codec>(a, vs) / 2.0 +
                                                       std::fabs(z) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
      if (y[i] < lo || y[i] > hi) {  // clipped away: saturates
        if (clipped) ++*clipped;
        if (check_clip && c != (y[i] < lo ? 0u : Q::qmax)) ++viol;
        const double beyond = y[i] < lo ? static_cast<double>(lo) - y[i] : static_cast<double>(y[i]) - hi;
        if (!(std::fabs(static_cast<double>(yh) - y[i]) <= half_step + beyond + eps_of(y[i], yh))) ++viol;
        continue;
      }
      if (!(std::fabs(static_cast<double>(yh) - y[i]) <= half_step + eps_of(y[i], yh))) ++viol;
    }
  };
  std::vector<float> y(G);
  if constexpr (std::is_same_v<typename Codec::packer, kvtile::fp8_scales>) vs = view.vector_scale(kvtile::vector_field::key_scale);
  for (int d = 0; d < D; ++d) {  // key rows: channels over tokens, Y = X / t^
    for (int g = 0; g < G; ++g) y[g] = kr.at(g, d) / view.key_token_scale(g);
    row(KR{}, y, view.key_scale(d), view.key_zero(d), [&](int g) { return view.key_code(d, g); });
  }
  std::vector<float> yv(D);
  if constexpr (std::is_same_v<typename Codec::packer, kvtile::fp8_scales>) vs = view.vector_scale(kvtile::vector_field::value_scale);
  for (int g = 0; g < G; ++g) {  // value rows: tokens over channels, Y = X / c^
    for (int d = 0; d < D; ++d) yv[d] = vr.at(g, d) / view.value_channel_scale(d);
    row(VR{}, yv, view.value_scale(g), view.value_zero(g), [&](int d) { return view.value_code(g, d); });
  }
  return viol;
}

}  // namespace

TEST_CASE_TEMPLATE("rtn: stored rows satisfy the storage-aware bound (via record_view)", Codec,
                   kvtile::presets::k4v2_g128<128>, kvtile::presets::k2v2_g128<64>,
                   kvtile::presets::k8v8_g128<256>, kvtile::presets::k4v4_g64<128, kvtile::fp16_scales>,
                   kvtile::presets::kivi<128>, kvtile::presets::rotate_rtn<64, 128, 2, 2, kvtile::fp16_scales>,
                   cover_k4v2, cover_k2v2_fp16, nearest_k2v2) {
  for (std::uint64_t seed : {1u, 2u}) {
    const auto k = seed == 1 ? kvtest::outlier_key_tile(Codec::G, Codec::D, 31) : kvtest::gaussian_tile(Codec::G, Codec::D, 32, 1e-3);
    const auto v = kvtest::gaussian_tile(Codec::G, Codec::D, 33 + seed, seed == 1 ? 1.0 : 300.0);
    auto rec = kvtest::make_record<Codec>();
    REQUIRE(Codec::encode(k.data(), Codec::D, v.data(), Codec::D, rec.data()) == kvtile::status::success);
    CHECK(check_record_rtn<Codec>(k, v, rec) == 0);
  }
}

TEST_CASE_TEMPLATE("rtn: clip ratio in the codec saturates values outside the clipped range", C,
                   kvtile::presets::kvarn<128, 128, 2, 2, kvtile::fp8_scales, kvtile::rtn_clip<700>>,
                   kvtile::presets::kvarn<128, 128, 2, 2, kvtile::fp8_scales,
                                          kvtile::rtn_clip<700, kvtile::row_rounding::cover>>) {
  const auto k = kvtest::outlier_key_tile(128, 128, 5);
  const auto v = kvtest::gaussian_tile(128, 128, 6);
  auto rec = kvtest::make_record<C>();
  REQUIRE(C::encode(k.data(), 128, v.data(), 128, rec.data()) == kvtile::status::success);
  long clipped = 0;
  CHECK(check_record_rtn<C>(k, v, rec, true, &clipped) == 0);
  // Elements are actually clipped (the test is not vacuous): with r = 0.7 at
  // least the min and max of every row (2 x 256 rows) fall outside.
  CHECK(clipped >= 512);
  MESSAGE("clip 0.7: " << clipped << " of " << 2 * 128 * 128 << " elements saturated");
  kvtest::tile kh(128, 128), vh(128, 128);
  REQUIRE(C::decode(rec.data(), kh.data(), 128, vh.data(), 128) == kvtile::status::success);
  CHECK(kvtest::all_finite(kh));
  CHECK(kvtest::all_finite(vh));
}

TEST_CASE("rtn: constant rows are encoded exactly with step 0") {
  // kivi (no rotation, no normalization: the stored column scales are exactly
  // 1) keeps rows as given: a value token with one fp16 value on all channels
  // and a key channel with one value on all tokens are constant rows.
  using C = kvtile::presets::kivi<128>;
  auto k = kvtest::gaussian_tile(128, 128, 8);
  auto v = kvtest::gaussian_tile(128, 128, 9);
  for (int g = 0; g < 128; ++g) k.at(g, 5) = -2.375f;  // key channel 5 constant
  for (int d = 0; d < 128; ++d) v.at(7, d) = 0.1875f;  // value token 7 constant
  for (int d = 0; d < 128; ++d) v.at(8, d) = 0.0f;     // value token 8 zero
  auto rec = kvtest::make_record<C>();
  REQUIRE(C::encode(k.data(), 128, v.data(), 128, rec.data()) == kvtile::status::success);
  const C::view view(rec.data());
  for (int g = 0; g < 128; ++g) CHECK(view.key_token_scale(g) == 1.0f);
  CHECK(view.key_scale(5) == 0.0f);
  CHECK(view.value_scale(7) == 0.0f);
  CHECK(view.value_scale(8) == 0.0f);
  kvtest::tile kh(128, 128), vh(128, 128);
  REQUIRE(C::decode(rec.data(), kh.data(), 128, vh.data(), 128) == kvtile::status::success);
  for (int g = 0; g < 128; ++g) CHECK(kh.at(g, 5) == -2.375f);
  for (int d = 0; d < 128; ++d) {
    CHECK(vh.at(7, d) == 0.1875f);
    CHECK(vh.at(8, d) == 0.0f);
  }
  CHECK(check_record_rtn<C>(k, v, rec) == 0);
}

TEST_CASE("rtn: row rounding policies choose the documented step and zero (E4M3 grid, vector scale 1)") {
  using F = kvtile::detail::e4m3_vector;
  using kvtile::row_rounding;
  auto fit = [](float lo, float hi, std::uint32_t qmax, row_rounding p, float& a, float& z, float vs = 1.0f) {
    std::uint8_t code = 0;
    std::uint16_t zb = 0;
    REQUIRE(kvtile::detail::fit_row<F>(lo, hi, vs, qmax, p, code, zb));
    a = F::decode(code, vs);
    z = kvtile::half_t::to_float_bits(zb);
  };
  float a, z;
  // 2 bits, [0, 3.18]: want 1.06 between the E4M3 neighbours 1.0 and 1.125.
  fit(0.0f, 3.18f, 3, row_rounding::cover, a, z);
  CHECK(a == 1.125f);  // rounded up, grid from the fp16 zero <= lo
  CHECK(z == 0.0f);
  fit(0.0f, 3.18f, 3, row_rounding::nearest, a, z);
  CHECK(a == 1.0f);                                   // 1.06 is nearer 1.0
  CHECK(z == kvtile::half_t(1.59f - 1.5f).to_float());  // centred: mid - 3 a / 2
  fit(0.0f, 3.18f, 3, row_rounding::min_max_error, a, z);
  CHECK(a == 1.0f);  // max error 0.5 (interior) against 0.5625 for 1.125
  // 4 bits, want 1.1 in (1.0, 1.125): the down step leaves 0.75 at the ends, the
  // up step's max error is 0.5625: min_max_error rounds up; nearest rounds down.
  fit(0.0f, 16.5f, 15, row_rounding::min_max_error, a, z);
  CHECK(a == 1.125f);
  CHECK(z == kvtile::half_t(8.25f - 8.4375f).to_float());
  fit(0.0f, 16.5f, 15, row_rounding::nearest, a, z);
  CHECK(a == 1.125f);  // 1.1 is nearer 1.125
  // want 1.05: the down step's end error 0.375 < 0.5, so its max error 0.5 wins.
  fit(0.0f, 15.75f, 15, row_rounding::min_max_error, a, z);
  CHECK(a == 1.0f);
  // A constant row: step 0, zero = the nearest fp16 (exact when representable).
  fit(2.5f, 2.5f, 15, row_rounding::min_max_error, a, z);
  CHECK(a == 0.0f);
  CHECK(z == 2.5f);
  // Zeros saturate to the finite fp16 range instead of overflowing.
  fit(-65280.0f, 65280.0f, 3, row_rounding::min_max_error, a, z, F::vector_scale(130560.0f / 3));
  CHECK(std::isfinite(z));
  CHECK(std::fabs(z) <= 65504.0f);
}
