// kvtile/rotation/identity.hpp: the no-rotation policy (baselines such as kivi).
#pragma once

#include "../config.hpp"

KVTILE_NAMESPACE_BEGIN

struct identity {
  static constexpr bool is_identity = true;
  static constexpr const char* name = "identity";
  KVTILE_HOST_DEVICE static float sign(int) { return 1.0f; }
  template <int D>
  KVTILE_HOST_DEVICE static void forward(float*) {}
  template <int D>
  KVTILE_HOST_DEVICE static void inverse(float*) {}
};

KVTILE_NAMESPACE_END
