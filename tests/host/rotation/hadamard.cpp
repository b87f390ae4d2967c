// rotation/hadamard.hpp and rotation/identity.hpp (method.md section 1).
// The FWHT is compared against the dense Sylvester matrix S_D / sqrt(D) built
// in double with Eigen (S_1 = [1], S_2n = [[S, S], [S, -S]]).
// Eigen's own headers warn under some flags (-march=native: unused variables
// in its AVX code); they are a reference, not code under test.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wdeprecated-copy"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
#include <Eigen/Dense>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "test_util.hpp"

namespace {

Eigen::MatrixXd sylvester(int D) {
  Eigen::MatrixXd S(1, 1);
  S(0, 0) = 1.0;
  while (S.rows() < D) {
    const Eigen::Index n = S.rows();
    Eigen::MatrixXd T(2 * n, 2 * n);
    T << S, S, S, -S;
    S = T;
  }
  return S / std::sqrt(static_cast<double>(D));
}

template <class Rot, int D>
std::vector<float> apply_fwd(std::vector<float> v) {
  Rot::template forward<D>(v.data());
  return v;
}
template <class Rot, int D>
std::vector<float> apply_inv(std::vector<float> v) {
  Rot::template inverse<D>(v.data());
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

template <int D>
void check_hadamard() {
  const Eigen::MatrixXd H = sylvester(D);
  // The dense matrix itself is orthonormal and symmetric (sanity of the reference).
  REQUIRE((H * H - Eigen::MatrixXd::Identity(D, D)).cwiseAbs().maxCoeff() < 1e-12);
  REQUIRE((H - H.transpose()).cwiseAbs().maxCoeff() == 0.0);

  // Basis vectors: row i of H. For D = 64 and 256 the scale 1/sqrt(D) is a power
  // of two, so the entries are exact; for 128 within one fp32 rounding.
  for (int i = 0; i < D; ++i) {
    std::vector<float> e(D, 0.0f);
    e[i] = 1.0f;
    const auto y = apply_fwd<kvtile::hadamard, D>(e);
    double worst = 0;
    for (int j = 0; j < D; ++j) worst = std::max(worst, std::fabs(y[j] - H(i, j)));
    if (D == 128) CHECK(worst <= 0.0883883476 * 6e-8);
    else CHECK(worst == 0.0);
  }

  kvtest::rng r(100 + D);
  double worst_rel = 0, worst_norm = 0, worst_inv = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(D);
    const double scale = std::exp(r.uniform(-10, 10));
    for (auto& v : x) v = static_cast<float>(scale * r.normal() * (trial % 3 == 0 ? std::exp(r.uniform(-3, 3)) : 1.0));
    Eigen::VectorXd xd(D);
    for (int i = 0; i < D; ++i) xd(i) = x[i];
    const Eigen::VectorXd yd = H * xd;  // v H == H v (symmetric)
    const auto y = apply_fwd<kvtile::hadamard, D>(x);
    double err = 0;
    for (int i = 0; i < D; ++i) err = std::max(err, std::fabs(y[i] - yd(i)));
    // Each output is log2(D) butterfly additions plus one multiply from
    // exact-ish inputs: error <= (log2 D + 1) * 2^-24 * ||x||_1 / sqrt(D).
    const double nx = norm(x);
    worst_rel = std::max(worst_rel, err / nx);
    worst_norm = std::max(worst_norm, std::fabs(norm(y) - nx) / nx);   // orthonormal
    const auto back = apply_inv<kvtile::hadamard, D>(y);              // self-inverse
    double e2 = 0;
    for (int i = 0; i < D; ++i) e2 += (back[i] - static_cast<double>(x[i])) * (back[i] - static_cast<double>(x[i]));
    worst_inv = std::max(worst_inv, std::sqrt(e2) / nx);
  }
  MESSAGE("D=" << D << " FWHT vs dense: max |err|/||x|| " << worst_rel << ", norm change " << worst_norm
               << ", ||H(Hx) - x||/||x|| " << worst_inv);
  CHECK(worst_rel < 1e-6);
  CHECK(worst_norm < 1e-6);
  CHECK(worst_inv < 1e-6);
}

template <int D>
void check_randomized() {
  using RH = kvtile::randomized_hadamard<0x1234abcdull>;
  const Eigen::MatrixXd H = sylvester(D);
  // The signs are a real mix of +1 and -1 and depend on the seed.
  int neg = 0, differs = 0;
  for (int d = 0; d < D; ++d) {
    CHECK(std::fabs(RH::sign(d)) == 1.0f);
    neg += RH::sign(d) < 0;
    differs += RH::sign(d) != kvtile::randomized_hadamard<7>::sign(d);
  }
  CHECK(neg > D / 8);
  CHECK(neg < D - D / 8);
  CHECK(differs > 0);
  kvtest::rng r(200 + D);
  double worst_inv = 0, worst_dense = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> x(D);
    for (auto& v : x) v = static_cast<float>(r.normal());
    const auto y = apply_fwd<RH, D>(x);
    // forward = v H diag(s)
    Eigen::VectorXd xd(D);
    for (int i = 0; i < D; ++i) xd(i) = x[i];
    const Eigen::VectorXd hd = H * xd;
    for (int i = 0; i < D; ++i) worst_dense = std::max(worst_dense, std::fabs(y[i] - hd(i) * RH::sign(i)));
    const auto back = apply_inv<RH, D>(y);
    for (int i = 0; i < D; ++i) worst_inv = std::max(worst_inv, std::fabs(back[i] - static_cast<double>(x[i])));
  }
  CHECK(worst_dense < 1e-5);
  CHECK(worst_inv < 1e-5);
}

}  // namespace

TEST_CASE("hadamard: FWHT equals the dense Sylvester product, orthonormal, self-inverse (D=64)") { check_hadamard<64>(); }
TEST_CASE("hadamard: FWHT equals the dense Sylvester product, orthonormal, self-inverse (D=128)") { check_hadamard<128>(); }
TEST_CASE("hadamard: FWHT equals the dense Sylvester product, orthonormal, self-inverse (D=256)") { check_hadamard<256>(); }

TEST_CASE("hadamard: randomized_hadamard is H diag(s) and inverse(forward(x)) ~= x") {
  check_randomized<64>();
  check_randomized<128>();
  check_randomized<256>();
}

TEST_CASE("hadamard: attention invariance (qH).(kH) == q.k") {
  constexpr int D = 128;
  kvtest::rng r(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> q(D), k(D);
    for (int i = 0; i < D; ++i) { q[i] = static_cast<float>(r.normal()); k[i] = static_cast<float>(r.normal()); }
    const auto qh = apply_fwd<kvtile::hadamard, D>(q), kh = apply_fwd<kvtile::hadamard, D>(k);
    double a = 0, b = 0;
    for (int i = 0; i < D; ++i) { a += static_cast<double>(q[i]) * k[i]; b += static_cast<double>(qh[i]) * kh[i]; }
    CHECK(std::fabs(a - b) < 1e-4 * (1 + std::fabs(a)));
  }
}

TEST_CASE("hadamard: identity rotation is a bitwise no-op") {
  kvtest::rng r(9);
  std::vector<float> x(256);
  for (auto& v : x) v = static_cast<float>(r.normal());
  x[3] = -0.0f;
  x[4] = std::numeric_limits<float>::denorm_min();
  auto y = x;
  kvtile::identity::forward<256>(y.data());
  CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
  kvtile::identity::inverse<256>(y.data());
  CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
  CHECK(kvtile::identity::is_identity);
  CHECK_FALSE(kvtile::hadamard::is_identity);
  for (int d = 0; d < 64; ++d) CHECK(kvtile::identity::sign(d) == 1.0f);
}
