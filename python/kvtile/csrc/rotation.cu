// python/kvtile/csrc/rotation.cu: rotate_rows_cuda of rotation.h, one thread
// per row calling the library's Rotation::forward / inverse (KVTILE_HOST_DEVICE,
// the same operations as on the host: detail::add / sub / mul are __fadd_rn /
// __fsub_rn / __fmul_rn on the device, never contracted), so device and host
// give the same bits. Small data (an fp16 tail tile per row and head): no
// warp-level transform.
#include <cuda_runtime.h>

#include "rotation.h"

namespace kvtile_torch {
namespace {

template <class Rotation, int D>
__global__ void rotate_rows_kernel(float* x, int64_t rows, bool inverse) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float v[D];
  float* p = x + r * D;
  for (int d = 0; d < D; ++d) v[d] = p[d];
  if (inverse)
    Rotation::template inverse<D>(v);
  else
    Rotation::template forward<D>(v);
  for (int d = 0; d < D; ++d) p[d] = v[d];
}

}  // namespace

int rotate_rows_cuda(int64_t preset, int64_t head_dim, float* x, int64_t rows, bool inverse, void* stream) {
  constexpr int threads = 128;
  cudaError_t err = cudaSuccess;
  const bool known = with_rotation(preset, head_dim, [&](auto rotation, auto dim) {
    if (rows <= 0) return;
    const int64_t blocks = (rows + threads - 1) / threads;
    rotate_rows_kernel<decltype(rotation), decltype(dim)::value>
        <<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(x, rows, inverse);
    err = cudaGetLastError();
  });
  return known ? static_cast<int>(err) : -1;
}

}  // namespace kvtile_torch
