// kvtile/paged/speculative.hpp: draft tokens on a paged quantized cache
// (speculative decoding: append k drafts, verify, commit a prefix of them or
// roll them back) and forking a slot (a sequence that starts from another's
// prefix). docs/api.md ("Speculative decoding and shared prefixes") has the
// lifecycle; device/paged/speculative.cuh has the launchers.
//
// Why drafts need more than append: a draft that completes a tile makes
// append quantize the tile and the next draft overwrite tail slot 0; if the
// draft is rejected, the fp16 tokens of that tile are gone (quantization is
// lossy). So append_drafts keeps an fp16 copy of the affected span, per
// (slot, KV head), in a staging area:
//   draft_k/v    [num_slots][kv_heads][G + max_draft_tokens][D] fp16 (rotated):
//                row r holds position base + r, base = (L0 / G) * G, where L0 is
//                the committed length before the drafts: the committed tail
//                tokens [base, L0) and the k drafts [L0, L0 + k)
//   draft_state  [num_slots][kv_heads][2] int32: {L0, k + 1}; {any, 0} = no
//                drafts pending (zero-initialized memory is "none pending")
// and otherwise does exactly what prefill / append do for those tokens: tiles
// they complete are encoded (from the same fp16 values, with the same codec)
// into their pages or copied to the sink, the rest goes to the tail. So during
// the verify step the cache is byte for byte the cache of a plain append of
// the k tokens, and the multi-query decode attends it through the ordinary
// view (seq_lens = L0 + k). commit(a) for a in [0, k] then restores the tail
// of length L0 + a from the staging rows; records of tiles completed by
// accepted drafts are already right (same values, same codec), and pages or
// sink written only for rejected drafts lie beyond the committed length
// (never read; overwritten when that tile completes for real). Rollback is
// commit(0). After commit the cache is bit-identical, in everything a reader
// reads (records of complete tiles, sink once the first tile is complete,
// tail slots [0, L % G), lengths), to a cache into which only the accepted
// tokens were appended.
//
// With G >= 32 and k <= max_draft_tokens = 8, one verify step completes at
// most one tile (the staging area holds at most G - 1 + 8 rows).
//
// Fork: slot dst starts from slot src: its fp16 tail (the whole tile) and
// sink are copied; complete tiles are shared by page id (the engine copies
// page_table[src_row][0, L / G) into the new row and owns reference counts).
// Shared pages are immutable: a writer only writes tiles at index >= L / G
// of a row, which must be pages that row owns.
#pragma once

#include <cstdint>
#include <cstring>

#include "../config.hpp"
#include "../numeric/half.hpp"
#include "../status.hpp"
#include "paged_cache.hpp"
#include "paged_record.hpp"

KVTILE_NAMESPACE_BEGIN

// Most draft tokens per sequence of one verify step (the multi-query decode's bound).
inline constexpr int max_draft_tokens = 8;

namespace device {
// Flag bit (the paged_flag word): a draft call that does not fit the row's
// draft state (append_drafts while drafts are pending or with k outside
// [0, min(8, seq_lens)]; commit with nothing pending or more accepted than
// appended; fork of a slot with pending drafts). The row is skipped.
inline constexpr std::int32_t paged_flag_bad_drafts = 32;
}  // namespace device

// The staging area and draft state (device memory for the kernels, host memory for the host path).
struct draft_view {
  half_t* draft_k = nullptr;            // [slots][kv_heads][G + max_draft_tokens][D]
  half_t* draft_v = nullptr;
  std::int32_t* draft_state = nullptr;  // [slots][kv_heads][2]

  // Rows of one (slot, head) staging block.
  static constexpr std::int64_t rows(std::int64_t tile_tokens) { return tile_tokens + max_draft_tokens; }
  // First element of the staging block of (slot, head).
  KVTILE_HOST_DEVICE std::int64_t offset(const paged_cache_view& v, std::int32_t slot, std::int32_t head) const {
    return (static_cast<std::int64_t>(slot) * v.kv_heads + head) * rows(v.tile_tokens) * v.head_dim;
  }
  KVTILE_HOST_DEVICE std::int32_t* state(const paged_cache_view& v, std::int32_t slot, std::int32_t head) const {
    return draft_state + (static_cast<std::int64_t>(slot) * v.kv_heads + head) * 2;
  }
};

// Bytes of the staging area and state of a cache (what enabling drafts costs).
inline std::int64_t draft_bytes(std::int64_t slots, std::int64_t kv_heads, std::int64_t tile_tokens,
                                std::int64_t head_dim) {
  return slots * kv_heads * (2 * draft_view::rows(tile_tokens) * head_dim * 2 + 2 * 4);
}

// ---- the per-row rules (host path and kernels call these) ---------------------

// append_drafts on a row: len = seq_lens (includes the drafts), n drafts,
// pending = draft_state[1] of its slot. Returns 0 or paged_flag_bad_drafts.
KVTILE_HOST_DEVICE std::int32_t check_append_drafts(std::int64_t len, std::int64_t n, std::int32_t pending) {
  if (n < 0 || n > max_draft_tokens || n > len || pending != 0) return device::paged_flag_bad_drafts;
  return 0;
}

// commit on a row: accepted drafts (>= 0), {l0, pending} = draft_state of its slot.
KVTILE_HOST_DEVICE std::int32_t check_commit(std::int32_t accepted, std::int32_t l0, std::int32_t pending) {
  if (pending <= 0 || pending > max_draft_tokens + 1 || accepted > pending - 1 || l0 < 0 ||
      l0 > INT32_MAX - max_draft_tokens)
    return device::paged_flag_bad_drafts;
  return 0;
}

// The staging area's structure: pointers present, 16-byte aligned, offsets in int64.
inline status validate_drafts(const paged_cache_view& v, const draft_view& d) {
  if (!d.draft_k || !d.draft_v || !d.draft_state) return status::null_pointer;
  if (v.kv_heads <= 0 || v.tile_tokens <= 0 || v.head_dim <= 0) return status::invalid_argument;
  if (static_cast<std::int64_t>(v.slots()) * v.kv_heads > INT64_MAX / (draft_view::rows(v.tile_tokens) * v.head_dim))
    return status::invalid_argument;
  if (reinterpret_cast<std::uintptr_t>(d.draft_k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(d.draft_v) % 16 != 0)
    return status::misaligned;
  return status::success;
}

// Checks a fork on host copies: count pairs (src_slots[i] -> dst_slots[i]),
// every slot in [0, slots()), no dst twice, no dst that is also a src, and no
// dst that is the slot of a live row (seq_lens > 0) of the view (host copies
// of tail_slots, or null when the view has none, and seq_lens). A fork into
// a live slot would overwrite that row's tail.
inline status validate_fork(const paged_cache_view& v, const std::int32_t* host_src_slots,
                            const std::int32_t* host_dst_slots, std::int32_t count,
                            const std::int32_t* host_tail_slots, const std::int32_t* host_seq_lens) {
  if (count < 0) return status::invalid_argument;
  if (count == 0) return status::success;
  if (!host_src_slots || !host_dst_slots || !host_seq_lens) return status::null_pointer;
  if (v.tail_slots && !host_tail_slots) return status::null_pointer;
  const std::int32_t slots = v.slots();
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int32_t s = host_src_slots[i], d = host_dst_slots[i];
    if (s < 0 || s >= slots || d < 0 || d >= slots) return status::invalid_argument;
    for (std::int32_t j = 0; j < count; ++j)
      if ((j != i && host_dst_slots[j] == d) || host_src_slots[j] == d) return status::invalid_argument;
    for (std::int32_t r = 0; r < v.num_seqs; ++r)
      if (host_seq_lens[r] > 0 && (v.tail_slots ? host_tail_slots[r] : r) == d) return status::invalid_argument;
  }
  return status::success;
}

// ---- host path (host memory; the reference of the device launchers) -----------
// Same contract as the launchers of device/paged/speculative.cuh, with host
// pointers. Bad input returns a status before anything is written (the
// kernels instead flag and skip the row). flags: optional [num_seqs]
// (paged_flag bits of the tokens: non_finite, saturated).

// Drafts: k, v [total][kv_heads][D] (T = half_t, bfloat16_t or float), row s
// at [cu[s], cu[s+1]); seq_lens already include them. Rows with seq_lens 0
// and no drafts are skipped.
template <class Codec, class T>
status host_append_drafts(const paged_cache_view& v, const draft_view& d, const T* k, const T* vv,
                          const std::int32_t* cu, std::int32_t* flags = nullptr) {
  using PC = device::paged_record_codec<Codec>;
  constexpr int D = Codec::D, G = Codec::G;
  if (status s = validate_structure(v, static_cast<std::int64_t>(Codec::record_bytes), D, G); s != status::success)
    return s;
  if (status s = validate_drafts(v, d); s != status::success) return s;
  if (!k || !vv || !cu) return status::null_pointer;
  // Every row first: nothing is written when one is bad.
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t len = v.seq_lens[s], n = static_cast<std::int64_t>(cu[s + 1]) - cu[s];
    if (len <= 0 && n == 0) continue;
    const std::int32_t slot = v.tail_slot(s);
    if (slot < 0 || slot >= v.slots()) return status::invalid_argument;
    for (std::int32_t h = 0; h < v.kv_heads; ++h)
      if (check_append_drafts(len, n, d.state(v, slot, h)[1])) return status::invalid_argument;
    for (std::int64_t t = (len - n) / G; t < len / G; ++t)
      if (!(v.has_sink() && t == 0)) {
        if (t >= v.max_pages_per_seq) return status::invalid_argument;
        const std::int32_t page = v.page_table[static_cast<std::int64_t>(s) * v.max_pages_per_seq + t];
        if (page < 0 || page >= v.num_pages) return status::invalid_argument;
      }
  }
  status result = status::success;
  const std::int64_t tok = static_cast<std::int64_t>(v.kv_heads) * D;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t len = v.seq_lens[s], n = static_cast<std::int64_t>(cu[s + 1]) - cu[s];
    if (len <= 0 && n == 0) continue;
    const std::int32_t slot = v.tail_slot(s);
    const std::int64_t l0 = len - n, base = l0 / G * G, old = l0 - base;
    for (std::int32_t h = 0; h < v.kv_heads; ++h) {
      const std::int64_t toff = v.tile_offset(s, h), soff = d.offset(v, slot, h);
      for (int kv = 0; kv < 2; ++kv) {
        half_t* stage = (kv ? d.draft_v : d.draft_k) + soff;
        half_t* tail = (kv ? v.tail_v : v.tail_k) + toff;
        const T* in = (kv ? vv : k) + cu[s] * tok + static_cast<std::int64_t>(h) * D;
        std::memcpy(stage, tail, static_cast<std::size_t>(old) * D * sizeof(half_t));
        for (std::int64_t i = 0; i < n; ++i) {
          const unsigned f = device::host_rotate_to_half<typename Codec::rotation, D>(in + i * tok, stage + (old + i) * D);
          if (flags) flags[s] |= static_cast<std::int32_t>(f);
        }
      }
      const half_t* sk = d.draft_k + soff;
      const half_t* sv = d.draft_v + soff;
      for (std::int64_t t = base / G; t < len / G; ++t) {
        const std::int64_t r = (t - base / G) * G;
        if (v.has_sink() && t == 0) {
          std::memcpy(v.sink_k + toff, sk + r * D, sizeof(half_t) * G * D);
          std::memcpy(v.sink_v + toff, sv + r * D, sizeof(half_t) * G * D);
          continue;
        }
        const std::int32_t page = v.page_table[static_cast<std::int64_t>(s) * v.max_pages_per_seq + t];
        const status st = PC::encode(sk + r * D, D, sv + r * D, D, v.record(page, h));
        if (!ok(st)) {
          result = st;
          if (flags) flags[s] |= device::paged_flag_encode_failed;
        }
      }
      const std::int64_t from = len / G * G > base ? len / G * G : base;
      for (std::int64_t p = from; p < len; ++p) {
        std::memcpy(v.tail_k + toff + (p % G) * D, sk + (p - base) * D, sizeof(half_t) * D);
        std::memcpy(v.tail_v + toff + (p % G) * D, sv + (p - base) * D, sizeof(half_t) * D);
      }
      std::int32_t* st = d.state(v, slot, h);
      st[0] = static_cast<std::int32_t>(l0);
      st[1] = static_cast<std::int32_t>(n + 1);
    }
  }
  return result;
}

// Commit: accepted [num_seqs] drafts to keep per row (0 = roll back all;
// < 0 = row skipped); new_seq_lens: optional [num_seqs], gets L0 + accepted
// of every committed row (may be v.seq_lens' memory: commit never reads
// seq_lens). Clears the draft state of the committed rows.
template <class Codec>
status host_commit_drafts(const paged_cache_view& v, const draft_view& d, const std::int32_t* accepted,
                          std::int32_t* new_seq_lens = nullptr) {
  constexpr int D = Codec::D, G = Codec::G;
  if (status s = validate_structure(v, static_cast<std::int64_t>(Codec::record_bytes), D, G); s != status::success)
    return s;
  if (status s = validate_drafts(v, d); s != status::success) return s;
  if (!accepted) return status::null_pointer;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    if (accepted[s] < 0) continue;
    const std::int32_t slot = v.tail_slot(s);
    if (slot < 0 || slot >= v.slots()) return status::invalid_argument;
    for (std::int32_t h = 0; h < v.kv_heads; ++h)
      if (check_commit(accepted[s], d.state(v, slot, h)[0], d.state(v, slot, h)[1])) return status::invalid_argument;
  }
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    if (accepted[s] < 0) continue;
    const std::int32_t slot = v.tail_slot(s);
    std::int64_t len = 0;
    for (std::int32_t h = 0; h < v.kv_heads; ++h) {
      std::int32_t* st = d.state(v, slot, h);
      const std::int64_t l0 = st[0], base = l0 / G * G;
      len = l0 + accepted[s];
      const std::int64_t toff = v.tile_offset(s, h), soff = d.offset(v, slot, h);
      for (std::int64_t p = len / G * G; p < len; ++p) {
        std::memcpy(v.tail_k + toff + (p % G) * D, d.draft_k + soff + (p - base) * D, sizeof(half_t) * D);
        std::memcpy(v.tail_v + toff + (p % G) * D, d.draft_v + soff + (p - base) * D, sizeof(half_t) * D);
      }
      st[0] = st[1] = 0;
    }
    if (new_seq_lens) new_seq_lens[s] = static_cast<std::int32_t>(len);
  }
  return status::success;
}

// Fork: for each i, slot dst_slots[i] gets slot src_slots[i]'s tail tile and
// sink (when on); with drafts (d.draft_state non-null) the source must have no
// pending drafts and the destination's state is cleared. Run validate_fork
// first (this checks the slot range and pending drafts only).
inline status host_fork(const paged_cache_view& v, const draft_view& d, const std::int32_t* src_slots,
                        const std::int32_t* dst_slots, std::int32_t count) {
  if (count < 0) return status::invalid_argument;
  if (count == 0) return status::success;
  if (!src_slots || !dst_slots || !v.tail_k || !v.tail_v) return status::null_pointer;
  if (v.kv_heads <= 0 || v.tile_tokens <= 0 || v.head_dim <= 0) return status::invalid_argument;
  for (std::int32_t i = 0; i < count; ++i) {
    if (src_slots[i] < 0 || src_slots[i] >= v.slots() || dst_slots[i] < 0 || dst_slots[i] >= v.slots())
      return status::invalid_argument;
    if (d.draft_state)
      for (std::int32_t h = 0; h < v.kv_heads; ++h)
        if (d.state(v, src_slots[i], h)[1] != 0) return status::invalid_argument;
  }
  const std::int64_t tile = static_cast<std::int64_t>(v.tile_tokens) * v.head_dim;
  for (std::int32_t i = 0; i < count; ++i)
    for (std::int32_t h = 0; h < v.kv_heads; ++h) {
      const std::int64_t so = (static_cast<std::int64_t>(src_slots[i]) * v.kv_heads + h) * tile;
      const std::int64_t dof = (static_cast<std::int64_t>(dst_slots[i]) * v.kv_heads + h) * tile;
      std::memcpy(v.tail_k + dof, v.tail_k + so, sizeof(half_t) * tile);
      std::memcpy(v.tail_v + dof, v.tail_v + so, sizeof(half_t) * tile);
      if (v.has_sink()) {
        std::memcpy(v.sink_k + dof, v.sink_k + so, sizeof(half_t) * tile);
        std::memcpy(v.sink_v + dof, v.sink_v + so, sizeof(half_t) * tile);
      }
      if (d.draft_state) {
        std::int32_t* st = d.state(v, dst_slots[i], h);
        st[0] = st[1] = 0;
      }
    }
  return status::success;
}

KVTILE_NAMESPACE_END
