// kvtile/device/attention/decode_args.hpp: the arguments of one decode step (plain C++).
// Used by paged_decode.cuh (decode_plan, paged_decode, the fp16 baseline).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../status.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention {

// Most new query tokens per sequence of a multi-query decode (decode_args::
// max_q_tokens; KVTILE_OPS_MAX_Q_TOKENS and kvtile.MAX_Q_TOKENS mirror it).
inline constexpr int max_q_tokens = 8;

// Arguments of one decode step. QT: half_t or bfloat16_t.
template <class QT>
struct decode_args {
  const QT* q = nullptr;   // [num_seqs][q_heads][D] (multi-query: [qo_indptr[num_seqs]][q_heads][D])
  QT* out = nullptr;       // same shape as q
  float* lse = nullptr;    // [rows of q][q_heads] or null
  int q_heads = 0;         // a multiple of the cache's kv_heads
  float softmax_scale = 0; // usually 1/sqrt(D)
  void* workspace = nullptr;  // workspace_bytes(...) bytes of device memory, 16-byte aligned
  std::size_t workspace_bytes = 0;
  int num_splits = 0;      // > 0: every sequence's tiles cut into this many chunks (tests); 0: automatic
  // Left window: the query (at position len - 1) attends keys at positions
  // >= len - 1 - window_left (window_left + 1 tokens); -1: no window. Tiles
  // entirely left of the window are skipped, the boundary tile is masked.
  int window_left = -1;
  // > 0: logit soft-cap, every score s = softmax_scale q.k becomes cap tanh(s / cap).
  float logit_softcap = 0.0f;
  // Multi-query decode (speculative verification, MTP); null: one query token
  // per sequence. Otherwise device offsets [num_seqs + 1] (cu_seqlens style):
  // sequence s has n_s = qo_indptr[s + 1] - qo_indptr[s] new tokens, its last
  // n_s positions (the cache length includes them), query rows
  // qo_indptr[s] .. + n_s - 1 of q and out; new token i attends positions
  // < len - (n_s - 1 - i) (causal among the new tokens; the window counts
  // from each query's own position). n_s is clamped to [0, max_q_tokens].
  const std::int32_t* qo_indptr = nullptr;
  int max_q_tokens = 1;    // 1..8: bound on every n_s (sizes the plan and workspace); 1 without qo_indptr
  // Programmatic dependent launch of the merge kernel (overlaps its launch
  // with the attention kernel's tail). A failed launch returns cuda_error.
  bool pdl = true;
};


// One broken rule of a decode argument: the status, the argument's name, its
// value and the rule. Every layer reports it in its own error type as
// "<function>: <name> <value> <rule>" (the C ABI's message, Python's ValueError).
struct arg_error {
  status code = status::success;
  const char* name = "";
  double value = 0;
  const char* rule = "";
  constexpr explicit operator bool() const noexcept { return code != status::success; }
};

// The rules of decode_args' scalar options, written here only: the core's
// launchers, plan and workspace queries, the host reference, the C ABI and
// the Python package call this. Checked in this order; with need_io (a call
// that reads q and out: not a workspace query) also the qo_indptr pairing and
// softmax_scale. F: float, or double for the host reference.
template <class F>
constexpr arg_error check_decode_options(int q_heads, int max_q, bool has_qo_indptr, int window_left, F logit_softcap,
                                         int num_splits, bool need_io, F softmax_scale) noexcept {
  static_assert(max_q_tokens == 8, "the rule text below names max_q_tokens");
  constexpr F max_finite = static_cast<F>(3.4028234663852886e38);  // largest finite float
  auto finite = [&](F x) { return x >= -max_finite && x <= max_finite; };
  if (q_heads <= 0) return {status::invalid_argument, "q_heads", static_cast<double>(q_heads), "must be positive"};
  if (max_q < 1 || max_q > max_q_tokens)
    return {status::invalid_argument, "max_q_tokens", static_cast<double>(max_q), "is not in [1, 8]"};
  if (window_left < -1)
    return {status::invalid_argument, "window_left", static_cast<double>(window_left),
            "must be -1 (no window) or >= 0"};
  if (!(logit_softcap >= 0) || !finite(logit_softcap))
    return {status::invalid_argument, "logit_softcap", static_cast<double>(logit_softcap),
            "must be 0 (off) or positive and finite"};
  if (num_splits < 0 || num_splits > 4096)
    return {status::invalid_argument, "num_splits", static_cast<double>(num_splits), "is not in [0, 4096]"};
  if (!need_io) return {};
  if (!has_qo_indptr && max_q != 1)
    return {status::invalid_argument, "max_q_tokens", static_cast<double>(max_q),
            "> 1 needs qo_indptr (without it: one query token per sequence)"};
  if (!(softmax_scale > 0) || !finite(softmax_scale))
    return {status::invalid_argument, "softmax_scale", static_cast<double>(softmax_scale),
            "must be positive and finite"};
  return {};
}
// The rule of a plan's host copy of the query offsets (decode_plan's
// host_qo_indptr, num_seqs + 1 entries; null: every sequence planned at
// max_q_tokens): it mirrors decode_args::qo_indptr, and every count
// host_qo_indptr[s + 1] - host_qo_indptr[s] is in [0, max_q]. The value
// reported is the first count outside.
inline arg_error check_host_qo_indptr(const std::int32_t* host_qo_indptr, int num_seqs, int max_q,
                                      bool has_qo_indptr) noexcept {
  if (!host_qo_indptr) return {};
  if (!has_qo_indptr)
    return {status::invalid_argument, "host_qo_indptr", 0, "needs qo_indptr (the device offsets it mirrors)"};
  for (int s = 0; s < num_seqs; ++s) {
    const std::int64_t n = static_cast<std::int64_t>(host_qo_indptr[s + 1]) - host_qo_indptr[s];
    if (n < 0 || n > max_q)
      return {status::invalid_argument, "host_qo_indptr", static_cast<double>(n),
              "has a count (new tokens of a sequence) outside [0, max_q_tokens]"};
  }
  return {};
}

template <class QT>
constexpr arg_error check_decode_options(const decode_args<QT>& a, bool need_io = true) noexcept {
  return check_decode_options(a.q_heads, a.max_q_tokens, a.qo_indptr != nullptr, a.window_left, a.logit_softcap,
                              a.num_splits, need_io, a.softmax_scale);
}

}  // namespace attention
KVTILE_NAMESPACE_END
