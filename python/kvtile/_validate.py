"""Argument checks shared by the wrappers: every integer argument of the package passes _int before
anything narrows it; the messages name the op and the argument."""
import functools
import math
import operator

import torch

from ._registry import _ops

# The C ABI's int32 arguments (kvtile_ops.h) and torch's int64 op arguments.
_INT32_MAX = 2**31 - 1
_INT32_MIN = -2**31
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


def _window(op, window_left):
    """None -> -1 (no window); otherwise an int32. The range is the core's rule (_check_options)."""
    if window_left is None:
        return -1
    return _int(op, "window_left", window_left, _INT32_MIN)


def _softcap(op, logit_softcap):
    """None -> 0.0 (off); otherwise a float. The range is the core's rule (_check_options)."""
    return 0.0 if logit_softcap is None else float(logit_softcap)


def _max_q(op, max_q_tokens):
    """An int32; the range (1 .. MAX_Q_TOKENS) is the core's rule (_check_options)."""
    return _int(op, "max_q_tokens", max_q_tokens, _INT32_MIN)


def _splits(op, num_splits):
    """An int32; the range (0 = automatic .. 4096) is the core's rule (_check_options)."""
    return _int(op, "num_splits", num_splits, _INT32_MIN)


def _scale(op, softmax_scale, head_dim):
    """None -> 1 / sqrt(head_dim); otherwise a float. The range is the core's rule (_check_options)."""
    return 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)


def _check_options(op, q_heads=1, max_q_tokens=1, has_qo_indptr=False, window_left=-1, logit_softcap=0.0,
                   num_splits=0, softmax_scale=None):
    """The decode options' rules, written once in the core (kvtile::attention::check_decode_options)
    and reached through the C ABI (kvtile_ops_check_decode_options), which every decode, plan and run
    applies again: ValueError naming op, the option, its value and the rule. softmax_scale None:
    the subset that sizes a workspace (no qo_indptr pairing, no scale)."""
    need_io = softmax_scale is not None
    _options_hold(op, q_heads, max_q_tokens, bool(has_qo_indptr), window_left, logit_softcap, num_splits, need_io,
                  softmax_scale if need_io else 0.0)


# An eager decode checks the same options every step: values that held once are remembered (a raise
# is never cached, so broken values reach the rule each time), sparing the op call on that path.
@functools.lru_cache(maxsize=256)
def _options_hold(*args):
    _ops.check_decode_options(*args)


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


def _check_q(op, q):
    if not isinstance(q, torch.Tensor):
        raise TypeError("%s: q must be a tensor (got %s)" % (op, type(q).__name__))
