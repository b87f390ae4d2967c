// tools/kvtile-eval/report.hpp: the table, JSON and CSV outputs.
#pragma once

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kvtile/version.hpp>

#include "ranking.hpp"
#include "results.hpp"

namespace kvtile_eval {

namespace detail {
inline std::string fmt(const char* f, double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
inline std::string pct(double v) { return fmt("%.2f%%", 100.0 * v); }
inline std::string budget_label(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "<=%g%%", 100.0 * b);
  return s;
}
inline std::string pad(std::string s, std::size_t w, bool left = false) {
  if (s.size() >= w) return s;
  return left ? s + std::string(w - s.size(), ' ') : std::string(w - s.size(), ' ') + s;
}
inline const char* query_source_name(query_source q) {
  return q == query_source::file ? "file" : q == query_source::generated ? "generated" : "keys (proxy: no queries given)";
}
inline std::string context_label(int c) {
  if (c % 1024 == 0) return std::to_string(c / 1024) + "K";
  return std::to_string(c);
}
}  // namespace detail

namespace detail {
// "decode" (sink and own tile fp16), "all-quantized", "own-tile-fp16" or "sink-tile-fp16".
inline const char* semantics_name(const eval_result& r) {
  if (r.fp16_own_tile && r.fp16_sink_tile) return "decode";
  if (r.fp16_own_tile) return "own-tile-fp16";
  if (r.fp16_sink_tile) return "sink-tile-fp16";
  return "all-quantized";
}
}  // namespace detail

inline void print_table(const eval_result& r, const ranking& k, std::ostream& o) {
  using detail::fmt;
  using detail::pad;
  using detail::pct;
  o << "kvtile-eval " << KVTILE_VERSION_MAJOR << "." << KVTILE_VERSION_MINOR << "." << KVTILE_VERSION_PATCH << ": "
    << r.description << "\n";
  const int g = r.kv_heads > 0 ? r.q_heads / r.kv_heads : 1;
  o << "  queries: " << detail::query_source_name(r.qsrc) << "; per layer " << r.queries_per_layer
    << " sampled (position, KV head) pairs x " << g << " query heads, and " << r.context_queries
    << " pairs per context checkpoint; " << r.threads << " threads, " << fmt("%.1f", r.seconds) << " s\n";
  if (r.device != "cpu")
    o << "  device: " << r.device << " (tiles encoded and decoded by the GPU codec, metrics on the host"
      << (r.compared ? "; host codec run too and compared" : "") << ")\n";
  o << "  tokens of a trailing partial tile stay fp16 (as an engine's tail); 'bits' counts a quantized tile "
       "(K and V, all metadata)\n";
  o << "  attention semantics: " << detail::semantics_name(r) << ": ";
  if (r.fp16_own_tile && r.fp16_sink_tile)
    o << "each query sees the first tile (sink, --fp16-sink-tile) and its own tile (--fp16-own-tile) in fp16 and "
         "the tiles between quantized, as the paged cache serves a decode step (--all-quantized: every tile "
         "quantized)\n";
  else if (!r.fp16_own_tile && !r.fp16_sink_tile)
    o << "every complete tile up to the query quantized, the sink and the query's own tile included (harsher "
         "than a decode step; the default is --fp16-sink-tile --fp16-own-tile)\n";
  else if (r.fp16_own_tile)
    o << "--fp16-own-tile: each query sees its own tile in fp16 and the tiles before it quantized, the sink "
         "included\n";
  else
    o << "--fp16-sink-tile: queries see the first tile (the sink) in fp16, the rest quantized, their own tile "
         "included\n";
  o << "  metrics: attn err = |o - o^| / |o| of the attention output over the sampled queries (mean, p95); KL = "
       "KL(p || p^) of the attention weights (mean, worst 5%); K/V SNR and cos per token over all tokens\n";
  o << "\n";
  const std::size_t wn = 26;
  o << pad("method", wn, true) << pad("bits", 7) << pad("x fp16", 8) << pad("K SNR", 8) << pad("V SNR", 8)
    << pad("K cos", 9) << pad("V cos", 9) << pad("K tok w5%", 11) << pad("V tok w5%", 11) << pad("attn err", 10)
    << pad("attn p95", 10) << pad("KL", 10) << pad("KL w5%", 10) << "  best\n";
  for (std::size_t i = 0; i < r.methods.size(); ++i) {
    const method_result& m = r.methods[i];
    std::string name = (k.pareto[i] ? "* " : "  ") + m.spec.name();
    if (!m.ok) {
      o << pad(name, wn, true) << "  failed: " << m.error << "\n";
      continue;
    }
    const scope_metrics& s = m.all;
    std::string best;
    for (std::size_t b = 0; b < k.budgets.size(); ++b)
      if (k.best[b] == static_cast<int>(i)) best += (best.empty() ? "" : " ") + detail::budget_label(k.budgets[b]);
    const bool attn = s.attn.samples > 0;
    o << pad(name, wn, true) << pad(fmt("%.3f", m.bits), 7) << pad(fmt("%.2fx", m.capacity), 8)
      << pad(fmt("%.2f", s.k.snr_db), 8) << pad(fmt("%.2f", s.v.snr_db), 8) << pad(fmt("%.5f", s.k.cosine), 9)
      << pad(fmt("%.5f", s.v.cosine), 9) << pad(pct(s.k.token_worst5), 11) << pad(pct(s.v.token_worst5), 11)
      << pad(attn ? pct(s.attn.rel_err_mean) : "-", 10) << pad(attn ? pct(s.attn.rel_err_p95) : "-", 10)
      << pad(attn ? fmt("%.2e", s.attn.kl_mean) : "-", 10) << pad(attn ? fmt("%.2e", s.attn.kl_worst5) : "-", 10)
      << "  " << best << "\n";
  }
  o << "\n  * = on the Pareto front (bits vs attn err). SNR in dB; 'tok w5%' = mean relative error of the worst 5%\n"
       "  of tokens; 'attn err' = mean relative error of the attention output; KL = KL(p || p^) of the softmax.\n";
  if (r.queries_per_layer == 0) {
    o << "  no queries sampled (--queries-per-layer 0): attn err, KL, the Pareto front and the best marks are not "
         "computed\n\n";
  } else {
    o << "  best preset (fewest bits within an attn err budget):";
    for (std::size_t b = 0; b < k.budgets.size(); ++b)
      o << "  " << detail::budget_label(k.budgets[b]) << ": "
        << (k.best[b] >= 0 ? r.methods[k.best[b]].spec.name() : std::string("none"));
    o << "\n\n";
  }
  // context growth
  o << "attention error by context length (queries near each position; attn err / KL):\n";
  o << pad("method", wn, true);
  for (int c : r.context_positions) o << pad(detail::context_label(c), 20);
  o << "\n";
  for (std::size_t i = 0; i < r.methods.size(); ++i) {
    const method_result& m = r.methods[i];
    if (!m.ok) continue;
    o << pad("  " + m.spec.name(), wn, true);
    for (const auto& c : m.all.context)
      o << pad(c.samples ? pct(c.rel_err_mean) + " / " + fmt("%.1e", c.kl_mean) : "-", 20);
    o << "\n";
  }
  if (r.layers > 1) {
    o << "\nper layer (attn err | K SNR dB):\n" << pad("method", wn, true);
    for (int l = 0; l < r.layers; ++l) o << pad("layer " + std::to_string(l), 18);
    o << "\n";
    for (const auto& m : r.methods) {
      if (!m.ok) continue;
      o << pad("  " + m.spec.name(), wn, true);
      for (const auto& s : m.layers)
        o << pad((s.attn.samples ? pct(s.attn.rel_err_mean) : std::string("-")) + " | " + fmt("%.2f", s.k.snr_db), 18);
      o << "\n";
    }
  }
}

namespace detail {
inline nlohmann::json num(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;  // JSON has no inf/nan
}
inline nlohmann::json to_json(const side_metrics& s) {
  return {{"relative_mse", num(s.rel_mse)}, {"snr_db", num(s.snr_db)}, {"cosine", num(s.cosine)},
          {"token_rel_err_p95", num(s.token_p95)}, {"token_rel_err_worst5_mean", num(s.token_worst5)}};
}
inline nlohmann::json to_json(const attention_metrics& a) {
  if (a.samples == 0)  // no queries: no attention metric
    return {{"samples", 0},         {"rel_err_mean", nullptr}, {"rel_err_p95", nullptr}, {"rel_err_worst5_mean", nullptr},
            {"kl_mean", nullptr}, {"kl_worst5_mean", nullptr}, {"kl_worst5_share", nullptr}};
  return {{"samples", a.samples},
          {"rel_err_mean", num(a.rel_err_mean)},
          {"rel_err_p95", num(a.rel_err_p95)},
          {"rel_err_worst5_mean", num(a.rel_err_worst5)},
          {"kl_mean", num(a.kl_mean)},
          {"kl_worst5_mean", num(a.kl_worst5)},
          {"kl_worst5_share", num(a.kl_worst5_share)}};
}
inline nlohmann::json to_json(const scope_metrics& s, const std::vector<int>& ctx) {
  nlohmann::json c = nlohmann::json::array();
  for (std::size_t i = 0; i < s.context.size() && i < ctx.size(); ++i) {
    auto j = to_json(s.context[i]);
    j["position"] = ctx[i];
    c.push_back(j);
  }
  return {{"keys", to_json(s.k)}, {"values", to_json(s.v)}, {"attention", to_json(s.attn)}, {"context", c}};
}
}  // namespace detail

inline nlohmann::json to_json(const eval_result& r, const ranking& k) {
  using detail::num;
  nlohmann::json j;
  j["tool"] = "kvtile-eval";
  j["kvtile_version"] = std::to_string(KVTILE_VERSION_MAJOR) + "." + std::to_string(KVTILE_VERSION_MINOR) + "." +
                        std::to_string(KVTILE_VERSION_PATCH);
  j["input"] = {{"description", r.description}, {"layers", r.layers},   {"tokens", r.tokens},
                {"kv_heads", r.kv_heads},       {"q_heads", r.q_heads}, {"head_dim", r.head_dim},
                {"queries", detail::query_source_name(r.qsrc)}};
  j["settings"] = {{"queries_per_layer", r.queries_per_layer},
                   {"context_queries", r.context_queries},
                   {"threads", r.threads},
                   {"seconds", r.seconds},
                   {"device", r.device},
                   {"context_positions", r.context_positions},
                   {"primary_metric", "attention.rel_err_mean"},
                   {"partial_tile_tokens", "kept in fp16"},
                   {"fp16_own_tile", r.fp16_own_tile},
                   {"fp16_sink_tile", r.fp16_sink_tile},
                   {"attention_semantics", detail::semantics_name(r)},
                   {"seeds", {{"sample", r.sample_seed},
                              {"generator", r.generated ? nlohmann::json(r.generator_seed) : nlohmann::json()}}}};
  nlohmann::json budgets = nlohmann::json::array();
  for (std::size_t b = 0; b < k.budgets.size(); ++b)
    budgets.push_back({{"attn_rel_err_max", k.budgets[b]},
                       {"best", k.best[b] >= 0 ? nlohmann::json(r.methods[k.best[b]].spec.name()) : nlohmann::json()}});
  j["budgets"] = budgets;
  nlohmann::json ms = nlohmann::json::array();
  for (std::size_t i = 0; i < r.methods.size(); ++i) {
    const method_result& m = r.methods[i];
    nlohmann::json e = {{"name", m.spec.name()},
                        {"family", to_string(m.spec.fam)},
                        {"config", m.spec.config()},
                        {"packing", m.spec.packing_name()},
                        {"tile_tokens", m.spec.tile_tokens},
                        {"key_bits", m.spec.key_bits},
                        {"value_bits", m.spec.value_bits},
                        {"sinkhorn_iterations", m.spec.has_sinkhorn() ? nlohmann::json(m.spec.iterations)
                                                                      : nlohmann::json()},
                        {"ok", m.ok}};
    if (!m.ok) {
      e["error"] = m.error;
    } else {
      e["bits_per_element"] = num(m.bits);
      e["effective_bits_per_element"] = num(m.effective_bits);
      e["capacity_vs_fp16"] = num(m.capacity);
      e["record_bytes"] = m.record_bytes;
      e["seconds"] = m.seconds;
      e["device"] = m.device;
      if (m.compared)
        e["device_vs_host"] = {{"tiles", m.compared_tiles}, {"mismatches", m.mismatched_tiles},
                               {"first_difference", m.compare_note}};
      e["pareto"] = static_cast<bool>(k.pareto[i]);
      nlohmann::json wins = nlohmann::json::array();
      for (std::size_t b = 0; b < k.budgets.size(); ++b)
        if (k.best[b] == static_cast<int>(i)) wins.push_back(k.budgets[b]);
      e["best_for_budgets"] = wins;
      e["overall"] = detail::to_json(m.all, r.context_positions);
      nlohmann::json ls = nlohmann::json::array();
      for (const auto& s : m.layers) ls.push_back(detail::to_json(s, r.context_positions));
      e["layers"] = ls;
    }
    ms.push_back(e);
  }
  j["methods"] = ms;
  return j;
}

inline bool write_json(const eval_result& r, const ranking& k, const std::string& path, std::string& err) {
  try {
    std::ofstream f(path);
    if (!f) {
      err = path + ": cannot create";
      return false;
    }
    f << to_json(r, k).dump(2) << "\n";
    if (!f) {
      err = path + ": write error";
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    err = path + ": " + e.what();
    return false;
  }
}

inline bool write_csv(const eval_result& r, const ranking& k, const std::string& path, std::string& err) {
  std::ofstream f(path);
  if (!f) {
    err = path + ": cannot create";
    return false;
  }
  auto g = [](double v) { return detail::fmt("%.9g", v); };
  f << "method,family,config,packing,scope,bits_per_element,effective_bits_per_element,capacity_vs_fp16,pareto,"
       "k_rel_mse,k_snr_db,k_cosine,k_token_rel_err_p95,k_token_rel_err_worst5,"
       "v_rel_mse,v_snr_db,v_cosine,v_token_rel_err_p95,v_token_rel_err_worst5,"
       "attn_samples,attn_rel_err_mean,attn_rel_err_p95,attn_rel_err_worst5,attn_kl_mean,attn_kl_worst5,"
       "attn_kl_worst5_share";
  for (int c : r.context_positions) f << ",ctx" << c << "_attn_rel_err,ctx" << c << "_attn_kl";
  f << ",error\n";
  for (std::size_t i = 0; i < r.methods.size(); ++i) {
    const method_result& m = r.methods[i];
    auto row = [&](const std::string& scope, const scope_metrics* s) {
      f << m.spec.name() << "," << to_string(m.spec.fam) << "," << m.spec.config() << "," << m.spec.packing_name()
        << "," << scope;
      if (!s) {
        f << std::string(21 + 2 * r.context_positions.size(), ',') << ",\"" << m.error << "\"\n";
        return;
      }
      f << "," << g(m.bits) << "," << g(m.effective_bits) << "," << g(m.capacity) << "," << (k.pareto[i] ? 1 : 0);
      for (const side_metrics* sd : {&s->k, &s->v})
        f << "," << g(sd->rel_mse) << "," << g(sd->snr_db) << "," << g(sd->cosine) << "," << g(sd->token_p95) << ","
          << g(sd->token_worst5);
      if (s->attn.samples)
        f << "," << s->attn.samples << "," << g(s->attn.rel_err_mean) << "," << g(s->attn.rel_err_p95) << ","
          << g(s->attn.rel_err_worst5) << "," << g(s->attn.kl_mean) << "," << g(s->attn.kl_worst5) << ","
          << g(s->attn.kl_worst5_share);
      else  // no queries: the attention columns stay empty
        f << ",0,,,,,,";
      for (std::size_t c = 0; c < r.context_positions.size(); ++c) {
        if (c < s->context.size() && s->context[c].samples)
          f << "," << g(s->context[c].rel_err_mean) << "," << g(s->context[c].kl_mean);
        else
          f << ",,";
      }
      f << ",\n";
    };
    if (!m.ok) {
      row("all", nullptr);
      continue;
    }
    row("all", &m.all);
    for (std::size_t l = 0; l < m.layers.size(); ++l) row("layer" + std::to_string(l), &m.layers[l]);
  }
  if (!f) {
    err = path + ": write error";
    return false;
  }
  return true;
}

}  // namespace kvtile_eval
