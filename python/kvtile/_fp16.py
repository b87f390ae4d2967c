"""The fp16 baseline: an unquantized paged cache (with a Python page writer) and its decode."""
import torch

from ._cache import _check_cache
from ._registry import _FP16_PAGE_TOKENS, _ops, has_cuda
from ._validate import _check_options, _check_q, _heads, _int, _pages_per_seq, _scale, _softcap, _splits, _window


class Fp16PagedCache:
    """An unquantized paged fp16 cache (64-token pages, original frame) read by kvtile's fp16
    decode kernel: the baseline next to PagedCache. k, v [num_pages, kv_heads, 64, D]."""

    page_tokens = _FP16_PAGE_TOKENS  # the fp16 kernels' page size (kvtile::fp16_page_tokens)

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
    num_splits = _splits(op, num_splits)
    window = _window(op, window_left)
    cap = _softcap(op, logit_softcap)
    scale = _scale(op, softmax_scale, q.shape[-1])
    _check_options(op, window_left=window, logit_softcap=cap, num_splits=num_splits, softmax_scale=scale)
    if out is None:
        out = torch.empty_like(q)
    _ops.fp16_decode(*cache._cache_args(rows), q, out, lse, cache.workspace, scale, num_splits, window, cap)
    return out
