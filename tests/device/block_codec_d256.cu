// tests/device/block_codec_d256.cu: block_tile_codec / block_tile_decoder vs the
// host tile_codec, every preset with D = 256, both packings (see
// block_codec_common.cuh). Exit 0 pass, 1 fail, 77 no device.
// Options: --quick (3 tiles per codec, for compute-sanitizer), --tiles N.
#include "block_codec_common.cuh"

int main(int argc, char** argv) {
  if (int r = kvtest::require_device()) return r;
  using namespace kvtile::presets;
  const int n = kvtest::parse_tiles(argc, argv, 150);
  kvtest::totals t;
  kvtest::run_preset<k4v2_g128, 256, true>("k4v2_g128", n, 11, t);
  kvtest::run_preset<k4v4_g128, 256>("k4v4_g128", n, 21, t);
  kvtest::run_preset<k4v2_g64, 256>("k4v2_g64", n, 31, t);
  kvtest::run_preset<k4v4_g64, 256>("k4v4_g64", n, 41, t);
  kvtest::run_preset<k2v2_g128, 256>("k2v2_g128", n, 51, t);
  kvtest::run_preset<k8v8_g128, 256>("k8v8_g128", n, 61, t);
  kvtest::run_codec<k4v2_g128<256>, float>("k4v2_g128<256> (f32 input)", n, 92, t);
  return kvtest::report(t);
}
