// kvtile/device/warp/warp_fwht.cuh: the device FWHT, one routine for every
// register layout in which lanes hold a line, in the host's operation order
// (rotation/hadamard.hpp, detail::fwht_unnormalized: stages h = 1, 2, ..., D/2,
// butterfly (a, b) -> (a + b, a - b)), so each value is the host's, bit for bit.
//
// Layout: P consecutive lanes (P a power of two <= 32; a warp holds 32 / P
// lines) hold a line of N * P values; lane p = lane % P holds register k =
// i + LO q as element i + LO (p + P q), i < LO. Stages h < LO run in
// registers, LO <= h < LO P across lanes (__shfl_xor_sync, every lane of the
// warp must call), h >= LO P in registers again, each stage in host order.
//   strided (element lane + 32 j): P = 32, LO = 1: warp_fwht_unnormalized
//     (codec loaders, rotate_to_half, block decoder, attention query rows);
//   blocked (element E lane + e): P = 32, LO = E (attention combine);
//   chunked (element 8 (p + P q) + i, v[q][i]): P = D / 32, LO = 8
//     (dequantize_pages).
// A lane stage (partner value o, own value x) computes, by LaneOp:
//  * select: add(x, o) in the lane holding a, sub(o, x) in the one holding b
//    (the host's add / sub; the lane's half is a predicate, no register);
//  * signed_fma: fma(x, s, o), s = +1 / -1: x s is exact, so this is one
//    rounding of add / sub's exact value, the same bits (signed zeros
//    included) in one instruction, but the signs take registers (the
//    compiler may keep them live across the caller: the 64-register encode
//    kernels then spill);
//  * signed_fma_local: signed_fma with each stage's sign built from the lane
//    id in the call (a volatile read of %laneid, so it is not hoisted):
//    two integer instructions per stage and call, no register held outside.
// All give the host's bits; the choice is register pressure against
// instructions.
// CUDA only (.cuh).
#pragma once

#include "../../config.hpp"
#include "../../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

namespace fwht_detail {
// Register stages h = H0, 2 H0, ... < H1 over register index bits (the pairs
// of a stage are independent: their order is free).
template <int H0, int H1, int N>
KVTILE_DEVICE void register_stages(float (&v)[N]) {
#pragma unroll
  for (int h = H0; h < H1; h *= 2)
#pragma unroll
    for (int k = 0; k < N; ++k)
      if ((k & h) == 0) {
        const float a = v[k], b = v[k + h];
        v[k] = ::kvtile::detail::add(a, b);
        v[k + h] = ::kvtile::detail::sub(a, b);
      }
}
}  // namespace fwht_detail

enum class fwht_lane_op { select, signed_fma, signed_fma_local };

// Unnormalized FWHT of the line in v (layout above), host stage order.
template <int P, int LO, fwht_lane_op LaneOp = fwht_lane_op::select, int N>
KVTILE_DEVICE void lane_fwht_unnormalized(float (&v)[N]) {
  static_assert(LO >= 1 && (LO & (LO - 1)) == 0 && N % LO == 0 && ((N / LO) & (N / LO - 1)) == 0,
                "lane_fwht: LO and N / LO must be powers of two");
  static_assert(P >= 1 && P <= 32 && (P & (P - 1)) == 0, "lane_fwht: P must be a power of two <= 32");
  // h < LO: register bits of i (k & h == i & h).
  fwht_detail::register_stages<1, LO>(v);
  // LO <= h < LO P: lane bit m; the partner lane ^ m holds the same registers.
  int lane;
  if constexpr (LaneOp == fwht_lane_op::signed_fma_local) asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  else lane = static_cast<int>(threadIdx.x & 31u);
#pragma unroll
  for (int m = 1, b = 0; m < P; m *= 2, ++b) {
    const bool high = (lane & m) != 0;
    // +1 / -1 with the sign bit taken from lane bit b (signed_fma_local): one
    // shift and one LOP3 per stage
    const float sign_local =
        __uint_as_float(((static_cast<unsigned>(lane) << (31 - b)) & 0x80000000u) | 0x3f800000u);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float o = __shfl_xor_sync(0xffffffffu, v[k], m);
      if constexpr (LaneOp == fwht_lane_op::signed_fma) v[k] = ::kvtile::detail::fma(v[k], high ? -1.0f : 1.0f, o);
      else if constexpr (LaneOp == fwht_lane_op::signed_fma_local) v[k] = ::kvtile::detail::fma(v[k], sign_local, o);
      else v[k] = high ? ::kvtile::detail::sub(o, v[k]) : ::kvtile::detail::add(v[k], o);
    }
  }
  // h >= LO P: register bits of q (register stride LO m).
  fwht_detail::register_stages<LO, N>(v);
}

// Two-dimensional registers v[q][i] (register k = i + LO q), e.g. chunks of 8.
template <int P, fwht_lane_op LaneOp = fwht_lane_op::select, int HI, int LO>
KVTILE_DEVICE void lane_fwht_unnormalized(float (&v)[HI][LO]) {
  float f[HI * LO];
#pragma unroll
  for (int q = 0; q < HI; ++q)
#pragma unroll
    for (int i = 0; i < LO; ++i) f[i + LO * q] = v[q][i];
  lane_fwht_unnormalized<P, LO, LaneOp>(f);
#pragma unroll
  for (int q = 0; q < HI; ++q)
#pragma unroll
    for (int i = 0; i < LO; ++i) v[q][i] = f[i + LO * q];
}

// Unnormalized FWHT of the warp's D = 32 J values in the strided layout
// (element lane + 32 j in v[j]): stages h < 32 by shuffles, h >= 32 lane-local.
template <int J>
KVTILE_DEVICE void warp_fwht_unnormalized(float (&v)[J]) {
  lane_fwht_unnormalized<32, 1>(v);
}

}  // namespace device
KVTILE_NAMESPACE_END
