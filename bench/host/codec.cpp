// bench/host/codec.cpp: host tile codec throughput, one core (Google Benchmark).
//
// Per benchmark: one K tile and one V tile (one KV head x G tokens, fp16 in
// the engine layout) per iteration, a reused workspace, a reused record.
// Counters: tiles/s and GB/s of fp16 data (K + V fp16 bytes of the tile,
// 10^9 bytes), both rates.
//
//   encode/<preset>        tile_codec::encode (keys + values), the full KVarN method
//   decode/<preset>        tile_codec::decode (keys + values), frame::original
//   encode_rotate_rtn/...  same shape, no normalization (Hadamard + RTN + packing)
//   encode_kivi/...        no rotation, no normalization (RTN + packing only)
//   sinkhorn/...           the preset's Sinkhorn normalizer (2 iterations) alone on the rotated K and V tiles
//
// Build by hand: g++ -std=c++17 -O3 -DNDEBUG -I include bench/host/codec.cpp -lbenchmark -lpthread
#include <benchmark/benchmark.h>
#include <kvtile/kvtile.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

using namespace kvtile;

// Deterministic LLM-like tile data: a few large key channels, noisy values.
template <int D, int G>
struct tile_data {
  std::vector<half_t> k, v;
  tile_data() : k(std::size_t(D) * G), v(std::size_t(D) * G) {
    std::uint64_t s = 0x5eedull;
    auto uniform = [&s] {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(s >> 40) * 0x1.0p-24f;  // [0, 1)
    };
    auto normal = [&] {
      float a = 0;
      for (int i = 0; i < 4; ++i) a += uniform();
      return (a - 2.0f) * 1.7320508f;
    };
    for (int g = 0; g < G; ++g)
      for (int d = 0; d < D; ++d) {
        const float gain = (d % 37 == 5) ? 15.0f : 1.0f;
        k[std::size_t(g) * D + d] = half_t(gain * (0.3f + normal()));
        v[std::size_t(g) * D + d] = half_t(normal());
      }
  }
};

template <class Codec>
void set_counters(benchmark::State& state) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["tiles/s"] = benchmark::Counter(iters, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(iters * static_cast<double>(Codec::config::fp16_bytes) * 1e-9, benchmark::Counter::kIsRate);
}

template <class Codec>
void encode(benchmark::State& state) {
  constexpr int D = Codec::D, G = Codec::G;
  const tile_data<D, G> data;
  auto ws = std::make_unique<typename Codec::workspace>();
  std::vector<std::uint8_t> record(Codec::record_bytes);
  for (auto _ : state) {
    const status s = Codec::encode(data.k.data(), D, data.v.data(), D, record.data(), ws.get());
    if (s != status::success) {
      state.SkipWithError(to_string(s));
      break;
    }
    benchmark::DoNotOptimize(record.data());
    benchmark::ClobberMemory();
  }
  set_counters<Codec>(state);
}

template <class Codec>
void decode(benchmark::State& state) {
  constexpr int D = Codec::D, G = Codec::G;
  const tile_data<D, G> data;
  auto ws = std::make_unique<typename Codec::workspace>();
  std::vector<std::uint8_t> record(Codec::record_bytes);
  if (Codec::encode(data.k.data(), D, data.v.data(), D, record.data(), ws.get()) != status::success) {
    state.SkipWithError("encode failed");
    return;
  }
  std::vector<half_t> k(std::size_t(D) * G), v(std::size_t(D) * G);
  for (auto _ : state) {
    const status s = Codec::decode(record.data(), k.data(), D, v.data(), D, frame::original);
    if (s != status::success) {
      state.SkipWithError(to_string(s));
      break;
    }
    benchmark::DoNotOptimize(k.data());
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
  }
  set_counters<Codec>(state);
}

// The normalizer alone, on the already-rotated K (D x G) and V (G x D) tiles.
template <class Codec>
void sinkhorn_only(benchmark::State& state) {
  constexpr int D = Codec::D, G = Codec::G;
  using norm = typename Codec::normalizer;
  const tile_data<D, G> data;
  std::vector<float> xk(std::size_t(D) * G), xv(std::size_t(D) * G), vec(D);
  for (int g = 0; g < G; ++g) {
    for (int d = 0; d < D; ++d) vec[d] = data.k[std::size_t(g) * D + d].to_float();
    Codec::rotation::template forward<D>(vec.data());
    for (int d = 0; d < D; ++d) xk[std::size_t(d) * G + g] = vec[d];
    for (int d = 0; d < D; ++d) vec[d] = data.v[std::size_t(g) * D + d].to_float();
    Codec::rotation::template forward<D>(vec.data());
    for (int d = 0; d < D; ++d) xv[std::size_t(g) * D + d] = vec[d];
  }
  constexpr std::size_t scratch_k = norm::template scratch_floats<D, G>;
  constexpr std::size_t scratch_v = norm::template scratch_floats<G, D>;
  std::vector<float> scratch(scratch_k > scratch_v ? scratch_k : scratch_v);
  std::vector<float> col(D > G ? D : G), row(D > G ? D : G);
  for (auto _ : state) {
    benchmark::DoNotOptimize(norm::template run<D, G>(xk.data(), col.data(), row.data(), scratch.data()));
    benchmark::DoNotOptimize(norm::template run<G, D>(xv.data(), col.data(), row.data(), scratch.data()));
    benchmark::ClobberMemory();
  }
  set_counters<Codec>(state);
}

using namespace kvtile::presets;

// The full method, every preset at D = 128 (fp8_scales), the default also with
// fp16_scales and at D = 64 / 256.
#define KVTILE_BENCH_PRESET(fn, name, ...) \
  BENCHMARK_TEMPLATE(fn, __VA_ARGS__)->Name(#fn "/" name)->Unit(benchmark::kMicrosecond)

KVTILE_BENCH_PRESET(encode, "k4v2_g128/D128/fp8", k4v2_g128<128>);
KVTILE_BENCH_PRESET(encode, "k4v4_g128/D128/fp8", k4v4_g128<128>);
KVTILE_BENCH_PRESET(encode, "k4v2_g64/D128/fp8", k4v2_g64<128>);
KVTILE_BENCH_PRESET(encode, "k4v4_g64/D128/fp8", k4v4_g64<128>);
KVTILE_BENCH_PRESET(encode, "k2v2_g128/D128/fp8", k2v2_g128<128>);
KVTILE_BENCH_PRESET(encode, "k8v8_g128/D128/fp8", k8v8_g128<128>);
KVTILE_BENCH_PRESET(encode, "k4v2_g128/D128/fp16", k4v2_g128<128, fp16_scales>);
KVTILE_BENCH_PRESET(encode, "k4v2_g128/D64/fp8", k4v2_g128<64>);
KVTILE_BENCH_PRESET(encode, "k4v2_g128/D256/fp8", k4v2_g128<256>);

KVTILE_BENCH_PRESET(decode, "k4v2_g128/D128/fp8", k4v2_g128<128>);
KVTILE_BENCH_PRESET(decode, "k4v4_g128/D128/fp8", k4v4_g128<128>);
KVTILE_BENCH_PRESET(decode, "k4v2_g64/D128/fp8", k4v2_g64<128>);
KVTILE_BENCH_PRESET(decode, "k4v4_g64/D128/fp8", k4v4_g64<128>);
KVTILE_BENCH_PRESET(decode, "k2v2_g128/D128/fp8", k2v2_g128<128>);
KVTILE_BENCH_PRESET(decode, "k8v8_g128/D128/fp8", k8v8_g128<128>);
KVTILE_BENCH_PRESET(decode, "k4v2_g128/D128/fp16", k4v2_g128<128, fp16_scales>);
KVTILE_BENCH_PRESET(decode, "k4v2_g128/D64/fp8", k4v2_g128<64>);
KVTILE_BENCH_PRESET(decode, "k4v2_g128/D256/fp8", k4v2_g128<256>);

// Where encode time goes (default shape k4v2, G = 128, D = 128, fp8_scales):
// full = rotation + sinkhorn + storage-aware RTN and packing.
KVTILE_BENCH_PRESET(encode, "rotate_rtn/k4v2_g128/D128/fp8", rotate_rtn<128, 128, 4, 2>);
KVTILE_BENCH_PRESET(encode, "kivi/k4v2_g128/D128/fp8", kivi<128, 128, 4, 2>);
KVTILE_BENCH_PRESET(sinkhorn_only, "k4v2_g128/D128", k4v2_g128<128>);
KVTILE_BENCH_PRESET(sinkhorn_only, "k4v2_g128/D64", k4v2_g128<64>);
KVTILE_BENCH_PRESET(sinkhorn_only, "k4v2_g128/D256", k4v2_g128<256>);

}  // namespace

BENCHMARK_MAIN();
