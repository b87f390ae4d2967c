// python/kvtile/csrc/rotation.h: the rotation of a preset (its codec's
// Rotation: kvtile::hadamard for every preset of kvtile_ops.h) applied to rows
// of head_dim fp32 values in place, with the library's transform
// (include/kvtile/rotation/hadamard.hpp: the order of operations the codec and
// the paged kernels follow, so rows rotated back here equal the codec's
// original-frame output bit for bit). Host: rotate_rows_host; device
// (rotation.cu, CUDA builds): rotate_rows_cuda. For torch.ops.kvtile.rotate
// (torch_ops.cpp). No torch headers: nvcc compiles it alone.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops_internal.hpp"  // kvtile_ops::preset_codec: preset id -> codec (the ABI's one list)

namespace kvtile_torch {

// Calls f(Rotation tag, D) for the rotation of (preset, head_dim) and returns
// true; false when the pair is not instantiated (no call).
template <class F>
bool with_rotation(int64_t preset, int64_t head_dim, F&& f) {
  auto by_dim = [&](auto preset_c) -> bool {
    constexpr int P = decltype(preset_c)::value;
    switch (head_dim) {
      case 64: f(typename kvtile_ops::preset_codec<P, 64>::type::rotation{}, std::integral_constant<int, 64>{}); return true;
      case 128: f(typename kvtile_ops::preset_codec<P, 128>::type::rotation{}, std::integral_constant<int, 128>{}); return true;
      case 256: f(typename kvtile_ops::preset_codec<P, 256>::type::rotation{}, std::integral_constant<int, 256>{}); return true;
      default: return false;
    }
  };
  switch (preset) {
    case KVTILE_OPS_K4V2_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K4V2_G128>{});
    case KVTILE_OPS_K4V4_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K4V4_G128>{});
    case KVTILE_OPS_K2V2_G128: return by_dim(std::integral_constant<int, KVTILE_OPS_K2V2_G128>{});
    default: return false;
  }
}

// x: rows x head_dim fp32 (host memory), rotated in place (inverse: back to the original frame).
inline bool rotate_rows_host(int64_t preset, int64_t head_dim, float* x, int64_t rows, bool inverse) {
  return with_rotation(preset, head_dim, [&](auto rotation, auto dim) {
    using Rotation = decltype(rotation);
    constexpr int D = decltype(dim)::value;
    for (int64_t r = 0; r < rows; ++r) {
      if (inverse)
        Rotation::template inverse<D>(x + r * D);
      else
        Rotation::template forward<D>(x + r * D);
    }
  });
}

#ifdef KVTILE_WITH_CUDA
// The same on device memory, launched on stream (a cudaStream_t): returns the
// launch's cudaError_t (0: cudaSuccess), or -1 when (preset, head_dim) is not instantiated.
int rotate_rows_cuda(int64_t preset, int64_t head_dim, float* x, int64_t rows, bool inverse, void* stream);
#endif

}  // namespace kvtile_torch
