// kvtile/device/block/block_tile_decoder.cuh: block_tile_decoder,
// block-cooperative decode of one (tile, KV head) record, bit-identical to the
// host tile_codec (block_tile_codec::decode runs it on its own TempStorage).
// block_tile_codec.cuh includes it.
#pragma once

#include "../../config.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../codec/element.hpp"
#include "../../codec/tile_codec.hpp"
#include "../../detail/fastmath.hpp"
#include "../warp/warp_primitives.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

// Block-cooperative decode of one (tile, KV head) record into engine layout
// (G tokens x D, `stride` elements between tokens), bit-identical to the host
// tile_codec::decode_keys / decode_values (no validation: records must come
// from encode; run Codec::validate on untrusted records). Smaller shared
// footprint than block_tile_codec: G * (D + 1) + 3 * max(D, G) floats.
// Storage: any struct with members x, row_a, row_z, col_hat of at least these
// sizes (block_tile_codec passes its own TempStorage); void = TempStorage.
template <class Codec, int BLOCK_THREADS, class Storage = void>
class block_tile_decoder {
 public:
  using config = typename Codec::config;
  using rotation = typename Codec::rotation;
  using key_rounder = typename Codec::key_rounder;
  using value_rounder = typename Codec::value_rounder;
  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int L = D > G ? D : G;
  static constexpr int XS = D + 1;
  static constexpr int WARPS = BLOCK_THREADS / 32;
  static constexpr int JD = D / 32;
  static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
                "BLOCK_THREADS must be a multiple of 32 in [64, 1024]");

  struct TempStorage {
    float x[G * XS];
    float row_a[L], row_z[L], col_hat[L];
  };
  using storage_type = std::conditional_t<std::is_void_v<Storage>, TempStorage, Storage>;

  KVTILE_DEVICE explicit block_tile_decoder(storage_type& ts) : s_(ts) {}

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode(const void* record, T* keys, std::ptrdiff_t key_stride, T* values,
                            std::ptrdiff_t value_stride, frame f = frame::original) {
    decode_keys<T, InverseRotation>(record, keys, key_stride, f);
    decode_values<T, InverseRotation>(record, values, value_stride, f);
  }

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode_keys(const void* record, T* keys, std::ptrdiff_t stride, frame f) {
    using view = record_view<config, typename Codec::packer>;
    const view v(record);
    float* a = s_.row_a;
    float* z = s_.row_z;
    float* t = s_.col_hat;
    for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
      if (i < D) {
        a[i] = v.key_scale(i);
        z[i] = v.key_zero(i);
      }
      if (i < G) t[i] = v.key_token_scale(i);
    }
    __syncthreads();
    // Codes: one 32-bit word per thread (32/b tokens of one channel), lanes
    // over channels so the shared writes are conflict free.
    constexpr int b = config::key_bits;
    constexpr int per_word = 32 / b;
    constexpr int row_words = G / per_word;
    const auto* words = reinterpret_cast<const std::uint32_t*>(v.key_codes());
    for (int i = threadIdx.x; i < D * row_words; i += BLOCK_THREADS) {
      const int d = i % D, w = i / D;
      const std::uint32_t word = words[d * row_words + w];
#pragma unroll
      for (int k = 0; k < per_word; ++k) {
        const int g = w * per_word + k;
        const std::uint32_t code = (word >> (k * b)) & ((1u << b) - 1u);
        s_.x[g * XS + d] = detail::mul(key_rounder::dequantize(code, a[d], z[d]), t[g]);
      }
    }
    __syncthreads();
    store_tokens<T, InverseRotation>(keys, stride, f);
  }

  template <class T, class InverseRotation = rotation>
  KVTILE_DEVICE void decode_values(const void* record, T* values, std::ptrdiff_t stride, frame f) {
    using view = record_view<config, typename Codec::packer>;
    const view v(record);
    float* c = s_.col_hat;
    float* a = s_.row_a;
    float* z = s_.row_z;
    for (int i = threadIdx.x; i < L; i += BLOCK_THREADS) {
      if (i < D) c[i] = v.value_channel_scale(i);
      if (i < G) {
        a[i] = v.value_scale(i);
        z[i] = v.value_zero(i);
      }
    }
    __syncthreads();
    constexpr int b = config::value_bits;
    constexpr int per_word = 32 / b;
    constexpr int row_words = D / per_word;
    const auto* words = reinterpret_cast<const std::uint32_t*>(v.value_codes());
    for (int i = threadIdx.x; i < G * row_words; i += BLOCK_THREADS) {
      const int g = i / row_words, w = i % row_words;
      const std::uint32_t word = words[i];
#pragma unroll
      for (int k = 0; k < per_word; ++k) {
        const int d = w * per_word + k;
        const std::uint32_t code = (word >> (k * b)) & ((1u << b) - 1u);
        s_.x[g * XS + d] = detail::mul(value_rounder::dequantize(code, a[g], z[g]), c[d]);
      }
    }
    __syncthreads();
    store_tokens<T, InverseRotation>(values, stride, f);
  }

 private:
  storage_type& s_;
  KVTILE_DEVICE int warp_id() const { return static_cast<int>(threadIdx.x >> 5); }

  template <class T, class InverseRotation>
  KVTILE_DEVICE void store_tokens(T* dst, std::ptrdiff_t stride, frame f) {
    const int lane = lane_id();
    for (int g = warp_id(); g < G; g += WARPS) {
      float v[JD];
#pragma unroll
      for (int j = 0; j < JD; ++j) v[j] = s_.x[g * XS + lane + 32 * j];
      if (f == frame::original) warp_rotate_inverse<InverseRotation>(v);
      T* row = dst + static_cast<std::ptrdiff_t>(g) * stride;
#pragma unroll
      for (int j = 0; j < JD; ++j) row[lane + 32 * j] = detail::element_from_float<T>(v[j]);
    }
    __syncthreads();
  }

};

}  // namespace device
KVTILE_NAMESPACE_END
