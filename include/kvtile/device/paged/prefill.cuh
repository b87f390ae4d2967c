// kvtile/device/paged/prefill.cuh: many tokens per sequence (ragged batch).
//
// Inputs: k, v [total_tokens][kv_heads][D] (half_t or bfloat16_t), the tokens
// of sequence s at rows [cu_seqlens[s], cu_seqlens[s+1]) (int32, num_seqs + 1
// entries, device memory). LENGTH CONVENTION (as append): view.seq_lens[s]
// already INCLUDES these tokens, so they occupy positions
// [seq_lens[s] - n_s, seq_lens[s]); a chunk may start mid-tile (chunked
// prefill, or prefill after appends): the tokens already in the tail complete
// the first tile. Every tile that is complete after the chunk is quantized into
// page_table[s][tile] (tile 0 with the sink on: copied to sink_k/v[s], rotated
// fp16); the remaining tokens go to the tail. The kernel never writes seq_lens.
//
// Grid (max_tiles, num_seqs, kv_heads), max_tiles = ceil(max_n / G) + 1 for
// the longest chunk max_n (an upper bound the host knows; extra blocks exit).
// Block (j, s, h) quantizes tile first_tile(s) + j; block 0 also writes the
// tail remainder after it has read the old tail, so no block reads a tail slot
// another block writes. No host sync, no allocation.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include "paged_common.cuh"
#include "paged_policy.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

// The minimum blocks per SM the prefill kernel is compiled for: MIN_BLOCKS
// (paged_policy::prefill_min_blocks) where two blocks can be resident (<= 512
// threads, D * G <= 16384), else 1.
template <class Codec, int BLOCK_THREADS, int MIN_BLOCKS>
constexpr int prefill_min_blocks() {
  return BLOCK_THREADS <= 512 && Codec::D * Codec::G <= 16384 ? MIN_BLOCKS : 1;
}

template <class Codec, int BLOCK_THREADS, class T, int MIN_BLOCKS>
__global__ void __launch_bounds__(BLOCK_THREADS, (prefill_min_blocks<Codec, BLOCK_THREADS, MIN_BLOCKS>()))
    prefill_kernel(const __grid_constant__ paged_cache_view view, const T* __restrict__ k, const T* __restrict__ v,
                   const std::int32_t* __restrict__ cu_seqlens, std::int32_t* flags) {
  using block_codec = block_tile_codec<paged_record_codec<Codec>, BLOCK_THREADS,
                                       prefill_min_blocks<Codec, BLOCK_THREADS, MIN_BLOCKS>()>;
  using loader = paged_tile_loader<typename Codec::rotation, T>;
  constexpr int D = Codec::D, G = Codec::G, J = D / 32, WARPS = BLOCK_THREADS / 32;
  const int jt = blockIdx.x, s = blockIdx.y, h = blockIdx.z;
  const std::int64_t end = view.seq_lens[s];
  const std::int64_t row0 = cu_seqlens[s];
  const std::int64_t n = cu_seqlens[s + 1] - row0;
  std::int32_t* sflags = flags ? flags + s : nullptr;
  if (n <= 0) return;
  const std::int64_t start = end - n;
  if (start < 0) {
    if (sflags && jt == 0 && h == 0 && threadIdx.x == 0) atomicOr(sflags, paged_flag_bad_length);
    return;
  }
  const std::int64_t first = start / G;
  const std::int64_t tile = first + jt;
  const bool full = (tile + 1) * G <= end;
  if (jt > 0 && !full) return;
  const std::int64_t tok_stride = static_cast<std::int64_t>(view.kv_heads) * D;
  const std::int64_t off = view.tile_offset(s, h);
  const T* kin = k + row0 * tok_stride + static_cast<std::int64_t>(h) * D;
  const T* vin = v + row0 * tok_stride + static_cast<std::int64_t>(h) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (full) {
    loader kl{view.tail_k + off, kin, tok_stride, start, tile * G, D, G, sflags};
    loader vl{view.tail_v + off, vin, tok_stride, start, tile * G, D, G, sflags};
    if (view.has_sink() && tile == 0) {
      for (int g = warp; g < 2 * G; g += WARPS) {
        const bool key = g < G;
        const int t = key ? g : g - G;
        float x[J];
        if (key) kl(t, x);  // not (key ? kl : vl): taking either's address puts both in local memory
        else vl(t, x);
        half_t* dst = (key ? view.sink_k : view.sink_v) + off + static_cast<std::int64_t>(t) * D;
#pragma unroll
        for (int j = 0; j < J; ++j) dst[lane + 32 * j] = half_t(x[j]);  // exact: x is an fp16 value
      }
      kl.flush();
      vl.flush();
      __syncthreads();
    } else {
      bool bad = tile >= view.max_pages_per_seq;
      std::int32_t page = -1;
      if (!bad) {
        page = view.page_table[static_cast<std::int64_t>(s) * view.max_pages_per_seq + tile];
        bad = page < 0 || page >= view.num_pages;
      }
      if (bad) {
        if (sflags && threadIdx.x == 0) atomicOr(sflags, paged_flag_bad_page);
      } else {
        extern __shared__ __align__(16) unsigned char kvtile_smem[];
        auto& ts = *reinterpret_cast<typename block_codec::TempStorage*>(kvtile_smem);
        const status st = block_codec(ts).encode_with(kl, vl, view.record(page, h));
        if (!ok(st) && sflags && threadIdx.x == 0) atomicOr(sflags, paged_flag_encode_failed);
      }
      __syncthreads();
    }
  }
  if (jt != 0) return;
  // Tail remainder: positions [max(start, last * G), end) of the last, incomplete tile.
  if (end % G == 0) return;
  const std::int64_t last_tile_pos = end / G * G;
  const std::int64_t from = start > last_tile_pos ? start : last_tile_pos;
  const std::int64_t count = end - from;
  for (std::int64_t i = warp; i < 2 * count; i += WARPS) {
    const bool key = i < count;
    const std::int64_t p = from + (key ? i : i - count);
    half_t hv[J];
    unsigned f = rotate_to_half<typename Codec::rotation>((key ? kin : vin) + (p - start) * tok_stride, hv);
    half_t* dst = (key ? view.tail_k : view.tail_v) + off + (p % G) * D;
#pragma unroll
    for (int j = 0; j < J; ++j) dst[lane + 32 * j] = hv[j];
    if (f && sflags && lane == 0) atomicOr(sflags, static_cast<int>(f));
  }
}

// Dynamic shared memory of the prefill kernel of Policy.
template <class Codec, class Policy = paged_policy>
constexpr std::size_t prefill_smem_bytes() {
  constexpr int B = Policy::prefill_block_threads;
  return sizeof(typename block_tile_codec<paged_record_codec<Codec>, B,
                                          prefill_min_blocks<Codec, B, Policy::prefill_min_blocks>()>::TempStorage);
}

// Checks the current device and sets the kernel up on it (see prepare_append).
template <class Codec, class T, class Policy = paged_policy>
inline launch_result prepare_prefill() {
  return detail::prepare_kernel<prefill_kernel<Codec, Policy::prefill_block_threads, T, Policy::prefill_min_blocks>>(
      prefill_smem_bytes<Codec, Policy>(), paged_min_cc);
}

// max_tokens_per_seq: an upper bound on cu_seqlens[s+1] - cu_seqlens[s] (above a
// sequence's capacity it is taken as the capacity: prefill_grid_tiles, paged_cache.hpp).
// Policy: block size and minimum blocks per SM (paged_policy.hpp).
template <class Codec, class T, class Policy = paged_policy>
inline launch_result launch_prefill(const paged_cache_view& view, const T* k, const T* v, const std::int32_t* cu_seqlens,
                             std::int64_t max_tokens_per_seq, std::int32_t* flags = nullptr,
                             cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>, "prefill takes half_t or bfloat16_t tokens");
  if (status s = validate_structure(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (!k || !v || !cu_seqlens) return status::null_pointer;
  std::int64_t max_tiles = 0;  // max_tokens_per_seq clamped to a sequence's capacity (INT64_MAX: no bound)
  if (status s = prefill_grid_tiles(view, max_tokens_per_seq, &max_tiles); s != status::success) return s;
  if (view.num_seqs == 0 || max_tokens_per_seq == 0) return status::success;
  if (max_tiles > 0x7fffffff || view.num_seqs > 65535 || view.kv_heads > 65535) return status::invalid_argument;
  if (launch_result r = prepare_prefill<Codec, T, Policy>(); !r.ok()) return r;
  constexpr int BLOCK_THREADS = Policy::prefill_block_threads;
  return detail::launch_kernel<prefill_kernel<Codec, BLOCK_THREADS, T, Policy::prefill_min_blocks>>(
      dim3(static_cast<unsigned>(max_tiles), view.num_seqs, view.kv_heads), dim3(BLOCK_THREADS),
      prefill_smem_bytes<Codec, Policy>(), launch_options{stream, false}, view, k, v, cu_seqlens, flags);
}

}  // namespace device
KVTILE_NAMESPACE_END
