// tools/kvtile-eval/methods.hpp: the methods kvtile-eval measures.
//
// A method is a kvtile preset (family kvarn) in one packing, or a baseline:
// KVarN as kvtile 0.1 and the original KVarN round it (family kvarn01:
// min-max covering rule, no clip, Sinkhorn 8, fp16 scales), KIVI and Hadamard
// rotation + RTN (kvtile's `method` enum, through kvtile::dispatch, with
// plain min-max rounding: baseline_rounding) and
// per-token RTN (token_rtn.hpp). all_methods() lists
// the default set; select_methods() parses `--methods`. A kvarn method may
// also run at another Sinkhorn iteration count (`--sinkhorn-iterations`,
// add_iteration_variants); dispatch_method() picks its codec.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "tensor.hpp"

namespace kvtile_eval {

enum class family { kvarn, kivi, rotate_rtn, token_rtn, kvarn01 };

inline const char* to_string(family f) {
  switch (f) {
    case family::kvarn: return "kvarn";
    case family::kivi: return "kivi";
    case family::rotate_rtn: return "rotate_rtn";
    case family::token_rtn: return "token_rtn";
    case family::kvarn01: return "kvarn-0.1";
  }
  return "?";
}

// Sinkhorn iterations of the kvarn presets (sinkhorn<>'s default).
inline constexpr int preset_iterations = kvtile::sinkhorn<>::iterations;
// The baselines kivi and rotate_rtn round each row by plain min-max RTN
// (KIVI's rule: step (max - min) / qmax, zero at the min, no clip), stored as
// kvtile's records store it (zero rounded down to fp16, step rounded up to
// the packing's scale format until the grid covers the row: rtn_cover). Not
// the presets' KL-tuned rounding and clip (rtn<>): a baseline named after a
// published method is that method (kvtile::presets::kivi / rotate_rtn keep
// rtn<>; dispatch_method swaps the rounding).
using baseline_rounding = kvtile::rtn_cover;
// kvtile 0.1's codec (family kvarn01): its row rounding (rtn_cover: zero
// rounded down to fp16, step rounded up until the grid covers the row, no
// clip) and its Sinkhorn count. With fp16 scales its records are the
// original KVarN's (docs/format.md); the baseline of docs/accuracy.md's targets.
inline constexpr int kvarn01_iterations = 8;
using kvarn01_rounding = kvtile::rtn_cover;

struct method_spec {
  family fam = family::kvarn;
  int tile_tokens = 128, key_bits = 4, value_bits = 2;
  kvtile::packing pack = kvtile::packing::fp8_scales;
  int iterations = preset_iterations;  // Sinkhorn iterations (kvarn; kvarn01: kvarn01_iterations)

  std::string config() const {
    return "k" + std::to_string(key_bits) + "v" + std::to_string(value_bits) + "_g" + std::to_string(tile_tokens);
  }
  std::string packing_name() const {
    if (fam == family::token_rtn) return "fp16";
    return pack == kvtile::packing::fp8_scales ? "fp8" : "fp16";
  }
  // e.g. "k4v2_g128/fp8", "k2v2_g128/fp8 it4", "kivi k4v2_g128/fp8", "kvarn-0.1 k4v2_g128/fp16", "token_rtn k4v2"
  std::string name() const {
    if (fam == family::token_rtn)
      return std::string("token_rtn k") + std::to_string(key_bits) + "v" + std::to_string(value_bits);
    std::string n = config() + "/" + packing_name();
    if (fam == family::kvarn && iterations != preset_iterations) n += " it" + std::to_string(iterations);
    return fam == family::kvarn ? n : std::string(to_string(fam)) + " " + n;
  }
  // The kvarn shapes with variants here: k2v2, k4v2, k4v4 at G = 128.
  bool g128_kvarn_shape() const {
    return tile_tokens == 128 &&
           ((key_bits == 2 && value_bits == 2) || (key_bits == 4 && (value_bits == 2 || value_bits == 4)));
  }
  // Methods with a Sinkhorn count of their own (`iterations`).
  bool has_sinkhorn() const { return fam == family::kvarn || fam == family::kvarn01; }
};

// The Sinkhorn iteration counts kvtile-eval instantiates (the presets' own
// count, preset_iterations, is one of them), for the kvarn shapes k2v2_g128, k4v2_g128 and k4v4_g128 with fp8 scales.
inline constexpr int sinkhorn_iteration_choices[] = {0, 1, 2, 4, 8, 16};

inline bool iterations_supported(const method_spec& m) {
  return m.fam == family::kvarn && m.pack == kvtile::packing::fp8_scales && m.g128_kvarn_shape();
}

namespace detail {
// One case per entry of sinkhorn_iteration_choices; false (f not called) for any other count.
template <int D, int KB, int VB, class F>
bool call_iterations(int it, F& f) {
  using kvtile::presets::kvarn;
  using P = kvtile::fp8_scales;
  using R = kvtile::rtn<>;
  switch (it) {
    case 0: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 0>>{}); return true;
    case 1: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 1>>{}); return true;
    case 2: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 2>>{}); return true;
    case 4: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 4>>{}); return true;
    case 8: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 8>>{}); return true;
    case 16: f(kvtile::codec_tag<kvarn<D, 128, KB, VB, P, R, 16>>{}); return true;
    default: return false;
  }
}
// g(integral_constant KB, integral_constant VB) for a g128_kvarn_shape() method.
template <class G>
void by_shape(const method_spec& m, G&& g) {
  using two = std::integral_constant<int, 2>;
  using four = std::integral_constant<int, 4>;
  if (m.key_bits == 2) g(two{}, two{});
  else if (m.value_bits == 2) g(four{}, two{});
  else g(four{}, four{});
}
template <class G, int... I>
void by_index(G& g, int head_dim, std::integer_sequence<int, I...>) {
  ((head_dim == kvtile::head_dims[I] ? (void)g(std::integral_constant<int, kvtile::head_dims[I]>{}) : void()), ...);
}
// check(p), then g(std::integral_constant<int, D>) for p's head_dim (one of kvtile::head_dims).
template <class G>
kvtile::status by_head_dim(const kvtile::codec_params& p, G&& g) {
  if (const kvtile::status s = kvtile::check(p); s != kvtile::status::success) return s;
  by_index(g, p.head_dim, std::make_integer_sequence<int, kvtile::num_head_dims>{});
  return kvtile::status::success;
}
}  // namespace detail

// kvarn01 runs kvtile 0.1's codec with fp16 scales for the G = 128 shapes k2v2, k4v2, k4v4.
inline bool kvarn01_supported(const method_spec& m) {
  return m.fam == family::kvarn01 && m.pack == kvtile::packing::fp16_scales && m.iterations == kvarn01_iterations &&
         m.g128_kvarn_shape();
}

// Whether m's codec is the one kvtile::dispatch(p) gives (a preset at its own
// Sinkhorn count): the GPU codec of kvtile-eval runs only those (the
// baselines kivi and rotate_rtn use baseline_rounding: host only).
inline bool dispatch_codec(const method_spec& m) { return m.fam == family::kvarn && m.iterations == preset_iterations; }

// kvtile::dispatch(p, f) for method m: its preset, or for an iteration
// variant (m.iterations != preset_iterations) presets::kvarn at that count (the same codec
// but for the normalizer), or for kvarn01 presets::kvarn with kvtile 0.1's
// rounding and count. p must describe m (evaluate() builds it from m).
template <class F>
kvtile::status dispatch_method(const method_spec& m, const kvtile::codec_params& p, F&& f) {
  if (m.fam == family::kvarn01) {
    if (!kvarn01_supported(m)) return kvtile::status::invalid_argument;
    return detail::by_head_dim(p, [&](auto d) {
      detail::by_shape(m, [&](auto kb, auto vb) {
        f(kvtile::codec_tag<kvtile::presets::kvarn<decltype(d)::value, 128, decltype(kb)::value, decltype(vb)::value,
                                                   kvtile::fp16_scales, kvarn01_rounding, kvarn01_iterations>>{});
      });
    });
  }
  if (m.fam == family::kivi || m.fam == family::rotate_rtn) {
    // dispatch's kivi / rotate_rtn codec (rotation, normalization, packing) with plain min-max rounding.
    return kvtile::dispatch(p, [&](auto tag) {
      using C = typename decltype(tag)::type;
      f(kvtile::codec_tag<kvtile::tile_codec<typename C::config, typename C::rotation, typename C::normalizer,
                                             baseline_rounding, typename C::packer>>{});
    });
  }
  if (m.fam != family::kvarn || m.iterations == preset_iterations) return kvtile::dispatch(p, f);
  if (!iterations_supported(m)) return kvtile::status::invalid_argument;
  bool called = false;
  const kvtile::status s = detail::by_head_dim(p, [&](auto d) {
    detail::by_shape(m, [&](auto kb, auto vb) {
      called = detail::call_iterations<decltype(d)::value, decltype(kb)::value, decltype(vb)::value>(m.iterations, f);
    });
  });
  return s != kvtile::status::success ? s : (called ? s : kvtile::status::invalid_argument);
}

// `--sinkhorn-iterations`: after each selected kvarn method that
// iterations_supported() (its preset, preset_iterations, stays as the
// reference) inserts one variant per count of `its` other than that. False (with err) for a
// count outside sinkhorn_iteration_choices or when no selected method can take
// a count. An empty `its` changes nothing.
inline bool add_iteration_variants(const std::vector<int>& its, std::vector<method_spec>& methods, std::string& err) {
  if (its.empty()) return true;
  std::vector<int> counts;
  for (int it : its) {
    const int* const end = std::end(sinkhorn_iteration_choices);
    if (std::find(std::begin(sinkhorn_iteration_choices), end, it) == end) {
      err = "--sinkhorn-iterations " + std::to_string(it) + " is not supported (0, 1, 2, 4, 8 or 16)";
      return false;
    }
    if (it != preset_iterations && std::find(counts.begin(), counts.end(), it) == counts.end()) counts.push_back(it);
  }
  std::vector<method_spec> out;
  bool any = false;
  for (const auto& m : methods) {
    out.push_back(m);
    if (!iterations_supported(m) || m.iterations != preset_iterations) continue;
    any = true;
    for (int it : counts) {
      method_spec v = m;
      v.iterations = it;
      out.push_back(v);
    }
  }
  if (!any) {
    err = "--sinkhorn-iterations needs a selected kvarn method k2v2_g128, k4v2_g128 or k4v4_g128 with fp8 scales";
    return false;
  }
  methods.swap(out);
  return true;
}

// kvtile::head_dims as text, "64, 128, 256" (sep ", ") or "64, 128 or 256" (last_sep " or ").
inline std::string head_dim_list(const char* last_sep = ", ") {
  std::string out;
  for (int i = 0; i < kvtile::num_head_dims; ++i)
    out += (i == 0 ? "" : i + 1 == kvtile::num_head_dims ? last_sep : ", ") + std::to_string(kvtile::head_dims[i]);
  return out;
}

// Every preset of the preset table (kvtile::presets::preset_shapes, in its order) in
// both packings, then the baselines at its G=128 shapes: kvtile 0.1's KVarN
// with fp16 scales (k4v2, k4v4, k2v2), kivi and rotate_rtn (fp8 scales) and
// per-token RTN.
inline std::vector<method_spec> all_methods() {
  std::vector<method_spec> m;
  for (auto pk : {kvtile::packing::fp8_scales, kvtile::packing::fp16_scales})
    for (const auto& s : kvtile::presets::preset_shapes) m.push_back({family::kvarn, s.tile_tokens, s.key_bits, s.value_bits, pk});
  for (const auto& s : kvtile::presets::preset_shapes) {
    method_spec v01{family::kvarn01, s.tile_tokens, s.key_bits, s.value_bits, kvtile::packing::fp16_scales,
                    kvarn01_iterations};
    if (v01.g128_kvarn_shape()) m.push_back(v01);
  }
  for (auto f : {family::kivi, family::rotate_rtn, family::token_rtn})
    for (const auto& s : kvtile::presets::preset_shapes)
      if (s.tile_tokens == 128) m.push_back({f, 128, s.key_bits, s.value_bits, kvtile::packing::fp8_scales});
  return m;
}

// Selects methods by comma-separated terms: "all", "presets", "baselines", a
// family ("kvarn", "kvarn-0.1", "kivi", "rotate_rtn", "token_rtn"), a shape ("k4v2_g128",
// "k4v2"), a packing ("fp8", "fp16") or a full name. A method is kept when
// every '+'-joined part of some term matches it (e.g. "kivi+k2v2").
inline bool select_methods(const std::string& spec, std::vector<method_spec>& out, std::string& err) {
  out.clear();
  const auto all = all_methods();
  std::vector<std::string> terms;
  std::string cur;
  for (char c : spec + ",") {
    if (c == ',') {
      while (!cur.empty() && cur.back() == ' ') cur.pop_back();
      if (!cur.empty()) terms.push_back(cur);
      cur.clear();
    } else if (!(c == ' ' && cur.empty())) {
      cur += c;
    }
  }
  if (terms.empty()) {
    err = "no methods selected";
    return false;
  }
  auto part_matches = [](const method_spec& m, const std::string& p) {
    const std::string shape = "k" + std::to_string(m.key_bits) + "v" + std::to_string(m.value_bits);
    return p == "all" || (p == "presets" && m.fam == family::kvarn) || (p == "baselines" && m.fam != family::kvarn) ||
           p == to_string(m.fam) || p == m.config() || p == shape || p == m.packing_name() || p == m.name();
  };
  std::vector<bool> keep(all.size(), false);
  for (const auto& t : terms) {
    bool any = false;
    for (std::size_t i = 0; i < all.size(); ++i) {
      bool ok = true;
      std::size_t b = 0;
      while (ok) {
        const std::size_t e = t.find('+', b);
        ok = part_matches(all[i], t.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) break;
        b = e + 1;
      }
      if (ok) keep[i] = any = true;
    }
    if (!any) {
      err = "unknown method selection '" + printable(t) + "' (try all, presets, baselines, kvarn, kvarn-0.1, kivi, rotate_rtn, token_rtn, "
            "k4v2_g128, fp8, fp16 or a name like 'kivi k2v2_g128/fp8')";
      return false;
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i)
    if (keep[i]) out.push_back(all[i]);
  return true;
}

}  // namespace kvtile_eval
