// kvtile/normalization/none.hpp: the no-normalization policy (defined with sinkhorn).
#pragma once

#include "sinkhorn.hpp"
