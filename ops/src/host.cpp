// ops/src/host.cpp: kvtile_ops functions that need no GPU: status strings and
// messages, preset information, and the host codec over tiles.
#include <kvtile/codec/element.hpp>
#include <kvtile/codec/record_span.hpp>
#include <kvtile/detail/checked.hpp>
#include <kvtile/paged/paged_record.hpp>
#include <kvtile/paged/speculative.hpp>
#include <kvtile/version.hpp>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "ops_internal.hpp"

namespace kvtile_ops {

namespace {
thread_local std::string last_error;

// The ABI's codes are kvtile::status's values: one assertion per value, and
// the core must have no status after the last one mirrored here.
using kvtile::status;
static_assert(KVTILE_OPS_SUCCESS == static_cast<int>(status::success));
static_assert(KVTILE_OPS_NON_FINITE_INPUT == static_cast<int>(status::non_finite_input));
static_assert(KVTILE_OPS_NULL_POINTER == static_cast<int>(status::null_pointer));
static_assert(KVTILE_OPS_INVALID_ARGUMENT == static_cast<int>(status::invalid_argument));
static_assert(KVTILE_OPS_MISALIGNED == static_cast<int>(status::misaligned));
static_assert(KVTILE_OPS_UNSUPPORTED_HEAD_DIM == static_cast<int>(status::unsupported_head_dim));
static_assert(KVTILE_OPS_UNSUPPORTED_TILE_TOKENS == static_cast<int>(status::unsupported_tile_tokens));
static_assert(KVTILE_OPS_UNSUPPORTED_BITS == static_cast<int>(status::unsupported_bits));
static_assert(KVTILE_OPS_UNSUPPORTED_DTYPE == static_cast<int>(status::unsupported_dtype));
static_assert(KVTILE_OPS_OUT_OF_RANGE == static_cast<int>(status::out_of_range));
static_assert(KVTILE_OPS_CORRUPT_RECORD == static_cast<int>(status::corrupt_record));
static_assert(KVTILE_OPS_INSUFFICIENT_SPACE == static_cast<int>(status::insufficient_space));
static_assert(KVTILE_OPS_CUDA_ERROR == static_cast<int>(status::cuda_error));
static_assert(KVTILE_OPS_NO_DEVICE == static_cast<int>(status::no_device));
static_assert(KVTILE_OPS_UNSUPPORTED_ARCH == static_cast<int>(status::unsupported_arch));
static_assert(KVTILE_OPS_TRUNCATED_RECORD == static_cast<int>(status::truncated_record));
constexpr int last_core_status = KVTILE_OPS_TRUNCATED_RECORD;
constexpr bool same(const char* a, const char* b) { return *a == *b && (*a == 0 || same(a + 1, b + 1)); }
static_assert(same(kvtile::to_string(static_cast<status>(last_core_status + 1)), "unknown status"),
              "kvtile::status has a value after truncated_record: add it to kvtile_ops_status and here");
}  // namespace

int fail(int code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  last_error = buf;
  return code;
}

namespace {
std::mutex plans_mutex;
std::unordered_set<const void*>& live_plans() {
  static auto* set = new std::unordered_set<const void*>();  // never destroyed: usable during static destruction
  return *set;
}
}  // namespace

bool remember_plan(const void* plan) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  try {
    return live_plans().insert(plan).second;
  } catch (...) {
    return false;
  }
}

bool forget_plan(const void* plan) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  return live_plans().erase(plan) == 1;
}

namespace {
// "a, b or c" of n items written by item(i, out).
template <class Item>
std::string choice_list(int n, Item item, const char* last_sep = " or ") {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? last_sep : ", ";
    item(i, out);
  }
  return out;
}
}  // namespace

const char* preset_choices() {
  static const std::string text = choice_list(KVTILE_OPS_NUM_PRESETS, [](int i, std::string& out) {
    out += std::to_string(i) + " (" + abi_preset_name(i) + ")";
  });
  return text.c_str();
}
const char* head_dim_choices() {
  static const std::string text =
      choice_list(num_head_dims, [](int i, std::string& out) { out += std::to_string(kvtile::head_dims[i]); });
  return text.c_str();
}
const char* device_instance_list() {
  static const std::string text = [] {
    std::string out;
    for (int p = 0; p < KVTILE_OPS_NUM_PRESETS; ++p) {
      std::string dims;
      for (const device_instance& d : device_instances)
        if (d.preset == p) dims += (dims.empty() ? "" : ", ") + std::to_string(d.head_dim);
      if (dims.empty()) continue;
      out += (out.empty() ? "" : "; ") + std::string(abi_preset_name(p)) + " at " + dims;
    }
    return out;
  }();
  return text.c_str();
}

int from_status(kvtile::status s, const char* function) {
  if (s == kvtile::status::success) return KVTILE_OPS_SUCCESS;
  const int code = static_cast<int>(s);
  if (s == kvtile::status::non_finite_input) {
    fail(code, "%s: %s", function, kvtile::to_string(s));  // a warning: the output was written
    return code;
  }
  return fail(code, "%s: %s", function, kvtile::to_string(s));
}

int fail_option(const kvtile::attention::arg_error& e, const char* function) {
  return fail(static_cast<int>(e.code), "%s: %s %g %s", function, e.name, e.value, e.rule);
}

}  // namespace kvtile_ops

using namespace kvtile_ops;

namespace {

template <class T, class Tag>
int encode_typed(const void* keys, const void* values, std::int64_t n, void* records, int paged, Tag) {
  using Codec = typename Tag::type;
  constexpr int D = Codec::D, G = Codec::G;
  const T* k = static_cast<const T*>(keys);
  const T* v = static_cast<const T*>(values);
  auto* out = static_cast<std::uint8_t*>(records);
  std::int64_t elements = 0, bytes = 0;  // the input and output offsets below stay representable
  if (!kvtile::detail::checked_product<std::int64_t>(elements, n, G, D) ||
      !kvtile::detail::checked_product<std::int64_t>(bytes, n, static_cast<std::int64_t>(Codec::record_bytes)))
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_encode_tiles_host: num_tiles %lld is too large",
                static_cast<long long>(n));
  auto ws = std::make_unique<typename Codec::workspace>();
  bool non_finite = false;
  std::vector<kvtile::half_t> hk, hv;
  if (paged) {
    hk.resize(static_cast<std::size_t>(G) * D);
    hv.resize(hk.size());
  }
  using PC = kvtile::device::paged_record_codec<Codec>;
  auto pws = std::make_unique<typename PC::workspace>();
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t off = t * G * D;
    kvtile::status s;
    if (paged) {
      unsigned flags = 0;
      for (int g = 0; g < G; ++g) {
        flags |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(k + off + g * D, &hk[g * D]);
        flags |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(v + off + g * D, &hv[g * D]);
      }
      s = kvtile::device::paged_flags_status(flags);
      if (s == kvtile::status::out_of_range)
        return fail(static_cast<int>(s),
                    "kvtile_ops_encode_tiles_host: tile %lld: a rotated value exceeds fp16's range (+-65504); the "
                    "paged store would saturate it (paged_flag_saturated)",
                    static_cast<long long>(t));
      if (s == kvtile::status::non_finite_input) non_finite = true;
      s = PC::encode(hk.data(), D, hv.data(), D, out + t * static_cast<std::int64_t>(Codec::record_bytes), pws.get());
    } else {
      s = Codec::encode(k + off, D, v + off, D, out + t * static_cast<std::int64_t>(Codec::record_bytes), ws.get());
    }
    if (s == kvtile::status::non_finite_input) {
      non_finite = true;
    } else if (s != kvtile::status::success) {
      return fail(static_cast<int>(s), "kvtile_ops_encode_tiles_host: tile %lld: %s", static_cast<long long>(t),
                  kvtile::to_string(s));
    }
  }
  if (non_finite)
    return fail(KVTILE_OPS_NON_FINITE_INPUT, "kvtile_ops_encode_tiles_host: non-finite inputs were replaced by 0");
  return KVTILE_OPS_SUCCESS;
}

template <class T, class Tag>
int decode_typed(const void* records, std::size_t records_bytes, std::int64_t n, void* keys, void* values, int frame,
                 Tag) {
  using Codec = typename Tag::type;
  constexpr int D = Codec::D, G = Codec::G;
  const kvtile::record_span all{records, records_bytes};
  if (kvtile::status s = kvtile::check_records(all, n, Codec::record_bytes); s != kvtile::status::success)
    return fail(static_cast<int>(s), "kvtile_ops_decode_tiles_host: records_bytes %zu for %lld records of %zu bytes: %s",
                records_bytes, static_cast<long long>(n), Codec::record_bytes, kvtile::to_string(s));
  std::int64_t elements = 0;  // keys/values elements: the output offsets below stay representable
  if (!kvtile::detail::checked_product<std::int64_t>(elements, n, G, D))
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_decode_tiles_host: num_tiles %lld is too large",
                static_cast<long long>(n));
  T* k = static_cast<T*>(keys);
  T* v = static_cast<T*>(values);
  const auto* in = static_cast<const std::uint8_t*>(records);
  const kvtile::frame f = frame == KVTILE_OPS_FRAME_ORIGINAL ? kvtile::frame::original : kvtile::frame::rotated;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t off = t * G * D;
    const std::size_t at = static_cast<std::size_t>(t) * Codec::record_bytes;  // < records_bytes (checked)
    const kvtile::status s = Codec::decode(kvtile::record_span{in + at, records_bytes - at}, k + off, D, v + off, D, f);
    if (s != kvtile::status::success)
      return fail(static_cast<int>(s), "kvtile_ops_decode_tiles_host: record %lld: %s", static_cast<long long>(t),
                  kvtile::to_string(s));
  }
  return KVTILE_OPS_SUCCESS;
}

}  // namespace

extern "C" {

const char* kvtile_ops_status_string(int status) {
  if (status == KVTILE_OPS_UNSUPPORTED_PRESET) return "unsupported preset";
  if (status < 0 || status > last_core_status) return "unknown status";
  return kvtile::to_string(static_cast<kvtile::status>(status));
}

const char* kvtile_ops_last_error(void) { return last_error.c_str(); }

#define KVTILE_OPS_STR2(x) #x
#define KVTILE_OPS_STR(x) KVTILE_OPS_STR2(x)
const char* kvtile_ops_version(void) {
  return KVTILE_OPS_STR(KVTILE_VERSION_MAJOR) "." KVTILE_OPS_STR(KVTILE_VERSION_MINOR) "." KVTILE_OPS_STR(
      KVTILE_VERSION_PATCH);
}

const char* kvtile_ops_preset_name(int preset) {
  return preset >= 0 && preset < KVTILE_OPS_NUM_PRESETS ? abi_preset_name(preset) : nullptr;
}

int kvtile_ops_check_decode_options(int32_t q_heads, int32_t max_q_tokens, int has_qo_indptr, int32_t window_left,
                                    float logit_softcap, int32_t num_splits, int need_io, float softmax_scale) {
  if (kvtile::attention::arg_error e = kvtile::attention::check_decode_options(
          q_heads, max_q_tokens, has_qo_indptr != 0, window_left, logit_softcap, num_splits, need_io != 0,
          softmax_scale))
    return fail_option(e, "kvtile_ops_check_decode_options");
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_get_preset_info(int preset, int head_dim, kvtile_ops_preset_info* info) {
  if (!info) return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_get_preset_info: info is NULL");
  return with_codec(preset, head_dim, "kvtile_ops_get_preset_info", [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    info->tile_tokens = Codec::G;
    info->key_bits = Codec::config::key_bits;
    info->value_bits = Codec::config::value_bits;
    info->record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
    info->bits_per_element = Codec::bits_per_element;
    return KVTILE_OPS_SUCCESS;
  });
}

int32_t kvtile_ops_fp16_page_tokens(void) { return kvtile::fp16_page_tokens; }

int kvtile_ops_encode_tiles_host(int preset, int head_dim, int dtype, const void* keys, const void* values,
                                 int64_t num_tiles, void* records, int paged) {
  if (num_tiles < 0) return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_encode_tiles_host: num_tiles < 0");
  if (num_tiles > 0 && (!keys || !values || !records))
    return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_encode_tiles_host: keys, values or records is NULL");
  return with_codec(preset, head_dim, "kvtile_ops_encode_tiles_host", [&](auto tag) {
    switch (dtype) {
      case KVTILE_OPS_FP16: return encode_typed<kvtile::half_t>(keys, values, num_tiles, records, paged, tag);
      case KVTILE_OPS_BF16: return encode_typed<kvtile::bfloat16_t>(keys, values, num_tiles, records, paged, tag);
      case KVTILE_OPS_FP32: return encode_typed<float>(keys, values, num_tiles, records, paged, tag);
      default:
        return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "kvtile_ops_encode_tiles_host: dtype %d is not fp16, bf16 or fp32",
                    dtype);
    }
  });
}

int kvtile_ops_decode_tiles_host(int preset, int head_dim, const void* records, size_t records_bytes, int64_t num_tiles,
                                 int dtype, void* keys, void* values, int frame) {
  if (num_tiles < 0) return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_decode_tiles_host: num_tiles < 0");
  if (num_tiles > 0 && (!keys || !values || !records))
    return fail(KVTILE_OPS_NULL_POINTER, "kvtile_ops_decode_tiles_host: keys, values or records is NULL");
  if (frame != KVTILE_OPS_FRAME_ORIGINAL && frame != KVTILE_OPS_FRAME_ROTATED)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "kvtile_ops_decode_tiles_host: frame %d is not 0 or 1", frame);
  return with_codec(preset, head_dim, "kvtile_ops_decode_tiles_host", [&](auto tag) {
    switch (dtype) {
      case KVTILE_OPS_FP16: return decode_typed<kvtile::half_t>(records, records_bytes, num_tiles, keys, values, frame, tag);
      case KVTILE_OPS_BF16: return decode_typed<kvtile::bfloat16_t>(records, records_bytes, num_tiles, keys, values, frame, tag);
      case KVTILE_OPS_FP32: return decode_typed<float>(records, records_bytes, num_tiles, keys, values, frame, tag);
      default:
        return fail(KVTILE_OPS_UNSUPPORTED_DTYPE, "kvtile_ops_decode_tiles_host: dtype %d is not fp16, bf16 or fp32",
                    dtype);
    }
  });
}

}  // extern "C"

// ---- speculative decoding and forks: the host-only functions ----------------------

extern "C" {

int kvtile_ops_draft_bytes(int preset, int head_dim, int32_t num_slots, int32_t kv_heads, int64_t* bytes) {
  const char* fn = "kvtile_ops_draft_bytes";
  if (!bytes) return fail(KVTILE_OPS_NULL_POINTER, "%s: bytes is NULL", fn);
  kvtile_ops_preset_info info{};
  if (int e = kvtile_ops_get_preset_info(preset, head_dim, &info)) return e;
  if (num_slots < 0 || kv_heads <= 0)
    return fail(KVTILE_OPS_INVALID_ARGUMENT, "%s: num_slots %d must be >= 0 and kv_heads %d positive", fn, num_slots,
                kv_heads);
  *bytes = kvtile::draft_bytes(num_slots, kv_heads, info.tile_tokens, head_dim);
  return KVTILE_OPS_SUCCESS;
}

int kvtile_ops_validate_fork(const kvtile_ops_cache* cache, const int32_t* host_src_slots,
                             const int32_t* host_dst_slots, int32_t count, const int32_t* host_tail_slots,
                             const int32_t* host_seq_lens) {
  const char* fn = "kvtile_ops_validate_fork";
  if (!cache) return fail(KVTILE_OPS_NULL_POINTER, "%s: cache descriptor is NULL", fn);
  kvtile::paged_cache_view v;  // validate_fork reads the row and slot counts only
  v.num_seqs = cache->num_seqs;
  v.num_slots = cache->num_slots;
  v.tail_slots = cache->tail_slots;
  const kvtile::status s = kvtile::validate_fork(v, host_src_slots, host_dst_slots, count, host_tail_slots, host_seq_lens);
  if (s == kvtile::status::invalid_argument)
    return fail(KVTILE_OPS_INVALID_ARGUMENT,
                "%s: a fork pair has a slot outside [0, %d), a destination twice or also a source, or a destination "
                "that is the slot of a live row (seq_lens > 0): fork only into free slots",
                fn, v.slots());
  return from_status(s, fn);
}

}  // extern "C"
