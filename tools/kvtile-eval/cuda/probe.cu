// tools/kvtile-eval/cuda/probe.cu: device detection for `kvtile-eval --device cuda`
// (compiled only in CUDA builds, which define KVTILE_EVAL_HAVE_CUDA=1).
#include <cuda_runtime.h>

int kvtile_eval_cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}
