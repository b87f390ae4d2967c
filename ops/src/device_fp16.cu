// ops/src/device_fp16.cu: kvtile_ops' fp16 decode baseline (the same kernel
// family over an unquantized paged fp16 cache), head_dim 64, 128, 256.
#include <cuda_runtime.h>

#include <kvtile/device/attention/paged_decode.cuh>

#include <new>

#include "ops_cuda.cuh"

namespace {

kvtile::fp16_paged_cache_view make_fp16_view(const kvtile_ops_fp16_cache& c) {
  kvtile::fp16_paged_cache_view v;
  v.k = static_cast<kvtile::half_t*>(c.k);
  v.v = static_cast<kvtile::half_t*>(c.v);
  v.page_table = c.page_table;
  v.seq_lens = c.seq_lens;
  v.num_seqs = c.num_seqs;
  v.kv_heads = c.kv_heads;
  v.head_dim = c.head_dim;
  v.page_tokens = kvtile::fp16_page_tokens;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.num_pages = c.num_pages;
  return v;
}


using kvtile_ops::launch_result;
using kvtile_ops::with_args;

// One decode step over the fp16 cache (params checked; head_dim checked here).
int launch_fp16_decode(const kvtile_ops_fp16_cache& cache, const kvtile_ops_decode_params& p, kvtile_ops_stream stream,
                       const char* fn) {
  return kvtile_ops::with_head_dim(cache.head_dim, fn, [&](auto d) -> int {
    if (kvtile::view_error e = kvtile::fp16_structure_error(make_fp16_view(cache), decltype(d)::value))
      return kvtile_ops::fail(static_cast<int>(e.code), "%s: %s", fn, e.rule);
    return with_args(p, false, [&](const auto& a) {
      return launch_result(kvtile::attention::paged_decode_fp16<decltype(d)::value>(
                               make_fp16_view(cache), a, reinterpret_cast<cudaStream_t>(stream)),
                           fn);
    });
  });
}

// The fp16 baseline's checks of its decode and plan functions beyond check_params.
int check_fp16(const kvtile_ops_fp16_cache* cache, const kvtile_ops_decode_params* p, const char* fn) {
  if (!cache) return kvtile_ops::fail(KVTILE_OPS_NULL_POINTER, "%s: cache is NULL", fn);
  if (p->qo_indptr || p->max_q_tokens != 1)
    return kvtile_ops::fail(KVTILE_OPS_INVALID_ARGUMENT,
                            "%s: the fp16 baseline decodes one token per sequence (qo_indptr NULL, max_q_tokens 1)",
                            fn);
  return kvtile_ops::check_heads(p->q_heads, cache->kv_heads, cache->num_seqs, fn);
}

}  // namespace

namespace kvtile_ops {
void* new_plan_impl() { return new (std::nothrow) kvtile::attention::decode_plan(); }
void delete_plan_impl(void* impl) { delete static_cast<kvtile::attention::decode_plan*>(impl); }
void limit_plan_ctas(void* impl, int max_ctas) { static_cast<kvtile::attention::decode_plan*>(impl)->limit_ctas(max_ctas); }
void plan_impl_info(const void* impl, std::int32_t* ctas, std::int32_t* chunks) {
  const auto* p = static_cast<const kvtile::attention::decode_plan*>(impl);
  *ctas = p->ctas();
  *chunks = p->chunks();
}
}  // namespace kvtile_ops

extern "C" {

int kvtile_ops_fp16_decode(const kvtile_ops_fp16_cache* cache, const kvtile_ops_decode_params* params,
                           kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_fp16_decode";
  if (int e = kvtile_ops::check_params(params, fn, true)) return e;
  if (int e = kvtile_ops::check_io(params, fn)) return e;
  if (int e = check_fp16(cache, params, fn)) return e;
  return launch_fp16_decode(*cache, *params, stream, fn);
}

int kvtile_ops_decode_plan_build_fp16(kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* cache,
                                const int32_t* host_seq_lens, const kvtile_ops_decode_params* params,
                                kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_decode_plan_build_fp16";
  if (int e = kvtile_ops::check_plan_args(plan, cache, params, fn, false)) return e;
  plan->planned = false;
  if (int e = check_fp16(cache, params, fn)) return e;
  const long long capacity = static_cast<long long>(cache->max_pages_per_seq < 0 ? 0 : cache->max_pages_per_seq) *
                             kvtile_ops_fp16_page_tokens();
  if (int e = kvtile_ops::check_host_lens(host_seq_lens, cache->num_seqs, capacity, fn)) return e;
  const int r = kvtile_ops::with_head_dim(cache->head_dim, fn, [&](auto d) -> int {
    auto* impl = static_cast<kvtile::attention::decode_plan*>(plan->impl);
    return with_args(*params, true, [&](const auto& a) {
      return launch_result(impl->template plan_fp16<decltype(d)::value>(make_fp16_view(*cache), host_seq_lens, a,
                                                                        reinterpret_cast<cudaStream_t>(stream)),
                           fn);
    });
  });
  if (r == KVTILE_OPS_SUCCESS)
    kvtile_ops::record_plan(plan, true, -1, cache->head_dim, cache->kv_heads, cache->num_seqs,
                            cache->max_pages_per_seq, *params);
  return r;
}

int kvtile_ops_decode_plan_run_fp16(const kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* cache,
                               const kvtile_ops_decode_params* params, kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_decode_plan_run_fp16";
  if (int e = kvtile_ops::check_plan_args(plan, cache, params, fn, true)) return e;
  if (int e = check_fp16(cache, params, fn)) return e;
  if (int e = kvtile_ops::check_against_plan(plan, true, -1, cache->head_dim, cache->kv_heads, cache->num_seqs,
                                             cache->max_pages_per_seq, *params, fn))
    return e;
  return kvtile_ops::with_head_dim(cache->head_dim, fn, [&](auto d) -> int {
    const auto* impl = static_cast<const kvtile::attention::decode_plan*>(plan->impl);
    return with_args(*params, false, [&](const auto& a) {
      return kvtile_ops::run_result(impl->template run_fp16<decltype(d)::value>(
                                        make_fp16_view(*cache), a, reinterpret_cast<cudaStream_t>(stream)),
                                    fn);
    });
  });
}


int kvtile_ops_fp16_decode_workspace_bytes(const kvtile_ops_fp16_cache* cache, const kvtile_ops_decode_params* params,
                                           size_t* bytes) {
  const char* fn = "kvtile_ops_fp16_decode_workspace_bytes";
  if (!bytes) return kvtile_ops::fail(KVTILE_OPS_NULL_POINTER, "%s: bytes is NULL", fn);
  if (int e = kvtile_ops::check_params(params, fn, false)) return e;
  if (int e = check_fp16(cache, params, fn)) return e;
  return kvtile_ops::with_head_dim(cache->head_dim, fn, [&](auto d) {
    *bytes = kvtile::attention::workspace_bytes_fp16<decltype(d)::value>(make_fp16_view(*cache), params->q_heads,
                                                                        params->num_splits);
    return KVTILE_OPS_SUCCESS;
  });
}

}  // extern "C"
