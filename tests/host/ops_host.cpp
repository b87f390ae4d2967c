// The C ABI's host part (ops/src/host.cpp, linked into this test): status
// codes mirror kvtile::status, paged encode reports saturation, decode takes
// the records' length, plan handles are tracked (issue 31 items 8, 9, 14, 15, 16).
#include "test_util.hpp"

#include <kvtile_ops.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops_internal.hpp"

namespace {
using kvtile::status;
constexpr int D = 128, G = 128;

std::int64_t record_bytes() {
  kvtile_ops_preset_info info;
  REQUIRE(kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, D, &info) == KVTILE_OPS_SUCCESS);
  return info.record_bytes;
}
}  // namespace

TEST_CASE("C ABI status codes and strings mirror every kvtile::status (issue 31 item 14)") {
  for (int s = 0; s <= static_cast<int>(status::truncated_record); ++s)
    CHECK(std::string(kvtile_ops_status_string(s)) == kvtile::to_string(static_cast<status>(s)));
  CHECK(KVTILE_OPS_UNSUPPORTED_ARCH == 14);
  CHECK(std::string(kvtile_ops_status_string(KVTILE_OPS_UNSUPPORTED_ARCH)) != "unknown status");
  CHECK(std::string(kvtile_ops_status_string(KVTILE_OPS_TRUNCATED_RECORD)) != "unknown status");
  CHECK(std::string(kvtile_ops_status_string(static_cast<int>(status::truncated_record) + 1)) == "unknown status");
  CHECK(std::string(kvtile_ops_status_string(-1)) == "unknown status");
  CHECK(std::string(kvtile_ops_status_string(KVTILE_OPS_UNSUPPORTED_PRESET)) == "unsupported preset");
}

TEST_CASE("encode_tiles_host reports values it cannot store the same way with paged = 0 and 1 (issue 31 item 9)") {
  const auto rb = static_cast<std::size_t>(record_bytes());
  std::vector<std::uint8_t> rec(2 * rb);
  std::vector<float> k(2 * G * D), v(2 * G * D);
  kvtest::rng r(5);
  for (auto& x : k) x = static_cast<float>(r.normal());
  for (auto& x : v) x = static_cast<float>(r.normal());
  for (int paged = 0; paged <= 1; ++paged) {
    CAPTURE(paged);
    CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, k.data(), v.data(), 2, rec.data(),
                                       paged) == KVTILE_OPS_SUCCESS);
    // A tile of 1e30 in its second tile: out of range on both paths, naming tile 1.
    std::vector<float> big = k;
    for (int i = G * D; i < 2 * G * D; ++i) big[i] = 1e30f;
    CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, big.data(), v.data(), 2, rec.data(),
                                       paged) == KVTILE_OPS_OUT_OF_RANGE);
    CHECK(std::string(kvtile_ops_last_error()).find("tile 1") != std::string::npos);
  }
  // One token of 1e5: the codec stores it (paged = 0), the paged store would
  // saturate its rotation to +-65504 (paged = 1): out of range, not success.
  std::vector<float> one = k;
  for (int d = 0; d < D; ++d) one[d] = 1e5f;
  CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, one.data(), v.data(), 1, rec.data(), 0) ==
        KVTILE_OPS_SUCCESS);
  CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, one.data(), v.data(), 1, rec.data(), 1) ==
        KVTILE_OPS_OUT_OF_RANGE);
  CHECK(std::string(kvtile_ops_last_error()).find("65504") != std::string::npos);
  // A tile count whose byte size does not fit: refused before any read (item 8).
  CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, k.data(), v.data(), INT64_MAX / 4,
                                     rec.data(), 0) == KVTILE_OPS_INVALID_ARGUMENT);
}

TEST_CASE("decode_tiles_host checks the records' length (issue 31 item 15)") {
  const auto rb = static_cast<std::size_t>(record_bytes());
  std::vector<float> k(2 * G * D), v(2 * G * D);
  kvtest::rng r(9);
  for (auto& x : k) x = static_cast<float>(r.normal());
  for (auto& x : v) x = static_cast<float>(r.normal());
  std::vector<std::uint8_t> rec(2 * rb);
  REQUIRE(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, k.data(), v.data(), 2, rec.data(), 0) ==
          KVTILE_OPS_SUCCESS);
  std::vector<float> k2(2 * G * D, 3.0f), v2(2 * G * D, 3.0f);
  CHECK(kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec.data(), 2 * rb - 1, 2, KVTILE_OPS_FP32, k2.data(),
                                     v2.data(), KVTILE_OPS_FRAME_ORIGINAL) == KVTILE_OPS_TRUNCATED_RECORD);
  CHECK(k2[0] == 3.0f);  // nothing decoded
  CHECK(std::string(kvtile_ops_last_error()).find("records_bytes") != std::string::npos);
  CHECK(kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec.data(), rb, INT64_MAX / 2, KVTILE_OPS_FP32, k2.data(),
                                     v2.data(), KVTILE_OPS_FRAME_ORIGINAL) == KVTILE_OPS_INVALID_ARGUMENT);
  CHECK(kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec.data(), 2 * rb, 2, KVTILE_OPS_FP32, k2.data(),
                                     v2.data(), KVTILE_OPS_FRAME_ORIGINAL) == KVTILE_OPS_SUCCESS);
  CHECK(kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, nullptr, 0, 0, KVTILE_OPS_FP32, nullptr, nullptr,
                                     KVTILE_OPS_FRAME_ORIGINAL) == KVTILE_OPS_SUCCESS);
}

TEST_CASE("plan handles: a handle is forgotten once, a second destroy is refused (issue 31 item 16)") {
  int a = 0, b = 0, never = 0;
  CHECK(kvtile_ops::remember_plan(&a));
  CHECK(kvtile_ops::remember_plan(&b));
  CHECK_FALSE(kvtile_ops::remember_plan(&a));  // already live
  CHECK(kvtile_ops::forget_plan(&a));
  CHECK_FALSE(kvtile_ops::forget_plan(&a));  // what kvtile_ops_decode_plan_destroy refuses a second time
  CHECK_FALSE(kvtile_ops::forget_plan(&never));  // never remembered (&a + 1 could be &b)
  CHECK(kvtile_ops::forget_plan(&b));
}

TEST_CASE("the C ABI's presets, head_dims and messages come from the core's preset table (issue 32 item 1)") {
  for (int p = 0; p < KVTILE_OPS_NUM_PRESETS; ++p) {
    CAPTURE(p);
    REQUIRE(kvtile_ops_preset_name(p) != nullptr);
    const kvtile::presets::preset_shape& sh = kvtile::presets::preset_shapes[kvtile_ops::abi_shape[p]];
    CHECK(std::string(kvtile_ops_preset_name(p)) == sh.name);
    for (int d : kvtile::head_dims) {
      kvtile_ops_preset_info info;
      REQUIRE(kvtile_ops_get_preset_info(p, d, &info) == KVTILE_OPS_SUCCESS);
      CHECK(info.tile_tokens == sh.tile_tokens);
      CHECK(info.key_bits == sh.key_bits);
      CHECK(info.value_bits == sh.value_bits);
    }
  }
  CHECK(kvtile_ops_preset_name(-1) == nullptr);
  CHECK(kvtile_ops_preset_name(KVTILE_OPS_NUM_PRESETS) == nullptr);
  kvtile_ops_preset_info info;
  CHECK(kvtile_ops_get_preset_info(KVTILE_OPS_NUM_PRESETS, 128, &info) == KVTILE_OPS_UNSUPPORTED_PRESET);
  CHECK(std::string(kvtile_ops_last_error()) ==
        "kvtile_ops_get_preset_info: preset 3 is not 0 (k4v2_g128), 1 (k4v4_g128) or 2 (k2v2_g128)");
  CHECK(kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, 96, &info) == KVTILE_OPS_UNSUPPORTED_HEAD_DIM);
  CHECK(std::string(kvtile_ops_last_error()) == "kvtile_ops_get_preset_info: head_dim 96 is not 64, 128 or 256");
  CHECK(std::string(kvtile_ops::device_instance_list()) ==
        "k4v2_g128 at 64, 128, 256; k4v4_g128 at 128; k2v2_g128 at 128");
  CHECK(kvtile_ops_fp16_page_tokens() == 64);
  for (const kvtile_ops::device_instance& d : kvtile_ops::device_instances) {
    CHECK(kvtile::is_head_dim(d.head_dim));
    CHECK(kvtile_ops::device_instance_index(d.preset, d.head_dim) >= 0);
  }
  CHECK(kvtile_ops::device_instance_index(KVTILE_OPS_K4V4_G128, 64) == -1);
}

TEST_CASE("kvtile_ops_check_decode_options is the core's rule of the decode options, in any build (issue 32 item 2)") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct bad {
    int q_heads, max_q, has_qo, window;
    float cap;
    int splits, need_io;
    float scale;
    const char* text;
  };
  const bad cases[] = {
      {0, 1, 0, -1, 0.f, 0, 1, 1.f, "q_heads 0 must be positive"},
      {4, 9, 1, -1, 0.f, 0, 1, 1.f, "max_q_tokens 9 is not in [1, 8]"},
      {4, 0, 1, -1, 0.f, 0, 0, 1.f, "max_q_tokens 0 is not in [1, 8]"},
      {4, 1, 0, -2, 0.f, 0, 1, 1.f, "window_left -2 must be -1 (no window) or >= 0"},
      {4, 1, 0, -1, -1.f, 0, 1, 1.f, "logit_softcap -1 must be 0 (off) or positive and finite"},
      {4, 1, 0, -1, nan, 0, 1, 1.f, "logit_softcap"},
      {4, 1, 0, -1, inf, 0, 0, 1.f, "logit_softcap inf"},
      {4, 1, 0, -1, 0.f, 4097, 1, 1.f, "num_splits 4097 is not in [0, 4096]"},
      {4, 1, 0, -1, 0.f, -1, 1, 1.f, "num_splits -1"},
      {4, 2, 0, -1, 0.f, 0, 1, 1.f, "max_q_tokens 2 > 1 needs qo_indptr"},
      {4, 1, 0, -1, 0.f, 0, 1, 0.f, "softmax_scale 0 must be positive and finite"},
      {4, 1, 0, -1, 0.f, 0, 1, nan, "softmax_scale"},
  };
  for (const bad& b : cases) {
    CAPTURE(b.text);
    CHECK(kvtile_ops_check_decode_options(b.q_heads, b.max_q, b.has_qo, b.window, b.cap, b.splits, b.need_io,
                                          b.scale) == KVTILE_OPS_INVALID_ARGUMENT);
    CHECK(std::string(kvtile_ops_last_error()).find(b.text) != std::string::npos);
    CHECK(std::string(kvtile_ops_last_error()).rfind("kvtile_ops_check_decode_options: ", 0) == 0);
  }
  // what holds: defaults, the limits, the workspace query's subset without qo_indptr and scale
  CHECK(kvtile_ops_check_decode_options(4, 1, 0, -1, 0.f, 0, 1, 0.125f) == KVTILE_OPS_SUCCESS);
  CHECK(kvtile_ops_check_decode_options(64, 8, 1, 0, 50.f, 4096, 1, 1e30f) == KVTILE_OPS_SUCCESS);
  CHECK(kvtile_ops_check_decode_options(4, 8, 0, -1, 0.f, 0, 0, nan) == KVTILE_OPS_SUCCESS);
}
