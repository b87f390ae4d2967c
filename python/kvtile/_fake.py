"""Shape functions (fake kernels) for torch.compile's FakeTensor tracing, registered where torch has
torch.library.register_fake (torch >= 2.4; older torch, e.g. Debian's 1.13, has none and gets none).

Only ops with per-dispatch-key kernels (TORCH_LIBRARY_IMPL in csrc/) may have one: an op defined with
one kernel for every key (m.def(schema, &fn), e.g. validate_fork, a host check) must not, or
torch >= 2.4 refuses the registration and `import kvtile` fails
(tests/python/test_fake_registrations.py checks this from the sources).
"""
import torch

from ._registry import _ops


def register_fake_kernels():
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

    @reg("kvtile::rotate")
    def _rotate_fake(x, preset, inverse, dtype):
        return x.new_empty(x.shape, dtype=dtype)

    # speculative decoding and forks (validate_fork, a host check with one kernel for every
    # dispatch key, needs none: torch >= 2.4 refuses one)
    for name in ("append_drafts", "commit_drafts", "fork_slots"):
        reg("kvtile::" + name)(lambda *args, **kwargs: None)
