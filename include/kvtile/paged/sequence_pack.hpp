// kvtile/paged/sequence_pack.hpp: one sequence's cache as one contiguous
// buffer, for moving it between caches, GPUs or hosts (cache migration,
// disaggregated prefill/decode, transfer engines).
//
// What travels: a sequence of length L in a paged_cache_view is its
// n_full = L / G complete tiles (records in pages page_table[s][i], except tile
// 0 in the fp16 sink when the sink is on), its L % G live fp16 tail tokens and,
// with the sink on and n_full >= 1, its fp16 sink tile. Records are
// position-independent bytes, so the copy decodes bit-identically wherever it
// lands. The page ids, the slot of the sequence and the length are the
// receiver's business: the header carries L, the receiver picks new page ids
// and a tail/sink slot, writes its page table, its seq_lens (and its slot
// index, where the view has one).
//
// `slot` below is the sequence's slot in the tail and sink pools, a host
// value: the sequence's row index for a view without a slot index, else its
// entry of that index. The functions never read the view's page table,
// lengths or slot index (which may be device memory): page ids, length and
// slot come from the caller's host copies.
//
// Packed buffer (all offsets multiples of 16 bytes):
//   header   sequence_pack_header, 64 bytes
//   records  [n_records][kv_heads][record_bytes]  tiles first_record_tile .. n_full - 1, in tile order
//   tail_k   [kv_heads][L % G][D] fp16, then tail_v (same shape), each padded to 16 bytes
//   sink_k   [kv_heads][G][D] fp16, then sink_v   (only with the sink on and n_full >= 1)
//
// Both directions are one copy plan (sequence_copy_plan): a list of byte
// ranges (source, destination, bytes), adjacent pages merged. The host
// functions below run it with memcpy on host-memory views; the device
// functions (kvtile/device/paged/sequence_pack.cuh) run the same plan with
// cudaMemcpyAsync, so the two cannot disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../config.hpp"
#include "../detail/checked.hpp"
#include "../status.hpp"
#include "paged_cache.hpp"

KVTILE_NAMESPACE_BEGIN

struct sequence_pack_header {
  static constexpr std::uint32_t magic_value = 0x5153564bu;  // "KVSQ" little-endian
  static constexpr std::uint32_t version_value = 1;
  std::uint32_t magic = magic_value;
  std::uint32_t version = version_value;
  std::int32_t length = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t tile_tokens = 0;
  std::int64_t record_bytes = 0;
  std::int32_t n_records = 0;          // records in the buffer (complete tiles not in the sink)
  std::int32_t has_sink = 0;           // 1: the buffer holds the sink tile
  std::int32_t first_record_tile = 0;  // tile index of the first record (1 with the sink on, else 0)
  std::uint32_t reserved[5] = {0, 0, 0, 0, 0};
};
static_assert(sizeof(sequence_pack_header) == 64, "sequence_pack_header is 64 bytes");

struct sequence_pack_layout {
  sequence_pack_header header;
  std::size_t records = 0, tail_k = 0, tail_v = 0, sink_k = 0, sink_v = 0;  // byte offsets
  std::size_t tail_bytes = 0;  // per side, unpadded
  std::size_t sink_bytes = 0;  // per side
  std::size_t total = 0;       // bytes of the whole buffer
};

namespace detail {
constexpr std::size_t pack_align16(std::size_t x) { return (x + 15) / 16 * 16; }

// Slots in the view's tail/sink pools: slots() where the view has slot pools,
// else one per sequence.
template <class View>
constexpr auto pool_slots(const View& v, int) -> decltype(v.slots()) {
  return v.slots();
}
template <class View>
constexpr std::int32_t pool_slots(const View& v, long) {
  return v.num_seqs;
}
// First element of slot's fp16 tail (or sink) tile of head h.
inline std::int64_t pack_tile_offset(const paged_cache_view& v, std::int32_t slot, std::int32_t h) {
  return (static_cast<std::int64_t>(slot) * v.kv_heads + h) * v.tile_tokens * v.head_dim;
}

// Shape checks shared by pack and unpack (the view's pointers are not read).
inline status check_pack_shape(const paged_cache_view& v, std::int32_t slot, std::int32_t length) {
  if (v.kv_heads <= 0 || v.head_dim <= 0 || v.tile_tokens <= 0 || v.record_bytes <= 0 || v.num_pages < 0 ||
      v.max_pages_per_seq < 0 || v.num_seqs < 0)
    return status::invalid_argument;
  if (slot < 0 || slot >= pool_slots(v, 0)) return status::invalid_argument;
  if (length < 0 || length / v.tile_tokens > v.max_pages_per_seq) return status::invalid_argument;
  // The sizes (sequence_pack_layout_of) are computed with checked arithmetic.
  return status::success;
}
}  // namespace detail

// Layout of the buffer that packs `length` tokens of the sequence in `slot` of view v.
inline status sequence_pack_layout_of(const paged_cache_view& v, std::int32_t slot, std::int32_t length,
                                      sequence_pack_layout& out) {
  if (status s = detail::check_pack_shape(v, slot, length); s != status::success) return s;
  sequence_pack_layout L{};
  const std::int32_t full = length / v.tile_tokens;
  const bool sink = v.has_sink() && full >= 1;
  L.header.length = length;
  L.header.kv_heads = v.kv_heads;
  L.header.head_dim = v.head_dim;
  L.header.tile_tokens = v.tile_tokens;
  L.header.record_bytes = v.record_bytes;
  L.header.first_record_tile = v.has_sink() ? 1 : 0;
  L.header.n_records = full > L.header.first_record_tile ? full - L.header.first_record_tile : 0;
  L.header.has_sink = sink ? 1 : 0;
  // Checked: kv_heads, head_dim, tile_tokens and record_bytes are caller sizes
  // whose products can exceed 64 bits.
  using detail::checked_add;
  using detail::checked_product;
  using z = std::size_t;
  const z H = static_cast<z>(v.kv_heads), D = static_cast<z>(v.head_dim);
  L.records = sizeof(sequence_pack_header);
  z records_bytes = 0, tail_pad = 0;
  if (!checked_product(L.tail_bytes, H, static_cast<z>(length % v.tile_tokens), D, z{sizeof(half_t)}) ||
      !checked_product(L.sink_bytes, sink ? H : z{0}, static_cast<z>(v.tile_tokens), D, z{sizeof(half_t)}) ||
      !checked_product(records_bytes, static_cast<z>(L.header.n_records), H, static_cast<z>(v.record_bytes)) ||
      !checked_add(L.tail_bytes, z{15}, tail_pad))
    return status::invalid_argument;
  tail_pad = tail_pad / 16 * 16;  // pack_align16(tail_bytes)
  if (!checked_add(L.records, records_bytes, L.tail_k) || !checked_add(L.tail_k, tail_pad, L.tail_v) ||
      !checked_add(L.tail_v, tail_pad, L.sink_k) || !checked_add(L.sink_k, L.sink_bytes, L.sink_v) ||
      !checked_add(L.sink_v, L.sink_bytes, L.total))
    return status::invalid_argument;
  out = L;
  return status::success;
}

// Checks a received header (host copy) against the receiving view: same
// shape, consistent counts, and `buffer_bytes` large enough.
inline status check_sequence_pack_header(const sequence_pack_header& h, const paged_cache_view& v,
                                         std::size_t buffer_bytes) {
  if (h.magic != sequence_pack_header::magic_value || h.version != sequence_pack_header::version_value)
    return status::corrupt_record;
  if (h.kv_heads != v.kv_heads || h.head_dim != v.head_dim || h.tile_tokens != v.tile_tokens ||
      h.record_bytes != v.record_bytes)
    return status::invalid_argument;
  if ((h.has_sink != 0) != (v.has_sink() && h.length / v.tile_tokens >= 1) ||
      h.first_record_tile != (v.has_sink() ? 1 : 0))
    return status::invalid_argument;
  sequence_pack_layout L;
  if (detail::pool_slots(v, 0) <= 0) return status::invalid_argument;
  if (status s = sequence_pack_layout_of(v, 0, h.length, L); s != status::success) return s;
  if (L.header.n_records != h.n_records) return status::corrupt_record;
  if (buffer_bytes < L.total) return status::insufficient_space;
  return status::success;
}

// One contiguous byte range of a copy plan.
struct sequence_copy_chunk {
  const void* src;
  void* dst;
  std::size_t bytes;
};

// The copies that pack (to_buffer) or unpack (!to_buffer) the sequence in slot of v,
// page ids `pages` (host memory, n_records entries: tile first_record_tile + i
// is in pages[i]; for pack, the sequence's page-table row from that tile on).
// Consecutive page ids become one chunk. The header is not part of the plan.
inline status sequence_copy_plan(const paged_cache_view& v, std::int32_t slot, const sequence_pack_layout& L,
                                 const std::int32_t* pages, void* buffer, bool to_buffer,
                                 std::vector<sequence_copy_chunk>& plan) {
  plan.clear();
  if (!buffer || !v.pages || !v.tail_k || !v.tail_v) return status::null_pointer;
  if (L.header.n_records > 0 && !pages) return status::null_pointer;
  if (L.header.has_sink && (!v.sink_k || !v.sink_v)) return status::null_pointer;
  if (slot < 0 || slot >= detail::pool_slots(v, 0)) return status::invalid_argument;
  for (std::int32_t i = 0; i < L.header.n_records; ++i)
    if (pages[i] < 0 || pages[i] >= v.num_pages) return status::invalid_argument;
  auto* buf = static_cast<std::uint8_t*>(buffer);
  auto add = [&](void* cache_ptr, std::size_t off, std::size_t bytes) {
    if (bytes == 0) return;
    if (to_buffer)
      plan.push_back({cache_ptr, buf + off, bytes});
    else
      plan.push_back({buf + off, cache_ptr, bytes});
  };
  const std::size_t page_bytes = static_cast<std::size_t>(v.kv_heads) * static_cast<std::size_t>(v.record_bytes);
  for (std::int32_t i = 0; i < L.header.n_records;) {
    std::int32_t j = i + 1;
    while (j < L.header.n_records && pages[j] == pages[j - 1] + 1) ++j;
    add(v.record(pages[i], 0), L.records + static_cast<std::size_t>(i) * page_bytes,
        static_cast<std::size_t>(j - i) * page_bytes);
    i = j;
  }
  const std::size_t live = static_cast<std::size_t>(L.header.length % v.tile_tokens) *
                           static_cast<std::size_t>(v.head_dim) * sizeof(half_t);
  for (std::int32_t h = 0; h < v.kv_heads; ++h) {
    const std::int64_t o = detail::pack_tile_offset(v, slot, h);
    add(v.tail_k + o, L.tail_k + static_cast<std::size_t>(h) * live, live);
    add(v.tail_v + o, L.tail_v + static_cast<std::size_t>(h) * live, live);
  }
  if (L.header.has_sink) {
    const std::size_t tile = static_cast<std::size_t>(v.tile_tokens) * static_cast<std::size_t>(v.head_dim) *
                             sizeof(half_t);
    for (std::int32_t h = 0; h < v.kv_heads; ++h) {
      const std::int64_t o = detail::pack_tile_offset(v, slot, h);
      add(v.sink_k + o, L.sink_k + static_cast<std::size_t>(h) * tile, tile);
      add(v.sink_v + o, L.sink_v + static_cast<std::size_t>(h) * tile, tile);
    }
  }
  return status::success;
}

// The checks and copy plan of a pack (host pack_sequence and the device's
// pack_sequence_async): the layout of `length` tokens of `slot`, dst and the
// page row present, dst_bytes >= the layout's total. The header then goes to
// dst, the plan's chunks after it.
inline status plan_sequence_pack(const paged_cache_view& v, std::int32_t slot, std::int32_t length,
                                 const std::int32_t* page_row, void* dst, std::size_t dst_bytes,
                                 sequence_pack_layout& L, std::vector<sequence_copy_chunk>& plan) {
  if (status s = sequence_pack_layout_of(v, slot, length, L); s != status::success) return s;
  if (!dst || (L.header.n_records > 0 && !page_row)) return status::null_pointer;
  if (dst_bytes < L.total) return status::insufficient_space;
  const std::int32_t* pages = page_row ? page_row + L.header.first_record_tile : nullptr;
  return sequence_copy_plan(v, slot, L, pages, dst, true, plan);
}

// The checks and copy plan of an unpack of a buffer with this header
// (unpack_sequence, unpack_sequence_async).
inline status plan_sequence_unpack(const sequence_pack_header& header, const void* src, std::size_t src_bytes,
                                   const paged_cache_view& v, std::int32_t slot, const std::int32_t* new_pages,
                                   std::vector<sequence_copy_chunk>& plan) {
  if (!src) return status::null_pointer;
  if (status s = check_sequence_pack_header(header, v, src_bytes); s != status::success) return s;
  sequence_pack_layout L;
  if (status s = sequence_pack_layout_of(v, slot, header.length, L); s != status::success) return s;
  return sequence_copy_plan(v, slot, L, new_pages, const_cast<void*>(src), false, plan);
}

// Host-memory views: packs `length` tokens of the sequence in `slot` (its
// page-table row page_row, host memory, entries from tile 0) into dst
// (dst_bytes >= layout total).
inline status pack_sequence(const paged_cache_view& v, std::int32_t slot, std::int32_t length,
                            const std::int32_t* page_row, void* dst, std::size_t dst_bytes) {
  sequence_pack_layout L;
  std::vector<sequence_copy_chunk> plan;
  if (status s = plan_sequence_pack(v, slot, length, page_row, dst, dst_bytes, L, plan); s != status::success)
    return s;
  std::memcpy(dst, &L.header, sizeof L.header);
  for (const auto& c : plan) std::memcpy(c.dst, c.src, c.bytes);
  return status::success;
}

// Host-memory views: unpacks src into `slot` of v, records into the given
// page ids (new_pages[i] receives tile first_record_tile + i). The caller then
// sets the sequence's page table row, its length (header.length) and its slot.
inline status unpack_sequence(const void* src, std::size_t src_bytes, const paged_cache_view& v, std::int32_t slot,
                              const std::int32_t* new_pages, sequence_pack_header* header_out = nullptr) {
  if (!src) return status::null_pointer;
  if (src_bytes < sizeof(sequence_pack_header)) return status::insufficient_space;
  sequence_pack_header h;
  std::memcpy(&h, src, sizeof h);
  std::vector<sequence_copy_chunk> plan;
  if (status s = plan_sequence_unpack(h, src, src_bytes, v, slot, new_pages, plan); s != status::success) return s;
  for (const auto& c : plan) std::memcpy(c.dst, c.src, c.bytes);
  if (header_out) *header_out = h;
  return status::success;
}

KVTILE_NAMESPACE_END
