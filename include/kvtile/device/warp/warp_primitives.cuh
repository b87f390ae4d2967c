// kvtile/device/warp/warp_primitives.cuh: warp-level building blocks of the
// device codec, each reproducing a host operation bit for bit.
//
// Layout convention ("strided"): a warp holds a line of n = 32 * J values with
// element i = lane + 32 * j in register v[j]. In that layout
//  * the canonical halving-tree sum of detail/reduce.hpp is: strides >= 32
//    lane-local (j-halving), strides 16..1 as __shfl_xor_sync butterflies
//    (IEEE addition is commutative, so both lanes of a butterfly hold the value
//    the host computes at the lower index, and every lane ends with the sum);
//  * the FWHT (warp_fwht.cuh, warp_fwht_unnormalized) runs the stages h = 1,
//    2, 4, ... of rotation/hadamard.hpp as shuffles for h < 32 and lane-local
//    butterflies for h >= 32, in the host's stage order;
//  * min/max follow detail::min_max exactly, including which zero (+0 or -0)
//    wins: the host keeps the FIRST element (lowest index) that reaches the
//    extreme, so a zero extreme takes the sign of the first zero.
// CUDA only (.cuh).
#pragma once

#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>

#include <climits>
#include <cstdint>

#include "../../config.hpp"
#include "../../detail/bits.hpp"
#include "../../detail/reduce.hpp"
#include "../../rotation/hadamard.hpp"
#include "warp_fwht.cuh"

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
// Every lane returns the sum. Hand-written: the order decides bytes (CUB's
// WarpReduce pairs in its own order).
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
  const float mean = detail::div_by<n>(warp_tree_sum(t));
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float d = detail::sub(x[j], mean);
    t[j] = detail::mul(d, d);
  }
  return detail::sqrt(detail::div_by<n - 1>(warp_tree_sum(t)));
}

// Max of one non-negative, non-NaN float per lane (never -0: column maxima of
// |x|, steps, scales), in every lane. For such floats the unsigned order of the
// bits is their order, so one redux.sync (__reduce_max_sync) gives the bits of
// the host's detail::fmax chain in any order. (The intrinsic directly:
// cub::WarpReduce leaves the aggregate in lane 0 only.)
KVTILE_DEVICE float warp_max_nonnegative(float v) {
  return detail::float_from_bits(__reduce_max_sync(full_warp_mask, detail::float_bits(v)));
}

// Bits of the warp's minimum of `lo_in` and maximum of `hi_in`, valid in lane
// 0, for non-negative, non-NaN floats that are never -0 (standard deviations:
// unsigned order of the bits is their order, so any pairing gives the same
// result): cub::WarpReduce, one redux.sync each on sm_80+.
KVTILE_DEVICE void warp_min_max_bits_lane0(float lo_in, float hi_in, std::uint32_t& lo, std::uint32_t& hi) {
  using warp_reduce = cub::WarpReduce<std::uint32_t>;
  typename warp_reduce::TempStorage unused;  // WarpReduceShfl: NullType, never accessed
  lo = warp_reduce(unused).Reduce(detail::float_bits(lo_in), ::cuda::minimum<>{});
  hi = warp_reduce(unused).Reduce(detail::float_bits(hi_in), ::cuda::maximum<>{});
}

namespace detail {
// Signed-integer order key of a non-NaN float for the row min / max: a < b
// (as floats) => key(a) < key(b); the bits with the magnitude bits flipped
// for negative values (a shift and a LOP3). -0 maps to -1 and +0 to 0, the
// only keys of zeros (is_zero_key): where an extreme is a zero, its sign is
// the first zero's (first_zero_sign), as in the host's first-wins scan. The
// map is an involution on its image (from_min_max_key).
KVTILE_DEVICE std::int32_t min_max_key(std::uint32_t bits) {
  return static_cast<std::int32_t>(bits ^ (static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31) & 0x7fffffffu));
}
KVTILE_DEVICE bool is_zero_key(std::int32_t k) { return k == 0 || k == -1; }
// The float of an extreme's key; a zero takes zero_sign (the first zero's).
KVTILE_DEVICE float from_min_max_key(std::int32_t k, std::uint32_t zero_sign) {
  if (is_zero_key(k)) return detail::float_from_bits(zero_sign);
  return detail::float_from_bits(static_cast<std::uint32_t>(min_max_key(static_cast<std::uint32_t>(k))));
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
// host's sequential first-wins scan. Integer keys (detail::min_max_key), so
// also exact under -ftz.
// (__reduce_*_sync directly: every lane needs the extremes, CUB's WarpReduce
// returns them in lane 0 only.)
template <int J>
KVTILE_DEVICE void warp_line_min_max(const float (&x)[J], float& lo, float& hi) {
  std::int32_t kmin = INT_MAX, kmax = INT_MIN;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const std::int32_t k = detail::min_max_key(detail::float_bits(x[j]));
    kmin = k < kmin ? k : kmin;
    kmax = k > kmax ? k : kmax;
  }
  kmin = __reduce_min_sync(full_warp_mask, kmin);
  kmax = __reduce_max_sync(full_warp_mask, kmax);
  std::uint32_t zs = 0u;
  if (detail::is_zero_key(kmin) || detail::is_zero_key(kmax)) zs = detail::first_zero_sign(x);  // warp-uniform branch
  lo = detail::from_min_max_key(kmin, zs);
  hi = detail::from_min_max_key(kmax, zs);
}

// Rotation::forward / inverse on the warp's D = 32*J values (strided layout).
// Supports identity, hadamard and randomized_hadamard<Seed> (forward: FWHT,
// 1/sqrt(D), sign; inverse: sign, FWHT, 1/sqrt(D)), exactly as the host.
// LaneOp: the FWHT's lane-stage form (warp_fwht.cuh; same bits either way).
template <class Rotation, fwht_lane_op LaneOp = fwht_lane_op::select, int J>
KVTILE_DEVICE void warp_rotate_forward(float (&v)[J]) {
  if constexpr (!Rotation::is_identity) {
    constexpr int D = 32 * J;
    lane_fwht_unnormalized<32, 1, LaneOp>(v);
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
