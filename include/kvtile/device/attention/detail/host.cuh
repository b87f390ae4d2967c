// kvtile/device/attention/detail/host.cuh: host side of the launches: argument checks,
// workspace layout, kernel parameters, the two-kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../../config.hpp"
#include "../../../numeric/bfloat16.hpp"
#include "../../../numeric/half.hpp"
#include "../../../status.hpp"
#include "../decode_args.hpp"
#include "common.cuh"
#include "launch.cuh"
#include "merge.cuh"
#include "schedule.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// Splits of the one-call path (no plan): enough CTAs for one wave when batch x
// KV heads x groups is small, never more splits than tiles / 8.
inline int choose_splits(int units, int max_tiles, int warps, int requested, int sms) {
  if (requested > 0) return requested;
  if (units <= 0 || units >= sms) return 1;
  int s = sms / units;  // one CTA per SM: never spill into a second wave
  // at least ~8 tiles per CTA (fewer leave warps idle; with more than 8 warps
  // per CTA a CTA with 8 tiles still beats an idle SM)
  const int per = warps < 8 ? warps : 8;
  const int smax = (max_tiles + per - 1) / per;
  if (s > smax) s = smax;
  return s < 1 ? 1 : s;
}

inline int current_sm_count() {
  int dev = 0;
  return cudaGetDevice(&dev) == cudaSuccess ? sm_count(dev) : 1;
}

template <class QT>
status check_common(const decode_args<QT>& a, int num_seqs, int kv_heads) {
  static_assert(std::is_same_v<QT, half_t> || std::is_same_v<QT, bfloat16_t>, "queries must be half_t or bfloat16_t");
  if (!a.q || !a.out) return status::null_pointer;
  if (a.q_heads <= 0 || kv_heads <= 0 || a.q_heads % kv_heads != 0 || num_seqs < 0) return status::invalid_argument;
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale)) return status::invalid_argument;
  if (!(a.logit_softcap >= 0.0f) || !std::isfinite(a.logit_softcap)) return status::invalid_argument;
  if (a.num_splits < 0 || a.num_splits > 4096) return status::invalid_argument;
  if (a.max_q_tokens < 1 || a.max_q_tokens > max_q_tokens || (!a.qo_indptr && a.max_q_tokens != 1))
    return status::invalid_argument;
  if (num_seqs > 65535 || kv_heads * ((a.max_q_tokens * (a.q_heads / kv_heads) + max_group - 1) / max_group) > 65535)
    return status::invalid_argument;
  return status::success;
}

// Query tokens per sequence of a launch (the bound max_q_tokens; 1 without qo_indptr).
template <class QT>
int q_span_of(const decode_args<QT>& a) {
  return a.qo_indptr ? a.max_q_tokens : 1;
}

// Query rows per KV head of a launch: q_span x group.
template <class QT>
int rows_per_kv_head(const decode_args<QT>& a, int kv_heads) {
  return q_span_of(a) * (a.q_heads / kv_heads);
}

// Workspace: the partials of every slot, then the plan's work list, CTA ranges
// and unit spans (written by decode_plan::plan; unused by the one-call path).
struct ws_layout {
  std::size_t o = 0, ml = 0, work = 0, cta = 0, spans = 0, bytes = 0;
  std::int64_t chunks = 0;
};
// unit_rows: query rows of a unit (8 or 16, unit_rows_for); q_span: query
// tokens per sequence.
inline ws_layout layout_for(int num_seqs, int kv_heads, int q_heads, int num_splits, int ctas, int d,
                            int unit_rows = max_group, int q_span = 1) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const int rows_total = q_span * (q_heads / kv_heads), qgroups = (rows_total + unit_rows - 1) / unit_rows;
  const int slot_rows = rows_total < unit_rows ? rows_total : unit_rows;
  const std::int64_t units = static_cast<std::int64_t>(num_seqs) * kv_heads * qgroups;
  ws_layout L;
  L.chunks = max_chunks(units, ctas, num_splits);  // also the one-call path's bound: units x splits <= max(units, ctas)
  const std::size_t rows = static_cast<std::size_t>(L.chunks) * slot_rows;
  L.ml = up(rows * d * sizeof(float));
  L.work = L.ml + up(rows * 2 * sizeof(float));
  L.cta = L.work + up(static_cast<std::size_t>(L.chunks) * sizeof(work_item));
  L.spans = L.cta + up((static_cast<std::size_t>(ctas) + 1) * sizeof(std::int32_t));
  L.bytes = L.spans + up(static_cast<std::size_t>(units) * sizeof(unit_span));
  return L;
}

// The larger workspace of the two unit sizes (8 and 16 query rows): a bound
// for every policy.
inline std::size_t workspace_bound(int num_seqs, int kv_heads, int q_heads, int num_splits, int ctas, int d,
                                   int q_span = 1) {
  const std::size_t a = layout_for(num_seqs, kv_heads, q_heads, num_splits, ctas, d, max_group, q_span).bytes;
  const std::size_t b = layout_for(num_seqs, kv_heads, q_heads, num_splits, ctas, d, 2 * max_group, q_span).bytes;
  return a > b ? a : b;
}

// Query rows of a unit for `rows` query rows per KV head (q_span x group): 16
// (two n-blocks) when there are more than 8 and the policy allows it, else 8.
inline int unit_rows_for(int rows, int max_unit_rows) {
  return rows > max_group && max_unit_rows >= 2 * max_group ? 2 * max_group : max_group;
}

template <class QT>
kernel_params make_params(int kv_heads, const decode_args<QT>& a, int splits, int max_len, const ws_layout& L,
                          bool planned, int unit_rows = max_group) {
  kernel_params p{};
  p.q = a.q;
  p.q_heads = a.q_heads;
  p.group = a.q_heads / kv_heads;
  p.qo_indptr = a.qo_indptr;
  p.q_span = q_span_of(a);
  p.rows_total = p.q_span * p.group;
  p.unit_rows = unit_rows;
  p.qgroups = (p.rows_total + unit_rows - 1) / unit_rows;
  p.units = kv_heads * p.qgroups;
  p.slot_rows = p.rows_total < unit_rows ? p.rows_total : unit_rows;
  p.scale_log2 = a.softmax_scale * log2e;
  p.num_splits = splits;
  p.window_left = a.window_left < 0 ? -1 : a.window_left;
  p.cap = a.logit_softcap > 0.0f ? a.logit_softcap * log2e : 0.0f;
  p.max_len = max_len;
  auto* base = static_cast<std::uint8_t*>(a.workspace);
  p.ws_o = reinterpret_cast<float*>(base + L.o);
  p.ws_ml = reinterpret_cast<float*>(base + L.ml);
  p.work = planned ? reinterpret_cast<const work_item*>(base + L.work) : nullptr;
  p.cta_begin = planned ? reinterpret_cast<const std::int32_t*>(base + L.cta) : nullptr;
  p.spans = planned ? reinterpret_cast<const unit_span*>(base + L.spans) : nullptr;
  return p;
}

// Launches the attention kernel and the merge kernel; every error is the
// launch's own (cudaLaunchKernelEx's return), none is cleared or reported twice.
template <class QT, int D, bool Rotated, class KernelT, class View>
status launch(KernelT kernel, std::size_t smem, int threads, dim3 grid, const View& view, const kernel_params& p,
              const decode_args<QT>& a, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (cudaLaunchKernelEx(&cfg, kernel, view, p) != cudaSuccess) return status::cuda_error;
  const std::int64_t out_rows = static_cast<std::int64_t>(view.num_seqs) * p.q_span * a.q_heads;  // tokens past n_s: no-ops
  cudaLaunchConfig_t mc = {};
  mc.gridDim = dim3(static_cast<unsigned>((out_rows + combine_rows - 1) / combine_rows));
  mc.blockDim = dim3(32 * combine_rows);
  mc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  mc.attrs = attr;
  mc.numAttrs = a.pdl ? 1 : 0;
  if (cudaLaunchKernelEx(&mc, combine_kernel<QT, D, Rotated>, p, a.out, a.lse, out_rows) != cudaSuccess)
    return status::cuda_error;
  return status::success;
}

template <class T>
struct type_tag {
  static constexpr char id = 0;
};

}  // namespace attention::detail
KVTILE_NAMESPACE_END
