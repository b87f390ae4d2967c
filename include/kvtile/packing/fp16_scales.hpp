// kvtile/packing/fp16_scales.hpp: the public KVarN vLLM record layout, byte for byte
// (method.md section 6), for interoperability:
//   [K codes][a_K fp16 x D][z_K fp16 x D][t_K fp16 x G]
//   [V codes][c_V fp16 x D][a_V fp16 x G][z_V fp16 x G]   padded to 8 bytes.
// Codes use the same bit order as fp8_scales. No vector scales.
#pragma once

#include "../config.hpp"

#include <cstddef>

#include "scale_format.hpp"

KVTILE_NAMESPACE_BEGIN

struct fp16_scales {
  static constexpr const char* name = "fp16_scales";
  using scale_format = detail::fp16_vector;

  template <class Config>
  struct layout {
    static constexpr std::size_t D = Config::head_dim;
    static constexpr std::size_t G = Config::tile_tokens;
    static constexpr std::size_t vector_scales = static_cast<std::size_t>(-1);  // none
    static constexpr std::size_t key_codes = 0;
    static constexpr std::size_t key_scale = Config::key_code_bytes;
    static constexpr std::size_t key_zero = key_scale + 2 * D;
    static constexpr std::size_t key_token_scale = key_zero + 2 * D;
    static constexpr std::size_t value_codes = key_token_scale + 2 * G;
    static constexpr std::size_t value_channel_scale = value_codes + Config::value_code_bytes;
    static constexpr std::size_t value_scale = value_channel_scale + 2 * D;
    static constexpr std::size_t value_zero = value_scale + 2 * G;
    static constexpr std::size_t unpadded = value_zero + 2 * G;
    static constexpr std::size_t bytes = (unpadded + 7) / 8 * 8;
    static_assert(bytes % 16 == 0, "every supported fp16_scales record is a multiple of 16 bytes");
  };
};

KVTILE_NAMESPACE_END
