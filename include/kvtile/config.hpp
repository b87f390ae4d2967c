// kvtile/config.hpp: compiler and host/device macros shared by every header.
//
// `.hpp` headers compile with a plain C++17 host compiler and no CUDA headers;
// under nvcc the same functions become `__host__ __device__`.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVTILE_HOST_DEVICE __host__ __device__ __forceinline__
#define KVTILE_DEVICE __device__ __forceinline__
#else
#define KVTILE_HOST_DEVICE inline
#define KVTILE_DEVICE inline
#endif

// Every kvtile name lives in kvtile::KVTILE_ABI_NAMESPACE, an inline namespace
// named after the release (kvtile::v0_2), so objects built against different
// releases never share a mangled name. Its symbols have hidden visibility where
// the compiler supports it (GCC, Clang, nvcc with either): each shared library
// that instantiates kvtile's templates keeps its own copies, so two libraries
// built with different options cannot interpose each other's kernels or
// functions (CUB guards its kernels the same way). Define KVTILE_ABI_NAMESPACE
// before including kvtile to pick another name (e.g. to isolate two builds
// linked statically into one binary).
#ifndef KVTILE_ABI_NAMESPACE
#define KVTILE_ABI_NAMESPACE v0_2
#endif
#if defined(__GNUC__) || defined(__clang__)
#define KVTILE_HIDDEN __attribute__((visibility("hidden")))
#else
#define KVTILE_HIDDEN
#endif
#define KVTILE_NAMESPACE_BEGIN \
  namespace kvtile {           \
  inline namespace KVTILE_ABI_NAMESPACE KVTILE_HIDDEN {
#define KVTILE_NAMESPACE_END \
  }                          \
  }

#if defined(__CUDA_ARCH__)
#define KVTILE_DEVICE_PASS 1
#else
#define KVTILE_DEVICE_PASS 0
#endif
