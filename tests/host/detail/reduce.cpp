// detail/reduce.hpp: the canonical reduction order (halving tree) that host and
// device share. The tests re-implement the order independently (recursively:
// sum(v[0..n)) = sum(w[0..n/2)) with w[i] = v[i] + v[i + n/2]) and require
// bit equality; they also check that the order matters (a sequential sum
// differs on some inputs, so bit equality is a real constraint) and that the
// canonical std is close to a double-precision std.
#include "test_util.hpp"

namespace {

// Products kept unfused whatever the compiler flags (-ffp-contract=fast, -mfma).
float unfused_mul(float a, float b) {
  volatile float p = a * b;
  return p;
}
float unfused_add(float a, float b) {
  volatile float s = a + b;
  return s;
}

float ref_tree(std::vector<float> v) {
  if (v.size() == 1) return v[0];
  const std::size_t h = v.size() / 2;
  std::vector<float> w(h);
  for (std::size_t i = 0; i < h; ++i) w[i] = unfused_add(v[i], v[i + h]);
  return ref_tree(w);
}

float ref_std(const std::vector<float>& v) {
  const float n = static_cast<float>(v.size());
  const float mean = ref_tree(v) / n;
  std::vector<float> sq(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float d = v[i] - mean;
    sq[i] = unfused_mul(d, d);
  }
  return std::sqrt(ref_tree(sq) / (n - 1.0f));
}

double double_std(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m += x;
  m /= v.size();
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

std::vector<float> random_vec(kvtest::rng& r, int n, int kind) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case 0: v[i] = static_cast<float>(r.normal()); break;
      case 1: v[i] = static_cast<float>(1000.0 + r.normal()); break;                    // large mean
      case 2: v[i] = static_cast<float>(r.normal() * std::exp(r.uniform(-8.0, 8.0))); break;  // wide dynamic range
      default: v[i] = static_cast<float>(r.uniform(-1.0, 1.0) * 1e-15); break;          // small (squares ~1e-30)
    }
  }
  return v;
}

}  // namespace

TEST_CASE("reduce: tree_sum_inplace equals the explicit halving tree, bit for bit") {
  kvtest::rng r(11);
  int order_matters = 0;
  for (int n : {1, 2, 4, 8, 32, 64, 128, 256}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> v = random_vec(r, n, trial % 4);
      std::vector<float> w = v;
      const float got = kvtile::detail::tree_sum_inplace(w.data(), n);
      const float ref = ref_tree(v);
      CHECK(kvtest::bits_of(got) == kvtest::bits_of(ref));
      float seq = 0;
      for (float x : v) seq = unfused_add(seq, x);
      if (kvtest::bits_of(seq) != kvtest::bits_of(got)) ++order_matters;
    }
  }
  // The order is observable: a sequential sum differs on some of these inputs.
  CHECK(order_matters > 0);
  // A hand-checked order: n = 4 computes (v0 + v2) + (v1 + v3).
  {
    float v[4] = {1e8f, 1.0f, -1e8f, 1.0f};  // (1e8 - 1e8) + (1 + 1) = 2; sequential gives 1 (1e8 + 1 == 1e8)
    CHECK(kvtile::detail::tree_sum_inplace(v, 4) == 2.0f);
  }
}

TEST_CASE("reduce: canonical_std equals the explicit order and is close to double std") {
  kvtest::rng r(12);
  std::vector<float> tmp(256);
  double worst_rel = 0;
  for (int n : {2, 4, 32, 64, 128, 256}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> v = random_vec(r, n, trial % 4);
      const float got = kvtile::detail::canonical_std(v.data(), n, tmp.data());
      CHECK(kvtest::bits_of(got) == kvtest::bits_of(ref_std(v)));
      const double ref = double_std(v);
      if (ref > 0) worst_rel = std::max(worst_rel, std::fabs(got - ref) / ref);
    }
  }
  MESSAGE("canonical_std: worst relative error vs double " << worst_rel);
  // Two-pass fp32 with tree sums: relative error ~ log2(n) * 2^-24 (measured
  // ~1.4e-7, the large-mean case included).
  CHECK(worst_rel < 1e-5);
  // Without the large-mean case the error is a few ulp.
  double worst_plain = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> v = random_vec(r, 128, 0);
    const double ref = double_std(v);
    worst_plain = std::max(worst_plain, std::fabs(kvtile::detail::canonical_std(v.data(), 128, tmp.data()) - ref) / ref);
  }
  CHECK(worst_plain < 4e-6);
  // Constant input: exactly zero.
  std::vector<float> c(64, 3.25f);
  CHECK(kvtile::detail::canonical_std(c.data(), 64, tmp.data()) == 0.0f);
  // Documented limitation: deviations below ~1e-19 square to fp32 subnormals or
  // zero, so the std of such tiny data is inaccurate (down to 0). Harmless for
  // kvtile: Sinkhorn clamps every std to [1e-3, 1e3] before using it.
  std::vector<float> tiny(64);
  for (int i = 0; i < 64; ++i) tiny[i] = (i % 2 ? 1e-30f : -1e-30f);
  const float ts = kvtile::detail::canonical_std(tiny.data(), 64, tmp.data());
  CHECK(ts >= 0.0f);
  CHECK(ts < 1e-3f);
}

TEST_CASE("reduce: canonical_col_std equals canonical_std of each column, bit for bit") {
  kvtest::rng r(13);
  for (auto [rows, cols] : {std::pair{128, 64}, std::pair{64, 128}, std::pair{256, 32}, std::pair{2, 8}}) {
    std::vector<float> m(static_cast<std::size_t>(rows) * cols);
    for (int i = 0; i < rows * cols; ++i) m[i] = static_cast<float>(r.normal() * (1 + (i % cols)) + (i % 7));
    std::vector<float> out(cols), tmp(m.size()), col(rows), t2(rows);
    kvtile::detail::canonical_col_std(m.data(), rows, cols, out.data(), tmp.data());
    int mismatches = 0;
    for (int c = 0; c < cols; ++c) {
      for (int rr = 0; rr < rows; ++rr) col[rr] = m[static_cast<std::size_t>(rr) * cols + c];
      if (kvtest::bits_of(out[c]) != kvtest::bits_of(kvtile::detail::canonical_std(col.data(), rows, t2.data())))
        ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

namespace {
// div_by<N>(x) against an independent IEEE division, for random bit patterns
// (every exponent: subnormal results, overflow-free large values, zeros, Inf,
// NaN) and the edges. Returns the number of mismatches.
template <int N>
int div_by_mismatches(kvtest::rng& r) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f, 1.1754942e-38f, 1.17549435e-38f,
                           3.4028235e38f, -3.4028235e38f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 200000; ++i) xs.push_back(kvtest::float_of(static_cast<std::uint32_t>(r.next())));
  // Results near the subnormal boundary, where a quotient rounds at reduced precision.
  for (int i = 0; i < 20000; ++i)
    xs.push_back(kvtest::float_of((static_cast<std::uint32_t>(r.next()) & 0x81ffffffu) |
                                  (static_cast<std::uint32_t>(r.below(8)) << 23)));
  int bad = 0;
  for (float x : xs) {
    volatile float n = static_cast<float>(N);  // a real division, whatever the optimizer knows
    const float want = x / n;
    const float got = kvtile::detail::div_by<N>(x);
    if (std::isnan(want) ? !std::isnan(got) : kvtest::bits_of(got) != kvtest::bits_of(want)) ++bad;
  }
  return bad;
}
}  // namespace

TEST_CASE("reduce: div_by<N> equals the IEEE division bit for bit (powers of two multiply)") {
  kvtest::rng r(13);
  CHECK(div_by_mismatches<1>(r) == 0);
  CHECK(div_by_mismatches<2>(r) == 0);
  CHECK(div_by_mismatches<32>(r) == 0);
  CHECK(div_by_mismatches<64>(r) == 0);
  CHECK(div_by_mismatches<128>(r) == 0);
  CHECK(div_by_mismatches<256>(r) == 0);
  CHECK(div_by_mismatches<4096>(r) == 0);
  CHECK(div_by_mismatches<63>(r) == 0);
  CHECK(div_by_mismatches<127>(r) == 0);
  CHECK(div_by_mismatches<255>(r) == 0);
  // A multiplication by a reciprocal that is NOT exact does differ: the
  // power-of-two condition is what makes div_by exact.
  int differs = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = kvtest::float_of(static_cast<std::uint32_t>(r.next()) & 0x7f7fffffu);
    volatile float n = 127.0f;
    if (kvtest::bits_of(kvtile::detail::mul(x, 1.0f / 127.0f)) != kvtest::bits_of(x / n)) ++differs;
  }
  CHECK(differs > 0);
}
