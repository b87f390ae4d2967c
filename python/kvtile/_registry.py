"""The preset registry and the op namespace: preset names and ids (kvtile_ops.h), the C ABI's
limits, and whether the extension was built with the device ops."""
import torch

from . import _C  # noqa: F401  (loads the library that registers torch.ops.kvtile)

_ops = torch.ops.kvtile

# Most new query tokens per sequence of a multi-query decode (KVTILE_OPS_MAX_Q_TOKENS).
MAX_Q_TOKENS = 8

# Preset name -> id of kvtile_ops.h (KVTILE_OPS_K4V2_G128, ...).
PRESETS = {"k4v2_g128": 0, "k4v4_g128": 1, "k2v2_g128": 2}

# Most draft tokens per row of one verify step (KVTILE_OPS_MAX_DRAFT_TOKENS).
MAX_DRAFT_TOKENS = 8

# Flag bit of a row that broke the draft rules (KVTILE_OPS_FLAG_BAD_DRAFTS).
FLAG_BAD_DRAFTS = 32


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
