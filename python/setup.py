# The kvtile Python package: PyTorch ops over kvtile's C ABI (ops/), the
# transformers cache (kvtile.hf). From the repository root:
#
#   pip install --no-build-isolation ./python
#
# builds the extension against the installed torch: with CUDA when torch has
# CUDA and nvcc is found (set KVTILE_CUDA=0 to force a CPU-only build, which
# has the host codec ops only; its device ops raise an error naming why the
# build is CPU-only: KVTILE_CUDA=0, a CPU-only torch, or no CUDA toolkit).
# KVTILE_CUDA_ARCHS picks the GPU targets in CMake syntax (e.g. "90a-real" for
# an H100/H200 only; default: KVTILE_DEFAULT_CUDA_ARCHITECTURES of
# cmake/KvtileCuda.cmake, sm_80 to sm_120 + compute_80 PTX; a bare "90a" means
# "90a-real");
# KVTILE_OPS_LIB=/path/libkvtile_ops.so links a prebuilt kvtile_ops (cmake
# --build ... --target kvtile_ops) instead of compiling its sources again.
# MAX_JOBS sets the parallel compile jobs (ninja).
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

import torch
from setuptools import find_packages, setup
from torch.utils import cpp_extension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def cuda_architectures():
    """KVTILE_CUDA_ARCHS, or the library's default list (one source: cmake/KvtileCuda.cmake)."""
    env = os.environ.get("KVTILE_CUDA_ARCHS")
    if env:
        return [a for a in env.split(";") if a]
    text = open(os.path.join(root, "cmake", "KvtileCuda.cmake")).read()
    m = re.search(r'set\(KVTILE_DEFAULT_CUDA_ARCHITECTURES\s+"([^"]+)"\)', text)
    if not m:
        sys.exit("kvtile: KVTILE_DEFAULT_CUDA_ARCHITECTURES not found in cmake/KvtileCuda.cmake")
    return m.group(1).split(";")


def gencode(arch):
    """CMake's NN-real / NN-virtual / NN (= real) as an nvcc -gencode flag."""
    num, _, kind = arch.partition("-")
    if not re.fullmatch(r"\d+[af]?", num) or kind not in ("", "real", "virtual"):
        sys.exit("kvtile: KVTILE_CUDA_ARCHS entry %r is not NN, NN-real or NN-virtual" % arch)
    code = "compute_%s" % num if kind == "virtual" else "sm_%s" % num
    return "-gencode=arch=compute_%s,code=%s" % (num, code)

ops = os.path.join(root, "ops")


def want_cuda():
    """(build the device ops?, why not: KVTILE_NO_CUDA_REASON of torch_ops.cpp, 0 when they are built).

    The reason names the real cause: a CPU-only torch (2) before a missing
    toolkit (3) before KVTILE_CUDA=0 (1), whichever holds first.
    """
    env = os.environ.get("KVTILE_CUDA")
    if env is not None and env not in ("0", "", "off", "OFF"):
        return True, 0
    if torch.version.cuda is None:
        return False, 2
    if cpp_extension.CUDA_HOME is None:
        return False, 3
    if env is not None:
        return False, 1
    return True, 0


def torch_libstdcxx():
    """Path of the libstdc++ shared object loaded with torch (Linux), or None."""
    # importing torch (above) loaded libc10 and with it libstdc++
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


cuda, no_cuda_reason = want_cuda()
if not cuda:
    print("kvtile setup.py: building the CPU-only package (host codec ops only): %s"
          % {1: "KVTILE_CUDA=0", 2: "torch %s is a CPU-only build" % torch.__version__,
             3: "no CUDA toolkit found (set CUDA_HOME)"}[no_cuda_reason])
include_dirs = [os.path.join(root, "include"), os.path.join(ops, "include"), os.path.join(ops, "src")]
cxx_flags = ["-O2", "-std=c++17", "-fvisibility=hidden"]
prebuilt = os.environ.get("KVTILE_OPS_LIB")
csrc = os.path.join(here, "kvtile", "csrc")
# torch_ops.cpp: host codec, quantized cache, plans, speculative decoding; torch_ops_fp16.cpp: the fp16 baseline
sources = [rel(os.path.join(csrc, f)) for f in ("torch_ops.cpp", "torch_ops_fp16.cpp")]
depends = [rel(os.path.join(csrc, h)) for h in ("torch_ops_internal.h", "rotation.h")]
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
    sources.append(rel(os.path.join(csrc, "rotation.cu")))  # the device path of torch.ops.kvtile.rotate
    archs = cuda_architectures()
    nvcc_flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xcompiler", "-fvisibility=hidden", "-lineinfo"]
    nvcc_flags += [gencode(a) for a in archs]
    ext = cpp_extension.CUDAExtension(
        "kvtile._C",
        sources,
        include_dirs=include_dirs,
        define_macros=[("KVTILE_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        library_dirs=library_dirs,
        extra_link_args=extra_link,
        depends=depends,
    )
else:
    ext = cpp_extension.CppExtension(
        "kvtile._C", sources, include_dirs=include_dirs, define_macros=[("KVTILE_NO_CUDA_REASON", str(no_cuda_reason))],
        extra_compile_args={"cxx": cxx_flags}, extra_link_args=extra_link, depends=depends,
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
