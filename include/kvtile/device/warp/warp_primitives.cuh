// kvtile/device/warp/warp_primitives.cuh: warp-level building blocks of the
// device codec, each reproducing a host operation bit for bit.
//
// Layout convention ("strided"): a warp holds a line of n = 32 * J values with
// element i = lane + 32 * j in register v[j]. In that layout
//  * the canonical halving-tree sum of detail/reduce.hpp is: strides >= 32
//    lane-local (j-halving), strides 16..1 as __shfl_xor_sync butterflies
//    (IEEE addition is commutative, so both lanes of a butterfly hold the value
//    the host computes at the lower index, and every lane ends with the sum);
//  * the FWHT stages h = 1, 2, 4, ... of rotation/hadamard.hpp are shuffles for
//    h < 32 and lane-local butterflies for h >= 32, in the host's stage order;
//  * min/max follow detail::min_max exactly, including which zero (+0 or -0)
//    wins: the host keeps the FIRST element (lowest index) that reaches the
//    extreme, so a zero extreme takes the sign of the first zero.
// CUDA only (.cuh).
#pragma once

#include <climits>
#include <cstdint>

#include "../../config.hpp"
#include "../../detail/bits.hpp"
#include "../../rotation/hadamard.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

// The device layer's internals (kvtile::device::detail) also see the host
// layer's (kvtile::detail: bit casts, canonical arithmetic), so device code
// names both as detail::.
namespace detail {
using namespace ::kvtile::detail;
}  // namespace detail

inline constexpr unsigned full_warp_mask = 0xffffffffu;

KVTILE_DEVICE int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

// Canonical halving-tree sum of the 32*J values of the warp (destroys v).
// Every lane returns the sum.
template <int J>
KVTILE_DEVICE float warp_tree_sum(float (&v)[J]) {
#pragma unroll
  for (int h = J / 2; h >= 1; h /= 2)
#pragma unroll
    for (int j = 0; j < h; ++j) v[j] = detail::add(v[j], v[j + h]);
  float s = v[0];
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) s = detail::add(s, __shfl_xor_sync(full_warp_mask, s, o));
  return s;
}

// detail::canonical_std over the warp's 32*J values (unbiased, canonical order).
template <int J>
KVTILE_DEVICE float warp_canonical_std(const float (&x)[J]) {
  constexpr int n = 32 * J;
  float t[J];
#pragma unroll
  for (int j = 0; j < J; ++j) t[j] = x[j];
  const float mean = detail::div(warp_tree_sum(t), static_cast<float>(n));
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float d = detail::sub(x[j], mean);
    t[j] = detail::mul(d, d);
  }
  return detail::sqrt(detail::div(warp_tree_sum(t), static_cast<float>(n - 1)));
}

// Max / min of one value per lane (order-independent: use only where no
// signed-zero tie can differ, e.g. non-negative values that are never -0).
KVTILE_DEVICE float warp_fmax(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = detail::fmax(v, __shfl_xor_sync(full_warp_mask, v, o));
  return v;
}
KVTILE_DEVICE float warp_fmin(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = detail::fmin(v, __shfl_xor_sync(full_warp_mask, v, o));
  return v;
}

namespace detail {
KVTILE_DEVICE float float_from_order_key(std::int32_t k, std::uint32_t zero_sign) {
  if (k == 0) return detail::float_from_bits(zero_sign);
  return k > 0 ? detail::float_from_bits(static_cast<std::uint32_t>(k))
               : detail::float_from_bits(0x80000000u | static_cast<std::uint32_t>(-k));
}
// Sign bit of the first (lowest index) element of the line whose value is zero.
template <int J>
KVTILE_DEVICE std::uint32_t first_zero_sign(const float (&x)[J]) {
  const int lane = lane_id();
  unsigned first = 0xffffffffu;
  std::uint32_t sign = 0u;
#pragma unroll
  for (int j = J - 1; j >= 0; --j) {
    const std::uint32_t b = detail::float_bits(x[j]);
    if ((b & 0x7fffffffu) == 0u) {
      first = static_cast<unsigned>(lane + 32 * j);
      sign = b & 0x80000000u;
    }
  }
  const unsigned best = __reduce_min_sync(full_warp_mask, first);
  return __shfl_sync(full_warp_mask, sign, static_cast<int>(best & 31u));
}
}  // namespace detail

// detail::min_max over the warp's line (NaN-free input): bit-identical to the
// host's sequential first-wins scan. Integer keys, so also exact under -ftz.
template <int J>
KVTILE_DEVICE void warp_line_min_max(const float (&x)[J], float& lo, float& hi) {
  std::int32_t kmin = INT_MAX, kmax = INT_MIN;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const std::int32_t k = detail::float_order_key(detail::float_bits(x[j]));
    kmin = k < kmin ? k : kmin;
    kmax = k > kmax ? k : kmax;
  }
  kmin = __reduce_min_sync(full_warp_mask, kmin);
  kmax = __reduce_max_sync(full_warp_mask, kmax);
  std::uint32_t zs = 0u;
  if (kmin == 0 || kmax == 0) zs = detail::first_zero_sign(x);  // warp-uniform branch
  lo = detail::float_from_order_key(kmin, zs);
  hi = detail::float_from_order_key(kmax, zs);
}

// Unnormalized FWHT of the warp's D = 32*J values, host stage order
// (detail::fwht_unnormalized): stages h = 1..16 by shuffles, h >= 32 lane-local.
template <int J>
KVTILE_DEVICE void warp_fwht_unnormalized(float (&v)[J]) {
  const int lane = lane_id();
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    const bool high = (lane & h) != 0;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float o = __shfl_xor_sync(full_warp_mask, v[j], h);
      v[j] = high ? detail::sub(o, v[j]) : detail::add(v[j], o);
    }
  }
#pragma unroll
  for (int hj = 1; hj < J; hj *= 2)
#pragma unroll
    for (int j = 0; j < J; ++j)
      if ((j & hj) == 0) {
        const float a = v[j], b = v[j + hj];
        v[j] = detail::add(a, b);
        v[j + hj] = detail::sub(a, b);
      }
}

// Rotation::forward / inverse on the warp's D = 32*J values (strided layout).
// Supports identity, hadamard and randomized_hadamard<Seed> (forward: FWHT,
// 1/sqrt(D), sign; inverse: sign, FWHT, 1/sqrt(D)), exactly as the host.
template <class Rotation, int J>
KVTILE_DEVICE void warp_rotate_forward(float (&v)[J]) {
  if constexpr (!Rotation::is_identity) {
    constexpr int D = 32 * J;
    warp_fwht_unnormalized(v);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      v[j] = detail::mul(v[j], detail::hadamard_norm<D>::value);
      v[j] = v[j] * Rotation::sign(lane_id() + 32 * j);
    }
  }
}
template <class Rotation, int J>
KVTILE_DEVICE void warp_rotate_inverse(float (&v)[J]) {
  if constexpr (!Rotation::is_identity) {
    constexpr int D = 32 * J;
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = v[j] * Rotation::sign(lane_id() + 32 * j);
    warp_fwht_unnormalized(v);
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = detail::mul(v[j], detail::hadamard_norm<D>::value);
  }
}

}  // namespace device
KVTILE_NAMESPACE_END
