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
import operator
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

# The C ABI's int32 arguments (kvtile_ops.h) and torch's int64 op arguments.
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _int(op, name, value, lo, hi=_INT32_MAX, what=""):
    """value as a Python int in [lo, hi], checked before anything narrows it: every integer argument of
    the package passes here. TypeError for a non-integer (a bool, a float, None), ValueError out of
    range; both name op and the argument (what: its meaning, for the message)."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError("%s: %s must be an int, not a bool (got %r)" % (op, name, value))
    try:
        v = operator.index(value)  # int, numpy and 0-d torch integers; no float, str or None
    except TypeError:
        raise TypeError("%s: %s must be an int (got %s %r)" % (op, name, type(value).__name__, value)) from None
    if not lo <= v <= hi:
        raise ValueError("%s: %s must be an int in [%d, %d]%s (got %d)" % (op, name, lo, hi, what, v))
    return v


def _preset_id(preset):
    if isinstance(preset, int) and not isinstance(preset, bool) and preset in PRESETS.values():
        return preset
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError("kvtile: unknown preset %r (one of %s, or their ids %s)"
                         % (preset, ", ".join(PRESETS), sorted(PRESETS.values())))
    return PRESETS[preset]


def _window(op, window_left):
    if window_left is None:
        return -1
    return _int(op, "window_left", window_left, -1, what=" or None (-1, None: no window)")


def _softcap(op, logit_softcap):
    if logit_softcap is None:
        return 0.0
    cap = float(logit_softcap)
    if not (math.isfinite(cap) and cap >= 0.0):
        raise ValueError("%s: logit_softcap must be None or 0 (off) or positive and finite (got %r)"
                         % (op, logit_softcap))
    return cap


def _max_q(op, max_q_tokens):
    return _int(op, "max_q_tokens", max_q_tokens, 1, MAX_Q_TOKENS)


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
    head_dim = _int("kvtile.preset_info", "head_dim", head_dim, 1)
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
    head_dim = _int("kvtile.decode_tiles", "head_dim", head_dim, 1)
    return _ops.decode_tiles(records, _preset_id(preset), head_dim, dtype, frame == "original")


# ---------------------------------------------------------------- the paged cache


def _align(n, a=256):
    return (n + a - 1) // a * a


def _heads(op, kv_heads, q_heads):
    """(kv_heads, q_heads) checked: q_heads (default kv_heads) a positive multiple of kv_heads."""
    kv_heads = _int(op, "kv_heads", kv_heads, 1)
    q_heads = kv_heads if q_heads is None else _int(op, "q_heads", q_heads, 1)
    if q_heads % kv_heads:
        raise ValueError("%s: q_heads (%d) must be a multiple of kv_heads (%d)" % (op, q_heads, kv_heads))
    return kv_heads, q_heads


def _pages_per_seq(op, max_seqs, max_tokens_per_seq, page_tokens):
    """(max_seqs, max_tokens_per_seq, pages per row) checked: the pages of all rows fit the int32 page ids."""
    max_seqs = _int(op, "max_seqs", max_seqs, 1)
    max_tokens = _int(op, "max_tokens_per_seq", max_tokens_per_seq, 1, _INT64_MAX)
    pages = -(-max_tokens // page_tokens)
    if max_seqs * pages > _INT32_MAX:
        raise ValueError("%s: max_seqs (%d) x max_tokens_per_seq (%d) need %d pages of %d tokens, more than the "
                         "2^31 - 1 page ids" % (op, max_seqs, max_tokens, max_seqs * pages, page_tokens))
    return max_seqs, max_tokens, pages


class _CacheShape:
    """The checked arguments of a PagedCache and its derived sizes: one validation for the constructor
    and PagedCache.bytes_needed."""

    def __init__(self, op, max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads, preset, num_pages, num_slots,
                 max_q_tokens):
        self.preset_id = _preset_id(preset)
        self.head_dim = _int(op, "head_dim", head_dim, 1)
        info = preset_info(preset, self.head_dim)
        self.tile_tokens, self.record_bytes = info["tile_tokens"], info["record_bytes"]
        self.kv_heads, self.q_heads = _heads(op, kv_heads, q_heads)
        self.max_seqs, self.max_tokens_per_seq, self.max_pages_per_seq = _pages_per_seq(
            op, max_seqs, max_tokens_per_seq, self.tile_tokens)
        self.num_pages = (self.max_seqs * self.max_pages_per_seq if num_pages is None
                          else _int(op, "num_pages", num_pages, 1))
        self.num_slots = self.max_seqs if num_slots is None else _int(op, "num_slots", num_slots, 1)
        self.max_q_tokens = _max_q(op, max_q_tokens)


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
        cs = _CacheShape("kvtile.PagedCache", max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads, preset,
                         num_pages, num_slots, max_q_tokens)
        self.preset = preset
        self.preset_id = cs.preset_id
        self.tile_tokens = G = cs.tile_tokens
        self.record_bytes = cs.record_bytes
        self.max_seqs, self.kv_heads, self.head_dim, self.q_heads = (cs.max_seqs, cs.kv_heads, cs.head_dim,
                                                                     cs.q_heads)
        self.max_pages_per_seq = cs.max_pages_per_seq
        self.num_pages = cs.num_pages
        self.num_slots = cs.num_slots
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
        self.max_q_tokens = cs.max_q_tokens
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
        """Device bytes a PagedCache with these arguments allocates (pages, tables, tails, sinks, workspace);
        the same argument checks as the constructor."""
        c = _CacheShape("kvtile.PagedCache.bytes_needed", max_seqs, max_tokens_per_seq, kv_heads, head_dim, q_heads,
                        preset, num_pages, num_slots, max_q_tokens)
        tails = c.num_slots * c.kv_heads * c.tile_tokens * c.head_dim * 2 * 2 * (2 if sink else 1)
        return (c.num_pages * c.kv_heads * c.record_bytes + c.max_seqs * c.max_pages_per_seq * 4 + c.max_seqs * 4 * 2
                + tails + PagedCache.decode_workspace_bytes(c.preset_id, c.head_dim, c.kv_heads, c.max_seqs,
                                                            c.max_pages_per_seq, c.q_heads, c.max_q_tokens))

    @property
    def nbytes(self):
        ts = [self.pages, self.page_table, self.seq_lens, self.tail_k, self.tail_v, self.tail_slots, self.workspace]
        ts += [t for t in (self.sink_k, self.sink_v) if t is not None]
        ts += [t for t in (getattr(self, "draft_k", None), getattr(self, "draft_v", None),
                           getattr(self, "draft_state", None)) if t is not None]
        return sum(t.numel() * t.element_size() for t in ts)

    def enable_drafts(self):
        """Allocates the draft staging area (speculative decoding: append_drafts / commit_drafts):
        draft_k/v [num_slots, kv_heads, G + 8, D] fp16 and draft_state [num_slots, kv_heads, 2] int32
        (zeros: no drafts pending); kvtile.draft_bytes(...) bytes more. Returns self."""
        if getattr(self, "draft_k", None) is None:
            shape = (self.num_slots, self.kv_heads, self.tile_tokens + MAX_DRAFT_TOKENS, self.head_dim)
            self.draft_k = torch.zeros(shape, dtype=torch.float16, device=self.device)
            self.draft_v = torch.zeros(shape, dtype=torch.float16, device=self.device)
            self.draft_state = torch.zeros(self.num_slots, self.kv_heads, 2, dtype=torch.int32, device=self.device)
        return self

    def bytes_per_token(self):
        """Quantized bytes per token of one layer (records only; tails are a fixed per-slot cost)."""
        return self.kv_heads * self.record_bytes / self.tile_tokens

    def _cache_args(self, rows=None):
        n = self.max_seqs if rows is None else _int("kvtile", "rows", rows, 0, self.max_seqs)
        return (self.pages, self.page_table[:n], self.seq_lens[:n], self.tail_k, self.tail_v, self.sink_k,
                self.sink_v, self.tail_slots[:n])


def _check_cache(op, cache, kind=None):
    """cache is a PagedCache (or kind), so that a wrong argument raises TypeError, not AttributeError."""
    kind = kind or PagedCache
    if not isinstance(cache, kind):
        raise TypeError("%s: cache must be a kvtile.%s (got %s)" % (op, kind.__name__, type(cache).__name__))


def _check_q(op, q):
    if not isinstance(q, torch.Tensor):
        raise TypeError("%s: q must be a tensor (got %s)" % (op, type(q).__name__))


def prefill(cache, k, v, cu_seqlens, max_tokens_per_seq=None, rows=None, flags=None):
    """Writes chunks of tokens: k, v [total_tokens, kv_heads, D] fp16/bf16, sequence s at rows
    cu_seqlens[s]:cu_seqlens[s+1] (int32, device). cache.seq_lens must already include them.

    max_tokens_per_seq bounds the chunk lengths (default: computed from a host copy of cu_seqlens,
    which synchronizes; pass it when capturing a CUDA graph).
    """
    _check_cache("kvtile.prefill", cache)
    if max_tokens_per_seq is None:
        cu = cu_seqlens.detach().cpu()
        max_tokens_per_seq = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
    max_tokens_per_seq = _int("kvtile.prefill", "max_tokens_per_seq", max_tokens_per_seq, 0, _INT64_MAX)
    _ops.prefill(*cache._cache_args(rows), k, v, cu_seqlens, max_tokens_per_seq, cache.preset_id, flags)


def append(cache, k_new, v_new, rows=None, flags=None):
    """One token per row: k_new, v_new [rows, kv_heads, D]; cache.seq_lens must already include it
    (rows with seq_lens 0 are skipped)."""
    _check_cache("kvtile.append", cache)
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
    _check_cache(op, cache)
    _check_q(op, q)
    num_splits = _int(op, "num_splits", num_splits, 0)
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
    _ops.decode(*cache._cache_args(rows), q, out, lse, workspace, scale, cache.preset_id, num_splits,
                cu_seqlens_q, mq, window, cap)
    return out


def dequantize_pages(cache, page_ids, frame="original", out_k=None, out_v=None):
    """Pages page_ids (int32, device) -> (k, v) [count, kv_heads, G, D] fp16."""
    _check_cache("kvtile.dequantize_pages", cache)
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
        op = "kvtile.Fp16PagedCache"
        self.head_dim = _int(op, "head_dim", head_dim, 1)
        self.kv_heads, self.q_heads = _heads(op, kv_heads, q_heads)
        self.max_seqs, _, self.max_pages_per_seq = _pages_per_seq(op, max_seqs, max_tokens_per_seq, self.page_tokens)
        device = torch.device(device if device is not None else "cuda")
        self.device = device
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
        n = self.max_seqs if rows is None else _int("kvtile", "rows", rows, 0, self.max_seqs)
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
    _check_cache(op, cache, Fp16PagedCache)
    _check_q(op, q)
    num_splits = _int(op, "num_splits", num_splits, 0)
    window = _window(op, window_left)
    cap = _softcap(op, logit_softcap)
    scale = _scale(op, softmax_scale, q.shape[-1])
    if out is None:
        out = torch.empty_like(q)
    _ops.fp16_decode(*cache._cache_args(rows), q, out, lse, cache.workspace, scale, num_splits, window, cap)
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
        self.rows = cache.max_seqs if rows is None else _int(op, "rows", rows, 1, cache.max_seqs)
        self.q_heads = cache.q_heads if q_heads is None else _int(op, "q_heads", q_heads, 1)
        if self.q_heads % cache.kv_heads:
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
        self.num_splits = _int(op, "num_splits", num_splits, 0)
        self._q_rows = None  # rows of q the last plan needs (multi-query)
        self._planned = False
        self._handle = None
        if not has_cuda():
            raise RuntimeError("%s: %s" % (op, _C.no_cuda_reason))
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


# ---------------------------------------------------------------- speculative decoding and forks
# docs/python.md ("Speculative decoding and shared prefixes"): append_drafts (seq_lens already
# include the drafts), verify with decode(..., cu_seqlens_q=cu_drafts), commit_drafts(accepted)
# (0 = roll back): the cache then equals, byte for byte, a cache into which only the accepted
# tokens were appended. fork starts a row from another row's state, sharing its complete pages.

__all__ += ["MAX_DRAFT_TOKENS", "FLAG_BAD_DRAFTS", "draft_bytes", "append_drafts", "commit_drafts", "fork",
            "fork_slots", "validate_fork"]

# Most draft tokens per row of one verify step (KVTILE_OPS_MAX_DRAFT_TOKENS).
MAX_DRAFT_TOKENS = 8

# Flag bit of a row that broke the draft rules (KVTILE_OPS_FLAG_BAD_DRAFTS).
FLAG_BAD_DRAFTS = 32


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


def _register_fake_spec_kernels():
    lib = getattr(torch, "library", None)
    reg = getattr(lib, "register_fake", None) if lib is not None else None
    if reg is None:
        return
    # (validate_fork, a host check with one kernel for every dispatch key, needs none: torch >= 2.4 refuses one)
    for name in ("append_drafts", "commit_drafts", "fork_slots"):
        reg("kvtile::" + name)(lambda *args, **kwargs: None)


if os.environ.get("KVTILE_NO_FAKE_KERNELS") != "1":
    _register_fake_spec_kernels()
