// tools/kvtile-eval/metrics.hpp: error metrics of kvtile-eval (pure functions).
//
//  relative MSE      sum (x - x^)^2 / sum x^2
//  SNR (dB)          -10 log10(relative MSE)
//  cosine            x . x^ / (|x| |x^|) (1 when both are zero, 0 when one is)
//  per-token error   |x_t - x^_t| / |x_t| for one token's D-vector of one head
//  attention         causal softmax attention of one query over n keys,
//                    scores q . k / sqrt(D); relative output error
//                    |o - o^| / |o|; KL(p || p^) of the two softmaxes
//  worst 5%          mean of the largest ceil(5% of n) values (tail mean)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace kvtile_eval {

// Sums of squares for a relative MSE accumulated piecewise.
struct error_sums {
  double err2 = 0.0, sig2 = 0.0;
  void add(const float* x, const float* y, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(x[i]) - y[i];
      err2 += d * d;
      sig2 += static_cast<double>(x[i]) * x[i];
    }
  }
  void merge(const error_sums& o) {
    err2 += o.err2;
    sig2 += o.sig2;
  }
  // 0 when both are zero; +inf when the signal is zero but the error is not.
  double relative_mse() const {
    if (sig2 > 0) return err2 / sig2;
    return err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
};

inline double relative_mse(const float* x, const float* y, std::size_t n) {
  error_sums s;
  s.add(x, y, n);
  return s.relative_mse();
}

// SNR in dB from a relative MSE; +inf for an exact reconstruction.
inline double snr_db(double rel_mse) {
  if (!(rel_mse > 0)) return std::numeric_limits<double>::infinity();
  return -10.0 * std::log10(rel_mse);
}

inline double cosine(const float* a, const float* b, std::size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0 && bb == 0) return 1.0;
  if (aa == 0 || bb == 0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

// |x - y| / |x| (0 when both are zero, +inf when only x is).
inline double relative_l2(const double* x, const double* y, std::size_t n) {
  double e = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e += (x[i] - y[i]) * (x[i] - y[i]);
    s += x[i] * x[i];
  }
  if (s > 0) return std::sqrt(e / s);
  return e > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}
inline double relative_l2(const float* x, const float* y, std::size_t n) {
  double e = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += d * d;
    s += static_cast<double>(x[i]) * x[i];
  }
  if (s > 0) return std::sqrt(e / s);
  return e > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// Dot product with independent partial sums (vectorizes without fast-math).
inline float dot(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// Causal attention of g queries (query i at q + i * D) of one KV group over
// keys[0..n) (token j at keys + j * stride, values likewise): scores
// q . k / sqrt(D), softmax, output sum_j p_j v_j. Writes log-probabilities
// logp[i * n + j] and outputs out[i * D + d]. Keys and values are read once
// for all g queries. Scores and the weighted sums run in float
// (vectorizable), the normalization in double. `scratch` holds g * (n + D)
// floats. Tokens j < lo and j >= hi are read from keys2 / values2 instead
// (same layout: the original K/V of the sink tile and of the query's own
// tile, --fp16-sink-tile / --fp16-own-tile).
inline void attention_group(const float* q, int g, const float* keys, const float* values, std::size_t stride, int n,
                            int D, double* logp, double* out, float* scratch, int lo = 0, int hi = -1,
                            const float* keys2 = nullptr, const float* values2 = nullptr) {
  if (!keys2 || !values2) {
    lo = 0;
    hi = n;
  }
  if (hi < 0) hi = n;
  auto from = [&](int j, const float* a, const float* b) { return (j >= lo && j < hi) ? a : b; };
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* scores = scratch;                                // g x n
  float* acc = scratch + static_cast<std::size_t>(g) * n;  // g x D
  const std::size_t un = static_cast<std::size_t>(n);
  for (int j = 0; j < n; ++j) {
    const float* k = from(j, keys, keys2) + static_cast<std::size_t>(j) * stride;
    for (int i = 0; i < g; ++i) scores[i * un + j] = dot(q + static_cast<std::size_t>(i) * D, k, D) * scale;
  }
  std::vector<double> z(static_cast<std::size_t>(g));
  for (int i = 0; i < g; ++i) {
    float* s = scores + i * un;
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) m = std::max(m, s[j]);
    double zi = 0;
    for (int j = 0; j < n; ++j) {
      s[j] -= m;
      const float e = std::exp(s[j]);
      zi += e;
      logp[i * un + j] = e;  // the unnormalized weight; made log p after the output sum
    }
    z[i] = zi;
  }
  for (std::size_t i = 0; i < static_cast<std::size_t>(g) * D; ++i) acc[i] = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float* v = from(j, values, values2) + static_cast<std::size_t>(j) * stride;
    for (int i = 0; i < g; ++i) {
      const float p = static_cast<float>(logp[i * un + j]);
      float* a = acc + static_cast<std::size_t>(i) * D;
      for (int d = 0; d < D; ++d) a[d] += p * v[d];
    }
  }
  for (int i = 0; i < g; ++i) {
    const double lz = std::log(z[i]);
    for (int j = 0; j < n; ++j) logp[i * un + j] = static_cast<double>(scores[i * un + j]) - lz;
    for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(i) * D + d] = acc[static_cast<std::size_t>(i) * D + d] / z[i];
  }
}

// One query: logp[n], out[D].
inline void attention(const float* q, const float* keys, const float* values, std::size_t stride, int n, int D,
                      double* logp, double* out) {
  std::vector<float> scratch(static_cast<std::size_t>(n) + static_cast<std::size_t>(D));
  attention_group(q, 1, keys, values, stride, n, D, logp, out, scratch.data());
}

// KL(p || q) from log-probabilities; terms with p = 0 contribute 0.
inline double kl_divergence(const double* logp, const double* logq, std::size_t n) {
  double kl = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = std::exp(logp[i]);
    if (p > 0) kl += p * (logp[i] - logq[i]);
  }
  return kl > 0 ? kl : 0.0;  // rounding can give tiny negatives
}

inline double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// Number of values in the worst `frac` (at least 1 when v is not empty).
inline std::size_t tail_count(std::size_t n, double frac) {
  if (n == 0) return 0;
  std::size_t k = static_cast<std::size_t>(std::ceil(frac * static_cast<double>(n) - 1e-9));
  return std::min(n, std::max<std::size_t>(k, 1));
}

// Mean of the largest ceil(frac * n) values.
template <class T>
double tail_mean(std::vector<T> v, double frac = 0.05) {
  const std::size_t k = tail_count(v.size(), frac);
  if (k == 0) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k - 1), v.end(), std::greater<T>());
  double s = 0;
  for (std::size_t i = 0; i < k; ++i) s += v[i];
  return s / static_cast<double>(k);
}

// Share of the total carried by the largest ceil(frac * n) values (0 when the total is 0).
template <class T>
double tail_share(std::vector<T> v, double frac = 0.05) {
  double total = 0;
  for (T x : v) total += x;
  if (!(total > 0)) return 0.0;
  const std::size_t k = tail_count(v.size(), frac);
  return tail_mean(std::move(v), frac) * static_cast<double>(k) / total;
}

// Linear-interpolated percentile, p in [0, 100].
template <class T>
double percentile(std::vector<T> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(pos);
  const double f = pos - static_cast<double>(i);
  if (i + 1 >= v.size()) return v.back();
  return v[i] * (1 - f) + v[i + 1] * f;
}

}  // namespace kvtile_eval
