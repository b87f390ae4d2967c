// kvtile/detail/fastmath.hpp: exp and ln with one implementation for host and device.
//
// libm and CUDA's expf/logf differ in the last bit (method.md section 10), so
// kvtile's Sinkhorn uses these instead: only +, -, *, / and explicit fma, each
// correctly rounded on both sides, in a fixed order. Accuracy: within 2 ulp of
// the correctly rounded result over the ranges kvtile uses (tests/host/detail/fastmath.cpp).
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "bits.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

// e^x for x in [-87, 88] (clamped outside), via exp(x) = 2^n * exp(r),
// r = x - n ln2 in [-ln2/2, ln2/2], exp(r) by a degree-7 Taylor polynomial.
KVTILE_HOST_DEVICE float exp(float x) {
  x = clamp(x, -87.0f, 88.0f);
  const float n = rint(mul(x, 1.44269504088896341f));
  float r = fma(-n, 0.693145751953125f, x);       // ln2 high part (exact product)
  r = fma(-n, 1.42860682030941723212e-06f, r);    // ln2 low part
  float p = 1.98412698412698413e-04f;             // 1/7!
  p = fma(p, r, 1.38888888888888889e-03f);        // 1/6!
  p = fma(p, r, 8.33333333333333333e-03f);        // 1/5!
  p = fma(p, r, 4.16666666666666667e-02f);        // 1/4!
  p = fma(p, r, 1.66666666666666667e-01f);        // 1/3!
  p = fma(p, r, 0.5f);
  p = fma(p, r, 1.0f);
  p = fma(p, r, 1.0f);
  const int ni = static_cast<int>(n);
  // 2^n split in two factors so n down to -126 and up to 127 stay exact.
  const int n1 = ni / 2;
  return mul(mul(p, exp2i(n1)), exp2i(ni - n1));
}

// ln x for finite x > 0 (x <= 0 returns -88, never NaN): x = m 2^e with
// m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f), z = s^2,
// R = z (2/3 + 2/5 z + 2/7 z^2 + 2/9 z^3 + 2/11 z^4), so ln m = 2 atanh(s) =
// 2s + sR, evaluated as f + (s (f^2/2 + R) - f^2/2) (fdlibm's form, using
// 2s = f - sf): the rounding errors of s and of the series only reach the
// small correction term, so the result is within 1 ulp (checked exhaustively
// over all positive floats).
KVTILE_HOST_DEVICE float log(float x) {
  if (!(x > 0.0f)) return -88.0f;
  std::uint32_t ix = float_bits(x);
  int e = 0;
  if (ix < 0x00800000u) {  // subnormal: scale into the normal range exactly
    x = mul(x, 16777216.0f);
    ix = float_bits(x);
    e = -24;
  }
  // ix < 2^31 (x > 0), so the signed difference is exact; its exponent field
  // is e of x = m 2^e with m in [sqrt(1/2), sqrt(2)).
  const std::int32_t d = static_cast<std::int32_t>(ix) - 0x3f3504f3;
  e += d >> 23;
  ix = static_cast<std::uint32_t>(d);
  const float m = float_from_bits((ix & 0x007fffffu) + 0x3f3504f3u);
  const float f = sub(m, 1.0f);               // exact (Sterbenz)
  const float s = div(f, add(f, 2.0f));
  const float z = mul(s, s);
  float p = 0.181818181818181818f;           // 2/11
  p = fma(p, z, 0.222222222222222222f);      // 2/9
  p = fma(p, z, 0.285714285714285714f);      // 2/7
  p = fma(p, z, 0.4f);                       // 2/5
  p = fma(p, z, 0.666666666666666667f);      // 2/3
  const float r = mul(p, z);
  const float hfsq = mul(mul(f, f), 0.5f);
  const float lnm = add(f, fma(s, add(hfsq, r), -hfsq));
  const float ef = static_cast<float>(e);
  return fma(ef, 0.693147182464599609375f, fma(ef, -1.9046542999e-09f, lnm));
}

}  // namespace detail
KVTILE_NAMESPACE_END
