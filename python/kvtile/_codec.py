"""The host codec (no GPU): what a preset stores, and tiles to records and back on CPU tensors."""
import torch

from ._registry import _ops, _preset_id
from ._validate import _int


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


def _rotate(x, preset="k4v2_g128", inverse=False, dtype=None):
    """x [..., head_dim] (fp16, bf16 or fp32; CPU, or CUDA in a CUDA build) -> x times the preset's rotation
    (inverse=True: back to the original frame; the fp16 tails and sinks of a PagedCache are kept rotated),
    computed in fp32 by the library's transform (equal, bit for bit, to the codec's original frame) and
    returned as dtype (default x.dtype). torch.ops.kvtile.rotate; internal (kvtile.hf un-rotates with it)."""
    return _ops.rotate(x, _preset_id(preset), bool(inverse), x.dtype if dtype is None else dtype)
