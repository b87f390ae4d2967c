// tests/device/block_codec_d64.cu: block_tile_codec / block_tile_decoder vs the
// host tile_codec, every preset with D = 64, both packings (see
// block_codec_common.cuh). Exit 0 pass, 1 fail, 77 no device.
// Options: --quick (3 tiles per codec, for compute-sanitizer), --tiles N.
#include "block_codec_common.cuh"

int main(int argc, char** argv) {
  if (int r = kvtest::require_device()) return r;
  using namespace kvtile::presets;
  const int n = kvtest::parse_tiles(argc, argv, 300);
  kvtest::totals t;
  kvtest::run_preset<k4v2_g128, 64, true>("k4v2_g128", n, 11, t);
  kvtest::run_preset<k4v4_g128, 64>("k4v4_g128", n, 21, t);
  kvtest::run_preset<k4v2_g64, 64>("k4v2_g64", n, 31, t);
  kvtest::run_preset<k4v4_g64, 64>("k4v4_g64", n, 41, t);
  kvtest::run_preset<k2v2_g128, 64>("k2v2_g128", n, 51, t);
  kvtest::run_preset<k8v8_g128, 64>("k8v8_g128", n, 61, t);
  using g32 = kvtile::presets::kvarn<64, 32, 4, 2>;
  kvtest::run_codec<g32, kvtile::half_t>("kvarn<64, G=32, 4, 2>", n, 91, t);
  // MIN_BLOCKS = 2, as the prefill kernel compiles the block codec for D * G <= 16384
  kvtest::run_codec<k4v2_g128<64>, kvtile::half_t, 512, false, 2>("k4v2_g128<64>", n, 92, t);
  return kvtest::report(t);
}
