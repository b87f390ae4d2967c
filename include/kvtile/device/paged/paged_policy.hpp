// kvtile/device/paged/paged_policy.hpp: the tuning of the paged-cache kernels
// (append, prefill, append_drafts, dequantize_pages), as a policy type.
//
// Every launcher of device/paged/ takes `class Policy = paged_policy` as its
// last template argument (launch_append<Codec, T, Policy>,
// launch_prefill<Codec, T, Policy>, launch_append_drafts<Codec, T, Policy>,
// launch_dequantize_pages<Codec, Policy>, and their prepare_* / *_smem_bytes).
// Another tuning is a type derived from paged_policy that redefines the
// fields it changes:
//
//   struct my_policy : kvtile::device::paged_policy {
//     static constexpr int dequantize_block_threads = 512;
//   };
//   launch_dequantize_pages<Codec, my_policy>(view, ids, n, out_k, out_v);
//
// The kernels themselves take the numbers (append_kernel<Codec, BLOCK_THREADS,
// T>, ...), so two policies with the same numbers share their kernels. The
// policy is part of every launcher's mangled name: translation units built
// with different policies never share a launcher (tests/abi).
//
// One policy for every architecture: the defaults were measured on an H200
// (docs/gpu-codec.md, "Tuning: paged_policy"); no other GPU has run them yet.
// Plain C++ (no CUDA): only compile-time constants.
#pragma once

#include "../../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

struct paged_policy {
  // Threads per append block (launch_append, launch_append_drafts; a filling
  // tile is encoded by the whole block). 512: block_tile_codec's register
  // Sinkhorn and register scale / code stages apply at D <= 128 (one block per
  // SM, 123 registers). H200, k4v2_g128 D 128, 8 heads, every tile filling
  // (bench/results/2026-12-03-h200-gpu-codec-r2.md): batch 1 112 us, 64 372 us,
  // 128 719 us; at 256 threads (shared-memory Sinkhorn) 344 / 766 / 1,525 us;
  // at 1024 (64 registers) 94 / 366 / 721 us. Records are the same.
  static constexpr int append_block_threads = 512;

  // Threads per prefill block (one block per tile). H200, 64K tokens x 8
  // heads x D 128, k4v2_g128: 791 us; at 1024 (one block per SM) 1,109 us
  // (bench/results/2026-12-04-h200-gpu-codec-r5.md).
  static constexpr int prefill_block_threads = 512;

  // Minimum resident prefill blocks per SM (__launch_bounds__' second
  // argument and block_tile_codec's MIN_BLOCKS; applies at <= 512 threads and
  // D * G <= 16384, where two TempStorages fit in shared memory, else 1:
  // prefill_min_blocks<Codec, BLOCK_THREADS, MIN_BLOCKS>()). 2 caps registers
  // at 64 per thread, so two 512-thread blocks share an SM and one block's
  // Sinkhorn barriers and serial chains overlap the other's work. H200, 64K
  // tokens x 8 heads x D 128, k4v2_g128: 791 us at 2 against 1,247 us at 1
  // (bench/results/2026-12-04-h200-gpu-codec-r5.md); Sinkhorn 8 2,488 against
  // 2,689 us (119 registers, one block; bench/results/2026-12-03-h200-session-checks.md).
  // Records are the same either way.
  static constexpr int prefill_min_blocks = 2;

  // Threads per dequantize_pages block (powers of two in [64, 1024]): the
  // rotated-frame and generic kernels, and the original-frame kernel; the
  // fastest of 128 / 256 / 512 on the H200 for each (docs/gpu-codec.md).
  static constexpr int dequantize_block_threads = 256;
  static constexpr int dequantize_original_block_threads = 128;
};

}  // namespace device
KVTILE_NAMESPACE_END
