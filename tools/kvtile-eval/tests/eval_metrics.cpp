// kvtile-eval metrics against hand-computed values, the per-token RTN
// baseline, the method selection and ranking, and the generator's documented
// properties.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../evaluate.hpp"
#include "../generator.hpp"
#include "../metrics.hpp"
#include "../report.hpp"

using namespace kvtile_eval;

TEST_CASE("eval metrics: relative MSE, SNR, cosine, relative L2") {
  const float x[2] = {1, 2}, y[2] = {1, 3};
  CHECK(relative_mse(x, y, 2) == doctest::Approx(0.2));
  CHECK(snr_db(0.2) == doctest::Approx(6.98970004));
  CHECK(snr_db(0.0) == std::numeric_limits<double>::infinity());
  CHECK(relative_l2(x, y, 2) == doctest::Approx(std::sqrt(0.2)));
  const float a[2] = {1, 0}, b[2] = {1, 1}, z[2] = {0, 0};
  CHECK(cosine(a, b, 2) == doctest::Approx(1 / std::sqrt(2.0)));
  CHECK(cosine(z, z, 2) == 1.0);
  CHECK(cosine(a, z, 2) == 0.0);
  error_sums s;
  s.add(x, y, 1);
  s.add(x + 1, y + 1, 1);
  CHECK(s.relative_mse() == doctest::Approx(0.2));
  const float zero[1] = {0}, one[1] = {1};
  CHECK(relative_mse(zero, zero, 1) == 0.0);
  CHECK(std::isinf(relative_mse(zero, one, 1)));
}

TEST_CASE("eval metrics: attention and KL by hand") {
  // D = 4, scale 1/2: q = (2,0,0,0); keys (0,..) and (1,0,0,0): scores 0 and 1.
  const int D = 4;
  const float q[D] = {2, 0, 0, 0};
  const float keys[2 * D] = {0, 0, 0, 0, 1, 0, 0, 0};
  const float values[2 * D] = {1, 0, 0, 0, 0, 1, 0, 0};
  double logp[2], out[D];
  attention(q, keys, values, D, 2, D, logp, out);
  const double p0 = 1 / (1 + std::exp(1.0)), p1 = 1 - p0;
  CHECK(std::exp(logp[0]) == doctest::Approx(p0));
  CHECK(std::exp(logp[1]) == doctest::Approx(p1));
  CHECK(out[0] == doctest::Approx(p0));
  CHECK(out[1] == doctest::Approx(p1));
  CHECK(out[2] == 0.0);
  // causal: one key -> probability 1
  attention(q, keys, values, D, 1, D, logp, out);
  CHECK(logp[0] == doctest::Approx(0.0));
  // a group of two queries reads the keys once and matches single queries
  const float q2[2 * D] = {2, 0, 0, 0, -2, 0, 0, 0};
  double lg[4], og[2 * D];
  std::vector<float> scratch(2 * (2 + D));
  attention_group(q2, 2, keys, values, D, 2, D, lg, og, scratch.data());
  CHECK(std::exp(lg[1]) == doctest::Approx(p1));
  CHECK(std::exp(lg[2 + 1]) == doctest::Approx(p0));  // score -1 for key 1
  CHECK(og[D + 0] == doctest::Approx(p1));
  // KL(p || q) for p = (1/2, 1/2), q = (1/4, 3/4)
  const double lp[2] = {std::log(0.5), std::log(0.5)}, lq[2] = {std::log(0.25), std::log(0.75)};
  CHECK(kl_divergence(lp, lq, 2) == doctest::Approx(0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0)));
  CHECK(kl_divergence(lp, lp, 2) == 0.0);
}

TEST_CASE("eval metrics: worst 5%, percentiles") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(tail_count(100, 0.05) == 5);
  CHECK(tail_count(10, 0.05) == 1);
  CHECK(tail_count(0, 0.05) == 0);
  CHECK(tail_mean(v, 0.05) == doctest::Approx(98.0));
  CHECK(tail_share(v, 0.05) == doctest::Approx(490.0 / 5050.0));
  CHECK(percentile(v, 50) == doctest::Approx(50.5));
  CHECK(percentile(v, 95) == doctest::Approx(95.05));
  CHECK(percentile(v, 100) == 100.0);
  CHECK(mean(v) == doctest::Approx(50.5));
}

TEST_CASE("eval token_rtn baseline: fp16 grid, error within half a step") {
  std::vector<float> x(128), y(128);
  for (int i = 0; i < 128; ++i) x[i] = std::sin(0.37f * i) * 3.0f + (i == 5 ? 40.0f : 0.0f);
  for (int bits : {2, 4, 8}) {
    REQUIRE(token_rtn_row(bits, x.data(), 128, y.data()));
    float lo = x[0], hi = x[0];
    for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
    const double step = (hi - lo) / ((1 << bits) - 1);
    for (int i = 0; i < 128; ++i) CHECK(std::fabs(x[i] - y[i]) <= 0.5 * step * 1.01 + 1e-3);
  }
  std::vector<float> c(64, 1.5f), cy(64);
  REQUIRE(token_rtn_row(2, c.data(), 64, cy.data()));
  CHECK(cy == c);  // constant row: stored exactly by its zero point
}

TEST_CASE("eval methods: every preset in both packings plus the baselines; selection") {
  const auto all = all_methods();
  CHECK(all.size() == 27);
  std::vector<method_spec> m;
  std::string err;
  REQUIRE(select_methods("presets", m, err));
  CHECK(m.size() == 12);
  REQUIRE(select_methods("baselines", m, err));
  CHECK(m.size() == 15);
  REQUIRE(select_methods("kvarn-0.1", m, err));
  REQUIRE(m.size() == 3);
  CHECK(m[0].name() == "kvarn-0.1 k4v2_g128/fp16");
  CHECK(m[2].name() == "kvarn-0.1 k2v2_g128/fp16");
  CHECK(m[1].iterations == kvtile_eval::kvarn01_iterations);
  REQUIRE(select_methods("kvarn", m, err));  // the presets only
  CHECK(m.size() == 12);
  REQUIRE(select_methods("kivi+k2v2", m, err));
  REQUIRE(m.size() == 1);
  CHECK(m[0].name() == "kivi k2v2_g128/fp8");
  REQUIRE(select_methods("k4v2_g64, token_rtn", m, err));
  CHECK(m.size() == 2 + 4);
  CHECK_FALSE(select_methods("k3v3", m, err));
  CHECK(err.find("k3v3") != std::string::npos);
  CHECK(context_positions(8192) == std::vector<int>{1024, 4096, 8192});
  CHECK(context_positions(1024) == std::vector<int>{1024});
  CHECK(context_positions(300) == std::vector<int>{300});
  CHECK(context_positions(20000) == std::vector<int>{1024, 4096, 16384, 20000});
}

TEST_CASE("eval ranking: Pareto front and best preset per budget") {
  eval_result r;
  auto add = [&](family f, int kb, int vb, double bits, double e) {
    method_result m;
    m.spec = {f, 128, kb, vb, kvtile::packing::fp8_scales};
    m.bits = bits;
    m.all.attn.rel_err_mean = e;
    m.all.attn.samples = 64;  // measured (a method without samples is not ranked)
    r.methods.push_back(m);
  };
  add(family::kvarn, 2, 2, 2.25, 0.50);
  add(family::kvarn, 4, 2, 3.25, 0.40);
  add(family::kvarn, 4, 4, 4.25, 0.08);
  add(family::kivi, 4, 4, 4.25, 0.10);       // dominated by the kvarn k4v4
  add(family::token_rtn, 8, 8, 8.25, 0.04);  // cheaper than kvarn k8v8 by 0.004 bits, but a baseline
  add(family::kvarn, 8, 8, 8.254, 0.01);
  const ranking k = rank_methods(r, {0.05, 0.1, 0.45, 0.001});
  CHECK(k.pareto == std::vector<bool>{true, true, true, false, true, true});
  CHECK(k.best == std::vector<int>{5, 2, 1, -1});
}

TEST_CASE("eval generator: deterministic, fp16 values, key outliers, value offsets, sink, heavy tails, query-key correlation") {
  generator_params p;
  p.tokens = 4096;
  p.kv_heads = 2;
  p.q_heads = 8;
  const kv_generator g(p), g2(p);
  generator_params p3 = p;
  p3.seed = p.seed + 1;
  const kv_generator g3(p3);
  const int D = p.head_dim, T = p.tokens;
  std::vector<float> a(D), b(D);
  g.key(0, 77, 1, a.data());
  g2.key(0, 77, 1, b.data());
  CHECK(a == b);
  g3.key(0, 77, 1, b.data());
  CHECK(a != b);
  for (float x : a) CHECK(kvtile::half_t(x).to_float() == x);

  // keys of head 0
  std::vector<float> K(static_cast<std::size_t>(T) * D), V(K.size());
  for (int t = 0; t < T; ++t) {
    g.key(0, t, 0, &K[static_cast<std::size_t>(t) * D]);
    g.value(0, t, 0, &V[static_cast<std::size_t>(t) * D]);
  }
  // outliers: the largest per-channel |k| is >= 8x the median channel's, and
  // it sits on a documented outlier channel
  std::vector<double> cmax(D, 0);
  for (int t = 1; t < T; ++t)  // the sink token aside
    for (int c = 0; c < D; ++c) cmax[c] = std::max(cmax[c], std::fabs(double(K[static_cast<std::size_t>(t) * D + c])));
  std::vector<double> sorted = cmax;
  std::sort(sorted.begin(), sorted.end());
  const double ratio = sorted.back() / sorted[D / 2];
  MESSAGE("key outlier ratio (max / median channel |max|): " << ratio);
  CHECK(ratio >= 8.0);
  const int argmax = static_cast<int>(std::max_element(cmax.begin(), cmax.end()) - cmax.begin());
  CHECK(g.is_outlier_channel(0, 0, argmax));
  CHECK(g.outlier_pair_indices(0, 0).size() == 3);

  // values: per-channel offsets (every token's mean is the documented b[c]),
  // heavy tails about them (kurtosis well above a Gaussian's 3), a small sink
  // value about the offset
  std::vector<double> vmean(D, 0), vvar(D, 0);
  for (int t = 1; t < T; ++t)
    for (int c = 0; c < D; ++c) vmean[c] += V[static_cast<std::size_t>(t) * D + c] / double(T - 1);
  for (int t = 1; t < T; ++t)
    for (int c = 0; c < D; ++c) {
      const double x = V[static_cast<std::size_t>(t) * D + c] - vmean[c];
      vvar[c] += x * x / double(T - 2);
    }
  double off2 = 0, var = 0, off_err = 0;
  for (int c = 0; c < D; ++c) {
    off2 += double(g.value_offset(0, 0, c)) * g.value_offset(0, 0, c);
    var += vvar[c];
    off_err = std::max(off_err, std::fabs(vmean[c] - g.value_offset(0, 0, c)) / std::sqrt(vvar[c]));
  }
  MESSAGE("value offsets: rms(b) / rms(std) " << std::sqrt(off2 / var) << ", largest |mean - b| / std " << off_err);
  CHECK(std::sqrt(off2 / var) > 0.3);
  CHECK(off_err < 0.2);  // 4095 tokens: the mean's standard error is 1.6% of the std
  double m2 = 0, m4 = 0, n0 = 0, n1 = 0;
  for (int t = 1; t < T; ++t)
    for (int c = 0; c < D; ++c) {
      const double x = V[static_cast<std::size_t>(t) * D + c] - g.value_offset(0, 0, c);
      m2 += x * x;
      m4 += x * x * x * x;
    }
  m2 /= double(V.size() - D);
  m4 /= double(V.size() - D);
  MESSAGE("value kurtosis about the offsets: " << m4 / (m2 * m2));
  CHECK(m4 / (m2 * m2) > 6.0);
  for (int c = 0; c < D; ++c) {
    const double b = g.value_offset(0, 0, c);
    n0 += (V[c] - b) * (V[c] - b);
    n1 += (V[D + c] - b) * (V[D + c] - b);
  }
  CHECK(n0 < 0.05 * n1 + 1e-4);

  // attention: the sink (token 0) and the query's own token get far more than
  // a uniform share
  double sink = 0, self = 0, uniform = 0;
  int n = 0;
  std::vector<double> logp(T), out(D);
  std::vector<float> q(D);
  for (int pos = 256; pos < T; pos += 256)
    for (int qh = 0; qh < 4; ++qh) {
      g.query(0, pos, qh, q.data());
      attention(q.data(), K.data(), V.data(), D, pos + 1, D, logp.data(), out.data());
      sink += std::exp(logp[0]);
      self += std::exp(logp[pos]);
      uniform += 1.0 / (pos + 1);
      ++n;
    }
  MESSAGE("mean sink weight " << sink / n << ", self weight " << self / n << ", uniform " << uniform / n);
  CHECK(sink / n > 0.1);
  CHECK(self / n > 20 * uniform / n);
}
