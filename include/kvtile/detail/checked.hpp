// kvtile/detail/checked.hpp: checked arithmetic for size computations. Every
// byte count or element count built from caller-supplied sizes goes through
// these, so an overflow is reported (the caller returns invalid_argument)
// instead of wrapping (or being undefined) before a check runs.
//
//   std::int64_t bytes;
//   if (!detail::checked_mul(n, record_bytes, bytes)) return status::invalid_argument;
#pragma once

#include <type_traits>

#include "../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

// Largest value of integer type T (no std::numeric_limits: callable from device code without relaxed constexpr).
template <class T>
KVTILE_HOST_DEVICE constexpr T int_max() {
  if constexpr (std::is_signed_v<T>)
    return static_cast<T>(~(static_cast<std::make_unsigned_t<T>>(1) << (sizeof(T) * 8 - 1)));
  else
    return static_cast<T>(~static_cast<T>(0));
}

// out = a * b for non-negative a, b of one integer type. False (out unchanged)
// when an operand is negative or the product does not fit in T.
template <class T>
KVTILE_HOST_DEVICE bool checked_mul(T a, T b, T& out) {
  static_assert(std::is_integral_v<T>, "checked_mul takes integers");
  if constexpr (std::is_signed_v<T>)
    if (a < 0 || b < 0) return false;
  if (a != 0 && b > int_max<T>() / a) return false;
  out = static_cast<T>(a * b);
  return true;
}

// out = a + b for non-negative a, b of one integer type. False (out unchanged)
// when an operand is negative or the sum does not fit in T.
template <class T>
KVTILE_HOST_DEVICE bool checked_add(T a, T b, T& out) {
  static_assert(std::is_integral_v<T>, "checked_add takes integers");
  if constexpr (std::is_signed_v<T>)
    if (a < 0 || b < 0) return false;
  if (b > int_max<T>() - a) return false;
  out = static_cast<T>(a + b);
  return true;
}

// The product of several non-negative factors (checked_mul in turn).
template <class T, class... Rest>
KVTILE_HOST_DEVICE bool checked_product(T& out, T first, Rest... rest) {
  T acc = first;
  if constexpr (std::is_signed_v<T>)
    if (acc < 0) return false;
  bool ok = true;
  ((ok = ok && checked_mul(acc, static_cast<T>(rest), acc)), ...);
  if (ok) out = acc;
  return ok;
}

}  // namespace detail
KVTILE_NAMESPACE_END
