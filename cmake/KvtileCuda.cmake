# KvtileCuda.cmake: optional CUDA support for kvtile's own targets.
#
# Included at file scope from the top-level CMakeLists.txt (enable_language may
# not run inside a function). Sets KVTILE_HAS_CUDA and the cache variable
# KVTILE_CUDA_ARCHITECTURES. Never fails when no CUDA compiler exists.
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

# Default targets: sm_90a machine code (Hopper: what the decode attention
# kernels are written for) plus compute_80 PTX, which the driver JIT-compiles
# on every other GPU of compute capability 8.0 or newer (A100, L40S, RTX 4090,
# Blackwell). CMake >= 3.25 turns this into
#   --generate-code=arch=compute_90a,code=[sm_90a]
#   --generate-code=arch=compute_80,code=[compute_80]
# The compute_80 PTX of the codec and paged kernels (block codec, prefill,
# append, dequantize_pages) assembles for sm_80 and is tested by running it
# JIT-compiled on an H200 (scripts/gpu_session.sh, stage jit80). Their
# launchers return status::unsupported_arch below compute capability 8.0 or
# when the binary holds no code the GPU can run. Decode attention needs sm_90
# (bulk copies, mbarrier transaction counts); its kernels have no body below
# compute_90, and on other GPUs its launchers return unsupported_arch
# (docs/attention.md), while the codec and paged kernels of the same
# translation unit run from the compute_80 PTX.
# A CMAKE_CUDA_ARCHITECTURES or CUDAARCHS given by the user becomes the default
# instead (e.g. -DCMAKE_CUDA_ARCHITECTURES=native).
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(_kvtile_default_archs "${CMAKE_CUDA_ARCHITECTURES}")
elseif(DEFINED ENV{CUDAARCHS} AND NOT "$ENV{CUDAARCHS}" STREQUAL "")
  set(_kvtile_default_archs "$ENV{CUDAARCHS}")
else()
  set(_kvtile_default_archs "90a-real;80-virtual")
endif()
set(KVTILE_CUDA_ARCHITECTURES "${_kvtile_default_archs}" CACHE STRING
  "CUDA_ARCHITECTURES for kvtile's CUDA targets (CMake syntax, e.g. 90a-real;80-virtual or native)")

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
    message(STATUS "kvtile: CUDA ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), "
                   "architectures ${KVTILE_CUDA_ARCHITECTURES}")
  endif()
else()
  message(STATUS "kvtile: no CUDA compiler found; CUDA targets are skipped")
endif()
