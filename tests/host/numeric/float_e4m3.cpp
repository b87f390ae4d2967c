// Host tests of kvtile::float_e4m3_t (OCP FP8 E4M3 "fn": no Inf, NaN = 0x7f/0xff,
// max 448) against an independent reference: exact values from std::ldexp in
// double, nearest / directed rounding by search in the table of all E4M3 values.
// Conversion is CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3):
// nearest even, saturating to +-448 (Inf too), NaN -> 0x7f. Identity with CUDA
// itself (all 2^32 floats) is tests/device/numeric.cu.
#include <doctest/doctest.h>

#include <kvtile/numeric/float_e4m3.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using kvtile::e4m3_round_down;
using kvtile::e4m3_round_up;
using kvtile::float_e4m3_t;

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

constexpr unsigned kMaxCode = 0x7e;          // 448
constexpr std::uint8_t kNaNCode = 0x7f;      // CUDA's NaN result, sign dropped
constexpr std::uint32_t kFloatNaN = 0x7fffffffu;  // CUDA's fp8 -> half -> float NaN

// Exact value of an E4M3 code from the format's definition: bias 7, 3 mantissa
// bits, subnormals m * 2^-9, S.1111.111 NaN, no infinities.
double e4m3_value(unsigned c) {
  const int e = static_cast<int>((c >> 3) & 0xf);
  const int m = static_cast<int>(c & 7);
  double v;
  if (e == 15 && m == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -9);
  } else {
    v = std::ldexp(static_cast<double>(8 + m), e - 10);
  }
  return (c & 0x80) ? -v : v;
}

const std::vector<double>& table() {  // codes 0x00..0x7e, increasing
  static const std::vector<double> t = [] {
    std::vector<double> v(kMaxCode + 1);
    for (unsigned c = 0; c <= kMaxCode; ++c) v[c] = e4m3_value(c);
    return v;
  }();
  return t;
}

struct Ref {
  unsigned rn, down, up;
};

Ref reference(float f) {
  if (std::isnan(f)) return {kNaNCode, kNaNCode, kNaNCode};
  const unsigned sign = std::signbit(f) ? 0x80u : 0u;
  const double a = std::fabs(static_cast<double>(f));  // +Inf is fine below
  const auto& t = table();
  // lo: largest code with value <= a; hi: smallest code with value >= a; both
  // saturate at 0x7e.
  const unsigned lo = static_cast<unsigned>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1u;
  const unsigned hi = a > t[kMaxCode] ? kMaxCode : static_cast<unsigned>(std::lower_bound(t.begin(), t.end(), a) - t.begin());
  unsigned near;
  if (a >= 448.0) {
    near = kMaxCode;  // saturation
  } else if (lo == hi) {
    near = lo;
  } else {
    const double mid = (t[lo] + t[hi]) / 2;
    near = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
  }
  // Magnitude toward 0 is lo, away from 0 is hi: down = lo for +, hi for -.
  return sign ? Ref{sign | near, sign | hi, sign | lo} : Ref{near, lo, hi};
}

struct Mismatches {
  long count = 0;
  std::string first;
  void check(float f) {
    const Ref r = reference(f);
    const unsigned rn = float_e4m3_t(f).bits();
    const unsigned down = e4m3_round_down(f).bits();
    const unsigned up = e4m3_round_up(f).bits();
    if (rn != r.rn || down != r.down || up != r.up) {
      if (count == 0) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "f=%a (0x%08x): rn/down/up kvtile 0x%02x/0x%02x/0x%02x, reference 0x%02x/0x%02x/0x%02x",
                      static_cast<double>(f), fbits(f), rn, down, up, r.rn, r.down, r.up);
        first = buf;
      }
      ++count;
    }
  }
};

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

TEST_CASE("e4m3: every code decodes to its exact value") {
  long bad = 0;
  for (unsigned c = 0; c < 256u; ++c) {
    const float f = float_e4m3_t::from_bits(static_cast<std::uint8_t>(c)).to_float();
    const double want = e4m3_value(c);
    const bool ok = std::isnan(want) ? fbits(f) == kFloatNaN
                                     : static_cast<double>(f) == want && std::signbit(f) == std::signbit(want);
    if (!ok && bad++ == 0) FAIL_CHECK("code " << hex(c) << " decodes to " << f << " (" << hex(fbits(f)) << "), want " << want);
  }
  CHECK(bad == 0);
  CHECK(std::isnan(float_e4m3_t::from_bits(0x7f).to_float()));
  CHECK(std::isnan(float_e4m3_t::from_bits(0xff).to_float()));
  CHECK(float_e4m3_t::from_bits(0x7e).to_float() == 448.0f);
  CHECK(float_e4m3_t::from_bits(0x7e).to_float() == float_e4m3_t::max_finite);
  CHECK(float_e4m3_t::from_bits(0xfe).to_float() == -448.0f);
  CHECK(float_e4m3_t::from_bits(0x78).to_float() == 256.0f);  // e = 15 with m < 7 is finite
  CHECK(float_e4m3_t::from_bits(0x38).to_float() == 1.0f);
  CHECK(float_e4m3_t::from_bits(0x08).to_float() == std::ldexp(1.0f, -6));
  CHECK(float_e4m3_t::from_bits(0x07).to_float() == std::ldexp(7.0f, -9));
  CHECK(float_e4m3_t::from_bits(0x01).to_float() == std::ldexp(1.0f, -9));
  CHECK(fbits(float_e4m3_t::from_bits(0x80).to_float()) == 0x80000000u);
  CHECK(static_cast<float>(float_e4m3_t::from_bits(0xb8)) == -1.0f);
}

TEST_CASE("e4m3: every code round-trips through float") {
  long bad = 0;
  for (unsigned c = 0; c < 256u; ++c) {
    const float f = float_e4m3_t::from_bits(static_cast<std::uint8_t>(c)).to_float();
    const unsigned want = (c & 0x7f) == 0x7f ? kNaNCode : c;  // -0 stays -0
    if (float_e4m3_t(f).bits() != want || e4m3_round_down(f).bits() != want || e4m3_round_up(f).bits() != want)
      if (bad++ == 0) FAIL_CHECK("code " << hex(c) << " -> " << f << " -> " << hex(float_e4m3_t(f).bits()));
  }
  CHECK(bad == 0);
}

TEST_CASE("e4m3: round to nearest even at every rounding boundary") {
  const auto& t = table();
  long bad = 0, checked = 0;
  for (unsigned lo = 0; lo < kMaxCode; ++lo) {
    const unsigned hi = lo + 1;
    const double mid = (t[lo] + t[hi]) / 2;
    const float fm = static_cast<float>(mid);
    REQUIRE(static_cast<double>(fm) == mid);
    const unsigned even = (lo % 2 == 0) ? lo : hi;
    for (int sgn = 0; sgn < 2; ++sgn) {
      const unsigned s = sgn ? 0x80u : 0u;
      const float m = sgn ? -fm : fm;
      const float toward0 = sgn ? -0.0f : 0.0f;
      const float away = sgn ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      struct Case {
        float f;
        unsigned want;
      };
      std::vector<Case> cases = {{m, even},
                                 {static_cast<float>(sgn ? -t[lo] : t[lo]), lo},
                                 {static_cast<float>(sgn ? -t[hi] : t[hi]), hi}};
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
        const unsigned got = float_e4m3_t(c.f).bits();
        if (got != want || reference(c.f).rn != want)
          if (bad++ == 0) FAIL_CHECK("f=" << c.f << " (" << hex(fbits(c.f)) << "): got " << hex(got) << ", want " << hex(want));
      }
    }
  }
  CHECK(bad == 0);
  CHECK(checked == 126 * 2 * 11);
}

TEST_CASE("e4m3: saturation, NaN, zeros, subnormals and fp32 subnormals") {
  const float inf = std::numeric_limits<float>::infinity();
  // Everything >= 448 saturates to 448, Inf included (SATFINITE); below 448
  // nearest-even rounding applies as usual.
  for (float f : {448.0f, std::nextafter(448.0f, inf), 449.0f, std::nextafter(464.0f, 0.0f), 464.0f,
                  std::nextafter(464.0f, inf), 480.0f, 512.0f, 1e6f, std::numeric_limits<float>::max(), inf}) {
    CAPTURE(f);
    CHECK(float_e4m3_t(f).bits() == 0x7e);
    CHECK(float_e4m3_t(-f).bits() == 0xfe);
  }
  CHECK(float_e4m3_t(std::nextafter(448.0f, 0.0f)).bits() == 0x7e);
  CHECK(float_e4m3_t(432.0f).bits() == 0x7e);  // tie between 416 (0x7d) and 448: even 0x7e
  CHECK(float_e4m3_t(std::nextafter(432.0f, 0.0f)).bits() == 0x7d);
  CHECK(float_e4m3_t(248.0f).bits() == 0x78);  // tie between 240 (0x77) and 256: even 0x78
  CHECK(float_e4m3_t(232.0f).bits() == 0x76);  // tie between 224 (0x76) and 240: even 0x76
  // Zeros keep their sign.
  CHECK(float_e4m3_t(0.0f).bits() == 0x00);
  CHECK(float_e4m3_t(-0.0f).bits() == 0x80);
  // Subnormals: units of 2^-9; 2^-10 is the tie to even 0.
  CHECK(float_e4m3_t(std::ldexp(1.0f, -10)).bits() == 0x00);
  CHECK(float_e4m3_t(-std::ldexp(1.0f, -10)).bits() == 0x80);
  CHECK(float_e4m3_t(std::nextafter(std::ldexp(1.0f, -10), 1.0f)).bits() == 0x01);
  CHECK(float_e4m3_t(std::ldexp(1.0f, -9)).bits() == 0x01);
  CHECK(float_e4m3_t(std::ldexp(3.0f, -10)).bits() == 0x02);   // 1.5 units: tie to even 2
  CHECK(float_e4m3_t(std::ldexp(5.0f, -10)).bits() == 0x02);   // 2.5 units: tie to even 2
  CHECK(float_e4m3_t(std::ldexp(15.0f, -10)).bits() == 0x08);  // 7.5 units: tie to even 8 = 2^-6
  CHECK(float_e4m3_t(std::ldexp(1.0f, -6)).bits() == 0x08);
  CHECK(float_e4m3_t(1e-30f).bits() == 0x00);
  CHECK(float_e4m3_t(-1e-30f).bits() == 0x80);
  // Every fp32 NaN -> 0x7f (sign dropped, as CUDA); every fp32 subnormal -> a
  // zero of its sign (directed: up to 2^-9 or down to -2^-9).
  long bad_nan = 0, bad_sub = 0;
  for (std::uint32_t m = 1; m < (1u << 23); ++m) {
    for (std::uint32_t s = 0; s < 2; ++s) {
      const float n = ffrom((s << 31) | 0x7f800000u | m);
      if (float_e4m3_t(n).bits() != kNaNCode || e4m3_round_down(n).bits() != kNaNCode ||
          e4m3_round_up(n).bits() != kNaNCode)
        ++bad_nan;
      const float d = ffrom((s << 31) | m);
      if (float_e4m3_t(d).bits() != (s << 7) || e4m3_round_down(d).bits() != (s ? 0x81u : 0x00u) ||
          e4m3_round_up(d).bits() != (s ? 0x80u : 0x01u))
        ++bad_sub;
    }
  }
  CHECK(bad_nan == 0);
  CHECK(bad_sub == 0);
  CHECK(float_e4m3_t(std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(float_e4m3_t(-std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(float_e4m3_t(std::numeric_limits<float>::signaling_NaN()).bits() == kNaNCode);
}

TEST_CASE("e4m3: directed rounding at every code and its neighbours") {
  const auto& t = table();
  long bad = 0;
  for (unsigned c = 0; c <= kMaxCode; ++c) {
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float v = static_cast<float>(sgn ? -t[c] : t[c]);
      std::vector<float> fs = {v, std::nextafter(v, -std::numeric_limits<float>::infinity()),
                               std::nextafter(v, std::numeric_limits<float>::infinity())};
      if (c < kMaxCode) fs.push_back(static_cast<float>((t[c] + t[c + 1]) / 2) * (sgn ? -1.0f : 1.0f));
      for (float f : fs) {
        const Ref r = reference(f);
        if (e4m3_round_down(f).bits() != r.down || e4m3_round_up(f).bits() != r.up) {
          if (bad++ == 0)
            FAIL_CHECK("f=" << f << ": down " << hex(e4m3_round_down(f).bits()) << " want " << hex(r.down) << ", up "
                            << hex(e4m3_round_up(f).bits()) << " want " << hex(r.up));
        }
        if (std::fabs(f) <= 448.0f) {  // inside the range the results bracket f
          const float lo = e4m3_round_down(f).to_float(), hi = e4m3_round_up(f).to_float();
          if (!(lo <= f && f <= hi)) ++bad;
        }
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("e4m3: directed rounding saturation, zeros and NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  // Inside [0, 448]: smallest value >= v / largest value <= v.
  CHECK(e4m3_round_up(0.3f).bits() == 0x2a);  // 0.3125
  CHECK(e4m3_round_down(0.3f).bits() == 0x29);  // 0.28125
  CHECK(e4m3_round_up(1.0f).bits() == 0x38);
  CHECK(e4m3_round_down(1.0f).bits() == 0x38);
  CHECK(e4m3_round_up(std::nextafter(1.0f, 2.0f)).bits() == 0x39);
  CHECK(e4m3_round_down(std::nextafter(1.0f, 0.0f)).bits() == 0x37);
  CHECK(e4m3_round_up(std::nextafter(416.0f, inf)).bits() == 0x7e);
  CHECK(e4m3_round_up(448.0f).bits() == 0x7e);
  CHECK(e4m3_round_down(448.0f).bits() == 0x7e);
  // Negative inputs are mirrored: round_up moves the magnitude toward zero.
  CHECK(e4m3_round_up(-0.3f).bits() == 0xa9);  // -0.28125
  CHECK(e4m3_round_down(-0.3f).bits() == 0xaa);  // -0.3125
  // Saturation at +-448 (the format has no Inf).
  CHECK(e4m3_round_up(449.0f).bits() == 0x7e);
  CHECK(e4m3_round_up(1e9f).bits() == 0x7e);
  CHECK(e4m3_round_up(inf).bits() == 0x7e);
  CHECK(e4m3_round_down(1e9f).bits() == 0x7e);
  CHECK(e4m3_round_down(inf).bits() == 0x7e);
  CHECK(e4m3_round_down(-449.0f).bits() == 0xfe);
  CHECK(e4m3_round_down(-inf).bits() == 0xfe);
  CHECK(e4m3_round_up(-1e9f).bits() == 0xfe);
  CHECK(e4m3_round_up(-inf).bits() == 0xfe);
  // Zero results keep the sign of the input; never a NaN code.
  CHECK(e4m3_round_down(0.0f).bits() == 0x00);
  CHECK(e4m3_round_up(0.0f).bits() == 0x00);
  CHECK(e4m3_round_down(-0.0f).bits() == 0x80);
  CHECK(e4m3_round_up(-0.0f).bits() == 0x80);
  CHECK(e4m3_round_down(1e-4f).bits() == 0x00);
  CHECK(e4m3_round_up(1e-4f).bits() == 0x01);
  CHECK(e4m3_round_down(-1e-4f).bits() == 0x81);
  CHECK(e4m3_round_up(-1e-4f).bits() == 0x80);
  const float x = std::ldexp(0.7f, -9);  // nearest is +-2^-9: the step toward zero gives a signed zero
  CHECK(e4m3_round_down(x).bits() == 0x00);
  CHECK(e4m3_round_up(-x).bits() == 0x80);
  CHECK(e4m3_round_down(std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(e4m3_round_up(-std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
}

TEST_CASE("e4m3: random and strided fp32 sweeps match the reference (rn, down, up)") {
  Mismatches mm;
  std::uint64_t state = 0x6b76746c65346d33ull;
  for (int i = 0; i < 1000000; ++i) mm.check(ffrom(static_cast<std::uint32_t>(splitmix64(state))));
  // Exponents from 2^-13 to 2^10: the subnormal, normal and saturating ranges.
  for (int i = 0; i < 2000000; ++i) {
    const std::uint64_t r = splitmix64(state);
    const std::uint32_t e = 114u + static_cast<std::uint32_t>((r >> 32) % 24u);
    mm.check(ffrom((static_cast<std::uint32_t>(r >> 63) << 31) | (e << 23) | (static_cast<std::uint32_t>(r) & 0x7fffffu)));
  }
  // Mantissas whose dropped bits sit right around half an ulp.
  const std::uint32_t lows[] = {0x00000, 0x00001, 0x7ffff, 0x80000, 0x80001, 0xfffff, 0x40000, 0xbffff};
  for (int i = 0; i < 500000; ++i) {
    const std::uint64_t r = splitmix64(state);
    const std::uint32_t e = 116u + static_cast<std::uint32_t>((r >> 32) % 20u);
    const std::uint32_t m = (static_cast<std::uint32_t>(r) & 0x700000u) | lows[(r >> 40) & 7u];
    // Subnormal inputs round at a coarser position: also hit it with the bits shifted.
    const std::uint32_t mm_bits = e < 121u ? (m >> (121u - e)) | (static_cast<std::uint32_t>(r >> 20) & 0x700000u) : m;
    mm.check(ffrom((static_cast<std::uint32_t>(r >> 63) << 31) | (e << 23) | (mm_bits & 0x7fffffu)));
  }
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) mm.check(ffrom(static_cast<std::uint32_t>(u)));
  INFO(mm.first);
  CHECK(mm.count == 0);
}

TEST_CASE("float_e4m3_t: storage and API") {
  static_assert(sizeof(float_e4m3_t) == 1, "layout");
  static_assert(float_e4m3_t::from_bits(0x38).bits() == 0x38, "from_bits and bits are constexpr");
  const float_e4m3_t v(1.5f);
  CHECK(v.bits() == 0x3c);
  CHECK(v.storage == 0x3c);
  CHECK(v.to_float() == 1.5f);
  CHECK(static_cast<float>(v) == 1.5f);
  CHECK(float_e4m3_t::from_float_bits(-2.0f) == 0xc0);
  CHECK(float_e4m3_t::to_float_bits(0xc0) == -2.0f);
  CHECK(float_e4m3_t(0.1f).bits() == 0x1d);  // 0.1015625
  CHECK(float_e4m3_t::max_code == 0x7e);
}
