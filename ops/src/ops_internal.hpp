// ops/src/ops_internal.hpp: what the kvtile_ops translation units share: the
// preset list, the thread's error message, and the view built from the C
// descriptor. Plain C++17 (the host TU and the CUDA TUs include it).
#pragma once

#include <kvtile/device/attention/decode_args.hpp>
#include <kvtile/dispatch.hpp>
#include <kvtile/paged/fp16_paged_cache.hpp>
#include <kvtile/paged/paged_cache.hpp>
#include <kvtile/paged/speculative.hpp>
#include <kvtile/presets.hpp>
#include <kvtile/status.hpp>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kvtile_ops.h"

namespace kvtile_ops {

// Records the calling thread's error message (printf format); returns code.
__attribute__((format(printf, 2, 3))) int fail(int code, const char* fmt, ...);
// Maps a kvtile::status to the ABI code, with a message naming the function on failure.
int from_status(kvtile::status s, const char* function);
// A broken decode option (kvtile::attention::check_decode_options): its code, with the message
// "<function>: <option> <value> <rule>".
int fail_option(const kvtile::attention::arg_error& e, const char* function);

// The C ABI's presets: id -> index in the core's preset table
// (kvtile::presets::preset_shapes). The C enum (KVTILE_OPS_K4V2_G128, ...) mirrors
// the ids; a static_assert checks each id names its shape.
inline constexpr int abi_shape[] = {kvtile::presets::find_shape("k4v2_g128"), kvtile::presets::find_shape("k4v4_g128"),
                                    kvtile::presets::find_shape("k2v2_g128")};
constexpr const char* abi_preset_name(int preset) { return kvtile::presets::preset_shapes[abi_shape[preset]].name; }
static_assert(sizeof(abi_shape) / sizeof(abi_shape[0]) == KVTILE_OPS_NUM_PRESETS &&
                  kvtile::presets::same_name(abi_preset_name(KVTILE_OPS_K4V2_G128), "k4v2_g128") &&
                  kvtile::presets::same_name(abi_preset_name(KVTILE_OPS_K4V4_G128), "k4v4_g128") &&
                  kvtile::presets::same_name(abi_preset_name(KVTILE_OPS_K2V2_G128), "k2v2_g128"),
              "the kvtile_ops_preset ids name their shapes of kvtile::presets::preset_shapes");

// The C header's constants mirror the core's (one definition each, there).
static_assert(KVTILE_OPS_MAX_Q_TOKENS == kvtile::attention::max_q_tokens, "KVTILE_OPS_MAX_Q_TOKENS mirrors the core's");
static_assert(KVTILE_OPS_MAX_DRAFT_TOKENS == kvtile::max_draft_tokens, "KVTILE_OPS_MAX_DRAFT_TOKENS mirrors the core's");
static_assert(KVTILE_OPS_FLAG_BAD_DRAFTS == kvtile::device::paged_flag_bad_drafts, "KVTILE_OPS_FLAG_BAD_DRAFTS mirrors the core's");
using kvtile::num_head_dims;

// The codec type of (C ABI preset id, D).
template <int Preset, int D>
struct preset_codec {
  static_assert(Preset >= 0 && Preset < KVTILE_OPS_NUM_PRESETS, "a C ABI preset id");
  using type = kvtile::presets::kvarn_shape<abi_shape[Preset], D>;
};

// The device instantiated set: the default preset at every head_dim, the
// other two at head_dim 128. Each entry is one CUDA translation unit of the
// device functions (device_<preset>_d<D>.cu, KVTILE_OPS_DEVICE_TABLE) and one
// of the draft / fork functions (device_spec_<preset>_d<D>.cu,
// KVTILE_OPS_SPEC_TABLE); an entry costs about 1.5 min of nvcc on one core.
struct device_instance {
  int preset;
  int head_dim;
};
inline constexpr device_instance device_instances[] = {
    {KVTILE_OPS_K4V2_G128, 64}, {KVTILE_OPS_K4V2_G128, 128}, {KVTILE_OPS_K4V2_G128, 256},
    {KVTILE_OPS_K4V4_G128, 128}, {KVTILE_OPS_K2V2_G128, 128}};
inline constexpr int num_device_instances = static_cast<int>(sizeof(device_instances) / sizeof(device_instance));
// Index in device_instances of (preset, head_dim), or -1.
constexpr int device_instance_index(int preset, int head_dim) noexcept {
  for (int i = 0; i < num_device_instances; ++i)
    if (device_instances[i].preset == preset && device_instances[i].head_dim == head_dim) return i;
  return -1;
}
// A CUDA translation unit's instance: listed, and named as the table names it.
constexpr bool is_device_instance(const char* name, int preset, int head_dim) noexcept {
  return device_instance_index(preset, head_dim) >= 0 && kvtile::presets::same_name(name, abi_preset_name(preset));
}

// Texts of the sets above for messages (host.cpp), made from the tables:
// "0 (k4v2_g128), 1 (k4v4_g128) or 2 (k2v2_g128)", "64, 128 or 256",
// "k4v2_g128 at 64, 128, 256; k4v4_g128 at 128; k2v2_g128 at 128".
const char* preset_choices();
const char* head_dim_choices();
const char* device_instance_list();

// f(std::integral_constant<int, I>{}) for each I.
template <class F, int... I>
void for_each_index(F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}

// Calls f(std::integral_constant<int, D>{}) for head_dim D of the table;
// KVTILE_OPS_UNSUPPORTED_HEAD_DIM with a message naming function otherwise.
template <class F>
int with_head_dim(int head_dim, const char* function, F&& f) {
  int result = KVTILE_OPS_UNSUPPORTED_HEAD_DIM;
  bool found = false;
  auto each = [&](auto index) {
    constexpr int D = kvtile::head_dims[decltype(index)::value];
    if (!found && head_dim == D) {
      found = true;
      result = f(std::integral_constant<int, D>{});
    }
  };
  for_each_index(each, std::make_integer_sequence<int, num_head_dims>{});
  if (!found) return fail(KVTILE_OPS_UNSUPPORTED_HEAD_DIM, "%s: head_dim %d is not %s", function, head_dim, head_dim_choices());
  return result;
}

// Calls f(kvtile::codec_tag<Codec>{}) for (preset, head_dim); returns
// KVTILE_OPS_UNSUPPORTED_PRESET / _HEAD_DIM (with a message) otherwise.
template <class F>
int with_codec(int preset, int head_dim, const char* function, F&& f) {
  if (preset < 0 || preset >= KVTILE_OPS_NUM_PRESETS)
    return fail(KVTILE_OPS_UNSUPPORTED_PRESET, "%s: preset %d is not %s", function, preset, preset_choices());
  return with_head_dim(head_dim, function, [&](auto d) {
    constexpr int D = decltype(d)::value;
    int result = KVTILE_OPS_UNSUPPORTED_PRESET;
    auto each = [&](auto index) {
      constexpr int P = decltype(index)::value;
      if (preset == P) result = f(kvtile::codec_tag<typename preset_codec<P, D>::type>{});
    };
    for_each_index(each, std::make_integer_sequence<int, KVTILE_OPS_NUM_PRESETS>{});
    return result;
  });
}

// Builds the kvtile view of a descriptor (sizes not validated here: the
// launchers' validate_structure does that).
template <class Codec>
kvtile::paged_cache_view make_view(const kvtile_ops_cache& c) {
  kvtile::paged_cache_view v;
  v.pages = static_cast<std::uint8_t*>(c.pages);
  v.page_table = c.page_table;
  v.seq_lens = c.seq_lens;
  v.tail_k = static_cast<kvtile::half_t*>(c.tail_k);
  v.tail_v = static_cast<kvtile::half_t*>(c.tail_v);
  v.sink_k = static_cast<kvtile::half_t*>(c.sink_k);
  v.sink_v = static_cast<kvtile::half_t*>(c.sink_v);
  v.num_seqs = c.num_seqs;
  v.kv_heads = c.kv_heads;
  v.head_dim = c.head_dim;
  v.tile_tokens = Codec::G;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.num_pages = c.num_pages;
  v.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
  v.tail_slots = c.tail_slots;
  v.num_slots = c.num_slots;
  return v;
}

// decode_args of checked params (check_params). for_plan: q and out may be
// NULL (plan reads neither; the core's check sees a placeholder).
template <class QT>
kvtile::attention::decode_args<QT> args_of(const kvtile_ops_decode_params& p, bool for_plan = false) {
  alignas(16) static const unsigned char placeholder[16] = {};
  kvtile::attention::decode_args<QT> a;
  a.q = static_cast<const QT*>(p.q);
  a.out = static_cast<QT*>(p.out);
  if (for_plan && !a.q) a.q = reinterpret_cast<const QT*>(placeholder);
  if (for_plan && !a.out) a.out = reinterpret_cast<QT*>(const_cast<unsigned char*>(placeholder));
  a.lse = for_plan ? nullptr : p.lse;
  a.q_heads = p.q_heads;
  a.softmax_scale = p.softmax_scale;
  a.workspace = p.workspace;
  a.workspace_bytes = p.workspace_bytes;
  a.num_splits = p.num_splits;
  a.window_left = p.window_left;
  a.logit_softcap = p.logit_softcap;
  a.qo_indptr = p.qo_indptr;
  a.max_q_tokens = p.max_q_tokens;
  return a;
}

// The device functions of one (preset, head_dim), defined in its own CUDA
// translation unit (device_ops.cuh, KVTILE_OPS_DEVICE_TABLE).
struct device_table {
  int preset;    // the instance (device_instances) these functions are of
  int head_dim;
  int (*prefill)(const kvtile_ops_cache&, int dtype, const void* k, const void* v, const std::int32_t* cu_seqlens,
                 std::int64_t max_tokens, std::int32_t* flags, kvtile_ops_stream stream);
  int (*append)(const kvtile_ops_cache&, int dtype, const void* k, const void* v, std::int32_t* flags,
                kvtile_ops_stream stream);
  int (*dequantize_pages)(const kvtile_ops_cache&, const std::int32_t* page_ids, std::int32_t count, void* out_k,
                          void* out_v, int frame, kvtile_ops_stream stream);
  // params checked by check_params; plan: a kvtile::attention::decode_plan (new_plan_impl)
  int (*decode_workspace_bytes)(const kvtile_ops_cache&, const kvtile_ops_decode_params&, std::size_t* bytes);
  int (*decode)(const kvtile_ops_cache&, const kvtile_ops_decode_params&, kvtile_ops_stream stream);
  int (*plan)(void* plan, const kvtile_ops_cache&, const std::int32_t* host_seq_lens,
              const std::int32_t* host_qo_indptr, const kvtile_ops_decode_params&, kvtile_ops_stream stream);
  int (*run)(const void* plan, const kvtile_ops_cache&, const kvtile_ops_decode_params&, kvtile_ops_stream stream);
};

// Checks the params of a decode call (device.cpp): non-null, struct_size,
// q_dtype, q_heads > 0, max_q_tokens in [1, 8], window_left >= -1,
// logit_softcap finite and >= 0, num_splits in [0, 4096]; with need_io (calls
// that plan or launch) also max_q_tokens 1 without qo_indptr, softmax_scale
// positive and finite, workspace non-null and aligned. Returns 0 or a code
// with a message naming function.
int check_params(const kvtile_ops_decode_params* p, const char* function, bool need_io);

// q and out non-null (calls that launch).
int check_io(const kvtile_ops_decode_params* p, const char* function);
// q_heads a positive multiple of kv_heads, num_seqs >= 0.
int check_heads(int q_heads, int kv_heads, int num_seqs, const char* function);
// A plan's host lengths: non-null (num_seqs > 0), each in [0, capacity].
int check_host_lens(const std::int32_t* lens, int num_seqs, long long capacity, const char* function);

// plan / run: plan and cache non-null, params checked (run: q, out too).
int check_plan_args(const kvtile_ops_decode_plan* plan, const void* cache, const kvtile_ops_decode_params* params,
                    const char* function, bool run);
// run against what the plan was made for: a message naming the field that differs.
int check_against_plan(const kvtile_ops_decode_plan* plan, bool fp16, int preset, int head_dim, int kv_heads,
                       int num_seqs, int max_pages, const kvtile_ops_decode_params& p, const char* function);
void record_plan(kvtile_ops_decode_plan* plan, bool fp16, int preset, int head_dim, int kv_heads, int num_seqs,
                 int max_pages, const kvtile_ops_decode_params& p);

// The live plan handles (host.cpp): remember_plan after create (false: out
// of memory), forget_plan before destroy (false: not a live handle).
bool remember_plan(const void* plan);
bool forget_plan(const void* plan);

// A kvtile::attention::decode_plan on the heap (device_fp16.cu: the class is CUDA-only).
void* new_plan_impl();
void delete_plan_impl(void* impl);
void limit_plan_ctas(void* impl, int max_ctas);
void plan_impl_info(const void* impl, std::int32_t* ctas, std::int32_t* chunks);

}  // namespace kvtile_ops

// The C ABI's opaque plan: the core's plan and what it was planned for, so
// that run names the field that differs.
struct kvtile_ops_decode_plan {
  void* impl = nullptr;      // kvtile::attention::decode_plan
  bool planned = false;      // the last plan succeeded
  bool fp16 = false;         // planned over an fp16 cache
  int preset = -1, head_dim = 0, kv_heads = 0, num_seqs = 0, max_pages_per_seq = 0;
  kvtile_ops_decode_params params{};
};

namespace kvtile_ops {

// nullptr when the library was built without that (preset, head_dim).
const device_table* find_device_table(int preset, int head_dim);

}  // namespace kvtile_ops
