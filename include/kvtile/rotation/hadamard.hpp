// kvtile/rotation/hadamard.hpp: orthonormal Sylvester Hadamard rotation (method.md section 1).
//
// forward(v) computes v H (H = S_D / sqrt(D), symmetric, H H = I) in place with
// the fast Walsh-Hadamard transform: stages h = 1, 2, 4, ..., D/2, each
// butterfly (a, b) -> (a + b, a - b), then one multiply by 1/sqrt(D) (exact for
// D = 64 and 256). This order is the contract the device code follows.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../detail/bits.hpp"

KVTILE_NAMESPACE_BEGIN

namespace detail {
template <int D>
KVTILE_HOST_DEVICE void fwht_unnormalized(float* v) {
  for (int h = 1; h < D; h *= 2)
    for (int i = 0; i < D; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = add(a, b);
        v[j + h] = sub(a, b);
      }
}

template <int D>
struct hadamard_norm;
template <> struct hadamard_norm<64> { static constexpr float value = 0.125f; };
template <> struct hadamard_norm<128> { static constexpr float value = 0.0883883476483184405f; };
template <> struct hadamard_norm<256> { static constexpr float value = 0.0625f; };

KVTILE_HOST_DEVICE std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace detail

// v -> v H, the default rotation. Self-inverse.
struct hadamard {
  static constexpr bool is_identity = false;
  static constexpr const char* name = "hadamard";

  // Sign applied to channel d after the transform (all +1 for plain Sylvester).
  KVTILE_HOST_DEVICE static float sign(int) { return 1.0f; }

  template <int D>
  KVTILE_HOST_DEVICE static void forward(float* v) {
    detail::fwht_unnormalized<D>(v);
    for (int i = 0; i < D; ++i) v[i] = detail::mul(v[i], detail::hadamard_norm<D>::value);
  }
  template <int D>
  KVTILE_HOST_DEVICE static void inverse(float* v) {
    forward<D>(v);
  }
};

// v -> v H diag(s), s in {+1,-1}^D drawn from Seed (QuaRot-style); inverse is
// y -> y diag(s) H. Sign flips are exact, so this costs nothing in accuracy.
template <std::uint64_t Seed>
struct randomized_hadamard {
  static constexpr bool is_identity = false;
  static constexpr const char* name = "randomized_hadamard";

  KVTILE_HOST_DEVICE static float sign(int d) {
    return (detail::splitmix64(Seed ^ (0x5bd1e995ull * static_cast<std::uint64_t>(d + 1))) >> 63) ? -1.0f : 1.0f;
  }
  template <int D>
  KVTILE_HOST_DEVICE static void forward(float* v) {
    hadamard::forward<D>(v);
    for (int i = 0; i < D; ++i) v[i] = v[i] * sign(i);
  }
  template <int D>
  KVTILE_HOST_DEVICE static void inverse(float* v) {
    for (int i = 0; i < D; ++i) v[i] = v[i] * sign(i);
    hadamard::forward<D>(v);
  }
};

KVTILE_NAMESPACE_END
