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
#include "../../detail/launch.cuh"
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

// SMs of the current device (cached per device and launch-setup epoch,
// device/detail/launch.cuh); 1 without a device.
inline int current_sm_count() {
  device::device_caps caps;
  return device::detail::current_device(caps).ok() && caps.sm_count > 0 ? caps.sm_count : 1;
}

template <class QT>
status check_common(const decode_args<QT>& a, int num_seqs, int kv_heads) {
  static_assert(std::is_same_v<QT, half_t> || std::is_same_v<QT, bfloat16_t>, "queries must be half_t or bfloat16_t");
  if (!a.q || !a.out) return status::null_pointer;
  if (arg_error e = check_decode_options(a)) return e.code;
  if (kv_heads <= 0 || a.q_heads % kv_heads != 0 || num_seqs < 0) return status::invalid_argument;
  if (!launch_shape_ok(num_seqs, kv_heads, a.q_heads, a.max_q_tokens)) return status::invalid_argument;
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

// fused: merge in the attention kernel (planned launches of a fused_merge policy);
// tail_pieces, piece_tiles, tail_cuts: the plan's schedule (tail pieces; 0: none).
template <class QT>
kernel_params make_params(int kv_heads, const decode_args<QT>& a, int splits, int max_len, const ws_layout& L,
                          bool planned, int unit_rows = max_group, bool fused = false, int tail_pieces = 0,
                          int piece_tiles = 0, int tail_cuts = 0) {
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
  p.counters = planned && fused ? reinterpret_cast<std::int32_t*>(base + L.counters) : nullptr;
  p.tail_of = planned ? reinterpret_cast<const std::int32_t*>(base + L.tails) : nullptr;
  p.claims = planned ? reinterpret_cast<std::int32_t*>(base + L.claims) : nullptr;
  p.tail_pieces = planned ? tail_pieces : 0;
  p.piece_tiles = planned ? piece_tiles : 0;
  p.tail_cuts = planned ? tail_cuts : 0;
  p.out = a.out;
  p.lse = a.lse;
  return p;
}

// Launches the attention kernel and, unless it merges itself (p.counters), the
// merge kernel (device/detail/launch.cuh: per-device setup, each launch's own
// error). The merge kernel overlaps the attention kernel's tail by
// programmatic dependent launch where the device has it (compute capability
// 9.0+) and a.pdl is set.
template <auto Kernel, class QT, int D, bool Rotated, class View>
device::launch_result launch(std::size_t smem, int threads, dim3 grid, const View& view, const kernel_params& p,
                             const decode_args<QT>& a, cudaStream_t stream) {
  namespace dd = device::detail;
  constexpr auto merge = combine_kernel<QT, D, Rotated>;
  if (device::launch_result r = dd::prepare_kernel<Kernel>(smem); !r.ok()) return r;
  if (p.counters) return dd::launch_kernel<Kernel>(grid, dim3(threads), smem, {stream, false}, view, p);
  if (device::launch_result r = dd::prepare_kernel<merge>(0); !r.ok()) return r;
  device::device_caps caps;
  if (device::launch_result r = dd::current_device(caps); !r.ok()) return r;
  if (device::launch_result r = dd::launch_kernel<Kernel>(grid, dim3(threads), smem, {stream, false}, view, p); !r.ok())
    return r;
  const std::int64_t out_rows = static_cast<std::int64_t>(view.num_seqs) * p.q_span * a.q_heads;  // tokens past n_s: no-ops
  const dim3 mgrid(static_cast<unsigned>((out_rows + combine_rows - 1) / combine_rows));
  return dd::launch_kernel<merge>(mgrid, dim3(32 * combine_rows), 0, {stream, a.pdl && caps.cc >= 90}, p, a.out, a.lse,
                                  out_rows);
}

template <class T>
struct type_tag {
  static constexpr char id = 0;
};

}  // namespace attention::detail
KVTILE_NAMESPACE_END
