"""kvtile for PyTorch: KVarN-quantized paged KV cache ops.

The ops live in ``torch.ops.kvtile`` (registered with TORCH_LIBRARY, so
torch.compile and CUDA graphs see them, and they run on the current CUDA
stream); this module adds Python wrappers with defaults and the
:class:`PagedCache` allocator. docs/python.md describes the package.

    import kvtile
    cache = kvtile.PagedCache(max_seqs=8, max_tokens_per_seq=4096, kv_heads=8, head_dim=128, q_heads=32)
    kvtile.prefill(cache, k, v, cu_seqlens, seq_lens)      # k, v [tokens, kv_heads, D]
    kvtile.append(cache, k_new, v_new)                      # after cache.seq_lens += 1
    out = kvtile.decode(cache, q)                           # q [num_seqs, q_heads, D]
"""
import math
import os

import torch

from . import _C  # noqa: F401  (loads the library that registers torch.ops.kvtile)

__all__ = [
    "PRESETS",
    "has_cuda",
    "preset_info",
    "encode_tiles",
    "decode_tiles",
    "PagedCache",
    "prefill",
    "append",
    "decode",
    "dequantize_pages",
    "Fp16PagedCache",
    "fp16_decode",
]

# Preset name -> id of kvtile_ops.h (KVTILE_OPS_K4V2_G128, ...).
PRESETS = {"k4v2_g128": 0, "k4v4_g128": 1, "k2v2_g128": 2}

_ops = torch.ops.kvtile


def _preset_id(preset):
    if isinstance(preset, int) and preset in PRESETS.values():
        return preset
    if preset not in PRESETS:
        raise ValueError("kvtile: unknown preset %r (one of %s)" % (preset, ", ".join(PRESETS)))
    return PRESETS[preset]


def has_cuda():
    """True when the extension was built with the device ops."""
    return bool(_ops.has_cuda())


def preset_info(preset="k4v2_g128", head_dim=128):
    """tile_tokens, key_bits, value_bits, record_bytes and bits per element of a preset."""
    g, kb, vb, rb = _ops.preset_info(_preset_id(preset), head_dim)
    return {
        "tile_tokens": g,
        "key_bits": kb,
        "value_bits": vb,
        "record_bytes": rb,
        "bits_per_element": rb * 8.0 / (2 * g * head_dim),
    }


# ---------------------------------------------------------------- host codec


def encode_tiles(keys, values, preset="k4v2_g128", paged=False):
    """Host codec: keys/values [num_tiles, G, D] (CPU; fp16, bf16 or fp32) -> records uint8 [num_tiles, record_bytes].

    paged=True gives the record the paged store writes for these tokens
    (rotation, fp16 rounding, then the codec): byte-identical to the pages of
    prefill/append. Non-finite inputs are encoded as 0 (no error).
    """
    return _ops.encode_tiles(keys, values, _preset_id(preset), bool(paged))


def decode_tiles(records, preset="k4v2_g128", head_dim=128, dtype=torch.float32, frame="original"):
    """Host codec: records uint8 [num_tiles, record_bytes] (CPU) -> (keys, values) [num_tiles, G, D]."""
    if frame not in ("original", "rotated"):
        raise ValueError("kvtile.decode_tiles: frame must be 'original' or 'rotated' (got %r)" % (frame,))
    return _ops.decode_tiles(records, _preset_id(preset), head_dim, dtype, frame == "original")


# ---------------------------------------------------------------- the paged cache


def _align(n, a=256):
    return (n + a - 1) // a * a


class PagedCache:
    """Owns the tensors of one paged quantized KV cache (one attention layer).

    pages      [num_pages, kv_heads, record_bytes] uint8   one record per (page, KV head)
    page_table [max_seqs, max_pages_per_seq] int32        page of tile i of row s
    seq_lens   [max_seqs] int32                           tokens of row s (0: row unused)
    tail_k/v   [num_slots, kv_heads, G, D] fp16           the tile still filling (rotated frame)
    sink_k/v   like the tails, or None                    first tile kept in fp16 (sink=True)
    tail_slots [max_seqs] int32                           slot of row s in the tail/sink pools
    workspace  uint8                                      decode attention's split buffers

    By default every row s owns pages [s * max_pages_per_seq, (s + 1) *
    max_pages_per_seq) and slot s; an engine that manages pages itself
    rewrites page_table, seq_lens and tail_slots (reordering rows never moves
    fp16 data). ``nbytes`` is everything allocated on the device; a scheduler
    can budget with ``PagedCache.bytes_needed(...)`` before allocating (the
    same formula, tested equal).
    """

    def __init__(self, max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads=None, preset="k4v2_g128",
                 num_pages=None, num_slots=None, sink=False, device=None):
        self.preset = preset
        self.preset_id = _preset_id(preset)
        info = preset_info(preset, head_dim)
        self.tile_tokens = G = info["tile_tokens"]
        self.record_bytes = info["record_bytes"]
        self.max_seqs = int(max_seqs)
        self.kv_heads = int(kv_heads)
        self.head_dim = int(head_dim)
        self.q_heads = int(q_heads) if q_heads is not None else self.kv_heads
        if self.max_seqs <= 0 or max_tokens_per_seq <= 0 or self.kv_heads <= 0:
            raise ValueError("kvtile.PagedCache: max_seqs, max_tokens_per_seq and kv_heads must be positive")
        if self.q_heads % self.kv_heads:
            raise ValueError("kvtile.PagedCache: q_heads (%d) must be a multiple of kv_heads (%d)"
                             % (self.q_heads, self.kv_heads))
        self.max_pages_per_seq = -(-int(max_tokens_per_seq) // G)
        self.num_pages = int(num_pages) if num_pages is not None else self.max_seqs * self.max_pages_per_seq
        self.num_slots = int(num_slots) if num_slots is not None else self.max_seqs
        device = torch.device(device if device is not None else "cuda")
        self.device = device
        self.pages = torch.zeros(self.num_pages, self.kv_heads, self.record_bytes, dtype=torch.uint8, device=device)
        rows = torch.arange(self.max_seqs, dtype=torch.int32, device=device)
        per = torch.arange(self.max_pages_per_seq, dtype=torch.int32, device=device)
        table = rows[:, None] * self.max_pages_per_seq + per[None, :]
        if self.num_pages < self.max_seqs * self.max_pages_per_seq:
            table = torch.full_like(table, -1)  # the engine assigns pages
        self.page_table = table.contiguous()
        self.seq_lens = torch.zeros(self.max_seqs, dtype=torch.int32, device=device)
        shape = (self.num_slots, self.kv_heads, G, self.head_dim)
        self.tail_k = torch.zeros(shape, dtype=torch.float16, device=device)
        self.tail_v = torch.zeros(shape, dtype=torch.float16, device=device)
        self.sink_k = torch.zeros(shape, dtype=torch.float16, device=device) if sink else None
        self.sink_v = torch.zeros(shape, dtype=torch.float16, device=device) if sink else None
        self.tail_slots = (torch.arange(self.max_seqs, dtype=torch.int32, device=device) % self.num_slots).contiguous()
        self.workspace_bytes = self.decode_workspace_bytes(self.preset_id, self.head_dim, self.kv_heads,
                                                           self.max_seqs, self.max_pages_per_seq, self.q_heads)
        self.workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)

    @staticmethod
    def decode_workspace_bytes(preset, head_dim, kv_heads, max_seqs, max_pages_per_seq, q_heads):
        """Largest decode workspace over batches of 1..max_seqs rows (automatic splits)."""
        pid = _preset_id(preset)
        if not has_cuda():
            return 0
        return max(_ops.decode_workspace_bytes(pid, head_dim, kv_heads, n, max_pages_per_seq, q_heads, 0)
                   for n in range(1, max_seqs + 1))

    @staticmethod
    def bytes_needed(max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads=None, preset="k4v2_g128",
                     num_pages=None, num_slots=None, sink=False):
        """Device bytes a PagedCache with these arguments allocates (pages, tables, tails, sinks, workspace)."""
        info = preset_info(preset, head_dim)
        G = info["tile_tokens"]
        q_heads = q_heads if q_heads is not None else kv_heads
        max_pages = -(-max_tokens_per_seq // G)
        num_pages = num_pages if num_pages is not None else max_seqs * max_pages
        num_slots = num_slots if num_slots is not None else max_seqs
        tails = num_slots * kv_heads * G * head_dim * 2 * 2 * (2 if sink else 1)
        return (num_pages * kv_heads * info["record_bytes"] + max_seqs * max_pages * 4 + max_seqs * 4 * 2 + tails
                + PagedCache.decode_workspace_bytes(preset, head_dim, kv_heads, max_seqs, max_pages, q_heads))

    @property
    def nbytes(self):
        ts = [self.pages, self.page_table, self.seq_lens, self.tail_k, self.tail_v, self.tail_slots, self.workspace]
        ts += [t for t in (self.sink_k, self.sink_v) if t is not None]
        return sum(t.numel() * t.element_size() for t in ts)

    def bytes_per_token(self):
        """Quantized bytes per token of one layer (records only; tails are a fixed per-slot cost)."""
        return self.kv_heads * self.record_bytes / self.tile_tokens

    def _cache_args(self, rows=None):
        n = self.max_seqs if rows is None else rows
        return (self.pages, self.page_table[:n], self.seq_lens[:n], self.tail_k, self.tail_v, self.sink_k,
                self.sink_v, self.tail_slots[:n])


def prefill(cache, k, v, cu_seqlens, max_tokens_per_seq=None, rows=None, flags=None):
    """Writes chunks of tokens: k, v [total_tokens, kv_heads, D] fp16/bf16, sequence s at rows
    cu_seqlens[s]:cu_seqlens[s+1] (int32, device). cache.seq_lens must already include them.

    max_tokens_per_seq bounds the chunk lengths (default: computed from a host copy of cu_seqlens,
    which synchronizes; pass it when capturing a CUDA graph).
    """
    if max_tokens_per_seq is None:
        cu = cu_seqlens.detach().cpu()
        max_tokens_per_seq = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
    _ops.prefill(*cache._cache_args(rows), k, v, cu_seqlens, int(max_tokens_per_seq), cache.preset_id, flags)


def append(cache, k_new, v_new, rows=None, flags=None):
    """One token per row: k_new, v_new [rows, kv_heads, D]; cache.seq_lens must already include it
    (rows with seq_lens 0 are skipped)."""
    _ops.append(*cache._cache_args(rows), k_new, v_new, cache.preset_id, flags)


def decode(cache, q, out=None, lse=None, softmax_scale=None, rows=None, num_splits=0):
    """Decode attention of one query token per row: q [rows, q_heads, D] fp16/bf16 (original frame)
    over the quantized cache -> out [rows, q_heads, D] (and lse [rows, q_heads] fp32 when given)."""
    if q.dim() == 3 and (q.shape[1] <= 0 or q.shape[1] % cache.kv_heads):
        raise ValueError("kvtile.decode: q heads (%d) must be a positive multiple of kv_heads (%d)"
                         % (q.shape[1], cache.kv_heads))
    if out is None:
        out = torch.empty_like(q)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    _ops.decode(*cache._cache_args(rows), q, out, lse, cache.workspace, float(softmax_scale), cache.preset_id,
                int(num_splits))
    return out


def dequantize_pages(cache, page_ids, frame="original", out_k=None, out_v=None):
    """Pages page_ids (int32, device) -> (k, v) [count, kv_heads, G, D] fp16."""
    if frame not in ("original", "rotated"):
        raise ValueError("kvtile.dequantize_pages: frame must be 'original' or 'rotated' (got %r)" % (frame,))
    shape = (page_ids.shape[0], cache.kv_heads, cache.tile_tokens, cache.head_dim)
    if out_k is None:
        out_k = torch.empty(shape, dtype=torch.float16, device=cache.pages.device)
    if out_v is None:
        out_v = torch.empty(shape, dtype=torch.float16, device=cache.pages.device)
    _ops.dequantize_pages(cache.pages, page_ids, out_k, out_v, cache.preset_id, frame == "original")
    return out_k, out_v


# ---------------------------------------------------------------- the fp16 baseline


class Fp16PagedCache:
    """An unquantized paged fp16 cache (64-token pages, original frame) read by kvtile's fp16
    decode kernel: the baseline next to PagedCache. k, v [num_pages, kv_heads, 64, D]."""

    page_tokens = 64

    def __init__(self, max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads=None, device=None):
        device = torch.device(device if device is not None else "cuda")
        self.max_seqs, self.kv_heads, self.head_dim = int(max_seqs), int(kv_heads), int(head_dim)
        self.q_heads = int(q_heads) if q_heads is not None else self.kv_heads
        self.max_pages_per_seq = -(-int(max_tokens_per_seq) // self.page_tokens)
        self.num_pages = self.max_seqs * self.max_pages_per_seq
        shape = (self.num_pages, self.kv_heads, self.page_tokens, self.head_dim)
        self.k = torch.zeros(shape, dtype=torch.float16, device=device)
        self.v = torch.zeros(shape, dtype=torch.float16, device=device)
        rows = torch.arange(self.max_seqs, dtype=torch.int32, device=device)
        per = torch.arange(self.max_pages_per_seq, dtype=torch.int32, device=device)
        self.page_table = (rows[:, None] * self.max_pages_per_seq + per[None, :]).contiguous()
        self.seq_lens = torch.zeros(self.max_seqs, dtype=torch.int32, device=device)
        ws = 0
        if has_cuda():
            ws = max(_ops.fp16_decode_workspace_bytes(self.head_dim, self.kv_heads, n, self.max_pages_per_seq,
                                                      self.q_heads, 0) for n in range(1, self.max_seqs + 1))
        self.workspace = torch.empty(ws, dtype=torch.uint8, device=device)

    @property
    def nbytes(self):
        ts = [self.k, self.v, self.page_table, self.seq_lens, self.workspace]
        return sum(t.numel() * t.element_size() for t in ts)

    def bytes_per_token(self):
        return self.kv_heads * self.head_dim * 2 * 2

    def write(self, k, v, positions, rows=None):
        """Stores k, v [n, kv_heads, D] at token positions[i] of rows[i] (device tensors; no host sync)."""
        rows = rows if rows is not None else torch.arange(k.shape[0], device=k.device)
        page = self.page_table[rows, positions // self.page_tokens].long()
        off = (positions % self.page_tokens).long()
        self.k[page, :, off, :] = k.to(torch.float16)
        self.v[page, :, off, :] = v.to(torch.float16)


def fp16_decode(cache, q, out=None, lse=None, softmax_scale=None, rows=None, num_splits=0):
    """Decode attention over an Fp16PagedCache (kvtile's fp16 kernel)."""
    n = cache.max_seqs if rows is None else rows
    if out is None:
        out = torch.empty_like(q)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    _ops.fp16_decode(cache.k, cache.v, cache.page_table[:n], cache.seq_lens[:n], q, out, lse, cache.workspace,
                     float(softmax_scale), int(num_splits))
    return out


def _register_fake_kernels():
    """Shape functions for torch.compile (FakeTensor tracing) where torch has torch.library.register_fake."""
    lib = getattr(torch, "library", None)
    reg = getattr(lib, "register_fake", None) if lib is not None else None
    if reg is None:
        return
    for name in ("prefill", "append", "dequantize_pages", "decode", "fp16_decode"):
        reg("kvtile::" + name)(lambda *args, **kwargs: None)

    @reg("kvtile::encode_tiles")
    def _encode_fake(keys, values, preset, paged):
        rb = _ops.preset_info(preset, keys.shape[2])[3]
        return keys.new_empty((keys.shape[0], rb), dtype=torch.uint8)

    @reg("kvtile::decode_tiles")
    def _decode_fake(records, preset, head_dim, dtype, original_frame):
        g = _ops.preset_info(preset, head_dim)[0]
        k = records.new_empty((records.shape[0], g, head_dim), dtype=dtype)
        return k, torch.empty_like(k)


if os.environ.get("KVTILE_NO_FAKE_KERNELS") != "1":
    _register_fake_kernels()
