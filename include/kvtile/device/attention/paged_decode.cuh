// kvtile/device/attention/paged_decode.cuh: paged decode attention over the quantized
// KV cache (method.md sections 7-8), and the same kernel over an fp16 paged
// cache as a baseline. docs/attention.md describes the design and its numbers.
//
//   kvtile::attention::decode_args<half_t> a;  // q, out, lse, q_heads, softmax_scale, window_left, logit_softcap
//   a.workspace_bytes = kvtile::attention::workspace_bytes<Codec>(cache, a.q_heads);  // allocate, set a.workspace
//   kvtile::attention::decode_plan plan;
//   status s = plan.plan<Codec>(cache, host_seq_lens, a, stream);  // host: balanced chunks, work list uploaded
//   s = plan.run<Codec>(cache, a, stream);                         // device: capturable in a CUDA graph
//   // or, in one call without host lengths: kvtile::attention::paged_decode<Codec>(cache, a, stream)
//
// Multi-query (decode_args::qo_indptr, max_q_tokens <= 8): the query rows of a
// KV head are (new token, query head) pairs, causal among the new tokens.
//
// Inputs: queries [num_seqs][q_heads][D] (half_t or bfloat16_t, original frame),
// the paged cache view (records per (page, KV head), fp16 tail and optional
// sink in the rotated frame). Output [num_seqs][q_heads][D] in the query type
// (original frame) and optionally lse[num_seqs][q_heads] = ln sum_t exp(s_t)
// (-inf for an empty sequence, whose output is 0).
//
// Structure: a unit is one (sequence, KV head, query group of up to 16 query
// heads: one or two n-blocks of the MMA's N = 8); its tiles are cut into chunks (detail/schedule.hpp),
// and each persistent CTA runs its chunks one after the other. The CTA's warps
// take whole tiles (a record, the sink or the tail), fetched by cp.async.bulk
// into shared-memory stages (mbarriers; one copy per record); QK and PV run on
// mma.sync m16n8k16 with codes converted in registers; the scales are folded
// out of the inner loop; the softmax is online in fp32. Warps merge in shared
// memory, chunks merge by log-sum-exp in a second kernel that also un-rotates.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../codec/tile_codec.hpp"
#include "../../config.hpp"
#include "../../numeric/bfloat16.hpp"
#include "../../numeric/half.hpp"
#include "../../packing/fp16_scales.hpp"
#include "../../packing/fp8_scales.hpp"
#include "../../paged/paged_cache.hpp"
#include "../../rotation/hadamard.hpp"
#include "../../status.hpp"
#include "../../paged/fp16_paged_cache.hpp"
#include "decode_args.hpp"
#include "detail/host.cuh"
#include "detail/kernels.cuh"
#include "detail/launch.cuh"
#include "detail/schedule.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention {

// ---------------------------------------------------------------- quantized cache

// The tunables of the quantized kernel (measured on the H200, k4v2_g128
// D = 128, docs/attention.md): the ring kernel's stages per warp and warps
// (2 and 8: 255 registers; one stage per warp with 12 / 16 warps measured
// slower), and the stage-pool kernel's stages and warps (16 shared by 12:
// 168 registers; faster than the ring kernel for long chunks, slower for
// short ones, hence used for chunks of >= 128 tiles; 0 stages: no pool
// kernel). Groups of more than 8 query heads per KV head run 16 query rows
// per unit (max_unit_rows = 16; 8: units of 8 rows, each record read once per
// 8 rows) on the two-n-block ring kernel: rings of two warps (one per 8
// rows) sharing each record, wide_stages stages per ring. A policy with other
// values is another set of kernels.
struct decode_policy {
  static constexpr int stages = 2;
  static constexpr int max_rings = 8;
  static constexpr int pool_stages = 16;
  static constexpr int pool_warps = 12;
  static constexpr int max_unit_rows = 16;
  static constexpr int wide_stages = 3;
  // The conflict-free stage layout (detail/tile_layout.cuh): no bank
  // conflicts, but slower on the H200 (docs/attention.md); off.
  static constexpr bool conflict_free_layout = false;
};

// Launch configuration of the quantized kernel for Codec (a tile_codec).
template <class Codec, class Policy = decode_policy>
struct quant_kernel_traits {
  using config = typename Codec::config;
  using packer = typename Codec::packer;
  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int stages = Policy::stages;
  static constexpr std::size_t record_bytes = Codec::record_bytes;
  static constexpr int warps_per_record = detail::warps_per_record<config>();
  // The record as laid out in a stage (tile_layout.cuh).
  static constexpr bool swizzled =
      detail::quant_swizzled<config, packer, stages, Policy::max_rings, Policy::conflict_free_layout>();
  using stage = detail::stage_layout<config, packer, warps_per_record, swizzled>;
  // records in flight per CTA / stages: as many rings as the stages, the query
  // rows and the fragments leave room for
  static constexpr int rings =
      detail::fit_rings<D, stages, stage::bytes, true,
                        detail::warps_for<record_bytes, stages, Policy::max_rings>()>();
  static constexpr int warps = rings * warps_per_record;
  using plan = detail::smem_plan<D, warps, stages, stage::bytes, rings, true>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  // The stage-pool kernel for long chunks: pool_warps warps share `pool`
  // stages (0: no pool kernel).
  static constexpr int pool_warps = warps_per_record == 1 && Policy::pool_stages > 0 ? Policy::pool_warps : 0;
  static constexpr int pool =
      pool_warps > 0 ? detail::fit_pool<D, pool_warps, stage::bytes, true, Policy::pool_stages>()
                     : 0;
  static constexpr std::size_t pool_smem_bytes =
      detail::pool_smem_bytes<D, pool_warps, stage::bytes, true, pool>();
  // The two-n-block kernel (16 query rows per unit; max_unit_rows >= 16): rings
  // of two warps, at most max_rings / 2 rings (the warps of the ring kernel),
  // used when at least two rings fit (records of 24+ KB at D = 256 leave one:
  // 8-row units then).
  static constexpr int wide_stages = Policy::wide_stages;
  static constexpr bool wide_swizzled =
      detail::quant_swizzled<config, packer, wide_stages, Policy::max_rings / 2, Policy::conflict_free_layout,
                             2 * detail::max_group>();
  using wide_stage = detail::stage_layout<config, packer, 1, wide_swizzled>;
  static constexpr int wide_rings =
      detail::fit_rings<D, wide_stages, wide_stage::bytes, true,
                        detail::warps_for<record_bytes, wide_stages, Policy::max_rings / 2>(), 2 * detail::max_group>();
  static constexpr bool wide = Policy::max_unit_rows >= 2 * detail::max_group && wide_rings >= 2;
  static constexpr int wide_warps = 2 * wide_rings;
  static constexpr std::size_t wide_smem_bytes =
      wide ? detail::smem_plan<D, wide_warps, wide_stages, wide_stage::bytes, wide_rings, true,
                               2 * detail::max_group>::bytes
           : 0;
  static constexpr std::size_t max_smem_bytes = std::max({smem_bytes, pool_smem_bytes, wide_smem_bytes});
  static_assert(!wide || wide_smem_bytes <= 227 * 1024, "shared memory plan exceeds the SM");
  // Query rows of a unit (8 or 16) for `rows` query rows per KV head (max_q_tokens x group).
  static int unit_rows(int rows) { return detail::unit_rows_for(rows, wide ? 2 * detail::max_group : detail::max_group); }
  static int rings_for(int rows) { return unit_rows(rows) > detail::max_group ? wide_rings : rings; }
  static_assert(config::key_bits != 8 && config::value_bits != 8, "the decode kernel supports 2- and 4-bit codes");
  static_assert(std::is_same_v<typename Codec::rotation, hadamard>, "the decode kernel un-rotates with plain Hadamard");
  static_assert(smem_bytes <= 227 * 1024, "shared memory plan exceeds the SM");
  // tile_range's clamp: every complete tile in the page table, plus the tail.
  static int max_len(const paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * G + G - 1;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
};

// Splits of the one-call path (num_splits = 0: automatic).
template <class Codec, class Policy = decode_policy>
int plan_splits(const paged_cache_view& cache, int q_heads, int num_splits = 0, int max_q_tokens = 1) {
  using tr = quant_kernel_traits<Codec, Policy>;
  const int all = max_q_tokens * (cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1), rows = tr::unit_rows(all);
  const int units = cache.num_seqs * cache.kv_heads * ((all + rows - 1) / rows);
  return detail::choose_splits(units, cache.max_pages_per_seq + 1, tr::rings_for(all), num_splits,
                               detail::current_sm_count());
}

// Workspace of paged_decode and of decode_plan (the same bound, for units of 8
// or 16 query rows: every policy), for the current device; max_q_tokens as in
// decode_args (multi-query).
template <class Codec>
std::size_t workspace_bytes(const paged_cache_view& cache, int q_heads, int num_splits = 0, int max_q_tokens = 1) {
  if (cache.kv_heads <= 0 || q_heads <= 0 || cache.num_seqs < 0 || max_q_tokens < 1) return 0;
  return detail::workspace_bound(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(),
                                 Codec::D, max_q_tokens);
}

// Checks everything that can be checked without reading device memory, and the
// current device (compute capability 9.0, opt-in shared memory):
// unsupported_arch elsewhere, no_device without a GPU.
template <class Codec, class Policy = decode_policy, class QT>
status can_implement(const paged_cache_view& cache, const decode_args<QT>& a) {
  using cfg = typename Codec::config;
  if (cache.head_dim != 64 && cache.head_dim != 128 && cache.head_dim != 256) return status::unsupported_head_dim;
  if (status s = validate_structure(cache, static_cast<std::int64_t>(Codec::record_bytes), cfg::head_dim,
                                    cfg::tile_tokens);
      s != status::success)
    return s;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (!a.workspace || a.workspace_bytes < workspace_bytes<Codec>(cache, a.q_heads, a.num_splits, a.max_q_tokens))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  int dev = 0;
  return detail::current_device(dev, quant_kernel_traits<Codec, Policy>::max_smem_bytes);
}

namespace detail {
// Launches the quantized kernel variant (16-row rings, pool or rings, packed
// or 8-query layout); p.unit_rows = 16 selects the two-n-block kernel.
template <class Codec, class Policy, class QT>
status launch_quant(const paged_cache_view& cache, const decode_args<QT>& a, bool pool, dim3 grid,
                    const kernel_params& p, cudaStream_t stream) {
  using tr = quant_kernel_traits<Codec, Policy>;
  using cfg = typename tr::config;
  using pk = typename tr::packer;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return status::cuda_error;
  const bool packed = p.rows_total <= max_group / 2;
  auto go = [&](auto kernel, std::size_t smem, int warps, std::atomic<std::uint64_t>& configured) {
    if (status s = configure_kernel(kernel, smem, dev, configured); s != status::success) return s;
    return launch<QT, tr::D, true>(kernel, smem, warps * 32, grid, cache, p, a, stream);
  };
  if constexpr (tr::wide) {
    if (p.unit_rows > max_group) {
      static std::atomic<std::uint64_t> configured{0};
      return go(quant_decode_kernel<cfg, pk, QT, tr::wide_rings, tr::wide_stages, false, 0, 2, tr::wide_swizzled>,
                tr::wide_smem_bytes, tr::wide_warps, configured);
    }
  }
  if constexpr (tr::pool > 0) {
    if (pool && packed) {
      static std::atomic<std::uint64_t> configured{0};  // per instantiation (one kernel), bit per device
      return go(quant_decode_kernel<cfg, pk, QT, tr::pool_warps, 1, true, tr::pool, 1, tr::swizzled>,
                tr::pool_smem_bytes, tr::pool_warps, configured);
    }
    if (pool) {
      static std::atomic<std::uint64_t> configured{0};
      return go(quant_decode_kernel<cfg, pk, QT, tr::pool_warps, 1, false, tr::pool, 1, tr::swizzled>,
                tr::pool_smem_bytes, tr::pool_warps, configured);
    }
  }
  if (packed) {
    static std::atomic<std::uint64_t> configured{0};
    return go(quant_decode_kernel<cfg, pk, QT, tr::rings, tr::stages, true, 0, 1, tr::swizzled>, tr::smem_bytes,
              tr::warps, configured);
  }
  static std::atomic<std::uint64_t> configured{0};
  return go(quant_decode_kernel<cfg, pk, QT, tr::rings, tr::stages, false, 0, 1, tr::swizzled>, tr::smem_bytes,
            tr::warps, configured);
}
}  // namespace detail

// Decode attention over the quantized paged cache in one call (no host
// lengths): every sequence's visible tiles are cut into the same number of
// splits (plan_splits, from max_pages_per_seq), two kernels on `stream`.
// Capturable in a CUDA graph (reads the lengths on the device); decode_plan
// balances ragged batches.
template <class Codec, class Policy = decode_policy, class QT>
status paged_decode(const paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) {
  using tr = quant_kernel_traits<Codec, Policy>;
  if (status s = can_implement<Codec, Policy>(cache, a); s != status::success) return s;
  if (cache.num_seqs == 0) return status::success;
  const int span = detail::q_span_of(a);
  const int splits = plan_splits<Codec, Policy>(cache, a.q_heads, a.num_splits, span);
  const int rows = tr::unit_rows(detail::rows_per_kv_head(a, cache.kv_heads));
  const detail::ws_layout L = detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits,
                                                 detail::current_sm_count(), tr::D, rows, span);
  const detail::kernel_params p = detail::make_params(cache.kv_heads, a, splits, tr::max_len(cache), L, false, rows);
  if (static_cast<std::int64_t>(cache.num_seqs) * p.units * splits > L.chunks) return status::invalid_argument;
  // Single-split launches over long sequences: the stage-pool kernel (more warps per SM).
  const bool pool = splits == 1 && cache.max_pages_per_seq >= 128;
  return detail::launch_quant<Codec, Policy, QT>(cache, a, pool, dim3(splits, p.units, cache.num_seqs), p, stream);
}

// ---------------------------------------------------------------- fp16 baseline

// The baseline's page size (tokens) and launch configuration for head_dim D.
template <int D>
struct fp16_kernel_traits {
  static constexpr int page_tokens = 64;
  static constexpr int stages = 2;
  static constexpr std::size_t stage_bytes = static_cast<std::size_t>(page_tokens) * D * 2 * 2;
  static constexpr int warps = detail::warps_for<stage_bytes, stages>();
  using plan = detail::smem_plan<D, warps, stages, stage_bytes>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  static_assert(smem_bytes <= 227 * 1024, "shared memory plan exceeds the SM");
  static int max_len(const fp16_paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * page_tokens;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
};

template <int D>
int plan_splits_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  const int group = cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1;
  const int units = cache.num_seqs * cache.kv_heads * ((group + detail::max_group - 1) / detail::max_group);
  return detail::choose_splits(units, cache.max_pages_per_seq, fp16_kernel_traits<D>::warps, num_splits,
                               detail::current_sm_count());
}

template <int D>
std::size_t workspace_bytes_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  if (cache.kv_heads <= 0 || q_heads <= 0 || cache.num_seqs < 0) return 0;
  return detail::layout_for(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(), D).bytes;
}

template <int D, class QT>
status can_implement_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a) {
  if (cache.head_dim != D) return status::unsupported_head_dim;
  if (cache.page_tokens != fp16_kernel_traits<D>::page_tokens) return status::unsupported_tile_tokens;
  if (!cache.k || !cache.v || !cache.page_table || !cache.seq_lens) return status::null_pointer;
  if (cache.max_pages_per_seq < 0 || cache.num_pages < 0) return status::invalid_argument;
  if (reinterpret_cast<std::uintptr_t>(cache.k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(cache.v) % 16 != 0)
    return status::misaligned;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (a.qo_indptr) return status::invalid_argument;  // the baseline decodes one token per sequence
  if (!a.workspace || a.workspace_bytes < workspace_bytes_fp16<D>(cache, a.q_heads, a.num_splits))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  int dev = 0;
  return detail::current_device(dev, fp16_kernel_traits<D>::smem_bytes);
}

namespace detail {
template <int D, class QT>
status launch_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, dim3 grid, const kernel_params& p,
                   cudaStream_t stream) {
  using tr = fp16_kernel_traits<D>;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return status::cuda_error;
  auto kernel = fp16_decode_kernel<D, tr::page_tokens, QT, tr::warps, tr::stages>;
  static std::atomic<std::uint64_t> configured{0};  // per instantiation (one kernel), bit per device
  if (status s = configure_kernel(kernel, tr::smem_bytes, dev, configured); s != status::success) return s;
  return launch<QT, D, false>(kernel, tr::smem_bytes, tr::warps * 32, grid, cache, p, a, stream);
}
}  // namespace detail

// fp16 baseline: same kernel structure over fp16 pages, original frame (no rotation).
template <int D, class QT>
status paged_decode_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) {
  if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
  if (cache.num_seqs == 0) return status::success;
  const int splits = plan_splits_fp16<D>(cache, a.q_heads, a.num_splits);
  const detail::ws_layout L =
      detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits, detail::current_sm_count(), D);
  if (static_cast<std::int64_t>(cache.num_seqs) * cache.kv_heads * splits > L.chunks) return status::invalid_argument;
  const detail::kernel_params p =
      detail::make_params(cache.kv_heads, a, splits, fp16_kernel_traits<D>::max_len(cache), L, false);
  return detail::launch_fp16<D, QT>(cache, a, dim3(splits, p.units, cache.num_seqs), p, stream);
}

// ---------------------------------------------------------------- plan / run

// A decode step split into a host plan and a launch. plan() reads a HOST copy
// of the lengths, cuts every (sequence, KV head, query group) into chunks of
// whole tiles and assigns them to one persistent CTA per SM (balanced over
// ragged lengths; small batches are cut finer to fill the GPU), then copies
// the work list into the workspace on `stream` (stream-ordered: the previous
// step on the same stream finishes first). run() launches the attention and
// merge kernels with a grid and workspace fixed by the plan's sizes: it can be
// captured in a CUDA graph, and the graph replayed after plan() was called
// again (outside the capture) with new lengths for the same cache shape
// (num_seqs, kv_heads, max_pages_per_seq), q_heads, window and workspace.
// The kernel variant is chosen by the first plan after construction or a
// shape change; every later plan's work list is valid for it. The device
// lengths must equal the planned host lengths for a correct result; if they
// do not, the kernel still reads only within the page table, tails and sinks.
// The work list lives in the workspace: another paged_decode or plan on the
// same workspace overwrites it (plan again before the next run).
// Not thread-safe: one plan per stream.
class decode_plan {
 public:
  template <class Codec, class Policy = decode_policy, class QT>
  status plan(const paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
              cudaStream_t stream = nullptr) {
    using tr = quant_kernel_traits<Codec, Policy>;
    if (!host_seq_lens) return status::null_pointer;
    if (status s = can_implement<Codec, Policy>(cache, a); s != status::success) return s;
    const key k = make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a);
    const int ctas = grid_size();
    const bool fresh = !(k == key_) || ctas != ctas_;
    const int all = detail::rows_per_kv_head(a, cache.kv_heads), rows = tr::unit_rows(all);
    if (status s = build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::G, tr::max_len(cache), ctas,
                         tr::rings_for(all), Codec::D, rows);
        s != status::success)
      return s;
    if (fresh)
      pool_ = tr::pool > 0 && rows == detail::max_group && sched_.chunks > 0 && total_tiles_ >= 128LL * sched_.chunks;
    key_ = k;
    return upload(a, stream);
  }

  template <class Codec, class Policy = decode_policy, class QT>
  status run(const paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) const {
    using tr = quant_kernel_traits<Codec, Policy>;
    if (!(make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a) == key_))
      return status::invalid_argument;  // not the planned shape, options or workspace
    if (status s = can_implement<Codec, Policy>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, 1, tr::max_len(cache), layout_, true,
                                                        tr::unit_rows(detail::rows_per_kv_head(a, cache.kv_heads)));
    return detail::launch_quant<Codec, Policy, QT>(cache, a, pool_, dim3(ctas_), p, stream);
  }

  template <int D, class QT>
  status plan_fp16(const fp16_paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
                   cudaStream_t stream = nullptr) {
    using tr = fp16_kernel_traits<D>;
    if (!host_seq_lens) return status::null_pointer;
    if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
    const key k = make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a);
    const int ctas = grid_size();
    if (status s = build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::page_tokens, tr::max_len(cache), ctas,
                         tr::warps, D);
        s != status::success)
      return s;
    key_ = k;
    return upload(a, stream);
  }

  template <int D, class QT>
  status run_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, cudaStream_t stream = nullptr) const {
    using tr = fp16_kernel_traits<D>;
    if (!(make_key<tr, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a) == key_))
      return status::invalid_argument;
    if (status s = can_implement_fp16<D>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, 1, tr::max_len(cache), layout_, true);
    return detail::launch_fp16<D, QT>(cache, a, dim3(ctas_), p, stream);
  }

  // At most n persistent CTAs from the next plan on (0: one per SM), e.g. to
  // leave SMs to concurrent work.
  void limit_ctas(int n) { max_ctas_ = n > 0 ? n : 0; }
  int ctas() const { return ctas_; }                // the grid of run()
  int chunks() const { return sched_.chunks; }      // partials of the last plan
  long long makespan() const { return sched_.makespan; }  // the scheduler's cost estimate (tiles)
  bool stage_pool() const { return pool_; }         // the kernel variant run() launches
  const detail::schedule& last_schedule() const { return sched_; }

 private:
  struct key {
    const void* type = nullptr;
    int num_seqs = -1, kv_heads = 0, max_pages = 0, q_heads = 0, window_left = -1, num_splits = 0, q_span = 0;
    const void* qo_indptr = nullptr;
    const void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    int device = -1;
    bool operator==(const key& o) const {
      return type == o.type && num_seqs == o.num_seqs && kv_heads == o.kv_heads && max_pages == o.max_pages &&
             q_heads == o.q_heads && window_left == o.window_left && num_splits == o.num_splits &&
             q_span == o.q_span && qo_indptr == o.qo_indptr &&
             workspace == o.workspace && workspace_bytes == o.workspace_bytes && device == o.device;
    }
  };
  template <class Kind, class QT>
  static key make_key(int num_seqs, int kv_heads, int max_pages, const decode_args<QT>& a) {
    key k;
    k.type = &detail::type_tag<std::pair<Kind, QT>>::id;
    k.num_seqs = num_seqs;
    k.kv_heads = kv_heads;
    k.max_pages = max_pages;
    k.q_heads = a.q_heads;
    k.q_span = detail::q_span_of(a);
    k.qo_indptr = a.qo_indptr;
    k.window_left = a.window_left < 0 ? -1 : a.window_left;
    k.num_splits = a.num_splits;
    k.workspace = a.workspace;
    k.workspace_bytes = a.workspace_bytes;
    if (cudaGetDevice(&k.device) != cudaSuccess) k.device = -1;
    return k;
  }

  int grid_size() const {
    const int sms = detail::current_sm_count();
    return max_ctas_ > 0 && max_ctas_ < sms ? max_ctas_ : sms;
  }

  template <class QT>
  status build(int num_seqs, int kv_heads, const std::int32_t* lens, const decode_args<QT>& a, int T, int max_len,
               int ctas, int rings, int d, int rows = detail::max_group) {
    const int span = detail::q_span_of(a), all = detail::rows_per_kv_head(a, kv_heads);
    detail::schedule_request r;
    r.seq_lens = lens;
    r.num_seqs = num_seqs;
    r.units_per_seq = kv_heads * ((all + rows - 1) / rows);
    r.q_span = span;
    r.tile_tokens = T;
    r.max_len = max_len;
    r.window_left = a.window_left < 0 ? -1 : a.window_left;
    r.ctas = ctas;
    r.rings = rings;
    r.forced_splits = a.num_splits;
    layout_ = detail::layout_for(num_seqs, kv_heads, a.q_heads, a.num_splits, ctas, d, rows, span);
    sched_ = detail::make_schedule(r);
    if (sched_.chunks > layout_.chunks) return status::invalid_argument;  // cannot happen (max_chunks)
    total_tiles_ = 0;
    for (const detail::work_item& w : sched_.items) total_tiles_ += w.j1 - w.j0;
    ctas_ = ctas;
    return status::success;
  }

  template <class QT>
  status upload(const decode_args<QT>& a, cudaStream_t stream) {
    // One copy of [work list | CTA ranges | spans], laid out as in the workspace.
    const std::size_t n = layout_.bytes - layout_.work;
    staging_.assign(n, 0);
    std::memcpy(staging_.data(), sched_.items.data(), sched_.items.size() * sizeof(detail::work_item));
    std::memcpy(staging_.data() + (layout_.cta - layout_.work), sched_.cta_begin.data(),
                sched_.cta_begin.size() * sizeof(std::int32_t));
    std::memcpy(staging_.data() + (layout_.spans - layout_.work), sched_.spans.data(),
                sched_.spans.size() * sizeof(detail::unit_span));
    // Pageable source: the call returns once the bytes are staged, so the
    // buffer may be refilled by the next plan() at once.
    if (cudaMemcpyAsync(static_cast<std::uint8_t*>(a.workspace) + layout_.work, staging_.data(), n,
                        cudaMemcpyHostToDevice, stream) != cudaSuccess)
      return status::cuda_error;
    return status::success;
  }

  key key_;
  detail::schedule sched_;
  detail::ws_layout layout_;
  std::vector<std::uint8_t> staging_;
  long long total_tiles_ = 0;
  int ctas_ = 0;
  int max_ctas_ = 0;
  bool pool_ = false;
};


}  // namespace attention
KVTILE_NAMESPACE_END
