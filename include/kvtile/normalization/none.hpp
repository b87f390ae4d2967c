// kvtile/normalization/none.hpp: the no-normalization policy (unit scales;
// the baselines kivi and rotate_rtn).
#pragma once

#include <cstddef>

#include "../config.hpp"

KVTILE_NAMESPACE_BEGIN

// No normalization: unit scales (baselines kivi and rotate_rtn).
struct no_normalization {
  static constexpr int iterations = 0;
  static constexpr bool is_none = true;
  static constexpr const char* name = "none";

  template <int R, int C>
  static constexpr std::size_t scratch_floats = 0;

  template <int R, int C>
  static float run(const float*, float* col_scale, float* row_scale, float*) {
    for (int c = 0; c < C; ++c) col_scale[c] = 1.0f;
    for (int r = 0; r < R; ++r) row_scale[r] = 1.0f;
    return 0.0f;
  }
};

KVTILE_NAMESPACE_END
