# The fake (FakeTensor) kernels that kvtile/_fake.py registers with
# torch.library.register_fake are for ops with per-dispatch-key kernels only: an
# op defined with one kernel for every key (m.def(schema, &fn) in csrc/*.cpp,
# CompositeImplicitAutograd) must have none, or torch >= 2.4 refuses the
# registration and `import kvtile` fails (seen on the H200 with torch 2.11,
# 2026-12-05: kvtile::validate_fork). Reads the sources: runs with any torch.
import glob
import os
import re

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(_root, *parts)) as f:
        return f.read()


def _sources(pattern):
    """The text of every file of python/kvtile matching pattern, joined."""
    paths = sorted(glob.glob(os.path.join(_root, "python", "kvtile", pattern)))
    assert paths, pattern
    return "\n".join(_read(p) for p in paths)


def catch_all_ops():
    src = _sources(os.path.join("csrc", "*.cpp"))
    return set(re.findall(r'm\.def\(\s*"(\w+)\((?:[^"]|"\s*")*"\s*,\s*&\w+\s*\)', src))


def faked_ops():
    src = _sources("*.py")
    names = set(re.findall(r'reg\("kvtile::(\w+)"\)', src))
    for body in re.findall(r'for name in \(([^)]*)\):\s*\n\s*reg\("kvtile::" \+ name\)', src):
        names |= set(re.findall(r'"(\w+)"', body))
    return names


def test_sources_parse():
    assert "validate_fork" in catch_all_ops() and "draft_bytes" in catch_all_ops()
    assert {"decode", "append_drafts", "encode_tiles"} <= faked_ops()


def test_no_fake_kernel_for_a_catch_all_op():
    both = catch_all_ops() & faked_ops()
    assert not both, "register_fake for ops with a catch-all kernel: %s" % sorted(both)


def test_fake_kernels_at_run_time(monkeypatch):
    """_fake.register_fake_kernels with a recording register_fake (torch 1.13 has none): one fake kernel for
    each op with per-key kernels and none for a catch-all one, read from the dispatcher of the loaded
    extension; the shape functions give the real ops' shapes and dtypes."""
    import torch

    import kvtile
    from kvtile import _fake

    seen = {}

    def register_fake(name):
        def deco(fn):
            seen[name] = fn
            return fn
        return deco

    monkeypatch.setattr(torch.library, "register_fake", register_fake, raising=False)
    _fake.register_fake_kernels()
    ops = sorted({str(s).split("(")[0] for s in torch._C._jit_get_all_schemas() if str(s).startswith("kvtile::")})
    catch_all = {op for op in ops if "CompositeImplicitAutograd" in torch._C._dispatch_dump(op)}
    assert "kvtile::validate_fork" in catch_all and "kvtile::decode" not in catch_all
    assert set(seen) == set(ops) - catch_all
    k = torch.randn(3, 128, 128)
    rec = kvtile.encode_tiles(k, k, "k4v4_g128")
    fake = seen["kvtile::encode_tiles"](k, k, 1, False)
    assert fake.shape == rec.shape and fake.dtype == rec.dtype
    real = kvtile.decode_tiles(rec, "k4v4_g128", 128, dtype=torch.bfloat16)
    fake = seen["kvtile::decode_tiles"](rec, 1, 128, torch.bfloat16, True)
    assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real]
    fake = seen["kvtile::rotate"](k.half(), 0, True, torch.float32)
    assert fake.shape == k.shape and fake.dtype == torch.float32
