// ops/src/device_spec_k4v2_g128_d64.cu: kvtile_ops draft / fork device functions of preset k4v2_g128, head_dim 64.
#include "speculative_ops.cuh"

KVTILE_OPS_SPEC_TABLE(k4v2_g128, KVTILE_OPS_K4V2_G128, 64)
