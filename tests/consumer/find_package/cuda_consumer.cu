// A CUDA consumer of the installed kvtile: the device layer's headers compile
// in a project's own .cu file through kvtile::kvtile; the host codec runs.
#include <kvtile/device/device.cuh>
#include <kvtile/kvtile.hpp>

#include <cstdio>

__global__ void touch(kvtile::half_t* out, float x) { *out = kvtile::half_t(x); }

int main() {
  std::printf("cuda_consumer: kvtile %d.%d.%d device headers compiled\n", kvtile::version_major,
              kvtile::version_minor, kvtile::version_patch);
  return 0;
}
