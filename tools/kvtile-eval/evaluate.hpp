// tools/kvtile-eval/evaluate.hpp: the measurement itself.
//
// For every method (a kvtile preset x packing, or a baseline) and every layer:
//  * tiles of G consecutive tokens of one KV head are encoded to a record and
//    decoded (frame::original) with the library's tile_codec; tokens of a
//    trailing partial tile stay fp16 (as the fp16 tail of an engine's cache);
//  * K and V errors: relative MSE, SNR, mean per-token cosine, per-token
//    relative error (p95 and the mean of the worst 5%);
//  * attention: for sampled (position, query head) pairs, causal softmax
//    attention over all keys up to the position with the original and the
//    reconstructed K/V: relative output error and KL(p || p^); also at the
//    context-length checkpoints 1K, 4K, 16K, ... and the dump length.
// With eval_options::use_device (`--device cuda`), the tiles of a layer are
// encoded and decoded on the GPU instead (device_codec.hpp: one launch per
// method and layer, the layer uploaded once); methods without a device codec
// (token_rtn) run on the host. compare_devices runs both and counts the
// (tile, KV head) items whose status, record or decoded K/V bits differ.
// Work is split over std::thread workers, each with its own codec workspace;
// every sum is reduced in a fixed order, so results do not depend on the
// thread count.
//
// Sinkhorn memo: a KVarN tile's Sinkhorn scales depend only on the tile, not
// on bits or packing, so the presets that share a tile size (G) share one
// Sinkhorn run per tile. The codec used is the preset's own tile_codec with
// its normalizer wrapped in memo_normalizer, which returns the stored result
// of the same tile (checked by a hash of the tile) or runs the preset's
// normalizer. Records are byte-identical to the preset's (tests/host/eval_*).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "device_codec.hpp"
#include "generator.hpp"
#include "metrics.hpp"
#include "tensor.hpp"

namespace kvtile_eval {

// ------------------------------------------------------------------ dataset

enum class query_source { file, generated, keys_proxy };

struct dataset {
  int layers = 0, tokens = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  std::vector<float> k, v;  // [layers][tokens][kv_heads][head_dim]
  std::vector<float> q;     // [layers][tokens][q_heads][head_dim] when from a file
  query_source qsrc = query_source::keys_proxy;
  std::shared_ptr<const kv_generator> gen;
  std::string description;
  std::string k_dtype = "float16", v_dtype = "float16", q_dtype = "";

  std::size_t row(int l, int t, int h) const {
    return ((static_cast<std::size_t>(l) * tokens + t) * kv_heads + h) * head_dim;
  }
  const float* key(int l, int t, int h) const { return k.data() + row(l, t, h); }
  const float* value(int l, int t, int h) const { return v.data() + row(l, t, h); }
  void query(int l, int t, int qh, float* out) const {
    if (qsrc == query_source::file) {
      const float* p = q.data() + ((static_cast<std::size_t>(l) * tokens + t) * q_heads + qh) * head_dim;
      std::copy(p, p + head_dim, out);
    } else if (qsrc == query_source::generated) {
      gen->query(l, t, qh, out);
    } else {
      const float* p = key(l, t, qh);
      std::copy(p, p + head_dim, out);
    }
  }
};

namespace detail {
inline bool count_non_finite(const std::vector<float>& v, const char* what, std::string& err) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) && bad++ == 0) first = i;
  if (bad) {
    err = std::string(what) + " hold " + std::to_string(bad) + " NaN/Inf values (first at flat index " +
          std::to_string(first) + "); kvtile-eval needs finite data";
    return false;
  }
  return true;
}
}  // namespace detail

// Checks shapes ([tokens][heads][D] or [layers][tokens][heads][D]) and moves
// the tensors into `ds`. q may be null (queries = keys, a documented proxy).
inline bool make_dataset(tensor&& k, tensor&& v, tensor* q, dataset& ds, std::string& err) {
  auto dims = [&](const tensor& t, const char* what, std::size_t out[4]) {
    if (t.shape.size() == 3) {
      out[0] = 1;
      std::copy(t.shape.begin(), t.shape.end(), out + 1);
    } else if (t.shape.size() == 4) {
      std::copy(t.shape.begin(), t.shape.end(), out);
    } else {
      err = std::string(what) + ": expected shape [tokens][heads][head_dim] or [layers][tokens][heads][head_dim], got " +
            shape_string(t.shape);
      return false;
    }
    for (int i = 0; i < 4; ++i)
      if (out[i] == 0 || out[i] > (1u << 30)) {
        err = std::string(what) + ": shape " + shape_string(t.shape) + " has an empty or too large dimension";
        return false;
      }
    return true;
  };
  std::size_t kd[4], vd[4], qd[4];
  if (!dims(k, "keys", kd) || !dims(v, "values", vd)) return false;
  if (!std::equal(kd, kd + 4, vd)) {
    err = "keys " + shape_string(k.shape) + " and values " + shape_string(v.shape) + " differ in shape";
    return false;
  }
  if (kd[3] != 64 && kd[3] != 128 && kd[3] != 256) {
    err = "head_dim " + std::to_string(kd[3]) + " is not supported by kvtile (64, 128 or 256)";
    return false;
  }
  if (q) {
    if (!dims(*q, "queries", qd)) return false;
    if (qd[0] != kd[0] || qd[1] != kd[1] || qd[3] != kd[3]) {
      err = "queries " + shape_string(q->shape) + " do not match keys " + shape_string(k.shape) +
            " (layers, tokens and head_dim must agree)";
      return false;
    }
    if (qd[2] % kd[2] != 0) {
      err = "queries have " + std::to_string(qd[2]) + " heads, not a multiple of the " + std::to_string(kd[2]) +
            " KV heads";
      return false;
    }
  }
  if (!detail::count_non_finite(k.data, "keys", err) || !detail::count_non_finite(v.data, "values", err)) return false;
  if (q && !detail::count_non_finite(q->data, "queries", err)) return false;
  ds = dataset{};
  ds.layers = static_cast<int>(kd[0]);
  ds.tokens = static_cast<int>(kd[1]);
  ds.kv_heads = static_cast<int>(kd[2]);
  ds.head_dim = static_cast<int>(kd[3]);
  ds.k_dtype = to_string(k.source_type);
  ds.v_dtype = to_string(v.source_type);
  ds.k = std::move(k.data);
  ds.v = std::move(v.data);
  if (q) {
    ds.q_heads = static_cast<int>(qd[2]);
    ds.q_dtype = to_string(q->source_type);
    ds.q = std::move(q->data);
    ds.qsrc = query_source::file;
  } else {
    ds.q_heads = ds.kv_heads;
    ds.qsrc = query_source::keys_proxy;
  }
  return true;
}

// ------------------------------------------------------------------ threads

inline int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 2 : static_cast<int>(n);
}

// Runs f(item, worker) for item in [0, n) on `threads` workers (worker in [0, threads)).
template <class F>
void parallel_for(std::size_t n, int threads, F&& f) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::min<std::size_t>(n, 1024))));
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto body = [&](int w) {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) f(i, w);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(body, w);
  body(0);
  for (auto& t : pool) t.join();
}

inline void generate_dataset(const generator_params& p, int threads, dataset& ds) {
  ds = dataset{};
  ds.layers = p.layers;
  ds.tokens = p.tokens;
  ds.kv_heads = p.kv_heads;
  ds.q_heads = p.q_heads;
  ds.head_dim = p.head_dim;
  ds.gen = std::make_shared<kv_generator>(p);
  ds.qsrc = query_source::generated;
  ds.k.assign(static_cast<std::size_t>(p.layers) * p.tokens * p.kv_heads * p.head_dim, 0.0f);
  ds.v.assign(ds.k.size(), 0.0f);
  const std::size_t rows = static_cast<std::size_t>(p.layers) * p.tokens;
  parallel_for(rows, threads, [&](std::size_t r, int) {
    const int l = static_cast<int>(r / p.tokens), t = static_cast<int>(r % p.tokens);
    for (int h = 0; h < p.kv_heads; ++h) {
      ds.gen->key(l, t, h, ds.k.data() + ds.row(l, t, h));
      ds.gen->value(l, t, h, ds.v.data() + ds.row(l, t, h));
    }
  });
  ds.description = "generated: " + std::to_string(p.layers) + " layer(s) x " + std::to_string(p.tokens) +
                   " tokens x " + std::to_string(p.kv_heads) + " KV heads (" + std::to_string(p.q_heads) +
                   " query heads) x D=" + std::to_string(p.head_dim) + ", seed " + std::to_string(p.seed);
}

// ------------------------------------------------------------------ methods

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
      err = "unknown method selection '" + t + "' (try all, presets, baselines, kvarn, kivi, rotate_rtn, token_rtn, "
            "k4v2_g128, fp8, fp16 or a name like 'kivi k2v2_g128/fp8')";
      return false;
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i)
    if (keep[i]) out.push_back(all[i]);
  return true;
}

// ------------------------------------------------------------------ Sinkhorn memo

struct sinkhorn_memo_slot {
  bool valid = false;
  std::uint64_t hash = 0;
  float best = 0;
  std::vector<float> col, row;
};

// The slot the next normalizer call on this thread may use (null: no memo).
inline thread_local sinkhorn_memo_slot* memo_slot = nullptr;

inline std::uint64_t hash_floats(const float* x, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    h = (h ^ u) * 0x100000001b3ull;
  }
  return h ^ n;
}

template <class Inner>
struct memo_normalizer {
  static constexpr int iterations = Inner::iterations;
  static constexpr bool is_none = Inner::is_none;
  static constexpr const char* name = Inner::name;
  template <int R, int C>
  static constexpr std::size_t scratch_floats = Inner::template scratch_floats<R, C>;

  template <int R, int C>
  static float run(const float* X, float* col_scale, float* row_scale, float* scratch) {
    sinkhorn_memo_slot* s = memo_slot;
    const std::uint64_t h = s ? hash_floats(X, static_cast<std::size_t>(R) * C) : 0;
    if (s && s->valid && s->hash == h && s->col.size() == static_cast<std::size_t>(C) &&
        s->row.size() == static_cast<std::size_t>(R)) {
      std::copy(s->col.begin(), s->col.end(), col_scale);
      std::copy(s->row.begin(), s->row.end(), row_scale);
      return s->best;
    }
    const float best = Inner::template run<R, C>(X, col_scale, row_scale, scratch);
    if (s) {
      s->col.assign(col_scale, col_scale + C);
      s->row.assign(row_scale, row_scale + R);
      s->best = best;
      s->hash = h;
      s->valid = true;
    }
    return best;
  }
};

template <class Codec>
struct with_memo {
  using type = Codec;
};
template <class Cfg, class Rot, class Norm, class Rd, class Pk>
struct with_memo<kvtile::tile_codec<Cfg, Rot, Norm, Rd, Pk>> {
  using type = std::conditional_t<Norm::is_none, kvtile::tile_codec<Cfg, Rot, Norm, Rd, Pk>,
                                  kvtile::tile_codec<Cfg, Rot, memo_normalizer<Norm>, Rd, Pk>>;
};
template <class Codec>
using with_memo_t = typename with_memo<Codec>::type;

// Per layer: one slot per (KV head, tile) for keys and for values, per G.
struct sinkhorn_memo {
  int tile_tokens = 0;
  std::vector<sinkhorn_memo_slot> keys, values;
};

// ------------------------------------------------------------------ results

struct side_metrics {
  double rel_mse = 0, snr_db = 0, cosine = 1, token_p95 = 0, token_worst5 = 0;
};
struct attention_metrics {
  std::size_t samples = 0;
  double rel_err_mean = 0, rel_err_p95 = 0, rel_err_worst5 = 0;
  double kl_mean = 0, kl_worst5 = 0, kl_worst5_share = 0;
};
struct scope_metrics {
  side_metrics k, v;
  attention_metrics attn;
  std::vector<attention_metrics> context;  // one per checkpoint
};

struct method_result {
  method_spec spec;
  bool ok = true;
  std::string error;
  double bits = 0;            // bits per element of a quantized tile (K and V, all metadata)
  double effective_bits = 0;  // over the whole dump, the fp16 tail included
  double capacity = 0;        // 16 / bits: tokens held versus an fp16 cache
  std::size_t record_bytes = 0;
  double seconds = 0;
  std::string device = "cpu";  // where the tiles were encoded and decoded ("cuda": the GPU codec)
  // compare_devices: (tile, KV head) items compared, and those that differ
  bool compared = false;
  std::size_t compared_tiles = 0, mismatched_tiles = 0;
  std::string compare_note;  // first difference, if any
  std::vector<scope_metrics> layers;
  scope_metrics all;
};

struct eval_result {
  std::string description;
  int layers = 0, tokens = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  query_source qsrc = query_source::keys_proxy;
  std::vector<int> context_positions;
  int queries_per_layer = 0, context_queries = 0;
  int threads = 1;
  double seconds = 0;
  std::string device = "cpu";  // "cuda" when use_device
  bool compared = false;       // compare_devices ran
  std::vector<method_result> methods;
};

struct eval_options {
  int threads = 0;              // 0: hardware concurrency
  int queries = 64;             // sampled (position, KV head) pairs per layer; all query heads of the group attend
  int context_queries = 16;     // the same, per context checkpoint and layer
  std::uint64_t sample_seed = 1;
  std::vector<method_spec> methods = all_methods();
  // GPU codec (the caller checks device_available first); compare_devices
  // also runs the host codec and compares (implies use_device).
  bool use_device = false;
  bool compare_devices = false;
  // progress(done units, total units, current method name)
  std::function<void(std::size_t, std::size_t, const std::string&)> progress;
};

// 1K, 4K, 16K, ... below the dump length, then the dump length.
inline std::vector<int> context_positions(int tokens) {
  std::vector<int> r;
  for (long long c = 1024; c < tokens; c *= 4) r.push_back(static_cast<int>(c));
  r.push_back(tokens);
  return r;
}

// ------------------------------------------------------------------ per-token RTN baseline

// Per-token asymmetric RTN of one row with fp16 zero (rounded down) and fp16
// step (rounded up until the grid covers the row), kvtile's row math.
template <int Bits>
bool token_rtn_row(const float* x, int n, float* y) {
  using R = kvtile::asymmetric_rtn<Bits>;
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float z = kvtile::half_round_down(lo).to_float();
  if (!std::isfinite(z)) return false;
  kvtile::half_t a = kvtile::half_round_up(R::required_scale(hi, z));
  while (!R::covers(hi, a.to_float(), z)) {
    if ((a.bits() & 0x7fffu) >= 0x7bffu) return false;
    a = kvtile::half_t::from_bits(static_cast<std::uint16_t>(a.bits() + 1));
  }
  const float af = a.to_float();
  if (!std::isfinite(af)) return false;
  for (int i = 0; i < n; ++i) y[i] = R::dequantize(R::quantize(x[i], af, z), af, z);
  return true;
}

inline bool token_rtn_row(int bits, const float* x, int n, float* y) {
  switch (bits) {
    case 2: return token_rtn_row<2>(x, n, y);
    case 4: return token_rtn_row<4>(x, n, y);
    default: return token_rtn_row<8>(x, n, y);
  }
}

// ------------------------------------------------------------------ the evaluator

namespace detail {

// One sampled (position, KV head): all query heads of the group attend.
struct sample {
  int pos = 0, kv_head = 0, group = -1;  // group: -1 main sample, else checkpoint index
  std::vector<float> q;                  // g x D
  std::vector<double> logp, out;         // reference: g x (pos + 1), g x D
};

// One layer, head-major [kv_heads][tokens][D] (contiguous keys per head).
struct layer_buffers {
  std::vector<float> ko, vo;  // originals
  std::vector<float> kh, vh;  // reconstructions
  std::vector<float> kh_host, vh_host;  // compare_devices: the host's reconstructions
  std::vector<double> k_err2, k_sig2, v_err2, v_sig2, k_cos, v_cos;  // per (head, token)
  std::vector<float> k_tok, v_tok;  // per-token relative errors
  std::vector<double> s_rel, s_kl;  // per query of each sample
  std::size_t at(int h, int t, int T, int D) const {
    return (static_cast<std::size_t>(h) * T + t) * static_cast<std::size_t>(D);
  }
};

inline void token_stats(const float* x, const float* y, int D, double& err2, double& sig2, double& cos,
                        float& rel) {
  error_sums s;
  s.add(x, y, static_cast<std::size_t>(D));
  err2 = s.err2;
  sig2 = s.sig2;
  cos = cosine(x, y, static_cast<std::size_t>(D));
  rel = static_cast<float>(relative_l2(x, y, static_cast<std::size_t>(D)));
}

// Tokens [t0, T) of every head stay fp16 (the tail of an engine's cache).
inline void copy_tail(const dataset& ds, int t0, layer_buffers& b) {
  const int T = ds.tokens, D = ds.head_dim;
  for (int h = 0; h < ds.kv_heads; ++h)
    for (std::size_t i = b.at(h, t0, T, D); i < b.at(h, T, T, D); ++i) {
      b.kh[i] = kvtile::half_t(b.ko[i]).to_float();
      b.vh[i] = kvtile::half_t(b.vo[i]).to_float();
    }
}

// records (optional): item * record_bytes, item = tile * kv_heads + head.
template <class Codec>
bool quantize_layer(const dataset& ds, int l, sinkhorn_memo* memo, int threads, layer_buffers& b, std::string& err,
                    std::vector<unsigned char>* records = nullptr) {
  constexpr int G = Codec::G;
  const int T = ds.tokens, D = ds.head_dim;
  const int tiles = T / G;
  const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(ds.kv_heads) * D;
  const int nthreads = std::max(1, threads);
  std::vector<std::unique_ptr<typename Codec::workspace>> ws(nthreads);
  std::vector<std::vector<unsigned char>> rec(nthreads);
  std::atomic<bool> failed{false};
  std::vector<kvtile::status> first(nthreads, kvtile::status::success);
  if (records) records->assign(static_cast<std::size_t>(tiles) * ds.kv_heads * Codec::record_bytes, 0);
  parallel_for(static_cast<std::size_t>(tiles) * ds.kv_heads, nthreads, [&](std::size_t item, int w) {
    if (failed.load()) return;
    if (!ws[w]) {
      ws[w].reset(new typename Codec::workspace);
      rec[w].assign(Codec::record_bytes, 0);
    }
    const int h = static_cast<int>(item % ds.kv_heads), tile = static_cast<int>(item / ds.kv_heads);
    const float* k = ds.key(l, tile * G, h);  // engine layout: token stride kv_heads * D
    const float* v = ds.value(l, tile * G, h);
    const std::size_t dst = b.at(h, tile * G, T, D);
    if (memo) memo_slot = &memo->keys[item];
    kvtile::status s = Codec::encode_keys(k, stride, rec[w].data(), ws[w].get());
    if (kvtile::ok(s)) {
      memo_slot = memo ? &memo->values[item] : nullptr;
      s = Codec::encode_values(v, stride, rec[w].data(), ws[w].get());
    }
    memo_slot = nullptr;
    if (kvtile::ok(s) && records)
      std::copy(rec[w].begin(), rec[w].end(), records->begin() + static_cast<std::ptrdiff_t>(item * Codec::record_bytes));
    if (kvtile::ok(s)) s = Codec::decode_keys(rec[w].data(), b.kh.data() + dst, D, kvtile::frame::original);
    if (kvtile::ok(s)) s = Codec::decode_values(rec[w].data(), b.vh.data() + dst, D, kvtile::frame::original);
    if (!kvtile::ok(s)) {
      first[w] = s;
      failed = true;
    }
  });
  for (auto s : first)
    if (!kvtile::ok(s)) {
      err = std::string("codec error: ") + kvtile::to_string(s);
      return false;
    }
  copy_tail(ds, tiles * G, b);
  return true;
}

// The GPU codec on the uploaded layer (device_codec.hpp): decoded tiles into
// b.kh / b.vh, then the fp16 tail. Fails like the host path on the first
// (in item order) tile whose status is not ok, or on a CUDA error.
inline bool quantize_layer_device(const dataset& ds, const kvtile::codec_params& p, device_codec_session& s,
                                  layer_buffers& b, std::vector<unsigned char>* records, std::string& err) {
  std::vector<int> st;
  if (!s.roundtrip(p, b.kh.data(), b.vh.data(), st, records, err)) {
    err = "GPU codec: " + err;
    return false;
  }
  for (int v : st)
    if (!kvtile::ok(static_cast<kvtile::status>(v))) {
      err = std::string("codec error: ") + kvtile::to_string(static_cast<kvtile::status>(v)) + " (GPU codec)";
      return false;
    }
  copy_tail(ds, ds.tokens / p.tile_tokens * p.tile_tokens, b);
  return true;
}

// compare_devices: counts the items (tile, head) of one layer whose record or
// decoded K/V bits differ between the host (b.kh_host, host_rec) and the
// device (b.kh, dev_rec); notes the first difference.
inline std::size_t compare_layer(const dataset& ds, int G, std::size_t record_bytes, const layer_buffers& b,
                                 const std::vector<unsigned char>& host_rec, const std::vector<unsigned char>& dev_rec,
                                 int layer, std::string& note) {
  const int T = ds.tokens, D = ds.head_dim, H = ds.kv_heads;
  const std::size_t items = static_cast<std::size_t>(T / G) * H;
  const std::size_t n = static_cast<std::size_t>(G) * D;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < items; ++i) {
    const int tile = static_cast<int>(i / H), h = static_cast<int>(i % H);
    const std::size_t off = b.at(h, tile * G, T, D);
    const bool rec_ok = host_rec.size() == dev_rec.size() &&
                        std::memcmp(host_rec.data() + i * record_bytes, dev_rec.data() + i * record_bytes,
                                    record_bytes) == 0;
    const bool k_ok = std::memcmp(b.kh.data() + off, b.kh_host.data() + off, n * sizeof(float)) == 0;
    const bool v_ok = std::memcmp(b.vh.data() + off, b.vh_host.data() + off, n * sizeof(float)) == 0;
    if (rec_ok && k_ok && v_ok) continue;
    if (bad++ == 0 && note.empty())
      note = "layer " + std::to_string(layer) + ", tile " + std::to_string(tile) + ", KV head " + std::to_string(h) +
             ": " + (rec_ok ? "" : "record ") + (k_ok ? "" : "keys ") + (v_ok ? "" : "values ") + "differ";
  }
  return bad;
}

inline bool quantize_layer_token_rtn(const dataset& ds, const method_spec& m, int threads, layer_buffers& b,
                                     std::string& err) {
  const int T = ds.tokens, D = ds.head_dim;
  const int tq = T / m.tile_tokens * m.tile_tokens;
  std::atomic<bool> failed{false};
  parallel_for(static_cast<std::size_t>(ds.kv_heads), threads, [&](std::size_t h, int) {
    for (int t = 0; t < tq; ++t) {
      const std::size_t off = b.at(static_cast<int>(h), t, T, D);
      if (!token_rtn_row(m.key_bits, b.ko.data() + off, D, b.kh.data() + off) ||
          !token_rtn_row(m.value_bits, b.vo.data() + off, D, b.vh.data() + off))
        failed = true;
    }
  });
  if (failed) {
    err = "per-token RTN: a token's range does not fit fp16 scales";
    return false;
  }
  copy_tail(ds, tq, b);
  return true;
}

inline side_metrics side_summary(const std::vector<double>& err2, const std::vector<double>& sig2,
                                 const std::vector<double>& cos, const std::vector<float>& tok) {
  side_metrics s;
  error_sums e;
  double c = 0;
  for (std::size_t i = 0; i < err2.size(); ++i) {
    e.err2 += err2[i];
    e.sig2 += sig2[i];
    c += cos[i];
  }
  s.rel_mse = e.relative_mse();
  s.snr_db = snr_db(s.rel_mse);
  s.cosine = cos.empty() ? 1.0 : c / static_cast<double>(cos.size());
  s.token_p95 = percentile(tok, 95.0);
  s.token_worst5 = tail_mean(tok, 0.05);
  return s;
}

inline attention_metrics attention_summary(const std::vector<double>& rel, const std::vector<double>& kl) {
  attention_metrics a;
  a.samples = rel.size();
  if (rel.empty()) return a;
  a.rel_err_mean = mean(rel);
  a.rel_err_p95 = percentile(rel, 95.0);
  a.rel_err_worst5 = tail_mean(rel, 0.05);
  a.kl_mean = mean(kl);
  a.kl_worst5 = tail_mean(kl, 0.05);
  a.kl_worst5_share = tail_share(kl, 0.05);
  return a;
}

// Accumulates what the overall ("all layers") scope needs.
struct method_accumulator {
  std::vector<double> k_err2, k_sig2, k_cos, v_err2, v_sig2, v_cos;  // per layer sums (fixed order)
  std::vector<float> k_tok, v_tok;
  std::vector<double> rel, kl;
  std::vector<std::vector<double>> ctx_rel, ctx_kl;
  double effective_bits_num = 0, effective_bits_den = 0;
};

}  // namespace detail

// Runs every method on every layer. Returns false (with err) only for invalid
// options; a method that fails (e.g. a range the packing cannot store) is
// reported in its result (ok = false, error) and the others still run.
// (A template only so that translation units which include this header but
// never call evaluate() do not compile dispatch's ~100 codec instantiations.)
template <int Unused = 0>
bool evaluate(const dataset& ds, const eval_options& opt, eval_result& res, std::string& err) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  if (ds.layers <= 0 || ds.tokens <= 0 || ds.kv_heads <= 0 || ds.q_heads <= 0 || ds.q_heads % ds.kv_heads != 0) {
    err = "empty or inconsistent dataset";
    return false;
  }
  if (opt.queries < 0 || opt.context_queries < 0) {
    err = "query counts must be >= 0";
    return false;
  }
  const int threads = opt.threads > 0 ? opt.threads : default_threads();
  const int D = ds.head_dim, T = ds.tokens, H = ds.kv_heads;
  const int group = ds.q_heads / ds.kv_heads;
  res = eval_result{};
  res.description = ds.description;
  res.layers = ds.layers;
  res.tokens = T;
  res.kv_heads = H;
  res.q_heads = ds.q_heads;
  res.head_dim = D;
  res.qsrc = ds.qsrc;
  res.context_positions = context_positions(T);
  res.queries_per_layer = opt.queries;
  res.context_queries = opt.context_queries;
  res.threads = threads;
  const std::size_t nctx = res.context_positions.size();
  const std::size_t nm = opt.methods.size();
  res.methods.resize(nm);
  std::vector<detail::method_accumulator> acc(nm);
  for (std::size_t m = 0; m < nm; ++m) {
    res.methods[m].spec = opt.methods[m];
    res.methods[m].layers.resize(ds.layers);
    acc[m].ctx_rel.resize(nctx);
    acc[m].ctx_kl.resize(nctx);
  }

  const std::size_t layer_elems = static_cast<std::size_t>(T) * H * D;
  const std::size_t layer_rows = static_cast<std::size_t>(T) * H;
  detail::layer_buffers b;
  for (auto* v : {&b.ko, &b.vo, &b.kh, &b.vh}) v->resize(layer_elems);
  for (auto* v : {&b.k_err2, &b.k_sig2, &b.v_err2, &b.v_sig2, &b.k_cos, &b.v_cos}) v->resize(layer_rows);
  b.k_tok.resize(layer_rows);
  b.v_tok.resize(layer_rows);
  const bool use_device = opt.use_device || opt.compare_devices;
  std::unique_ptr<device_codec_session> session;
  if (use_device) {
    if (!device_available(err)) {
      err = "--device cuda: " + err;
      return false;
    }
    session.reset(new device_codec_session);
    res.device = "cuda";
    res.compared = opt.compare_devices;
    if (opt.compare_devices) {
      b.kh_host.resize(layer_elems);
      b.vh_host.resize(layer_elems);
    }
  }
  const std::size_t total_units = static_cast<std::size_t>(ds.layers) * (nm + 1);
  std::size_t done_units = 0;

  for (int l = 0; l < ds.layers; ++l) {
    if (opt.progress) opt.progress(done_units, total_units, "reference attention, layer " + std::to_string(l));
    // ---- head-major copy of the layer
    parallel_for(static_cast<std::size_t>(H), threads, [&](std::size_t h, int) {
      for (int t = 0; t < T; ++t) {
        std::copy(ds.key(l, t, static_cast<int>(h)), ds.key(l, t, static_cast<int>(h)) + D,
                  b.ko.begin() + static_cast<std::ptrdiff_t>(b.at(static_cast<int>(h), t, T, D)));
        std::copy(ds.value(l, t, static_cast<int>(h)), ds.value(l, t, static_cast<int>(h)) + D,
                  b.vo.begin() + static_cast<std::ptrdiff_t>(b.at(static_cast<int>(h), t, T, D)));
      }
    });
    // ---- samples and reference attention
    std::vector<detail::sample> samples;
    {
      detail::rng r(opt.sample_seed, 77, static_cast<std::uint64_t>(l), 0, 0);
      for (int i = 0; i < opt.queries; ++i) {
        detail::sample s;
        s.pos = std::min(T - 1, static_cast<int>((i + r.uniform()) * T / opt.queries));
        s.kv_head = static_cast<int>(r.uniform() * H) % H;
        samples.push_back(std::move(s));
      }
      for (std::size_t c = 0; c < nctx; ++c) {
        const int cp = res.context_positions[c];
        const int window = std::max(1, std::min(64, cp / 8));
        for (int i = 0; i < opt.context_queries; ++i) {
          detail::sample s;
          s.pos = cp - 1 - static_cast<int>(r.uniform() * window) % window;
          s.kv_head = static_cast<int>(r.uniform() * H) % H;
          s.group = static_cast<int>(c);
          samples.push_back(std::move(s));
        }
      }
    }
    std::vector<std::vector<float>> scratch(threads, std::vector<float>(static_cast<std::size_t>(group) * (T + D)));
    std::vector<std::vector<double>> lscratch(threads, std::vector<double>(static_cast<std::size_t>(group) * T));
    std::vector<std::vector<double>> oscratch(threads, std::vector<double>(static_cast<std::size_t>(group) * D));
    parallel_for(samples.size(), threads, [&](std::size_t i, int w) {
      detail::sample& s = samples[i];
      s.q.resize(static_cast<std::size_t>(group) * D);
      for (int j = 0; j < group; ++j) ds.query(l, s.pos, s.kv_head * group + j, s.q.data() + static_cast<std::size_t>(j) * D);
      s.logp.resize(static_cast<std::size_t>(group) * (s.pos + 1));
      s.out.resize(static_cast<std::size_t>(group) * D);
      attention_group(s.q.data(), group, b.ko.data() + b.at(s.kv_head, 0, T, D), b.vo.data() + b.at(s.kv_head, 0, T, D),
                      static_cast<std::size_t>(D), s.pos + 1, D, s.logp.data(), s.out.data(), scratch[w].data());
    });
    ++done_units;
    b.s_rel.assign(samples.size() * group, 0.0);
    b.s_kl.assign(samples.size() * group, 0.0);

    std::vector<sinkhorn_memo> memos;
    bool uploaded = false;  // this layer's K/V on the GPU (the first device method uploads them)
    for (std::size_t m = 0; m < nm; ++m) {
      const method_spec& spec = opt.methods[m];
      method_result& mr = res.methods[m];
      if (opt.progress) opt.progress(done_units, total_units, spec.name() + ", layer " + std::to_string(l));
      const auto t0 = clock::now();
      if (!mr.ok) {
        ++done_units;
        continue;
      }
      std::string merr;
      bool ok = true;
      if (spec.fam == family::token_rtn) {
        ok = detail::quantize_layer_token_rtn(ds, spec, threads, b, merr);
        mr.bits = (spec.key_bits + spec.value_bits) / 2.0 + 32.0 / D;
        mr.record_bytes = 0;
      } else {
        sinkhorn_memo* memo = nullptr;
        if (spec.fam == family::kvarn) {
          for (auto& mm : memos)
            if (mm.tile_tokens == spec.tile_tokens) memo = &mm;
          if (!memo) {
            memos.emplace_back();
            memo = &memos.back();
            memo->tile_tokens = spec.tile_tokens;
            const std::size_t n = static_cast<std::size_t>(T / spec.tile_tokens) * H;
            memo->keys.resize(n);
            memo->values.resize(n);
          }
        }
        kvtile::codec_params p;
        p.head_dim = D;
        p.tile_tokens = spec.tile_tokens;
        p.key_bits = spec.key_bits;
        p.value_bits = spec.value_bits;
        p.pack = spec.pack;
        p.algo = spec.fam == family::kvarn ? kvtile::method::kvarn
                 : spec.fam == family::kivi ? kvtile::method::kivi
                                            : kvtile::method::rotate_rtn;
        const bool on_device = use_device && device_supports(p);
        const bool on_host = !on_device || opt.compare_devices;
        std::vector<unsigned char> host_rec, dev_rec;
        const bool cmp = on_device && opt.compare_devices;
        const kvtile::status st = kvtile::dispatch(p, [&](auto tag) {
          using Codec = typename decltype(tag)::type;
          using Run = with_memo_t<Codec>;
          static_assert(Run::record_bytes == Codec::record_bytes, "memo must not change the record");
          mr.bits = Codec::bits_per_element;
          mr.record_bytes = Codec::record_bytes;
          if (on_host) ok = detail::quantize_layer<Run>(ds, l, memo, threads, b, merr, cmp ? &host_rec : nullptr);
        });
        if (st != kvtile::status::success) {
          ok = false;
          merr = std::string("unsupported configuration: ") + kvtile::to_string(st);
        } else if (on_device) {
          mr.device = "cuda";
          if (!uploaded) {
            std::string uerr;
            if (!session->upload(b.ko.data(), b.vo.data(), H, T, D, uerr)) {
              err = "--device cuda: " + uerr;
              return false;
            }
            uploaded = true;
          }
          if (cmp) {
            b.kh.swap(b.kh_host);
            b.vh.swap(b.vh_host);
          }
          const bool host_ok = ok;
          std::string derr;
          ok = detail::quantize_layer_device(ds, p, *session, b, cmp ? &dev_rec : nullptr, derr);
          if (cmp) {
            const std::size_t items = static_cast<std::size_t>(T / spec.tile_tokens) * H;
            mr.compared = true;
            mr.compared_tiles += items;
            if (host_ok && ok) {
              mr.mismatched_tiles +=
                  detail::compare_layer(ds, spec.tile_tokens, mr.record_bytes, b, host_rec, dev_rec, l, mr.compare_note);
            } else if (host_ok != ok) {
              mr.mismatched_tiles += items;
              if (mr.compare_note.empty())
                mr.compare_note = "layer " + std::to_string(l) + ": " +
                                  (ok ? "the host failed (" + merr + "), the GPU did not"
                                      : "the GPU failed (" + derr + "), the host did not");
            }
          }
          if (!ok) merr = derr.empty() ? merr : derr;
        }
      }
      if (!ok) {
        mr.ok = false;
        mr.error = merr;
        ++done_units;
        continue;
      }
      mr.capacity = mr.bits > 0 ? 16.0 / mr.bits : 0;
      // effective bits over the dump (tail tokens at 16 bits)
      {
        const double tq = static_cast<double>(T / spec.tile_tokens * spec.tile_tokens);
        acc[m].effective_bits_num += (tq * mr.bits + (T - tq) * 16.0) * H * D;
        acc[m].effective_bits_den += static_cast<double>(T) * H * D;
      }
      // ---- K/V per-token metrics (head-major order)
      parallel_for(layer_rows, threads, [&](std::size_t r, int) {
        const std::size_t off = r * D;
        detail::token_stats(b.ko.data() + off, b.kh.data() + off, D, b.k_err2[r], b.k_sig2[r], b.k_cos[r], b.k_tok[r]);
        detail::token_stats(b.vo.data() + off, b.vh.data() + off, D, b.v_err2[r], b.v_sig2[r], b.v_cos[r], b.v_tok[r]);
      });
      // ---- attention
      parallel_for(samples.size(), threads, [&](std::size_t i, int w) {
        const detail::sample& s = samples[i];
        const std::size_t n = static_cast<std::size_t>(s.pos) + 1;
        attention_group(s.q.data(), group, b.kh.data() + b.at(s.kv_head, 0, T, D),
                        b.vh.data() + b.at(s.kv_head, 0, T, D), static_cast<std::size_t>(D), s.pos + 1, D,
                        lscratch[w].data(), oscratch[w].data(), scratch[w].data());
        for (int j = 0; j < group; ++j) {
          b.s_rel[i * group + j] = relative_l2(s.out.data() + static_cast<std::size_t>(j) * D,
                                               oscratch[w].data() + static_cast<std::size_t>(j) * D,
                                               static_cast<std::size_t>(D));
          b.s_kl[i * group + j] = kl_divergence(s.logp.data() + j * n, lscratch[w].data() + j * n, n);
        }
      });
      // ---- layer summary (fixed order)
      scope_metrics& sc = mr.layers[l];
      sc.k = detail::side_summary(b.k_err2, b.k_sig2, b.k_cos, b.k_tok);
      sc.v = detail::side_summary(b.v_err2, b.v_sig2, b.v_cos, b.v_tok);
      std::vector<double> rel, kl;
      std::vector<std::vector<double>> crel(nctx), ckl(nctx);
      for (std::size_t i = 0; i < samples.size(); ++i)
        for (int j = 0; j < group; ++j) {
          const std::size_t x = i * group + j;
          if (samples[i].group < 0) {
            rel.push_back(b.s_rel[x]);
            kl.push_back(b.s_kl[x]);
          } else {
            crel[samples[i].group].push_back(b.s_rel[x]);
            ckl[samples[i].group].push_back(b.s_kl[x]);
          }
        }
      sc.attn = detail::attention_summary(rel, kl);
      sc.context.resize(nctx);
      for (std::size_t c = 0; c < nctx; ++c) sc.context[c] = detail::attention_summary(crel[c], ckl[c]);
      // ---- accumulate for the overall scope
      detail::method_accumulator& a = acc[m];
      auto sum = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return s;
      };
      a.k_err2.push_back(sum(b.k_err2));
      a.k_sig2.push_back(sum(b.k_sig2));
      a.k_cos.push_back(sum(b.k_cos));
      a.v_err2.push_back(sum(b.v_err2));
      a.v_sig2.push_back(sum(b.v_sig2));
      a.v_cos.push_back(sum(b.v_cos));
      a.k_tok.insert(a.k_tok.end(), b.k_tok.begin(), b.k_tok.end());
      a.v_tok.insert(a.v_tok.end(), b.v_tok.begin(), b.v_tok.end());
      a.rel.insert(a.rel.end(), rel.begin(), rel.end());
      a.kl.insert(a.kl.end(), kl.begin(), kl.end());
      for (std::size_t c = 0; c < nctx; ++c) {
        a.ctx_rel[c].insert(a.ctx_rel[c].end(), crel[c].begin(), crel[c].end());
        a.ctx_kl[c].insert(a.ctx_kl[c].end(), ckl[c].begin(), ckl[c].end());
      }
      mr.seconds += std::chrono::duration<double>(clock::now() - t0).count();
      ++done_units;
    }
  }
  // ---- overall scope
  for (std::size_t m = 0; m < nm; ++m) {
    method_result& mr = res.methods[m];
    if (!mr.ok) {
      mr.layers.clear();
      continue;
    }
    detail::method_accumulator& a = acc[m];
    const double rows = static_cast<double>(a.k_tok.size());
    std::vector<double> ke(1, 0), ks(1, 0), kc(1, 0), ve(1, 0), vs(1, 0), vc(1, 0);
    for (std::size_t i = 0; i < a.k_err2.size(); ++i) {
      ke[0] += a.k_err2[i];
      ks[0] += a.k_sig2[i];
      kc[0] += a.k_cos[i];
      ve[0] += a.v_err2[i];
      vs[0] += a.v_sig2[i];
      vc[0] += a.v_cos[i];
    }
    mr.all.k = detail::side_summary(ke, ks, kc, a.k_tok);
    mr.all.v = detail::side_summary(ve, vs, vc, a.v_tok);
    mr.all.k.cosine = rows > 0 ? kc[0] / rows : 1.0;
    mr.all.v.cosine = rows > 0 ? vc[0] / rows : 1.0;
    mr.all.attn = detail::attention_summary(a.rel, a.kl);
    mr.all.context.resize(nctx);
    for (std::size_t c = 0; c < nctx; ++c) mr.all.context[c] = detail::attention_summary(a.ctx_rel[c], a.ctx_kl[c]);
    mr.effective_bits = a.effective_bits_den > 0 ? a.effective_bits_num / a.effective_bits_den : 0;
  }
  if (opt.progress) opt.progress(total_units, total_units, "done");
  res.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return true;
}

}  // namespace kvtile_eval
