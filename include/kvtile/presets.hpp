// kvtile/presets.hpp: named codecs. `presets::k4v2_g128<128>` is the default.
//
// Every preset takes the head_dim and, optionally, the packing
// (fp8_scales by default, or fp16_scales for the KVarN vLLM layout).
#pragma once

#include "config.hpp"

#include "codec/tile_codec.hpp"
#include "normalization/none.hpp"
#include "normalization/sinkhorn.hpp"
#include "packing/fp16_scales.hpp"
#include "packing/fp8_scales.hpp"
#include "rotation/hadamard.hpp"
#include "rotation/identity.hpp"
#include "rounding/asymmetric_rtn.hpp"

KVTILE_NAMESPACE_BEGIN
namespace presets {

// The KVarN method: Hadamard rotation, Sinkhorn (2 iterations, the default of
// sinkhorn<>; 0 to 16 are supported), RTN with storage-aware rounding (rtn<>: the default row policy
// and clip ratios; rtn_cover: format 0.1's covering rule).
template <int D, int G, int KBits, int VBits, class Packer = fp8_scales, class Rounding = rtn<>, int Iterations = sinkhorn<>::iterations>
using kvarn = tile_codec<tile_config<D, G, KBits, VBits>, hadamard, sinkhorn<Iterations>, Rounding, Packer>;

template <int D, class Packer = fp8_scales> using k4v2_g128 = kvarn<D, 128, 4, 2, Packer>;
template <int D, class Packer = fp8_scales> using k4v4_g128 = kvarn<D, 128, 4, 4, Packer>;
template <int D, class Packer = fp8_scales> using k4v2_g64 = kvarn<D, 64, 4, 2, Packer>;
template <int D, class Packer = fp8_scales> using k4v4_g64 = kvarn<D, 64, 4, 4, Packer>;
template <int D, class Packer = fp8_scales> using k2v2_g128 = kvarn<D, 128, 2, 2, Packer>;
template <int D, class Packer = fp8_scales> using k8v8_g128 = kvarn<D, 128, 8, 8, Packer>;

// Baselines built from the same policies, for comparison.
// kivi: no rotation, no normalization, same axes (keys per channel, values per token).
template <int D, int G = 128, int KBits = 4, int VBits = 2, class Packer = fp8_scales>
using kivi = tile_codec<tile_config<D, G, KBits, VBits>, identity, no_normalization, rtn<>, Packer>;
// rotate_rtn: Hadamard rotation, no normalization.
template <int D, int G = 128, int KBits = 4, int VBits = 2, class Packer = fp8_scales>
using rotate_rtn = tile_codec<tile_config<D, G, KBits, VBits>, hadamard, no_normalization, rtn<>, Packer>;

template <int D, class Packer = fp8_scales> using default_codec = k4v2_g128<D, Packer>;

}  // namespace presets
KVTILE_NAMESPACE_END
