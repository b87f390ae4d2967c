# Integer arguments of the kvtile package are checked as Python ints (bool
# rejected) and in range before anything narrows them to the C ABI's int32,
# with the argument's name in the error; the CPU-only build names why it has
# no device ops. Runs on CPU (CI).
import importlib
import importlib.machinery
import os
import re
import sys

import pytest
import torch

import kvtile

BIG = 2**32 + 128  # narrows to 128 as an int32


def tiles(n=1, d=128):
    return torch.zeros(n, 128, d), torch.zeros(n, 128, d)


# ---- the host codec and preset_info


@pytest.mark.parametrize("head_dim", [BIG, -128, 0, 2**63 + 128])
def test_preset_info_head_dim_range(head_dim):
    with pytest.raises(ValueError, match="head_dim must be an int in"):
        kvtile.preset_info("k4v2_g128", head_dim)


@pytest.mark.parametrize("head_dim,exc", [(128.0, TypeError), (True, TypeError), ("128", TypeError), (None, TypeError)])
def test_preset_info_head_dim_type(head_dim, exc):
    with pytest.raises(exc, match="head_dim must be an int"):
        kvtile.preset_info("k4v2_g128", head_dim)


def test_numpy_and_tensor_ints_are_ints():
    np = pytest.importorskip("numpy")
    assert kvtile.preset_info("k4v2_g128", np.int64(128)) == kvtile.preset_info("k4v2_g128", 128)
    assert kvtile.preset_info("k4v2_g128", torch.tensor(128)) == kvtile.preset_info("k4v2_g128", 128)


def test_ops_check_before_narrowing():
    # the torch ops themselves (what torch.compile and TorchScript call)
    with pytest.raises(ValueError, match=r"head_dim \(4294967424\) must be in \[0, 2\^31\)"):
        torch.ops.kvtile.preset_info(0, BIG)
    k, v = tiles()
    with pytest.raises(ValueError, match=r"preset \(4294967296\) must be in \[0, 2\^31\)"):
        torch.ops.kvtile.encode_tiles(k, v, 2**32, False)
    rec = kvtile.encode_tiles(k, v)
    with pytest.raises(ValueError, match=r"head_dim \(4294967424\) must be in \[0, 2\^31\)"):
        torch.ops.kvtile.decode_tiles(rec[:0], 0, BIG, torch.float32, True)


def test_decode_tiles_head_dim():
    rec = kvtile.encode_tiles(*tiles())
    with pytest.raises(ValueError, match="head_dim must be an int in"):
        kvtile.decode_tiles(rec[:0], head_dim=BIG)
    with pytest.raises(TypeError, match="head_dim must be an int"):
        kvtile.decode_tiles(rec, head_dim=128.0)


@pytest.mark.parametrize("preset", [True, False, 2**32, -1, 3, 0.0, None])
def test_preset_ids(preset):
    with pytest.raises(ValueError, match="unknown preset"):
        kvtile.encode_tiles(*tiles(), preset=preset)


# ---- PagedCache, PagedCache.bytes_needed, Fp16PagedCache: one validation

GOOD = dict(max_seqs=2, max_tokens_per_seq=300, kv_heads=2, head_dim=128, q_heads=4)

BAD_CACHE = [
    # (argument, value, exception, message)
    ("q_heads", 0, ValueError, r"q_heads must be an int in \[1, "),
    ("q_heads", -2, ValueError, r"q_heads must be an int in \[1, "),
    ("q_heads", 3, ValueError, "q_heads .3. must be a multiple of kv_heads .2."),
    ("q_heads", 4.0, TypeError, "q_heads must be an int"),
    ("max_tokens_per_seq", 300.5, TypeError, "max_tokens_per_seq must be an int"),
    ("max_tokens_per_seq", 0, ValueError, r"max_tokens_per_seq must be an int in \[1, "),
    ("max_tokens_per_seq", 2**63, ValueError, r"max_tokens_per_seq must be an int in \[1, "),
    ("max_tokens_per_seq", 2**40, ValueError,
     r"max_seqs \(2\) x max_tokens_per_seq \(1099511627776\) need .* page ids"),
    ("max_seqs", -1, ValueError, r"max_seqs must be an int in \[1, "),
    ("max_seqs", True, TypeError, "max_seqs must be an int, not a bool"),
    ("max_seqs", 2**31, ValueError, r"max_seqs must be an int in \[1, 2147483647\]"),
    ("kv_heads", 0, ValueError, r"kv_heads must be an int in \[1, "),
    ("kv_heads", BIG, ValueError, r"kv_heads must be an int in \[1, "),
    ("head_dim", BIG, ValueError, r"head_dim must be an int in \[1, "),
    ("head_dim", 96, ValueError, "kvtile.preset_info: .*head_dim 96"),  # the C ABI's rule
]
BAD_QUANTIZED = [
    ("num_slots", 0, ValueError, r"num_slots must be an int in \[1, "),
    ("num_pages", -5, ValueError, r"num_pages must be an int in \[1, "),
    ("num_pages", 8.0, TypeError, "num_pages must be an int"),
    ("max_q_tokens", 9, ValueError, r"max_q_tokens 9 is not in \[1, 8\]"),  # the core's rule, through the C ABI
]


def ids(rows):
    return ["%s=%r" % (r[0], r[1]) for r in rows]


def named(op, msg):
    return msg if msg.startswith("kvtile.") else op + ": " + msg


@pytest.mark.parametrize("arg,value,exc,msg", BAD_CACHE + BAD_QUANTIZED, ids=ids(BAD_CACHE + BAD_QUANTIZED))
def test_paged_cache_arguments(arg, value, exc, msg):
    kw = dict(GOOD, **{arg: value})
    with pytest.raises(exc, match=named("kvtile.PagedCache", msg)):
        kvtile.PagedCache(device="cpu", **kw)
    # bytes_needed checks the same (no negative or made-up sizes)
    with pytest.raises(exc, match=named("kvtile.PagedCache.bytes_needed", msg)):
        kvtile.PagedCache.bytes_needed(**kw)


@pytest.mark.parametrize("arg,value,exc,msg", BAD_CACHE, ids=ids(BAD_CACHE))
def test_fp16_paged_cache_arguments(arg, value, exc, msg):
    if arg == "head_dim" and value == 96:
        pytest.skip("the fp16 cache's head_dim is checked by its device op")
    kw = dict(GOOD, **{arg: value})
    with pytest.raises(exc, match=named("kvtile.Fp16PagedCache", msg)):
        kvtile.Fp16PagedCache(device="cpu", **kw)


def test_bytes_needed_negative_and_good():
    with pytest.raises(ValueError, match="max_seqs must be an int in"):
        kvtile.PagedCache.bytes_needed(-1, 300, 2, 128)
    assert kvtile.PagedCache.bytes_needed(**GOOD) > 0


# ---- the ops' cache, q and rows arguments


def cpu_cache():
    return kvtile.PagedCache(device="cpu", **GOOD)


def test_decode_needs_a_cache_and_a_tensor():
    with pytest.raises(TypeError, match="kvtile.decode: q must be a tensor .got NoneType."):
        kvtile.decode(cpu_cache(), None)
    with pytest.raises(TypeError, match="kvtile.decode: cache must be a kvtile.PagedCache .got NoneType."):
        kvtile.decode(None, torch.zeros(2, 4, 128, dtype=torch.float16))
    f = kvtile.Fp16PagedCache(device="cpu", **GOOD)
    with pytest.raises(TypeError, match="kvtile.fp16_decode: cache must be a kvtile.Fp16PagedCache"):
        kvtile.fp16_decode(cpu_cache(), torch.zeros(2, 4, 128, dtype=torch.float16))
    with pytest.raises(TypeError, match="kvtile.fp16_decode: q must be a tensor"):
        kvtile.fp16_decode(f, [1, 2])
    with pytest.raises(TypeError, match="kvtile.append: cache must be"):
        kvtile.append(f, None, None)


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(rows=3), ValueError, r"rows must be an int in \[0, 2\]"),
    (dict(rows=-1), ValueError, r"rows must be an int in \[0, 2\]"),
    (dict(rows=1.0), TypeError, "rows must be an int"),
    (dict(num_splits=-1), ValueError, r"num_splits -1 is not in \[0, 4096\]"),
    (dict(num_splits=4097), ValueError, r"num_splits 4097 is not in \[0, 4096\]"),
    (dict(num_splits=2**32), ValueError, "num_splits must be an int in"),
    (dict(num_splits=1.5), TypeError, "num_splits must be an int"),
])
def test_decode_integer_options(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        kvtile.decode(cpu_cache(), torch.zeros(2, 4, 128, dtype=torch.float16), **kw)


def test_prefill_max_tokens():
    cu = torch.tensor([0, 1, 2], dtype=torch.int32)
    k = torch.zeros(2, 2, 128, dtype=torch.float16)
    with pytest.raises(ValueError, match="kvtile.prefill: max_tokens_per_seq must be an int in"):
        kvtile.prefill(cpu_cache(), k, k, cu, max_tokens_per_seq=-1)
    with pytest.raises(TypeError, match="kvtile.prefill: max_tokens_per_seq must be an int"):
        kvtile.prefill(cpu_cache(), k, k, cu, max_tokens_per_seq=1.5)


# ---- the CPU-only build names its cause


def test_cpu_only_build_names_the_cause():
    if kvtile.has_cuda():
        assert kvtile._C.no_cuda_reason == ""
        return
    reason = kvtile._C.no_cuda_reason
    if torch.version.cuda is None:
        want = "the torch it was built against is CPU-only"
    else:
        want = "KVTILE_CUDA=0|no CUDA toolkit"
    assert reason.startswith("this build of kvtile has no CUDA support: ")
    assert re.search(want, reason), reason
    assert "without a CUDA compiler" not in reason
    with pytest.raises(RuntimeError, match=want):
        kvtile.DecodePlan(cpu_cache())
    tok = torch.zeros(2, 2, 128, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=want):
        kvtile.append(cpu_cache(), tok, tok)


# ---- which package the tests import (tests/python/conftest.py)


def test_conftest_never_puts_unbuilt_sources_first(tmp_path):
    conftest = importlib.import_module("conftest")
    src = tmp_path / "python"
    (src / "kvtile").mkdir(parents=True)
    (src / "kvtile" / "__init__.py").write_text("from . import _C\n")
    assert conftest.choose_package("", str(src)) is None  # unbuilt: the installed package
    assert conftest.choose_package("installed", str(src)) is None
    with pytest.raises(pytest.UsageError, match="no _C extension"):
        conftest.choose_package("inplace", str(src))
    ext = importlib.machinery.EXTENSION_SUFFIXES[0]
    (src / "kvtile" / ("_C" + ext)).write_bytes(b"")
    assert conftest.choose_package("", str(src)) == str(src)  # built in place: the in-place build
    assert conftest.choose_package("installed", str(src)) is None
    with pytest.raises(pytest.UsageError, match="KVTILE_TEST_PACKAGE"):
        conftest.choose_package("source", str(src))


def test_the_tested_package_is_importable_as_reported():
    mode = os.environ.get("KVTILE_TEST_PACKAGE", "")
    here = os.path.dirname(os.path.abspath(kvtile.__file__))
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python",
                       "kvtile")
    if mode == "installed":
        assert here != src, "KVTILE_TEST_PACKAGE=installed imported the source tree's kvtile"
    elif mode == "inplace":
        assert here == src
    assert "kvtile" in sys.modules
