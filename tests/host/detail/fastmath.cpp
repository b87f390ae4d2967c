// detail::exp / detail::log: kvtile's own transcendentals (one implementation
// for host and device, method.md section 10). Contract: within 2 ulp of the
// correctly rounded result (double libm rounded to float) over the ranges
// kvtile uses: exp on [-87, 88], log on every positive normal and subnormal.
#include "test_util.hpp"

using kvtest::ulp_distance;

TEST_CASE("fastmath: exp within 2 ulp on [-87, 88]") {
  std::int64_t worst = 0;
  float worst_x = 0;
  long n = 0;
  auto check = [&](float x) {
    const float got = kvtile::detail::exp(x);
    const float ref = static_cast<float>(std::exp(static_cast<double>(x)));
    const std::int64_t d = ulp_distance(got, ref);
    if (d > worst) { worst = d; worst_x = x; }
    ++n;
  };
  // Dense grid over the whole range plus random points.
  for (int i = 0; i <= 1750000; ++i) check(static_cast<float>(-87.0 + 175.0 * i / 1750000.0));
  kvtest::rng r(1);
  for (int i = 0; i < 500000; ++i) check(static_cast<float>(r.uniform(-87.0, 88.0)));
  // Every float in [-1, 1] with a stride (the Sinkhorn clip range [-0.3, 10] lives here and above).
  for (std::uint32_t u = 0; u < 0x3f800000u; u += 509) { check(kvtest::float_of(u)); check(-kvtest::float_of(u)); }
  // Special points: endpoints, the Sinkhorn clip bounds, zero, halfway points n*ln2/2.
  for (float x : {-87.0f, 88.0f, -0.3f, 10.0f, 0.0f, -0.0f, 1.0f, -1.0f, 0.34657359f, -0.34657359f, 44.0f, -44.0f})
    check(x);
  MESSAGE("exp: " << n << " points, worst " << worst << " ulp at x = " << worst_x);
  CHECK(worst <= 2);
  // exp(0) is exactly 1; outside the range the input is clamped.
  CHECK(kvtile::detail::exp(0.0f) == 1.0f);
  CHECK(kvtile::detail::exp(-1000.0f) == kvtile::detail::exp(-87.0f));
  CHECK(kvtile::detail::exp(1000.0f) == kvtile::detail::exp(88.0f));
  CHECK(std::isfinite(kvtile::detail::exp(88.0f)));
}

TEST_CASE("fastmath: log within 2 ulp on positive normals and subnormals") {
  std::int64_t worst = 0;
  float worst_x = 0;
  long n = 0;
  auto check = [&](float x) {
    const float got = kvtile::detail::log(x);
    const float ref = static_cast<float>(std::log(static_cast<double>(x)));
    const std::int64_t d = ulp_distance(got, ref);
    if (d > worst) { worst = d; worst_x = x; }
    ++n;
  };
  // Every 1021st positive finite float, subnormals included (an exhaustive
  // sweep of all 2^31 took ~1 min and found <= 1 ulp; too slow for CI) ...
  for (std::uint32_t u = 1; u < 0x7f800000u; u += 1021) check(kvtest::float_of(u));
  // ... and every float near 1, where ln x is small and the relative error of
  // a naive series is largest (the Sinkhorn std clamp range [1e-3, 1e3] has
  // many of its inputs here).
  for (std::uint32_t u = 0x3f700000u; u < 0x3f880000u; ++u) check(kvtest::float_of(u));
  // And a dense sample of [1e-3, 1e3].
  for (std::uint32_t u = kvtest::bits_of(1e-3f); u <= kvtest::bits_of(1e3f); u += 97) check(kvtest::float_of(u));
  // Subnormals: all of the smallest, then strided.
  for (std::uint32_t u = 1; u < 4096; ++u) check(kvtest::float_of(u));
  check(std::numeric_limits<float>::denorm_min());
  check(std::numeric_limits<float>::min());
  check(std::numeric_limits<float>::max());
  MESSAGE("log: " << n << " points, worst " << worst << " ulp at x = " << worst_x);
  CHECK(worst <= 2);
  CHECK(kvtile::detail::log(1.0f) == 0.0f);
  // x <= 0 (and NaN) give -88, never NaN: exp(log(0)) stays finite.
  CHECK(kvtile::detail::log(0.0f) == -88.0f);
  CHECK(kvtile::detail::log(-1.0f) == -88.0f);
  CHECK(kvtile::detail::log(std::numeric_limits<float>::quiet_NaN()) == -88.0f);
}

TEST_CASE("fastmath: exp(log(x)) ~= x on the Sinkhorn std range") {
  long bad = 0;
  for (std::uint32_t u = kvtest::bits_of(1e-3f); u <= kvtest::bits_of(1e3f); u += 4099) {
    const float x = kvtest::float_of(u);
    if (ulp_distance(kvtile::detail::exp(kvtile::detail::log(x)), x) > 64) ++bad;  // |ln x| <= 7: ~ 7 * 2^-24 * x
  }
  CHECK(bad == 0);
}
