// kvtile/codec/record_view.hpp: typed read access to one record's fields.
//
// Values returned are what decode uses: key_scale(d) is a_K[d] (stored code
// times its vector scale), key_zero(d) is z_K[d], and so on. Reconstruction
// (method.md section 4), in the rotated frame:
//   K^[d][g] = (key_code(d, g) * key_scale(d) + key_zero(d)) * key_token_scale(g)
//   V^[g][d] = (value_code(g, d) * value_scale(g) + value_zero(g)) * value_channel_scale(d)
// with the multiply-add fused (one fma) and the product rounded once.
// Host: any alignment. Device: the record must be 16-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../config.hpp"
#include "../numeric/half.hpp"
#include "../packing/bitpack.hpp"

KVTILE_NAMESPACE_BEGIN

// Index of the fp32 vector scales in an fp8_scales record.
enum class vector_field : int { key_scale = 0, key_token_scale = 1, value_channel_scale = 2, value_scale = 3 };

namespace detail {
template <class T>
KVTILE_HOST_DEVICE T load_unaligned(const std::uint8_t* p) {
#if KVTILE_DEVICE_PASS
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}
template <class T>
KVTILE_HOST_DEVICE void store_unaligned(std::uint8_t* p, T v) {
#if KVTILE_DEVICE_PASS
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}
}  // namespace detail

template <class Config, class Packer>
class record_view {
 public:
  using config = Config;
  using packer = Packer;
  using layout = typename Packer::template layout<Config>;
  using format = typename Packer::scale_format;
  using code_type = typename format::code_type;
  static constexpr int D = Config::head_dim;
  static constexpr int G = Config::tile_tokens;

  KVTILE_HOST_DEVICE explicit record_view(const void* record) : p_(static_cast<const std::uint8_t*>(record)) {}

  KVTILE_HOST_DEVICE const std::uint8_t* data() const { return p_; }

  KVTILE_HOST_DEVICE float vector_scale(vector_field f) const {
    if constexpr (format::has_vector_scale)
      return detail::load_unaligned<float>(p_ + layout::vector_scales + 4 * static_cast<int>(f));
    else
      return 1.0f;
  }

  // Raw stored codes of the scale and zero fields.
  KVTILE_HOST_DEVICE code_type key_scale_code(int d) const { return field_code(layout::key_scale, d); }
  KVTILE_HOST_DEVICE code_type key_token_scale_code(int g) const { return field_code(layout::key_token_scale, g); }
  KVTILE_HOST_DEVICE code_type value_scale_code(int g) const { return field_code(layout::value_scale, g); }
  KVTILE_HOST_DEVICE code_type value_channel_scale_code(int d) const { return field_code(layout::value_channel_scale, d); }
  KVTILE_HOST_DEVICE std::uint16_t key_zero_bits(int d) const {
    return detail::load_unaligned<std::uint16_t>(p_ + layout::key_zero + 2 * d);
  }
  KVTILE_HOST_DEVICE std::uint16_t value_zero_bits(int g) const {
    return detail::load_unaligned<std::uint16_t>(p_ + layout::value_zero + 2 * g);
  }

  // Decoded fields.
  KVTILE_HOST_DEVICE float key_scale(int d) const {
    return format::decode(key_scale_code(d), vector_scale(vector_field::key_scale));
  }
  KVTILE_HOST_DEVICE float key_token_scale(int g) const {
    return format::decode(key_token_scale_code(g), vector_scale(vector_field::key_token_scale));
  }
  KVTILE_HOST_DEVICE float value_scale(int g) const {
    return format::decode(value_scale_code(g), vector_scale(vector_field::value_scale));
  }
  KVTILE_HOST_DEVICE float value_channel_scale(int d) const {
    return format::decode(value_channel_scale_code(d), vector_scale(vector_field::value_channel_scale));
  }
  KVTILE_HOST_DEVICE float key_zero(int d) const { return half_t::to_float_bits(key_zero_bits(d)); }
  KVTILE_HOST_DEVICE float value_zero(int g) const { return half_t::to_float_bits(value_zero_bits(g)); }

  // Codes: key rows are channels over G tokens, value rows tokens over D channels.
  KVTILE_HOST_DEVICE const std::uint8_t* key_codes() const { return p_ + layout::key_codes; }
  KVTILE_HOST_DEVICE const std::uint8_t* value_codes() const { return p_ + layout::value_codes; }
  KVTILE_HOST_DEVICE std::uint32_t key_code(int d, int g) const {
    return detail::get_code<Config::key_bits>(key_codes() + static_cast<std::size_t>(d) * (G * Config::key_bits / 8), g);
  }
  KVTILE_HOST_DEVICE std::uint32_t value_code(int g, int d) const {
    return detail::get_code<Config::value_bits>(value_codes() + static_cast<std::size_t>(g) * (D * Config::value_bits / 8), d);
  }

 private:
  KVTILE_HOST_DEVICE code_type field_code(std::size_t offset, int i) const {
    return detail::load_unaligned<code_type>(p_ + offset + sizeof(code_type) * static_cast<std::size_t>(i));
  }
  const std::uint8_t* p_;
};

KVTILE_NAMESPACE_END
