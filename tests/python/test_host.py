# Host paths of the kvtile package (no GPU): the host codec ops, their
# argument checks, and the device ops' errors for CPU tensors. Runs in CI with
# Debian's python3-torch (CPU).
import pytest
import torch

import kvtile


def tiles(n=2, g=128, d=128, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(n, g, d, generator=gen)
    k[:, :, 3] += 8.0  # an outlier channel, as trained models' keys have
    v = torch.randn(n, g, d, generator=gen)
    return k.to(dtype), v.to(dtype)


def test_preset_info():
    info = kvtile.preset_info("k4v2_g128", 128)
    assert info["tile_tokens"] == 128 and info["key_bits"] == 4 and info["value_bits"] == 2
    assert info["record_bytes"] % 16 == 0
    assert 3.0 < info["bits_per_element"] < 3.5
    for name in kvtile.PRESETS:
        for d in (64, 128, 256):
            assert kvtile.preset_info(name, d)["record_bytes"] > 0


# Relative error bounds for Gaussian tiles: RTN over a per-row min-max range of
# 128 Gaussian values leaves about range / (2^b - 1) / sqrt(12) ~ 0.09 sigma at
# 4 bits and ~0.5 sigma at 2 bits (measured: 0.085-0.10 and 0.42-0.52).
BOUND = {2: 0.6, 4: 0.13}


@pytest.mark.parametrize("preset", ["k4v2_g128", "k4v4_g128", "k2v2_g128"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_round_trip(preset, dtype):
    k, v = tiles(dtype=dtype)
    info = kvtile.preset_info(preset, 128)
    rec = kvtile.encode_tiles(k, v, preset)
    assert rec.dtype == torch.uint8 and rec.shape == (2, info["record_bytes"])
    k2, v2 = kvtile.decode_tiles(rec, preset, 128)
    for a, b, bits in ((k.float(), k2, info["key_bits"]), (v.float(), v2, info["value_bits"])):
        rel = ((a - b).norm() / a.norm()).item()
        assert 0 < rel < BOUND[bits]
    # tiles are independent: encoding one alone gives the same bytes
    assert torch.equal(kvtile.encode_tiles(k[1:].contiguous(), v[1:].contiguous(), preset), rec[1:])


def test_frames_and_paged_records():
    k, v = tiles(n=1)
    rec = kvtile.encode_tiles(k, v)
    ko, _ = kvtile.decode_tiles(rec, frame="original")
    kr, _ = kvtile.decode_tiles(rec, frame="rotated")
    h = torch.ones(1, 1)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = h / 128 ** 0.5
    assert torch.allclose(kr[0] @ h, ko[0], atol=1e-4)  # the frames differ by the Hadamard rotation
    paged = kvtile.encode_tiles(k, v, paged=True)
    assert paged.shape == rec.shape and not torch.equal(paged, rec)  # fp16 rounding after the rotation
    kp, _ = kvtile.decode_tiles(paged)
    assert ((kp - k).norm() / k.norm()).item() < 0.15
    out16 = kvtile.decode_tiles(rec, dtype=torch.float16)
    assert out16[0].dtype == torch.float16


def test_non_finite_inputs_encode_as_zero():
    k, v = tiles(n=1)
    k[0, 5, 7] = float("nan")
    rec = kvtile.encode_tiles(k, v)  # a warning status, not an error
    k2, _ = kvtile.decode_tiles(rec)
    assert torch.isfinite(k2).all()


def test_bad_arguments():
    k, v = tiles(n=1)
    with pytest.raises(ValueError, match="unknown preset"):
        kvtile.encode_tiles(k, v, "k3v3")
    with pytest.raises(ValueError, match="head_dim 96"):
        kvtile.encode_tiles(torch.zeros(1, 128, 96), torch.zeros(1, 128, 96))
    with pytest.raises(ValueError, match=r"keys must have shape \[\*, 128, 128\]"):
        kvtile.encode_tiles(torch.zeros(1, 64, 128), torch.zeros(1, 64, 128))
    with pytest.raises(ValueError, match="values must have shape"):
        kvtile.encode_tiles(k, v[:, :64].contiguous())
    with pytest.raises(TypeError, match="values must have the dtype of keys"):
        kvtile.encode_tiles(k, v.half())
    with pytest.raises(TypeError, match="keys must have dtype"):
        kvtile.encode_tiles(k.double(), v.double())
    with pytest.raises(ValueError, match="keys must be contiguous"):
        kvtile.encode_tiles(k.transpose(1, 2).contiguous().transpose(1, 2), v)
    rec = kvtile.encode_tiles(k, v)
    with pytest.raises(ValueError, match="records must have shape"):
        kvtile.decode_tiles(rec[:, :100].contiguous())
    with pytest.raises(TypeError, match="records must have dtype"):
        kvtile.decode_tiles(rec.to(torch.int32))
    with pytest.raises(ValueError, match="frame must be"):
        kvtile.decode_tiles(rec, frame="both")
    bad = rec.clone()
    bad[0, :64] = 0xFF  # NaN scales: a record encode never writes
    with pytest.raises(ValueError, match="corrupt record"):
        kvtile.decode_tiles(bad)


def test_device_ops_reject_cpu_tensors():
    pages = torch.zeros(4, 2, kvtile.preset_info()["record_bytes"], dtype=torch.uint8)
    table = torch.zeros(1, 4, dtype=torch.int32)
    lens = torch.zeros(1, dtype=torch.int32)
    tail = torch.zeros(1, 2, 128, 128, dtype=torch.float16)
    tok = torch.zeros(1, 2, 128, dtype=torch.float16)
    expect = "must be a CUDA tensor" if kvtile.has_cuda() else "no CUDA support"
    with pytest.raises((ValueError, RuntimeError), match=expect):
        torch.ops.kvtile.append(pages, table, lens, tail, tail, None, None, None, tok, tok, 0, None)


def test_memory_accounting_cpu():
    if kvtile.has_cuda():
        pytest.skip("the CUDA build accounts the decode workspace on a GPU (test_device.py)")
    c = kvtile.PagedCache(3, 1000, 2, 128, q_heads=4, sink=True, device="cpu")
    assert c.nbytes == kvtile.PagedCache.bytes_needed(3, 1000, 2, 128, q_heads=4, sink=True)
    assert c.pages.shape == (3 * 8, 2, kvtile.preset_info()["record_bytes"])
