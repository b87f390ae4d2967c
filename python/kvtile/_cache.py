"""The paged quantized cache: PagedCache owns one attention layer's device tensors."""
import torch

from ._codec import preset_info
from ._registry import MAX_DRAFT_TOKENS, _ops, _preset_id, has_cuda
from ._validate import _check_options, _heads, _int, _max_q, _pages_per_seq


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
        _check_options(op, max_q_tokens=self.max_q_tokens)


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
