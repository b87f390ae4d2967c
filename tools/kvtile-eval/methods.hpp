// tools/kvtile-eval/methods.hpp: the methods kvtile-eval measures.
//
// A method is a kvtile preset (family kvarn) in one packing, or a baseline:
// KIVI and Hadamard rotation + RTN (kvtile's `method` enum, through
// kvtile::dispatch) and per-token RTN (token_rtn.hpp). all_methods() lists
// the default set; select_methods() parses `--methods`.
#pragma once

#include <string>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "tensor.hpp"

namespace kvtile_eval {

enum class family { kvarn, kivi, rotate_rtn, token_rtn };

inline const char* to_string(family f) {
  switch (f) {
    case family::kvarn: return "kvarn";
    case family::kivi: return "kivi";
    case family::rotate_rtn: return "rotate_rtn";
    case family::token_rtn: return "token_rtn";
  }
  return "?";
}

struct method_spec {
  family fam = family::kvarn;
  int tile_tokens = 128, key_bits = 4, value_bits = 2;
  kvtile::packing pack = kvtile::packing::fp8_scales;

  std::string config() const {
    return "k" + std::to_string(key_bits) + "v" + std::to_string(value_bits) + "_g" + std::to_string(tile_tokens);
  }
  std::string packing_name() const {
    if (fam == family::token_rtn) return "fp16";
    return pack == kvtile::packing::fp8_scales ? "fp8" : "fp16";
  }
  // e.g. "k4v2_g128/fp8", "kivi k4v2_g128/fp8", "token_rtn k4v2"
  std::string name() const {
    if (fam == family::token_rtn)
      return std::string("token_rtn k") + std::to_string(key_bits) + "v" + std::to_string(value_bits);
    std::string n = config() + "/" + packing_name();
    return fam == family::kvarn ? n : std::string(to_string(fam)) + " " + n;
  }
};

// Every preset of presets.hpp in both packings, then the baselines at the
// G=128 shapes: kivi and rotate_rtn (fp8 scales) and per-token RTN.
inline std::vector<method_spec> all_methods() {
  std::vector<method_spec> m;
  const int shapes[6][3] = {{128, 4, 2}, {128, 4, 4}, {64, 4, 2}, {64, 4, 4}, {128, 2, 2}, {128, 8, 8}};
  for (auto pk : {kvtile::packing::fp8_scales, kvtile::packing::fp16_scales})
    for (auto& s : shapes) m.push_back({family::kvarn, s[0], s[1], s[2], pk});
  const int base[4][2] = {{4, 2}, {4, 4}, {2, 2}, {8, 8}};
  for (auto f : {family::kivi, family::rotate_rtn, family::token_rtn})
    for (auto& b : base) m.push_back({f, 128, b[0], b[1], kvtile::packing::fp8_scales});
  return m;
}

// Selects methods by comma-separated terms: "all", "presets", "baselines", a
// family ("kvarn", "kivi", "rotate_rtn", "token_rtn"), a shape ("k4v2_g128",
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
      err = "unknown method selection '" + printable(t) + "' (try all, presets, baselines, kvarn, kivi, rotate_rtn, token_rtn, "
            "k4v2_g128, fp8, fp16 or a name like 'kivi k2v2_g128/fp8')";
      return false;
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i)
    if (keep[i]) out.push_back(all[i]);
  return true;
}

}  // namespace kvtile_eval
