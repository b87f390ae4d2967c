// tools/kvtile-eval/cuda/device_codec_d128.cu: kvtile-eval's device kernels for head_dim 128
// (one TU per head_dim: a parallel build compiles them at once).
#include "device_codec_kernels.cuh"

namespace kvtile_eval::cuda {
launch_result launch_d128(const kvtile::codec_params& p, const launch_args& a, std::size_t items) {
  return launch_for<128>(p, a, items);
}
}  // namespace kvtile_eval::cuda
