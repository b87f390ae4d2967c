# The kvtile Python package: PyTorch ops over kvtile's C ABI (ops/), the
# transformers cache (kvtile.hf). From the repository root:
#
#   pip install --no-build-isolation ./python
#
# builds the extension against the installed torch: with CUDA when torch has
# CUDA and nvcc is found (set KVTILE_CUDA=0 to force a CPU-only build, which
# has the host codec ops only). KVTILE_CUDA_ARCHS (default "90a") picks the
# -gencode targets; KVTILE_OPS_LIB=/path/libkvtile_ops.so links a prebuilt
# kvtile_ops (cmake --build ... --target kvtile_ops) instead of compiling its
# sources again. MAX_JOBS sets the parallel compile jobs (ninja).
#
# On Linux the extension links the libstdc++ shared object that torch itself
# runs with: C++ library objects (strings, streams, exceptions) cross between
# the extension and libtorch, and a second, static copy of libstdc++ (what a
# compiler that links it statically by default gives) crashes in stream
# formatting, e.g. while composing an error message.
import glob
import os
import re
import sys

from setuptools import find_packages, setup
from torch.utils import cpp_extension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ops = os.path.join(root, "ops")


def want_cuda():
    env = os.environ.get("KVTILE_CUDA")
    if env is not None:
        return env not in ("0", "", "off", "OFF")
    import torch

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def torch_libstdcxx():
    """Path of the libstdc++ shared object loaded with torch (Linux), or None."""
    import torch  # noqa: F401  (loads libc10 and with it libstdc++)

    if not sys.platform.startswith("linux"):
        return None
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libstdc++.so"):
                return path
    return None


def rel(path):
    return os.path.relpath(path, here)


def version():
    text = open(os.path.join(root, "include", "kvtile", "version.hpp")).read()
    parts = [re.search(r"#define\s+KVTILE_VERSION_%s\s+(\d+)" % p, text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


cuda = want_cuda()
include_dirs = [os.path.join(root, "include"), os.path.join(ops, "include"), os.path.join(ops, "src")]
cxx_flags = ["-O2", "-std=c++17", "-fvisibility=hidden"]
prebuilt = os.environ.get("KVTILE_OPS_LIB")
sources = [rel(os.path.join(here, "kvtile", "csrc", "torch_ops.cpp"))]
library_dirs, extra_link = [], []
libstdcxx = torch_libstdcxx()
if libstdcxx:
    extra_link.append(libstdcxx)
if prebuilt:
    library_dirs.append(os.path.dirname(os.path.abspath(prebuilt)))
    extra_link += [os.path.abspath(prebuilt), "-Wl,-rpath," + os.path.dirname(os.path.abspath(prebuilt))]
else:
    sources.append(rel(os.path.join(ops, "src", "host.cpp")))
    if cuda:
        sources.append(rel(os.path.join(ops, "src", "device.cpp")))
        sources += sorted(rel(p) for p in glob.glob(os.path.join(ops, "src", "device_*.cu")))

if cuda:
    archs = os.environ.get("KVTILE_CUDA_ARCHS", "90a").split(";")
    nvcc_flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xcompiler", "-fvisibility=hidden", "-lineinfo"]
    nvcc_flags += ["-gencode=arch=compute_%s,code=sm_%s" % (a, a) for a in archs]
    ext = cpp_extension.CUDAExtension(
        "kvtile._C",
        sources,
        include_dirs=include_dirs,
        define_macros=[("KVTILE_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        library_dirs=library_dirs,
        extra_link_args=extra_link,
    )
else:
    ext = cpp_extension.CppExtension(
        "kvtile._C", sources, include_dirs=include_dirs, extra_compile_args={"cxx": cxx_flags},
        extra_link_args=extra_link,
    )

setup(
    name="kvtile",
    version=version(),
    description="KVarN KV-cache tile quantization for PyTorch: paged quantized cache ops and a transformers cache",
    packages=find_packages(include=["kvtile", "kvtile.*"]),
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.9",
)
