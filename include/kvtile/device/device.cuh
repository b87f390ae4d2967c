// kvtile/device/device.cuh: umbrella for the CUDA device layer (needs nvcc).
//   warp/warp_primitives.cuh    canonical-order warp sums, stds, min/max, rotation
//   warp/warp_fwht.cuh          the device FWHT (every lane layout; host stage order)
//   block/block_tile_codec.cuh  block_tile_codec (encode) and block_tile_decoder
//   paged/append.cuh            one token per sequence into the paged cache
//   paged/prefill.cuh           ragged prefill into the paged cache
//   paged/dequantize_pages.cuh  pages back to fp16
//   paged/paged_policy.hpp      paged_policy: block sizes of the kernels above (their Policy argument)
//   paged/sequence_pack.cuh     one sequence packed into / unpacked from a contiguous buffer
//   detail/launch.cuh           launch setup and launch_result shared by every launcher
// docs/gpu-codec.md describes them.
#pragma once

#include "block/block_tile_codec.cuh"
#include "paged/append.cuh"
#include "paged/dequantize_pages.cuh"
#include "paged/paged_policy.hpp"
#include "paged/prefill.cuh"
#include "paged/sequence_pack.cuh"
#include "warp/warp_fwht.cuh"
#include "warp/warp_primitives.cuh"
