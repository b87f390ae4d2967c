// kvtile/device/attention/decode_args.hpp: the arguments of one decode step (plain C++).
// Used by paged_decode.cuh (decode_plan, paged_decode, the fp16 baseline).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"

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
  // >= len - 1 - window_left (window_left + 1 tokens); < 0: no window. Tiles
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

}  // namespace attention
KVTILE_NAMESPACE_END
