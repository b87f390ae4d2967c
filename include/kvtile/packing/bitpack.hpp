// kvtile/packing/bitpack.hpp: code packing. Element i of a row goes to byte
// i / (8 / b) at bit shift (i % (8 / b)) * b: lowest index in the lowest bits.
#pragma once

#include <cstdint>

#include "../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace detail {

template <int Bits>
KVTILE_HOST_DEVICE std::uint32_t get_code(const std::uint8_t* row, int i) {
  constexpr int per_byte = 8 / Bits;
  constexpr std::uint32_t mask = (1u << Bits) - 1u;
  return (static_cast<std::uint32_t>(row[i / per_byte]) >> ((i % per_byte) * Bits)) & mask;
}

// Packs n codes (each < 2^Bits) into n * Bits / 8 bytes; n a multiple of 8 / Bits.
template <int Bits>
KVTILE_HOST_DEVICE void pack_row(const std::uint8_t* codes, int n, std::uint8_t* out) {
  constexpr int per_byte = 8 / Bits;
  for (int b = 0; b < n / per_byte; ++b) {
    std::uint32_t v = 0;
    for (int j = 0; j < per_byte; ++j) v |= static_cast<std::uint32_t>(codes[b * per_byte + j]) << (j * Bits);
    out[b] = static_cast<std::uint8_t>(v);
  }
}

}  // namespace detail
KVTILE_NAMESPACE_END
