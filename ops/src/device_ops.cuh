// ops/src/device_ops.cuh: the device functions of one (preset, head_dim),
// instantiated once in its own translation unit (device_<preset>_d<D>.cu) so
// that the build parallelizes and each TU stays small.
#pragma once

#include <cuda_runtime.h>

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/device/paged/append.cuh>
#include <kvtile/device/paged/dequantize_pages.cuh>
#include <kvtile/device/paged/prefill.cuh>

#include "ops_cuda.cuh"

namespace kvtile_ops {

template <class Codec>
struct device_ops {
  using half_t = kvtile::half_t;
  using bf16_t = kvtile::bfloat16_t;

  // The view's structural rule a launcher would refuse, reported with its
  // text (the launchers return the same status without one); 0 when none.
  static int check_view(const kvtile_ops_cache& c, const char* function, bool pages_only = false) {
    const auto view = make_view<Codec>(c);
    const auto rb = static_cast<std::int64_t>(Codec::record_bytes);
    const kvtile::view_error e = pages_only ? kvtile::pages_error(view, rb, Codec::D, Codec::G)
                                            : kvtile::structure_error(view, rb, Codec::D, Codec::G);
    return e ? fail(static_cast<int>(e.code), "%s: %s", function, e.rule) : KVTILE_OPS_SUCCESS;
  }
  static bool token_dtype(int dtype) { return dtype == KVTILE_OPS_FP16 || dtype == KVTILE_OPS_BF16; }

  static int prefill(const kvtile_ops_cache& c, int dtype, const void* k, const void* v, const std::int32_t* cu,
                     std::int64_t max_tokens, std::int32_t* flags, kvtile_ops_stream stream) {
    if (token_dtype(dtype))
      if (int e = check_view(c, "kvtile_ops_prefill")) return e;
    const auto view = make_view<Codec>(c);
    const auto st = reinterpret_cast<cudaStream_t>(stream);
    if (dtype == KVTILE_OPS_FP16)
      return launch_result(kvtile::device::launch_prefill<Codec, half_t>(view, static_cast<const half_t*>(k),
                                                                         static_cast<const half_t*>(v), cu, max_tokens,
                                                                         flags, st),
                           "kvtile_ops_prefill");
    if (dtype == KVTILE_OPS_BF16)
      return launch_result(kvtile::device::launch_prefill<Codec, bf16_t>(view, static_cast<const bf16_t*>(k),
                                                                         static_cast<const bf16_t*>(v), cu, max_tokens,
                                                                         flags, st),
                           "kvtile_ops_prefill");
    return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "kvtile_ops_prefill: tokens must be fp16 or bf16 (dtype %d)", dtype);
  }

  static int append(const kvtile_ops_cache& c, int dtype, const void* k, const void* v, std::int32_t* flags,
                    kvtile_ops_stream stream) {
    if (token_dtype(dtype))
      if (int e = check_view(c, "kvtile_ops_append")) return e;
    const auto view = make_view<Codec>(c);
    const auto st = reinterpret_cast<cudaStream_t>(stream);
    if (dtype == KVTILE_OPS_FP16)
      return launch_result(kvtile::device::launch_append<Codec, half_t>(view, static_cast<const half_t*>(k),
                                                                        static_cast<const half_t*>(v), flags, st),
                           "kvtile_ops_append");
    if (dtype == KVTILE_OPS_BF16)
      return launch_result(kvtile::device::launch_append<Codec, bf16_t>(view, static_cast<const bf16_t*>(k),
                                                                        static_cast<const bf16_t*>(v), flags, st),
                           "kvtile_ops_append");
    return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "kvtile_ops_append: tokens must be fp16 or bf16 (dtype %d)", dtype);
  }

  static int dequantize_pages(const kvtile_ops_cache& c, const std::int32_t* ids, std::int32_t count, void* ok,
                              void* ov, int frame, kvtile_ops_stream stream) {
    if (frame != KVTILE_OPS_FRAME_ORIGINAL && frame != KVTILE_OPS_FRAME_ROTATED)
      return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_dequantize_pages: frame %d is not 0 or 1", frame);
    if (!ids || !ok || !ov) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_dequantize_pages: page_ids, out_k or out_v is NULL");
    if (int e = check_view(c, "kvtile_ops_dequantize_pages", true)) return e;
    const auto view = make_view<Codec>(c);
    return launch_result(
        kvtile::device::launch_dequantize_pages<Codec>(
            view, ids, count, static_cast<half_t*>(ok), static_cast<half_t*>(ov),
            frame == KVTILE_OPS_FRAME_ORIGINAL ? kvtile::frame::original : kvtile::frame::rotated,
            reinterpret_cast<cudaStream_t>(stream)),
        "kvtile_ops_dequantize_pages");
  }

  static int decode_workspace_bytes(const kvtile_ops_cache& c, const kvtile_ops_decode_params& p,
                                    std::size_t* bytes) {
    *bytes = kvtile::attention::workspace_bytes<Codec>(make_view<Codec>(c), p.q_heads, p.num_splits, p.max_q_tokens);
    return KVTILE_OPS_SUCCESS;
  }

  static int launch_decode(const kvtile_ops_cache& c, const kvtile_ops_decode_params& p, kvtile_ops_stream stream,
                           const char* function) {
    if (int e = check_view(c, function)) return e;
    const auto view = make_view<Codec>(c);
    return with_args(p, false, [&](const auto& a) {
      return launch_result(kvtile::attention::paged_decode<Codec>(view, a, reinterpret_cast<cudaStream_t>(stream)),
                           function);
    });
  }

  static int decode(const kvtile_ops_cache& c, const kvtile_ops_decode_params& p, kvtile_ops_stream stream) {
    return launch_decode(c, p, stream, "kvtile_ops_decode");
  }

  static int plan(void* impl, const kvtile_ops_cache& c, const std::int32_t* lens, const std::int32_t* qo_indptr,
                  const kvtile_ops_decode_params& p, kvtile_ops_stream stream) {
    if (int e = check_view(c, "kvtile_ops_decode_plan_build")) return e;
    auto* plan = static_cast<kvtile::attention::decode_plan*>(impl);
    const auto view = make_view<Codec>(c);
    return with_args(p, true, [&](const auto& a) {
      return launch_result(plan->template plan<Codec>(view, lens, qo_indptr, a, reinterpret_cast<cudaStream_t>(stream)),
                           "kvtile_ops_decode_plan_build");
    });
  }

  static int run(const void* impl, const kvtile_ops_cache& c, const kvtile_ops_decode_params& p,
                 kvtile_ops_stream stream) {
    if (int e = check_view(c, "kvtile_ops_decode_plan_run")) return e;
    const auto* plan = static_cast<const kvtile::attention::decode_plan*>(impl);
    const auto view = make_view<Codec>(c);
    return with_args(p, false, [&](const auto& a) {
      return run_result(plan->template run<Codec>(view, a, reinterpret_cast<cudaStream_t>(stream)),
                        "kvtile_ops_decode_plan_run");
    });
  }

  template <int Preset, int D>
  static constexpr device_table table{Preset, D,       &prefill, &append, &dequantize_pages, &decode_workspace_bytes,
                                      &decode, &plan,    &run};
};

}  // namespace kvtile_ops

// Defines kvtile_ops::table_<name>_d<D>, the device_table of preset <name> at head_dim D.
// (preset_id, D) must be one of device_instances, and name its preset's name.
#define KVTILE_OPS_DEVICE_TABLE(name, preset_id, D)                                                              \
  namespace kvtile_ops {                                                                                         \
  static_assert(is_device_instance(#name, preset_id, D), "a device instance of ops_internal.hpp, named as its preset"); \
  extern const device_table table_##name##_d##D;                                                                 \
  const device_table table_##name##_d##D =                                                                       \
      device_ops<preset_codec<preset_id, D>::type>::template table<preset_id, D>;                                 \
  }
