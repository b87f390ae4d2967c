// kvtile/device/block/tile_loaders.cuh: what block_tile_codec::encode_with
// reads a tile's tokens with: the load_* flags a loader returns,
// global_token_loader (engine-layout input; what encode uses), and the traits
// by which a loader asks for the two-phase load (two_phase_loader) or the
// reciprocal scale stage (half_value_loader). block_tile_codec.cuh includes it.
#pragma once

#include "../../config.hpp"

#include <cstddef>
#include <type_traits>

#include "../../codec/element.hpp"
#include "../../codec/encode_rules.hpp"
#include "../warp/warp_primitives.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// Per-token flags a loader reports (load_non_finite / load_out_of_range are
// detail::sanitize_input's flags).
enum : unsigned {
  load_ok = detail::input_ok,
  load_non_finite = detail::input_non_finite,
  load_out_of_range = detail::input_out_of_range,
  load_saturated = 4u
};

// Loader for engine-layout input: token g at src + g * stride, element type T;
// NaN/Inf -> 0 (flagged), |x| > 2^48 flagged out of range, then Rotation.
template <class T, class Rotation>
struct global_token_loader {
  const T* src;
  std::ptrdiff_t stride;
  template <int J>
  KVTILE_DEVICE unsigned operator()(int g, float (&v)[J]) const {
    const T* row = src + static_cast<std::ptrdiff_t>(g) * stride;
    const int lane = lane_id();
    unsigned f = load_ok;
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = detail::sanitize_input(detail::element_to_float(row[lane + 32 * j]), f);
    warp_rotate_forward<Rotation, fwht_lane_op::signed_fma_local>(v);
    return f;
  }
};

// A loader with raw_type, fetch(g, raw_type (&)[J]), finish(g, raw, float
// (&)[J]) and flush() (paged_tile_loader) is called in two phases by load():
// the fetches of a group of tokens, then their finishes (the global loads
// overlap); flush() after the last (every thread).
template <class L, class = void>
struct two_phase_loader : std::false_type {};
template <class L>
struct two_phase_loader<L, std::void_t<typename L::raw_type>> : std::true_type {};

// A loader whose values are all half-precision values (`static constexpr bool
// half_values = true`: paged_tile_loader, fp16 tails and tokens rounded to
// fp16) lets the scale stage divide by a reciprocal (detail::div_half_by: the
// same bits as the division for such values).
template <class L, class = void>
struct half_value_loader : std::false_type {};
template <class L>
struct half_value_loader<L, std::enable_if_t<L::half_values>> : std::true_type {};

}  // namespace device
KVTILE_NAMESPACE_END
