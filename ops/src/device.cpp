// ops/src/device.cpp: the device entry points of kvtile_ops: argument checks
// that need no device memory, then the (preset, head_dim) table of the
// translation unit that instantiates it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>

#include "ops_internal.hpp"

namespace kvtile_ops {

// The device tables, in the order of device_instances (ops_internal.hpp).
extern const device_table table_k4v2_g128_d64;
extern const device_table table_k4v2_g128_d128;
extern const device_table table_k4v2_g128_d256;
extern const device_table table_k4v4_g128_d128;
extern const device_table table_k2v2_g128_d128;

const device_table* find_device_table(int preset, int head_dim) {
  static const device_table* const tables[] = {&table_k4v2_g128_d64, &table_k4v2_g128_d128, &table_k4v2_g128_d256,
                                               &table_k4v4_g128_d128, &table_k2v2_g128_d128};
  static_assert(sizeof(tables) / sizeof(tables[0]) == num_device_instances, "one table per device instance");
  const int i = device_instance_index(preset, head_dim);
  if (i < 0) return nullptr;
  const device_table* t = tables[i];
  // Each table names its instance (KVTILE_OPS_DEVICE_TABLE): a list out of order fails here, in every test.
  return t->preset == preset && t->head_dim == head_dim ? t : nullptr;
}

namespace {
// The table for the descriptor, or a message and nullptr.
const device_table* table_for(const kvtile_ops_cache* c, const char* function, int* code) {
  if (!c) {
    *code = fail(KVTILE_OPS_NULL_POINTER, "%s: cache descriptor is NULL", function);
    return nullptr;
  }
  if (c->preset < 0 || c->preset >= KVTILE_OPS_NUM_PRESETS) {
    *code = fail(KVTILE_OPS_UNSUPPORTED_PRESET, "%s: preset %d is not %s", function, c->preset, preset_choices());
    return nullptr;
  }
  const device_table* t = find_device_table(c->preset, c->head_dim);
  if (!t)
    *code = fail(KVTILE_OPS_UNSUPPORTED_HEAD_DIM, "%s: preset %s has no device instantiation for head_dim %d (built: %s)",
                 function, kvtile_ops_preset_name(c->preset), c->head_dim, device_instance_list());
  return t;
}
}  // namespace

int check_params(const kvtile_ops_decode_params* p, const char* function, bool need_io) {
  if (!p) return fail(KVTILE_OPS_NULL_POINTER, "%s: params is NULL", function);
  if (p->struct_size != sizeof(kvtile_ops_decode_params))
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "%s: params->struct_size %zu is not sizeof(kvtile_ops_decode_params) = %zu of this library "
                "(kvtile_ops_decode_params_init sets it)",
                function, p->struct_size, sizeof(kvtile_ops_decode_params));
  if (p->q_dtype != KVTILE_OPS_FP16 && p->q_dtype != KVTILE_OPS_BF16)
    return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "%s: queries must be fp16 or bf16 (q_dtype %d)", function, p->q_dtype);
  if (kvtile::attention::arg_error e =
          kvtile::attention::check_decode_options(p->q_heads, p->max_q_tokens, p->qo_indptr != nullptr, p->window_left,
                                                  p->logit_softcap, p->num_splits, need_io, p->softmax_scale))
    return fail_option(e, function);
  if (!need_io) return KVTILE_OPS_SUCCESS;  // the workspace query reads the sizes only
  if (!p->workspace) return fail(KVTILE_OPS_NULL_POINTER, "%s: workspace is NULL", function);
  if (reinterpret_cast<std::uintptr_t>(p->workspace) % 16 != 0)
    return fail(KVTILE_OPS_MISALIGNED, "%s: workspace is not 16-byte aligned", function);
  return KVTILE_OPS_SUCCESS;
}

// q_heads against the cache's kv_heads, num_seqs in range.
int check_heads(int q_heads, int kv_heads, int num_seqs, const char* function) {
  if (kv_heads <= 0 || q_heads % kv_heads != 0 || num_seqs < 0)
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "%s: q_heads %d must be a positive multiple of kv_heads %d, num_seqs %d >= 0", function, q_heads,
                kv_heads, num_seqs);
  return KVTILE_OPS_SUCCESS;
}

int check_io(const kvtile_ops_decode_params* p, const char* function) {
  if (!p->q || !p->out) return fail(KVTILE_OPS_NULL_POINTER, "%s: q or out is NULL", function);
  return KVTILE_OPS_SUCCESS;
}

// Host lengths of a plan: non-null, each in [0, capacity].
int check_host_lens(const std::int32_t* lens, int num_seqs, long long capacity, const char* function) {
  if (!lens && num_seqs > 0) return fail(KVTILE_OPS_NULL_POINTER, "%s: host_seq_lens is NULL", function);
  for (int s = 0; s < num_seqs; ++s)
    if (lens[s] < 0 || lens[s] > capacity)
      return fail(KVTILE_OPS_INVALID_ARGUMENT,
                  "%s: host_seq_lens[%d] = %d is outside [0, %lld] (the cache's max_pages_per_seq x tile tokens, "
                  "plus the tail)",
                  function, s, lens[s], capacity);
  return KVTILE_OPS_SUCCESS;
}

// run against the plan: which planned field differs (0 when none).
int check_against_plan(const kvtile_ops_decode_plan* plan, bool fp16, int preset, int head_dim, int kv_heads,
                       int num_seqs, int max_pages, const kvtile_ops_decode_params& p, const char* function) {
  if (!plan->planned)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: the plan has not been planned (or its last plan failed)", function);
  const kvtile_ops_decode_params& q = plan->params;
  auto differs = [&](const char* what, long long got, long long planned) {
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: %s %lld differs from the planned %lld (plan again for it)", function,
                what, got, planned);
  };
  if (fp16 != plan->fp16)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: the plan was made for %s cache", function,
                plan->fp16 ? "an fp16" : "a quantized");
  if (!fp16 && preset != plan->preset) return differs("preset", preset, plan->preset);
  if (head_dim != plan->head_dim) return differs("head_dim", head_dim, plan->head_dim);
  if (kv_heads != plan->kv_heads) return differs("kv_heads", kv_heads, plan->kv_heads);
  if (num_seqs != plan->num_seqs) return differs("num_seqs", num_seqs, plan->num_seqs);
  if (max_pages != plan->max_pages_per_seq) return differs("max_pages_per_seq", max_pages, plan->max_pages_per_seq);
  if (p.q_dtype != q.q_dtype) return differs("q_dtype", p.q_dtype, q.q_dtype);
  if (p.q_heads != q.q_heads) return differs("q_heads", p.q_heads, q.q_heads);
  if (p.max_q_tokens != q.max_q_tokens) return differs("max_q_tokens", p.max_q_tokens, q.max_q_tokens);
  if (p.qo_indptr != q.qo_indptr)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: qo_indptr %p is not the planned %p", function,
                static_cast<const void*>(p.qo_indptr), static_cast<const void*>(q.qo_indptr));
  if (p.window_left != q.window_left) return differs("window_left", p.window_left, q.window_left);
  if (p.num_splits != q.num_splits) return differs("num_splits", p.num_splits, q.num_splits);
  if (p.workspace != q.workspace || p.workspace_bytes != q.workspace_bytes)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: workspace (%p, %zu bytes) is not the planned (%p, %zu bytes)",
                function, p.workspace, p.workspace_bytes, q.workspace, q.workspace_bytes);
  return KVTILE_OPS_SUCCESS;
}

// Records what a successful plan was made for.
void record_plan(kvtile_ops_decode_plan* plan, bool fp16, int preset, int head_dim, int kv_heads, int num_seqs,
                 int max_pages, const kvtile_ops_decode_params& p) {
  plan->planned = true;
  plan->fp16 = fp16;
  plan->preset = preset;
  plan->head_dim = head_dim;
  plan->kv_heads = kv_heads;
  plan->num_seqs = num_seqs;
  plan->max_pages_per_seq = max_pages;
  plan->params = p;
}

int check_plan_args(const kvtile_ops_decode_plan* plan, const void* cache, const kvtile_ops_decode_params* params,
                    const char* function, bool run) {
  if (!plan) return fail(KVTILE_OPS_NULL_POINTER, "%s: plan is NULL", function);
  if (!cache) return fail(KVTILE_OPS_NULL_POINTER, "%s: cache descriptor is NULL", function);
  if (int e = check_params(params, function, true)) return e;
  return run ? check_io(params, function) : KVTILE_OPS_SUCCESS;
}

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

int kvtile_ops_decode_params_init(kvtile_ops_decode_params* params, size_t struct_size) {
  if (!params) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_params_init: params is NULL");
  if (struct_size != sizeof(kvtile_ops_decode_params))
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "kvtile_ops_decode_params_init: struct_size %zu is not sizeof(kvtile_ops_decode_params) = %zu of "
                "this library",
                struct_size, sizeof(kvtile_ops_decode_params));
  *params = kvtile_ops_decode_params{};
  params->struct_size = struct_size;
  params->q_dtype = KVTILE_OPS_FP16;
  params->max_q_tokens = 1;
  params->window_left = -1;
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_workspace_bytes(const kvtile_ops_cache* cache, const kvtile_ops_decode_params* params,
                                      size_t* bytes) {
  const char* fn = "kvtile_ops_decode_workspace_bytes";
  int code = 0;
  const device_table* t = table_for(cache, fn, &code);
  if (!t) return code;
  if (!bytes) return fail(KVTILE_OPS_NULL_POINTER, "%s: bytes is NULL", fn);
  if (int e = check_params(params, fn, false)) return e;
  if (int e = check_heads(params->q_heads, cache->kv_heads, cache->num_seqs, fn)) return e;
  return t->decode_workspace_bytes(*cache, *params, bytes);
}

int kvtile_ops_decode(const kvtile_ops_cache* cache, const kvtile_ops_decode_params* params,
                      kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_decode";
  int code = 0;
  const device_table* t = table_for(cache, fn, &code);
  if (!t) return code;
  if (int e = check_params(params, fn, true)) return e;
  if (int e = check_io(params, fn)) return e;
  if (int e = check_heads(params->q_heads, cache->kv_heads, cache->num_seqs, fn)) return e;
  return t->decode(*cache, *params, stream);
}

int kvtile_ops_decode_plan_create(kvtile_ops_decode_plan** plan) {
  if (!plan) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_plan_create: plan is NULL");
  *plan = nullptr;
  auto* p = new (std::nothrow) kvtile_ops_decode_plan();
  void* impl = p ? new_plan_impl() : nullptr;
  if (!impl || !remember_plan(p)) {
    if (impl) delete_plan_impl(impl);
    delete p;
    return fail(KVTILE_OPS_INSUFFICIENT_SPACE, "kvtile_ops_decode_plan_create: out of host memory");
  }
  p->impl = impl;
  *plan = p;
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_plan_destroy(kvtile_ops_decode_plan* plan) {
  if (!plan) return KVTILE_OPS_SUCCESS;
  if (!forget_plan(plan))  // checked before the handle is read: a destroyed plan's memory is gone
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "kvtile_ops_decode_plan_destroy: %p is not a live plan (destroyed already, or not from "
                "kvtile_ops_decode_plan_create)",
                static_cast<void*>(plan));
  delete_plan_impl(plan->impl);
  delete plan;
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_plan_limit_ctas(kvtile_ops_decode_plan* plan, int32_t max_ctas) {
  if (!plan) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_plan_limit_ctas: plan is NULL");
  if (max_ctas < 0)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_decode_plan_limit_ctas: max_ctas %d must be >= 0 (0: one per SM)",
                max_ctas);
  limit_plan_ctas(plan->impl, max_ctas);
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_plan_info(const kvtile_ops_decode_plan* plan, int32_t* ctas, int32_t* chunks) {
  if (!plan || !ctas || !chunks)
    return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_plan_info: plan, ctas or chunks is NULL");
  if (!plan->planned) {
    *ctas = *chunks = 0;
    return KVTILE_OPS_SUCCESS;
  }
  plan_impl_info(plan->impl, ctas, chunks);
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_decode_plan_build(kvtile_ops_decode_plan* plan, const kvtile_ops_cache* cache, const int32_t* host_seq_lens,
                           const int32_t* host_qo_indptr, const kvtile_ops_decode_params* params,
                           kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_decode_plan_build";
  if (int e = check_plan_args(plan, cache, params, fn, false)) return e;
  plan->planned = false;
  int code = 0;
  const device_table* t = table_for(cache, fn, &code);
  if (!t) return code;
  if (int e = check_heads(params->q_heads, cache->kv_heads, cache->num_seqs, fn)) return e;
  kvtile_ops_preset_info info{};
  if (int e = kvtile_ops_get_preset_info(cache->preset, cache->head_dim, &info)) return e;
  const long long capacity =
      static_cast<long long>(cache->max_pages_per_seq < 0 ? 0 : cache->max_pages_per_seq) * info.tile_tokens +
      info.tile_tokens - 1;
  if (int e = check_host_lens(host_seq_lens, cache->num_seqs, capacity, fn)) return e;
  if (kvtile::attention::arg_error e = kvtile::attention::check_host_qo_indptr(
          host_qo_indptr, cache->num_seqs, params->max_q_tokens, params->qo_indptr != nullptr))
    return fail_option(e, fn);
  const int r = t->plan(plan->impl, *cache, host_seq_lens, host_qo_indptr, *params, stream);
  if (r == KVTILE_OPS_SUCCESS)
    record_plan(plan, false, cache->preset, cache->head_dim, cache->kv_heads, cache->num_seqs,
                cache->max_pages_per_seq, *params);
  return r;
}

int kvtile_ops_decode_plan_run(const kvtile_ops_decode_plan* plan, const kvtile_ops_cache* cache,
                          const kvtile_ops_decode_params* params, kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_decode_plan_run";
  if (int e = check_plan_args(plan, cache, params, fn, true)) return e;
  if (int e = check_against_plan(plan, false, cache->preset, cache->head_dim, cache->kv_heads, cache->num_seqs,
                                 cache->max_pages_per_seq, *params, fn))
    return e;
  int code = 0;
  const device_table* t = table_for(cache, fn, &code);
  return t ? t->run(plan->impl, *cache, *params, stream) : code;
}

}  // extern "C"
