// kvtile/device/attention/paged_decode.cuh: paged decode attention over the quantized
// KV cache (method.md sections 7-8), and the same kernel over an fp16 paged
// cache as a baseline. docs/attention.md describes the design and its numbers.
//
//   kvtile::attention::decode_args<half_t> a;  // q, out, lse, q_heads, softmax_scale, window_left, logit_softcap
//   a.workspace_bytes = kvtile::attention::workspace_bytes<Codec>(cache, a.q_heads);  // allocate, set a.workspace
//   kvtile::attention::decode_plan plan;
//   status s = plan.plan<Codec>(cache, host_seq_lens, a, stream);  // host: balanced chunks, work list uploaded
//   s = plan.run<Codec>(cache, a, stream);                         // device: capturable in a CUDA graph
//   // the policy of the current GPU is chosen from the default chain (decode_policy: sm_80 .. sm_120);
//   // plan<Codec, attention::forced<attention::decode_policy_sm86>> runs another GPU's configuration
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
// take whole tiles (a record, the sink or the tail), fetched into shared-memory
// stages that complete on mbarriers (cp.async.bulk on sm_90+, 16-byte cp.async
// below; the policy of the GPU's architecture sizes them); QK and PV run on
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
#include <tuple>
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
#include "../detail/launch.cuh"
#include "detail/schedule.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention {

// ---------------------------------------------------------------- policies

// A decode policy: the shared memory the kernels plan for, the load path and
// the tunables, for the kernel images of targets [min_arch, max_arch) (10 x
// the compute capability a translation unit is compiled for: 800 for sm_80 or
// compute_80 PTX, 900 for sm_90a). Kernels of a policy have a body only on its
// targets (others trap), so each target compiles the policies its devices can
// use, and the host picks the policy by the same rule from the image the
// device runs (its PTX version) and the device's opt-in shared memory.
//
// Fields: smem_budget (bytes of shared memory per block the plan may use;
// every kernel of the policy static_asserts it), bulk_copies (records fetched
// by cp.async.bulk with mbarrier transaction counts where the target has them,
// sm_90+; otherwise 16-byte cp.async by the issuing warp), the ring kernel's
// stages per warp and rings (max_rings), the stage-pool kernel for long chunks
// (pool_warps share pool_stages stages; 0 stages: none; used where a planned
// step's chunks average at least pool_min_tiles tiles), units of 16 query
// rows (max_unit_rows 16: two-n-block rings of wide_stages stages, whose two
// warps split each tile's n-blocks or, wide_token_split, its tokens, and with
// token_split_exchange make half the query operands each), the
// fp16 baseline's stages per warp (fp16_stages), and where a planned step
// merges a unit's chunks (fused_merge: in the attention kernel, by the CTA that
// finishes the unit's last chunk, so a step is one kernel; off, the default: a
// second merge kernel, as the one-call paged_decode always launches).
//
// decode_policy_sm90 is the measured one (H200, k4v2_g128 D = 128,
// docs/attention.md: 2 stages x 8 rings = 255 registers; a 16-stage pool
// shared by 12 warps for chunks of >= 128 tiles; 16-row units on rings of two
// warps with 3 stages, the warps splitting each tile's tokens). The others
// size the same kernels for their budgets.
struct decode_policy_sm90 {
  static constexpr int min_arch = 900;   // H100, H200, GH200, B200, GB200 (sm_90 .. sm_11x images)
  static constexpr int max_arch = 1200;
  static constexpr std::size_t smem_budget = 232448;  // 227 KB
  static constexpr bool bulk_copies = true;
  static constexpr int stages = 2;
  static constexpr int max_rings = 8;
  static constexpr int pool_stages = 16;
  static constexpr int pool_warps = 12;
  // A planned step runs the stage-pool kernel when its chunks average at least this many tiles
  // (the one-call paged_decode: a single split and max_pages_per_seq at least this). 16 was 4-10%
  // slower on ragged batches, 64 x 8K and 128 x 4K (H200 2026-12-06, docs/attention.md "Schedule").
  static constexpr int pool_min_tiles = 128;
  // Tail pieces (opt-in: decode_policy_tail_pieces): a stage-pool step's chunks of at least
  // 2 x steal_tail_tiles stay whole on their CTA, and their last steal_tail_tiles, in pieces of
  // steal_piece_tiles (at most 4), may be taken by CTAs whose own chunks are done; the owner runs
  // every piece nobody took first (docs/attention.md "Schedule"). At 16 x 64K on the H100 the
  // default step 7.9-10.9% faster, k2v2 2.4-4.6% and fp16 scales 0.8-3.2% slower, and a chunk's
  // split (so the fp32 rounding of the merge) can differ from run to run: off by default (0).
  static constexpr int steal_tail_tiles = 0;
  static constexpr int steal_piece_tiles = 64;
  static constexpr int max_unit_rows = 16;
  static constexpr int wide_stages = 3;
  // On: 8% faster at GQA 16 (8, 128, 8, 128, 32K), 3-9% with 4 or 8 new tokens per sequence, equal at
  // (2, 16, 1, 128, 64K) (H100 2026-12-06, docs/attention.md step 3); forced 163 / 99 KB policies
  // 4-14% faster at GQA 16 and 6-16% with 8 new tokens (inherited by every derived policy).
  static constexpr bool wide_token_split = true;
  // The token split's two warps each make the query B operands (q a, split;
  // beta) of half the k-steps and exchange them through shared memory (8.5 KB
  // per ring, where the budget holds it): 1% faster at GQA 16, 1-3% with 4 or
  // 8 new tokens per sequence (H100 2026-12-06, docs/attention.md step 3).
  static constexpr bool token_split_exchange = true;
  static constexpr int fp16_stages = 2;
  // Off: the fused merge (on) measured within +-2% of the merge kernel on most shapes, 8% faster at
  // (2, 8, 1, 128, 32K) but 8% slower at (2, 16, 1, 128, 64K) and 3.5% at ragged32 (the last CTA
  // merges its unit's rows alone; more spills), H100 2026-12-05 (docs/attention.md, "Merge").
  static constexpr bool fused_merge = false;
};
// A100, A30 (and compute_80 PTX on any device with 163 KB): 16-byte cp.async.
struct decode_policy_sm80 : decode_policy_sm90 {
  static constexpr int min_arch = 800;
  static constexpr int max_arch = 900;
  static constexpr std::size_t smem_budget = 166912;  // 163 KB
  static constexpr bool bulk_copies = false;
  static constexpr int max_rings = 8;
  static constexpr int pool_stages = 11;
  // 10 warps (168 registers, 104 B of spill stores on sm_80) beat 8 without spills: forced on the H200
  // at 16 x 64K, 323 us against about 384 us (2026-12-05-h200-attention-archs{,-r2}.md).
  static constexpr int pool_warps = 10;
  static constexpr int wide_stages = 3;
};
// RTX 3090 / A6000 / A10 (8.6), RTX 4090 / L40S / L4 (8.9), and sm_80 images
// on them: 99 KB per block, 16-byte cp.async.
struct decode_policy_sm86 : decode_policy_sm80 {
  static constexpr std::size_t smem_budget = 101376;  // 99 KB
  static constexpr int max_rings = 4;
  static constexpr int pool_stages = 6;
  static constexpr int pool_warps = 5;
  static constexpr int wide_stages = 2;
  // Forced on the H100: the exchange 1.3% slower at GQA 16 (206 vs 204 us; 2026-12-06-h100-xchg.md).
  static constexpr bool token_split_exchange = false;
  static constexpr int fp16_stages = 1;
};
// RTX 5090, RTX PRO 6000, DGX Spark (12.x): 99 KB per block, bulk copies.
struct decode_policy_sm120 : decode_policy_sm86 {
  static constexpr int min_arch = 1200;
  static constexpr int max_arch = 1 << 30;
  static constexpr bool bulk_copies = true;
  // Forced on the H100: the exchange 1% faster at GQA 16 (2026-12-06-h100-xchg.md).
  static constexpr bool token_split_exchange = true;
};

// A chain of policies: the first whose kernels the device's image holds and
// whose shared memory fits the device is used.
template <class... Ps>
struct decode_policies {
  static_assert(sizeof...(Ps) > 0, "a chain holds at least one policy");
};
// The default: every GPU from compute capability 8.0 on.
using decode_policy = decode_policies<decode_policy_sm90, decode_policy_sm120, decode_policy_sm80, decode_policy_sm86>;
// The default chain with every policy P replaced by T<P>: a tuning variant
// (say, another unit size) that runs wherever the default does.
template <template <class> class T>
using decode_policy_with = decode_policies<T<decode_policy_sm90>, T<decode_policy_sm120>, T<decode_policy_sm80>,
                                           T<decode_policy_sm86>>;

// Tail pieces on (128 tiles in pieces of 64; docs/attention.md "Schedule"): the
// default chain with them, for stage-pool steps with bulk copies (sm_90+).
template <class P>
struct tail_pieces : P {
  static constexpr int steal_tail_tiles = 128;
};
using decode_policy_tail_pieces = decode_policy_with<tail_pieces>;

// Policy P compiled for every target and selected on any device whose opt-in
// shared memory holds it: runs another GPU's configuration on the GPU at hand
// (tests and benchmarks: on an H200 forced<decode_policy_sm86> runs the 99 KB
// kernels with their cp.async load path, forced<decode_policy_sm120> the 99 KB
// kernels with bulk copies; from compute_80/86/89 PTX every policy loads with
// cp.async).
template <class P>
struct forced : P {
  static constexpr int min_arch = 0;
  static constexpr int max_arch = 1 << 30;
};

namespace detail {
template <class T>
struct tag_t {
  using type = T;
};
template <class P>
struct chain_of {
  using type = decode_policies<P>;
};
template <class... Ps>
struct chain_of<decode_policies<Ps...>> {
  using type = decode_policies<Ps...>;
};
// Calls f(tag_t<P>) for the policy at `index` of the chain (index in range).
template <class... Ps, class F>
auto with_policy(decode_policies<Ps...>, int index, F&& f) {
  using R = decltype(f(tag_t<std::tuple_element_t<0, std::tuple<Ps...>>>{}));
  R r{};
  int i = 0;
  (void)((i++ == index ? (r = f(tag_t<Ps>{}), true) : false) || ...);
  return r;
}
}  // namespace detail

// ---------------------------------------------------------------- quantized cache

// Launch configuration of the quantized kernel for Codec (a tile_codec) under
// one policy P (not a chain).
template <class Codec, class P>
struct quant_kernel_traits {
  using config = typename Codec::config;
  using packer = typename Codec::packer;
  using policy = P;
  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr std::size_t budget = P::smem_budget;
  static constexpr int stages = P::stages;
  static constexpr std::size_t record_bytes = Codec::record_bytes;
  static constexpr int warps_per_record = detail::warps_per_record<config>();
  using stage = detail::stage_layout<config, packer, warps_per_record>;  // the record in a stage
  // records in flight per CTA / stages: as many rings as the stages, the query
  // rows and the fragments leave room for
  static constexpr int rings =
      detail::fit_rings<D, stages, stage::bytes, true,
                        detail::warps_for<record_bytes, stages, P::max_rings, budget>(), budget>();
  static constexpr int warps = rings * warps_per_record;
  using plan = detail::smem_plan<D, warps, stages, stage::bytes, rings, true>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  // The stage-pool kernel for long chunks: pool_warps warps share `pool`
  // stages (0: no pool kernel).
  static constexpr int pool_warps = warps_per_record == 1 && P::pool_stages > 0 ? P::pool_warps : 0;
  static constexpr int pool =
      pool_warps > 0 ? detail::fit_pool<D, pool_warps, stage::bytes, true, P::pool_stages, budget>() : 0;
  static constexpr std::size_t pool_smem_bytes = detail::pool_smem_bytes<D, pool_warps, stage::bytes, true, pool>();
  // The two-n-block kernel (16 query rows per unit; max_unit_rows >= 16): rings
  // of two warps, at most max_rings / 2 rings, used when at least two rings fit
  // (otherwise 8-row units).
  static constexpr int wide_stages = P::wide_stages;
  static constexpr int wide_rings =
      detail::fit_rings<D, wide_stages, stage::bytes, true,
                        detail::warps_for<record_bytes, wide_stages, (P::max_rings / 2 > 1 ? P::max_rings / 2 : 1),
                                          budget>(),
                        budget, 2 * detail::max_group>();
  static constexpr bool wide = P::max_unit_rows >= 2 * detail::max_group && wide_rings >= 2;
  static constexpr int wide_warps = 2 * wide_rings;
  // wide_token_split (the measured tile, G = 128 tokens, at D <= 128, with
  // the epilogue's four warp states per ring fitting the stage area): the
  // ring's two warps split each tile's tokens, each holding both n-blocks,
  // instead of one n-block each.
  static constexpr int wide_wb =
      P::wide_token_split && G == 128 && D <= 128 &&
              detail::merge_scratch_bytes<D, 2 * wide_warps>() <=
                  detail::smem_plan<D, wide_warps, wide_stages, stage::bytes, wide_rings, true,
                                    2 * detail::max_group>::stage_area
          ? 2
          : 1;
  using wide_plan =
      detail::smem_plan<D, wide_warps * wide_wb, wide_stages, stage::bytes, wide_rings, true, 2 * detail::max_group>;
  // With the token split, the query B operands' exchange where it fits (quant_tile XB).
  static constexpr std::size_t wide_smem_bytes =
      wide ? wide_plan::bytes +
                 (wide_wb == 2 ? detail::token_split_xchg_total<P, D, wide_rings, wide_plan::bytes>() : 0)
           : 0;
  static constexpr std::size_t max_smem_bytes = std::max({smem_bytes, pool_smem_bytes, wide_smem_bytes});
  // Whether the ring kernel (one ring at the least) fits the budget; a policy
  // that does not is skipped for this codec (and rejected by a static_assert
  // where its kernels are instantiated). The pool and 16-row kernels are sized
  // to fit or left out.
  static constexpr bool fits = smem_bytes <= budget;
  static_assert(pool_smem_bytes <= budget, "the stage-pool kernel's shared memory exceeds the policy's budget");
  static_assert(wide_smem_bytes <= budget, "the 16-row kernel's shared memory exceeds the policy's budget");
  // Query rows of a unit (8 or 16) for `rows` query rows per KV head (max_q_tokens x group).
  static int unit_rows(int rows) { return detail::unit_rows_for(rows, wide ? 2 * detail::max_group : detail::max_group); }
  static int rings_for(int rows) { return unit_rows(rows) > detail::max_group ? wide_rings : rings; }
  static_assert(config::key_bits != 8 && config::value_bits != 8, "the decode kernel supports 2- and 4-bit codes");
  static_assert(std::is_same_v<typename Codec::rotation, hadamard>, "the decode kernel un-rotates with plain Hadamard");
  // tile_range's clamp: every complete tile in the page table, plus the tail.
  static int max_len(const paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * G + G - 1;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
};

namespace detail {
// Whether policy P can run on the current device, probed with one of its
// kernels: the kernel has a body in the image the device runs and `smem`
// bytes fit (success), or why not (unsupported_arch: try the next policy;
// no_device, cuda_error).
template <class P, auto Kernel>
device::launch_result image_runs(std::size_t smem) {
  int arch = 0;
  const device::launch_result r = device::detail::prepare_kernel<Kernel>(smem, 80, &arch);
  if (r.ok() && !compiled_for<P>(arch)) return {status::unsupported_arch};
  return r;
}

template <class Codec, class P, class QT>
device::launch_result policy_fits() {
  using tr = quant_kernel_traits<Codec, P>;
  if constexpr (!tr::fits) {
    return {status::unsupported_arch};
  } else {
    return image_runs<P, quant_decode_kernel<P, typename tr::config, typename tr::packer, QT, tr::rings, tr::stages,
                                             false, 0, 1>>(tr::max_smem_bytes);
  }
}
// The index in chain Ps... of the first policy that fits (Fits<P>() success).
template <template <class> class Fits, class... Ps>
device::launch_result select_policy(decode_policies<Ps...>, int& index) {
  device::launch_result out{status::unsupported_arch};
  int i = 0;
  bool done = false;
  auto try_one = [&](auto tag) {
    if (done) return;
    const device::launch_result r = Fits<typename decltype(tag)::type>::run();
    out = r;  // without a fitting policy: the last one's reason (and CUDA error)
    if (r.ok() || r.code != status::unsupported_arch) {
      index = i;
      done = true;
    }
    ++i;
  };
  (try_one(tag_t<Ps>{}), ...);
  return out;
}
template <class Codec, class QT>
struct quant_fits {
  template <class P>
  struct of {
    static device::launch_result run() { return policy_fits<Codec, P, QT>(); }
  };
};
}  // namespace detail

// The index of the policy of chain Policy that paged_decode and decode_plan
// use for Codec on the current device, or why there is none.
template <class Codec, class Policy = decode_policy, class QT = half_t>
device::launch_result select_policy(int& index) {
  return detail::select_policy<detail::quant_fits<Codec, QT>::template of>(typename detail::chain_of<Policy>::type{},
                                                                           index);
}

// Splits of the one-call path (num_splits = 0: automatic), with the policy
// selected for the current device (the chain's first without one).
template <class Codec, class Policy = decode_policy>
int plan_splits(const paged_cache_view& cache, int q_heads, int num_splits = 0, int max_q_tokens = 1) {
  int index = 0;
  (void)select_policy<Codec, Policy>(index);
  return detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) {
    using tr = quant_kernel_traits<Codec, typename decltype(tag)::type>;
    if constexpr (!tr::fits) return 1;
    const int all = max_q_tokens * (cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1), rows = tr::unit_rows(all);
    const int units = cache.num_seqs * cache.kv_heads * ((all + rows - 1) / rows);
    return detail::choose_splits(units, cache.max_pages_per_seq + 1, tr::rings_for(all), num_splits,
                                 detail::current_sm_count());
  });
}

// Workspace of paged_decode and of decode_plan (the same bound, for units of 8
// or 16 query rows: every policy), for the current device; max_q_tokens as in
// decode_args (multi-query). 0 for shapes the launchers reject (num_seqs above
// 65535, q_heads not a positive multiple of kv_heads, too many query groups:
// detail::launch_shape_ok; num_splits outside [0, 4096]).
template <class Codec>
std::size_t workspace_bytes(const paged_cache_view& cache, int q_heads, int num_splits = 0, int max_q_tokens = 1) {
  return detail::workspace_bound(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(),
                                 Codec::D, max_q_tokens);
}

namespace detail {
// Everything can_implement checks except the device.
template <class Codec, class QT>
status check_quant_args(const paged_cache_view& cache, const decode_args<QT>& a) {
  using cfg = typename Codec::config;
  if (!is_head_dim(cache.head_dim)) return status::unsupported_head_dim;
  if (status s = validate_structure(cache, static_cast<std::int64_t>(Codec::record_bytes), cfg::head_dim,
                                    cfg::tile_tokens);
      s != status::success)
    return s;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (!a.workspace || a.workspace_bytes < workspace_bytes<Codec>(cache, a.q_heads, a.num_splits, a.max_q_tokens))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  return status::success;
}
}  // namespace detail

// Checks everything that can be checked without reading device memory, and
// that a policy of the chain runs on the current device (unsupported_arch
// below compute capability 8.0 or without a fitting image, no_device without
// a GPU).
template <class Codec, class Policy = decode_policy, class QT>
status can_implement(const paged_cache_view& cache, const decode_args<QT>& a) {
  if (status s = detail::check_quant_args<Codec>(cache, a); s != status::success) return s;
  int index = 0;
  return select_policy<Codec, Policy, QT>(index);
}

namespace detail {
// Launches the quantized kernel variant of policy P (16-row rings, pool or
// rings, packed or 8-query layout); p.unit_rows = 16 selects the two-n-block kernel.
template <class Codec, class P, class QT>
device::launch_result launch_quant(const paged_cache_view& cache, const decode_args<QT>& a, bool pool, dim3 grid,
                                   const kernel_params& p, cudaStream_t stream) {
  using tr = quant_kernel_traits<Codec, P>;
  static_assert(tr::fits, "the ring kernel's shared memory exceeds the policy's budget");
  using cfg = typename tr::config;
  using pk = typename tr::packer;
  const bool packed = p.rows_total <= max_group / 2;
  if constexpr (tr::wide) {
    if (p.unit_rows > max_group)
      return launch<quant_decode_kernel<P, cfg, pk, QT, tr::wide_rings, tr::wide_stages, false, 0, 2, tr::wide_wb>, QT,
                    tr::D, true>(tr::wide_smem_bytes, tr::wide_warps * 32, grid, cache, p, a, stream);
  }
  if constexpr (tr::pool > 0) {
    if (pool && packed)
      return launch<quant_decode_kernel<P, cfg, pk, QT, tr::pool_warps, 1, true, tr::pool, 1>, QT, tr::D, true>(
          tr::pool_smem_bytes, tr::pool_warps * 32, grid, cache, p, a, stream);
    if (pool)
      return launch<quant_decode_kernel<P, cfg, pk, QT, tr::pool_warps, 1, false, tr::pool, 1>, QT, tr::D, true>(
          tr::pool_smem_bytes, tr::pool_warps * 32, grid, cache, p, a, stream);
  }
  if (packed)
    return launch<quant_decode_kernel<P, cfg, pk, QT, tr::rings, tr::stages, true, 0, 1>, QT, tr::D, true>(
        tr::smem_bytes, tr::warps * 32, grid, cache, p, a, stream);
  return launch<quant_decode_kernel<P, cfg, pk, QT, tr::rings, tr::stages, false, 0, 1>, QT, tr::D, true>(
      tr::smem_bytes, tr::warps * 32, grid, cache, p, a, stream);
}
}  // namespace detail

// Decode attention over the quantized paged cache in one call (no host
// lengths): every sequence's visible tiles are cut into the same number of
// splits (plan_splits, from max_pages_per_seq), two kernels on `stream`.
// Capturable in a CUDA graph (reads the lengths on the device); decode_plan
// balances ragged batches.
template <class Codec, class Policy = decode_policy, class QT>
device::launch_result paged_decode(const paged_cache_view& cache, const decode_args<QT>& a,
                                   cudaStream_t stream = nullptr) {
  if (status s = detail::check_quant_args<Codec>(cache, a); s != status::success) return s;
  int index = 0;
  if (device::launch_result r = select_policy<Codec, Policy, QT>(index); !r.ok()) return r;
  if (cache.num_seqs == 0) return status::success;
  return detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) -> device::launch_result {
    using P = typename decltype(tag)::type;
    using tr = quant_kernel_traits<Codec, P>;
    if constexpr (!tr::fits) return {status::unsupported_arch};  // never selected
    else {
    const int span = detail::q_span_of(a);
    const int all = detail::rows_per_kv_head(a, cache.kv_heads), rows = tr::unit_rows(all);
    const int units = cache.num_seqs * cache.kv_heads * ((all + rows - 1) / rows);
    const int splits = detail::choose_splits(units, cache.max_pages_per_seq + 1, tr::rings_for(all), a.num_splits,
                                             detail::current_sm_count());
    const detail::ws_layout L = detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits,
                                                   detail::current_sm_count(), tr::D, rows, span);
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, splits, tr::max_len(cache), L, false, rows);
    if (static_cast<std::int64_t>(cache.num_seqs) * p.units * splits > L.chunks) return {status::invalid_argument};
    // Single-split launches over long sequences: the stage-pool kernel (more warps per SM).
    const bool pool = splits == 1 && cache.max_pages_per_seq >= P::pool_min_tiles;
    return detail::launch_quant<Codec, P, QT>(cache, a, pool, dim3(splits, p.units, cache.num_seqs), p, stream);
    }
  });
}

// ---------------------------------------------------------------- fp16 baseline

// The baseline's page size (tokens) and launch configuration for head_dim D
// under one policy P (its smem_budget and fp16_stages).
template <int D, class P = decode_policy_sm90>
struct fp16_kernel_traits {
  static constexpr int page_tokens = fp16_page_tokens;
  static constexpr int stages = P::fp16_stages;
  static constexpr std::size_t stage_bytes = static_cast<std::size_t>(page_tokens) * D * 2 * 2;
  static constexpr int warps = detail::warps_for<stage_bytes, stages, 8, P::smem_budget>();
  using plan = detail::smem_plan<D, warps, stages, stage_bytes>;
  static constexpr std::size_t smem_bytes = plan::bytes;
  static_assert(smem_bytes <= P::smem_budget, "the fp16 kernel's shared memory exceeds the policy's budget");
  static int max_len(const fp16_paged_cache_view& c) {
    const std::int64_t m = static_cast<std::int64_t>(c.max_pages_per_seq) * page_tokens;
    return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
  }
  template <class QT>
  static constexpr auto kernel() {
    return detail::fp16_decode_kernel<P, D, page_tokens, QT, warps, stages>;
  }
};

namespace detail {
template <int D, class P, class QT>
device::launch_result fp16_policy_fits() {
  using tr = fp16_kernel_traits<D, P>;
  return image_runs<P, tr::template kernel<QT>()>(tr::smem_bytes);
}
template <int D, class QT>
struct fp16_fits {
  template <class P>
  struct of {
    static device::launch_result run() { return fp16_policy_fits<D, P, QT>(); }
  };
};
}  // namespace detail

template <int D, class Policy = decode_policy, class QT = half_t>
device::launch_result select_policy_fp16(int& index) {
  return detail::select_policy<detail::fp16_fits<D, QT>::template of>(typename detail::chain_of<Policy>::type{}, index);
}

template <int D, class Policy = decode_policy>
int plan_splits_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  int index = 0;
  (void)select_policy_fp16<D, Policy>(index);
  return detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) {
    using tr = fp16_kernel_traits<D, typename decltype(tag)::type>;
    const int group = cache.kv_heads > 0 ? q_heads / cache.kv_heads : 1;
    const int units = cache.num_seqs * cache.kv_heads * ((group + detail::max_group - 1) / detail::max_group);
    return detail::choose_splits(units, cache.max_pages_per_seq, tr::warps, num_splits, detail::current_sm_count());
  });
}

// 0 for shapes the launchers reject, as workspace_bytes.
template <int D>
std::size_t workspace_bytes_fp16(const fp16_paged_cache_view& cache, int q_heads, int num_splits = 0) {
  if (!detail::launch_shape_ok(cache.num_seqs, cache.kv_heads, q_heads, 1) || num_splits < 0 || num_splits > 4096)
    return 0;
  return detail::layout_for(cache.num_seqs, cache.kv_heads, q_heads, num_splits, detail::current_sm_count(), D).bytes;
}

namespace detail {
template <int D, class QT>
status check_fp16_args(const fp16_paged_cache_view& cache, const decode_args<QT>& a) {
  if (view_error e = fp16_structure_error(cache, D)) return e.code;
  if (status s = detail::check_common(a, cache.num_seqs, cache.kv_heads); s != status::success) return s;
  if (a.qo_indptr) return status::invalid_argument;  // the baseline decodes one token per sequence
  if (!a.workspace || a.workspace_bytes < workspace_bytes_fp16<D>(cache, a.q_heads, a.num_splits))
    return status::insufficient_space;
  if (reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0) return status::misaligned;
  return status::success;
}
}  // namespace detail

template <int D, class Policy = decode_policy, class QT>
status can_implement_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a) {
  if (status s = detail::check_fp16_args<D>(cache, a); s != status::success) return s;
  int index = 0;
  return select_policy_fp16<D, Policy, QT>(index);
}

namespace detail {
template <int D, class P, class QT>
device::launch_result launch_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a, dim3 grid,
                                  const kernel_params& p, cudaStream_t stream) {
  using tr = fp16_kernel_traits<D, P>;
  return launch<tr::template kernel<QT>(), QT, D, false>(tr::smem_bytes, tr::warps * 32, grid, cache, p, a, stream);
}
}  // namespace detail

// fp16 baseline: same kernel structure over fp16 pages, original frame (no rotation).
template <int D, class Policy = decode_policy, class QT>
device::launch_result paged_decode_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a,
                                        cudaStream_t stream = nullptr) {
  if (status s = detail::check_fp16_args<D>(cache, a); s != status::success) return s;
  int index = 0;
  if (device::launch_result r = select_policy_fp16<D, Policy, QT>(index); !r.ok()) return r;
  if (cache.num_seqs == 0) return status::success;
  return detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) -> device::launch_result {
    using P = typename decltype(tag)::type;
    using tr = fp16_kernel_traits<D, P>;
    const int group = cache.kv_heads > 0 ? a.q_heads / cache.kv_heads : 1;
    const int units = cache.num_seqs * cache.kv_heads * ((group + detail::max_group - 1) / detail::max_group);
    const int splits =
        detail::choose_splits(units, cache.max_pages_per_seq, tr::warps, a.num_splits, detail::current_sm_count());
    const detail::ws_layout L =
        detail::layout_for(cache.num_seqs, cache.kv_heads, a.q_heads, a.num_splits, detail::current_sm_count(), D);
    if (static_cast<std::int64_t>(cache.num_seqs) * cache.kv_heads * splits > L.chunks)
      return {status::invalid_argument};
    const detail::kernel_params p = detail::make_params(cache.kv_heads, a, splits, tr::max_len(cache), L, false);
    return detail::launch_fp16<D, P, QT>(cache, a, dim3(splits, p.units, cache.num_seqs), p, stream);
  });
}

// ---------------------------------------------------------------- plan / run

// A decode step split into a host plan and a launch. plan() reads a HOST copy
// of the lengths, cuts every (sequence, KV head, query group) into chunks of
// whole tiles and assigns them to one persistent CTA per SM (balanced over
// ragged lengths; small batches are cut finer to fill the GPU), then copies
// the work list into the workspace on `stream` (stream-ordered: the previous
// step on the same stream finishes first). run() launches the attention
// kernel and the merge kernel (or only the attention kernel, which then
// merges, under a policy with fused_merge) with a grid and workspace fixed by
// the plan's sizes: it can be
// captured in a CUDA graph, and the graph replayed after plan() was called
// again (outside the capture) with new lengths for the same cache shape
// (num_seqs, kv_heads, max_pages_per_seq), q_heads, window and workspace.
// The kernel variant is chosen by the first plan after construction or a
// shape change; every later plan's work list is valid for it. The device
// lengths must equal the planned host lengths for a correct result; if they
// do not, the kernel still reads only within the page table, tails and sinks.
// The work list lives in the workspace: another paged_decode or plan on the
// same workspace overwrites it (plan again before the next run).
// Multi-query: host_qo_indptr (optional) is a host copy of a.qo_indptr
// (num_seqs + 1 offsets, the values it will hold when run executes; rule:
// check_host_qo_indptr). The plan then gives each sequence only the query
// groups its new tokens fill, so a ragged speculative batch costs its own
// rows; without it every sequence is planned at max_q_tokens. Like the
// lengths, device counts other than the planned ones give a wrong result
// (rows of unplanned groups are not attended) but no read outside the cache.
// Not thread-safe: one plan per stream.
class decode_plan {
 public:
  template <class Codec, class Policy = decode_policy, class QT>
  status plan(const paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
              cudaStream_t stream = nullptr) {
    return plan<Codec, Policy>(cache, host_seq_lens, nullptr, a, stream);
  }
  template <class Codec, class Policy = decode_policy, class QT>
  status plan(const paged_cache_view& cache, const std::int32_t* host_seq_lens, const std::int32_t* host_qo_indptr,
              const decode_args<QT>& a, cudaStream_t stream = nullptr) {
    if (!host_seq_lens) return status::null_pointer;
    if (status s = detail::check_quant_args<Codec>(cache, a); s != status::success) return s;
    if (arg_error e = check_host_qo_indptr(host_qo_indptr, cache.num_seqs, a.max_q_tokens, a.qo_indptr != nullptr))
      return e.code;
    int index = 0;
    if (status s = select_policy<Codec, Policy, QT>(index); s != status::success) return s;
    const key k = make_key<std::tuple<Codec, Policy>, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a,
                                                         index);
    const int ctas = grid_size();
    const bool fresh = !(k == key_) || ctas != ctas_;
    const status s =
        detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) -> status {
          using tr = quant_kernel_traits<Codec, typename decltype(tag)::type>;
          if constexpr (!tr::fits) {
            return status::unsupported_arch;  // never selected
          } else {
            const int all = detail::rows_per_kv_head(a, cache.kv_heads), rows = tr::unit_rows(all);
            if (status b = build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::G, tr::max_len(cache), ctas,
                                 tr::rings_for(all), Codec::D, rows, host_qo_indptr,
                                 decltype(tag)::type::fused_merge);
                b != status::success)
              return b;
            using P = typename decltype(tag)::type;
            if (fresh)
              pool_ = tr::pool > 0 && rows == detail::max_group && sched_.chunks > 0 &&
                      total_tiles_ >= static_cast<long long>(P::pool_min_tiles) * sched_.chunks;
            // The same chunks with tail pieces: stage-pool steps of a policy without the fused merge.
            if (pool_ && detail::tails_on<P, tr::pool>())
              return build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::G, tr::max_len(cache), ctas,
                           tr::rings_for(all), Codec::D, rows, host_qo_indptr, P::fused_merge, P::steal_tail_tiles,
                           P::steal_piece_tiles);
            return status::success;
          }
        });
    if (s != status::success) return s;
    key_ = k;
    return upload(a, stream);
  }

  template <class Codec, class Policy = decode_policy, class QT>
  device::launch_result run(const paged_cache_view& cache, const decode_args<QT>& a,
                            cudaStream_t stream = nullptr) const {
    if (!(make_key<std::tuple<Codec, Policy>, QT>(cache.num_seqs, cache.kv_heads, cache.max_pages_per_seq, a,
                                                  key_.policy) == key_))
      return {status::invalid_argument};  // not the planned shape, options, workspace, codec, policy or device
    if (status s = detail::check_quant_args<Codec>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    return detail::with_policy(typename detail::chain_of<Policy>::type{}, key_.policy,
                               [&](auto tag) -> device::launch_result {
                                 using P = typename decltype(tag)::type;
                                 using tr = quant_kernel_traits<Codec, P>;
                                 if constexpr (!tr::fits) {
                                   return {status::unsupported_arch};
                                 } else {
                                   const detail::kernel_params p = detail::make_params(
                                       cache.kv_heads, a, 1, tr::max_len(cache), layout_, true,
                                       tr::unit_rows(detail::rows_per_kv_head(a, cache.kv_heads)), P::fused_merge,
                                       sched_.tail_pieces, sched_.piece_tiles, sched_.cuts);
                                   return detail::launch_quant<Codec, P, QT>(cache, a, pool_, dim3(ctas_), p, stream);
                                 }
                               });
  }

  template <int D, class Policy = decode_policy, class QT>
  status plan_fp16(const fp16_paged_cache_view& cache, const std::int32_t* host_seq_lens, const decode_args<QT>& a,
                   cudaStream_t stream = nullptr) {
    if (!host_seq_lens) return status::null_pointer;
    if (status s = detail::check_fp16_args<D>(cache, a); s != status::success) return s;
    int index = 0;
    if (status s = select_policy_fp16<D, Policy, QT>(index); s != status::success) return s;
    const key k = make_key<std::tuple<std::integral_constant<int, D>, Policy>, QT>(cache.num_seqs, cache.kv_heads,
                                                                                   cache.max_pages_per_seq, a, index);
    const int ctas = grid_size();
    const status s = detail::with_policy(typename detail::chain_of<Policy>::type{}, index, [&](auto tag) {
      using tr = fp16_kernel_traits<D, typename decltype(tag)::type>;
      return build(cache.num_seqs, cache.kv_heads, host_seq_lens, a, tr::page_tokens, tr::max_len(cache), ctas,
                   tr::warps, D, detail::max_group, nullptr, decltype(tag)::type::fused_merge);
    });
    if (s != status::success) return s;
    key_ = k;
    return upload(a, stream);
  }

  template <int D, class Policy = decode_policy, class QT>
  device::launch_result run_fp16(const fp16_paged_cache_view& cache, const decode_args<QT>& a,
                                 cudaStream_t stream = nullptr) const {
    if (!(make_key<std::tuple<std::integral_constant<int, D>, Policy>, QT>(cache.num_seqs, cache.kv_heads,
                                                                            cache.max_pages_per_seq, a,
                                                                            key_.policy) == key_))
      return {status::invalid_argument};
    if (status s = detail::check_fp16_args<D>(cache, a); s != status::success) return s;
    if (cache.num_seqs == 0) return status::success;
    return detail::with_policy(typename detail::chain_of<Policy>::type{}, key_.policy,
                               [&](auto tag) -> device::launch_result {
                                 using P = typename decltype(tag)::type;
                                 using tr = fp16_kernel_traits<D, P>;
                                 const detail::kernel_params p = detail::make_params(
                                     cache.kv_heads, a, 1, tr::max_len(cache), layout_, true, detail::max_group,
                                     P::fused_merge);
                                 return detail::launch_fp16<D, P, QT>(cache, a, dim3(ctas_), p, stream);
                               });
  }

  // At most n persistent CTAs from the next plan on (0: one per SM), e.g. to
  // leave SMs to concurrent work.
  void limit_ctas(int n) { max_ctas_ = n > 0 ? n : 0; }
  int ctas() const { return ctas_; }                // the grid of run()
  int chunks() const { return sched_.chunks; }      // partials of the last plan
  long long makespan() const { return sched_.makespan; }  // the scheduler's cost estimate (tiles)
  bool stage_pool() const { return pool_; }         // the kernel variant run() launches
  const detail::schedule& last_schedule() const { return sched_; }
  int policy() const { return key_.policy; }  // index in the policy chain of the last plan (decode_policy: 0 sm90, 1 sm120, 2 sm80, 3 sm86)

 private:
  struct key {
    const void* type = nullptr;
    int num_seqs = -1, kv_heads = 0, max_pages = 0, q_heads = 0, window_left = -1, num_splits = 0, q_span = 0;
    const void* qo_indptr = nullptr;
    const void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    int device = -1;
    int policy = -1;  // index in the chain
    bool operator==(const key& o) const {
      return type == o.type && num_seqs == o.num_seqs && kv_heads == o.kv_heads && max_pages == o.max_pages &&
             q_heads == o.q_heads && window_left == o.window_left && num_splits == o.num_splits &&
             q_span == o.q_span && qo_indptr == o.qo_indptr &&
             workspace == o.workspace && workspace_bytes == o.workspace_bytes && device == o.device && policy == o.policy;
    }
  };
  template <class Kind, class QT>
  static key make_key(int num_seqs, int kv_heads, int max_pages, const decode_args<QT>& a, int policy) {
    key k;
    k.policy = policy;
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
               int ctas, int rings, int d, int rows = detail::max_group, const std::int32_t* host_qo_indptr = nullptr,
               bool empty_chunks = false, int steal_tail = 0, int steal_piece = 0) {
    const int span = detail::q_span_of(a), all = detail::rows_per_kv_head(a, kv_heads);
    detail::schedule_request r;
    r.seq_lens = lens;
    r.num_seqs = num_seqs;
    r.qgroups = (all + rows - 1) / rows;
    r.units_per_seq = kv_heads * r.qgroups;
    r.group = a.q_heads / kv_heads;
    r.unit_rows = rows;
    if (host_qo_indptr) {  // counts checked by check_host_qo_indptr
      q_tokens_.resize(static_cast<std::size_t>(num_seqs));
      for (int s = 0; s < num_seqs; ++s) q_tokens_[s] = host_qo_indptr[s + 1] - host_qo_indptr[s];
      r.q_tokens = q_tokens_.data();
    }
    r.q_span = span;
    r.tile_tokens = T;
    r.max_len = max_len;
    r.window_left = a.window_left < 0 ? -1 : a.window_left;
    r.ctas = ctas;
    r.rings = rings;
    r.forced_splits = a.num_splits;
    r.empty_chunks = empty_chunks;
    layout_ = detail::layout_for(num_seqs, kv_heads, a.q_heads, a.num_splits, ctas, d, rows, span);
    r.steal_tail = steal_tail;
    r.steal_piece = steal_piece;
    r.chunk_limit = layout_.chunks;
    sched_ = detail::make_schedule(r);
    if (sched_.chunks > layout_.chunks) return status::invalid_argument;  // cannot happen (max_chunks)
    total_tiles_ = 0;
    for (const detail::work_item& w : sched_.items) total_tiles_ += w.j1 - w.j0;
    ctas_ = ctas;
    return status::success;
  }

  template <class QT>
  status upload(const decode_args<QT>& a, cudaStream_t stream) {
    // One copy of [work list | tail_of | CTA ranges | spans | counters, claims (zeros)], laid out as in
    // the workspace.
    const std::size_t n = layout_.bytes - layout_.work;
    staging_.assign(n, 0);
    std::memcpy(staging_.data(), sched_.items.data(), sched_.items.size() * sizeof(detail::work_item));
    std::memcpy(staging_.data() + (layout_.tails - layout_.work), sched_.tail_of.data(),
                sched_.tail_of.size() * sizeof(std::int32_t));
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
  std::vector<std::int32_t> q_tokens_;
  long long total_tiles_ = 0;
  int ctas_ = 0;
  int max_ctas_ = 0;
  bool pool_ = false;
};


}  // namespace attention
KVTILE_NAMESPACE_END
