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
# This file only re-exports the public API; the code is in the private modules (docs/python.md,
# "Package layout"): _registry (presets, limits, has_cuda), _validate (argument checks), _codec
# (host codec), _cache (PagedCache), _paged_ops (prefill, append, decode, dequantize_pages), _fp16
# (the fp16 baseline), _plan (DecodePlan), _speculative (drafts and forks), _fake (fake kernels).
import os

import torch  # noqa: F401  (kvtile.torch, as before the split)

from . import _C  # noqa: F401  (loads the library that registers torch.ops.kvtile)
from ._cache import PagedCache
from ._codec import decode_tiles, encode_tiles, preset_info
from ._fp16 import Fp16PagedCache, fp16_decode
from ._paged_ops import append, decode, dequantize_pages, prefill
from ._plan import DecodePlan
from ._registry import FLAG_BAD_DRAFTS, MAX_DRAFT_TOKENS, MAX_Q_TOKENS, PRESETS, has_cuda
from ._speculative import append_drafts, commit_drafts, draft_bytes, fork, fork_slots, validate_fork

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
    "MAX_DRAFT_TOKENS",
    "FLAG_BAD_DRAFTS",
    "draft_bytes",
    "append_drafts",
    "commit_drafts",
    "fork",
    "fork_slots",
    "validate_fork",
]

# The public functions and classes report kvtile as their module (help(), repr), as before the split.
for _name in __all__:
    _obj = globals()[_name]
    if callable(_obj) and getattr(_obj, "__module__", "").startswith("kvtile."):
        _obj.__module__ = __name__
del _name, _obj

if os.environ.get("KVTILE_NO_FAKE_KERNELS") != "1":
    from ._fake import register_fake_kernels as _register_fake_kernels

    _register_fake_kernels()
