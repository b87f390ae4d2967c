// ops/src/device_none.cpp: the device entry points of a CPU-only kvtile_ops
// (built without a CUDA compiler; ops/CMakeLists.txt compiles this file
// instead of device.cpp and the CUDA translation units). The host codec
// (host.cpp) is complete; every device function returns
// KVTILE_OPS_NO_DEVICE with a message naming it, kvtile_ops_supported()
// answers 0 for every (preset, head_dim), and destroying the NULL plan stays
// a no-op. ops/tests/exports.cmake checks that both builds export every
// function of kvtile_ops.h.
#include "ops_internal.hpp"

namespace {
int no_device(const char* function) {
  return kvtile_ops::fail(KVTILE_OPS_NO_DEVICE,
                          "%s: this kvtile_ops was built without CUDA (CPU-only: the host codec functions only); "
                          "rebuild it with a CUDA compiler for the device functions",
                          function);
}
}  // namespace

extern "C" {

int kvtile_ops_supported(int, int) { return 0; }

int kvtile_ops_prefill(const kvtile_ops_cache*, int, const void*, const void*, const int32_t*, int64_t, int32_t*,
                       kvtile_ops_stream) {
  return no_device("kvtile_ops_prefill");
}

int kvtile_ops_append(const kvtile_ops_cache*, int, const void*, const void*, int32_t*, kvtile_ops_stream) {
  return no_device("kvtile_ops_append");
}

int kvtile_ops_dequantize_pages(const kvtile_ops_cache*, const int32_t*, int32_t, void*, void*, int,
                                kvtile_ops_stream) {
  return no_device("kvtile_ops_dequantize_pages");
}

int kvtile_ops_decode_params_init(kvtile_ops_decode_params*, size_t) {
  return no_device("kvtile_ops_decode_params_init");
}

int kvtile_ops_decode_workspace_bytes(const kvtile_ops_cache*, const kvtile_ops_decode_params*, size_t*) {
  return no_device("kvtile_ops_decode_workspace_bytes");
}

int kvtile_ops_decode(const kvtile_ops_cache*, const kvtile_ops_decode_params*, kvtile_ops_stream) {
  return no_device("kvtile_ops_decode");
}

int kvtile_ops_fp16_decode_workspace_bytes(const kvtile_ops_fp16_cache*, const kvtile_ops_decode_params*, size_t*) {
  return no_device("kvtile_ops_fp16_decode_workspace_bytes");
}

int kvtile_ops_fp16_decode(const kvtile_ops_fp16_cache*, const kvtile_ops_decode_params*, kvtile_ops_stream) {
  return no_device("kvtile_ops_fp16_decode");
}

int kvtile_ops_decode_plan_create(kvtile_ops_decode_plan** plan) {
  if (plan) *plan = nullptr;
  return no_device("kvtile_ops_decode_plan_create");
}

// No plan can exist (create fails): NULL is the documented no-op, anything else is not a plan of this library.
int kvtile_ops_decode_plan_destroy(kvtile_ops_decode_plan* plan) {
  return plan ? no_device("kvtile_ops_decode_plan_destroy") : KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_plan_limit_ctas(kvtile_ops_decode_plan*, int32_t) {
  return no_device("kvtile_ops_decode_plan_limit_ctas");
}

int kvtile_ops_decode_plan_info(const kvtile_ops_decode_plan*, int32_t*, int32_t*) {
  return no_device("kvtile_ops_decode_plan_info");
}

int kvtile_ops_decode_plan_build(kvtile_ops_decode_plan*, const kvtile_ops_cache*, const int32_t*, const int32_t*,
                                 const kvtile_ops_decode_params*, kvtile_ops_stream) {
  return no_device("kvtile_ops_decode_plan_build");
}

int kvtile_ops_decode_plan_run(const kvtile_ops_decode_plan*, const kvtile_ops_cache*, const kvtile_ops_decode_params*,
                               kvtile_ops_stream) {
  return no_device("kvtile_ops_decode_plan_run");
}

int kvtile_ops_decode_plan_build_fp16(kvtile_ops_decode_plan*, const kvtile_ops_fp16_cache*, const int32_t*,
                                      const kvtile_ops_decode_params*, kvtile_ops_stream) {
  return no_device("kvtile_ops_decode_plan_build_fp16");
}

int kvtile_ops_decode_plan_run_fp16(const kvtile_ops_decode_plan*, const kvtile_ops_fp16_cache*,
                                    const kvtile_ops_decode_params*, kvtile_ops_stream) {
  return no_device("kvtile_ops_decode_plan_run_fp16");
}

int kvtile_ops_append_drafts(const kvtile_ops_cache*, const kvtile_ops_drafts*, int, const void*, const void*,
                             const int32_t*, int32_t*, kvtile_ops_stream) {
  return no_device("kvtile_ops_append_drafts");
}

int kvtile_ops_commit_drafts(const kvtile_ops_cache*, const kvtile_ops_drafts*, const int32_t*, int32_t*, int32_t*,
                             kvtile_ops_stream) {
  return no_device("kvtile_ops_commit_drafts");
}

int kvtile_ops_fork(const kvtile_ops_cache*, const kvtile_ops_drafts*, const int32_t*, const int32_t*, int32_t,
                    int32_t*, kvtile_ops_stream) {
  return no_device("kvtile_ops_fork");
}

}  // extern "C"
