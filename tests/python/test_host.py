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


# ---- decode options, multi-query and DecodePlan: argument checks that run before any device work
# (the same errors on a CPU-only build and on a GPU build).


def cpu_cache(**kw):
    return kvtile.PagedCache(2, 300, 2, 128, q_heads=4, device="cpu", **kw)


def cpu_q(rows=2):
    return torch.zeros(rows, 4, 128, dtype=torch.float16)


BAD_DECODE = [
    ("window_negative", ValueError, r"window_left -2 must be -1 \(no window\) or >= 0", dict(window_left=-2)),
    ("window_float", TypeError, "window_left must be an int", dict(window_left=3.5)),
    ("window_bool", TypeError, "window_left must be an int, not a bool", dict(window_left=True)),
    ("softcap_nan", ValueError, r"logit_softcap -?nan must be 0 \(off\) or positive and finite",
     dict(logit_softcap=float("nan"))),
    ("softcap_inf", ValueError, "logit_softcap inf must be", dict(logit_softcap=float("inf"))),
    ("softcap_negative", ValueError, "logit_softcap -1 must be", dict(logit_softcap=-1.0)),
    ("softcap_beyond_float", ValueError, "logit_softcap inf must be", dict(logit_softcap=1e39)),
    ("scale_zero", ValueError, "softmax_scale 0 must be positive and finite", dict(softmax_scale=0.0)),
    ("splits_range", ValueError, r"num_splits 5000 is not in \[0, 4096\]", dict(num_splits=5000)),
    ("max_q_without_cu", ValueError, "needs cu_seqlens_q", dict(max_q_tokens=4)),
    ("max_q_range", ValueError, r"max_q_tokens 9 is not in \[1, 8\]",
     dict(cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32), max_q_tokens=9)),
    ("max_q_zero", ValueError, r"max_q_tokens 0 is not in \[1, 8\]",
     dict(cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32), max_q_tokens=0)),
    ("cu_dtype", TypeError, "cu_seqlens_q must have dtype torch.int32",
     dict(cu_seqlens_q=torch.tensor([0, 1, 2]))),
    ("cu_rank", ValueError, "cu_seqlens_q must be a 1-D",
     dict(cu_seqlens_q=torch.zeros(1, 3, dtype=torch.int32))),
    ("cu_decreasing", ValueError, "nondecreasing", dict(cu_seqlens_q=torch.tensor([0, 2, 1], dtype=torch.int32))),
    ("cu_too_many", ValueError, "9 new tokens, more than max_q_tokens = 8",
     dict(cu_seqlens_q=torch.tensor([0, 9, 9], dtype=torch.int32))),
    ("cu_q_rows", ValueError, "q has 2 rows, cu_seqlens_q needs 3",
     dict(cu_seqlens_q=torch.tensor([0, 1, 3], dtype=torch.int32))),
    ("workspace_for_max_q", ValueError, "larger workspace",
     dict(cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32), max_q_tokens=2)),
]


@pytest.mark.parametrize("name,exc,msg,kw", BAD_DECODE, ids=[b[0] for b in BAD_DECODE])
def test_decode_option_checks(name, exc, msg, kw):
    with pytest.raises(exc, match=msg):
        kvtile.decode(cpu_cache(), cpu_q(), **kw)


def test_fp16_decode_option_checks():
    f = kvtile.Fp16PagedCache(2, 300, 2, 128, q_heads=4, device="cpu")
    with pytest.raises(ValueError, match="kvtile.fp16_decode: .*window_left -3 must be"):
        kvtile.fp16_decode(f, cpu_q(), window_left=-3)
    with pytest.raises(ValueError, match="logit_softcap -?nan must be"):
        kvtile.fp16_decode(f, cpu_q(), logit_softcap=float("nan"))
    with pytest.raises(ValueError, match="num_splits 4097 is not in"):
        kvtile.fp16_decode(f, cpu_q(), num_splits=4097)


BAD_PLAN = [
    ("cache_type", TypeError, "must be a kvtile.PagedCache", lambda c, f: kvtile.DecodePlan(object())),
    ("rows", ValueError, r"rows must be an int in \[1, 2\]", lambda c, f: kvtile.DecodePlan(c, rows=3)),
    ("q_heads", ValueError, "multiple of kv_heads", lambda c, f: kvtile.DecodePlan(c, q_heads=3)),
    ("dtype", TypeError, "dtype must be torch.float16 or torch.bfloat16",
     lambda c, f: kvtile.DecodePlan(c, dtype=torch.float32)),
    ("max_q", ValueError, "max_q_tokens 9 is not in", lambda c, f: kvtile.DecodePlan(c, max_q_tokens=9)),
    ("fp16_multi_query", ValueError, "fp16 baseline decodes one token",
     lambda c, f: kvtile.DecodePlan(f, max_q_tokens=2)),
    ("window", ValueError, "window_left -7 must be", lambda c, f: kvtile.DecodePlan(c, window_left=-7)),
    ("softcap", ValueError, "logit_softcap inf must be",
     lambda c, f: kvtile.DecodePlan(c, logit_softcap=float("inf"))),
    ("scale", ValueError, "softmax_scale -1 must be", lambda c, f: kvtile.DecodePlan(c, softmax_scale=-1.0)),
    ("splits", ValueError, "num_splits -1 is not in", lambda c, f: kvtile.DecodePlan(c, num_splits=-1)),
    ("splits_range", ValueError, "num_splits 4097 is not in", lambda c, f: kvtile.DecodePlan(c, num_splits=4097)),
]


@pytest.mark.parametrize("name,exc,msg,call", BAD_PLAN, ids=[b[0] for b in BAD_PLAN])
def test_decode_plan_argument_checks(name, exc, msg, call):
    c = cpu_cache()
    f = kvtile.Fp16PagedCache(2, 300, 2, 128, q_heads=4, device="cpu")
    with pytest.raises(exc, match=msg):
        call(c, f)


def test_decode_plan_needs_cuda_tensors_or_a_cuda_build():
    c = cpu_cache()
    if not kvtile.has_cuda():
        with pytest.raises(RuntimeError, match="no CUDA support: "):
            kvtile.DecodePlan(c)
        return
    plan = kvtile.DecodePlan(c)  # a CUDA build: the plan exists, the CPU cache is rejected by the op
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        plan.plan([5, 0])
    with pytest.raises(RuntimeError, match="call plan"):
        plan.run(cpu_q())
