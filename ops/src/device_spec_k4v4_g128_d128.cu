// ops/src/device_spec_k4v4_g128_d128.cu: kvtile_ops draft / fork device functions of preset k4v4_g128, head_dim 128.
#include "speculative_ops.cuh"

KVTILE_OPS_SPEC_TABLE(k4v4_g128, KVTILE_OPS_K4V4_G128, 128)
