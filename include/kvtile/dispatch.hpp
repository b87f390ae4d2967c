// kvtile/dispatch.hpp: runtime parameters -> a compile-time codec.
//
//   kvtile::codec_params p{128, 128, 4, 2};            // head_dim, tile tokens, bits
//   status s = kvtile::dispatch(p, [&](auto codec) {
//     using Codec = typename decltype(codec)::type;     // e.g. presets::k4v2_g128<128>
//     ...
//   });
//
// The instantiated set is explicit and small: the preset table's shapes
// (presets::preset_shapes: G=128: k4v2, k4v4, k2v2, k8v8; G=64: k4v2, k4v4) x
// head_dims {64, 128, 256} x packing x method. Anything else returns
// a status, never calls f.
#pragma once

#include "config.hpp"

#include <utility>

#include "presets.hpp"
#include "status.hpp"

KVTILE_NAMESPACE_BEGIN

enum class packing { fp8_scales, fp16_scales };
enum class method { kvarn, kivi, rotate_rtn };

constexpr const char* to_string(packing p) noexcept {
  switch (p) {
    case packing::fp8_scales: return "fp8_scales";
    case packing::fp16_scales: return "fp16_scales";
  }
  return "unknown packing";
}
constexpr const char* to_string(method m) noexcept {
  switch (m) {
    case method::kvarn: return "kvarn";
    case method::kivi: return "kivi";
    case method::rotate_rtn: return "rotate_rtn";
  }
  return "unknown method";
}

struct codec_params {
  int head_dim = 128;
  int tile_tokens = 128;
  int key_bits = 4;
  int value_bits = 2;
  packing pack = packing::fp8_scales;
  method algo = method::kvarn;
};

template <class Codec>
struct codec_tag {
  using type = Codec;
};

// Which status dispatch() would return for p (success if supported).
constexpr status check(const codec_params& p) noexcept {
  if (!is_head_dim(p.head_dim)) return status::unsupported_head_dim;
  // tile_config supports G in {32, 64, 128, 256}; the table (and so dispatch) uses some of them.
  bool tile_ok = false;
  for (const presets::preset_shape& sh : presets::preset_shapes) tile_ok = tile_ok || sh.tile_tokens == p.tile_tokens;
  if (!tile_ok) return status::unsupported_tile_tokens;
  if (presets::find_shape(p.tile_tokens, p.key_bits, p.value_bits) < 0) return status::unsupported_bits;
  if (p.pack != packing::fp8_scales && p.pack != packing::fp16_scales) return status::invalid_argument;
  if (p.algo != method::kvarn && p.algo != method::kivi && p.algo != method::rotate_rtn) return status::invalid_argument;
  return status::success;
}

namespace detail {
template <int D, int G, int KB, int VB, class Packer, class F>
void call_method(method m, F& f) {
  switch (m) {
    case method::kvarn: f(codec_tag<presets::kvarn<D, G, KB, VB, Packer>>{}); break;
    case method::kivi: f(codec_tag<presets::kivi<D, G, KB, VB, Packer>>{}); break;
    case method::rotate_rtn: f(codec_tag<presets::rotate_rtn<D, G, KB, VB, Packer>>{}); break;
  }
}
template <int D, int I, class F>
void call_packing(const codec_params& p, F& f) {
  constexpr presets::preset_shape sh = presets::preset_shapes[I];
  if (p.pack == packing::fp8_scales)
    call_method<D, sh.tile_tokens, sh.key_bits, sh.value_bits, fp8_scales>(p.algo, f);
  else
    call_method<D, sh.tile_tokens, sh.key_bits, sh.value_bits, fp16_scales>(p.algo, f);
}
template <int D, class F, int... I>
void call_shape(const codec_params& p, F& f, std::integer_sequence<int, I...>) {
  const int index = presets::find_shape(p.tile_tokens, p.key_bits, p.value_bits);
  ((index == I ? call_packing<D, I>(p, f) : void()), ...);
}
template <class F, int... H>
void call_head_dim(const codec_params& p, F& f, std::integer_sequence<int, H...>) {
  ((p.head_dim == head_dims[H]
        ? call_shape<head_dims[H]>(p, f, std::make_integer_sequence<int, presets::num_preset_shapes>{})
        : void()),
   ...);
}
}  // namespace detail

// Calls f(codec_tag<Codec>{}) once, for the codec of p; returns check(p)
// without calling f if p is not in the instantiated set.
template <class F>
status dispatch(const codec_params& p, F&& f) {
  if (status s = check(p); s != status::success) return s;
  detail::call_head_dim(p, f, std::make_integer_sequence<int, num_head_dims>{});
  return status::success;
}

KVTILE_NAMESPACE_END
