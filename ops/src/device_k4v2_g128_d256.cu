// ops/src/device_k4v2_g128_d256.cu: kvtile_ops device functions of preset k4v2_g128, head_dim 256.
#include "device_ops.cuh"

KVTILE_OPS_DEVICE_TABLE(k4v2_g128, KVTILE_OPS_K4V2_G128, 256)
