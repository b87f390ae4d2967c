"""The quantized cache's ops: prefill, append, decode attention, pages to fp16."""
import torch

from ._cache import _check_cache
from ._registry import MAX_Q_TOKENS, _ops
from ._validate import (_check_cu_seqlens_q, _check_options, _check_q, _int, _INT64_MAX, _max_q, _scale, _softcap,
                        _splits, _window)


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
    num_splits = _splits(op, num_splits)
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
    _check_options(op, max_q_tokens=mq, has_qo_indptr=cu_seqlens_q is not None, window_left=window,
                   logit_softcap=cap, num_splits=num_splits, softmax_scale=scale)
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
