# pytest setup for kvtile's Python tests: finds the package built in place
# (python setup.py build_ext --inplace, from python/) when it is not installed,
# and says why GPU tests skip.
import os
import sys

import pytest

_here = os.path.dirname(os.path.abspath(__file__))
_python = os.path.join(os.path.dirname(os.path.dirname(_here)), "python")
if os.path.isdir(os.path.join(_python, "kvtile")) and _python not in sys.path:
    sys.path.insert(0, _python)

import torch  # noqa: E402

import kvtile  # noqa: E402


def gpu_ready():
    return kvtile.has_cuda() and torch.cuda.is_available()


requires_gpu = pytest.mark.skipif(
    not gpu_ready(),
    reason="needs a CUDA GPU and kvtile built with CUDA (torch.cuda.is_available()=%s, kvtile.has_cuda()=%s)"
    % (torch.cuda.is_available(), kvtile.has_cuda()),
)
