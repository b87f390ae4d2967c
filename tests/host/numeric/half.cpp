// Host tests of kvtile::half_t (IEEE binary16) against an independent reference:
// exact values from std::ldexp in double, nearest / directed rounding by search
// in the sorted table of all finite halves. Covers every code, every rounding
// boundary of float -> half, every fp32 NaN and subnormal, and random sweeps.
// Identity with CUDA itself (all 2^32 floats) is tests/device/numeric.cu.
#include <doctest/doctest.h>

#include <kvtile/numeric/half.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using kvtile::half_t;

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

constexpr std::uint16_t kInfCode = 0x7c00;
constexpr std::uint16_t kNaNCode = 0x7fff;  // CUDA's canonical half NaN
constexpr std::uint32_t kFloatNaN = 0x7fffffffu;  // CUDA's canonical float NaN (half -> float)

// Exact value of a half code, from the definition of binary16.
double half_value(std::uint16_t c) {
  const int e = (c >> 10) & 0x1f;
  const int m = c & 0x3ff;
  double v;
  if (e == 0x1f) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(static_cast<double>(1024 + m), e - 25);
  }
  return (c & 0x8000) ? -v : v;
}

// Non-negative codes 0x0000..0x7c00 in value order; 0x7c00 stands for 2^16, the
// value the next binade would start at, so rounding overflow falls out of the
// search: ties at 65520 go to the even code 0x7c00 = Inf.
const std::vector<double>& table() {
  static const std::vector<double> t = [] {
    std::vector<double> v(kInfCode + 1u);
    for (unsigned c = 0; c < kInfCode; ++c) v[c] = half_value(static_cast<std::uint16_t>(c));
    v[kInfCode] = 65536.0;
    return v;
  }();
  return t;
}

struct Ref {
  std::uint16_t rn, down, up;
};

// Reference float -> half in the three rounding directions.
Ref reference(float f) {
  if (std::isnan(f)) return {kNaNCode, kNaNCode, kNaNCode};
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) {
    const std::uint16_t inf = static_cast<std::uint16_t>(sign | kInfCode);
    return {inf, inf, inf};
  }
  const auto& t = table();
  // lo: largest code with value <= a (saturating at 0x7bff for finite a).
  std::size_t lo = static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  if (lo >= kInfCode) lo = kInfCode - 1u;
  std::uint16_t near, toward0, away;
  if (t[lo] == a) {
    near = toward0 = away = static_cast<std::uint16_t>(lo);
  } else {
    const std::size_t hi = lo + 1;  // hi == 0x7c00 means "overflows to Inf"
    const double mid = (t[lo] + t[hi]) / 2;  // exact
    near = static_cast<std::uint16_t>(a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi));
    toward0 = static_cast<std::uint16_t>(lo);
    away = static_cast<std::uint16_t>(hi);
  }
  const auto s = [sign](std::uint16_t c) { return static_cast<std::uint16_t>(sign | c); };
  // Round down: toward 0 for f >= 0, away (magnitude up) for f < 0; overflow of
  // the magnitude gives Inf, which is right for IEEE directed rounding.
  return sign ? Ref{s(near), s(away), s(toward0)} : Ref{s(near), s(toward0), s(away)};
}

// Counts mismatches of kvtile against the reference over a set of floats; keeps
// the first for the report.
struct Mismatches {
  long count = 0;
  std::string first;
  void check(float f) {
    const Ref r = reference(f);
    const std::uint16_t rn = half_t(f).bits();
    const std::uint16_t down = kvtile::half_round_down(f).bits();
    const std::uint16_t up = kvtile::half_round_up(f).bits();
    if (rn != r.rn || down != r.down || up != r.up) {
      if (count == 0) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "f=%a (0x%08x): rn/down/up kvtile 0x%04x/0x%04x/0x%04x, reference 0x%04x/0x%04x/0x%04x",
                      static_cast<double>(f), fbits(f), rn, down, up, r.rn, r.down, r.up);
        first = buf;
      }
      ++count;
    }
  }
};

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

TEST_CASE("half: every code decodes to its exact value") {
  long bad = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    const std::uint16_t code = static_cast<std::uint16_t>(c);
    const float f = half_t::from_bits(code).to_float();
    const double want = half_value(code);
    bool ok;
    if (std::isnan(want)) {
      ok = fbits(f) == kFloatNaN;  // canonical NaN, like CUDA's __half2float
    } else {
      ok = static_cast<double>(f) == want && std::signbit(f) == std::signbit(want);
    }
    if (!ok && bad++ == 0) FAIL_CHECK("code " << hex(c) << " decodes to " << f << " (" << hex(fbits(f)) << "), want " << want);
  }
  CHECK(bad == 0);
  CHECK(half_t::from_bits(0x0001).to_float() == std::ldexp(1.0f, -24));
  CHECK(half_t::from_bits(0x03ff).to_float() == std::ldexp(1023.0f, -24));
  CHECK(half_t::from_bits(0x0400).to_float() == std::ldexp(1.0f, -14));
  CHECK(half_t::from_bits(0x3c00).to_float() == 1.0f);
  CHECK(half_t::from_bits(0x7bff).to_float() == 65504.0f);
  CHECK(half_t::from_bits(0x7bff).to_float() == half_t::max_finite);
  CHECK(fbits(half_t::from_bits(0x8000).to_float()) == 0x80000000u);
  CHECK(fbits(half_t::from_bits(0xfc00).to_float()) == 0xff800000u);
  CHECK(fbits(half_t::from_bits(0xfe01).to_float()) == kFloatNaN);
  CHECK(static_cast<float>(half_t::from_bits(0xc000)) == -2.0f);
}

TEST_CASE("half: every code round-trips through float") {
  long bad = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    const std::uint16_t code = static_cast<std::uint16_t>(c);
    const bool nan = (code & 0x7c00) == 0x7c00 && (code & 0x3ff) != 0;
    const float f = half_t::from_bits(code).to_float();
    const std::uint16_t want = nan ? kNaNCode : code;  // -0 stays -0, +-Inf stay
    if (half_t(f).bits() != want || kvtile::half_round_down(f).bits() != want ||
        kvtile::half_round_up(f).bits() != want) {
      if (bad++ == 0) FAIL_CHECK("code " << hex(c) << " -> " << f << " -> " << hex(half_t(f).bits()));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("half: round to nearest even at every rounding boundary") {
  // For each pair of adjacent non-negative halves lo < hi (hi = 0x7c00 standing
  // for 2^16 at the top), the midpoint is a float; it rounds to the even code,
  // the floats below it to lo and those above it to hi. Both signs.
  const auto& t = table();
  long bad = 0, checked = 0;
  for (unsigned lo = 0; lo < kInfCode; ++lo) {
    const unsigned hi = lo + 1;
    const double mid = (t[lo] + t[hi]) / 2;
    const float fm = static_cast<float>(mid);
    REQUIRE(static_cast<double>(fm) == mid);
    const unsigned even = (lo % 2 == 0) ? lo : hi;
    for (int sgn = 0; sgn < 2; ++sgn) {
      const std::uint16_t s = sgn ? 0x8000 : 0;
      const float m = sgn ? -fm : fm;
      const float toward0 = sgn ? -0.0f : 0.0f;
      const float away = sgn ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      struct Case {
        float f;
        unsigned want;
      };
      float below = m, above = m;
      std::vector<Case> cases = {{m, even}, {static_cast<float>(sgn ? -t[lo] : t[lo]), lo}};
      if (hi < kInfCode) cases.push_back({static_cast<float>(sgn ? -t[hi] : t[hi]), hi});
      for (int k = 0; k < 4; ++k) {  // four floats on each side of the midpoint
        below = std::nextafter(below, toward0);
        above = std::nextafter(above, away);
        cases.push_back({below, lo});
        cases.push_back({above, hi});
      }
      for (const Case& c : cases) {
        ++checked;
        const std::uint16_t want = static_cast<std::uint16_t>(s | c.want);
        const std::uint16_t got = half_t(c.f).bits();
        if (got != want || reference(c.f).rn != want) {
          if (bad++ == 0)
            FAIL_CHECK("f=" << c.f << " (" << hex(fbits(c.f)) << "): got " << hex(got) << ", want " << hex(want));
        }
      }
    }
  }
  CHECK(bad == 0);
  CHECK(checked == 2 * (31744 * 11 - 1));  // 11 floats per boundary, no "hi" at the top
}

TEST_CASE("half: NaN, Inf, overflow, zeros and fp32 subnormals") {
  const float inf = std::numeric_limits<float>::infinity();
  // Overflow threshold: 65520 = 65504 + half an ulp is a tie that goes to the
  // even code 0x7c00 = Inf; the float below it stays finite.
  CHECK(half_t(65504.0f).bits() == 0x7bff);
  CHECK(half_t(std::nextafter(65520.0f, 0.0f)).bits() == 0x7bff);  // 65519.996
  CHECK(half_t(65520.0f).bits() == 0x7c00);
  CHECK(half_t(-65520.0f).bits() == 0xfc00);
  CHECK(half_t(std::nextafter(-65520.0f, 0.0f)).bits() == 0xfbff);
  CHECK(half_t(1e10f).bits() == 0x7c00);
  CHECK(half_t(std::numeric_limits<float>::max()).bits() == 0x7c00);
  CHECK(half_t(-std::numeric_limits<float>::max()).bits() == 0xfc00);
  CHECK(half_t(inf).bits() == 0x7c00);
  CHECK(half_t(-inf).bits() == 0xfc00);
  // Zeros keep their sign.
  CHECK(half_t(0.0f).bits() == 0x0000);
  CHECK(half_t(-0.0f).bits() == 0x8000);
  // Smallest subnormal 2^-24: 2^-25 is the tie to even 0, anything above it rounds up.
  CHECK(half_t(std::ldexp(1.0f, -25)).bits() == 0x0000);
  CHECK(half_t(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits() == 0x0001);
  CHECK(half_t(-std::ldexp(1.0f, -25)).bits() == 0x8000);
  CHECK(half_t(std::ldexp(3.0f, -25)).bits() == 0x0002);  // 1.5 * 2^-24: tie to even 2
  CHECK(half_t(std::ldexp(5.0f, -25)).bits() == 0x0002);  // 2.5 * 2^-24: tie to even 2
  CHECK(half_t(std::ldexp(3.0f, -26)).bits() == 0x0001);  // 0.75 * 2^-24
  CHECK(half_t(std::ldexp(1023.5f, -24)).bits() == 0x0400);  // top subnormal tie carries into the normals
  CHECK(half_t(std::ldexp(1.0f, -14)).bits() == 0x0400);
  CHECK(half_t(std::ldexp(1.0f, -24)).bits() == 0x0001);
  // Every fp32 NaN (2^24 patterns, both signs, quiet and signalling) -> 0x7fff,
  // and every fp32 subnormal -> a zero of its sign (all below 2^-25).
  long bad_nan = 0, bad_sub = 0;
  for (std::uint32_t m = 1; m < (1u << 23); ++m) {
    for (std::uint32_t s = 0; s < 2; ++s) {
      const float n = ffrom((s << 31) | 0x7f800000u | m);
      if (half_t(n).bits() != kNaNCode || kvtile::half_round_down(n).bits() != kNaNCode ||
          kvtile::half_round_up(n).bits() != kNaNCode)
        ++bad_nan;
      const float d = ffrom((s << 31) | m);
      const std::uint16_t z = static_cast<std::uint16_t>(s << 15);
      // Directed: a positive subnormal rounds up to 2^-24, a negative one down to -2^-24.
      if (half_t(d).bits() != z || kvtile::half_round_down(d).bits() != (s ? 0x8001 : 0x0000) ||
          kvtile::half_round_up(d).bits() != (s ? 0x8000 : 0x0001))
        ++bad_sub;
    }
  }
  CHECK(bad_nan == 0);
  CHECK(bad_sub == 0);
  CHECK(half_t(std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(half_t(-std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(half_t(std::numeric_limits<float>::signaling_NaN()).bits() == kNaNCode);
}

TEST_CASE("half: directed rounding at every code and boundary") {
  // At each half value v, the floats just below and above v round down / up to
  // the neighbours; v itself is fixed. Both signs; the reference is the search.
  const auto& t = table();
  long bad = 0;
  for (unsigned c = 0; c < kInfCode; ++c) {
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float v = static_cast<float>(sgn ? -t[c] : t[c]);
      const float dn = std::nextafter(v, -std::numeric_limits<float>::infinity());
      const float upv = std::nextafter(v, std::numeric_limits<float>::infinity());
      for (float f : {v, dn, upv, static_cast<float>((t[c] + t[c + 1]) / 2) * (sgn ? -1.0f : 1.0f)}) {
        const Ref r = reference(f);
        if (kvtile::half_round_down(f).bits() != r.down || kvtile::half_round_up(f).bits() != r.up) {
          if (bad++ == 0)
            FAIL_CHECK("f=" << f << ": down " << hex(kvtile::half_round_down(f).bits()) << " want " << hex(r.down)
                            << ", up " << hex(kvtile::half_round_up(f).bits()) << " want " << hex(r.up));
        }
        // Directed results bracket f and are adjacent (or equal when f is a half).
        const float lo = kvtile::half_round_down(f).to_float(), hi = kvtile::half_round_up(f).to_float();
        if (!(lo <= f && f <= hi)) ++bad;
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("half: directed rounding overflow, zeros and NaN (IEEE rd/ru, as __float2half_rd/ru)") {
  using kvtile::half_round_down;
  using kvtile::half_round_up;
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(half_round_down(65504.0f).bits() == 0x7bff);
  CHECK(half_round_up(65504.0f).bits() == 0x7bff);
  CHECK(half_round_down(std::nextafter(65504.0f, inf)).bits() == 0x7bff);
  CHECK(half_round_up(std::nextafter(65504.0f, inf)).bits() == 0x7c00);  // above 65504: +Inf
  CHECK(half_round_down(65520.0f).bits() == 0x7bff);
  CHECK(half_round_down(1e30f).bits() == 0x7bff);
  CHECK(half_round_up(1e30f).bits() == 0x7c00);
  CHECK(half_round_down(-1e30f).bits() == 0xfc00);  // below -65504: -Inf
  CHECK(half_round_up(-1e30f).bits() == 0xfbff);
  CHECK(half_round_down(std::nextafter(-65504.0f, -inf)).bits() == 0xfc00);
  CHECK(half_round_up(std::nextafter(-65504.0f, -inf)).bits() == 0xfbff);
  CHECK(half_round_down(inf).bits() == 0x7c00);
  CHECK(half_round_up(inf).bits() == 0x7c00);
  CHECK(half_round_down(-inf).bits() == 0xfc00);
  CHECK(half_round_up(-inf).bits() == 0xfc00);
  CHECK(half_round_down(std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  CHECK(half_round_up(-std::numeric_limits<float>::quiet_NaN()).bits() == kNaNCode);
  // Zeros: results of value zero keep the sign of the input.
  CHECK(half_round_down(0.0f).bits() == 0x0000);
  CHECK(half_round_up(0.0f).bits() == 0x0000);
  CHECK(half_round_down(-0.0f).bits() == 0x8000);
  CHECK(half_round_up(-0.0f).bits() == 0x8000);
  CHECK(half_round_down(1e-9f).bits() == 0x0000);
  CHECK(half_round_up(1e-9f).bits() == 0x0001);
  CHECK(half_round_down(-1e-9f).bits() == 0x8001);
  CHECK(half_round_up(-1e-9f).bits() == 0x8000);
  // Between 2^-25 and 2^-24 the nearest half is +-2^-24; the step back toward
  // zero must give a zero of the input's sign (ru(-0.7 * 2^-24) is -0 for CUDA).
  const float x = std::ldexp(0.7f, -24);
  CHECK(half_round_down(x).bits() == 0x0000);
  CHECK(half_round_up(x).bits() == 0x0001);
  CHECK(half_round_down(-x).bits() == 0x8001);
  CHECK(half_round_up(-x).bits() == 0x8000);
  CHECK(half_round_down(1.0f).bits() == 0x3c00);
  CHECK(half_round_up(std::nextafter(1.0f, 2.0f)).bits() == 0x3c01);
  CHECK(half_round_down(std::nextafter(1.0f, 0.0f)).bits() == 0x3bff);
}

TEST_CASE("half: random and strided fp32 sweeps match the reference (rn, down, up)") {
  Mismatches mm;
  std::uint64_t state = 0x6b76746c6568616cull;
  // Uniform bit patterns: every class of input (mostly out of half range).
  for (int i = 0; i < 1000000; ++i) mm.check(ffrom(static_cast<std::uint32_t>(splitmix64(state))));
  // Patterns with exponents in the half range and just around it (2^-27 .. 2^17).
  for (int i = 0; i < 2000000; ++i) {
    const std::uint64_t r = splitmix64(state);
    const std::uint32_t e = 100u + static_cast<std::uint32_t>((r >> 32) % 45u);
    mm.check(ffrom((static_cast<std::uint32_t>(r >> 63) << 31) | (e << 23) | (static_cast<std::uint32_t>(r) & 0x7fffffu)));
  }
  // Mantissas near the rounding position: low 13 bits drawn from a few special
  // patterns around half an ulp.
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
  for (int i = 0; i < 500000; ++i) {
    const std::uint64_t r = splitmix64(state);
    const std::uint32_t e = 102u + static_cast<std::uint32_t>((r >> 32) % 42u);
    const std::uint32_t m = (static_cast<std::uint32_t>(r) & 0x7fe000u) | lows[(r >> 40) & 7u];
    mm.check(ffrom((static_cast<std::uint32_t>(r >> 63) << 31) | (e << 23) | m));
  }
  // A strided pass over all 2^32 patterns.
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) mm.check(ffrom(static_cast<std::uint32_t>(u)));
  INFO(mm.first);
  CHECK(mm.count == 0);
}

TEST_CASE("half_t: storage and API") {
  static_assert(sizeof(half_t) == 2 && alignof(half_t) == 2, "layout");
  static_assert(half_t::from_bits(0x3c00).bits() == 0x3c00, "from_bits and bits are constexpr");
  const half_t h(1.5f);
  CHECK(h.bits() == 0x3e00);
  CHECK(h.storage == 0x3e00);
  CHECK(h.to_float() == 1.5f);
  CHECK(static_cast<float>(h) == 1.5f);
  CHECK(half_t::from_float_bits(-2.0f) == 0xc000);
  CHECK(half_t::to_float_bits(0xc000) == -2.0f);
  CHECK(half_t(0.1f).bits() == 0x2e66);  // 0.0999755859375
  CHECK(half_t(3.14159265f).bits() == 0x4248);
}
