// kvtile/dispatch.hpp: runtime parameters -> a compile-time codec.
//
//   kvtile::codec_params p{128, 128, 4, 2};            // head_dim, tile tokens, bits
//   status s = kvtile::dispatch(p, [&](auto codec) {
//     using Codec = typename decltype(codec)::type;     // e.g. presets::k4v2_g128<128>
//     ...
//   });
//
// The instantiated set is explicit and small: the named presets' shapes
// (G=128: k4v2, k4v4, k2v2, k8v8; G=64: k4v2, k4v4) x head_dim {64, 128, 256}
// x packing x method. Anything else returns a status, never calls f.
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
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return status::unsupported_head_dim;
  // tile_config supports G in {32, 64, 128, 256}; presets (and so dispatch) use 64 and 128.
  if (p.tile_tokens != 64 && p.tile_tokens != 128) return status::unsupported_tile_tokens;
  auto valid_bits = [](int b) { return b == 2 || b == 4 || b == 8; };
  if (!valid_bits(p.key_bits) || !valid_bits(p.value_bits)) return status::unsupported_bits;
  const int kb = p.key_bits, vb = p.value_bits;
  const bool shape_ok = p.tile_tokens == 128
                            ? ((kb == 4 && (vb == 2 || vb == 4)) || (kb == 2 && vb == 2) || (kb == 8 && vb == 8))
                            : (kb == 4 && (vb == 2 || vb == 4));
  if (!shape_ok) return status::unsupported_bits;
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
template <int D, int G, int KB, int VB, class F>
void call_packing(const codec_params& p, F& f) {
  if (p.pack == packing::fp8_scales)
    call_method<D, G, KB, VB, fp8_scales>(p.algo, f);
  else
    call_method<D, G, KB, VB, fp16_scales>(p.algo, f);
}
template <int D, class F>
void call_shape(const codec_params& p, F& f) {
  const int kb = p.key_bits, vb = p.value_bits;
  if (p.tile_tokens == 128) {
    if (kb == 4 && vb == 2) call_packing<D, 128, 4, 2>(p, f);
    else if (kb == 4 && vb == 4) call_packing<D, 128, 4, 4>(p, f);
    else if (kb == 2 && vb == 2) call_packing<D, 128, 2, 2>(p, f);
    else call_packing<D, 128, 8, 8>(p, f);
  } else {
    if (vb == 2) call_packing<D, 64, 4, 2>(p, f);
    else call_packing<D, 64, 4, 4>(p, f);
  }
}
}  // namespace detail

template <class F>
status dispatch(const codec_params& p, F&& f) {
  if (status s = check(p); s != status::success) return s;
  switch (p.head_dim) {
    case 64: detail::call_shape<64>(p, f); break;
    case 128: detail::call_shape<128>(p, f); break;
    default: detail::call_shape<256>(p, f); break;
  }
  return status::success;
}

KVTILE_NAMESPACE_END
