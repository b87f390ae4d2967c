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
// One policy for every architecture: the defaults are the fastest measured
// on an H200 (docs/gpu-codec.md, "Tuning: paged_policy", with the numbers and
// their result files); no other GPU has run them yet.
// Plain C++ (no CUDA): only compile-time constants.
#pragma once

#include "../../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

struct paged_policy {
  // Threads per append block (launch_append, launch_append_drafts; a filling
  // tile is encoded by the whole block). 512: block_tile_codec's register
  // Sinkhorn and register scale / code stages apply at D <= 128 (one block per
  // SM, 123 registers); 256 falls back to the shared-memory Sinkhorn, 1024
  // slows the steps without a filling tile. Records are the same at any size.
  static constexpr int append_block_threads = 512;

  // Threads per prefill block (one block per tile); 1024 leaves one block per SM.
  static constexpr int prefill_block_threads = 512;

  // Minimum resident prefill blocks per SM (__launch_bounds__' second
  // argument and block_tile_codec's MIN_BLOCKS; applies at <= 512 threads and
  // D * G <= 16384, where two TempStorages fit in shared memory, else 1:
  // prefill_min_blocks<Codec, BLOCK_THREADS, MIN_BLOCKS>()). 2 caps registers
  // at 64 per thread, so two 512-thread blocks share an SM and one block's
  // Sinkhorn barriers and serial chains overlap the other's work. Records are
  // the same either way.
  static constexpr int prefill_min_blocks = 2;

  // Threads per dequantize_pages block (powers of two in [64, 1024]): the
  // rotated-frame and generic kernels, and the original-frame kernel.
  static constexpr int dequantize_block_threads = 256;
  static constexpr int dequantize_original_block_threads = 128;
};

}  // namespace device
KVTILE_NAMESPACE_END
