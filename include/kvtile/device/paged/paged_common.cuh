// kvtile/device/paged/paged_common.cuh: what the paged kernels share.
//
// What a paged record is. The paged cache keeps tokens that are not yet in a
// complete tile in an fp16 tail, ROTATED (paged_cache.hpp). When a tile
// completes, its record is encoded from those fp16 rotated values, whether the
// tokens came one by one (append) or many at once (prefill): prefill rounds its
// rotated tokens to fp16 exactly as append does. So for every page
//   record = paged_record_codec<Codec>::encode(round_fp16(rotate(tokens)))
// where paged_record_codec is Codec with the identity rotation: the records do
// not depend on how the tokens arrived, and the host model in the tests uses
// that codec on the host.
//
// rotate_to_half (one token, one warp): x -> NaN/Inf replaced by 0 (flag
// non_finite) -> Codec's rotation -> round to fp16, saturating at +-65504
// (flag saturated when |rotated| > 65504; a NaN from Inf - Inf cannot occur
// because inputs are finite after replacement, but a bf16 input near 3e38 can
// overflow the fp32 sum: such values also saturate).
//
// Per-sequence flags (optional int32 array, atomicOr): the paged_flag bits.
#pragma once

#include "../../config.hpp"

#include <cstdint>
#include <type_traits>

#include "../../codec/tile_codec.hpp"
#include "../../paged/paged_cache.hpp"
#include "../../paged/paged_record.hpp"
#include "../block/block_tile_codec.cuh"
#include "../detail/launch.cuh"
#include "../warp/warp_primitives.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

#if defined(__CUDACC__)
namespace detail {
// element_from_float<half_t>(lo) | element_from_float<half_t>(hi) << 16, in
// one instruction (F2FP.SATFINITE.F16.F32.PACK_AB). cvt.rn rounds each element
// to nearest even as __float2half_rn does; .satfinite then maps a result
// beyond the finite range (Inf) to +-65504 (MAX_NORM) with its sign, and
// keeps NaN a NaN (the canonical 0x7fff). Saturating after the rounding gives
// the same bits as element_from_float's clamp before it: every float in
// (65504, 65520) rounds to 65504 anyway, larger ones (and Inf) overflow and
// saturate to 65504. (Callers pass no NaN: decoded records, checked tokens.)
// PTX before 8.1 (CUDA 12.0) has no .satfinite here: cvt.rn, then the clamp
// in half precision (max/min.NaN keep NaN), same bits, 2 more instructions.
KVTILE_DEVICE std::uint32_t half2_bits(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  std::uint32_t h;
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 1)
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(hi), "f"(lo));  // first operand -> upper half
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(hi), "f"(lo));
  asm("max.NaN.f16x2 %0, %0, %1;" : "+r"(h) : "r"(0xfbfffbffu));  // -65504
  asm("min.NaN.f16x2 %0, %0, %1;" : "+r"(h) : "r"(0x7bff7bffu));  // +65504
#endif
  return h;
#else
  return static_cast<std::uint32_t>(detail::element_from_float<half_t>(lo).bits()) |
         (static_cast<std::uint32_t>(detail::element_from_float<half_t>(hi).bits()) << 16);
#endif
}
}  // namespace detail

// One warp, one token: x[j] = element lane + 32 j (any input type) -> rotated
// fp16 in h[j]; returns this LANE's paged_flag bits. The reference path: the
// rule of paged_record.hpp (paged_sanitize, rotation, paged_saturate_to_half,
// as host_rotate_to_half), the FWHT's lane stages in the signed_fma_local form
// (same bits).
template <class Rotation, int J, class T>
KVTILE_DEVICE unsigned rotate_to_half_lane_exact(const T (&x)[J], half_t (&h)[J]) {
  float v[J];
  unsigned f = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) v[j] = paged_sanitize(detail::element_to_float(x[j]), f);
  warp_rotate_forward<Rotation, fwht_lane_op::signed_fma_local>(v);
#pragma unroll
  for (int j = 0; j < J; ++j) h[j] = paged_saturate_to_half(v[j], f);
  return f;
}

// The same result (h and flags), faster where nothing needs replacing: the
// token is rotated as loaded, and if every rotated value of the warp is
// finite and within +-65504, that IS the reference result (replacing
// non-finite inputs and clamping would have changed nothing, and the flags
// are 0), rounded to fp16 two at a time (detail::half2_bits). The test is
// exact because the device rotation is the identity (a NaN or Inf input stays
// in place) or an FWHT times signs and 1/sqrt(D) (every rotated value is a
// +-1 combination of ALL inputs, so a NaN or Inf input makes every rotated
// value NaN or +-Inf): the comparison below fails for those. Otherwise (rare:
// non-finite input, saturation) the warp takes the reference path.
template <class Rotation, int J, class T>
KVTILE_DEVICE unsigned rotate_to_half_lane(const T (&x)[J], half_t (&h)[J]) {
  static_assert(J % 2 == 0, "rotate_to_half_lane: D = 32 J with J even");
  float v[J];
#pragma unroll
  for (int j = 0; j < J; ++j) v[j] = detail::element_to_float(x[j]);
  warp_rotate_forward<Rotation, fwht_lane_op::signed_fma_local>(v);
  bool in_range = true;
#pragma unroll
  for (int j = 0; j < J; ++j) in_range &= fabsf(v[j]) <= half_t::max_finite;  // false for NaN
  if (__all_sync(full_warp_mask, in_range)) {  // warp-uniform
#pragma unroll
    for (int j = 0; j < J; j += 2) {
      const std::uint32_t d = detail::half2_bits(v[j], v[j + 1]);
      h[j] = half_t::from_bits(static_cast<std::uint16_t>(d & 0xffffu));
      h[j + 1] = half_t::from_bits(static_cast<std::uint16_t>(d >> 16));
    }
    return 0u;
  }
  return rotate_to_half_lane_exact<Rotation>(x, h);
}

// One warp: token src[0..D) -> rotated fp16 in h[j] = element lane + 32 j;
// returns the warp's paged_flag bits (in every lane).
template <class Rotation, int J, class T>
KVTILE_DEVICE unsigned rotate_to_half(const T* src, half_t (&h)[J]) {
  T x[J];
  const int lane = lane_id();
#pragma unroll
  for (int j = 0; j < J; ++j) x[j] = src[lane + 32 * j];
  return __reduce_or_sync(full_warp_mask, rotate_to_half_lane<Rotation>(x, h));
}

// Loader for one paged tile (tile index `tile` of a sequence): token positions
// < in_start come from the fp16 tail (already rotated); positions >= in_start
// from the input (rotated and rounded to fp16 here). Two-phase (fetch, then
// finish: block_tile_codec::load issues the fetches of several tokens before
// the first finish, so their global loads overlap). The paged_flag bits of
// the rotated tokens collect per lane in `seen`; flush() reports them
// (block_tile_codec::load calls it after its loads; other callers likewise).
// Input positions are below in_start + 2^31 and in_stride < 2^31 (the
// launchers' bounds), so a row address is one 32 x 32 -> 64-bit multiply.
template <class Rotation, class T>
struct paged_tile_loader {
  const half_t* tail;   // [G][D] of this (seq, head)
  const T* input;       // token at position p: input + (p - in_start) * in_stride
  std::int64_t in_stride;
  std::int64_t in_start;
  std::int64_t tile_pos;  // position of token 0 of the tile
  int D;
  int G;
  std::int32_t* flags;        // optional per-sequence flag word of this sequence
  mutable unsigned seen = 0;  // paged_flag bits of this lane's tokens, not yet reported

  using raw_type = std::uint16_t;  // bits of one input element (T or the tail's half_t)
  // Every value is a half value (tail, or rounded to fp16 here): block_tile_codec's half_value_loader.
  static constexpr bool half_values = true;
  template <int J>
  KVTILE_DEVICE void fetch(int g, raw_type (&r)[J]) const {
    const std::int64_t p = tile_pos + g;
    const int lane = lane_id();
    if (p < in_start) {
      const half_t* row = tail + static_cast<int>(p % G) * (32 * J);
#pragma unroll
      for (int j = 0; j < J; ++j) r[j] = row[lane + 32 * j].bits();
    } else {
      const T* row = input + static_cast<std::int64_t>(static_cast<std::int32_t>(p - in_start)) *
                                 static_cast<std::int32_t>(in_stride);
#pragma unroll
      for (int j = 0; j < J; ++j) r[j] = row[lane + 32 * j].bits();
    }
  }
  template <int J>
  KVTILE_DEVICE unsigned finish(int g, const raw_type (&r)[J], float (&v)[J]) const {
    if (tile_pos + g < in_start) {
#pragma unroll
      for (int j = 0; j < J; ++j) v[j] = half_t::from_bits(r[j]).to_float();
      return load_ok;
    }
    T x[J];
    half_t h[J];
#pragma unroll
    for (int j = 0; j < J; ++j) x[j] = T::from_bits(r[j]);
    seen |= rotate_to_half_lane<Rotation>(x, h);
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = h[j].to_float();
    return load_ok;
  }
  template <int J>
  KVTILE_DEVICE unsigned operator()(int g, float (&v)[J]) const {
    raw_type r[J];
    fetch(g, r);
    return finish(g, r, v);
  }
  KVTILE_DEVICE void flush() const {
    if (seen && flags) atomicOr(flags, static_cast<int>(seen));
    seen = 0;
  }
};

// Lowest compute capability the codec and paged kernels run on (their
// compute_80 PTX assembles for sm_80; the GPU script runs their tests from it
// by JIT). The launchers return unsupported_arch below it.
inline constexpr int paged_min_cc = 80;
#endif

}  // namespace device
KVTILE_NAMESPACE_END
