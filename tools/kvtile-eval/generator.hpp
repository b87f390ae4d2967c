// tools/kvtile-eval/generator.hpp: the embedded LLM-like K/V/Q generator.
//
// Used when kvtile-eval gets no files. Every number is a pure function of
// (seed, layer, token, head): a counter-based generator (splitmix64 seeding a
// xoshiro256** stream per vector), so any query can be recomputed on demand
// and results do not depend on the thread count. docs/kvtile-eval.md
// documents the model. Per layer and KV head, with RoPE pairs (i, i + D/2)
// of frequency theta_i = base^(-2i/D) (rotate-half convention):
//
//  keys (pre-RoPE)  k[c] = mu[c] + s[c] n,  n ~ N(0,1), s[c] = e^(0.3 N(0,1)),
//                   mu[c] = 0.2 N(0,1), except on `outlier_pairs` RoPE pairs
//                   drawn from the lower-frequency half: there |mu| is uniform
//                   in [outlier_min, outlier_max] (random sign) and s = 1, so
//                   those channels' largest |k| is ~10x the median channel's:
//                   the fixed per-channel key outliers that KIVI (Liu et al.,
//                   2024, sec. 3) and KVQuant (Hooper et al., 2024, sec. 3.1)
//                   observe in trained models' keys (pre-RoPE, a few channels
//                   with a large magnitude in every token), which is why they
//                   quantize keys per channel.
//  attention sink   token 0's key is `sink_gain` on the two lowest-frequency
//                   pairs (the "sink channels") and small noise elsewhere; its
//                   value is the offset b plus `sink_value_gain` times a normal
//                   token's varying part (the attention sinks of StreamingLLM,
//                   Xiao et al., 2024: a first token that draws much attention
//                   and contributes little).
//  values           v[c] = b[c] + value_scale r[c] t4, t4 ~ Student-t with 4
//                   degrees of freedom (heavy tails), r[c] = e^(0.5 N(0,1)),
//                   b[c] = value_offset N(0,1): a per-channel offset shared by
//                   every token of the head, as a v_proj bias gives (models
//                   with a QKV bias, e.g. Qwen2); the sink token's value is
//                   b + sink_value_gain x the rest.
//  queries          query head j of KV head h at token t (pre-RoPE):
//                   q = lambda_j u_sink + w (k_pre(t) - mu) + query_noise n,
//                   u_sink = 1 on the sink channels; lambda_j in
//                   [0.5, 1] x query_sink: attention to the sink; the w term
//                   correlates each query with its own token's key (local
//                   attention; not on the outlier channels, where q is noise
//                   only); RoPE then gives the usual recency structure.
// Outputs are rounded to fp16, as an engine's cache holds them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <kvtile/numeric/half.hpp>

namespace kvtile_eval {

struct generator_params {
  int layers = 1;
  int tokens = 8192;
  int kv_heads = 8;
  int q_heads = 32;
  int head_dim = 128;
  std::uint64_t seed = 20260501;
  // Model constants (documented in docs/kvtile-eval.md).
  int outlier_pairs = 3;          // RoPE pairs (2 channels each) with large means, per KV head
  float outlier_min = 20.0f;      // |mean| of an outlier channel, uniform in [min, max]
  float outlier_max = 40.0f;
  float sink_gain = 16.0f;        // token 0's key on the four sink channels
  float sink_value_gain = 0.05f;  // token 0's value (less the offset) is this much smaller
  float value_scale = 0.5f;
  float value_offset = 0.45f;     // std of the per-channel value offset b[c] (about half the values' rms spread)
  float query_sink = 2.0f;        // lambda: query weight on the sink channels (per head in [0.5, 1] x this)
  float query_key_corr = 0.7f;    // w: weight of the same token's centred key in its query
  float query_noise = 0.3f;
  float rope_base = 10000.0f;
};

namespace detail {
inline std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded from a key of four integers.
class rng {
 public:
  rng(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
    std::uint64_t x = seed;
    for (std::uint64_t k : {a, b, c, d}) {
      x ^= k * 0xd1342543de82ef95ull;
      splitmix(x);
    }
    for (auto& si : s_) si = splitmix(x);
  }
  std::uint64_t next() {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller, one value per call (the pair's second value is discarded for simplicity)
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  double student_t4() {
    double chi = 0;
    for (int i = 0; i < 4; ++i) {
      const double z = normal();
      chi += z * z;
    }
    return normal() / std::sqrt(chi / 4.0);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

enum stream : std::uint64_t { head_params = 1, key_noise = 2, value_noise = 3, query_noise = 4, query_params = 5 };
}  // namespace detail

class kv_generator {
 public:
  explicit kv_generator(const generator_params& p) : p_(p) {
    const int D = p.head_dim;
    for (int i = 0; i < D / 2; ++i) theta_.push_back(std::pow(static_cast<double>(p.rope_base), -2.0 * i / D));
    heads_.resize(static_cast<std::size_t>(p.layers) * p.kv_heads);
    for (int l = 0; l < p.layers; ++l)
      for (int h = 0; h < p.kv_heads; ++h) {
        head& hd = heads_[static_cast<std::size_t>(l) * p.kv_heads + h];
        detail::rng r(p.seed, detail::head_params, l, h, 0);
        hd.mu.assign(D, 0.0f);
        hd.s.assign(D, 0.0f);
        hd.vs.assign(D, 0.0f);
        hd.outlier.assign(D, 0);
        for (int c = 0; c < D; ++c) {
          hd.mu[c] = static_cast<float>(0.2 * r.normal());
          hd.s[c] = static_cast<float>(std::exp(0.3 * r.normal()));
          hd.vs[c] = static_cast<float>(std::exp(0.5 * r.normal()));
        }
        for (int i : outlier_pair_indices(l, h)) {
          for (int c : {i, i + D / 2}) {
            const double mag = p.outlier_min + (p.outlier_max - p.outlier_min) * r.uniform();
            hd.mu[c] = static_cast<float>(r.uniform() < 0.5 ? -mag : mag);
            hd.s[c] = 1.0f;
            hd.outlier[c] = 1;
          }
        }
        hd.vb.assign(D, 0.0f);
        for (int c = 0; c < D; ++c) hd.vb[c] = static_cast<float>(p.value_offset * r.normal());
      }
  }

  const generator_params& params() const { return p_; }

  // RoPE pair indices i (channels i and i + D/2) that carry outliers: drawn
  // from the lower-frequency half [D/4, D/2 - 2) (the two lowest pairs are the sink's).
  std::vector<int> outlier_pair_indices(int l, int h) const {
    const int half = p_.head_dim / 2;
    const int span = half / 2 - 2;
    std::vector<int> r;
    detail::rng g(p_.seed, detail::head_params, l, h, 1);
    for (int k = 0; k < p_.outlier_pairs && k < span; ++k) {
      int i;
      do i = half / 2 + static_cast<int>(g.uniform() * span);
      while (contains(r, i));
      r.push_back(i);
    }
    return r;
  }
  bool is_outlier_channel(int l, int h, int c) const { return head_at(l, h).outlier[c] == 1; }
  // The per-channel value offset b[c] of (layer, KV head).
  float value_offset(int l, int h, int c) const { return head_at(l, h).vb[c]; }
  bool is_sink_channel(int c) const {
    const int half = p_.head_dim / 2, i = c % half;
    return i >= half - 2;
  }

  // Key / value / query vectors (fp16-rounded, as floats), D floats each.
  void key(int l, int t, int h, float* out) const {
    key_pre(l, t, h, out);
    rope(t, out);
    round16(out);
  }
  void value(int l, int t, int h, float* out) const {
    const head& hd = head_at(l, h);
    detail::rng r(p_.seed, detail::value_noise, l, t, h);
    const float g = t == 0 ? p_.sink_value_gain : 1.0f;
    for (int c = 0; c < p_.head_dim; ++c)
      out[c] = static_cast<float>(hd.vb[c] + p_.value_scale * g * hd.vs[c] * r.student_t4());
    round16(out);
  }
  // q_head in [0, q_heads); its KV head is q_head / (q_heads / kv_heads).
  void query(int l, int t, int q_head, float* out) const {
    const int h = q_head / (p_.q_heads / p_.kv_heads);
    const head& hd = head_at(l, h);
    const int D = p_.head_dim;
    std::vector<float> k(D);
    key_pre(l, t, h, k.data());
    detail::rng hp(p_.seed, detail::query_params, l, q_head, 0);
    const double lambda = p_.query_sink * (0.5 + 0.5 * hp.uniform());
    detail::rng r(p_.seed, detail::query_noise, l, t, q_head);
    for (int c = 0; c < D; ++c) {
      const double sink = is_sink_channel(c) ? lambda : 0.0;
      // No key-correlated part on the outlier channels (their |mu| would
      // turn RoPE into a strong positional pattern): noise only there.
      const double centred = (t == 0 || hd.outlier[c]) ? 0.0 : (k[c] - hd.mu[c]);
      out[c] = static_cast<float>(sink + p_.query_key_corr * centred + p_.query_noise * r.normal());
    }
    rope(t, out);
    round16(out);
  }

 private:
  struct head {
    std::vector<float> mu, s, vs, vb;
    std::vector<unsigned char> outlier;
  };
  const head& head_at(int l, int h) const { return heads_[static_cast<std::size_t>(l) * p_.kv_heads + h]; }
  static bool contains(const std::vector<int>& v, int x) {
    for (int y : v)
      if (y == x) return true;
    return false;
  }

  void key_pre(int l, int t, int h, float* out) const {
    const head& hd = head_at(l, h);
    detail::rng r(p_.seed, detail::key_noise, l, t, h);
    for (int c = 0; c < p_.head_dim; ++c) {
      const double n = r.normal();
      if (t == 0)  // attention sink: a large key on the sink channels, little else
        out[c] = static_cast<float>(is_sink_channel(c) ? p_.sink_gain : 0.3 * hd.s[c] * n);
      else
        out[c] = static_cast<float>(hd.mu[c] + hd.s[c] * n);
    }
  }
  void rope(int t, float* v) const {
    const int half = p_.head_dim / 2;
    for (int i = 0; i < half; ++i) {
      const double a = t * theta_[i], c = std::cos(a), s = std::sin(a);
      const double x = v[i], y = v[i + half];
      v[i] = static_cast<float>(x * c - y * s);
      v[i + half] = static_cast<float>(x * s + y * c);
    }
  }
  void round16(float* v) const {
    for (int c = 0; c < p_.head_dim; ++c) v[c] = kvtile::half_t(v[c]).to_float();
  }

  generator_params p_;
  std::vector<head> heads_;
  std::vector<double> theta_;
};

}  // namespace kvtile_eval
