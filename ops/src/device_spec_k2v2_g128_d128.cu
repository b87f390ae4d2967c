// ops/src/device_spec_k2v2_g128_d128.cu: kvtile_ops draft / fork device functions of preset k2v2_g128, head_dim 128.
#include "speculative_ops.cuh"

KVTILE_OPS_SPEC_TABLE(k2v2_g128, KVTILE_OPS_K2V2_G128, 128)
