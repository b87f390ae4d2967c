// python/kvtile/csrc/torch_ops.cpp: kvtile's PyTorch ops (namespace kvtile),
// registered with TORCH_LIBRARY so that torch.compile, CUDA graphs and the
// dispatcher see them. Every op checks each tensor's device, dtype, shape,
// contiguity and alignment and raises a Python ValueError / TypeError naming
// the op and the argument; then it calls the kvtile_ops C ABI on the current
// torch CUDA stream. Without CUDA (KVTILE_WITH_CUDA undefined) only the host
// codec ops exist; the device ops raise "built without CUDA".
#include <torch/extension.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvtile_ops.h"

#ifdef KVTILE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using at::Tensor;
using c10::optional;

std::string dims_of(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Tensor checks: every failure names op and argument.
struct checker {
  const char* op;
  c10::optional<at::Device> device;  // the device of the first CUDA tensor checked

  void dtype(const Tensor& t, const char* name, std::initializer_list<at::ScalarType> ok) const {
    for (auto d : ok)
      if (t.scalar_type() == d) return;
    std::string want;
    for (auto d : ok) want += std::string(want.empty() ? "" : " or ") + c10::toString(d);
    TORCH_CHECK_TYPE(false, op, ": ", name, " must have dtype ", want, " (got ", c10::toString(t.scalar_type()), ")");
  }
  void on_cuda(const Tensor& t, const char* name) {
    TORCH_CHECK_VALUE(t.is_cuda(), op, ": ", name, " must be a CUDA tensor (got ", t.device().str(), ")");
    if (!device) device = t.device();
    TORCH_CHECK_VALUE(t.device() == *device, op, ": ", name, " is on ", t.device().str(), " but the other tensors are on ",
                      device->str());
  }
  void on_cpu(const Tensor& t, const char* name) const {
    TORCH_CHECK_VALUE(t.device().is_cpu(), op, ": ", name,
                      " must be a CPU tensor: this op runs the host codec (got ", t.device().str(), ")");
  }
  void contiguous(const Tensor& t, const char* name) const {
    TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
  }
  void aligned16(const Tensor& t, const char* name) const {
    TORCH_CHECK_VALUE(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, op, ": ", name,
                      " must start at a 16-byte aligned address (a view with a storage offset is not)");
  }
  void shape(const Tensor& t, const char* name, std::vector<int64_t> want) const {
    bool good = t.dim() == static_cast<int64_t>(want.size());
    for (size_t i = 0; good && i < want.size(); ++i) good = want[i] < 0 || t.size(static_cast<int64_t>(i)) == want[i];
    if (good) return;
    std::string w = "[";
    for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + (want[i] < 0 ? std::string("*") : std::to_string(want[i]));
    TORCH_CHECK_VALUE(false, op, ": ", name, " must have shape ", w, "] (got ", dims_of(t), ")");
  }
  void fits_int32(int64_t v, const char* what) const {
    TORCH_CHECK_VALUE(v >= 0 && v <= INT32_MAX, op, ": ", what, " (", v, ") must be in [0, 2^31)");
  }
  [[noreturn]] void raise(int code) const {
    const std::string msg = kvtile_ops_last_error();
    if (code == KVTILE_OPS_UNSUPPORTED_DTYPE) TORCH_CHECK_TYPE(false, op, ": ", msg);
    TORCH_CHECK_VALUE(code != KVTILE_OPS_CUDA_ERROR, op, ": ", msg);
    TORCH_CHECK_VALUE(false, op, ": ", msg.empty() ? kvtile_ops_status_string(code) : msg, " (status ", code, ")");
  }
  // success and the non-finite warning pass (the output was written).
  void result(int code) const {
    if (code != KVTILE_OPS_SUCCESS && code != KVTILE_OPS_NON_FINITE_INPUT) raise(code);
  }
};

kvtile_ops_preset_info preset_info_of(const checker& c, int64_t preset, int64_t head_dim) {
  kvtile_ops_preset_info info{};
  const int code = kvtile_ops_get_preset_info(static_cast<int>(preset), static_cast<int>(head_dim), &info);
  if (code != KVTILE_OPS_SUCCESS) c.raise(code);
  return info;
}

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return KVTILE_OPS_FP16;
    case at::kBFloat16: return KVTILE_OPS_BF16;
    default: return KVTILE_OPS_FP32;
  }
}

std::vector<int64_t> preset_info(int64_t preset, int64_t head_dim) {
  checker c{"kvtile.preset_info", {}};
  const auto i = preset_info_of(c, preset, head_dim);
  return {i.tile_tokens, i.key_bits, i.value_bits, i.record_bytes};
}

// ---- host codec --------------------------------------------------------------------

Tensor encode_tiles(const Tensor& keys, const Tensor& values, int64_t preset, bool paged) {
  checker c{"kvtile.encode_tiles", {}};
  c.on_cpu(keys, "keys");
  c.on_cpu(values, "values");
  c.dtype(keys, "keys", {at::kHalf, at::kBFloat16, at::kFloat});
  TORCH_CHECK_TYPE(values.scalar_type() == keys.scalar_type(), c.op, ": values must have the dtype of keys (",
                   c10::toString(keys.scalar_type()), ")");
  TORCH_CHECK_VALUE(keys.dim() == 3, c.op, ": keys must have shape [num_tiles, G, head_dim] (got ", dims_of(keys), ")");
  const auto info = preset_info_of(c, preset, keys.size(2));
  c.shape(keys, "keys", {-1, info.tile_tokens, keys.size(2)});
  c.shape(values, "values", {keys.size(0), info.tile_tokens, keys.size(2)});
  c.contiguous(keys, "keys");
  c.contiguous(values, "values");
  Tensor out = at::empty({keys.size(0), info.record_bytes}, keys.options().dtype(at::kByte));
  const int code = kvtile_ops_encode_tiles_host(static_cast<int>(preset), static_cast<int>(keys.size(2)),
                                                dtype_code(keys.scalar_type()), keys.data_ptr(), values.data_ptr(),
                                                keys.size(0), out.data_ptr(), paged ? 1 : 0);
  c.result(code);
  return out;
}

std::tuple<Tensor, Tensor> decode_tiles(const Tensor& records, int64_t preset, int64_t head_dim, at::ScalarType dtype,
                                        bool original_frame) {
  checker c{"kvtile.decode_tiles", {}};
  c.on_cpu(records, "records");
  c.dtype(records, "records", {at::kByte});
  const auto info = preset_info_of(c, preset, head_dim);
  c.shape(records, "records", {-1, info.record_bytes});
  c.contiguous(records, "records");
  TORCH_CHECK_TYPE(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat, c.op,
                   ": dtype must be float16, bfloat16 or float32 (got ", c10::toString(dtype), ")");
  auto opts = records.options().dtype(dtype);
  Tensor k = at::empty({records.size(0), info.tile_tokens, head_dim}, opts);
  Tensor v = at::empty_like(k);
  const int code = kvtile_ops_decode_tiles_host(
      static_cast<int>(preset), static_cast<int>(head_dim), records.data_ptr(), records.size(0), dtype_code(dtype),
      k.data_ptr(), v.data_ptr(), original_frame ? KVTILE_OPS_FRAME_ORIGINAL : KVTILE_OPS_FRAME_ROTATED);
  c.result(code);
  return {k, v};
}

// ---- device ops -----------------------------------------------------------------------

#ifdef KVTILE_WITH_CUDA
kvtile_ops_stream current_stream(const checker& c) {
  return reinterpret_cast<kvtile_ops_stream>(at::cuda::getCurrentCUDAStream(c.device->index()).stream());
}
#endif

[[noreturn]] void no_cuda(const char* op) {
  TORCH_CHECK(false, op, ": this build of kvtile has no CUDA support (built without a CUDA compiler/toolkit)");
}

#ifdef KVTILE_WITH_CUDA
// Checks the cache tensors and fills the descriptor.
//   pages [num_pages, kv_heads, record_bytes] uint8, page_table [num_seqs, max_pages] int32,
//   seq_lens [num_seqs] int32, tail_k/v [num_slots, kv_heads, G, D] fp16, sinks like tails or None,
//   tail_slots [num_seqs] int32 or None.
kvtile_ops_cache cache_desc(checker& c, int64_t preset, const Tensor& pages, const Tensor& page_table,
                            const Tensor& seq_lens, const Tensor& tail_k, const Tensor& tail_v,
                            const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
                            const optional<Tensor>& tail_slots) {
  c.on_cuda(pages, "pages");
  c.on_cuda(page_table, "page_table");
  c.on_cuda(seq_lens, "seq_lens");
  c.on_cuda(tail_k, "tail_k");
  c.on_cuda(tail_v, "tail_v");
  c.dtype(pages, "pages", {at::kByte});
  c.dtype(page_table, "page_table", {at::kInt});
  c.dtype(seq_lens, "seq_lens", {at::kInt});
  c.dtype(tail_k, "tail_k", {at::kHalf});
  c.dtype(tail_v, "tail_v", {at::kHalf});
  TORCH_CHECK_VALUE(tail_k.dim() == 4, c.op, ": tail_k must have shape [num_slots, kv_heads, G, head_dim] (got ",
                    dims_of(tail_k), ")");
  const int64_t head_dim = tail_k.size(3);
  const auto info = preset_info_of(c, preset, head_dim);
  TORCH_CHECK_VALUE(pages.dim() == 3, c.op, ": pages must have shape [num_pages, kv_heads, record_bytes] (got ",
                    dims_of(pages), ")");
  const int64_t kv_heads = pages.size(1);
  c.shape(pages, "pages", {-1, kv_heads, info.record_bytes});
  TORCH_CHECK_VALUE(page_table.dim() == 2, c.op, ": page_table must have shape [num_seqs, max_pages_per_seq] (got ",
                    dims_of(page_table), ")");
  const int64_t num_seqs = page_table.size(0);
  c.shape(seq_lens, "seq_lens", {num_seqs});
  c.shape(tail_k, "tail_k", {-1, kv_heads, info.tile_tokens, head_dim});
  c.shape(tail_v, "tail_v", {tail_k.size(0), kv_heads, info.tile_tokens, head_dim});
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&pages, "pages"}, {&page_table, "page_table"},
                      {&seq_lens, "seq_lens"}, {&tail_k, "tail_k"}, {&tail_v, "tail_v"}})
    c.contiguous(*t, n);
  c.aligned16(pages, "pages");
  c.aligned16(tail_k, "tail_k");
  c.aligned16(tail_v, "tail_v");
  TORCH_CHECK_VALUE(sink_k.has_value() == sink_v.has_value(), c.op, ": sink_k and sink_v must both be given or both None");
  if (sink_k) {
    for (auto [t, n] : {std::pair<const Tensor*, const char*>{&*sink_k, "sink_k"}, {&*sink_v, "sink_v"}}) {
      c.on_cuda(*t, n);
      c.dtype(*t, n, {at::kHalf});
      c.shape(*t, n, {tail_k.size(0), kv_heads, info.tile_tokens, head_dim});
      c.contiguous(*t, n);
      c.aligned16(*t, n);
    }
  }
  if (tail_slots) {
    c.on_cuda(*tail_slots, "tail_slots");
    c.dtype(*tail_slots, "tail_slots", {at::kInt});
    c.shape(*tail_slots, "tail_slots", {num_seqs});
    c.contiguous(*tail_slots, "tail_slots");
  } else {
    TORCH_CHECK_VALUE(tail_k.size(0) >= num_seqs, c.op, ": without tail_slots, tail_k needs a slot per sequence (",
                      tail_k.size(0), " slots < ", num_seqs, " sequences)");
  }
  c.fits_int32(pages.size(0), "num_pages");
  c.fits_int32(num_seqs, "num_seqs");
  c.fits_int32(page_table.size(1), "max_pages_per_seq");
  c.fits_int32(tail_k.size(0), "num_slots");
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(page_table.size(1));
  d.num_pages = static_cast<int32_t>(pages.size(0));
  d.num_slots = static_cast<int32_t>(tail_k.size(0));
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
  c.on_cuda(*flags, "flags");
  c.dtype(*flags, "flags", {at::kInt});
  c.shape(*flags, "flags", {num_seqs});
  c.contiguous(*flags, "flags");
  return flags->data_ptr<int32_t>();
}

void tokens(checker& c, const Tensor& t, const char* name, int64_t rows, int64_t kv_heads, int64_t head_dim) {
  c.on_cuda(t, name);
  c.dtype(t, name, {at::kHalf, at::kBFloat16});
  c.shape(t, name, {rows, kv_heads, head_dim});
  c.contiguous(t, name);
}

#endif

void prefill(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
             const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
             const optional<Tensor>& tail_slots, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
             int64_t max_tokens_per_seq, int64_t preset, const optional<Tensor>& flags) {
  checker c{"kvtile.prefill", {}};
#ifdef KVTILE_WITH_CUDA
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  tokens(c, k, "k", -1, d.kv_heads, d.head_dim);
  tokens(c, v, "v", k.size(0), d.kv_heads, d.head_dim);
  TORCH_CHECK_TYPE(v.scalar_type() == k.scalar_type(), c.op, ": v must have the dtype of k");
  c.on_cuda(cu_seqlens, "cu_seqlens");
  c.dtype(cu_seqlens, "cu_seqlens", {at::kInt});
  c.shape(cu_seqlens, "cu_seqlens", {d.num_seqs + 1});
  c.contiguous(cu_seqlens, "cu_seqlens");
  TORCH_CHECK_VALUE(max_tokens_per_seq >= 0, c.op, ": max_tokens_per_seq must be >= 0");
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_prefill(&d, dtype_code(k.scalar_type()), k.data_ptr(), v.data_ptr(),
                              cu_seqlens.data_ptr<int32_t>(), max_tokens_per_seq, f, current_stream(c)));
#else
  (void)pages, (void)page_table, (void)seq_lens, (void)tail_k, (void)tail_v, (void)sink_k, (void)sink_v,
      (void)tail_slots, (void)k, (void)v, (void)cu_seqlens, (void)max_tokens_per_seq, (void)preset, (void)flags;
  no_cuda(c.op);
#endif
}

void append(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
            const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
            const optional<Tensor>& tail_slots, const Tensor& k_new, const Tensor& v_new, int64_t preset,
            const optional<Tensor>& flags) {
  checker c{"kvtile.append", {}};
#ifdef KVTILE_WITH_CUDA
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  tokens(c, k_new, "k_new", d.num_seqs, d.kv_heads, d.head_dim);
  tokens(c, v_new, "v_new", d.num_seqs, d.kv_heads, d.head_dim);
  TORCH_CHECK_TYPE(v_new.scalar_type() == k_new.scalar_type(), c.op, ": v_new must have the dtype of k_new");
  int32_t* f = flags_ptr(c, flags, d.num_seqs);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_append(&d, dtype_code(k_new.scalar_type()), k_new.data_ptr(), v_new.data_ptr(), f,
                             current_stream(c)));
#else
  (void)pages, (void)page_table, (void)seq_lens, (void)tail_k, (void)tail_v, (void)sink_k, (void)sink_v,
      (void)tail_slots, (void)k_new, (void)v_new, (void)preset, (void)flags;
  no_cuda(c.op);
#endif
}

void dequantize_pages(const Tensor& pages, const Tensor& page_ids, const Tensor& out_k, const Tensor& out_v,
                      int64_t preset, bool original_frame) {
  checker c{"kvtile.dequantize_pages", {}};
#ifdef KVTILE_WITH_CUDA
  c.on_cuda(pages, "pages");
  c.on_cuda(page_ids, "page_ids");
  c.on_cuda(out_k, "out_k");
  c.on_cuda(out_v, "out_v");
  c.dtype(pages, "pages", {at::kByte});
  c.dtype(page_ids, "page_ids", {at::kInt});
  c.dtype(out_k, "out_k", {at::kHalf});
  c.dtype(out_v, "out_v", {at::kHalf});
  TORCH_CHECK_VALUE(out_k.dim() == 4, c.op, ": out_k must have shape [count, kv_heads, G, head_dim] (got ",
                    dims_of(out_k), ")");
  const auto info = preset_info_of(c, preset, out_k.size(3));
  TORCH_CHECK_VALUE(pages.dim() == 3, c.op, ": pages must have shape [num_pages, kv_heads, record_bytes] (got ",
                    dims_of(pages), ")");
  c.shape(pages, "pages", {-1, pages.size(1), info.record_bytes});
  TORCH_CHECK_VALUE(page_ids.dim() == 1, c.op, ": page_ids must be 1-D (got ", dims_of(page_ids), ")");
  c.shape(out_k, "out_k", {page_ids.size(0), pages.size(1), info.tile_tokens, out_k.size(3)});
  c.shape(out_v, "out_v", {page_ids.size(0), pages.size(1), info.tile_tokens, out_k.size(3)});
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&pages, "pages"}, {&page_ids, "page_ids"},
                      {&out_k, "out_k"}, {&out_v, "out_v"}})
    c.contiguous(*t, n);
  c.aligned16(pages, "pages");
  c.fits_int32(page_ids.size(0), "count");
  c.fits_int32(pages.size(0), "num_pages");
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(out_k.size(3));
  d.kv_heads = static_cast<int32_t>(pages.size(1));
  d.num_pages = static_cast<int32_t>(pages.size(0));
  d.pages = pages.data_ptr();
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_dequantize_pages(&d, page_ids.data_ptr<int32_t>(), static_cast<int32_t>(page_ids.size(0)),
                                       out_k.data_ptr(), out_v.data_ptr(),
                                       original_frame ? KVTILE_OPS_FRAME_ORIGINAL : KVTILE_OPS_FRAME_ROTATED,
                                       current_stream(c)));
#else
  (void)pages, (void)page_ids, (void)out_k, (void)out_v, (void)preset, (void)original_frame;
  no_cuda(c.op);
#endif
}

int64_t decode_workspace_bytes(int64_t preset, int64_t head_dim, int64_t kv_heads, int64_t num_seqs,
                               int64_t max_pages_per_seq, int64_t q_heads, int64_t num_splits) {
  checker c{"kvtile.decode_workspace_bytes", {}};
#ifdef KVTILE_WITH_CUDA
  c.fits_int32(kv_heads, "kv_heads");
  c.fits_int32(num_seqs, "num_seqs");
  c.fits_int32(max_pages_per_seq, "max_pages_per_seq");
  c.fits_int32(q_heads, "q_heads");
  c.fits_int32(num_splits, "num_splits");
  kvtile_ops_cache d{};
  d.preset = static_cast<int32_t>(preset);
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(max_pages_per_seq);
  size_t bytes = 0;
  c.result(kvtile_ops_decode_workspace_bytes(&d, static_cast<int>(q_heads), static_cast<int>(num_splits), &bytes));
  return static_cast<int64_t>(bytes);
#else
  (void)preset, (void)head_dim, (void)kv_heads, (void)num_seqs, (void)max_pages_per_seq, (void)q_heads,
      (void)num_splits;
  no_cuda(c.op);
#endif
}

#ifdef KVTILE_WITH_CUDA
void check_decode_io(checker& c, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
                     const Tensor& workspace, int64_t num_seqs, int64_t head_dim) {
  c.on_cuda(q, "q");
  c.on_cuda(out, "out");
  c.on_cuda(workspace, "workspace");
  c.dtype(q, "q", {at::kHalf, at::kBFloat16});
  TORCH_CHECK_TYPE(out.scalar_type() == q.scalar_type(), c.op, ": out must have the dtype of q (",
                   c10::toString(q.scalar_type()), ")");
  c.dtype(workspace, "workspace", {at::kByte});
  c.shape(q, "q", {num_seqs, -1, head_dim});
  c.shape(out, "out", {num_seqs, q.size(1), head_dim});
  c.shape(workspace, "workspace", {-1});
  c.contiguous(q, "q");
  c.contiguous(out, "out");
  c.contiguous(workspace, "workspace");
  c.aligned16(workspace, "workspace");
  if (lse) {
    c.on_cuda(*lse, "lse");
    c.dtype(*lse, "lse", {at::kFloat});
    c.shape(*lse, "lse", {num_seqs, q.size(1)});
    c.contiguous(*lse, "lse");
  }
}
#endif

void decode(const Tensor& pages, const Tensor& page_table, const Tensor& seq_lens, const Tensor& tail_k,
            const Tensor& tail_v, const optional<Tensor>& sink_k, const optional<Tensor>& sink_v,
            const optional<Tensor>& tail_slots, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
            const Tensor& workspace, double softmax_scale, int64_t preset, int64_t num_splits) {
  checker c{"kvtile.decode", {}};
#ifdef KVTILE_WITH_CUDA
  auto d = cache_desc(c, preset, pages, page_table, seq_lens, tail_k, tail_v, sink_k, sink_v, tail_slots);
  check_decode_io(c, q, out, lse, workspace, d.num_seqs, d.head_dim);
  TORCH_CHECK_VALUE(q.size(1) > 0 && q.size(1) % d.kv_heads == 0, c.op, ": q heads (", q.size(1),
                    ") must be a positive multiple of kv_heads (", d.kv_heads, ")");
  c.fits_int32(num_splits, "num_splits");
  size_t need = 0;
  c.result(kvtile_ops_decode_workspace_bytes(&d, static_cast<int>(q.size(1)), static_cast<int>(num_splits), &need));
  TORCH_CHECK_VALUE(static_cast<size_t>(workspace.numel()) >= need, c.op, ": workspace has ", workspace.numel(),
                    " bytes, this launch needs ", need, " (kvtile.decode_workspace_bytes)");
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_decode(&d, dtype_code(q.scalar_type()), q.data_ptr(), out.data_ptr(),
                             lse ? lse->data_ptr<float>() : nullptr, static_cast<int>(q.size(1)),
                             static_cast<float>(softmax_scale), workspace.data_ptr(),
                             static_cast<size_t>(workspace.numel()), static_cast<int>(num_splits), current_stream(c)));
#else
  (void)pages, (void)page_table, (void)seq_lens, (void)tail_k, (void)tail_v, (void)sink_k, (void)sink_v,
      (void)tail_slots, (void)q, (void)out, (void)lse, (void)workspace, (void)softmax_scale, (void)preset,
      (void)num_splits;
  no_cuda(c.op);
#endif
}

int64_t fp16_decode_workspace_bytes(int64_t head_dim, int64_t kv_heads, int64_t num_seqs, int64_t max_pages_per_seq,
                                    int64_t q_heads, int64_t num_splits) {
  checker c{"kvtile.fp16_decode_workspace_bytes", {}};
#ifdef KVTILE_WITH_CUDA
  c.fits_int32(kv_heads, "kv_heads");
  c.fits_int32(num_seqs, "num_seqs");
  c.fits_int32(max_pages_per_seq, "max_pages_per_seq");
  c.fits_int32(q_heads, "q_heads");
  c.fits_int32(num_splits, "num_splits");
  kvtile_ops_fp16_cache d{};
  d.head_dim = static_cast<int32_t>(head_dim);
  d.kv_heads = static_cast<int32_t>(kv_heads);
  d.num_seqs = static_cast<int32_t>(num_seqs);
  d.max_pages_per_seq = static_cast<int32_t>(max_pages_per_seq);
  size_t bytes = 0;
  c.result(kvtile_ops_fp16_decode_workspace_bytes(&d, static_cast<int>(q_heads), static_cast<int>(num_splits), &bytes));
  return static_cast<int64_t>(bytes);
#else
  (void)head_dim, (void)kv_heads, (void)num_seqs, (void)max_pages_per_seq, (void)q_heads, (void)num_splits;
  no_cuda(c.op);
#endif
}

void fp16_decode(const Tensor& k_pages, const Tensor& v_pages, const Tensor& page_table, const Tensor& seq_lens,
                 const Tensor& q, const Tensor& out, const optional<Tensor>& lse, const Tensor& workspace,
                 double softmax_scale, int64_t num_splits) {
  checker c{"kvtile.fp16_decode", {}};
#ifdef KVTILE_WITH_CUDA
  c.on_cuda(k_pages, "k_pages");
  c.on_cuda(v_pages, "v_pages");
  c.on_cuda(page_table, "page_table");
  c.on_cuda(seq_lens, "seq_lens");
  c.dtype(k_pages, "k_pages", {at::kHalf});
  c.dtype(v_pages, "v_pages", {at::kHalf});
  c.dtype(page_table, "page_table", {at::kInt});
  c.dtype(seq_lens, "seq_lens", {at::kInt});
  TORCH_CHECK_VALUE(k_pages.dim() == 4, c.op, ": k_pages must have shape [num_pages, kv_heads, 64, head_dim] (got ",
                    dims_of(k_pages), ")");
  c.shape(k_pages, "k_pages", {-1, k_pages.size(1), kvtile_ops_fp16_page_tokens(), k_pages.size(3)});
  c.shape(v_pages, "v_pages", {k_pages.size(0), k_pages.size(1), kvtile_ops_fp16_page_tokens(), k_pages.size(3)});
  TORCH_CHECK_VALUE(page_table.dim() == 2, c.op, ": page_table must have shape [num_seqs, max_pages_per_seq] (got ",
                    dims_of(page_table), ")");
  c.shape(seq_lens, "seq_lens", {page_table.size(0)});
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&k_pages, "k_pages"}, {&v_pages, "v_pages"},
                      {&page_table, "page_table"}, {&seq_lens, "seq_lens"}})
    c.contiguous(*t, n);
  c.aligned16(k_pages, "k_pages");
  c.aligned16(v_pages, "v_pages");
  check_decode_io(c, q, out, lse, workspace, page_table.size(0), k_pages.size(3));
  c.fits_int32(k_pages.size(0), "num_pages");
  c.fits_int32(page_table.size(0), "num_seqs");
  c.fits_int32(page_table.size(1), "max_pages_per_seq");
  c.fits_int32(num_splits, "num_splits");
  kvtile_ops_fp16_cache d{};
  d.head_dim = static_cast<int32_t>(k_pages.size(3));
  d.kv_heads = static_cast<int32_t>(k_pages.size(1));
  d.num_seqs = static_cast<int32_t>(page_table.size(0));
  d.max_pages_per_seq = static_cast<int32_t>(page_table.size(1));
  d.num_pages = static_cast<int32_t>(k_pages.size(0));
  d.k = k_pages.data_ptr();
  d.v = v_pages.data_ptr();
  d.page_table = page_table.data_ptr<int32_t>();
  d.seq_lens = seq_lens.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(q.size(1) > 0 && q.size(1) % d.kv_heads == 0, c.op, ": q heads (", q.size(1),
                    ") must be a positive multiple of kv_heads (", d.kv_heads, ")");
  size_t need = 0;
  c.result(
      kvtile_ops_fp16_decode_workspace_bytes(&d, static_cast<int>(q.size(1)), static_cast<int>(num_splits), &need));
  TORCH_CHECK_VALUE(static_cast<size_t>(workspace.numel()) >= need, c.op, ": workspace has ", workspace.numel(),
                    " bytes, this launch needs ", need, " (kvtile.fp16_decode_workspace_bytes)");
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(kvtile_ops_fp16_decode(&d, dtype_code(q.scalar_type()), q.data_ptr(), out.data_ptr(),
                                  lse ? lse->data_ptr<float>() : nullptr, static_cast<int>(q.size(1)),
                                  static_cast<float>(softmax_scale), workspace.data_ptr(),
                                  static_cast<size_t>(workspace.numel()), static_cast<int>(num_splits),
                                  current_stream(c)));
#else
  (void)k_pages, (void)v_pages, (void)page_table, (void)seq_lens, (void)q, (void)out, (void)lse, (void)workspace,
      (void)softmax_scale, (void)num_splits;
  no_cuda(c.op);
#endif
}

bool has_cuda() {
#ifdef KVTILE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

TORCH_LIBRARY(kvtile, m) {
  m.def("preset_info(int preset, int head_dim) -> int[]", &preset_info);
  m.def("has_cuda() -> bool", &has_cuda);
  m.def("encode_tiles(Tensor keys, Tensor values, int preset, bool paged) -> Tensor");
  m.def("decode_tiles(Tensor records, int preset, int head_dim, ScalarType dtype, bool original_frame) -> (Tensor, Tensor)");
  m.def("prefill(Tensor(a!) pages, Tensor page_table, Tensor seq_lens, Tensor(b!) tail_k, Tensor(c!) tail_v, "
        "Tensor(d!)? sink_k, Tensor(e!)? sink_v, Tensor? tail_slots, Tensor k, Tensor v, Tensor cu_seqlens, "
        "int max_tokens_per_seq, int preset, Tensor(f!)? flags) -> ()");
  m.def("append(Tensor(a!) pages, Tensor page_table, Tensor seq_lens, Tensor(b!) tail_k, Tensor(c!) tail_v, "
        "Tensor(d!)? sink_k, Tensor(e!)? sink_v, Tensor? tail_slots, Tensor k_new, Tensor v_new, int preset, "
        "Tensor(f!)? flags) -> ()");
  m.def("dequantize_pages(Tensor pages, Tensor page_ids, Tensor(a!) out_k, Tensor(b!) out_v, int preset, "
        "bool original_frame) -> ()");
  m.def("decode_workspace_bytes(int preset, int head_dim, int kv_heads, int num_seqs, int max_pages_per_seq, "
        "int q_heads, int num_splits) -> int",
        &decode_workspace_bytes);
  m.def("decode(Tensor pages, Tensor page_table, Tensor seq_lens, Tensor tail_k, Tensor tail_v, Tensor? sink_k, "
        "Tensor? sink_v, Tensor? tail_slots, Tensor q, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!) workspace, "
        "float softmax_scale, int preset, int num_splits) -> ()");
  m.def("fp16_decode_workspace_bytes(int head_dim, int kv_heads, int num_seqs, int max_pages_per_seq, int q_heads, "
        "int num_splits) -> int",
        &fp16_decode_workspace_bytes);
  m.def("fp16_decode(Tensor k_pages, Tensor v_pages, Tensor page_table, Tensor seq_lens, Tensor q, Tensor(a!) out, "
        "Tensor(b!)? lse, Tensor(c!) workspace, float softmax_scale, int num_splits) -> ()");
}

// The device ops take the cache tensors on a CUDA device; registered for CUDA
// and for CPU (so that CPU tensors get kvtile's own error instead of the
// dispatcher's "no kernel for CPU").
TORCH_LIBRARY_IMPL(kvtile, CUDA, m) {
  m.impl("prefill", &prefill);
  m.impl("append", &append);
  m.impl("dequantize_pages", &dequantize_pages);
  m.impl("decode", &decode);
  m.impl("fp16_decode", &fp16_decode);
  m.impl("encode_tiles", &encode_tiles);
  m.impl("decode_tiles", &decode_tiles);
}
TORCH_LIBRARY_IMPL(kvtile, CPU, m) {
  m.impl("encode_tiles", &encode_tiles);
  m.impl("decode_tiles", &decode_tiles);
  m.impl("prefill", &prefill);
  m.impl("append", &append);
  m.impl("dequantize_pages", &dequantize_pages);
  m.impl("decode", &decode);
  m.impl("fp16_decode", &fp16_decode);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) { mod.doc() = "kvtile's PyTorch ops (torch.ops.kvtile.*)"; }
