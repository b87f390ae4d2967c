// kvtile/numeric/numeric.hpp: the storage types in one include: half_t,
// bfloat16_t and float_e4m3_t with their conversions and directed rounding.
#pragma once

#include "bfloat16.hpp"
#include "float_e4m3.hpp"
#include "half.hpp"
