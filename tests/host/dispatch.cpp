// dispatch.hpp: runtime parameters -> compile-time codec. Every supported
// combination calls f exactly once with the matching codec; anything else
// returns the documented status (checked in this order: head_dim, tile
// tokens, bits / bit combination, packing, method) and never calls f.
#include <string>
#include <type_traits>

#include "test_util.hpp"

namespace {
using kvtile::codec_params;
using kvtile::method;
using kvtile::packing;
using kvtile::status;

// Reference of the supported set, written from the dispatch.hpp comment: G=128:
// k4v2, k4v4, k2v2, k8v8; G=64: k4v2, k4v4; D in {64, 128, 256}.
status expected(const codec_params& p) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return status::unsupported_head_dim;
  if (p.tile_tokens != 64 && p.tile_tokens != 128) return status::unsupported_tile_tokens;
  auto vb = [](int b) { return b == 2 || b == 4 || b == 8; };
  if (!vb(p.key_bits) || !vb(p.value_bits)) return status::unsupported_bits;
  const std::pair<int, int> kv{p.key_bits, p.value_bits};
  const bool ok128 = kv == std::pair{4, 2} || kv == std::pair{4, 4} || kv == std::pair{2, 2} || kv == std::pair{8, 8};
  const bool ok64 = kv == std::pair{4, 2} || kv == std::pair{4, 4};
  if (!(p.tile_tokens == 128 ? ok128 : ok64)) return status::unsupported_bits;
  return status::success;
}

std::size_t fp8_bytes(int D, int G, int bk, int bv) { return 16 + 2 * (D + G) + 2 * (D + G) + D * G * bk / 8 + D * G * bv / 8; }
std::size_t fp16_bytes(int D, int G, int bk, int bv) { return (D * G * bk / 8 + 4 * D + 2 * G + D * G * bv / 8 + 2 * D + 4 * G + 7) / 8 * 8; }

}  // namespace

TEST_CASE("dispatch: every combination, supported or not") {
  int supported = 0, unsupported = 0;
  for (int D : {0, 32, 64, 96, 128, 256, 512})
    for (int G : {16, 32, 64, 128, 256})
      for (int bk : {1, 2, 3, 4, 8, 16})
        for (int bv : {1, 2, 4, 8})
          for (packing pk : {packing::fp8_scales, packing::fp16_scales})
            for (method m : {method::kvarn, method::kivi, method::rotate_rtn}) {
              const codec_params p{D, G, bk, bv, pk, m};
              int calls = 0;
              bool right = false;
              const status s = kvtile::dispatch(p, [&](auto tag) {
                using C = typename decltype(tag)::type;
                ++calls;
                using Pk = std::conditional_t<std::is_same_v<typename C::packer, kvtile::fp8_scales>,
                                              std::integral_constant<packing, packing::fp8_scales>,
                                              std::integral_constant<packing, packing::fp16_scales>>;
                const method cm = C::rotation::is_identity ? method::kivi
                                  : C::normalizer::is_none ? method::rotate_rtn
                                                           : method::kvarn;
                const std::size_t want_bytes =
                    pk == packing::fp8_scales ? fp8_bytes(D, G, bk, bv) : fp16_bytes(D, G, bk, bv);
                right = C::D == D && C::G == G && C::config::key_bits == bk && C::config::value_bits == bv &&
                        Pk::value == pk && cm == m && C::record_bytes == want_bytes &&
                        C::key_rounder::bits == bk && C::value_rounder::bits == bv;
              });
              const status want = expected(p);
              CAPTURE(D);
              CAPTURE(G);
              CAPTURE(bk);
              CAPTURE(bv);
              if (s != want || kvtile::check(p) != want) CHECK(s == want);
              if (want == status::success) {
                ++supported;
                if (calls != 1 || !right) {
                  CHECK(calls == 1);
                  CHECK(right);
                }
              } else {
                ++unsupported;
                if (calls != 0) CHECK(calls == 0);
              }
            }
  // 3 head dims x (4 + 2) shapes x 2 packings x 3 methods.
  CHECK(supported == 3 * 6 * 2 * 3);
  CHECK(unsupported > 0);
}

TEST_CASE("dispatch: invalid enum values and the method's codec") {
  int calls = 0;
  codec_params p;
  CHECK(kvtile::dispatch(p, [&](auto tag) {
          ++calls;
          CHECK(std::is_same_v<typename decltype(tag)::type, kvtile::presets::k4v2_g128<128>>);  // the default
        }) == status::success);
  CHECK(calls == 1);
  p.pack = static_cast<packing>(7);
  CHECK(kvtile::dispatch(p, [&](auto) { ++calls; }) == status::invalid_argument);
  p.pack = packing::fp8_scales;
  p.algo = static_cast<method>(-1);
  CHECK(kvtile::dispatch(p, [&](auto) { ++calls; }) == status::invalid_argument);
  CHECK(calls == 1);
  // The check order: head_dim before tile tokens before bits.
  CHECK(kvtile::check(codec_params{100, 100, 3, 3}) == status::unsupported_head_dim);
  CHECK(kvtile::check(codec_params{128, 100, 3, 3}) == status::unsupported_tile_tokens);
  CHECK(kvtile::check(codec_params{128, 128, 3, 2}) == status::unsupported_bits);
  CHECK(kvtile::check(codec_params{128, 64, 2, 2}) == status::unsupported_bits);   // k2v2 only at G=128
  CHECK(kvtile::check(codec_params{128, 128, 2, 4}) == status::unsupported_bits);  // valid widths, no preset
  // G = 32 and 256 are valid tile_config shapes but not dispatched.
  CHECK(kvtile::check(codec_params{128, 32, 4, 2}) == status::unsupported_tile_tokens);
  CHECK(kvtile::check(codec_params{128, 256, 4, 2}) == status::unsupported_tile_tokens);
  // A dispatched codec works: encode/decode through the tag.
  const kvtest::tile t = kvtest::gaussian_tile(64, 64, 1);
  CHECK(kvtile::dispatch(codec_params{64, 64, 4, 4, packing::fp16_scales, method::rotate_rtn}, [&](auto tag) {
          using C = typename decltype(tag)::type;
          auto rec = kvtest::make_record<C>();
          CHECK(C::encode(t.data(), 64, t.data(), 64, rec.data()) == status::success);
          kvtest::tile k(64, 64), v(64, 64);
          CHECK(C::decode(rec.data(), k.data(), 64, v.data(), 64) == status::success);
          CHECK(kvtest::sq_err(k, t) < 0.05 * kvtest::sq_norm(t));
        }) == status::success);
  CHECK(std::string(kvtile::to_string(packing::fp16_scales)) == "fp16_scales");
  CHECK(std::string(kvtile::to_string(method::rotate_rtn)) == "rotate_rtn");
}

TEST_CASE("status and enum strings name what is supported (issue 31 item 13)") {
  using kvtile::packing;
  using kvtile::method;
  using kvtile::status;
  // G = 32 is refused: the string must not list 32 as supported.
  const std::string tiles = kvtile::to_string(kvtile::check(codec_params{128, 32, 4, 2}));
  CHECK(tiles.find("32") == std::string::npos);
  CHECK(tiles.find("64 or 128") != std::string::npos);
  // k2v4: both widths valid, the pair has no preset: the string names the pairs.
  const std::string bits = kvtile::to_string(kvtile::check(codec_params{128, 128, 2, 4}));
  CHECK(bits.find("2, 4 or 8") == std::string::npos);
  CHECK(bits.find("k4v2") != std::string::npos);
  CHECK(std::string(kvtile::to_string(static_cast<packing>(7))) == "unknown packing");
  CHECK(std::string(kvtile::to_string(static_cast<method>(7))) == "unknown method");
  CHECK(std::string(kvtile::to_string(packing::fp8_scales)) == "fp8_scales");
  CHECK(std::string(kvtile::to_string(method::kvarn)) == "kvarn");
  CHECK(std::string(kvtile::to_string(method::kivi)) == "kivi");
}
