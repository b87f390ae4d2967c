// Outlier key tiles: where the full pipeline (Hadamard + Sinkhorn + storage-
// aware RTN, presets::k4v2_g128) should beat KIVI (per-channel RTN on raw keys)
// at the same bits, and how rotate_rtn (Hadamard, no Sinkhorn) compares.
//
// Data: synthetic (tests must not depend on /work/shared/data or tests/data).
// kvtest::outlier_key_tile models real keys: 4 outlier channels with a large
// offset (10-100x the rest) and heavy per-token variation (0.4x that), per-
// token magnitude variation (lognormal, sigma 0.25) and one sink-like token
// at 4x. Errors are relative Frobenius norms ||K - K^|| / ||K|| in the
// original frame, aggregated over 6 tiles.
//
// Measured (GCC 12, x86-64; printed by the test):
//   k4: kvarn 0.0376, kivi 0.0712, rotate_rtn 0.0694  (kvarn/kivi 0.53, /rotate_rtn 0.54)
//   k2: kvarn 0.180,  kivi 0.414,  rotate_rtn 0.440   (kvarn/kivi 0.43, /rotate_rtn 0.41)
// Asserted with margin: kvarn/kivi < 0.7 (k4) and < 0.6 (k2); same vs rotate_rtn.
//
// Finding worth stating: on tiles with channel outliers ONLY (no per-token
// variation) KIVI's per-channel axis already isolates the outliers and kvarn
// is only slightly better (measured kvarn/kivi 0.91 with offsets, 0.82 zero-mean). The gain
// comes from the per-token Sinkhorn scale t[g] absorbing token magnitude
// variation, which per-channel min-max cannot. That case is asserted as "not
// worse than KIVI" (ratio < 1.05).
#include <string>

#include "test_util.hpp"

namespace {
namespace P = kvtile::presets;

template <class C>
double key_sq_err(const kvtest::tile& k) {
  auto rec = kvtest::make_record<C>();
  REQUIRE(C::encode_keys(k.data(), C::D, rec.data()) == kvtile::status::success);
  kvtest::tile kh(C::G, C::D);
  REQUIRE(C::decode_keys(rec.data(), kh.data(), C::D) == kvtile::status::success);
  return kvtest::sq_err(k, kh);
}

struct errs {
  double kvarn = 0, kivi = 0, rot = 0, norm = 0;
};

template <class Kvarn, class Kivi, class Rot, class Gen>
errs measure(Gen gen, int n_tiles) {
  errs e;
  for (int i = 0; i < n_tiles; ++i) {
    const kvtest::tile k = gen(i);
    e.kvarn += key_sq_err<Kvarn>(k);
    e.kivi += key_sq_err<Kivi>(k);
    e.rot += key_sq_err<Rot>(k);
    e.norm += kvtest::sq_norm(k);
  }
  e.kvarn = std::sqrt(e.kvarn / e.norm);
  e.kivi = std::sqrt(e.kivi / e.norm);
  e.rot = std::sqrt(e.rot / e.norm);
  return e;
}

// Channel outliers only: every token has the same distribution.
kvtest::tile channel_only_tile(std::uint64_t seed, bool with_offset) {
  kvtest::rng r(seed);
  kvtest::tile k(128, 128);
  std::vector<double> sc(128, 1.0), mu(128, 0.0);
  for (int i = 0; i < 4; ++i) {
    const int d = r.below(128);
    const double m = r.uniform(10, 100);
    sc[d] = 0.4 * m;
    mu[d] = with_offset ? m : 0.0;
  }
  for (int g = 0; g < 128; ++g)
    for (int d = 0; d < 128; ++d) k.at(g, d) = static_cast<float>(mu[d] + sc[d] * r.normal());
  return k;
}

}  // namespace

TEST_CASE("outlier: kvarn k4v2 key error clearly below kivi and rotate_rtn at 4 bits") {
  const errs e = measure<P::k4v2_g128<128>, P::kivi<128, 128, 4, 2>, P::rotate_rtn<128, 128, 4, 2>>(
      [](int i) { return kvtest::outlier_key_tile(128, 128, 1000 + i); }, 6);
  MESSAGE("k4 key rel. error: kvarn " << e.kvarn << ", kivi " << e.kivi << ", rotate_rtn " << e.rot
                                      << "; kvarn/kivi " << e.kvarn / e.kivi << ", kvarn/rotate_rtn " << e.kvarn / e.rot);
  CHECK(e.kvarn / e.kivi < 0.7);
  CHECK(e.kvarn / e.rot < 0.7);
}

TEST_CASE("outlier: kvarn k2v2 key error clearly below kivi and rotate_rtn at 2 bits") {
  const errs e = measure<P::k2v2_g128<128>, P::kivi<128, 128, 2, 2>, P::rotate_rtn<128, 128, 2, 2>>(
      [](int i) { return kvtest::outlier_key_tile(128, 128, 2000 + i); }, 6);
  MESSAGE("k2 key rel. error: kvarn " << e.kvarn << ", kivi " << e.kivi << ", rotate_rtn " << e.rot
                                      << "; kvarn/kivi " << e.kvarn / e.kivi << ", kvarn/rotate_rtn " << e.kvarn / e.rot);
  CHECK(e.kvarn / e.kivi < 0.6);
  CHECK(e.kvarn / e.rot < 0.6);
}

TEST_CASE("outlier: with channel outliers only, kvarn is not worse than kivi") {
  for (bool offset : {true, false}) {
    const errs e = measure<P::k4v2_g128<128>, P::kivi<128, 128, 4, 2>, P::rotate_rtn<128, 128, 4, 2>>(
        [offset](int i) { return channel_only_tile(3000 + i, offset); }, 4);
    MESSAGE("k4 channel-only (" << std::string(offset ? "offset" : "zero-mean") << ") key rel. error: kvarn " << e.kvarn
                                << ", kivi " << e.kivi << ", rotate_rtn " << e.rot << "; kvarn/kivi "
                                << e.kvarn / e.kivi);
    CHECK(e.kvarn / e.kivi < 1.05);
  }
}
