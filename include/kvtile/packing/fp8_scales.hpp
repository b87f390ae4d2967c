// kvtile/packing/fp8_scales.hpp: the default record layout, format version 1.
//
// All scale vectors are E4M3 with one power-of-two fp32 vector scale each;
// zero points are fp16. Byte layout (offsets in docs/format.md):
//   [vector scales: fp32 x 4 = a_K, t_K, c_V, a_V]
//   [a_K e4m3 x D][t_K e4m3 x G][c_V e4m3 x D][a_V e4m3 x G]
//   [z_K fp16 x D][z_V fp16 x G]
//   [K codes: D rows (channels) x G tokens][V codes: G rows (tokens) x D channels]
// Code sections start 16-byte aligned; the record is a multiple of 16 bytes.
#pragma once

#include "../config.hpp"

#include <cstddef>

#include "scale_format.hpp"

KVTILE_NAMESPACE_BEGIN

struct fp8_scales {
  static constexpr const char* name = "fp8_scales";
  using scale_format = detail::e4m3_vector;

  template <class Config>
  struct layout {
    static constexpr std::size_t D = Config::head_dim;
    static constexpr std::size_t G = Config::tile_tokens;
    static constexpr std::size_t vector_scales = 0;  // 4 x fp32
    static constexpr std::size_t key_scale = 16;
    static constexpr std::size_t key_token_scale = key_scale + D;
    static constexpr std::size_t value_channel_scale = key_token_scale + G;
    static constexpr std::size_t value_scale = value_channel_scale + D;
    static constexpr std::size_t key_zero = value_scale + G;
    static constexpr std::size_t value_zero = key_zero + 2 * D;
    static constexpr std::size_t key_codes = value_zero + 2 * G;
    static constexpr std::size_t value_codes = key_codes + Config::key_code_bytes;
    static constexpr std::size_t bytes = value_codes + Config::value_code_bytes;
    static constexpr std::size_t unpadded = bytes;
    static_assert(key_codes % 16 == 0 && value_codes % 16 == 0 && bytes % 16 == 0,
                  "fp8_scales sections must be 16-byte aligned");
  };
};

KVTILE_NAMESPACE_END
