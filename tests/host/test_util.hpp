// tests/host/test_util.hpp: shared helpers for kvtile's host tests.
//
// Everything here is deliberately independent of the library's own math where
// it serves as a reference (ulp distance, fp16/E4M3 decoding, double-precision
// statistics); it uses the library only for what is under test.
#pragma once

#include <kvtile/kvtile.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

namespace kvtest {

// ---------------------------------------------------------------- random numbers

// Deterministic (splitmix64): tests never depend on the platform's <random>.
struct rng {
  std::uint64_t state;
  explicit rng(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t x = (state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  double normal() {
    double u1 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// ---------------------------------------------------------------- float bits

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Distance in units in the last place between two finite floats (counts the
// representable floats between them; -0 and +0 are the same point).
inline std::int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    const std::uint32_t u = bits_of(f);
    return (u & 0x80000000u) ? -static_cast<std::int64_t>(u & 0x7fffffffu) : static_cast<std::int64_t>(u);
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Reference decoders written from the IEEE / OCP definitions (not the library's).
inline double ref_half_to_double(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0x1f) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}
inline double ref_e4m3_to_double(std::uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xf, m = c & 7;
  double v;
  if (e == 0xf && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -9);
  else v = std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
inline std::uint16_t rd_u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
inline float rd_f32(const std::uint8_t* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                          (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  return float_of(u);
}
inline void wr_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
inline void wr_f32(std::uint8_t* p, float f) {
  const std::uint32_t u = bits_of(f);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(u >> (8 * i));
}
// Code i of a packed row, by the documented rule: byte i / (8/b), shift (i % (8/b)) * b.
inline unsigned ref_code(const std::uint8_t* row, int i, int b) {
  const int per = 8 / b;
  return (row[i / per] >> ((i % per) * b)) & ((1u << b) - 1u);
}

// ---------------------------------------------------------------- tiles

// A G x D engine-layout tile (token-major, stride D) of floats.
struct tile {
  int G, D;
  std::vector<float> v;
  tile(int g, int d) : G(g), D(d), v(static_cast<std::size_t>(g) * d, 0.0f) {}
  float& at(int g, int d) { return v[static_cast<std::size_t>(g) * D + d]; }
  float at(int g, int d) const { return v[static_cast<std::size_t>(g) * D + d]; }
  float* data() { return v.data(); }
  const float* data() const { return v.data(); }
};

inline tile gaussian_tile(int G, int D, std::uint64_t seed, double sigma = 1.0) {
  tile t(G, D);
  rng r(seed);
  for (auto& x : t.v) x = static_cast<float>(sigma * r.normal());
  return t;
}

// Keys as real models produce them: a few outlier channels (10-100x the rest,
// with a large per-channel offset and heavy-tailed per-token variation), and
// per-token magnitude variation (a few tokens, e.g. attention sinks, larger).
inline tile outlier_key_tile(int G, int D, std::uint64_t seed, int n_outliers = 4) {
  tile t(G, D);
  rng r(seed);
  std::vector<double> ch_scale(D, 1.0), ch_mean(D, 0.0);
  for (int d = 0; d < D; ++d) {
    ch_scale[d] = std::exp(r.uniform(-0.5, 0.5));  // mild spread across normal channels
    ch_mean[d] = 0.3 * r.normal();
  }
  for (int k = 0; k < n_outliers; ++k) {
    const int d = r.below(D);
    const double mag = r.uniform(10.0, 100.0);
    ch_scale[d] = mag * 0.4;
    ch_mean[d] = mag * (r.uniform() < 0.5 ? -1.0 : 1.0);
  }
  std::vector<double> tok(G, 1.0);
  for (int g = 0; g < G; ++g) tok[g] = std::exp(0.25 * r.normal());
  tok[0] = 4.0;  // a sink-like token
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < D; ++d) t.at(g, d) = static_cast<float>(tok[g] * (ch_mean[d] + ch_scale[d] * r.normal()));
  return t;
}

// Each token rotated by Rotation::forward (the codec's rotated frame).
template <class Rotation, int D>
tile rotated(const tile& x) {
  tile y = x;
  for (int g = 0; g < x.G; ++g) Rotation::template forward<D>(&y.at(g, 0));
  return y;
}

inline double sq_err(const tile& a, const tile& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    const double d = static_cast<double>(a.v[i]) - b.v[i];
    s += d * d;
  }
  return s;
}
inline double sq_norm(const tile& a) {
  double s = 0;
  for (float x : a.v) s += static_cast<double>(x) * x;
  return s;
}
inline bool all_finite(const tile& a) {
  for (float x : a.v)
    if (!std::isfinite(x)) return false;
  return true;
}

// ---------------------------------------------------------------- codecs

template <class Codec>
std::vector<std::uint8_t> make_record(std::uint8_t fill = 0xcd) {
  return std::vector<std::uint8_t>(Codec::record_bytes, fill);
}

// Codec round trip of one key tile and one value tile through float buffers.
template <class Codec>
struct round_trip {
  std::vector<std::uint8_t> rec = make_record<Codec>();
  kvtile::status enc = kvtile::status::success;
  tile k_rot{Codec::G, Codec::D}, v_rot{Codec::G, Codec::D};  // decoded, rotated frame
  tile k_org{Codec::G, Codec::D}, v_org{Codec::G, Codec::D};  // decoded, original frame
  round_trip(const tile& k, const tile& v) {
    enc = Codec::encode(k.data(), Codec::D, v.data(), Codec::D, rec.data());
    if (!kvtile::ok(enc)) return;
    REQUIRE(Codec::decode(rec.data(), k_rot.data(), Codec::D, v_rot.data(), Codec::D, kvtile::frame::rotated) ==
            kvtile::status::success);
    REQUIRE(Codec::decode(rec.data(), k_org.data(), Codec::D, v_org.data(), Codec::D, kvtile::frame::original) ==
            kvtile::status::success);
  }
};

// The analytic bound of method.md section 5 in the rotated frame. A row's
// grid (stored step a^, fp16 zero z^) is chosen by the row rounding policy;
// for the covering rule every element is within a^/2 of its reconstruction,
// for min_max_error the row's maximum error is at most that of the centred
// grid with the next stored step up (the "up" neighbour, a+ <= the stored
// value after a^): a+/2 plus the fp16 rounding of the zero (half an fp16 ulp
// of z^). A clip ratio rho < 1 fits the grid to the centred rho of the row's
// range, so a saturated element can be up to (1 - rho) / rho * (hi' - lo') / 2
// <= (1 - rho) / rho * qmax * a+ / 2 beyond the grid's end. Both sides are
// scaled by the column (Sinkhorn) scale. Bound:
//   |x^ - x| <= (a+/2 * (1 + qmax (1 - rho) / rho) + ulp16(z^)/2) * colscale + eps,
//   eps = 2^-20 * (|x| + |x^|) + 2^-20 * a+ * colscale,
// eps covering fp32 rounding (the division X / s^, the fma of the
// reconstruction, the final product, and (y - z)/a^ rounding before rint).
// Returns the number of violations (0 expected) and the largest error / bound.
struct bound_result {
  long violations = 0;
  double worst_ratio = 0;  // max |x^ - x| / bound
};

// The next stored step above a (upper bound): E4M3 x vector scale vs (relative
// spacing 2^-3, subnormal spacing 2^-9 vs), or fp16 (2^-10, subnormal 2^-24).
template <class Codec>
double next_step_bound(double a, double vs) {
  if (std::is_same_v<typename Codec::packer, kvtile::fp8_scales>) return a + std::max(a / 8, std::ldexp(vs, -9));
  return a + std::max(a / 1024, std::ldexp(1.0, -24));
}

template <class Codec>
bound_result check_rotated_bound(const std::vector<std::uint8_t>& rec, const tile& k_in, const tile& v_in,
                                 const tile& k_hat, const tile& v_hat, bool keys = true, bool values = true) {
  constexpr int D = Codec::D, G = Codec::G;
  using R = typename Codec::rotation;
  const typename Codec::view view(rec.data());
  const tile kr = rotated<R, D>(k_in), vr = rotated<R, D>(v_in);
  constexpr bool covering = Codec::key_rounder::policy == kvtile::row_rounding::cover;
  double kvs = 1, vvs = 1;
  if constexpr (std::is_same_v<typename Codec::packer, kvtile::fp8_scales>) {
    kvs = view.vector_scale(kvtile::vector_field::key_scale);
    vvs = view.vector_scale(kvtile::vector_field::value_scale);
  }
  bound_result res;
  auto one = [&](double x, double xh, double step, double zero, double col, double vs, double rho, double qmax) {
    const double up = covering ? step : next_step_bound<Codec>(step, vs);
    const double zr = covering ? 0.0 : std::fabs(zero) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    const double eps = std::ldexp(1.0, -20) * (std::fabs(x) + std::fabs(xh)) + std::ldexp(1.0, -20) * up * col;
    const double bound = (up / 2 * (1 + qmax * (1 - rho) / rho) + zr) * col + eps;
    const double err = std::fabs(xh - x);
    if (!(err <= bound)) ++res.violations;
    if (bound > 0) res.worst_ratio = std::max(res.worst_ratio, err / bound);
    else if (err > 0) res.worst_ratio = std::numeric_limits<double>::infinity();
  };
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < D; ++d) {
      if (keys)
        one(kr.at(g, d), k_hat.at(g, d), view.key_scale(d), view.key_zero(d), view.key_token_scale(g), kvs,
            Codec::key_rounder::clip_ratio, Codec::key_rounder::qmax);
      if (values)
        one(vr.at(g, d), v_hat.at(g, d), view.value_scale(g), view.value_zero(g), view.value_channel_scale(d), vvs,
            Codec::value_rounder::clip_ratio, Codec::value_rounder::qmax);
    }
  return res;
}

}  // namespace kvtest
