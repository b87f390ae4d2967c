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

#include <type_traits>

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

// ---- The preset table: the one list of the shapes kvtile names and instantiates
// (each at every kvtile::head_dims).
// dispatch() (every method and packing of every shape at every head_dim), the C
// ABI's preset ids and instantiated set (ops/src/ops_internal.hpp), the Python
// registry (through the C ABI) and kvtile-eval's lists derive theirs from it.
struct preset_shape {
  const char* name;  // the alias above of the same name
  int tile_tokens;   // G
  int key_bits;
  int value_bits;
};
inline constexpr preset_shape preset_shapes[] = {
    {"k4v2_g128", 128, 4, 2}, {"k4v4_g128", 128, 4, 4}, {"k4v2_g64", 64, 4, 2},
    {"k4v4_g64", 64, 4, 4},   {"k2v2_g128", 128, 2, 2}, {"k8v8_g128", 128, 8, 8},
};
inline constexpr int num_preset_shapes = static_cast<int>(sizeof(preset_shapes) / sizeof(preset_shapes[0]));
// Index in preset_shapes of (G, key bits, value bits), or -1.
constexpr int find_shape(int tile_tokens, int key_bits, int value_bits) noexcept {
  for (int i = 0; i < num_preset_shapes; ++i)
    if (preset_shapes[i].tile_tokens == tile_tokens && preset_shapes[i].key_bits == key_bits && preset_shapes[i].value_bits == value_bits)
      return i;
  return -1;
}
constexpr bool same_name(const char* a, const char* b) noexcept {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
// Index in preset_shapes of a name, or -1.
constexpr int find_shape(const char* name) noexcept {
  for (int i = 0; i < num_preset_shapes; ++i)
    if (same_name(preset_shapes[i].name, name)) return i;
  return -1;
}
// The KVarN codec of preset_shapes[I] at head_dim D.
template <int I, int D, class Packer = fp8_scales>
using kvarn_shape = kvarn<D, preset_shapes[I].tile_tokens, preset_shapes[I].key_bits, preset_shapes[I].value_bits, Packer>;
}  // namespace presets

namespace detail {
template <int I, template <int, class> class Alias>
constexpr bool names_shape(const char* name) {
  return presets::find_shape(name) == I && std::is_same_v<Alias<128, fp8_scales>, presets::kvarn_shape<I, 128>>;
}
static_assert(names_shape<0, presets::k4v2_g128>("k4v2_g128") && names_shape<1, presets::k4v4_g128>("k4v4_g128") &&
                  names_shape<2, presets::k4v2_g64>("k4v2_g64") && names_shape<3, presets::k4v4_g64>("k4v4_g64") &&
                  names_shape<4, presets::k2v2_g128>("k2v2_g128") && names_shape<5, presets::k8v8_g128>("k8v8_g128") &&
                  presets::num_preset_shapes == 6,
              "every named preset alias is the table's entry of the same name");
}  // namespace detail
KVTILE_NAMESPACE_END
