// ops/src/device.cpp: the device entry points of kvtile_ops: argument checks
// that need no device memory, then the (preset, head_dim) table of the
// translation unit that instantiates it.
#include <cstddef>
#include <cstdint>

#include "ops_internal.hpp"

namespace kvtile_ops {

// The instantiated device set: the default preset at every head_dim, the
// other two at head_dim 128 (each entry is one CUDA translation unit,
// device_<preset>_d<D>.cu; an entry costs about 1.5 min of nvcc on one core).
extern const device_table table_k4v2_g128_d64;
extern const device_table table_k4v2_g128_d128;
extern const device_table table_k4v2_g128_d256;
extern const device_table table_k4v4_g128_d128;
extern const device_table table_k2v2_g128_d128;

const device_table* find_device_table(int preset, int head_dim) {
  static const device_table* const tables[KVTILE_OPS_NUM_PRESETS][3] = {
      {&table_k4v2_g128_d64, &table_k4v2_g128_d128, &table_k4v2_g128_d256},
      {nullptr, &table_k4v4_g128_d128, nullptr},
      {nullptr, &table_k2v2_g128_d128, nullptr},
  };
  if (preset < 0 || preset >= KVTILE_OPS_NUM_PRESETS) return nullptr;
  const int d = head_dim == 64 ? 0 : head_dim == 128 ? 1 : head_dim == 256 ? 2 : -1;
  return d < 0 ? nullptr : tables[preset][d];
}

namespace {
// The table for the descriptor, or a message and nullptr.
const device_table* table_for(const kvtile_ops_cache* c, const char* function, int* code) {
  if (!c) {
    *code = fail(KVTILE_OPS_NULL_POINTER, "%s: cache descriptor is NULL", function);
    return nullptr;
  }
  if (c->preset < 0 || c->preset >= KVTILE_OPS_NUM_PRESETS) {
    *code = fail(KVTILE_OPS_UNSUPPORTED_PRESET, "%s: preset %d is not 0 (k4v2_g128), 1 (k4v4_g128) or 2 (k2v2_g128)",
                 function, c->preset);
    return nullptr;
  }
  const device_table* t = find_device_table(c->preset, c->head_dim);
  if (!t)
    *code = fail(KVTILE_OPS_UNSUPPORTED_HEAD_DIM,
                 "%s: preset %s has no device instantiation for head_dim %d (built: k4v2_g128 at 64, 128, 256; "
                 "k4v4_g128 and k2v2_g128 at 128)",
                 function, kvtile_ops_preset_name(c->preset), c->head_dim);
  return t;
}
}  // namespace

}  // namespace kvtile_ops

using namespace kvtile_ops;

extern "C" {

int kvtile_ops_supported(int preset, int head_dim) { return find_device_table(preset, head_dim) != nullptr; }

int kvtile_ops_prefill(const kvtile_ops_cache* cache, int dtype, const void* k, const void* v,
                       const int32_t* cu_seqlens, int64_t max_tokens_per_seq, int32_t* flags,
                       kvtile_ops_stream stream) {
  int code = 0;
  const device_table* t = table_for(cache, "kvtile_ops_prefill", &code);
  return t ? t->prefill(*cache, dtype, k, v, cu_seqlens, max_tokens_per_seq, flags, stream) : code;
}

int kvtile_ops_append(const kvtile_ops_cache* cache, int dtype, const void* k_new, const void* v_new, int32_t* flags,
                      kvtile_ops_stream stream) {
  int code = 0;
  const device_table* t = table_for(cache, "kvtile_ops_append", &code);
  return t ? t->append(*cache, dtype, k_new, v_new, flags, stream) : code;
}

int kvtile_ops_dequantize_pages(const kvtile_ops_cache* cache, const int32_t* page_ids, int32_t count, void* out_k,
                                void* out_v, int frame, kvtile_ops_stream stream) {
  int code = 0;
  const device_table* t = table_for(cache, "kvtile_ops_dequantize_pages", &code);
  return t ? t->dequantize_pages(*cache, page_ids, count, out_k, out_v, frame, stream) : code;
}

int kvtile_ops_decode_workspace_bytes(const kvtile_ops_cache* cache, int q_heads, int num_splits, size_t* bytes) {
  int code = 0;
  const device_table* t = table_for(cache, "kvtile_ops_decode_workspace_bytes", &code);
  if (!t) return code;
  if (!bytes) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_workspace_bytes: bytes is NULL");
  if (q_heads <= 0 || cache->kv_heads <= 0 || q_heads % cache->kv_heads != 0 || num_splits < 0 || cache->num_seqs < 0)
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "kvtile_ops_decode_workspace_bytes: q_heads %d must be a positive multiple of kv_heads %d, "
                "num_splits %d >= 0, num_seqs %d >= 0",
                q_heads, cache->kv_heads, num_splits, cache->num_seqs);
  return t->decode_workspace_bytes(*cache, q_heads, num_splits, bytes);
}

int kvtile_ops_decode(const kvtile_ops_cache* cache, int q_dtype, const void* q, void* out, float* lse, int q_heads,
                      float softmax_scale, void* workspace, size_t workspace_bytes, int num_splits,
                      kvtile_ops_stream stream) {
  int code = 0;
  const device_table* t = table_for(cache, "kvtile_ops_decode", &code);
  return t ? t->decode(*cache, q_dtype, q, out, lse, q_heads, softmax_scale, workspace, workspace_bytes, num_splits,
                       stream)
           : code;
}

}  // extern "C"
