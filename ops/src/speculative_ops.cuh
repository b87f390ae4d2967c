// ops/src/speculative_ops.cuh: the draft / fork device functions of one
// (preset, head_dim) (device/paged/speculative.cuh), instantiated in their own
// translation units (device_spec_<preset>_d<D>.cu) next to the other device
// functions of that preset; device_speculative.cu holds the C entry points.
#pragma once

#include <cuda_runtime.h>

#include <kvtile/device/paged/speculative.cuh>

#include "ops_cuda.cuh"

namespace kvtile_ops {

struct spec_table {
  int preset;  // the instance (device_instances) these functions are of
  int head_dim;
  int (*append_drafts)(const kvtile_ops_cache&, const kvtile_ops_drafts&, int dtype, const void* k, const void* v,
                       const std::int32_t* cu, std::int32_t* flags, kvtile_ops_stream stream);
  int (*commit_drafts)(const kvtile_ops_cache&, const kvtile_ops_drafts&, const std::int32_t* accepted,
                       std::int32_t* new_seq_lens, std::int32_t* flags, kvtile_ops_stream stream);
  int (*fork)(const kvtile_ops_cache&, const kvtile_ops_drafts*, const std::int32_t* src, const std::int32_t* dst,
              std::int32_t count, std::int32_t* flags, kvtile_ops_stream stream);
};

inline kvtile::draft_view draft_view_of(const kvtile_ops_drafts& d) {
  return {static_cast<kvtile::half_t*>(d.draft_k), static_cast<kvtile::half_t*>(d.draft_v), d.draft_state};
}

template <class Codec>
struct spec_ops {
  static int append_drafts(const kvtile_ops_cache& c, const kvtile_ops_drafts& d, int dtype, const void* k,
                           const void* v, const std::int32_t* cu, std::int32_t* flags, kvtile_ops_stream stream) {
    const char* fn = "kvtile_ops_append_drafts";
    const auto view = make_view<Codec>(c);
    const auto st = reinterpret_cast<cudaStream_t>(stream);
    if (dtype == KVTILE_OPS_FP16)
      return launch_result(kvtile::device::launch_append_drafts<Codec, kvtile::half_t>(
                               view, draft_view_of(d), static_cast<const kvtile::half_t*>(k),
                               static_cast<const kvtile::half_t*>(v), cu, flags, st),
                           fn);
    if (dtype == KVTILE_OPS_BF16)
      return launch_result(kvtile::device::launch_append_drafts<Codec, kvtile::bfloat16_t>(
                               view, draft_view_of(d), static_cast<const kvtile::bfloat16_t*>(k),
                               static_cast<const kvtile::bfloat16_t*>(v), cu, flags, st),
                           fn);
    return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "%s: tokens must be fp16 or bf16 (dtype %d)", fn, dtype);
  }
  static int commit_drafts(const kvtile_ops_cache& c, const kvtile_ops_drafts& d, const std::int32_t* accepted,
                           std::int32_t* new_seq_lens, std::int32_t* flags, kvtile_ops_stream stream) {
    return launch_result(kvtile::device::launch_commit_drafts<Codec>(make_view<Codec>(c), draft_view_of(d), accepted,
                                                                     new_seq_lens, flags,
                                                                     reinterpret_cast<cudaStream_t>(stream)),
                         "kvtile_ops_commit_drafts");
  }
  static int fork(const kvtile_ops_cache& c, const kvtile_ops_drafts* d, const std::int32_t* src,
                  const std::int32_t* dst, std::int32_t count, std::int32_t* flags, kvtile_ops_stream stream) {
    return launch_result(kvtile::device::launch_fork<Codec>(make_view<Codec>(c),
                                                            d ? draft_view_of(*d) : kvtile::draft_view{}, src, dst,
                                                            count, flags, reinterpret_cast<cudaStream_t>(stream)),
                         "kvtile_ops_fork");
  }
  template <int Preset, int D>
  static constexpr spec_table table{Preset, D, &append_drafts, &commit_drafts, &fork};
};

}  // namespace kvtile_ops

// Defines kvtile_ops::spec_table_<name>_d<D>.
#define KVTILE_OPS_SPEC_TABLE(name, preset_id, D)                                                                \
  namespace kvtile_ops {                                                                                         \
  static_assert(is_device_instance(#name, preset_id, D), "a device instance of ops_internal.hpp, named as its preset"); \
  extern const spec_table spec_table_##name##_d##D;                                                              \
  const spec_table spec_table_##name##_d##D = spec_ops<preset_codec<preset_id, D>::type>::template table<preset_id, D>; \
  }
