// tests/device/block_codec.cu: block_tile_codec / block_tile_decoder vs the
// host tile_codec for one head_dim D: every preset, both packings (see
// block_codec_common.cuh), then the codecs checked at that D only (baselines,
// other input types, block sizes, rounding policies, MIN_BLOCKS = 2).
// tests/CMakeLists.txt builds it once per D: kvtile_device_block_codec_d<D>,
// with KVTILE_TEST_HEAD_DIM defined. Exit 0 pass, 1 fail, 77 no device.
// Options: --quick (3 tiles per codec), --tiles N.
// ctest-sanitize: run --tiles 1
#include "block_codec_common.cuh"

#ifndef KVTILE_TEST_HEAD_DIM
#error "define KVTILE_TEST_HEAD_DIM (64, 128, 256): tests/CMakeLists.txt"
#endif

namespace {
using namespace kvtile::presets;
constexpr int D = KVTILE_TEST_HEAD_DIM;

// The codecs checked at one D only: the preprocessor keeps the other D's kernels
// out of this translation unit (one TU per D compiles in parallel).
#if KVTILE_TEST_HEAD_DIM == 64
void run_extras(int n, kvtest::totals& t) {
  using g32 = kvtile::presets::kvarn<64, 32, 4, 2>;
  kvtest::run_codec<g32, kvtile::half_t>("kvarn<64, G=32, 4, 2>", n, 91, t);
  // MIN_BLOCKS = 2, as the prefill kernel compiles the block codec for D * G <= 16384
  kvtest::run_codec<k4v2_g128<64>, kvtile::half_t, 512, false, 2>("k4v2_g128<64>", n, 92, t);
}
#elif KVTILE_TEST_HEAD_DIM == 128
void run_extras(int n, kvtest::totals& t) {
  // Baselines, other input types, other block sizes.
  kvtest::run_codec<kivi<128>, kvtile::half_t>("kivi<128>", n, 71, t);
  kvtest::run_codec<kivi<128, 128, 4, 2, kvtile::fp16_scales>, kvtile::half_t>("kivi<128, fp16_scales>", n, 72, t);
  kvtest::run_codec<rotate_rtn<128>, kvtile::half_t>("rotate_rtn<128>", n, 73, t);
  kvtest::run_codec<rotate_rtn<128, 64, 4, 4, kvtile::fp16_scales>, kvtile::half_t>("rotate_rtn<128,g64,fp16_scales>", n, 74, t);
  kvtest::run_codec<k4v2_g128<128>, float>("k4v2_g128<128> (f32 input)", n, 81, t);
  kvtest::run_codec<k4v2_g128<128, kvtile::fp16_scales>, float>("k4v2_g128<128,fp16> (f32 input)", n, 82, t);
  kvtest::run_codec<k4v2_g128<128>, kvtile::bfloat16_t>("k4v2_g128<128> (bf16 input)", n, 83, t);
  kvtest::run_codec<k4v2_g128<128>, kvtile::half_t, 128>("k4v2_g128<128>", n, 84, t);
  kvtest::run_codec<k4v2_g64<128>, kvtile::half_t, 1024>("k4v2_g64<128>", n, 85, t);
  using rh = kvtile::tile_codec<kvtile::tile_config<128, 128, 4, 2>, kvtile::randomized_hadamard<42>, kvtile::sinkhorn<8>, kvtile::rtn<>, kvtile::fp8_scales>;
  kvtest::run_codec<rh, kvtile::half_t>("randomized_hadamard<42> k4v2_g128", n, 86, t);
  // Rounding policies and clip ratios (rounding/asymmetric_rtn.hpp), Sinkhorn iterations.
  using cover = kvarn<128, 128, 4, 2, kvtile::fp8_scales, kvtile::rtn_cover>;
  using nearest = kvarn<128, 128, 2, 2, kvtile::fp8_scales, kvtile::rtn<kvtile::row_rounding::nearest>>;
  using clipped = kvarn<128, 128, 2, 2, kvtile::fp8_scales, kvtile::rtn<kvtile::row_rounding::min_max_error, 900, 970, 1000, 850, 930, 1000>>;
  using clipped16 = kvarn<128, 128, 4, 4, kvtile::fp16_scales, kvtile::rtn_clip<930>>;
  using it4 = kvarn<128, 128, 4, 2, kvtile::fp8_scales, kvtile::rtn<>, 4>;
  kvtest::run_codec<cover, kvtile::half_t>("k4v2_g128<128> rtn_cover", n, 91, t);
  kvtest::run_codec<nearest, kvtile::half_t>("k2v2_g128<128> nearest", n, 92, t);
  kvtest::run_codec<clipped, kvtile::half_t>("k2v2_g128<128> min_max_error clip", n, 93, t);
  kvtest::run_codec<clipped16, kvtile::half_t>("k4v4_g128<128,fp16> clip 0.93", n, 94, t);
  kvtest::run_codec<it4, kvtile::half_t>("k4v2_g128<128> sinkhorn<4>", n, 95, t);
  // MIN_BLOCKS = 2, as the prefill kernel compiles the block codec for D * G <= 16384
  kvtest::run_codec<k4v2_g128<128>, kvtile::half_t, 512, false, 2>("k4v2_g128<128>", n, 96, t);
  kvtest::run_codec<k2v2_g128<128, kvtile::fp16_scales>, kvtile::half_t, 512, false, 2>("k2v2_g128<128,fp16>", n, 97, t);
  kvtest::run_codec<rotate_rtn<128>, kvtile::half_t, 512, false, 2>("rotate_rtn<128>", n, 98, t);
}
#elif KVTILE_TEST_HEAD_DIM == 256
void run_extras(int n, kvtest::totals& t) {
  kvtest::run_codec<k4v2_g128<256>, float>("k4v2_g128<256> (f32 input)", n, 92, t);
}
#else
#error "KVTILE_TEST_HEAD_DIM: 64, 128 or 256"
#endif
}  // namespace

int main(int argc, char** argv) {
  if (int r = kvtest::require_device()) return r;
  using namespace kvtile::presets;
  const int n = kvtest::parse_tiles(argc, argv, D == 256 ? 150 : 300);
  kvtest::totals t;
  kvtest::run_preset<k4v2_g128, D, true>("k4v2_g128", n, 11, t);
  kvtest::run_preset<k4v4_g128, D>("k4v4_g128", n, 21, t);
  kvtest::run_preset<k4v2_g64, D>("k4v2_g64", n, 31, t);
  kvtest::run_preset<k4v4_g64, D>("k4v4_g64", n, 41, t);
  kvtest::run_preset<k2v2_g128, D>("k2v2_g128", n, 51, t);
  kvtest::run_preset<k8v8_g128, D>("k8v8_g128", n, 61, t);
  run_extras(n, t);
  return kvtest::report(t);
}
