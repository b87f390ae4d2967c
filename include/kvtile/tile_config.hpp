// kvtile/tile_config.hpp: compile-time tile shape and bit widths.
#pragma once

#include <cstddef>

#include "config.hpp"

KVTILE_NAMESPACE_BEGIN

namespace detail {
constexpr bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }
constexpr int log2i(int v) { return v <= 1 ? 0 : 1 + log2i(v / 2); }
}  // namespace detail

// The head_dims every codec, kernel and binding supports (the codec's
// Hadamard sizes and the attention kernels' shapes): one list for all layers.
inline constexpr int head_dims[] = {64, 128, 256};
inline constexpr int num_head_dims = static_cast<int>(sizeof(head_dims) / sizeof(head_dims[0]));
constexpr bool is_head_dim(int d) noexcept {
  for (int h : head_dims)
    if (h == d) return true;
  return false;
}

// One tile: one KV head x TileTokens consecutive tokens, HeadDim channels.
// Keys are quantized per channel (rows of XK[D x G]) with KeyBits, values per
// token (rows of XV[G x D]) with ValueBits.
template <int HeadDim, int TileTokens, int KeyBits, int ValueBits>
struct tile_config {
  static_assert(is_head_dim(HeadDim), "head_dim must be 64, 128 or 256 (head_dims)");
  static_assert(TileTokens == 32 || TileTokens == 64 || TileTokens == 128 || TileTokens == 256,
                "tile tokens must be 32, 64, 128 or 256");
  static_assert(KeyBits == 2 || KeyBits == 4 || KeyBits == 8, "key bits must be 2, 4 or 8");
  static_assert(ValueBits == 2 || ValueBits == 4 || ValueBits == 8, "value bits must be 2, 4 or 8");

  static constexpr int head_dim = HeadDim;
  static constexpr int tile_tokens = TileTokens;
  static constexpr int key_bits = KeyBits;
  static constexpr int value_bits = ValueBits;
  static constexpr int elements = HeadDim * TileTokens;  // per K (or V) tile

  static constexpr std::size_t key_code_bytes = static_cast<std::size_t>(elements) * KeyBits / 8;
  static constexpr std::size_t value_code_bytes = static_cast<std::size_t>(elements) * ValueBits / 8;
  // fp16 bytes of one K tile plus one V tile: the unquantized size.
  static constexpr std::size_t fp16_bytes = static_cast<std::size_t>(elements) * 2 * 2;
};

KVTILE_NAMESPACE_END
