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
