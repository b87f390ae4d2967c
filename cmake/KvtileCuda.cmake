# KvtileCuda.cmake: optional CUDA support for kvtile's own targets.
#
# Included at file scope from the top-level CMakeLists.txt (enable_language may
# not run inside a function). Sets KVTILE_HAS_CUDA, KVTILE_CUDA_PTX_ONLY and the
# cache variables KVTILE_CUDA_ARCHITECTURES and KVTILE_TEST_CUDA_ARCHITECTURES.
# Never fails when no CUDA compiler exists.
include(CheckLanguage)

# nvcc is often installed but not on PATH: look in the usual places before
# check_language(CUDA) does its own search (which uses PATH only).
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(KVTILE_NVCC nvcc
    PATHS ENV CUDA_PATH ENV CUDA_HOME /usr/local/cuda /opt/cuda
    PATH_SUFFIXES bin
    DOC "nvcc used when neither CUDACXX nor CMAKE_CUDA_COMPILER is set")
  mark_as_advanced(KVTILE_NVCC)
  if(KVTILE_NVCC)
    set(ENV{CUDACXX} "${KVTILE_NVCC}")
  endif()
endif()

# Default targets: machine code for every GPU generation the decode-attention
# policies serve (docs/attention.md, "Architectures"): A100 (sm_80), RTX 3090 /
# A6000 (sm_86), RTX 4090 / L40S (sm_89), H100 / H200 (sm_90a), B200 (sm_100)
# and RTX 5090 / RTX PRO 6000 / DGX Spark (sm_120), plus compute_80 PTX, which
# the driver JIT-compiles on any other GPU of compute capability 8.0 or newer.
# Each target compiles the attention kernels of the policies its GPUs use
# (decode_policy::min_arch / max_arch); the launchers return unsupported_arch
# below compute capability 8.0 or when the binary holds no code the GPU can run.
# tests/attention_archs.py (CI's build check) compiles the attention kernels
# for every real target of this list; kvtile's own CI build keeps sm_90a only
# (CMakePresets.json), and the Python package takes the same list
# (python/setup.py, KVTILE_CUDA_ARCHS).
set(KVTILE_DEFAULT_CUDA_ARCHITECTURES "80-real;86-real;89-real;90a-real;100-real;120-real;80-virtual")
# A CMAKE_CUDA_ARCHITECTURES or CUDAARCHS given by the user becomes the default
# instead (e.g. -DCMAKE_CUDA_ARCHITECTURES=native).
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(_kvtile_default_archs "${CMAKE_CUDA_ARCHITECTURES}")
elseif(DEFINED ENV{CUDAARCHS} AND NOT "$ENV{CUDAARCHS}" STREQUAL "")
  set(_kvtile_default_archs "$ENV{CUDAARCHS}")
else()
  set(_kvtile_default_archs "${KVTILE_DEFAULT_CUDA_ARCHITECTURES}")
endif()
set(KVTILE_CUDA_ARCHITECTURES "${_kvtile_default_archs}" CACHE STRING
  "CUDA_ARCHITECTURES for kvtile's CUDA targets (CMake syntax, e.g. 90a-real;80-virtual or native)")
# The programs whose CUDA code only runs on a GPU of the build machine: device
# tests, benchmarks, kvtile-eval, the .cuh header checks, the ABI guard
# (kvtile_cuda_target(... TEST)). Empty: KVTILE_CUDA_ARCHITECTURES. The nogpu
# preset (scripts/test.sh on a machine without a GPU, CI) sets 90a-virtual:
# nvcc's front end compiles every kernel to PTX, and ptxas, 28-40% of such an
# object's compile time, runs on the C ABI library and the examples (sm_90a)
# and, in tests/build_checks.sh, on the attention kernels of every target
# (tests/attention_archs.py).
set(KVTILE_TEST_CUDA_ARCHITECTURES "" CACHE STRING
  "CUDA_ARCHITECTURES of the tests, benchmarks and tools (empty: KVTILE_CUDA_ARCHITECTURES)")
# Compile-only builds (the nogpu preset) also compile those programs' device
# code without optimization (-G: cicc does not optimize; the preset's
# CMAKE_CUDA_FLAGS_RELEASE puts the host side of every .cu file at -O0): an
# attention test object then compiles in a quarter of the time. The optimized,
# ptxas-checked device code stays with the C ABI library, the examples and
# tests/build_checks.sh. Binaries built so are for compiling, not for GPU runs.
option(KVTILE_TEST_CUDA_UNOPTIMIZED
  "Compile the tests', benchmarks' and tools' device code without optimization (-G): compile-only builds" OFF)
if(KVTILE_TEST_CUDA_ARCHITECTURES STREQUAL "")
  set(KVTILE_TEST_ARCHS "${KVTILE_CUDA_ARCHITECTURES}")
else()
  set(KVTILE_TEST_ARCHS "${KVTILE_TEST_CUDA_ARCHITECTURES}")
endif()

check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  enable_language(CUDA)
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND)
    message(WARNING "kvtile: found ${CMAKE_CUDA_COMPILER} but not the CUDA toolkit; CUDA targets disabled")
  elseif(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
         AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0
         AND KVTILE_CUDA_ARCHITECTURES MATCHES "90a")
    message(WARNING "kvtile: nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot target sm_90a (needs CUDA 12); "
                    "set KVTILE_CUDA_ARCHITECTURES or use a newer toolkit. CUDA targets disabled")
  else()
    set(KVTILE_HAS_CUDA ON)
    # Tests and benchmarks of PTX only (every entry of KVTILE_TEST_ARCHS NN-virtual,
    # e.g. the gpu-jit* and nogpu presets) run with CUDA_FORCE_PTX_JIT=1 and carry
    # the CTest label ptx-jit. KVTILE_PTX_JIT_ENVIRONMENT is their ENVIRONMENT (with
    # a JIT cache large enough for the attention kernels; the driver's default is
    # 256 MiB).
    if(KVTILE_TEST_ARCHS MATCHES "^[0-9]+[a-z]?-virtual(;[0-9]+[a-z]?-virtual)*$")
      set(KVTILE_CUDA_PTX_ONLY ON)
      set(KVTILE_PTX_JIT_ENVIRONMENT "CUDA_FORCE_PTX_JIT=1;CUDA_CACHE_MAXSIZE=4294967296")
    endif()
    message(STATUS "kvtile: CUDA ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), "
                   "architectures ${KVTILE_CUDA_ARCHITECTURES}, tests ${KVTILE_TEST_ARCHS}")
  endif()
else()
  message(STATUS "kvtile: no CUDA compiler found; CUDA targets are skipped")
endif()
