// kvtile/device/paged/speculative.cuh: draft tokens (append_drafts, commit /
// roll back) and fork on the device. The contract, the staging area and the
// per-row rules are in paged/speculative.hpp (the host path there is the
// reference these kernels are tested against byte for byte).
//
// launch_append_drafts: k, v [total][kv_heads][D] (half_t or bfloat16_t), row
//   s at [cu[s], cu[s+1]) (device int32, num_seqs + 1 entries, as prefill's
//   cu_seqlens and the multi-query decode's qo_indptr), 0..8 drafts per row;
//   view.seq_lens already include them. Grid (num_seqs, kv_heads).
// launch_commit_drafts: accepted [num_seqs] device int32 (0..k: drafts kept;
//   < 0: row skipped); new_seq_lens optional [num_seqs] device int32, written
//   L0 + accepted (may be view.seq_lens' memory: commit does not read it).
//   Grid (num_seqs, kv_heads).
// launch_fork: count pairs of device int32 src_slots / dst_slots; grid
//   (count, kv_heads). Check them with validate_fork on a host copy.
// A row that breaks the draft rules gets paged_flag_bad_drafts in flags and
// is skipped. No host synchronization, no allocation: every launcher is
// capturable in a CUDA graph.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include "../../paged/speculative.hpp"
#include "append.cuh"
#include "paged_common.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

namespace detail {
// dst[0, n_halves) = src[0, n_halves), 16 bytes at a time by the block (n_halves % 8 == 0).
KVTILE_DEVICE void block_copy_halves(half_t* dst, const half_t* src, std::int64_t n_halves) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (std::int64_t i = threadIdx.x; i < n_halves / 8; i += blockDim.x) d[i] = s[i];
}
}  // namespace detail

template <class Codec, int BLOCK_THREADS, class T>
__global__ void __launch_bounds__(BLOCK_THREADS)
    append_drafts_kernel(const __grid_constant__ paged_cache_view view, const __grid_constant__ draft_view drafts,
                         const T* __restrict__ k, const T* __restrict__ v, const std::int32_t* __restrict__ cu,
                         std::int32_t* flags) {
  using block_codec = block_tile_codec<paged_record_codec<Codec>, BLOCK_THREADS>;
  using loader = paged_tile_loader<typename Codec::rotation, T>;
  constexpr int D = Codec::D, G = Codec::G, WARPS = BLOCK_THREADS / 32;
  const int s = blockIdx.x, h = blockIdx.y;
  const std::int64_t len = view.seq_lens[s];
  const std::int64_t n = static_cast<std::int64_t>(cu[s + 1]) - cu[s];
  if (len <= 0 && n == 0) return;
  const std::int32_t slot = view.tail_slot(s);
  std::int32_t* sflags = flags ? flags + s : nullptr;
  if (slot < 0 || slot >= view.slots()) {
    if (sflags && h == 0 && threadIdx.x == 0) atomicOr(sflags, paged_flag_bad_length);
    return;
  }
  std::int32_t* st = drafts.state(view, slot, h);
  const std::int32_t pending = st[1];
  __syncthreads();  // every thread has read the state before thread 0 writes it
  if (const std::int32_t bad = check_append_drafts(len, n, pending)) {
    if (sflags && threadIdx.x == 0) atomicOr(sflags, bad);
    return;
  }
  const std::int64_t l0 = len - n, base = l0 / G * G, old = l0 - base;
  const std::int64_t toff = view.tile_offset(s, h), soff = drafts.offset(view, slot, h);
  half_t* sk = drafts.draft_k + soff;
  half_t* sv = drafts.draft_v + soff;
  // 1. Staging rows: the committed tail tokens [base, l0), then the drafts.
  detail::block_copy_halves(sk, view.tail_k + toff, old * D);
  detail::block_copy_halves(sv, view.tail_v + toff, old * D);
  const std::int64_t tok = static_cast<std::int64_t>(view.kv_heads) * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (std::int64_t i = warp; i < 2 * n; i += WARPS) {
    const bool key = i < n;
    const std::int64_t t = key ? i : i - n;
    constexpr int J = D / 32;
    half_t hv[J];
    const unsigned f =
        rotate_to_half<typename Codec::rotation>((key ? k : v) + (cu[s] + t) * tok + static_cast<std::int64_t>(h) * D, hv);
    half_t* dst = (key ? sk : sv) + (old + t) * D;
#pragma unroll
    for (int j = 0; j < J; ++j) dst[lane + 32 * j] = hv[j];
    if (f && sflags && lane == 0) atomicOr(sflags, static_cast<int>(f));
  }
  __syncthreads();  // staging complete (and every tail read done)
  // 2. Tiles the drafts complete (at most one: G >= 32 > max_draft_tokens), from the staging rows.
  for (std::int64_t tile = base / G; tile < len / G; ++tile) {  // block-uniform
    const std::int64_t r = (tile - base / G) * G * D;
    if (view.has_sink() && tile == 0) {
      detail::block_copy_halves(view.sink_k + toff, sk + r, static_cast<std::int64_t>(G) * D);
      detail::block_copy_halves(view.sink_v + toff, sv + r, static_cast<std::int64_t>(G) * D);
      continue;
    }
    std::int32_t page = -1;
    if (tile < view.max_pages_per_seq)
      page = view.page_table[static_cast<std::int64_t>(s) * view.max_pages_per_seq + tile];
    if (page < 0 || page >= view.num_pages) {
      if (sflags && threadIdx.x == 0) atomicOr(sflags, paged_flag_bad_page);
      continue;
    }
    extern __shared__ __align__(16) unsigned char kvtile_smem[];
    auto& ts = *reinterpret_cast<typename block_codec::TempStorage*>(kvtile_smem);
    // Every position of the tile is < in_start: all tokens come from the staging rows.
    loader kl{sk + r, nullptr, 0, INT64_MAX, tile * G, D, G, nullptr};
    loader vl{sv + r, nullptr, 0, INT64_MAX, tile * G, D, G, nullptr};
    const status e = block_codec(ts).encode_with(kl, vl, view.record(page, h));
    if (!ok(e) && sflags && threadIdx.x == 0) atomicOr(sflags, paged_flag_encode_failed);
    __syncthreads();  // TempStorage reused by the next tile
  }
  // 3. The tail: positions [max(base, last tile start), len) from the staging rows.
  const std::int64_t last = len / G * G;
  const std::int64_t from = last > base ? last : base;
  detail::block_copy_halves(view.tail_k + toff + (from % G) * D, sk + (from - base) * D, (len - from) * D);
  detail::block_copy_halves(view.tail_v + toff + (from % G) * D, sv + (from - base) * D, (len - from) * D);
  if (threadIdx.x == 0) {
    st[0] = static_cast<std::int32_t>(l0);
    st[1] = static_cast<std::int32_t>(n + 1);
  }
}

template <int BLOCK_THREADS>
__global__ void __launch_bounds__(BLOCK_THREADS)
    commit_drafts_kernel(const __grid_constant__ paged_cache_view view, const __grid_constant__ draft_view drafts,
                         const std::int32_t* __restrict__ accepted, std::int32_t* new_seq_lens, std::int32_t* flags) {
  const int s = blockIdx.x, h = blockIdx.y;
  const std::int32_t a = accepted[s];
  if (a < 0) return;
  const std::int32_t slot = view.tail_slot(s);
  std::int32_t* sflags = flags ? flags + s : nullptr;
  if (slot < 0 || slot >= view.slots()) {
    if (sflags && h == 0 && threadIdx.x == 0) atomicOr(sflags, paged_flag_bad_length);
    return;
  }
  std::int32_t* st = drafts.state(view, slot, h);
  const std::int32_t l0 = st[0], pending = st[1];
  __syncthreads();  // every thread has read the state before thread 0 clears it
  if (const std::int32_t bad = check_commit(a, l0, pending)) {
    if (sflags && threadIdx.x == 0) atomicOr(sflags, bad);
    return;
  }
  const int G = view.tile_tokens, D = view.head_dim;
  const std::int64_t len = static_cast<std::int64_t>(l0) + a, base = l0 / G * G, from = len / G * G;
  const std::int64_t toff = view.tile_offset(s, h), soff = drafts.offset(view, slot, h);
  detail::block_copy_halves(view.tail_k + toff, drafts.draft_k + soff + (from - base) * D, (len - from) * D);
  detail::block_copy_halves(view.tail_v + toff, drafts.draft_v + soff + (from - base) * D, (len - from) * D);
  if (threadIdx.x == 0) {
    st[0] = st[1] = 0;
    if (h == 0 && new_seq_lens) new_seq_lens[s] = static_cast<std::int32_t>(len);
  }
}

template <int BLOCK_THREADS>
__global__ void __launch_bounds__(BLOCK_THREADS)
    fork_kernel(const __grid_constant__ paged_cache_view view, const __grid_constant__ draft_view drafts,
                const std::int32_t* __restrict__ src_slots, const std::int32_t* __restrict__ dst_slots,
                std::int32_t* flags) {
  const int i = blockIdx.x, h = blockIdx.y;
  const std::int32_t src = src_slots[i], dst = dst_slots[i];
  std::int32_t* fflags = flags ? flags + i : nullptr;
  if (src < 0 || src >= view.slots() || dst < 0 || dst >= view.slots()) {
    if (fflags && h == 0 && threadIdx.x == 0) atomicOr(fflags, paged_flag_bad_length);
    return;
  }
  if (drafts.draft_state && drafts.state(view, src, h)[1] != 0) {
    if (fflags && threadIdx.x == 0) atomicOr(fflags, paged_flag_bad_drafts);
    return;
  }
  const std::int64_t tile = static_cast<std::int64_t>(view.tile_tokens) * view.head_dim;
  const std::int64_t so = (static_cast<std::int64_t>(src) * view.kv_heads + h) * tile;
  const std::int64_t dof = (static_cast<std::int64_t>(dst) * view.kv_heads + h) * tile;
  detail::block_copy_halves(view.tail_k + dof, view.tail_k + so, tile);
  detail::block_copy_halves(view.tail_v + dof, view.tail_v + so, tile);
  if (view.has_sink()) {
    detail::block_copy_halves(view.sink_k + dof, view.sink_k + so, tile);
    detail::block_copy_halves(view.sink_v + dof, view.sink_v + so, tile);
  }
  if (drafts.draft_state && threadIdx.x == 0) {
    std::int32_t* st = drafts.state(view, dst, h);
    st[0] = st[1] = 0;
  }
}

inline constexpr int commit_block_threads = 128;

template <class Codec, class T, class Policy = paged_policy>
inline launch_result prepare_append_drafts() {
  return detail::prepare_kernel<append_drafts_kernel<Codec, Policy::append_block_threads, T>>(
      append_smem_bytes<Codec, Policy>(), paged_min_cc);
}

// Validates the structure (view and staging), then launches. flags: optional [num_seqs].
// Policy: the block size, append's (paged_policy::append_block_threads).
template <class Codec, class T, class Policy = paged_policy>
inline launch_result launch_append_drafts(const paged_cache_view& view, const draft_view& drafts, const T* k,
                                          const T* v, const std::int32_t* cu, std::int32_t* flags = nullptr,
                                          cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>,
                "append_drafts takes half_t or bfloat16_t tokens");
  constexpr int BLOCK_THREADS = Policy::append_block_threads;
  if (status s = validate_structure(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (status s = validate_drafts(view, drafts); s != status::success) return s;
  if (!k || !v || !cu) return status::null_pointer;
  if (view.num_seqs == 0) return status::success;
  if (view.kv_heads > 65535) return status::invalid_argument;
  if (launch_result r = prepare_append_drafts<Codec, T, Policy>(); !r.ok()) return r;
  return detail::launch_kernel<append_drafts_kernel<Codec, BLOCK_THREADS, T>>(
      dim3(view.num_seqs, view.kv_heads), dim3(BLOCK_THREADS), append_smem_bytes<Codec, Policy>(),
      launch_options{stream, false}, view, drafts, k, v, cu, flags);
}

template <class Codec>
inline launch_result launch_commit_drafts(const paged_cache_view& view, const draft_view& drafts,
                                          const std::int32_t* accepted, std::int32_t* new_seq_lens = nullptr,
                                          std::int32_t* flags = nullptr, cudaStream_t stream = nullptr) {
  if (status s = validate_structure(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (status s = validate_drafts(view, drafts); s != status::success) return s;
  if (!accepted) return status::null_pointer;
  if (view.num_seqs == 0) return status::success;
  if (view.kv_heads > 65535) return status::invalid_argument;
  if (launch_result r = detail::prepare_kernel<commit_drafts_kernel<commit_block_threads>>(0, paged_min_cc); !r.ok())
    return r;
  return detail::launch_kernel<commit_drafts_kernel<commit_block_threads>>(
      dim3(view.num_seqs, view.kv_heads), dim3(commit_block_threads), 0, launch_options{stream, false}, view, drafts,
      accepted, new_seq_lens, flags);
}

// drafts: the staging area, or a draft_view with null pointers when drafts are
// not enabled (then no pending-draft check). flags: optional [count].
template <class Codec>
inline launch_result launch_fork(const paged_cache_view& view, const draft_view& drafts,
                                 const std::int32_t* src_slots, const std::int32_t* dst_slots, std::int32_t count,
                                 std::int32_t* flags = nullptr, cudaStream_t stream = nullptr) {
  if (status s = validate_structure(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (drafts.draft_state || drafts.draft_k || drafts.draft_v)
    if (status s = validate_drafts(view, drafts); s != status::success) return s;
  if (count < 0 || view.kv_heads > 65535) return status::invalid_argument;
  if (count == 0) return status::success;
  if (!src_slots || !dst_slots) return status::null_pointer;
  if (launch_result r = detail::prepare_kernel<fork_kernel<commit_block_threads>>(0, paged_min_cc); !r.ok()) return r;
  return detail::launch_kernel<fork_kernel<commit_block_threads>>(dim3(count, view.kv_heads),
                                                                  dim3(commit_block_threads), 0,
                                                                  launch_options{stream, false}, view, drafts,
                                                                  src_slots, dst_slots, flags);
}

}  // namespace device
KVTILE_NAMESPACE_END
