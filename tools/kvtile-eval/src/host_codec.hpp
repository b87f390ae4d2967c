// tools/kvtile-eval/src/host_codec.hpp: quantize_layer_method (layer_codec.hpp)
// for one head_dim, included only by src/host_codec_d{64,128,256}.cpp.
//
// dispatch_method (methods.hpp) names every codec of every head_dim and every
// kvtile::method for any method_spec; this file compiles quantize_layer for
// those of head_dim D that evaluate() can reach (host_codec_traits::reachable) and
// nothing for the others, so each codec is compiled once, in one of three
// translation units that a parallel build compiles at once.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "../layer_codec.hpp"
#include "../methods.hpp"
#include "../sinkhorn_memo.hpp"

namespace kvtile_eval {
namespace detail {

template <class Codec>
struct host_codec_traits;
template <class Cfg, class Rot, class Norm, class Rd, class Pk>
struct host_codec_traits<kvtile::tile_codec<Cfg, Rot, Norm, Rd, Pk>> {
  static constexpr int head_dim = Cfg::head_dim;
  // Whether dispatch_method can call f with this codec for a method_spec that
  // evaluate() runs (p built from the spec: p.algo is kvarn exactly for the
  // kvarn and kvarn-0.1 families):
  //  * kivi, rotate_rtn (no normalization): with baseline_rounding only (the
  //    presets' kivi / rotate_rtn with rtn<> come only from kvtile::dispatch
  //    for a kvarn method, whose p.algo never selects them);
  //  * kvarn with rtn<>: the presets and the iteration variants;
  //  * kvarn with kvarn01_rounding: kvtile 0.1's codec, fp16 scales,
  //    kvarn01_iterations, G = 128, k2v2 / k4v2 / k4v4 (kvarn01_supported).
  static constexpr bool reachable() {
    if constexpr (Norm::is_none) {
      return std::is_same_v<Rd, baseline_rounding>;
    } else {
      if (std::is_same_v<Rd, kvtile::rtn<>>) return true;
      constexpr int kb = Cfg::key_bits, vb = Cfg::value_bits;
      return std::is_same_v<Rd, kvarn01_rounding> && std::is_same_v<Pk, kvtile::fp16_scales> &&
             Norm::iterations == kvarn01_iterations && Cfg::tile_tokens == 128 &&
             ((kb == 2 && vb == 2) || (kb == 4 && (vb == 2 || vb == 4)));
    }
  }
};

template <int D>
kvtile::status quantize_layer_method_d(const method_spec& m, const kvtile::codec_params& p, bool run,
                                       const dataset& ds, int l, sinkhorn_memo* memo, int threads,
                                       layer_buffers& b, std::string& err, std::vector<unsigned char>* records,
                                       host_codec_result& out) {
  return dispatch_method(m, p, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    using traits = host_codec_traits<Codec>;
    if constexpr (traits::head_dim == D && traits::reachable()) {
      using Run = with_memo_t<Codec>;
      static_assert(Run::record_bytes == Codec::record_bytes, "memo must not change the record");
      out.bits = Codec::bits_per_element;
      out.record_bytes = Codec::record_bytes;
      if (run) out.ok = quantize_layer<Run>(ds, l, memo, threads, b, err, records);
    } else {
      // Not compiled here (reachable() or the head_dim's file is wrong): fail the method loudly.
      out.ok = false;
      err = "internal error: kvtile-eval has no host codec compiled for " + m.name() + " at head_dim " +
            std::to_string(p.head_dim);
    }
  });
}

// The instantiations, one per translation unit (src/host_codec_d*.cpp);
// quantize_layer_method (src/host_codec.cpp) calls the one of p.head_dim.
#define KVTILE_EVAL_HOST_CODEC_D(D)                                                                             \
  kvtile::status quantize_layer_method_d##D(const method_spec& m, const kvtile::codec_params& p, bool run,       \
                                            const dataset& ds, int l, sinkhorn_memo* memo, int threads,       \
                                            layer_buffers& b, std::string& err,                               \
                                            std::vector<unsigned char>* records, host_codec_result& out)
KVTILE_EVAL_HOST_CODEC_D(64);
KVTILE_EVAL_HOST_CODEC_D(128);
KVTILE_EVAL_HOST_CODEC_D(256);

}  // namespace detail
}  // namespace kvtile_eval
