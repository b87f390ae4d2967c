// kvtile/codec/encode_rules.hpp: the encode decisions of a tile side, one
// KVTILE_HOST_DEVICE function each, called by the host codec (tile_codec.hpp)
// and by the block codec (device/block/block_tile_codec.cuh), so a record's
// bytes do not depend on where it was encoded. docs/format.md "Encoding rule"
// states them; the row step and zero are rounding/asymmetric_rtn.hpp's.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"
#include "../numeric/half.hpp"

KVTILE_NAMESPACE_BEGIN

// Largest input magnitude encode accepts (keeps every intermediate finite).
inline constexpr float max_input_magnitude = 281474976710656.0f;  // 2^48
// Upper bound of |Y| = |X / s^|: leaves margin below fp16's 65504 for the zero points.
inline constexpr float max_normalized_magnitude = 65280.0f;

namespace detail {

// Per-element input flags (a tile's flags are the OR over its elements).
enum : unsigned { input_ok = 0u, input_non_finite = 1u, input_out_of_range = 2u };

// Every writer's first step (the codec's encode, the paged writers before
// their rotation): NaN/Inf become 0, setting `replaced`; each layer reports a
// replacement as a warning (status::non_finite_input).
KVTILE_HOST_DEVICE float replace_non_finite(float x, bool& replaced) {
  if (!is_finite(x)) {
    replaced = true;
    return 0.0f;
  }
  return x;
}

// One input element as encode uses it: NaN/Inf become 0 (input_non_finite),
// |x| > 2^48 is flagged input_out_of_range (the encode then fails).
KVTILE_HOST_DEVICE float sanitize_input(float x, unsigned& flags) {
  bool replaced = false;
  x = replace_non_finite(x, replaced);
  if (replaced) {
    flags |= input_non_finite;
    return x;
  }
  if (!((x < 0 ? -x : x) <= max_input_magnitude)) flags |= input_out_of_range;
  return x;
}

// The smallest column scale that keeps the column's |X / s^| <= 65280, from
// the column's max |X|: max(max_abs / 65280, FLT_MIN).
KVTILE_HOST_DEVICE float column_scale_lower(float max_abs) {
  return fmax(div(max_abs, max_normalized_magnitude), 1.17549435e-38f);
}

// Stored code of one column (Sinkhorn) scale: the code nearest `want`, raised
// to the smallest code >= lower where it decodes below lower (or is invalid).
// vs is the vector scale from the side's max of max(want, lower) (Format::vector_scale).
// False when no code is large enough.
template <class Format>
KVTILE_HOST_DEVICE bool column_scale_code(float want, float lower, float vs, typename Format::code_type& code) {
  code = Format::nearest(want, vs);
  if (!Format::valid_code(code) || !(Format::decode(code, vs) >= lower))
    if (!Format::round_up(lower, vs, code)) return false;
  return true;
}

}  // namespace detail
KVTILE_NAMESPACE_END
