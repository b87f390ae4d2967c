// examples/quickstart.cpp: encode one key/value tile with kvtile's default
// codec, decode it, and report size and error; then the same for every preset.
//
// Host only, plain C++17: builds with `g++ -std=c++17 -I include examples/quickstart.cpp`
// or as a consumer of kvtile::kvtile (find_package or add_subdirectory).
// Exits nonzero if any call returns a status that is not ok.
#include <kvtile/kvtile.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

constexpr int kHeadDim = 128;
constexpr int kKvHeads = 2;     // the engine layout interleaves heads: [token][head][D]
constexpr int kTokens = 128;    // enough for the largest preset tile

// Deterministic pseudo-normal numbers (splitmix64 + Irwin-Hall of 12
// uniforms): the same on every platform and standard library.
struct rng {
  std::uint64_t state;
  double uniform() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  }
  double normal() {
    double s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0;
  }
};

// LLM-like synthetic K/V in the engine layout [token][head][D], fp16.
// Keys: per-channel offsets, a slow drift along the sequence and a few outlier
// channels 10-20x larger than the rest (what makes per-channel key scales
// matter). Values: plain per-token noise of varying scale.
void make_kv(std::vector<kvtile::half_t>& k, std::vector<kvtile::half_t>& v, std::uint64_t seed) {
  rng r{seed};
  const int outliers[] = {7, 42, 99};
  std::vector<double> offset(kKvHeads * kHeadDim), gain(kKvHeads * kHeadDim, 1.0);
  for (int h = 0; h < kKvHeads; ++h)
    for (int d = 0; d < kHeadDim; ++d) offset[h * kHeadDim + d] = 0.5 * r.normal();
  for (int h = 0; h < kKvHeads; ++h)
    for (int o : outliers) gain[h * kHeadDim + o] = 10.0 + 10.0 * r.uniform();
  k.resize(std::size_t(kTokens) * kKvHeads * kHeadDim);
  v.resize(k.size());
  for (int t = 0; t < kTokens; ++t) {
    const double token_scale = 0.5 + r.uniform();  // value rows differ in scale
    for (int h = 0; h < kKvHeads; ++h)
      for (int d = 0; d < kHeadDim; ++d) {
        const std::size_t i = (std::size_t(t) * kKvHeads + h) * kHeadDim + d;
        const double drift = 0.3 * std::sin(0.05 * t + d);
        k[i] = kvtile::half_t(static_cast<float>(gain[h * kHeadDim + d] * (offset[h * kHeadDim + d] + drift + r.normal())));
        v[i] = kvtile::half_t(static_cast<float>(token_scale * r.normal()));
      }
  }
}

// ||a - b|| / ||a|| over the first `tokens` tokens of every head.
double relative_error(const std::vector<kvtile::half_t>& a, const std::vector<kvtile::half_t>& b, int tokens) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < std::size_t(tokens) * kKvHeads * kHeadDim; ++i) {
    const double x = a[i].to_float(), e = x - b[i].to_float();
    num += e * e;
    den += x * x;
  }
  return std::sqrt(num / den);
}

struct result {
  kvtile::status st = kvtile::status::success;
  std::size_t record_bytes = 0;
  double bits = 0, capacity = 0, k_err = 0, v_err = 0;
};

// Encodes every KV head's first tile with Codec, decodes it, measures the error.
template <class Codec>
result round_trip(const std::vector<kvtile::half_t>& k, const std::vector<kvtile::half_t>& v) {
  constexpr int G = Codec::config::tile_tokens;
  constexpr std::ptrdiff_t stride = kKvHeads * kHeadDim;  // elements between tokens
  result r;
  r.record_bytes = Codec::record_bytes;
  r.bits = Codec::bits_per_element;
  r.capacity = Codec::compression_vs_fp16;
  std::vector<std::uint8_t> records(Codec::record_bytes * kKvHeads);
  auto ws = std::make_unique<typename Codec::workspace>();  // reusable scratch (large: keep it off the stack)
  std::vector<kvtile::half_t> k2(k.size()), v2(v.size());
  for (int h = 0; h < kKvHeads; ++h) {
    std::uint8_t* rec = records.data() + h * Codec::record_bytes;
    r.st = Codec::encode(k.data() + h * kHeadDim, stride, v.data() + h * kHeadDim, stride, rec, ws.get());
    if (!kvtile::ok(r.st)) return r;
    r.st = Codec::decode(rec, k2.data() + h * kHeadDim, stride, v2.data() + h * kHeadDim, stride,
                         kvtile::frame::original);
    if (!kvtile::ok(r.st)) return r;
  }
  r.k_err = relative_error(k, k2, G);
  r.v_err = relative_error(v, v2, G);
  return r;
}

double round3(double x) { return std::round(x * 1000.0) / 1000.0; }  // ties away from zero, every platform

}  // namespace

int main() {
  std::vector<kvtile::half_t> k, v;
  make_kv(k, v, /*seed=*/2026);
  int failures = 0;

  // 1. The default codec: Hadamard rotation, Sinkhorn(2), 4-bit keys, 2-bit values, FP8 scales.
  using codec = kvtile::presets::k4v2_g128<kHeadDim>;
  std::printf("kvtile %d.%d.%d, record format %d\n", kvtile::version_major, kvtile::version_minor,
              kvtile::version_patch, kvtile::format_version);
  std::printf("codec: presets::k4v2_g128<%d> (%s, %s, %s)\n", kHeadDim, codec::rotation::name,
              codec::normalizer::name, codec::packer::name);
  const result r = round_trip<codec>(k, v);
  if (!kvtile::ok(r.st)) {
    std::printf("error: %s\n", kvtile::to_string(r.st));
    return 1;
  }
  std::printf("record: %zu bytes per KV head per %d tokens (fp16: %zu bytes)\n", r.record_bytes,
              codec::config::tile_tokens, codec::config::fp16_bytes);
  std::printf("bits/element: %.3f\n", round3(r.bits));
  std::printf("capacity vs fp16: %.2fx\n", r.capacity);
  std::printf("K relative error: %.4f\n", r.k_err);
  std::printf("V relative error: %.4f\n", r.v_err);

  // 2. Every preset through the runtime dispatcher (one tile per KV head, same data).
  std::printf("\n%-10s %-12s %9s %10s %8s %9s %9s\n", "preset", "packing", "record B", "bits/elem", "vs fp16",
              "K relerr", "V relerr");
  struct shape { int g, kb, vb; const char* name; };
  const shape shapes[] = {{128, 4, 2, "k4v2_g128"}, {128, 4, 4, "k4v4_g128"}, {64, 4, 2, "k4v2_g64"},
                          {64, 4, 4, "k4v4_g64"},   {128, 2, 2, "k2v2_g128"}, {128, 8, 8, "k8v8_g128"}};
  for (const shape& s : shapes) {
    for (kvtile::packing p : {kvtile::packing::fp8_scales, kvtile::packing::fp16_scales}) {
      const kvtile::codec_params params{kHeadDim, s.g, s.kb, s.vb, p, kvtile::method::kvarn};
      result pr;
      const kvtile::status ds =
          kvtile::dispatch(params, [&](auto tag) { pr = round_trip<typename decltype(tag)::type>(k, v); });
      if (!kvtile::ok(ds) || !kvtile::ok(pr.st)) {
        std::printf("%-10s %-12s error: %s\n", s.name, kvtile::to_string(p),
                    kvtile::to_string(kvtile::ok(ds) ? pr.st : ds));
        ++failures;
        continue;
      }
      std::printf("%-10s %-12s %9zu %10.3f %7.2fx %9.4f %9.4f\n", s.name, kvtile::to_string(p), pr.record_bytes,
                  round3(pr.bits), pr.capacity, pr.k_err, pr.v_err);
    }
  }
  return failures == 0 ? 0 : 1;
}
