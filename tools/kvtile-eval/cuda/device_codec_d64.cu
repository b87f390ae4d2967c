// tools/kvtile-eval/cuda/device_codec_d64.cu: kvtile-eval's device kernels for head_dim 64
// (one TU per head_dim: a parallel build compiles them at once).
#include "device_codec_kernels.cuh"

namespace kvtile_eval::cuda {
launch_result launch_d64(const kvtile::codec_params& p, const launch_args& a, std::size_t items) {
  return launch_for<64>(p, a, items);
}
}  // namespace kvtile_eval::cuda
