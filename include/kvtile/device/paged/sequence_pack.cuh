// kvtile/device/paged/sequence_pack.cuh: pack / unpack one sequence of a
// device-resident paged cache (kvtile/paged/sequence_pack.hpp describes the
// buffer and what travels).
//
// The copies are the host functions' copy plan, each range one
// cudaMemcpyAsync(cudaMemcpyDefault) on `stream` (consecutive page ids merged
// into one range), so the buffer may be device memory of this GPU, of a peer
// GPU (with peer access or staged by the driver) or pinned host memory. The
// header is written from / read into host memory (a pageable copy: not for
// use under CUDA-graph capture). Page ids and lengths are host copies: the
// engine knows them when it migrates a sequence.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include <vector>

#include "../../paged/sequence_pack.hpp"
#include "../detail/launch.cuh"

KVTILE_NAMESPACE_BEGIN
namespace device {

namespace detail {
inline launch_result run_copy_plan(const std::vector<sequence_copy_chunk>& plan, cudaStream_t stream) {
  for (const auto& c : plan)
    if (cudaError_t e = cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream); e != cudaSuccess) {
      (void)cudaGetLastError();
      return from_cuda(e);
    }
  return {status::success};
}
}  // namespace detail

// Packs `length` tokens of the sequence in `slot` (host value: its tail/sink
// slot, see sequence_pack.hpp) of the device view v into dst
// (dst_bytes >= sequence_pack_layout_of(...).total). page_row: host copy of
// the sequence's page-table row (entries from tile 0). Asynchronous on stream.
inline launch_result pack_sequence_async(const paged_cache_view& v, std::int32_t slot, std::int32_t length,
                                         const std::int32_t* page_row, void* dst, std::size_t dst_bytes,
                                         cudaStream_t stream = nullptr) {
  sequence_pack_layout L;
  std::vector<sequence_copy_chunk> plan;
  if (status s = plan_sequence_pack(v, slot, length, page_row, dst, dst_bytes, L, plan); s != status::success)
    return s;
  if (cudaError_t e = cudaMemcpyAsync(dst, &L.header, sizeof L.header, cudaMemcpyDefault, stream); e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::from_cuda(e);
  }
  return detail::run_copy_plan(plan, stream);
}

// Reads the header of a packed buffer (device or host memory) into host
// memory: a synchronous 64-byte copy.
inline launch_result read_sequence_pack_header(const void* src, sequence_pack_header& out) {
  if (!src) return status::null_pointer;
  if (cudaError_t e = cudaMemcpy(&out, src, sizeof out, cudaMemcpyDefault); e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::from_cuda(e);
  }
  return {status::success};
}

// Unpacks src (header: its host copy, from read_sequence_pack_header) into
// `slot` of the device view v, records into new_pages (host memory,
// header.n_records ids: new_pages[i] receives tile first_record_tile + i).
// The caller then writes the sequence's page table row, its length
// (header.length) and its slot.
inline launch_result unpack_sequence_async(const sequence_pack_header& header, const void* src, std::size_t src_bytes,
                                           const paged_cache_view& v, std::int32_t slot,
                                           const std::int32_t* new_pages, cudaStream_t stream = nullptr) {
  std::vector<sequence_copy_chunk> plan;
  if (status s = plan_sequence_unpack(header, src, src_bytes, v, slot, new_pages, plan); s != status::success)
    return s;
  return detail::run_copy_plan(plan, stream);
}

}  // namespace device
KVTILE_NAMESPACE_END
