// kvtile/device/paged/append.cuh: one decode step: one new token per sequence.
//
// Inputs: k_new, v_new [num_seqs][kv_heads][D] (half_t or bfloat16_t), row s =
// sequence s of the view. LENGTH CONVENTION: view.seq_lens[s] already INCLUDES
// the new token (the engine updates its lengths for the step before the
// launch, as vLLM's decode metadata does); the kernel never writes seq_lens.
// The token goes to position p = seq_lens[s] - 1, i.e. tail slot p % G.
// Sequences with seq_lens[s] <= 0 are skipped (padding slots).
// When p % G == G - 1 the tile is complete and the same block quantizes it
// from the tail into page page_table[s][p / G] (or, with the sink on and
// p / G == 0, copies the tail into sink_k/v[s]). The tail slots are not
// cleared (the next tile overwrites them).
//
// One launch, grid (num_seqs, kv_heads), no host synchronization, no
// allocation: capturable in a CUDA graph (the one-time setup of
// detail/launch.cuh is legal during capture too).
// launch_append returns a launch_result (converts to status): unsupported_arch
// on a GPU below sm_80 or without code for it in the binary.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include "paged_common.cuh"
#include "paged_policy.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

template <class Codec, int BLOCK_THREADS, class T>
__global__ void __launch_bounds__(BLOCK_THREADS)
    append_kernel(const __grid_constant__ paged_cache_view view, const T* __restrict__ k_new,
                  const T* __restrict__ v_new, std::int32_t* flags) {
  using block_codec = block_tile_codec<paged_record_codec<Codec>, BLOCK_THREADS>;
  constexpr int D = Codec::D, G = Codec::G, J = D / 32;
  const int s = blockIdx.x, h = blockIdx.y;
  const std::int32_t len = view.seq_lens[s];
  if (len <= 0) return;
  const std::int32_t pos = len - 1;
  const int slot = pos % G;
  const std::int32_t tile = pos / G;
  const std::int64_t off = view.tile_offset(s, h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp < 2) {
    const T* src = (warp == 0 ? k_new : v_new) + (static_cast<std::int64_t>(s) * view.kv_heads + h) * D;
    half_t* dst = (warp == 0 ? view.tail_k : view.tail_v) + off + static_cast<std::int64_t>(slot) * D;
    half_t hv[J];
    const unsigned f = rotate_to_half<typename Codec::rotation>(src, hv);
#pragma unroll
    for (int j = 0; j < J; ++j) dst[lane + 32 * j] = hv[j];
    if (f && flags && lane == 0) atomicOr(flags + s, static_cast<int>(f));
  }
  if (slot != G - 1) return;  // block-uniform
  __syncthreads();            // the tail writes above are visible to the block
  if (view.has_sink() && tile == 0) {
    const uint4* sk = reinterpret_cast<const uint4*>(view.tail_k + off);
    const uint4* sv = reinterpret_cast<const uint4*>(view.tail_v + off);
    uint4* dk = reinterpret_cast<uint4*>(view.sink_k + off);
    uint4* dv = reinterpret_cast<uint4*>(view.sink_v + off);
    for (int i = threadIdx.x; i < G * D / 8; i += BLOCK_THREADS) {
      dk[i] = sk[i];
      dv[i] = sv[i];
    }
    return;
  }
  if (tile >= view.max_pages_per_seq) {
    if (flags && threadIdx.x == 0) atomicOr(flags + s, paged_flag_bad_page);
    return;
  }
  const std::int32_t page = view.page_table[static_cast<std::int64_t>(s) * view.max_pages_per_seq + tile];
  if (page < 0 || page >= view.num_pages) {
    if (flags && threadIdx.x == 0) atomicOr(flags + s, paged_flag_bad_page);
    return;
  }
  extern __shared__ __align__(16) unsigned char kvtile_smem[];
  auto& ts = *reinterpret_cast<typename block_codec::TempStorage*>(kvtile_smem);
  // Every position of the tile is < in_start: all tokens come from the tail.
  paged_tile_loader<typename Codec::rotation, T> kl{view.tail_k + off, nullptr, 0, INT64_MAX, 0, D, G, nullptr};
  paged_tile_loader<typename Codec::rotation, T> vl{view.tail_v + off, nullptr, 0, INT64_MAX, 0, D, G, nullptr};
  const status st = block_codec(ts).encode_with(kl, vl, view.record(page, h));
  if (!ok(st) && flags && threadIdx.x == 0) atomicOr(flags + s, paged_flag_encode_failed);
}

// Dynamic shared memory of the append kernel (Policy::append_block_threads threads).
template <class Codec, class Policy = paged_policy>
constexpr std::size_t append_smem_bytes() {
  return sizeof(typename block_tile_codec<paged_record_codec<Codec>, Policy::append_block_threads>::TempStorage);
}

// Checks the current device and sets the kernel up on it (detail/launch.cuh:
// once per device, thread-safe, not a stream operation). launch_append calls
// it; calling it first only moves the one-time setup out of the first launch.
template <class Codec, class T, class Policy = paged_policy>
inline launch_result prepare_append() {
  return detail::prepare_kernel<append_kernel<Codec, Policy::append_block_threads, T>>(
      append_smem_bytes<Codec, Policy>(), paged_min_cc);
}

// Validates the view's structure (status before launch), then launches.
// flags: optional [num_seqs] int32, OR-ed with paged_flag bits (not cleared).
// Policy: the block size (paged_policy.hpp).
template <class Codec, class T, class Policy = paged_policy>
inline launch_result launch_append(const paged_cache_view& view, const T* k_new, const T* v_new,
                                   std::int32_t* flags = nullptr, cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>, "append takes half_t or bfloat16_t tokens");
  constexpr int BLOCK_THREADS = Policy::append_block_threads;
  if (status s = validate_structure(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (!k_new || !v_new) return status::null_pointer;
  if (view.num_seqs == 0) return status::success;
  if (launch_result r = prepare_append<Codec, T, Policy>(); !r.ok()) return r;
  return detail::launch_kernel<append_kernel<Codec, BLOCK_THREADS, T>>(
      dim3(view.num_seqs, view.kv_heads), dim3(BLOCK_THREADS), append_smem_bytes<Codec, Policy>(),
      launch_options{stream, false}, view, k_new, v_new, flags);
}

}  // namespace device
KVTILE_NAMESPACE_END
