// ops/src/device_speculative.cu: the C entry points of the draft / fork
// device functions (kvtile_ops.h, "speculative decoding and forks"): argument
// checks that need no device memory, then the (preset, head_dim) table of
// device_spec_<preset>_d<D>.cu.
#include "speculative_ops.cuh"

namespace kvtile_ops {

extern const spec_table spec_table_k4v2_g128_d64;
extern const spec_table spec_table_k4v2_g128_d128;
extern const spec_table spec_table_k4v2_g128_d256;
extern const spec_table spec_table_k4v4_g128_d128;
extern const spec_table spec_table_k2v2_g128_d128;

namespace {
// The instantiated set is device_instances (ops_internal.hpp), as device.cpp's.
const spec_table* spec_table_for(const kvtile_ops_cache* c, const char* function, int* code) {
  if (!c) {
    *code = fail(KVTILE_OPS_NULL_POINTER, "%s: cache descriptor is NULL", function);
    return nullptr;
  }
  static const spec_table* const tables[] = {&spec_table_k4v2_g128_d64, &spec_table_k4v2_g128_d128,
                                             &spec_table_k4v2_g128_d256, &spec_table_k4v4_g128_d128,
                                             &spec_table_k2v2_g128_d128};  // device_instances' order
  static_assert(sizeof(tables) / sizeof(tables[0]) == num_device_instances, "one table per device instance");
  const int i = device_instance_index(c->preset, c->head_dim);
  const spec_table* t = i >= 0 && tables[i]->preset == c->preset && tables[i]->head_dim == c->head_dim ? tables[i] : nullptr;
  if (!t)
    *code = fail(c->preset < 0 || c->preset >= KVTILE_OPS_NUM_PRESETS ? KVTILE_OPS_UNSUPPORTED_PRESET
                                                                      : KVTILE_OPS_UNSUPPORTED_HEAD_DIM,
                 "%s: no device instantiation for preset %d at head_dim %d (built: %s)", function, c->preset,
                 c->head_dim, device_instance_list());
  return t;
}
}  // namespace

}  // namespace kvtile_ops

using namespace kvtile_ops;

extern "C" {

int kvtile_ops_append_drafts(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts, int dtype, const void* k,
                             const void* v, const int32_t* cu_drafts, int32_t* flags, kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_append_drafts";
  int code = 0;
  const spec_table* t = spec_table_for(cache, fn, &code);
  if (!t) return code;
  if (!drafts) return fail(KVTILE_OPS_NULL_POINTER, "%s: drafts is NULL (allocate the staging area)", fn);
  return t->append_drafts(*cache, *drafts, dtype, k, v, cu_drafts, flags, stream);
}

int kvtile_ops_commit_drafts(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts, const int32_t* accepted,
                             int32_t* new_seq_lens, int32_t* flags, kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_commit_drafts";
  int code = 0;
  const spec_table* t = spec_table_for(cache, fn, &code);
  if (!t) return code;
  if (!drafts) return fail(KVTILE_OPS_NULL_POINTER, "%s: drafts is NULL (allocate the staging area)", fn);
  return t->commit_drafts(*cache, *drafts, accepted, new_seq_lens, flags, stream);
}

int kvtile_ops_fork(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts, const int32_t* src_slots,
                    const int32_t* dst_slots, int32_t count, int32_t* flags, kvtile_ops_stream stream) {
  int code = 0;
  const spec_table* t = spec_table_for(cache, "kvtile_ops_fork", &code);
  return t ? t->fork(*cache, drafts, src_slots, dst_slots, count, flags, stream) : code;
}

}  // extern "C"
