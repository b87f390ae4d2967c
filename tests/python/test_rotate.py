# torch.ops.kvtile.rotate (kvtile._codec._rotate): a preset's rotation and its
# inverse with the library's transform, what kvtile.hf un-rotates the fp16
# tails and sinks with. The host path runs in CI (CPU); the device path is
# checked against it where a GPU is present.
import math

import pytest
import torch

import kvtile
from kvtile._codec import _rotate

from conftest import requires_gpu


def hadamard(d, dtype=torch.float32):
    """The orthonormal Sylvester matrix (kvtile.hf's own matrix before the op)."""
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(d)


def rows(shape, seed=0, scale=4.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen) * scale
    x[..., 3] += 8.0 * scale  # an outlier channel
    return x


@pytest.mark.parametrize("preset", list(kvtile.PRESETS))
@pytest.mark.parametrize("d", [64, 128, 256])
def test_inverse_is_the_codecs_original_frame_bit_for_bit(preset, d):
    g = kvtile.preset_info(preset, d)["tile_tokens"]
    k, v = rows((2, g, d), seed=1), rows((2, g, d), seed=2)
    rec = kvtile.encode_tiles(k, v, preset)
    for out_dtype in (torch.float32, torch.float16, torch.bfloat16):
        ko, vo = kvtile.decode_tiles(rec, preset, d, dtype=out_dtype, frame="original")
        kr, vr = kvtile.decode_tiles(rec, preset, d, dtype=torch.float32, frame="rotated")
        assert torch.equal(_rotate(kr, preset, inverse=True, dtype=out_dtype), ko)
        assert torch.equal(_rotate(vr, preset, inverse=True, dtype=out_dtype), vo)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_against_the_matrix(d):
    # rotated fp16 tails, as a PagedCache keeps them, rotated back: the matrix product (kvtile.hf before
    # the op) agrees to fp32 rounding (the tolerance of test_host.test_frames_and_paged_records); the
    # library's transform is the more accurate of the two against fp64
    tail = _rotate(rows((3, 4, 128, d)), dtype=torch.float16)
    assert tail.dtype == torch.float16 and tail.shape == (3, 4, 128, d)
    new = _rotate(tail, inverse=True, dtype=torch.float32)
    old = tail.float() @ hadamard(d)
    assert torch.allclose(new, old, rtol=0, atol=1e-4)
    ref = tail.double() @ hadamard(d, torch.float64)
    assert (new.double() - ref).abs().max() <= (old.double() - ref).abs().max()
    assert (new.double() - ref).abs().max() < 1e-5 * ref.abs().max()


def test_round_trip_dtypes_and_layout():
    x = rows((5, 7, 128))
    y = _rotate(x, "k4v2_g128", dtype=torch.float32)
    assert torch.allclose(_rotate(y, inverse=True), x, rtol=0, atol=1e-5 * x.abs().max().item())
    assert not torch.allclose(y, x)
    # hadamard is self-inverse: forward and inverse are the same transform
    assert torch.equal(_rotate(x, inverse=True), y)
    # the input is never written; any layout; the default dtype is x's
    before = x.clone()
    _rotate(x, inverse=True)
    assert torch.equal(x, before)
    t = x.transpose(0, 1)  # non-contiguous
    assert torch.equal(_rotate(t), _rotate(t.contiguous()))
    for dt in (torch.float16, torch.bfloat16):
        out = _rotate(x.to(dt))
        assert out.dtype == dt
        assert torch.equal(out, _rotate(x.to(dt), dtype=torch.float32).to(dt))
    assert _rotate(torch.empty(0, 128)).shape == (0, 128)
    # the op with its raw arguments (preset id)
    assert torch.equal(torch.ops.kvtile.rotate(x, 0, True, torch.float32), _rotate(x, inverse=True))


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: _rotate(torch.zeros(4, 100)), ValueError, "head_dim 100"),
    (lambda: _rotate(torch.zeros(())), ValueError, "x must have shape"),
    (lambda: _rotate(torch.zeros(4, 128, dtype=torch.int32)), TypeError, "x must have dtype"),
    (lambda: _rotate(torch.zeros(4, 128), dtype=torch.int64), TypeError, "dtype must be"),
    (lambda: _rotate(torch.zeros(4, 128), "k9v9"), ValueError, "unknown preset"),
    (lambda: torch.ops.kvtile.rotate(torch.zeros(4, 128), 7, True, torch.float32), ValueError, "preset 7"),
])
def test_bad_arguments(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@requires_gpu
@pytest.mark.parametrize("d", [64, 128, 256])
def test_device_equals_host(d):
    x = _rotate(rows((3, 4, 128, d)), dtype=torch.float16)
    for inverse in (False, True):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            dev = _rotate(x.cuda(), inverse=inverse, dtype=dt)
            assert dev.is_cuda and dev.dtype == dt
            assert torch.equal(dev.cpu(), _rotate(x, inverse=inverse, dtype=dt))
