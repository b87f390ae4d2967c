// python/kvtile/csrc/torch_ops_internal.h: what the translation units of the
// kvtile._C extension share (torch_ops.cpp: the host codec, the quantized cache's
// ops, plan handles and speculative decoding; torch_ops_fp16.cpp: the fp16
// baseline): the argument checker that raises Python ValueError / TypeError
// naming the op and the argument, the decode argument helpers, the plan handle
// lookup and, without CUDA, the kernel of every device op (no_cuda). Internal:
// no API of the package.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvtile_ops.h"

#ifdef KVTILE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#else
#include <ATen/core/dispatch/Dispatcher.h>
#endif

namespace kvtile_torch {

using at::Tensor;
using c10::optional;

constexpr int64_t any = -1;  // a shape extent that is not checked

inline std::string dims_of(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Argument checks of one op call: every failure raises ValueError (TypeError
// for dtypes) with a message that names the op and the argument.
struct checker {
  const char* op;
  optional<at::Device> device{};  // the device of the first CUDA tensor checked

  // t is on the op's CUDA device (all CUDA tensors of one call on one device),
  // has one of dtypes, shape (any: unchecked extent), is contiguous and, with
  // aligned, starts at a 16-byte aligned address.
  void cuda(const Tensor& t, const char* name, std::initializer_list<at::ScalarType> dtypes,
            const std::vector<int64_t>& shape, bool aligned = false) {
    TORCH_CHECK_VALUE(t.is_cuda(), op, ": ", name, " must be a CUDA tensor (got ", t.device().str(), ")");
    if (!device) device = t.device();
    TORCH_CHECK_VALUE(t.device() == *device, op, ": ", name, " is on ", t.device().str(),
                      " but the other tensors are on ", device->str());
    layout(t, name, dtypes, shape, aligned);
  }
  // t is a CPU tensor (the host codec ops), with dtype, shape and contiguity as above.
  void cpu(const Tensor& t, const char* name, std::initializer_list<at::ScalarType> dtypes,
           const std::vector<int64_t>& shape) const {
    TORCH_CHECK_VALUE(t.device().is_cpu(), op, ": ", name,
                      " must be a CPU tensor: this op runs the host codec (got ", t.device().str(), ")");
    layout(t, name, dtypes, shape, false);
  }
  // t has rank dims (before its extents are read); layout names them in the message.
  void rank(const Tensor& t, const char* name, int64_t dims, const char* layout) const {
    TORCH_CHECK_VALUE(t.dim() == dims, op, ": ", name, " must have shape ", layout, " (got ", dims_of(t), ")");
  }
  void same_dtype(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) const {
    TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the dtype of ", ref_name, " (",
                     c10::toString(ref.scalar_type()), ", got ", c10::toString(t.scalar_type()), ")");
  }
  void fits_int32(std::initializer_list<std::pair<int64_t, const char*>> values) const {
    for (const auto& [v, what] : values)
      TORCH_CHECK_VALUE(v >= 0 && v <= INT32_MAX, op, ": ", what, " (", v, ") must be in [0, 2^31)");
  }
  [[noreturn]] void raise(int code) const {
    const std::string msg = kvtile_ops_last_error();
    TORCH_CHECK_TYPE(code != KVTILE_OPS_UNSUPPORTED_DTYPE, op, ": ", msg);
    TORCH_CHECK(code != KVTILE_OPS_CUDA_ERROR && code != KVTILE_OPS_NO_DEVICE, op, ": ", msg);  // RuntimeError
    TORCH_CHECK_VALUE(false, op, ": ", msg.empty() ? kvtile_ops_status_string(code) : msg, " (status ", code, ")");
  }
  // success and the non-finite warning pass (the output was written).
  void result(int code) const {
    if (code != KVTILE_OPS_SUCCESS && code != KVTILE_OPS_NON_FINITE_INPUT) raise(code);
  }

 private:
  void layout(const Tensor& t, const char* name, std::initializer_list<at::ScalarType> dtypes,
              const std::vector<int64_t>& shape, bool aligned) const {
    bool dtype_ok = false;
    for (auto d : dtypes) dtype_ok = dtype_ok || t.scalar_type() == d;
    if (!dtype_ok) {
      std::string want;
      for (auto d : dtypes) want += std::string(want.empty() ? "" : " or ") + c10::toString(d);
      TORCH_CHECK_TYPE(false, op, ": ", name, " must have dtype ", want, " (got ", c10::toString(t.scalar_type()), ")");
    }
    bool shape_ok = t.dim() == static_cast<int64_t>(shape.size());
    for (size_t i = 0; shape_ok && i < shape.size(); ++i)
      shape_ok = shape[i] == any || t.size(static_cast<int64_t>(i)) == shape[i];
    if (!shape_ok) {
      std::string w = "[";
      for (size_t i = 0; i < shape.size(); ++i)
        w += (i ? ", " : "") + (shape[i] == any ? std::string("*") : std::to_string(shape[i]));
      TORCH_CHECK_VALUE(false, op, ": ", name, " must have shape ", w, "] (got ", dims_of(t), ")");
    }
    TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous())");
    TORCH_CHECK_VALUE(!aligned || reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, op, ": ", name,
                      " must start at a 16-byte aligned address (a view with a storage offset is not)");
  }
};

// preset and head_dim are checked before they narrow to the C ABI's int (so
// 2^32 + 128 is not taken for 128).
inline kvtile_ops_preset_info preset_info_of(const checker& c, int64_t preset, int64_t head_dim) {
  c.fits_int32({{preset, "preset"}, {head_dim, "head_dim"}});
  kvtile_ops_preset_info info{};
  c.result(kvtile_ops_get_preset_info(static_cast<int>(preset), static_cast<int>(head_dim), &info));
  return info;
}

inline int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return KVTILE_OPS_FP16;
    case at::kBFloat16: return KVTILE_OPS_BF16;
    default: return KVTILE_OPS_FP32;
  }
}

// Why this build has no device ops ("" with CUDA; torch_ops.cpp).
const char* no_cuda_reason();

#ifdef KVTILE_WITH_CUDA
inline kvtile_ops_stream current_stream(const checker& c) {
  return reinterpret_cast<kvtile_ops_stream>(at::cuda::getCurrentCUDAStream(c.device->index()).stream());
}

// q, out [num_seqs, q_heads, D] (fp16/bf16), lse [num_seqs, q_heads] fp32 or None, workspace uint8;
// multi-query (qo_indptr int32 [num_seqs + 1]): q, out, lse have any number of rows.
inline void check_decode_io(checker& c, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
                     const Tensor& workspace, int64_t num_seqs, int64_t kv_heads, int64_t head_dim,
                     const optional<Tensor>& qo_indptr = {}) {
  c.cuda(q, "q", {at::kHalf, at::kBFloat16}, {qo_indptr ? any : num_seqs, any, head_dim});
  TORCH_CHECK_VALUE(q.size(1) > 0 && q.size(1) % kv_heads == 0, c.op, ": q heads (", q.size(1),
                    ") must be a positive multiple of kv_heads (", kv_heads, ")");
  c.same_dtype(out, "out", q, "q");
  c.cuda(out, "out", {q.scalar_type()}, {q.size(0), q.size(1), head_dim});
  c.cuda(workspace, "workspace", {at::kByte}, {any}, true);
  if (lse) c.cuda(*lse, "lse", {at::kFloat}, {q.size(0), q.size(1)});
  if (qo_indptr) c.cuda(*qo_indptr, "qo_indptr", {at::kInt}, {num_seqs + 1});
}

// The C ABI params of a decode call (scalars are checked by the C ABI).
inline kvtile_ops_decode_params decode_params(const checker& c, int64_t q_heads, at::ScalarType q_dtype,
                                       double softmax_scale, int64_t num_splits, const optional<Tensor>& qo_indptr,
                                       int64_t max_q_tokens, int64_t window_left, double logit_softcap) {
  c.fits_int32({{q_heads, "q_heads"}, {num_splits, "num_splits"}, {max_q_tokens, "max_q_tokens"}});
  // Only what narrowing to the C ABI's int32 needs; the rule (-1 or >= 0) is the core's
  // (kvtile::attention::check_decode_options, reported by the C ABI).
  TORCH_CHECK_VALUE(window_left >= INT32_MIN && window_left <= INT32_MAX, c.op, ": window_left (", window_left,
                    ") must fit in int32");
  kvtile_ops_decode_params p;
  c.result(kvtile_ops_decode_params_init(&p, sizeof p));
  p.q_dtype = q_dtype == at::kBFloat16 ? KVTILE_OPS_BF16 : q_dtype == at::kHalf ? KVTILE_OPS_FP16 : -1;
  p.q_heads = static_cast<int32_t>(q_heads);
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.num_splits = static_cast<int32_t>(num_splits);
  p.qo_indptr = qo_indptr ? qo_indptr->data_ptr<int32_t>() : nullptr;
  p.max_q_tokens = static_cast<int32_t>(max_q_tokens);
  p.window_left = static_cast<int32_t>(window_left);
  p.logit_softcap = static_cast<float>(logit_softcap);
  return p;
}

inline void set_io(kvtile_ops_decode_params& p, const Tensor& q, const Tensor& out, const optional<Tensor>& lse,
            const Tensor& workspace) {
  p.q = q.data_ptr();
  p.out = out.data_ptr();
  p.lse = lse ? lse->data_ptr<float>() : nullptr;
  p.workspace = workspace.data_ptr();
  p.workspace_bytes = static_cast<size_t>(workspace.numel());
}

inline void check_workspace(const checker& c, const Tensor& workspace, size_t need, const char* sizer) {
  TORCH_CHECK_VALUE(static_cast<size_t>(workspace.numel()) >= need, c.op, ": workspace has ", workspace.numel(),
                    " bytes, this launch needs ", need, " (", sizer, ")");
}

// The plan ops: the planned query dtype, and the workspace (at least `need` bytes) into the params.
inline void check_q_dtype(const checker& c, at::ScalarType q_dtype) {
  TORCH_CHECK_TYPE(q_dtype == at::kHalf || q_dtype == at::kBFloat16, c.op,
                   ": q_dtype must be float16 or bfloat16 (got ", c10::toString(q_dtype), ")");
}
inline void attach_workspace(const checker& c, const Tensor& workspace, size_t need, const char* sizer,
                      kvtile_ops_decode_params& p) {
  check_workspace(c, workspace, need, sizer);
  p.workspace = workspace.data_ptr();
  p.workspace_bytes = static_cast<size_t>(workspace.numel());
}

// The plan of a live handle (from decode_plan_create); raises ValueError for
// any other value (torch_ops.cpp keeps the live handles).
kvtile_ops_decode_plan* plan_of(const checker& c, int64_t handle);

// host_seq_lens: CPU int32 [num_seqs], the lengths seq_lens will hold when run executes.
inline const int32_t* host_lens(checker& c, const Tensor& host_seq_lens, int64_t num_seqs) {
  c.cpu(host_seq_lens, "host_seq_lens", {at::kInt}, {num_seqs});
  return host_seq_lens.data_ptr<int32_t>();
}

// The C ABI's decode functions of either cache, overloaded on its descriptor,
// so that one body below serves the quantized ops and the fp16 baseline's.
inline int abi_workspace_bytes(const kvtile_ops_cache* d, const kvtile_ops_decode_params* p, size_t* bytes) {
  return kvtile_ops_decode_workspace_bytes(d, p, bytes);
}
inline int abi_workspace_bytes(const kvtile_ops_fp16_cache* d, const kvtile_ops_decode_params* p, size_t* bytes) {
  return kvtile_ops_fp16_decode_workspace_bytes(d, p, bytes);
}
inline int abi_decode(const kvtile_ops_cache* d, const kvtile_ops_decode_params* p, kvtile_ops_stream s) {
  return kvtile_ops_decode(d, p, s);
}
inline int abi_decode(const kvtile_ops_fp16_cache* d, const kvtile_ops_decode_params* p, kvtile_ops_stream s) {
  return kvtile_ops_fp16_decode(d, p, s);
}
inline int abi_plan_build(kvtile_ops_decode_plan* plan, const kvtile_ops_cache* d, const int32_t* lens,
                          const int32_t* host_qo_indptr, const kvtile_ops_decode_params* p, kvtile_ops_stream s) {
  return kvtile_ops_decode_plan_build(plan, d, lens, host_qo_indptr, p, s);
}
inline int abi_plan_build(kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* d, const int32_t* lens,
                          const int32_t* /*host_qo_indptr: NULL, one token per sequence*/,
                          const kvtile_ops_decode_params* p, kvtile_ops_stream s) {
  return kvtile_ops_decode_plan_build_fp16(plan, d, lens, p, s);
}
inline int abi_plan_run(const kvtile_ops_decode_plan* plan, const kvtile_ops_cache* d, const kvtile_ops_decode_params* p,
                        kvtile_ops_stream s) {
  return kvtile_ops_decode_plan_run(plan, d, p, s);
}
inline int abi_plan_run(const kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* d,
                        const kvtile_ops_decode_params* p, kvtile_ops_stream s) {
  return kvtile_ops_decode_plan_run_fp16(plan, d, p, s);
}

// The steps after the checks, for either cache: a one-call decode (its
// workspace sized, then the launch), a plan (its workspace attached), a run.
// sizer names the workspace op in messages.
template <class Desc>
void decode_with(const checker& c, const Desc& d, kvtile_ops_decode_params& p, const Tensor& q, const Tensor& out,
                 const optional<Tensor>& lse, const Tensor& workspace, const char* sizer) {
  size_t need = 0;
  c.result(abi_workspace_bytes(&d, &p, &need));
  check_workspace(c, workspace, need, sizer);
  set_io(p, q, out, lse, workspace);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(abi_decode(&d, &p, current_stream(c)));
}
template <class Desc>
void plan_with(const checker& c, kvtile_ops_decode_plan* plan, const Desc& d, const int32_t* lens,
               const int32_t* host_qo_indptr, kvtile_ops_decode_params& p, const Tensor& workspace,
               const char* sizer) {
  size_t need = 0;
  c.result(abi_workspace_bytes(&d, &p, &need));
  attach_workspace(c, workspace, need, sizer, p);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(abi_plan_build(plan, &d, lens, host_qo_indptr, &p, current_stream(c)));
}
template <class Desc>
void run_with(const checker& c, const kvtile_ops_decode_plan* plan, const Desc& d, kvtile_ops_decode_params& p,
              const Tensor& q, const Tensor& out, const optional<Tensor>& lse, const Tensor& workspace) {
  set_io(p, q, out, lse, workspace);
  const c10::cuda::CUDAGuard guard(*c.device);
  c.result(abi_plan_run(plan, &d, &p, current_stream(c)));
}

#else
// A build without CUDA: every device op (whatever its arguments) raises, naming
// why setup.py built it CPU-only.
inline void no_cuda(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK(false, op.schema().name(), ": ", no_cuda_reason());
}
#endif

}  // namespace kvtile_torch

// Registers the device ops of an X-macro list (LIST(X) expands to X(op) X(op)
// ...; each op a function of kvtile_torch in a CUDA build) for CUDA tensors
// and for CPU tensors too, so that a CPU tensor gets kvtile's "must be a CUDA
// tensor" instead of the dispatcher's error. Without CUDA every one of them,
// for CPU tensors, raises why the build has no device ops (no_cuda).
#define KVTILE_TORCH_IMPL_OP(op) m.impl(#op, &op);
#define KVTILE_TORCH_IMPL_NO_CUDA(op) m.impl(#op, torch::CppFunction::makeFromBoxedFunction<&no_cuda>());
#ifdef KVTILE_WITH_CUDA
#define KVTILE_TORCH_DEVICE_OPS(LIST)                                  \
  TORCH_LIBRARY_IMPL(kvtile, CPU, m) { LIST(KVTILE_TORCH_IMPL_OP) }    \
  TORCH_LIBRARY_IMPL(kvtile, CUDA, m) { LIST(KVTILE_TORCH_IMPL_OP) }
#else
#define KVTILE_TORCH_DEVICE_OPS(LIST) TORCH_LIBRARY_IMPL(kvtile, CPU, m) { LIST(KVTILE_TORCH_IMPL_NO_CUDA) }
#endif
