# pytest setup for kvtile's Python tests: picks the kvtile package under test
# and says why GPU tests skip.
#
# Which kvtile: KVTILE_TEST_PACKAGE=inplace tests the source tree's python/kvtile
# built in place (python setup.py build_ext --inplace, from python/), =installed
# the package the interpreter imports without the source tree (pip install
# ./python). Unset: the in-place build when python/kvtile holds an extension
# built for this interpreter, the installed package otherwise. Unbuilt sources
# are never put on sys.path (they would shadow an installed package and fail
# with "cannot import name '_C'"). The header of the pytest run names the
# package tested.
import importlib.machinery
import os
import sys

import pytest

_here = os.path.dirname(os.path.abspath(__file__))
_python = os.path.join(os.path.dirname(os.path.dirname(_here)), "python")


def built_in_place(python_dir):
    """True when python_dir/kvtile holds a _C extension this interpreter can load."""
    pkg = os.path.join(python_dir, "kvtile")
    return any(os.path.isfile(os.path.join(pkg, "_C" + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def choose_package(mode, python_dir):
    """The directory to put first on sys.path for mode ('inplace', 'installed' or '' = pick), or None."""
    if mode not in ("", "inplace", "installed"):
        raise pytest.UsageError("KVTILE_TEST_PACKAGE must be 'inplace' or 'installed' (got %r)" % mode)
    if mode == "installed":
        return None
    if built_in_place(python_dir):
        return python_dir
    if mode == "inplace":
        raise pytest.UsageError("KVTILE_TEST_PACKAGE=inplace but %s/kvtile has no _C extension for this Python: "
                                "run `%s setup.py build_ext --inplace` in %s"
                                % (python_dir, sys.executable, python_dir))
    return None


_chosen = choose_package(os.environ.get("KVTILE_TEST_PACKAGE", ""), _python)
if _chosen is not None and _chosen not in sys.path:
    sys.path.insert(0, _chosen)
elif _chosen is None:
    # the installed package: drop the source tree's python/ if something put it on the path
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _python]

import torch  # noqa: E402

try:
    import kvtile  # noqa: E402
except ImportError as e:
    raise pytest.UsageError(
        "cannot import kvtile (%s): install it (python3 -m pip install --no-build-isolation ./python, see "
        "docs/python.md) or build it in place (cd python && python3 setup.py build_ext --inplace)" % e)


def pytest_report_header(config):
    where = "in place" if _chosen is not None else "installed"
    return "kvtile under test (%s): %s" % (where, os.path.dirname(os.path.abspath(kvtile.__file__)))


def gpu_ready():
    return kvtile.has_cuda() and torch.cuda.is_available()


requires_gpu = pytest.mark.skipif(
    not gpu_ready(),
    reason="needs a CUDA GPU and kvtile built with CUDA (torch.cuda.is_available()=%s, kvtile.has_cuda()=%s)"
    % (torch.cuda.is_available(), kvtile.has_cuda()),
)
