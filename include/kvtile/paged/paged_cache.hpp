// kvtile/paged/paged_cache.hpp: non-owning view of a paged, quantized KV cache.
//
// Storage (all device memory when used by kernels; plain host memory works for
// the host model in tests):
//   pages      [num_pages][kv_heads][record_bytes]   one record per (page, KV head);
//                                                    a page holds one tile (G tokens)
//   page_table [num_seqs][max_pages_per_seq] int32   page of tile i of sequence s
//   seq_lens   [num_seqs] int32                      tokens in sequence s
//   tail_k/v   [num_slots][kv_heads][G][D] fp16      the tile still filling, ROTATED
//   sink_k/v   [num_slots][kv_heads][G][D] fp16      optional: the first tile kept
//                                                    unquantized (ROTATED); null = off
//   tail_slots [num_seqs] int32                      optional: slot of sequence s in the
//                                                    tail/sink pools; null = slot s
// Sequence s with length L holds n_full = L / G complete tiles and L % G tail
// tokens. Complete tile i lives in page page_table[s][i], except that with the
// sink on, tile 0 lives in sink_k/v at the sequence's slot (tail_slot(s), see
// below) and page_table[s][0] is not read.
// The view is passed by value to kernels.
//
// Slots (the engine-facing layout): tails and sinks are a pool of num_slots
// slots, and sequence s (row s of page_table, seq_lens and the kernels' token
// inputs) uses slot tail_slots[s]. An engine that reorders, adds or retires
// sequences rewrites page_table rows, seq_lens and tail_slots, never the fp16
// data. Without tail_slots, slot = s and the pools hold num_slots >= num_seqs
// slots (num_slots = 0 means num_seqs). Slots must be distinct among the
// sequences of one launch with seq_lens > 0 (validate_slots checks a host copy).
//
// Writers (include/kvtile/device/paged/, docs/gpu-codec.md): append and
// prefill take seq_lens that already INCLUDE the tokens they write, and never
// write seq_lens themselves. A record of the cache is the codec's encode of the
// tile's rotated fp16 tail values (the rotation is not applied again), so
// records do not depend on whether tokens came by prefill or append.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../numeric/half.hpp"
#include "../status.hpp"

KVTILE_NAMESPACE_BEGIN

struct paged_cache_view {
  std::uint8_t* pages = nullptr;
  const std::int32_t* page_table = nullptr;
  const std::int32_t* seq_lens = nullptr;
  half_t* tail_k = nullptr;
  half_t* tail_v = nullptr;
  half_t* sink_k = nullptr;  // null: sink off
  half_t* sink_v = nullptr;
  std::int32_t num_seqs = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t tile_tokens = 0;
  std::int32_t max_pages_per_seq = 0;
  std::int32_t num_pages = 0;
  std::int64_t record_bytes = 0;
  const std::int32_t* tail_slots = nullptr;  // [num_seqs] or null (slot = sequence index)
  std::int32_t num_slots = 0;                // tail/sink pool size in slots; 0: num_seqs

  KVTILE_HOST_DEVICE bool has_sink() const { return sink_k != nullptr; }
  KVTILE_HOST_DEVICE std::int32_t slots() const { return num_slots > 0 ? num_slots : num_seqs; }
  // Slot of sequence seq in the tail/sink pools.
  KVTILE_HOST_DEVICE std::int32_t tail_slot(std::int32_t seq) const { return tail_slots ? tail_slots[seq] : seq; }

  KVTILE_HOST_DEVICE std::uint8_t* record(std::int32_t page, std::int32_t head) const {
    return pages + (static_cast<std::int64_t>(page) * kv_heads + head) * record_bytes;
  }
  // First element of the fp16 tail (or sink) tile of (seq, head): G x D,
  // token-major, in slot tail_slot(seq) of the pools. Reads tail_slots[seq]:
  // device code, or host code over a view of host memory. Host code holding
  // a view of DEVICE memory uses tile_offset_of_slot with the slot it knows.
  KVTILE_HOST_DEVICE std::int64_t tile_offset(std::int32_t seq, std::int32_t head) const {
    return tile_offset_of_slot(tail_slot(seq), head);
  }
  // The same from a slot value (reads no view memory: safe on the host with a device view).
  KVTILE_HOST_DEVICE std::int64_t tile_offset_of_slot(std::int32_t slot, std::int32_t head) const {
    return (static_cast<std::int64_t>(slot) * kv_heads + head) * tile_tokens * head_dim;
  }
};

// A view that breaks a structural rule: the status and the rule, which every
// layer reports ("<function>: <rule>"; the C ABI, the torch ops).
struct view_error {
  status code = status::success;
  const char* rule = "";
  constexpr explicit operator bool() const noexcept { return code != status::success; }
};

// The records part of a view, what a reader of pages alone needs
// (launch_dequantize_pages, and validate_structure): pages present, head_dim,
// tile tokens and record_bytes those of the codec, kv_heads > 0, num_pages
// >= 0, every record offset representable in int64, records 16-byte aligned.
inline view_error pages_error(const paged_cache_view& v, std::int64_t expected_record_bytes, int expected_head_dim,
                              int expected_tile_tokens) {
  if (!v.pages) return {status::null_pointer, "pages is null"};
  if (v.head_dim != expected_head_dim) return {status::unsupported_head_dim, "head_dim is not the codec's"};
  if (v.tile_tokens != expected_tile_tokens) return {status::unsupported_tile_tokens, "tile_tokens is not the codec's G"};
  if (v.record_bytes != expected_record_bytes || v.record_bytes <= 0)
    return {status::invalid_argument, "record_bytes is not the codec's"};
  if (v.head_dim <= 0 || v.tile_tokens <= 0) return {status::invalid_argument, "head_dim and tile_tokens must be > 0"};
  if (v.kv_heads <= 0 || v.num_pages < 0) return {status::invalid_argument, "kv_heads must be > 0 and num_pages >= 0"};
  // Every offset record() computes must fit in int64 (no signed overflow).
  if (static_cast<std::int64_t>(v.num_pages) * v.kv_heads > INT64_MAX / v.record_bytes)
    return {status::invalid_argument, "num_pages x kv_heads x record_bytes does not fit in int64"};
  if (reinterpret_cast<std::uintptr_t>(v.pages) % 16 != 0 || v.record_bytes % 16 != 0)
    return {status::misaligned, "pages and record_bytes must be 16-byte aligned"};
  return {};
}
inline status validate_pages(const paged_cache_view& v, std::int64_t expected_record_bytes, int expected_head_dim,
                             int expected_tile_tokens) {
  return pages_error(v, expected_record_bytes, expected_head_dim, expected_tile_tokens).code;
}

// Structural checks a launcher runs before touching device memory: pointers
// present, sink pointers paired, the records part (pages_error), sizes in
// range (and every tail offset representable in int64), the fp16 tails and
// sinks 16-byte aligned.
inline view_error structure_error(const paged_cache_view& v, std::int64_t expected_record_bytes, int expected_head_dim,
                                  int expected_tile_tokens) {
  if (!v.pages || !v.page_table || !v.seq_lens || !v.tail_k || !v.tail_v)
    return {status::null_pointer, "pages, page_table, seq_lens, tail_k and tail_v must not be null"};
  if ((v.sink_k == nullptr) != (v.sink_v == nullptr))
    return {status::invalid_argument, "sink_k and sink_v must both be given or both be null"};
  if (view_error e = pages_error(v, expected_record_bytes, expected_head_dim, expected_tile_tokens)) return e;
  if (v.num_seqs < 0 || v.max_pages_per_seq < 0)
    return {status::invalid_argument, "num_seqs and max_pages_per_seq must be >= 0"};
  if (v.num_slots < 0 || (!v.tail_slots && v.num_slots > 0 && v.num_slots < v.num_seqs))
    return {status::invalid_argument, "without tail_slots, the tail pool needs a slot per sequence (num_slots >= num_seqs)"};
  if (v.tail_slots && v.num_seqs > 0 && v.num_slots <= 0)
    return {status::invalid_argument, "tail_slots needs num_slots > 0"};
  // Every offset tile_offset() computes must fit in int64 (no signed overflow).
  if (static_cast<std::int64_t>(v.slots()) * v.kv_heads > INT64_MAX / (static_cast<std::int64_t>(v.tile_tokens) * v.head_dim))
    return {status::invalid_argument, "num_slots x kv_heads x G x head_dim does not fit in int64"};
  if (reinterpret_cast<std::uintptr_t>(v.tail_k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(v.tail_v) % 16 != 0)
    return {status::misaligned, "tail_k and tail_v must be 16-byte aligned"};
  if (v.sink_k && (reinterpret_cast<std::uintptr_t>(v.sink_k) % 16 != 0 ||
                   reinterpret_cast<std::uintptr_t>(v.sink_v) % 16 != 0))
    return {status::misaligned, "sink_k and sink_v must be 16-byte aligned"};
  return {};
}
inline status validate_structure(const paged_cache_view& v, std::int64_t expected_record_bytes, int expected_head_dim,
                                 int expected_tile_tokens) {
  return structure_error(v, expected_record_bytes, expected_head_dim, expected_tile_tokens).code;
}

// Checks a host copy of the page table and lengths against the view: every
// length >= 0 with at most max_pages_per_seq complete tiles (length / G <=
// max_pages_per_seq: up to max_pages_per_seq * G + G - 1 tokens, the last
// G - 1 in the tail), every page a complete tile needs in [0, num_pages), and
// no page used twice.
inline status validate_tables(const paged_cache_view& v, const std::int32_t* host_page_table,
                              const std::int32_t* host_seq_lens, std::uint8_t* scratch_page_marks = nullptr) {
  if (!host_page_table || !host_seq_lens) return status::null_pointer;
  // Sizes first: a view that skipped validate_structure must not divide by zero.
  if (v.num_seqs < 0 || v.tile_tokens <= 0 || v.max_pages_per_seq < 0 || v.num_pages < 0)
    return status::invalid_argument;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t len = host_seq_lens[s];
    if (len < 0) return status::invalid_argument;
    const std::int64_t full = len / v.tile_tokens;
    if (full > v.max_pages_per_seq) return status::invalid_argument;
    for (std::int64_t i = (v.has_sink() ? 1 : 0); i < full; ++i) {
      const std::int32_t p = host_page_table[static_cast<std::int64_t>(s) * v.max_pages_per_seq + i];
      if (p < 0 || p >= v.num_pages) return status::invalid_argument;
      if (scratch_page_marks) {
        if (scratch_page_marks[p]) return status::invalid_argument;
        scratch_page_marks[p] = 1;
      }
    }
  }
  return status::success;
}

// Checks a host copy of tail_slots (when the view has one) against the host
// copy of the lengths: every sequence with seq_lens > 0 has a slot in
// [0, slots()), and no two of them share a slot. scratch_slot_marks: optional,
// slots() bytes, zeroed by the caller.
inline status validate_slots(const paged_cache_view& v, const std::int32_t* host_tail_slots,
                             const std::int32_t* host_seq_lens, std::uint8_t* scratch_slot_marks = nullptr) {
  if (!v.tail_slots) return status::success;
  if (!host_tail_slots || !host_seq_lens) return status::null_pointer;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    if (host_seq_lens[s] <= 0) continue;
    const std::int32_t slot = host_tail_slots[s];
    if (slot < 0 || slot >= v.slots()) return status::invalid_argument;
    if (scratch_slot_marks) {
      if (scratch_slot_marks[slot]) return status::invalid_argument;
      scratch_slot_marks[slot] = 1;
    }
  }
  return status::success;
}

// The grid tiles per sequence launch_prefill needs for chunks of at most
// max_tokens_per_seq tokens (a chunk not aligned to G spans one tile more).
// A bound above what one sequence can hold (max_pages_per_seq * G + G - 1
// tokens) is taken as that capacity, so INT64_MAX means "no bound"; the
// arithmetic cannot overflow. invalid_argument: a negative bound, or a view
// with negative sizes or tile_tokens <= 0.
inline status prefill_grid_tiles(const paged_cache_view& v, std::int64_t max_tokens_per_seq, std::int64_t* tiles) {
  if (!tiles) return status::null_pointer;
  if (max_tokens_per_seq < 0 || v.tile_tokens <= 0 || v.max_pages_per_seq < 0) return status::invalid_argument;
  const std::int64_t g = v.tile_tokens;
  const std::int64_t capacity = (static_cast<std::int64_t>(v.max_pages_per_seq) + 1) * g - 1;  // < 2^31 * 2^31
  const std::int64_t n = max_tokens_per_seq < capacity ? max_tokens_per_seq : capacity;
  *tiles = n / g + (n % g != 0 ? 1 : 0) + 1;
  return status::success;
}

// Checks a host copy of a prefill's cu_seqlens (num_seqs + 1 entries, starting
// at 0, non-decreasing) against the host copy of the lengths the prefill is
// launched with (which include the chunk): every chunk fits its sequence
// (n_s <= seq_lens[s]). Writes the longest chunk to *max_chunk (the bound
// launch_prefill takes). Run validate_tables on the same lengths too.
inline status validate_prefill(const paged_cache_view& v, const std::int32_t* host_cu_seqlens,
                               const std::int32_t* host_seq_lens, std::int64_t* max_chunk = nullptr) {
  if (!host_cu_seqlens || !host_seq_lens) return status::null_pointer;
  if (host_cu_seqlens[0] != 0) return status::invalid_argument;
  std::int64_t mx = 0;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t n = static_cast<std::int64_t>(host_cu_seqlens[s + 1]) - host_cu_seqlens[s];
    if (n < 0 || n > host_seq_lens[s]) return status::invalid_argument;
    mx = n > mx ? n : mx;
  }
  if (max_chunk) *max_chunk = mx;
  return status::success;
}

KVTILE_NAMESPACE_END
