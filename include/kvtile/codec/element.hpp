// kvtile/codec/element.hpp: the engine-side element types a codec reads and writes.
#pragma once

#include <type_traits>

#include "../config.hpp"
#include "../numeric/bfloat16.hpp"
#include "../numeric/half.hpp"

KVTILE_NAMESPACE_BEGIN

template <class T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float>;

namespace detail {

template <class T>
KVTILE_HOST_DEVICE float element_to_float(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return v.to_float();
}

// Decoded values are written with round-to-nearest-even; fp16 output saturates
// to +-65504 (a reconstruction may exceed an fp16 input's range by up to half
// a quantization step) so decode never produces Inf.
template <class T>
KVTILE_HOST_DEVICE T element_from_float(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else if constexpr (std::is_same_v<T, half_t>) {
    return half_t(clamp(f, -half_t::max_finite, half_t::max_finite));
  } else {
    return T(f);
  }
}

}  // namespace detail
KVTILE_NAMESPACE_END
