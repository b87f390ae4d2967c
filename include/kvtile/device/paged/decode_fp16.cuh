// kvtile/device/paged/decode_fp16.cuh: dequantize pages back to fp16.
//
// For each i < num_pages_to_decode and KV head h, the record of page
// page_ids[i] is decoded into out_k/out_v[i][h][G][D] (fp16, token-major),
// in the rotated frame (frame::rotated, what attention with a rotated query
// reads) or the original one (frame::original: Codec's rotation undone).
// Bit-identical to paged_record_codec<Codec>::decode on the host followed, for
// frame::original, by Codec::rotation::inverse before the fp16 rounding
// (i.e. Codec::decode semantics on a record of already-rotated input).
// Grid (num_pages_to_decode, kv_heads); no host sync, no allocation.
#pragma once

#include <cuda_runtime.h>

#include "paged_common.cuh"

namespace kvtile::device {

template <class Codec, int BLOCK_THREADS>
__global__ void __launch_bounds__(BLOCK_THREADS)
    decode_pages_kernel(const __grid_constant__ paged_cache_view view, const std::int32_t* __restrict__ page_ids,
                        half_t* __restrict__ out_k, half_t* __restrict__ out_v, frame f) {
  using decoder = block_tile_decoder<paged_record_codec<Codec>, BLOCK_THREADS>;
  constexpr int D = Codec::D, G = Codec::G;
  extern __shared__ __align__(16) unsigned char kvtile_smem[];
  auto& ts = *reinterpret_cast<typename decoder::TempStorage*>(kvtile_smem);
  const int i = blockIdx.x, h = blockIdx.y;
  const std::int32_t page = page_ids[i];
  if (page < 0 || page >= view.num_pages) return;
  const std::int64_t o = (static_cast<std::int64_t>(i) * view.kv_heads + h) * G * D;
  decoder(ts).template decode<half_t, typename Codec::rotation>(view.record(page, h), out_k + o, D, out_v + o, D, f);
}

template <class Codec, int BLOCK_THREADS = 256>
constexpr std::size_t decode_pages_smem_bytes() {
  return sizeof(typename block_tile_decoder<paged_record_codec<Codec>, BLOCK_THREADS>::TempStorage);
}

template <class Codec, int BLOCK_THREADS = 256>
inline cudaError_t prepare_decode_pages() {
  return detail_paged::set_smem(decode_pages_kernel<Codec, BLOCK_THREADS>, decode_pages_smem_bytes<Codec, BLOCK_THREADS>());
}

// Pages with ids outside [0, num_pages) are skipped (output left untouched).
template <class Codec, int BLOCK_THREADS = 256>
inline status launch_decode_pages(const paged_cache_view& view, const std::int32_t* page_ids, std::int32_t count,
                                  half_t* out_k, half_t* out_v, frame f = frame::rotated,
                                  cudaStream_t stream = nullptr) {
  if (!view.pages || !page_ids || !out_k || !out_v) return status::null_pointer;
  if (view.head_dim != Codec::D) return status::unsupported_head_dim;
  if (view.tile_tokens != Codec::G) return status::unsupported_tile_tokens;
  if (view.record_bytes != static_cast<std::int64_t>(Codec::record_bytes)) return status::invalid_argument;
  if (count < 0 || view.kv_heads <= 0 || view.kv_heads > 65535) return status::invalid_argument;
  if (reinterpret_cast<std::uintptr_t>(view.pages) % 16 != 0) return status::misaligned;
  if (count == 0) return status::success;
  if (prepare_decode_pages<Codec, BLOCK_THREADS>() != cudaSuccess) return status::cuda_error;
  decode_pages_kernel<Codec, BLOCK_THREADS><<<dim3(count, view.kv_heads), BLOCK_THREADS,
                                              decode_pages_smem_bytes<Codec, BLOCK_THREADS>(), stream>>>(
      view, page_ids, out_k, out_v, f);
  return cudaGetLastError() == cudaSuccess ? status::success : status::cuda_error;
}

}  // namespace kvtile::device
