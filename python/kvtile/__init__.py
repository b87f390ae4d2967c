"""kvtile for PyTorch: KVarN-quantized paged KV cache ops.

The ops live in ``torch.ops.kvtile`` (registered with TORCH_LIBRARY, so
torch.compile and CUDA graphs see them, and they run on the current CUDA
stream); this module adds Python wrappers with defaults and the
:class:`PagedCache` allocator. docs/python.md describes the package.

    import kvtile
    cache = kvtile.PagedCache(max_seqs=8, max_tokens_per_seq=4096, kv_heads=8, head_dim=128, q_heads=32)
    cache.seq_lens[:n] = lengths                            # lengths that include the chunk
    kvtile.prefill(cache, k, v, cu_seqlens)                 # k, v [tokens, kv_heads, D]; optional max_tokens_per_seq
    kvtile.append(cache, k_new, v_new)                      # after cache.seq_lens += 1
    out = kvtile.decode(cache, q)                           # q [num_seqs, q_heads, D]
    plan = kvtile.DecodePlan(cache)                         # plan / run: balanced, CUDA-graph replayable
    plan.plan(host_seq_lens); out = plan.run(q)
"""
import math
import os
import weakref

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
    "DecodePlan",
    "MAX_Q_TOKENS",
    "dequantize_pages",
    "Fp16PagedCache",
    "fp16_decode",
]

# Most new query tokens per sequence of a multi-query decode (KVTILE_OPS_MAX_Q_TOKENS).
MAX_Q_TOKENS = 8

# Preset name -> id of kvtile_ops.h (KVTILE_OPS_K4V2_G128, ...).
PRESETS = {"k4v2_g128": 0, "k4v4_g128": 1, "k2v2_g128": 2}

_ops = torch.ops.kvtile


def _preset_id(preset):
    if isinstance(preset, int) and preset in PRESETS.values():
        return preset
    if preset not in PRESETS:
        raise ValueError("kvtile: unknown preset %r (one of %s)" % (preset, ", ".join(PRESETS)))
    return PRESETS[preset]


def _window(op, window_left):
    if window_left is None:
        return -1
    if isinstance(window_left, bool) or not isinstance(window_left, int) or window_left < -1:
        raise ValueError("%s: window_left must be None or -1 (no window) or an int >= 0 (got %r)" % (op, window_left))
    return int(window_left)


def _softcap(op, logit_softcap):
    if logit_softcap is None:
        return 0.0
    cap = float(logit_softcap)
    if not (math.isfinite(cap) and cap >= 0.0):
        raise ValueError("%s: logit_softcap must be None or 0 (off) or positive and finite (got %r)"
                         % (op, logit_softcap))
    return cap


def _max_q(op, max_q_tokens):
    if isinstance(max_q_tokens, bool) or not isinstance(max_q_tokens, int) or not 1 <= max_q_tokens <= MAX_Q_TOKENS:
        raise ValueError("%s: max_q_tokens must be an int in [1, %d] (got %r)" % (op, MAX_Q_TOKENS, max_q_tokens))
    return int(max_q_tokens)


def _scale(op, softmax_scale, head_dim):
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0.0):
        raise ValueError("%s: softmax_scale must be positive and finite (got %r)" % (op, softmax_scale))
    return scale


def _host_int32(op, name, values, n):
    """values (a list/tuple of ints or a CPU tensor) -> a contiguous CPU int32 tensor of n entries."""
    if isinstance(values, torch.Tensor):
        if values.device.type != "cpu":
            raise ValueError("%s: %s must be on the host (a list or a CPU tensor; got a %s tensor): it is read "
                             "without synchronizing the device" % (op, name, values.device.type))
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise TypeError("%s: %s must hold integers (got %s)" % (op, name, values.dtype))
        t = values.to(torch.int32).contiguous()
    else:
        t = torch.tensor(list(values), dtype=torch.int32)
    if t.dim() != 1 or t.numel() != n:
        raise ValueError("%s: %s must have %d entries (got shape %s)" % (op, name, n, list(t.shape)))
    return t


def _check_cu_seqlens_q(op, cu, max_q_tokens, seq_lens=None):
    """Host cu_seqlens_q (int32 CPU): starts at 0, each sequence has 0..max_q_tokens new tokens."""
    n = cu[1:] - cu[:-1]
    if int(cu[0]) != 0 or bool((n < 0).any()):
        raise ValueError("%s: cu_seqlens_q must start at 0 and be nondecreasing (got %s)" % (op, cu.tolist()))
    if bool((n > max_q_tokens).any()):
        raise ValueError("%s: a sequence has %d new tokens, more than max_q_tokens = %d"
                         % (op, int(n.max()), max_q_tokens))
    if seq_lens is not None and bool((seq_lens < n).any()):
        s = int((seq_lens < n).nonzero()[0])
        raise ValueError("%s: seq_lens[%d] = %d is shorter than its %d new tokens (seq_lens include them)"
                         % (op, s, int(seq_lens[s]), int(n[s])))
    return n


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
    workspace  uint8                                      decode attention's split buffers (for batches of
                                                          up to max_q_tokens new tokens per row)

    By default every row s owns pages [s * max_pages_per_seq, (s + 1) *
    max_pages_per_seq) and slot s; an engine that manages pages itself
    rewrites page_table, seq_lens and tail_slots (reordering rows never moves
    fp16 data). ``nbytes`` is everything allocated on the device; a scheduler
    can budget with ``PagedCache.bytes_needed(...)`` before allocating (the
    same formula, tested equal).
    """

    def __init__(self, max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads=None, preset="k4v2_g128",
                 num_pages=None, num_slots=None, sink=False, device=None, max_q_tokens=1):
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
        self.max_q_tokens = _max_q("kvtile.PagedCache", max_q_tokens)
        self.workspace_bytes = self.decode_workspace_bytes(self.preset_id, self.head_dim, self.kv_heads,
                                                           self.max_seqs, self.max_pages_per_seq, self.q_heads,
                                                           self.max_q_tokens)
        self.workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)

    @staticmethod
    def decode_workspace_bytes(preset, head_dim, kv_heads, max_seqs, max_pages_per_seq, q_heads, max_q_tokens=1):
        """Largest decode workspace over batches of 1..max_seqs rows (automatic splits) with up to
        max_q_tokens new tokens per row."""
        pid = _preset_id(preset)
        if not has_cuda():
            return 0
        return max(_ops.decode_workspace_bytes(pid, head_dim, kv_heads, n, max_pages_per_seq, q_heads, 0, max_q_tokens)
                   for n in range(1, max_seqs + 1))

    @staticmethod
    def bytes_needed(max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads=None, preset="k4v2_g128",
                     num_pages=None, num_slots=None, sink=False, max_q_tokens=1):
        """Device bytes a PagedCache with these arguments allocates (pages, tables, tails, sinks, workspace)."""
        info = preset_info(preset, head_dim)
        G = info["tile_tokens"]
        q_heads = q_heads if q_heads is not None else kv_heads
        max_pages = -(-max_tokens_per_seq // G)
        num_pages = num_pages if num_pages is not None else max_seqs * max_pages
        num_slots = num_slots if num_slots is not None else max_seqs
        tails = num_slots * kv_heads * G * head_dim * 2 * 2 * (2 if sink else 1)
        return (num_pages * kv_heads * info["record_bytes"] + max_seqs * max_pages * 4 + max_seqs * 4 * 2 + tails
                + PagedCache.decode_workspace_bytes(preset, head_dim, kv_heads, max_seqs, max_pages, q_heads,
                                                    max_q_tokens))

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


def decode(cache, q, out=None, lse=None, softmax_scale=None, rows=None, num_splits=0, cu_seqlens_q=None,
           max_q_tokens=None, window_left=None, logit_softcap=None, workspace=None):
    """Decode attention over the quantized cache in one call -> out (same shape and dtype as q).

    One query token per row: q [rows, q_heads, D] fp16/bf16 (original frame). Multi-query
    (speculative verification, MTP): cu_seqlens_q int32 [rows + 1] on the device, row s has
    n_s = cu_seqlens_q[s+1] - cu_seqlens_q[s] new tokens (0..8; the last n_s positions of its
    seq_lens, which include them), query rows cu_seqlens_q[s] ... of q [total, q_heads, D];
    causal among the new tokens. max_q_tokens bounds every n_s (default: read from a host copy of
    cu_seqlens_q, which synchronizes; pass it when capturing a CUDA graph; larger n_s are clamped).
    window_left: None/-1 (no window) or w >= 0: a query at position p attends keys p - w .. p.
    logit_softcap: None/0 (off) or cap > 0: each score s (softmax_scale q.k) becomes cap tanh(s / cap).
    lse [rows of q, q_heads] fp32 receives ln sum exp of the scores when given. workspace:
    default cache.workspace (sized for cache.max_q_tokens).
    """
    op = "kvtile.decode"
    window = _window(op, window_left)
    cap = _softcap(op, logit_softcap)
    if q.dim() == 3 and (q.shape[1] <= 0 or q.shape[1] % cache.kv_heads):
        raise ValueError("kvtile.decode: q heads (%d) must be a positive multiple of kv_heads (%d)"
                         % (q.shape[1], cache.kv_heads))
    scale = _scale(op, softmax_scale, q.shape[-1])
    if cu_seqlens_q is None:
        if max_q_tokens not in (None, 1):
            raise ValueError("kvtile.decode: max_q_tokens > 1 needs cu_seqlens_q (one query token per row without it)")
        mq = 1
    else:
        if not isinstance(cu_seqlens_q, torch.Tensor) or cu_seqlens_q.dim() != 1 or cu_seqlens_q.numel() < 1:
            raise ValueError("kvtile.decode: cu_seqlens_q must be a 1-D int32 tensor of rows + 1 entries")
        if cu_seqlens_q.dtype != torch.int32:
            raise TypeError("kvtile.decode: cu_seqlens_q must have dtype torch.int32 (got %s)" % cu_seqlens_q.dtype)
        if rows is None:
            rows = cu_seqlens_q.numel() - 1
        if max_q_tokens is None:
            cu = cu_seqlens_q.detach().cpu()
            n = _check_cu_seqlens_q(op, cu, MAX_Q_TOKENS)
            if q.dim() == 3 and q.shape[0] < int(cu[-1]):
                raise ValueError("kvtile.decode: q has %d rows, cu_seqlens_q needs %d" % (q.shape[0], int(cu[-1])))
            mq = max(1, int(n.max())) if n.numel() else 1
        else:
            mq = _max_q(op, max_q_tokens)
    if workspace is None:
        if mq > getattr(cache, "max_q_tokens", 1):
            raise ValueError("kvtile.decode: %d new tokens per row need a larger workspace than this cache's (made "
                             "for max_q_tokens=%d): allocate PagedCache(..., max_q_tokens=%d) or pass workspace="
                             % (mq, cache.max_q_tokens, MAX_Q_TOKENS))
        workspace = cache.workspace
    if out is None:
        out = torch.empty_like(q)
    _ops.decode(*cache._cache_args(rows), q, out, lse, workspace, scale, cache.preset_id, int(num_splits),
                cu_seqlens_q, mq, window, cap)
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
        self.device = device
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

    def _cache_args(self, rows=None):
        n = self.max_seqs if rows is None else rows
        return (self.k, self.v, self.page_table[:n], self.seq_lens[:n])

    def write(self, k, v, positions, rows=None):
        """Stores k, v [n, kv_heads, D] at token positions[i] of rows[i] (device tensors; no host sync)."""
        rows = rows if rows is not None else torch.arange(k.shape[0], device=k.device)
        page = self.page_table[rows, positions // self.page_tokens].long()
        off = (positions % self.page_tokens).long()
        self.k[page, :, off, :] = k.to(torch.float16)
        self.v[page, :, off, :] = v.to(torch.float16)


def fp16_decode(cache, q, out=None, lse=None, softmax_scale=None, rows=None, num_splits=0, window_left=None,
                logit_softcap=None):
    """Decode attention over an Fp16PagedCache (kvtile's fp16 kernel), one query token per row;
    window_left and logit_softcap as in decode."""
    op = "kvtile.fp16_decode"
    window = _window(op, window_left)
    cap = _softcap(op, logit_softcap)
    scale = _scale(op, softmax_scale, q.shape[-1])
    if out is None:
        out = torch.empty_like(q)
    _ops.fp16_decode(*cache._cache_args(rows), q, out, lse, cache.workspace, scale, int(num_splits), window, cap)
    return out


# ---------------------------------------------------------------- plan / run


class DecodePlan:
    """Decode attention split into a host plan and a launch (kvtile::attention::decode_plan).

        plan = kvtile.DecodePlan(cache, max_q_tokens=1, window_left=None, logit_softcap=None)
        plan.plan(host_seq_lens)        # each step, outside any CUDA-graph capture
        out = plan.run(q)               # capturable: capture once, then plan() + replay per step

    plan() reads a HOST copy of the lengths (a list or CPU tensor of `rows` ints: the values
    cache.seq_lens will hold when run executes), balances the work of the batch over all SMs
    (ragged lengths cost what their tiles cost) and copies a small work list into the plan's own
    workspace on the current stream. run() launches with a grid fixed by the plan, so a CUDA
    graph of run() (captured after a first plan) replays correctly after each new plan() for the
    same cache rows, q_heads, dtype and options (keep the plan alive while its graph is replayed:
    the graph reads its workspace). The device lengths must equal the planned ones (otherwise
    the result is wrong, though every read stays inside the cache).

    Multi-query (max_q_tokens 2..8; quantized cache only): plan(seq_lens, cu_seqlens_q) also
    takes the host cu_seqlens_q [rows + 1] of the new tokens (0..max_q_tokens per row, included
    in seq_lens) and copies it into plan.qo_indptr on the device; run(q) then takes
    q [>= cu_seqlens_q[-1], q_heads, D]. For graph replay allocate q with rows x max_q_tokens rows.

    cache: a PagedCache or an Fp16PagedCache (one token per row); rows: the first rows of the cache
    (default all); dtype: the query dtype (float16 or bfloat16).
    """

    def __init__(self, cache, q_heads=None, dtype=torch.float16, max_q_tokens=1, window_left=None,
                 logit_softcap=None, softmax_scale=None, rows=None, num_splits=0):
        op = "kvtile.DecodePlan"
        if not isinstance(cache, (PagedCache, Fp16PagedCache)):
            raise TypeError("%s: cache must be a kvtile.PagedCache or kvtile.Fp16PagedCache (got %s)"
                            % (op, type(cache).__name__))
        self.cache = cache
        self.fp16 = isinstance(cache, Fp16PagedCache)
        self.rows = cache.max_seqs if rows is None else int(rows)
        if not 0 < self.rows <= cache.max_seqs:
            raise ValueError("%s: rows must be in [1, %d] (got %r)" % (op, cache.max_seqs, rows))
        self.q_heads = cache.q_heads if q_heads is None else int(q_heads)
        if self.q_heads <= 0 or self.q_heads % cache.kv_heads:
            raise ValueError("%s: q_heads (%d) must be a positive multiple of kv_heads (%d)"
                             % (op, self.q_heads, cache.kv_heads))
        if dtype not in (torch.float16, torch.bfloat16):
            raise TypeError("%s: dtype must be torch.float16 or torch.bfloat16 (got %s)" % (op, dtype))
        self.dtype = dtype
        self.max_q_tokens = _max_q(op, max_q_tokens)
        if self.fp16 and self.max_q_tokens != 1:
            raise ValueError("%s: the fp16 baseline decodes one token per row (max_q_tokens must be 1)" % op)
        self.window_left = _window(op, window_left)
        self.logit_softcap = _softcap(op, logit_softcap)
        self.softmax_scale = _scale(op, softmax_scale, cache.head_dim)
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
            raise ValueError("%s: num_splits must be an int >= 0 (got %r)" % (op, num_splits))
        self.num_splits = int(num_splits)
        self._q_rows = None  # rows of q the last plan needs (multi-query)
        self._planned = False
        self._handle = None
        if not has_cuda():
            raise RuntimeError("%s: this build of kvtile has no CUDA support (built without a CUDA compiler/toolkit)"
                               % op)
        device = cache.device
        self.qo_indptr = (torch.zeros(self.rows + 1, dtype=torch.int32, device=device)
                          if self.max_q_tokens > 1 else None)
        if self.fp16:
            ws = _ops.fp16_decode_workspace_bytes(cache.head_dim, cache.kv_heads, self.rows, cache.max_pages_per_seq,
                                                  self.q_heads, self.num_splits)
        else:
            ws = _ops.decode_workspace_bytes(cache.preset_id, cache.head_dim, cache.kv_heads, self.rows,
                                             cache.max_pages_per_seq, self.q_heads, self.num_splits,
                                             self.max_q_tokens)
        self.workspace = torch.empty(ws, dtype=torch.uint8, device=device)  # the plan's own (work list inside)
        self._handle = _ops.decode_plan_create()
        self._finalizer = weakref.finalize(self, _ops.decode_plan_destroy, self._handle)

    def plan(self, seq_lens, cu_seqlens_q=None):
        """Plans the next run from host lengths (and, multi-query, the host cu_seqlens_q, copied into
        plan.qo_indptr; None after a first one: plan.qo_indptr is used as it is). Returns self."""
        op = "kvtile.DecodePlan.plan"
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("%s: cannot run under CUDA-graph capture (it copies host data): capture run() only "
                               "and call plan() before each replay" % op)
        lens = _host_int32(op, "seq_lens", seq_lens, self.rows)
        if cu_seqlens_q is not None:
            if self.max_q_tokens == 1:
                raise ValueError("%s: cu_seqlens_q needs a multi-query plan (DecodePlan(..., max_q_tokens > 1))" % op)
            cu = _host_int32(op, "cu_seqlens_q", cu_seqlens_q, self.rows + 1)
            _check_cu_seqlens_q(op, cu, self.max_q_tokens, lens)
            self.qo_indptr.copy_(cu)
            self._q_rows = int(cu[-1])
        elif self.max_q_tokens > 1 and self._q_rows is None:
            raise ValueError("%s: a multi-query plan needs cu_seqlens_q (the new tokens of each row)" % op)
        c = self.cache
        self._planned = False
        if self.fp16:
            _ops.fp16_decode_plan(self._handle, *c._cache_args(self.rows), lens, self.workspace, self.q_heads,
                                  self.dtype, self.softmax_scale, self.num_splits, self.window_left,
                                  self.logit_softcap)
        else:
            _ops.decode_plan(self._handle, *c._cache_args(self.rows), lens, self.workspace, self.q_heads, self.dtype,
                             self.softmax_scale, c.preset_id, self.num_splits, self.qo_indptr, self.max_q_tokens,
                             self.window_left, self.logit_softcap)
        self._planned = True
        return self

    def run(self, q, out=None, lse=None):
        """Decode attention of q ([rows, q_heads, D], multi-query [>= cu_seqlens_q[-1], q_heads, D]) as planned."""
        op = "kvtile.DecodePlan.run"
        if not self._planned:
            raise RuntimeError("%s: call plan() first (a failed plan() also needs a new one)" % op)
        if not isinstance(q, torch.Tensor):
            raise TypeError("%s: q must be a tensor" % op)
        if q.dtype != self.dtype:
            raise TypeError("%s: q has dtype %s, the plan was made for %s" % (op, q.dtype, self.dtype))
        if self._q_rows is not None and (q.dim() != 3 or q.shape[0] < self._q_rows):
            raise ValueError("%s: q must have shape [>= %d, %d, %d] for the planned cu_seqlens_q (got %s)"
                             % (op, self._q_rows, self.q_heads, self.cache.head_dim, list(q.shape)))
        if out is None:
            out = torch.empty_like(q)
        c = self.cache
        if self.fp16:
            _ops.fp16_decode_run(self._handle, *c._cache_args(self.rows), q, out, lse, self.workspace,
                                 self.softmax_scale, self.num_splits, self.window_left, self.logit_softcap)
        else:
            _ops.decode_run(self._handle, *c._cache_args(self.rows), q, out, lse, self.workspace, self.softmax_scale,
                            c.preset_id, self.num_splits, self.qo_indptr, self.max_q_tokens, self.window_left,
                            self.logit_softcap)
        return out

    def info(self):
        """{'ctas': the grid of run, 'chunks': partial results} of the last successful plan."""
        ctas, chunks = _ops.decode_plan_info(self._handle)
        return {"ctas": ctas, "chunks": chunks}

    def close(self):
        """Frees the plan now (otherwise when the object is collected)."""
        if self._handle is not None:
            self._finalizer()
            self._handle = None
            self._planned = False


def _register_fake_kernels():
    """Shape functions for torch.compile (FakeTensor tracing) where torch has torch.library.register_fake."""
    lib = getattr(torch, "library", None)
    reg = getattr(lib, "register_fake", None) if lib is not None else None
    if reg is None:
        return
    for name in ("prefill", "append", "dequantize_pages", "decode", "fp16_decode", "decode_plan", "decode_run",
                 "fp16_decode_plan", "fp16_decode_run"):
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
