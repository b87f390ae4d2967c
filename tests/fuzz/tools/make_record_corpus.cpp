// tests/fuzz/tools/make_record_corpus.cpp: writes the seed corpus of the
// decode_record fuzz target: one real record of every preset shape
// (k4v2/k4v4/k2v2/k8v8 at 128 tokens, k4v2/k4v4 at 64) at head_dim 128 with
// both packings, and k4v2_g128 at head_dim 64 and 256, each as a fuzz input
// [combo][flags = 0][record] (raw copy, half output, original frame).
// Deterministic: a splitmix64 Gaussian-ish tile, so rerunning writes the same bytes.
//   c++ -std=c++17 -O2 -Iinclude -Itests/fuzz tests/fuzz/tools/make_record_corpus.cpp -o /tmp/mk
//   /tmp/mk tests/fuzz/corpus/decode_record
#include "../fuzz_common.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {
struct splitmix {
  std::uint64_t s;
  double uniform() {
    std::uint64_t x = (s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((x ^ (x >> 31)) >> 11) * 0x1.0p-53;
  }
  float gauss() {  // sum of 4 uniforms, centred: enough for a seed
    return static_cast<float>((uniform() + uniform() + uniform() + uniform() - 2.0) * 1.7);
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (int i = 0; i < kvtile_fuzz::num_combos; ++i) {
    const kvtile::codec_params p = kvtile_fuzz::combo(i);
    if (p.algo != kvtile::method::kvarn) continue;
    const bool d128 = p.head_dim == 128;
    const bool k4v2_g128_fp8 =
        p.tile_tokens == 128 && p.key_bits == 4 && p.value_bits == 2 && p.pack == kvtile::packing::fp8_scales;
    if (!d128 && !k4v2_g128_fp8) continue;
    int rc = 0;
    const kvtile::status st = kvtile::dispatch(p, [&](auto tag) {
      using Codec = typename decltype(tag)::type;
      constexpr int D = Codec::D, G = Codec::G;
      splitmix rng{static_cast<std::uint64_t>(i) + 1};
      std::vector<float> k(static_cast<std::size_t>(G) * D), v(k.size());
      for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d) {
          // keys: a few outlier channels with offsets; values: plain
          k[static_cast<std::size_t>(g) * D + d] = rng.gauss() * (d % 17 == 3 ? 12.0f : 1.0f) + (d % 17 == 3 ? 5.0f : 0.0f);
          v[static_cast<std::size_t>(g) * D + d] = rng.gauss();
        }
      std::vector<std::uint8_t> input(2 + Codec::record_bytes);
      input[0] = static_cast<std::uint8_t>(i);
      input[1] = 0;
      if (Codec::encode(k.data(), D, v.data(), D, input.data() + 2) != kvtile::status::success) {
        rc = 1;
        return;
      }
      char name[96];
      std::snprintf(name, sizeof name, "k%dv%d_g%d_d%d_%s", p.key_bits, p.value_bits, p.tile_tokens, p.head_dim,
                    kvtile::to_string(p.pack));
      const std::string path = std::string(argv[1]) + "/" + name;
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (!f || std::fwrite(input.data(), 1, input.size(), f) != input.size() || std::fclose(f) != 0) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        rc = 1;
        return;
      }
      ++written;
    });
    if (st != kvtile::status::success || rc != 0) return 1;
  }
  std::printf("%d records written\n", written);
  return written == 14 ? 0 : 1;
}
