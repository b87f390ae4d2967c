"""The preset registry and the op namespace: preset names and ids (kvtile_ops.h), the C ABI's
limits, and whether the extension was built with the device ops."""
import torch

from . import _C  # noqa: F401  (loads the library that registers torch.ops.kvtile)

_ops = torch.ops.kvtile

# The C ABI's registry and limits (kvtile_ops.h, which mirrors the library's
# one preset table and constants): nothing here is written a second time.
_NUM_PRESETS, MAX_Q_TOKENS, MAX_DRAFT_TOKENS, FLAG_BAD_DRAFTS, _FP16_PAGE_TOKENS = (
    int(v) for v in _ops.abi_limits())
# MAX_Q_TOKENS: most new query tokens per sequence of a multi-query decode.
# MAX_DRAFT_TOKENS: most draft tokens per row of one verify step.
# FLAG_BAD_DRAFTS: flag bit of a row that broke the draft rules.

# Preset name -> id of kvtile_ops.h (KVTILE_OPS_K4V2_G128, ...).
PRESETS = {_ops.preset_name(i): i for i in range(_NUM_PRESETS)}


def _preset_id(preset):
    if isinstance(preset, int) and not isinstance(preset, bool) and preset in PRESETS.values():
        return preset
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError("kvtile: unknown preset %r (one of %s, or their ids %s)"
                         % (preset, ", ".join(PRESETS), sorted(PRESETS.values())))
    return PRESETS[preset]


def has_cuda():
    """True when the extension was built with the device ops."""
    return bool(_ops.has_cuda())
