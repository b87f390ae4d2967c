// python/kvtile/csrc/torch_ops_fp16.cpp: the fp16 baseline's PyTorch ops
// (kvtile.Fp16PagedCache, kvtile.fp16_decode, DecodePlan over an fp16 cache):
// torch.ops.kvtile.fp16_decode, fp16_decode_plan, fp16_decode_run and
// fp16_decode_workspace_bytes, over the kvtile_ops C ABI's fp16 paged cache.
// The checks and decode helpers are the quantized ops' (torch_ops_internal.h);
// the plan handles are torch_ops.cpp's (decode_plan_create / _destroy / _info
// serve both caches).
#include "torch_ops_internal.h"

using namespace kvtile_torch;

namespace {

#ifdef KVTILE_WITH_CUDA
int64_t fp16_decode_workspace_bytes(int64_t head_dim, int64_t kv_heads, int64_t num_seqs, int64_t max_pages_per_seq,
                                    int64_t q_heads, int64_t num_splits) {
  checker c{"kvtile.fp16_decode_workspace_bytes"};
  c.fits_int32({{head_dim, "head_dim"}, {kv_heads, "kv_heads"}, {num_seqs, "num_seqs"},
                {max_pages_per_seq, "max_pages_per_seq"}, {q_heads, "q_heads"}, {num_splits, "num_splits"}});
  kvtile_ops_fp16_cache d{};
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(max_pages_per_seq);
  kvtile_ops_decode_params p = decode_params(c, q_heads, at::kHalf, 1.0, num_splits, {}, 1, -1, 0.0);
  size_t bytes = 0;
  c.result(kvtile_ops_fp16_decode_workspace_bytes(&d, &p, &bytes));
  return static_cast<int64_t>(bytes);
}

// The fp16 cache's tensors -> the C ABI descriptor: k_pages, v_pages [num_pages, kv_heads, 64, D] fp16,
// page_table [num_seqs, max_pages] int32, seq_lens [num_seqs] int32.
kvtile_ops_fp16_cache fp16_desc(checker& c, const Tensor& k_pages, const Tensor& v_pages, const Tensor& page_table,
                                const Tensor& seq_lens) {
  const int64_t page_tokens = kvtile_ops_fp16_page_tokens();
  c.rank(k_pages, "k_pages", 4, "[num_pages, kv_heads, 64, head_dim]");
  c.rank(page_table, "page_table", 2, "[num_seqs, max_pages_per_seq]");
  const int64_t kv_heads = k_pages.size(1), head_dim = k_pages.size(3), num_seqs = page_table.size(0);
  const std::vector<int64_t> page_shape{k_pages.size(0), kv_heads, page_tokens, head_dim};
  c.cuda(k_pages, "k_pages", {at::kHalf}, page_shape, true);
  c.cuda(v_pages, "v_pages", {at::kHalf}, page_shape, true);
  c.cuda(page_table, "page_table", {at::kInt}, {num_seqs, any});
  c.cuda(seq_lens, "seq_lens", {at::kInt}, {num_seqs});
  c.fits_int32({{k_pages.size(0), "num_pages"}, {num_seqs, "num_seqs"}, {page_table.size(1), "max_pages_per_seq"}});
  kvtile_ops_fp16_cache d{};
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(page_table.size(1));
  d.num_pages = static_cast<int32_t>(k_pages.size(0));
  d.k = k_pages.data_ptr();
  d.v = v_pages.data_ptr();
  d.page_table = page_table.data_ptr<int32_t>();
  d.seq_lens = seq_lens.data_ptr<int32_t>();
  return d;
}

void fp16_decode(const Tensor& k_pages, const Tensor& v_pages, const Tensor& page_table, const Tensor& seq_lens,
                 const Tensor& q, const Tensor& out, const optional<Tensor>& lse, const Tensor& workspace,
                 double softmax_scale, int64_t num_splits, int64_t window_left, double logit_softcap) {
  checker c{"kvtile.fp16_decode"};
  kvtile_ops_fp16_cache d = fp16_desc(c, k_pages, v_pages, page_table, seq_lens);
  check_decode_io(c, q, out, lse, workspace, d.num_seqs, d.kv_heads, d.head_dim);
  kvtile_ops_decode_params p =
      decode_params(c, q.size(1), q.scalar_type(), softmax_scale, num_splits, {}, 1, window_left, logit_softcap);
  decode_with(c, d, p, q, out, lse, workspace, "kvtile.fp16_decode_workspace_bytes");
}

void fp16_decode_plan(int64_t handle, const Tensor& k_pages, const Tensor& v_pages, const Tensor& page_table,
                      const Tensor& seq_lens, const Tensor& host_seq_lens, const Tensor& workspace, int64_t q_heads,
                      at::ScalarType q_dtype, double softmax_scale, int64_t num_splits, int64_t window_left,
                      double logit_softcap) {
  checker c{"kvtile.fp16_decode_plan"};
  kvtile_ops_decode_plan* plan = plan_of(c, handle);
  kvtile_ops_fp16_cache d = fp16_desc(c, k_pages, v_pages, page_table, seq_lens);
  const int32_t* lens = host_lens(c, host_seq_lens, d.num_seqs);
  c.cuda(workspace, "workspace", {at::kByte}, {any}, true);
  check_q_dtype(c, q_dtype);
  kvtile_ops_decode_params p =
      decode_params(c, q_heads, q_dtype, softmax_scale, num_splits, {}, 1, window_left, logit_softcap);
  plan_with(c, plan, d, lens, nullptr, p, workspace, "kvtile.fp16_decode_workspace_bytes");
}

void fp16_decode_run(int64_t handle, const Tensor& k_pages, const Tensor& v_pages, const Tensor& page_table,
                     const Tensor& seq_lens, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
                     const Tensor& workspace, double softmax_scale, int64_t num_splits, int64_t window_left,
                     double logit_softcap) {
  checker c{"kvtile.fp16_decode_run"};
  const kvtile_ops_decode_plan* plan = plan_of(c, handle);
  kvtile_ops_fp16_cache d = fp16_desc(c, k_pages, v_pages, page_table, seq_lens);
  check_decode_io(c, q, out, lse, workspace, d.num_seqs, d.kv_heads, d.head_dim);
  kvtile_ops_decode_params p =
      decode_params(c, q.size(1), q.scalar_type(), softmax_scale, num_splits, {}, 1, window_left, logit_softcap);
  run_with(c, plan, d, p, q, out, lse, workspace);
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvtile, m) {
  m.def("fp16_decode(Tensor k_pages, Tensor v_pages, Tensor page_table, Tensor seq_lens, Tensor q, Tensor(a!) out, "
        "Tensor(b!)? lse, Tensor(c!) workspace, float softmax_scale, int num_splits, int window_left=-1, "
        "float logit_softcap=0.0) -> ()");
  // plan / run (the plan handles are torch_ops.cpp's decode_plan_create / _destroy / _info)
  m.def("fp16_decode_plan(int plan, Tensor k_pages, Tensor v_pages, Tensor page_table, Tensor seq_lens, "
        "Tensor host_seq_lens, Tensor(a!) workspace, int q_heads, ScalarType q_dtype, float softmax_scale, "
        "int num_splits, int window_left=-1, float logit_softcap=0.0) -> ()");
  m.def("fp16_decode_run(int plan, Tensor k_pages, Tensor v_pages, Tensor page_table, Tensor seq_lens, Tensor q, "
        "Tensor(a!) out, Tensor(b!)? lse, Tensor(c!) workspace, float softmax_scale, int num_splits, "
        "int window_left=-1, float logit_softcap=0.0) -> ()");
  // no tensor arguments: one kernel for every backend
  const char* fp16_ws = "fp16_decode_workspace_bytes(int head_dim, int kv_heads, int num_seqs, int max_pages_per_seq, "
                        "int q_heads, int num_splits) -> int";
#ifdef KVTILE_WITH_CUDA
  m.def(fp16_ws, &fp16_decode_workspace_bytes);
#else
  m.def(fp16_ws, torch::CppFunction::makeFromBoxedFunction<&no_cuda>());
#endif
}

#define KVTILE_FP16_DEVICE_OPS(X) X(fp16_decode) X(fp16_decode_plan) X(fp16_decode_run)

KVTILE_TORCH_DEVICE_OPS(KVTILE_FP16_DEVICE_OPS)
