// ops/src/ops_internal.hpp: what the kvtile_ops translation units share: the
// preset list, the thread's error message, and the view built from the C
// descriptor. Plain C++17 (the host TU and the CUDA TUs include it).
#pragma once

#include <kvtile/dispatch.hpp>
#include <kvtile/paged/paged_cache.hpp>
#include <kvtile/presets.hpp>
#include <kvtile/status.hpp>

#include <cstdarg>
#include <cstddef>
#include <cstdint>

#include "kvtile_ops.h"

namespace kvtile_ops {

// Records the calling thread's error message (printf format); returns code.
__attribute__((format(printf, 2, 3))) int fail(int code, const char* fmt, ...);
// Maps a kvtile::status to the ABI code, with a message naming the function on failure.
int from_status(kvtile::status s, const char* function);

// The instantiated presets: codec type of (preset, D).
template <int Preset, int D>
struct preset_codec;
template <int D>
struct preset_codec<KVTILE_OPS_K4V2_G128, D> {
  using type = kvtile::presets::k4v2_g128<D>;
};
template <int D>
struct preset_codec<KVTILE_OPS_K4V4_G128, D> {
  using type = kvtile::presets::k4v4_g128<D>;
};
template <int D>
struct preset_codec<KVTILE_OPS_K2V2_G128, D> {
  using type = kvtile::presets::k2v2_g128<D>;
};

// Calls f(kvtile::codec_tag<Codec>{}) for (preset, head_dim); returns
// KVTILE_OPS_UNSUPPORTED_PRESET / _HEAD_DIM (with a message) otherwise.
template <class F>
int with_codec(int preset, int head_dim, const char* function, F&& f) {
  auto by_dim = [&](auto preset_c) -> int {
    constexpr int P = decltype(preset_c)::value;
    switch (head_dim) {
      case 64: return f(kvtile::codec_tag<typename preset_codec<P, 64>::type>{});
      case 128: return f(kvtile::codec_tag<typename preset_codec<P, 128>::type>{});
      case 256: return f(kvtile::codec_tag<typename preset_codec<P, 256>::type>{});
      default: return fail(KVTILE_OPS_UNSUPPORTED_HEAD_DIM, "%s: head_dim %d is not 64, 128 or 256", function, head_dim);
    }
  };
  switch (preset) {
    case KVTILE_OPS_K4V2_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K4V2_G128>{});
    case KVTILE_OPS_K4V4_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K4V4_G128>{});
    case KVTILE_OPS_K2V2_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K2V2_G128>{});
    default:
      return fail(KVTILE_OPS_UNSUPPORTED_PRESET, "%s: preset %d is not one of 0 (k4v2_g128), 1 (k4v4_g128), 2 (k2v2_g128)",
                  function, preset);
  }
}

// Builds the kvtile view of a descriptor (sizes not validated here: the
// launchers' validate_structure does that).
template <class Codec>
kvtile::paged_cache_view make_view(const kvtile_ops_cache& c) {
  kvtile::paged_cache_view v;
  v.pages = static_cast<std::uint8_t*>(c.pages);
  v.page_table = c.page_table;
  v.seq_lens = c.seq_lens;
  v.tail_k = static_cast<kvtile::half_t*>(c.tail_k);
  v.tail_v = static_cast<kvtile::half_t*>(c.tail_v);
  v.sink_k = static_cast<kvtile::half_t*>(c.sink_k);
  v.sink_v = static_cast<kvtile::half_t*>(c.sink_v);
  v.num_seqs = c.num_seqs;
  v.kv_heads = c.kv_heads;
  v.head_dim = c.head_dim;
  v.tile_tokens = Codec::G;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.num_pages = c.num_pages;
  v.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
  v.tail_slots = c.tail_slots;
  v.num_slots = c.num_slots;
  return v;
}

// The device functions of one (preset, head_dim), defined in its own CUDA
// translation unit (device_ops.cuh, KVTILE_OPS_DEVICE_TABLE).
struct device_table {
  int (*prefill)(const kvtile_ops_cache&, int dtype, const void* k, const void* v, const std::int32_t* cu_seqlens,
                 std::int64_t max_tokens, std::int32_t* flags, kvtile_ops_stream stream);
  int (*append)(const kvtile_ops_cache&, int dtype, const void* k, const void* v, std::int32_t* flags,
                kvtile_ops_stream stream);
  int (*dequantize_pages)(const kvtile_ops_cache&, const std::int32_t* page_ids, std::int32_t count, void* out_k,
                          void* out_v, int frame, kvtile_ops_stream stream);
  int (*decode_workspace_bytes)(const kvtile_ops_cache&, int q_heads, int num_splits, std::size_t* bytes);
  int (*decode)(const kvtile_ops_cache&, int q_dtype, const void* q, void* out, float* lse, int q_heads, float scale,
                void* workspace, std::size_t workspace_bytes, int num_splits, kvtile_ops_stream stream);
};

// nullptr when the library was built without that (preset, head_dim).
const device_table* find_device_table(int preset, int head_dim);

}  // namespace kvtile_ops
