// kvtile/paged/fp16_paged_cache.hpp: the unquantized paged fp16 KV cache the
// fp16 decode baseline reads (docs/attention.md).
//
// Storage (device memory):
//   k, v        [num_pages][kv_heads][page_tokens][head_dim] fp16   (one page = page_tokens
//                                                                  tokens of every KV head)
//   page_table  [num_seqs][max_pages_per_seq] int32   page of the i-th page_tokens-chunk of s
//   seq_lens    [num_seqs] int32
// A sequence of length L uses ceil(L / page_tokens) pages; the last one may be
// partly filled (its unused tokens are never read into the result). Vectors are
// stored as given: rotate nothing (the baseline runs in the original frame).
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../numeric/half.hpp"
#include "../status.hpp"
#include "paged_cache.hpp"

KVTILE_NAMESPACE_BEGIN

// The page size (tokens) of the fp16 decode baseline's kernels (a view's
// page_tokens must equal it; the C ABI and Python report it).
inline constexpr std::int32_t fp16_page_tokens = 64;

struct fp16_paged_cache_view {
  half_t* k = nullptr;
  half_t* v = nullptr;
  const std::int32_t* page_table = nullptr;
  const std::int32_t* seq_lens = nullptr;
  std::int32_t num_seqs = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t page_tokens = 0;
  std::int32_t max_pages_per_seq = 0;
  std::int32_t num_pages = 0;

  // First element of the (page, head) block: page_tokens x head_dim, token-major.
  KVTILE_HOST_DEVICE std::int64_t block_offset(std::int32_t page, std::int32_t head) const {
    return (static_cast<std::int64_t>(page) * kv_heads + head) * page_tokens * head_dim;
  }
};

// A view that breaks a structural rule of the fp16 baseline's kernels for
// head_dim D (the checks of paged_decode_fp16 and can_implement_fp16 before
// their arguments'), as a view_error (paged_cache.hpp): the status and the
// rule's text for the layers that report it.
inline view_error fp16_structure_error(const fp16_paged_cache_view& c, int expected_head_dim) {
  if (c.head_dim != expected_head_dim) return {status::unsupported_head_dim, "head_dim is not the kernel's"};
  if (c.page_tokens != fp16_page_tokens) return {status::unsupported_tile_tokens, "page_tokens is not fp16_page_tokens"};
  if (!c.k || !c.v || !c.page_table || !c.seq_lens)
    return {status::null_pointer, "k, v, page_table and seq_lens must not be null"};
  if (c.max_pages_per_seq < 0 || c.num_pages < 0 || c.kv_heads < 0)
    return {status::invalid_argument, "max_pages_per_seq, num_pages and kv_heads must be >= 0"};
  // Every offset block_offset() computes must fit in int64 (no signed overflow).
  if (c.kv_heads > 0 && static_cast<std::int64_t>(c.num_pages) * c.kv_heads >
                            INT64_MAX / (static_cast<std::int64_t>(fp16_page_tokens) * c.head_dim))
    return {status::invalid_argument, "num_pages x kv_heads x page_tokens x head_dim does not fit in int64"};
  if (reinterpret_cast<std::uintptr_t>(c.k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(c.v) % 16 != 0)
    return {status::misaligned, "k and v must be 16-byte aligned"};
  return {};
}

KVTILE_NAMESPACE_END
