// kvtile/device/block/block_tile_codec.cuh: block-cooperative encode/decode of
// one (tile, KV head), bit-identical to the host tile_codec.
//
//   using Codec = kvtile::presets::k4v2_g128<128>;
//   using BlockCodec = kvtile::device::block_tile_codec<Codec, 512>;
//   __global__ void k(...) {
//     extern __shared__ __align__(16) unsigned char smem[];   // or a static __shared__
//     auto& ts = *reinterpret_cast<BlockCodec::TempStorage*>(smem);
//     kvtile::status s = BlockCodec(ts).encode(keys, stride, values, stride, record);
//   }
//
// Every thread of the block must call encode/decode (they contain
// __syncthreads); the returned status is the same in every thread.
// sizeof(TempStorage) is large (about 90 KB for D = G = 128, 180 KB for
// D = 256, G = 128), so use dynamic shared memory with
// cudaFuncAttributeMaxDynamicSharedMemorySize.
//
// Strategy. The rotated fp32 tile lives in shared memory, token-major with a
// row stride of D + 1 floats (odd, so both channel lines and token lines are
// bank-conflict free). The Sinkhorn iterate `cur` is never stored: each
// standard-deviation pass recomputes cur = X * rc[c] * rr[r] from X (the
// host's exact expression, sinkhorn.hpp: reciprocals rc = 1/e^Lc, rr = 1/e^Lr
// computed once per update), one warp per line in the strided layout of
// warp_primitives.cuh, so the canonical tree order holds; a warp works on up
// to 4 lines at once (independent dependency chains: the passes are latency
// bound). After the scale stage x holds Y = X / s^, which the code stage
// reads. This supports every tile with D * G <= 32768 (all presets: up to
// D = 256 x G = 128 = 128 KB of fp32). D = 256 x G = 256 (256 KB) does not fit
// and is rejected by a static_assert; it would need X kept in registers across
// several blocks or re-read and re-rotated from global memory for every pass.
//
// Register path. Where the side's matrix fits register_sinkhorn_shape and the
// block has <= 512 threads (every Sinkhorn preset with D <= 128 at 512
// threads; see fast_scales), the Sinkhorn (register_sinkhorn.cuh) AND the
// scale and code stages run from registers in the same layout: X is read once more from x, column max |X|
// by integer max (order free), Y = X / s^ stays in registers, the row range
// is reduced per row by integer order keys (first-wins zero sign on a rare
// path), and the codes are computed from registers into s_.codes. Other
// shapes use the shared-memory stages (x holds Y between them). On both
// paths the code uses quantize_rcp_fast: a multiplication by the row's
// reciprocal with a tie-zone check, falling back to the exact division (see there).
//
// Status (same values as the host):
//  * success;
//  * non_finite_input: NaN/Inf elements were replaced by 0; record written;
//  * out_of_range: an input |x| > 2^48, or a scale the packing cannot store;
//    NOTHING of the record is written (the key side is kept in shared memory
//    until the value side has passed its scale stage), as on the host.
// decode does not validate the record (the host validate() does); it expects
// records written by encode.
//
// Files (this header includes them all; the public names are in kvtile::device):
//   tile_loaders.cuh           load_* flags, global_token_loader, two_phase_loader, half_value_loader
//   block_tile_encoder.cuh     block_tile_codec: TempStorage, encode, encode_with, tile load, decode
//   detail/smem_sinkhorn.cuh   its shared-memory Sinkhorn
//   detail/tile_quantize.cuh   its scale stages, reciprocal quantization, code stage, record writers
//   register_sinkhorn.cuh      the register Sinkhorn and register tile layout
//   block_tile_decoder.cuh     block_tile_decoder
#pragma once

#include "block_tile_decoder.cuh"
#include "block_tile_encoder.cuh"
#include "tile_loaders.cuh"
