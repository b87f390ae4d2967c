// Host tests of kvtile::bfloat16_t against an independent reference: exact
// values from std::ldexp in double, nearest-even rounding by search in the table
// of all finite bfloat16 values. Conversion is CUDA's __float2bfloat16_rn
// (overflow to Inf, NaN -> 0x7fff); decode is exact and keeps NaN payloads like
// __bfloat162float. Identity with CUDA itself is tests/device/numeric.cu.
#include <doctest/doctest.h>

#include <kvtile/numeric/bfloat16.hpp>
#include <kvtile/numeric/numeric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using kvtile::bfloat16_t;

std::uint32_t fbits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float ffrom(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

constexpr unsigned kInfCode = 0x7f80;
constexpr std::uint16_t kNaNCode = 0x7fff;

// Exact value of a bfloat16 code: bias 127, 7 mantissa bits, subnormals m * 2^-133.
double bf16_value(unsigned c) {
  const int e = static_cast<int>((c >> 7) & 0xff);
  const int m = static_cast<int>(c & 0x7f);
  double v;
  if (e == 0xff) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -133);
  } else {
    v = std::ldexp(static_cast<double>(128 + m), e - 134);
  }
  return (c & 0x8000) ? -v : v;
}

// Codes 0x0000..0x7f80 in value order, 0x7f80 standing for 2^128: a tie at the
// top goes to the even code 0x7f80 = Inf.
const std::vector<double>& table() {
  static const std::vector<double> t = [] {
    std::vector<double> v(kInfCode + 1u);
    for (unsigned c = 0; c < kInfCode; ++c) v[c] = bf16_value(c);
    v[kInfCode] = std::ldexp(1.0, 128);
    return v;
  }();
  return t;
}

std::uint16_t reference(float f) {
  if (std::isnan(f)) return kNaNCode;
  const unsigned sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isinf(f)) return static_cast<std::uint16_t>(sign | kInfCode);
  const double a = std::fabs(static_cast<double>(f));
  const auto& t = table();
  const std::size_t lo = static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  if (t[lo] == a) return static_cast<std::uint16_t>(sign | lo);
  const std::size_t hi = lo + 1;
  const double mid = (t[lo] + t[hi]) / 2;
  const std::size_t near = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint16_t>(sign | near);
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

TEST_CASE("bfloat16: every code decodes to its exact value") {
  long bad = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    const float f = bfloat16_t::from_bits(static_cast<std::uint16_t>(c)).to_float();
    const double want = bf16_value(c);
    // NaN codes keep sign and payload (the code shifted left by 16), like __bfloat162float.
    const bool ok = std::isnan(want) ? (std::isnan(f) && fbits(f) == (c << 16))
                                     : static_cast<double>(f) == want && std::signbit(f) == std::signbit(want);
    if (!ok && bad++ == 0) FAIL_CHECK("code " << hex(c) << " decodes to " << f << " (" << hex(fbits(f)) << "), want " << want);
  }
  CHECK(bad == 0);
  CHECK(bfloat16_t::from_bits(0x3f80).to_float() == 1.0f);
  CHECK(bfloat16_t::from_bits(0x0001).to_float() == std::ldexp(1.0f, -133));
  CHECK(bfloat16_t::from_bits(0x7f7f).to_float() == std::ldexp(255.0f, 120));
  CHECK(std::isinf(bfloat16_t::from_bits(0xff80).to_float()));
}

TEST_CASE("bfloat16: every code round-trips through float") {
  long bad = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    const float f = bfloat16_t::from_bits(static_cast<std::uint16_t>(c)).to_float();
    const bool nan = (c & 0x7f80) == 0x7f80 && (c & 0x7f) != 0;
    if (bfloat16_t(f).bits() != (nan ? kNaNCode : c))
      if (bad++ == 0) FAIL_CHECK("code " << hex(c) << " -> " << hex(bfloat16_t(f).bits()));
  }
  CHECK(bad == 0);
}

TEST_CASE("bfloat16: round to nearest even at every rounding boundary") {
  const auto& t = table();
  long bad = 0, checked = 0;
  for (unsigned lo = 0; lo < kInfCode; ++lo) {
    const unsigned hi = lo + 1;
    const double mid = (t[lo] + t[hi]) / 2;
    const float fm = static_cast<float>(mid);
    REQUIRE(static_cast<double>(fm) == mid);
    const unsigned even = (lo % 2 == 0) ? lo : hi;
    for (int sgn = 0; sgn < 2; ++sgn) {
      const unsigned s = sgn ? 0x8000u : 0u;
      const float m = sgn ? -fm : fm;
      const float toward0 = sgn ? -0.0f : 0.0f;
      const float away = sgn ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      struct Case {
        float f;
        unsigned want;
      };
      std::vector<Case> cases = {{m, even}, {static_cast<float>(sgn ? -t[lo] : t[lo]), lo}};
      if (hi < kInfCode) cases.push_back({static_cast<float>(sgn ? -t[hi] : t[hi]), hi});
      float below = m, above = m;
      for (int k = 0; k < 4; ++k) {
        below = std::nextafter(below, toward0);
        above = std::nextafter(above, away);
        cases.push_back({below, lo});
        cases.push_back({above, hi});
      }
      for (const Case& c : cases) {
        ++checked;
        const unsigned want = s | c.want;
        const unsigned got = bfloat16_t(c.f).bits();
        if (got != want || reference(c.f) != want)
          if (bad++ == 0) FAIL_CHECK("f=" << c.f << " (" << hex(fbits(c.f)) << "): got " << hex(got) << ", want " << hex(want));
      }
    }
  }
  CHECK(bad == 0);
  CHECK(checked == 2 * (32640 * 11 - 1));
}

TEST_CASE("bfloat16: NaN, Inf, overflow, zeros and fp32 subnormals") {
  const float inf = std::numeric_limits<float>::infinity();
  const float top_mid = ffrom(0x7f7f8000u);  // halfway from the largest bfloat16 to 2^128
  CHECK(bfloat16_t(top_mid).bits() == 0x7f80);
  CHECK(bfloat16_t(-top_mid).bits() == 0xff80);
  CHECK(bfloat16_t(std::nextafter(top_mid, 0.0f)).bits() == 0x7f7f);
  CHECK(bfloat16_t(std::numeric_limits<float>::max()).bits() == 0x7f80);
  CHECK(bfloat16_t(inf).bits() == 0x7f80);
  CHECK(bfloat16_t(-inf).bits() == 0xff80);
  CHECK(bfloat16_t(0.0f).bits() == 0x0000);
  CHECK(bfloat16_t(-0.0f).bits() == 0x8000);
  CHECK(bfloat16_t(1.0f).bits() == 0x3f80);
  CHECK(bfloat16_t(ffrom(0x3f808000u)).bits() == 0x3f80);  // tie, even stays
  CHECK(bfloat16_t(ffrom(0x3f818000u)).bits() == 0x3f82);  // tie, odd rounds up
  CHECK(bfloat16_t(ffrom(0x3f808001u)).bits() == 0x3f81);
  // Every NaN -> 0x7fff; every fp32 subnormal rounds to a bfloat16 subnormal (or
  // the smallest normal 0x0080) in units of 2^-133, ties to even.
  long bad_nan = 0, bad_sub = 0;
  for (std::uint32_t m = 1; m < (1u << 23); ++m) {
    for (std::uint32_t s = 0; s < 2; ++s) {
      if (bfloat16_t(ffrom((s << 31) | 0x7f800000u | m)).bits() != kNaNCode) ++bad_nan;
      const double units = std::nearbyint(static_cast<double>(m) / 65536.0);  // exact; ties to even
      const unsigned want = (s << 15) | static_cast<unsigned>(units);
      if (bfloat16_t(ffrom((s << 31) | m)).bits() != want) ++bad_sub;
    }
  }
  CHECK(bad_nan == 0);
  CHECK(bad_sub == 0);
  CHECK(bfloat16_t(-std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(bfloat16_t(std::numeric_limits<float>::signaling_NaN()).bits() == kNaNCode);
}

TEST_CASE("bfloat16: random and strided fp32 sweeps match the reference") {
  long bad = 0;
  std::string first;
  const auto check = [&](float f) {
    const unsigned got = bfloat16_t(f).bits(), want = reference(f);
    if (got != want && bad++ == 0) first = "f=" + hex(fbits(f)) + ": kvtile " + hex(got) + ", reference " + hex(want);
  };
  std::uint64_t state = 0x6b76746c62663136ull;
  for (int i = 0; i < 2000000; ++i) check(ffrom(static_cast<std::uint32_t>(splitmix64(state))));
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xbfff};
  for (int i = 0; i < 500000; ++i) {
    const std::uint64_t r = splitmix64(state);
    check(ffrom((static_cast<std::uint32_t>(r) & 0xffff0000u) | lows[(r >> 40) & 7u]));
  }
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) check(ffrom(static_cast<std::uint32_t>(u)));
  INFO(first);
  CHECK(bad == 0);
}

TEST_CASE("bfloat16_t: storage and API") {
  static_assert(sizeof(bfloat16_t) == 2 && alignof(bfloat16_t) == 2, "layout");
  static_assert(bfloat16_t::from_bits(0x3f80).bits() == 0x3f80, "from_bits and bits are constexpr");
  const bfloat16_t b(1.5f);
  CHECK(b.bits() == 0x3fc0);
  CHECK(b.storage == 0x3fc0);
  CHECK(static_cast<float>(b) == 1.5f);
  CHECK(bfloat16_t::from_float_bits(-2.0f) == 0xc000);
  CHECK(bfloat16_t(3.14159265f).bits() == 0x4049);
  // The umbrella header brings all three types.
  CHECK(kvtile::half_t(1.0f).bits() == 0x3c00);
  CHECK(kvtile::float_e4m3_t(1.0f).bits() == 0x38);
}
