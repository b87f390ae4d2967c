// python/kvtile/csrc/torch_ops.cpp: kvtile's PyTorch ops (namespace kvtile),
// registered with TORCH_LIBRARY so that torch.compile, CUDA graphs and the
// dispatcher see them. Every op checks each tensor's device, dtype, shape,
// contiguity and alignment and raises a Python ValueError / TypeError naming
// the op and the argument; then it calls the kvtile_ops C ABI on the current
// torch CUDA stream. Without CUDA (KVTILE_WITH_CUDA undefined) only the host
// codec ops run; the device ops raise an error naming why (no_cuda_reason()).
//
// The module kvtile._C is a plain CPython extension module (no pybind11):
// importing it loads this library, whose static initializers register the ops.
// This file has the host codec, the quantized cache's ops, the plan handles
// and speculative decoding; torch_ops_fp16.cpp the fp16 baseline's ops; what
// both use (the argument checker, the decode helpers) is torch_ops_internal.h.
#include <Python.h>

#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "rotation.h"
#include "torch_ops_internal.h"

using namespace kvtile_torch;

// Why this build has no device ops ("" with CUDA): setup.py's decision,
// KVTILE_NO_CUDA_REASON = 1 (KVTILE_CUDA=0 asked for it), 2 (the torch built
// against has no CUDA), 3 (no CUDA toolkit found). Also kvtile._C.no_cuda_reason.
const char* kvtile_torch::no_cuda_reason() {
#if defined(KVTILE_WITH_CUDA)
  return "";
#elif KVTILE_NO_CUDA_REASON == 2
  return "this build of kvtile has no CUDA support: the torch it was built against is CPU-only "
         "(torch.version.cuda is None); install a CUDA build of torch, then rebuild kvtile";
#elif KVTILE_NO_CUDA_REASON == 3
  return "this build of kvtile has no CUDA support: no CUDA toolkit was found when it was built "
         "(nvcc, CUDA_HOME); install one or set CUDA_HOME, then rebuild kvtile";
#else
  return "this build of kvtile has no CUDA support: it was built with KVTILE_CUDA=0 (the host codec only); "
         "rebuild without it for the device ops";
#endif
}

namespace {

std::vector<int64_t> preset_info(int64_t preset, int64_t head_dim) {
  const auto i = preset_info_of(checker{"kvtile.preset_info"}, preset, head_dim);
  return {i.tile_tokens, i.key_bits, i.value_bits, i.record_bytes};
}

// The C ABI's registry and limits, from which the package takes its PRESETS,
// MAX_Q_TOKENS, MAX_DRAFT_TOKENS, FLAG_BAD_DRAFTS and fp16 page size (the C
// constants mirror the core's: ops/src/ops_internal.hpp).
std::string preset_name(int64_t preset) {
  const char* name = preset >= 0 && preset < KVTILE_OPS_NUM_PRESETS ? kvtile_ops_preset_name(static_cast<int>(preset))
                                                                     : nullptr;
  TORCH_CHECK_VALUE(name != nullptr, "kvtile.preset_name: preset ", preset, " is not in [0, ", KVTILE_OPS_NUM_PRESETS,
                    ")");
  return name;
}
std::vector<int64_t> abi_limits() {
  return {KVTILE_OPS_NUM_PRESETS, KVTILE_OPS_MAX_Q_TOKENS, KVTILE_OPS_MAX_DRAFT_TOKENS, KVTILE_OPS_FLAG_BAD_DRAFTS,
          kvtile_ops_fp16_page_tokens()};
}

// The decode options' rules (the C ABI's kvtile_ops_check_decode_options, the core's
// check_decode_options), for the package's checks before it has tensors; CPU builds too.
void check_decode_options(const std::string& op, int64_t q_heads, int64_t max_q_tokens, bool has_qo_indptr,
                          int64_t window_left, double logit_softcap, int64_t num_splits, bool need_io,
                          double softmax_scale) {
  const checker c{op.c_str()};
  auto i32 = [&](const char* name, int64_t v) {  // what narrowing needs; the ranges are the rule's
    TORCH_CHECK_VALUE(v >= INT32_MIN && v <= INT32_MAX, c.op, ": ", name, " (", v, ") must fit in int32");
    return static_cast<int32_t>(v);
  };
  const int code = kvtile_ops_check_decode_options(
      i32("q_heads", q_heads), i32("max_q_tokens", max_q_tokens), has_qo_indptr, i32("window_left", window_left),
      static_cast<float>(logit_softcap), i32("num_splits", num_splits), need_io, static_cast<float>(softmax_scale));
  if (code == KVTILE_OPS_SUCCESS) return;
  // "<op>: <option> <value> <rule>": the ABI's text with the Python op in place of its function name
  std::string msg = kvtile_ops_last_error();
  const std::string prefix = "kvtile_ops_check_decode_options: ";
  if (msg.compare(0, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
  TORCH_CHECK_VALUE(false, op, ": ", msg);
}

bool has_cuda() {
#ifdef KVTILE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// ---- host codec --------------------------------------------------------------------

Tensor encode_tiles(const Tensor& keys, const Tensor& values, int64_t preset, bool paged) {
  checker c{"kvtile.encode_tiles"};
  c.rank(keys, "keys", 3, "[num_tiles, G, head_dim]");
  const int64_t n = keys.size(0), head_dim = keys.size(2);
  const auto info = preset_info_of(c, preset, head_dim);
  c.cpu(keys, "keys", {at::kHalf, at::kBFloat16, at::kFloat}, {any, info.tile_tokens, head_dim});
  c.same_dtype(values, "values", keys, "keys");
  c.cpu(values, "values", {keys.scalar_type()}, {n, info.tile_tokens, head_dim});
  Tensor out = at::empty({n, info.record_bytes}, keys.options().dtype(at::kByte));
  c.result(kvtile_ops_encode_tiles_host(static_cast<int>(preset), static_cast<int>(head_dim),
                                        dtype_code(keys.scalar_type()), keys.data_ptr(), values.data_ptr(), n,
                                        out.data_ptr(), paged ? 1 : 0));
  return out;
}

std::tuple<Tensor, Tensor> decode_tiles(const Tensor& records, int64_t preset, int64_t head_dim, at::ScalarType dtype,
                                        bool original_frame) {
  checker c{"kvtile.decode_tiles"};
  const auto info = preset_info_of(c, preset, head_dim);
  c.cpu(records, "records", {at::kByte}, {any, info.record_bytes});
  TORCH_CHECK_TYPE(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat, c.op,
                   ": dtype must be float16, bfloat16 or float32 (got ", c10::toString(dtype), ")");
  Tensor k = at::empty({records.size(0), info.tile_tokens, head_dim}, records.options().dtype(dtype));
  Tensor v = at::empty_like(k);
  // The buffer's byte size goes with it: the library checks it against the record count (truncated_record).
  c.result(kvtile_ops_decode_tiles_host(static_cast<int>(preset), static_cast<int>(head_dim), records.data_ptr(),
                                        static_cast<size_t>(records.nbytes()), records.size(0), dtype_code(dtype),
                                        k.data_ptr(), v.data_ptr(),
                                        original_frame ? KVTILE_OPS_FRAME_ORIGINAL : KVTILE_OPS_FRAME_ROTATED));
  return {k, v};
}

// ---- rotation --------------------------------------------------------------------------
// x [..., head_dim] (fp16, bf16 or fp32; CPU, or CUDA in a CUDA build) -> the rows rotated by
// the preset's rotation (inverse: back to the original frame, e.g. the fp16 tails, which the
// cache keeps rotated), computed in fp32 by the library's transform (rotation.h: the codec's
// operations, so the result equals the codec's original frame bit for bit), returned as dtype.
Tensor rotate(const Tensor& x, int64_t preset, bool inverse, at::ScalarType dtype) {
  checker c{"kvtile.rotate"};
  TORCH_CHECK_VALUE(x.dim() >= 1, c.op, ": x must have shape [..., head_dim] (got ", dims_of(x), ")");
  const int64_t head_dim = x.size(-1);
  preset_info_of(c, preset, head_dim);  // the preset and head_dim are instantiated (else ValueError)
  const auto fp = [](at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat; };
  TORCH_CHECK_TYPE(fp(x.scalar_type()), c.op, ": x must have dtype float16, bfloat16 or float32 (got ",
                   c10::toString(x.scalar_type()), ")");
  TORCH_CHECK_TYPE(fp(dtype), c.op, ": dtype must be float16, bfloat16 or float32 (got ", c10::toString(dtype), ")");
  // a new contiguous fp32 copy (never x itself), rotated in place
  Tensor buf = x.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
  const int64_t rows = buf.numel() / head_dim;
  c.fits_int32({{rows, "rows (x.numel() / head_dim)"}});
#ifdef KVTILE_WITH_CUDA
  if (x.is_cuda()) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int e = rotate_rows_cuda(preset, head_dim, buf.data_ptr<float>(), rows, inverse,
                                   at::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK_VALUE(e != -1, c.op, ": preset ", preset, " with head_dim ", head_dim, " has no rotation");
    TORCH_CHECK(e == 0, c.op, ": ", cudaGetErrorString(static_cast<cudaError_t>(e)));
    return buf.to(dtype);
  }
#endif
  TORCH_CHECK_VALUE(rotate_rows_host(preset, head_dim, buf.data_ptr<float>(), rows, inverse), c.op, ": preset ",
                    preset, " with head_dim ", head_dim, " has no rotation");
  return buf.to(dtype);
}

// ---- device ops -----------------------------------------------------------------------

#ifdef KVTILE_WITH_CUDA
// The quantized cache's tensors -> the C ABI descriptor.
//   pages [num_pages, kv_heads, record_bytes] uint8, page_table [num_seqs, max_pages] int32,
//   seq_lens [num_seqs] int32, tail_k/v [num_slots, kv_heads, G, D] fp16, sinks like tails or None,
//   tail_slots [num_seqs] int32 or None.
kvtile_ops_cache cache_desc(checker& c, int64_t preset, const Tensor& pages, const Tensor& page_table,
                            const Tensor& seq_lens, const Tensor& tail_k, const Tensor& tail_v,
                            const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
                            const optional<Tensor>& tail_slots) {
  c.rank(tail_k, "tail_k", 4, "[num_slots, kv_heads, G, head_dim]");
  c.rank(pages, "pages", 3, "[num_pages, kv_heads, record_bytes]");
  c.rank(page_table, "page_table", 2, "[num_seqs, max_pages_per_seq]");
  const int64_t head_dim = tail_k.size(3), kv_heads = pages.size(1), num_seqs = page_table.size(0);
  const int64_t slots = tail_k.size(0);
  const auto info = preset_info_of(c, preset, head_dim);
  const std::vector<int64_t> tail_shape{slots, kv_heads, info.tile_tokens, head_dim};
  c.cuda(pages, "pages", {at::kByte}, {any, kv_heads, info.record_bytes}, true);
  c.cuda(page_table, "page_table", {at::kInt}, {num_seqs, any});
  c.cuda(seq_lens, "seq_lens", {at::kInt}, {num_seqs});
  c.cuda(tail_k, "tail_k", {at::kHalf}, tail_shape, true);
  c.cuda(tail_v, "tail_v", {at::kHalf}, tail_shape, true);
  TORCH_CHECK_VALUE(sink_k.has_value() == sink_v.has_value(), c.op, ": sink_k and sink_v must both be given or both None");
  if (sink_k) {
    c.cuda(*sink_k, "sink_k", {at::kHalf}, tail_shape, true);
    c.cuda(*sink_v, "sink_v", {at::kHalf}, tail_shape, true);
  }
  if (tail_slots)
    c.cuda(*tail_slots, "tail_slots", {at::kInt}, {num_seqs});
  else
    TORCH_CHECK_VALUE(slots >= num_seqs, c.op, ": without tail_slots, tail_k needs a slot per sequence (", slots,
                      " slots < ", num_seqs, " sequences)");
  c.fits_int32({{pages.size(0), "num_pages"}, {num_seqs, "num_seqs"}, {page_table.size(1), "max_pages_per_seq"},
                {slots, "num_slots"}});
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(page_table.size(1));
  d.num_pages = static_cast<int32_t>(pages.size(0));
  d.num_slots = static_cast<int32_t>(slots);
  d.pages = pages.data_ptr();
  d.page_table = page_table.data_ptr<int32_t>();
  d.seq_lens = seq_lens.data_ptr<int32_t>();
  d.tail_k = tail_k.data_ptr();
  d.tail_v = tail_v.data_ptr();
  d.sink_k = sink_k ? sink_k->data_ptr() : nullptr;
  d.sink_v = sink_v ? sink_v->data_ptr() : nullptr;
  d.tail_slots = tail_slots ? tail_slots->data_ptr<int32_t>() : nullptr;
  return d;
}

int32_t* flags_ptr(checker& c, const optional<Tensor>& flags, int64_t num_seqs) {
  if (!flags) return nullptr;
  c.cuda(*flags, "flags", {at::kInt}, {num_seqs});
  return flags->data_ptr<int32_t>();
}

void prefill(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
             const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
             const optional<Tensor>& tail_slots, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
             int64_t max_tokens_per_seq, int64_t preset, const optional<Tensor>& flags) {
  checker c{"kvtile.prefill"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  c.cuda(k, "k", {at::kHalf, at::kBFloat16}, {any, d.kv_heads, d.head_dim});
  c.same_dtype(v, "v", k, "k");
  c.cuda(v, "v", {k.scalar_type()}, {k.size(0), d.kv_heads, d.head_dim});
  c.cuda(cu_seqlens, "cu_seqlens", {at::kInt}, {d.num_seqs + 1});
  TORCH_CHECK_VALUE(max_tokens_per_seq >= 0, c.op, ": max_tokens_per_seq must be >= 0");
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_prefill(&d, dtype_code(k.scalar_type()), k.data_ptr(), v.data_ptr(),
                              cu_seqlens.data_ptr<int32_t>(), max_tokens_per_seq, f, current_stream(c)));
}

void append(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
            const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
            const optional<Tensor>& tail_slots, const Tensor& k_new, const Tensor& v_new, int64_t preset,
            const optional<Tensor>& flags) {
  checker c{"kvtile.append"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  c.cuda(k_new, "k_new", {at::kHalf, at::kBFloat16}, {d.num_seqs, d.kv_heads, d.head_dim});
  c.same_dtype(v_new, "v_new", k_new, "k_new");
  c.cuda(v_new, "v_new", {k_new.scalar_type()}, {d.num_seqs, d.kv_heads, d.head_dim});
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_append(&d, dtype_code(k_new.scalar_type()), k_new.data_ptr(), v_new.data_ptr(), f,
                             current_stream(c)));
}

void dequantize_pages(const Tensor& pages, const Tensor& page_ids, const Tensor& out_k, const Tensor& out_v,
                      int64_t preset, bool original_frame) {
  checker c{"kvtile.dequantize_pages"};
  c.rank(out_k, "out_k", 4, "[count, kv_heads, G, head_dim]");
  c.rank(pages, "pages", 3, "[num_pages, kv_heads, record_bytes]");
  c.rank(page_ids, "page_ids", 1, "[count]");
  const int64_t head_dim = out_k.size(3), kv_heads = pages.size(1), count = page_ids.size(0);
  const auto info = preset_info_of(c, preset, head_dim);
  c.cuda(pages, "pages", {at::kByte}, {any, kv_heads, info.record_bytes}, true);
  c.cuda(page_ids, "page_ids", {at::kInt}, {count});
  c.cuda(out_k, "out_k", {at::kHalf}, {count, kv_heads, info.tile_tokens, head_dim});
  c.cuda(out_v, "out_v", {at::kHalf}, {count, kv_heads, info.tile_tokens, head_dim});
  c.fits_int32({{count, "count"}, {pages.size(0), "num_pages"}});
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_pages = static_cast<int32_t>(pages.size(0));
  d.pages = pages.data_ptr();
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_dequantize_pages(&d, page_ids.data_ptr<int32_t>(), static_cast<int32_t>(count),
                                       out_k.data_ptr(), out_v.data_ptr(),
                                       original_frame ? KVTILE_OPS_FRAME_ORIGINAL : KVTILE_OPS_FRAME_ROTATED,
                                       current_stream(c)));
}

int64_t decode_workspace_bytes(int64_t preset, int64_t head_dim, int64_t kv_heads, int64_t num_seqs,
                               int64_t max_pages_per_seq, int64_t q_heads, int64_t num_splits, int64_t max_q_tokens) {
  checker c{"kvtile.decode_workspace_bytes"};
  c.fits_int32({{preset, "preset"}, {head_dim, "head_dim"}, {kv_heads, "kv_heads"}, {num_seqs, "num_seqs"},
                {max_pages_per_seq, "max_pages_per_seq"}, {q_heads, "q_heads"}, {num_splits, "num_splits"},
                {max_q_tokens, "max_q_tokens"}});
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(max_pages_per_seq);
  kvtile_ops_decode_params p = decode_params(c, q_heads, at::kHalf, 1.0, num_splits, {}, max_q_tokens, -1, 0.0);
  size_t bytes = 0;
  c.result(kvtile_ops_decode_workspace_bytes(&d, &p, &bytes));
  return static_cast<int64_t>(bytes);
}

void decode(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
            const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
            const optional<Tensor>& tail_slots, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
            const Tensor& workspace, double softmax_scale, int64_t preset, int64_t num_splits,
            const optional<Tensor>& qo_indptr, int64_t max_q_tokens, int64_t window_left, double logit_softcap) {
  checker c{"kvtile.decode"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  check_decode_io(c, q, out, lse, workspace, d.num_seqs, d.kv_heads, d.head_dim, qo_indptr);
  kvtile_ops_decode_params p = decode_params(c, q.size(1), q.scalar_type(), softmax_scale, num_splits, qo_indptr,
                                             max_q_tokens, window_left, logit_softcap);
  decode_with(c, d, p, q, out, lse, workspace, "kvtile.decode_workspace_bytes");
}

// ---- plan / run ----------------------------------------------------------------------
// A plan is an int handle (the kvtile_ops_decode_plan pointer) that the Python
// DecodePlan owns; every op looks it up among the live plans first, so a
// destroyed or made-up handle raises instead of being dereferenced.
std::mutex plans_mutex;
std::unordered_set<kvtile_ops_decode_plan*>& live_plans() {
  static std::unordered_set<kvtile_ops_decode_plan*> plans;
  return plans;
}

kvtile_ops_decode_plan* plan_pointer(int64_t handle) {
  return reinterpret_cast<kvtile_ops_decode_plan*>(static_cast<std::uintptr_t>(handle));
}

void check_live(const checker& c, bool live, int64_t handle) {
  TORCH_CHECK_VALUE(live, c.op, ": ", handle,
                    " is not a live plan handle (destroyed, or not from kvtile.decode_plan_create)");
}

}  // namespace

kvtile_ops_decode_plan* kvtile_torch::plan_of(const checker& c, int64_t handle) {
  kvtile_ops_decode_plan* p = plan_pointer(handle);
  const std::lock_guard<std::mutex> lock(plans_mutex);
  check_live(c, live_plans().count(p) == 1, handle);
  return p;
}

namespace {

int64_t decode_plan_create() {
  checker c{"kvtile.decode_plan_create"};
  kvtile_ops_decode_plan* p = nullptr;
  c.result(kvtile_ops_decode_plan_create(&p));
  const std::lock_guard<std::mutex> lock(plans_mutex);
  live_plans().insert(p);
  return static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(p));
}

void decode_plan_destroy(int64_t handle) {
  checker c{"kvtile.decode_plan_destroy"};
  kvtile_ops_decode_plan* p = plan_pointer(handle);
  {
    // One locked section checks and removes the handle: of two threads that
    // destroy the same plan, exactly one frees it, the other raises.
    const std::lock_guard<std::mutex> lock(plans_mutex);
    check_live(c, live_plans().erase(p) == 1, handle);
  }
  c.result(kvtile_ops_decode_plan_destroy(p));
}

std::vector<int64_t> decode_plan_info(int64_t handle) {
  checker c{"kvtile.decode_plan_info"};
  int32_t ctas = 0, chunks = 0;
  c.result(kvtile_ops_decode_plan_info(plan_of(c, handle), &ctas, &chunks));
  return {ctas, chunks};
}

void decode_plan(int64_t handle, const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens,
                 const Tensor& tail_k, const Tensor& tail_v, const optional<Tensor>& sink_k,
                 const optional<Tensor>& sink_v, const optional<Tensor>& tail_slots, const Tensor& host_seq_lens,
                 const optional<Tensor>& host_qo_indptr, const Tensor& workspace, int64_t q_heads,
                 at::ScalarType q_dtype, double softmax_scale, int64_t preset, int64_t num_splits,
                 const optional<Tensor>& qo_indptr, int64_t max_q_tokens, int64_t window_left, double logit_softcap) {
  checker c{"kvtile.decode_plan"};
  kvtile_ops_decode_plan* plan = plan_of(c, handle);
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  const int32_t* lens = host_lens(c, host_seq_lens, d.num_seqs);
  c.cuda(workspace, "workspace", {at::kByte}, {any}, true);
  if (qo_indptr) c.cuda(*qo_indptr, "qo_indptr", {at::kInt}, {d.num_seqs + 1});
  check_q_dtype(c, q_dtype);
  kvtile_ops_decode_params p = decode_params(c, q_heads, q_dtype, softmax_scale, num_splits, qo_indptr, max_q_tokens,
                                             window_left, logit_softcap);
  const int32_t* host_qo = nullptr;
  if (host_qo_indptr) {
    c.cpu(*host_qo_indptr, "host_qo_indptr", {at::kInt}, {d.num_seqs + 1});
    host_qo = host_qo_indptr->data_ptr<int32_t>();
  }
  plan_with(c, plan, d, lens, host_qo, p, workspace, "kvtile.decode_workspace_bytes");
}

void decode_run(int64_t handle, const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens,
                const Tensor& tail_k, const Tensor& tail_v, const optional<Tensor>& sink_k,
                const optional<Tensor>& sink_v, const optional<Tensor>& tail_slots, const Tensor& q, const Tensor& out,
                const optional<Tensor>& lse, const Tensor& workspace, double softmax_scale, int64_t preset,
                int64_t num_splits, const optional<Tensor>& qo_indptr, int64_t max_q_tokens, int64_t window_left,
                double logit_softcap) {
  checker c{"kvtile.decode_run"};
  const kvtile_ops_decode_plan* plan = plan_of(c, handle);
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  check_decode_io(c, q, out, lse, workspace, d.num_seqs, d.kv_heads, d.head_dim, qo_indptr);
  kvtile_ops_decode_params p = decode_params(c, q.size(1), q.scalar_type(), softmax_scale, num_splits, qo_indptr,
                                             max_q_tokens, window_left, logit_softcap);
  run_with(c, plan, d, p, q, out, lse, workspace);
}

#endif

}  // namespace

// The cache arguments of the quantized device ops, and the decode options.
#define KVTILE_CACHE_ARGS                                                                                      \
  "Tensor pages, Tensor page_table, Tensor seq_lens, Tensor tail_k, Tensor tail_v, Tensor? sink_k, Tensor? sink_v, " \
  "Tensor? tail_slots, "
#define KVTILE_DECODE_OPTIONS "Tensor? qo_indptr=None, int max_q_tokens=1, int window_left=-1, float logit_softcap=0.0"

TORCH_LIBRARY(kvtile, m) {
  m.def("preset_info(int preset, int head_dim) -> int[]", &preset_info);
  m.def("has_cuda() -> bool", &has_cuda);
  m.def("preset_name(int preset) -> str", &preset_name);
  m.def("abi_limits() -> int[]", &abi_limits);
  m.def("check_decode_options(str op, int q_heads, int max_q_tokens, bool has_qo_indptr, int window_left, "
        "float logit_softcap, int num_splits, bool need_io, float softmax_scale) -> ()",
        &check_decode_options);
  m.def("encode_tiles(Tensor keys, Tensor values, int preset, bool paged) -> Tensor");
  m.def("decode_tiles(Tensor records, int preset, int head_dim, ScalarType dtype, bool original_frame) -> (Tensor, Tensor)");
  m.def("rotate(Tensor x, int preset, bool inverse, ScalarType dtype) -> Tensor");
  m.def("prefill(Tensor(a!) pages, Tensor page_table, Tensor seq_lens, Tensor(b!) tail_k, Tensor(c!) tail_v, "
        "Tensor(d!)? sink_k, Tensor(e!)? sink_v, Tensor? tail_slots, Tensor k, Tensor v, Tensor cu_seqlens, "
        "int max_tokens_per_seq, int preset, Tensor(f!)? flags) -> ()");
  m.def("append(Tensor(a!) pages, Tensor page_table, Tensor seq_lens, Tensor(b!) tail_k, Tensor(c!) tail_v, "
        "Tensor(d!)? sink_k, Tensor(e!)? sink_v, Tensor? tail_slots, Tensor k_new, Tensor v_new, int preset, "
        "Tensor(f!)? flags) -> ()");
  m.def("dequantize_pages(Tensor pages, Tensor page_ids, Tensor(a!) out_k, Tensor(b!) out_v, int preset, "
        "bool original_frame) -> ()");
  m.def("decode(" KVTILE_CACHE_ARGS "Tensor q, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!) workspace, "
        "float softmax_scale, int preset, int num_splits, " KVTILE_DECODE_OPTIONS ") -> ()");
  // plan / run: plan reads host_seq_lens and host_qo_indptr (CPU int32) and writes the work list into the workspace
  m.def("decode_plan(int plan, " KVTILE_CACHE_ARGS "Tensor host_seq_lens, Tensor? host_qo_indptr, Tensor(a!) workspace, "
        "int q_heads, ScalarType q_dtype, float softmax_scale, int preset, int num_splits, " KVTILE_DECODE_OPTIONS
        ") -> ()");
  m.def("decode_run(int plan, " KVTILE_CACHE_ARGS "Tensor q, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!) workspace, "
        "float softmax_scale, int preset, int num_splits, " KVTILE_DECODE_OPTIONS ") -> ()");
  // ops without tensor arguments: one kernel for every backend
  const char* ws = "decode_workspace_bytes(int preset, int head_dim, int kv_heads, int num_seqs, "
                   "int max_pages_per_seq, int q_heads, int num_splits, int max_q_tokens=1) -> int";
  const char* create = "decode_plan_create() -> int";
  const char* destroy = "decode_plan_destroy(int plan) -> ()";
  const char* info = "decode_plan_info(int plan) -> int[]";
#ifdef KVTILE_WITH_CUDA
  m.def(ws, &decode_workspace_bytes);
  m.def(create, &decode_plan_create);
  m.def(destroy, &decode_plan_destroy);
  m.def(info, &decode_plan_info);
#else
  for (const char* schema : {ws, create, destroy, info})
    m.def(schema, torch::CppFunction::makeFromBoxedFunction<&no_cuda>());
#endif
}

#define KVTILE_DEVICE_OPS(X) \
  X(prefill) X(append) X(dequantize_pages) X(decode) X(decode_plan) X(decode_run)

// The host codec ops run on CPU tensors; registered for CUDA too so that CUDA
// tensors get kvtile's "must be a CPU tensor" instead of the dispatcher's error
// (rotate runs on both: rotation.cu in a CUDA build). The device ops: the
// other way round (KVTILE_TORCH_DEVICE_OPS, torch_ops_internal.h).
TORCH_LIBRARY_IMPL(kvtile, CPU, m) {
  m.impl("encode_tiles", &encode_tiles);
  m.impl("decode_tiles", &decode_tiles);
  m.impl("rotate", &rotate);
}
#ifdef KVTILE_WITH_CUDA
TORCH_LIBRARY_IMPL(kvtile, CUDA, m) {
  m.impl("encode_tiles", &encode_tiles);
  m.impl("decode_tiles", &decode_tiles);
  m.impl("rotate", &rotate);  // rotation.cu
}
#endif
KVTILE_TORCH_DEVICE_OPS(KVTILE_DEVICE_OPS)

// ---- speculative decoding and forks (kvtile_ops.h; docs/python.md) ---------------------
namespace {

// Host ops (every build): the staging area's size and the fork check.
int64_t draft_bytes(int64_t preset, int64_t head_dim, int64_t num_slots, int64_t kv_heads) {
  const checker c{"kvtile.draft_bytes"};
  c.fits_int32({{num_slots, "num_slots"}, {kv_heads, "kv_heads"}});
  int64_t bytes = 0;
  c.result(kvtile_ops_draft_bytes(static_cast<int>(preset), static_cast<int>(head_dim), static_cast<int32_t>(num_slots),
                                  static_cast<int32_t>(kv_heads), &bytes));
  return bytes;
}

// src_slots, dst_slots [count], tail_slots [num_seqs] or None, seq_lens [num_seqs]: CPU int32.
void validate_fork(int64_t num_slots, const Tensor& src_slots, const Tensor& dst_slots,
                   const optional<Tensor>& tail_slots, const Tensor& seq_lens) {
  const checker c{"kvtile.validate_fork"};
  c.cpu(src_slots, "src_slots", {at::kInt}, {any});
  c.cpu(dst_slots, "dst_slots", {at::kInt}, {src_slots.size(0)});
  c.cpu(seq_lens, "seq_lens", {at::kInt}, {any});
  if (tail_slots) c.cpu(*tail_slots, "tail_slots", {at::kInt}, {seq_lens.size(0)});
  c.fits_int32({{num_slots, "num_slots"}, {seq_lens.size(0), "num_seqs"}, {src_slots.size(0), "count"}});
  kvtile_ops_cache d{};
  d.num_seqs = static_cast<int32_t>(seq_lens.size(0));
  d.num_slots = static_cast<int32_t>(num_slots);
  d.tail_slots = tail_slots ? tail_slots->data_ptr<int32_t>() : nullptr;
  c.result(kvtile_ops_validate_fork(&d, src_slots.data_ptr<int32_t>(), dst_slots.data_ptr<int32_t>(),
                                    static_cast<int32_t>(src_slots.size(0)), d.tail_slots,
                                    seq_lens.data_ptr<int32_t>()));
}

#ifdef KVTILE_WITH_CUDA
// draft_k/v [num_slots, kv_heads, G + 8, D] fp16 (16-byte aligned), draft_state [num_slots, kv_heads, 2] int32.
kvtile_ops_drafts drafts_desc(checker& c, const kvtile_ops_cache& d, const Tensor& draft_k, const Tensor& draft_v,
                              const Tensor& draft_state) {
  kvtile_ops_preset_info info{};
  c.result(kvtile_ops_get_preset_info(d.preset, d.head_dim, &info));
  const std::vector<int64_t> shape{d.num_slots, d.kv_heads, info.tile_tokens + KVTILE_OPS_MAX_DRAFT_TOKENS, d.head_dim};
  c.cuda(draft_k, "draft_k", {at::kHalf}, shape, true);
  c.cuda(draft_v, "draft_v", {at::kHalf}, shape, true);
  c.cuda(draft_state, "draft_state", {at::kInt}, {d.num_slots, d.kv_heads, 2});
  return {draft_k.data_ptr(), draft_v.data_ptr(), draft_state.data_ptr<int32_t>()};
}

void append_drafts(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
                   const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
                   const optional<Tensor>& tail_slots, const Tensor& draft_k, const Tensor& draft_v,
                   const Tensor& draft_state, const Tensor& k, const Tensor& v, const Tensor& cu_drafts,
                   int64_t preset, const optional<Tensor>& flags) {
  checker c{"kvtile.append_drafts"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  const kvtile_ops_drafts dr = drafts_desc(c, d, draft_k, draft_v, draft_state);
  c.cuda(k, "k", {at::kHalf, at::kBFloat16}, {any, d.kv_heads, d.head_dim});
  c.same_dtype(v, "v", k, "k");
  c.cuda(v, "v", {k.scalar_type()}, {k.size(0), d.kv_heads, d.head_dim});
  c.cuda(cu_drafts, "cu_drafts", {at::kInt}, {d.num_seqs + 1});
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_append_drafts(&d, &dr, dtype_code(k.scalar_type()), k.data_ptr(), v.data_ptr(),
                                    cu_drafts.data_ptr<int32_t>(), f, current_stream(c)));
}

void commit_drafts(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
                   const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
                   const optional<Tensor>& tail_slots, const Tensor& draft_k, const Tensor& draft_v,
                   const Tensor& draft_state, const Tensor& accepted, const optional<Tensor>& new_seq_lens,
                   int64_t preset, const optional<Tensor>& flags) {
  checker c{"kvtile.commit_drafts"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  const kvtile_ops_drafts dr = drafts_desc(c, d, draft_k, draft_v, draft_state);
  c.cuda(accepted, "accepted", {at::kInt}, {d.num_seqs});
  if (new_seq_lens) c.cuda(*new_seq_lens, "new_seq_lens", {at::kInt}, {d.num_seqs});
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_commit_drafts(&d, &dr, accepted.data_ptr<int32_t>(),
                                    new_seq_lens ? new_seq_lens->data_ptr<int32_t>() : nullptr, f, current_stream(c)));
}

void fork_slots(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
                const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
                const optional<Tensor>& tail_slots, const optional<Tensor>& draft_k, const optional<Tensor>& draft_v,
                const optional<Tensor>& draft_state, const Tensor& src_slots, const Tensor& dst_slots, int64_t preset,
                const optional<Tensor>& flags) {
  checker c{"kvtile.fork_slots"};
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  TORCH_CHECK_VALUE(draft_k.has_value() == draft_v.has_value() && draft_k.has_value() == draft_state.has_value(),
                    c.op, ": draft_k, draft_v and draft_state must all be given or all None");
  kvtile_ops_drafts dr{};
  if (draft_k) dr = drafts_desc(c, d, *draft_k, *draft_v, *draft_state);
  c.cuda(src_slots, "src_slots", {at::kInt}, {any});
  c.cuda(dst_slots, "dst_slots", {at::kInt}, {src_slots.size(0)});
  c.fits_int32({{src_slots.size(0), "count"}});
  const int64_t count = src_slots.size(0);
  int32_t* f = flags_ptr(c, flags, count);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_fork(&d, draft_k ? &dr : nullptr, src_slots.data_ptr<int32_t>(), dst_slots.data_ptr<int32_t>(),
                           static_cast<int32_t>(count), f, current_stream(c)));
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvtile, m) {
  m.def("draft_bytes(int preset, int head_dim, int num_slots, int kv_heads) -> int", &draft_bytes);
  m.def("validate_fork(int num_slots, Tensor src_slots, Tensor dst_slots, Tensor? tail_slots, Tensor seq_lens) -> ()",
        &validate_fork);
  m.def("append_drafts(Tensor(a!) pages, Tensor page_table, Tensor seq_lens, Tensor(b!) tail_k, Tensor(c!) tail_v, "
        "Tensor(d!)? sink_k, Tensor(e!)? sink_v, Tensor? tail_slots, Tensor(f!) draft_k, Tensor(g!) draft_v, "
        "Tensor(h!) draft_state, Tensor k, Tensor v, Tensor cu_drafts, int preset, Tensor(i!)? flags) -> ()");
  m.def("commit_drafts(Tensor pages, Tensor page_table, Tensor seq_lens, Tensor(a!) tail_k, Tensor(b!) tail_v, "
        "Tensor? sink_k, Tensor? sink_v, Tensor? tail_slots, Tensor draft_k, Tensor draft_v, "
        "Tensor(c!) draft_state, Tensor accepted, Tensor(d!)? new_seq_lens, int preset, Tensor(e!)? flags) -> ()");
  m.def("fork_slots(Tensor pages, Tensor page_table, Tensor seq_lens, Tensor(a!) tail_k, Tensor(b!) tail_v, "
        "Tensor(c!)? sink_k, Tensor(d!)? sink_v, Tensor? tail_slots, Tensor? draft_k, Tensor? draft_v, "
        "Tensor(e!)? draft_state, Tensor src_slots, Tensor dst_slots, int preset, Tensor(f!)? flags) -> ()");
}

#define KVTILE_SPEC_DEVICE_OPS(X) X(append_drafts) X(commit_drafts) X(fork_slots)

KVTILE_TORCH_DEVICE_OPS(KVTILE_SPEC_DEVICE_OPS)

PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef def = {PyModuleDef_HEAD_INIT, "kvtile._C", "kvtile's PyTorch ops (torch.ops.kvtile.*)", -1,
                            nullptr, nullptr, nullptr, nullptr, nullptr};
  PyObject* m = PyModule_Create(&def);
  if (m && PyModule_AddStringConstant(m, "no_cuda_reason", no_cuda_reason()) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
