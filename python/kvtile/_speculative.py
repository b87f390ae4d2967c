"""Speculative decoding and forks.

docs/python.md ("Speculative decoding and shared prefixes"): append_drafts (seq_lens already
include the drafts), verify with decode(..., cu_seqlens_q=cu_drafts), commit_drafts(accepted)
(0 = roll back): the cache then equals, byte for byte, a cache into which only the accepted
tokens were appended. fork starts a row from another row's state, sharing its complete pages.
"""
import torch

from ._registry import _ops, _preset_id
from ._validate import _host_int32


def draft_bytes(num_slots, kv_heads, head_dim, preset="k4v2_g128"):
    """Device bytes PagedCache.enable_drafts() allocates for these sizes."""
    return int(_ops.draft_bytes(_preset_id(preset), int(head_dim), int(num_slots), int(kv_heads)))


def _drafts_of(op, cache):
    if getattr(cache, "draft_k", None) is None:
        raise RuntimeError("%s: the cache has no draft staging area: call cache.enable_drafts() first" % op)
    return cache.draft_k, cache.draft_v, cache.draft_state


def append_drafts(cache, k, v, cu_drafts, rows=None, flags=None):
    """Appends up to 8 draft tokens per row, exactly as prefill would (tiles they complete are
    quantized, so the verify step's attention reads the cache of a plain append), and keeps what
    commit_drafts needs to take them back. k, v [total, kv_heads, D] fp16/bf16, row s at
    cu_drafts[s]:cu_drafts[s+1] (int32, device; use it as decode's cu_seqlens_q). cache.seq_lens
    must already include the drafts. No host synchronization (capturable in a CUDA graph). A row
    with drafts already pending, or more than 8 drafts, is skipped and gets FLAG_BAD_DRAFTS in flags."""
    dk, dv, ds = _drafts_of("kvtile.append_drafts", cache)
    _ops.append_drafts(*cache._cache_args(rows), dk, dv, ds, k, v, cu_drafts, cache.preset_id, flags)


def commit_drafts(cache, accepted, rows=None, update_seq_lens=True, flags=None):
    """Keeps the first accepted[s] drafts of row s (int32 [rows], device; 0 rolls all back, < 0
    skips the row) and drops the rest without a trace. update_seq_lens: write the committed
    lengths into cache.seq_lens (on the device, no host sync). A row with no drafts pending, or
    accepted[s] larger than its drafts, is skipped and gets FLAG_BAD_DRAFTS in flags."""
    dk, dv, ds = _drafts_of("kvtile.commit_drafts", cache)
    args = cache._cache_args(rows)
    new_lens = args[2] if update_seq_lens else None
    _ops.commit_drafts(*args, dk, dv, ds, accepted, new_lens, cache.preset_id, flags)


def validate_fork(cache, src_slots, dst_slots, seq_lens=None, tail_slots=None):
    """Host check of fork pairs (lists or CPU tensors): every slot in range, no destination twice
    or also a source, no destination that is the slot of a live row (seq_lens > 0). seq_lens and
    tail_slots default to host copies of the cache's (which synchronizes). Raises ValueError."""
    op = "kvtile.validate_fork"
    n = len(src_slots)
    src = _host_int32(op, "src_slots", src_slots, n)
    dst = _host_int32(op, "dst_slots", dst_slots, n)
    lens = cache.seq_lens.detach().cpu() if seq_lens is None else _host_int32(op, "seq_lens", seq_lens, cache.max_seqs)
    slots = cache.tail_slots.detach().cpu() if tail_slots is None else _host_int32(op, "tail_slots", tail_slots,
                                                                                    cache.max_seqs)
    _ops.validate_fork(cache.num_slots, src, dst, slots.to(torch.int32).contiguous(), lens.to(torch.int32).contiguous())


def fork_slots(cache, src_slots, dst_slots, flags=None):
    """Device op of a fork (capturable): slot dst_slots[i] gets slot src_slots[i]'s fp16 tail and
    sink (int32 device tensors [count]). The engine updates page_table, seq_lens and tail_slots
    itself; check the pairs with validate_fork first."""
    drafts = (cache.draft_k, cache.draft_v, cache.draft_state) if getattr(cache, "draft_k", None) is not None \
        else (None, None, None)
    _ops.fork_slots(*cache._cache_args(), *drafts, src_slots, dst_slots, cache.preset_id, flags)


def fork(cache, src_row, dst_row, dst_slot=None):
    """Starts row dst_row (length 0) from row src_row's state: the fp16 tail and sink are copied
    into dst_slot (default: the row's current slot), the complete tiles are SHARED: page_table
    [dst_row, :L // G] = page_table[src_row, :L // G]; seq_lens[dst_row] = L. Shared pages are
    immutable (no writer touches tiles below a row's L // G); the rest of dst_row's page table must
    be pages it owns (restored to the default pages when the cache owns all of them). Reads the
    lengths on the host (synchronizes); fork_slots is the capturable part."""
    op = "kvtile.fork"
    for name, r in (("src_row", src_row), ("dst_row", dst_row)):
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < cache.max_seqs:
            raise ValueError("%s: %s must be a row in [0, %d) (got %r)" % (op, name, cache.max_seqs, r))
    if src_row == dst_row:
        raise ValueError("%s: src_row and dst_row are the same row (%d)" % (op, src_row))
    lens = cache.seq_lens.detach().cpu()
    slots = cache.tail_slots.detach().cpu().clone()
    if int(lens[dst_row]) != 0:
        raise ValueError("%s: dst_row %d is live (seq_lens %d): fork into a free row (length 0)"
                         % (op, dst_row, int(lens[dst_row])))
    if dst_slot is not None:
        slots[dst_row] = int(dst_slot)
    src_slot, dslot = int(slots[src_row]), int(slots[dst_row])
    validate_fork(cache, [src_slot], [dslot], lens, slots)
    dev = cache.tail_k.device
    fork_slots(cache, torch.tensor([src_slot], dtype=torch.int32, device=dev),
               torch.tensor([dslot], dtype=torch.int32, device=dev))
    length = int(lens[src_row])
    full = length // cache.tile_tokens
    if cache.num_pages >= cache.max_seqs * cache.max_pages_per_seq:  # the default layout: row r owns its pages
        own = torch.arange(cache.max_pages_per_seq, dtype=torch.int32, device=dev) + dst_row * cache.max_pages_per_seq
        cache.page_table[dst_row].copy_(own)
    cache.page_table[dst_row, :full] = cache.page_table[src_row, :full]
    cache.tail_slots[dst_row] = dslot
    cache.seq_lens[dst_row] = length
