// ops/src/device_fp16.cu: kvtile_ops' fp16 decode baseline (the same kernel
// family over an unquantized paged fp16 cache), head_dim 64, 128, 256.
#include <cuda_runtime.h>

#include <kvtile/device/attention/paged_decode.cuh>

#include "ops_internal.hpp"

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
  v.page_tokens = 64;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.num_pages = c.num_pages;
  return v;
}

template <class F>
int with_dim(int head_dim, const char* function, F&& f) {
  switch (head_dim) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    default:
      return kvtile_ops::fail(KVTILE_OPS_UNSUPPORTED_HEAD_DIM, "%s: head_dim %d is not 64, 128 or 256", function,
                              head_dim);
  }
}

}  // namespace

extern "C" {

int kvtile_ops_fp16_decode_workspace_bytes(const kvtile_ops_fp16_cache* cache, int q_heads, int num_splits,
                                           size_t* bytes) {
  const char* fn = "kvtile_ops_fp16_decode_workspace_bytes";
  if (!cache || !bytes) return kvtile_ops::fail(KVTILE_OPS_NULL_POINTER, "%s: cache or bytes is NULL", fn);
  if (q_heads <= 0 || cache->kv_heads <= 0 || q_heads % cache->kv_heads != 0 || num_splits < 0)
    return kvtile_ops::fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: q_heads %d must be a positive multiple of kv_heads %d",
                            fn, q_heads, cache->kv_heads);
  return with_dim(cache->head_dim, fn, [&](auto d) {
    *bytes = kvtile::attention::workspace_bytes_fp16<decltype(d)::value>(make_fp16_view(*cache), q_heads, num_splits);
    return KVTILE_OPS_SUCCESS;
  });
}

int kvtile_ops_fp16_decode(const kvtile_ops_fp16_cache* cache, int q_dtype, const void* q, void* out, float* lse,
                           int q_heads, float softmax_scale, void* workspace, size_t workspace_bytes, int num_splits,
                           kvtile_ops_stream stream) {
  const char* fn = "kvtile_ops_fp16_decode";
  if (!cache) return kvtile_ops::fail(KVTILE_OPS_NULL_POINTER, "%s: cache is NULL", fn);
  return with_dim(cache->head_dim, fn, [&](auto d) -> int {
    constexpr int D = decltype(d)::value;
    auto run = [&](auto qt) -> int {
      using QT = decltype(qt);
      kvtile::attention::decode_args<QT> a;
      a.q = static_cast<const QT*>(q);
      a.out = static_cast<QT*>(out);
      a.lse = lse;
      a.q_heads = q_heads;
      a.softmax_scale = softmax_scale;
      a.workspace = workspace;
      a.workspace_bytes = workspace_bytes;
      a.num_splits = num_splits;
      const kvtile::status s =
          kvtile::attention::paged_decode_fp16<D>(make_fp16_view(*cache), a, reinterpret_cast<cudaStream_t>(stream));
      if (s == kvtile::status::cuda_error)
        return kvtile_ops::fail(KVTILE_OPS_CUDA_ERROR, "%s: CUDA error: %s", fn,
                                cudaGetErrorString(cudaPeekAtLastError()));
      return kvtile_ops::from_status(s, fn);
    };
    if (q_dtype == KVTILE_OPS_FP16) return run(kvtile::half_t{});
    if (q_dtype == KVTILE_OPS_BF16) return run(kvtile::bfloat16_t{});
    return kvtile_ops::fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "%s: queries must be fp16 or bf16 (dtype %d)", fn, q_dtype);
  });
}

}  // extern "C"
