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

#if defined(__CUDA_ARCH__)
#define KVTILE_DEVICE_PASS 1
#else
#define KVTILE_DEVICE_PASS 0
#endif

// KVTILE_ASSERT guards internal invariants (never user input: user input gets a
// status). Tests may define it to throw before including kvtile.
#ifndef KVTILE_ASSERT
#if KVTILE_DEVICE_PASS
#define KVTILE_ASSERT(cond) ((void)0)
#else
#include <cassert>
#define KVTILE_ASSERT(cond) assert(cond)
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define KVTILE_RESTRICT __restrict__
#else
#define KVTILE_RESTRICT
#endif
