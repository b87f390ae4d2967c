// tests/device/block_codec_common.cuh: block_tile_codec vs the host tile_codec.
// For each codec: N random tiles (every generator kind of gpu_codec_common.cuh)
// are encoded on the host and on the device; records (whole buffers, prefilled
// with 0xAB so "left untouched" is checked too) and statuses must be equal
// byte for byte. Host records are then decoded on both sides (float, frame
// original; fp16, frame rotated; bf16, frame original) and compared bit for bit.
#pragma once

#include "gpu_codec_common.cuh"

namespace kvtest {

struct totals {
  long tiles = 0, rec_mismatch = 0, status_mismatch = 0, dec_mismatch = 0, configs = 0;
};

// MinBlocks: the block codec's MIN_BLOCKS and the kernel's __launch_bounds__
// minimum, as the prefill kernel compiles it (2: registers capped at 64 per
// thread at 512 threads, scale and code stages from shared memory).
template <class Codec, int B, class T, int MinBlocks = 1>
__global__ void __launch_bounds__(B, MinBlocks) encode_tiles(const T* in, unsigned char* rec, int* st) {
  using BC = kvtile::device::block_tile_codec<Codec, B, MinBlocks>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& ts = *reinterpret_cast<typename BC::TempStorage*>(smem);
  constexpr int E = Codec::D * Codec::G;
  const std::int64_t i = blockIdx.x;
  const kvtile::status s = BC(ts).encode(in + (2 * i) * E, Codec::D, in + (2 * i + 1) * E, Codec::D, rec + i * Codec::record_bytes);
  if (threadIdx.x == 0) st[i] = static_cast<int>(s);
}

template <class Codec, int B, class T>
__global__ void __launch_bounds__(B) decode_tiles(const unsigned char* rec, T* out, kvtile::frame f) {
  using BD = kvtile::device::block_tile_decoder<Codec, B>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& ts = *reinterpret_cast<typename BD::TempStorage*>(smem);
  constexpr int E = Codec::D * Codec::G;
  const std::int64_t i = blockIdx.x;
  BD(ts).decode(rec + i * Codec::record_bytes, out + (2 * i) * E, Codec::D, out + (2 * i + 1) * E, Codec::D, f);
}

template <class U>
std::uint32_t bits_of(U v) {
  if constexpr (std::is_same_v<U, float>) return kvtile::detail::float_bits(v);
  else return v.bits();
}

template <class Codec, class Out, int B>
long check_decode(const std::vector<unsigned char>& rec, const std::vector<int>& hst, int n, kvtile::frame f) {
  constexpr int D = Codec::D, G = Codec::G, E = D * G;
  dbuf<unsigned char> drec(rec.size());
  drec.up(rec);
  dbuf<Out> dout(static_cast<std::size_t>(2) * n * E);
  KVT_CUDA(cudaMemset(dout.p, 0, dout.n * sizeof(Out)));
  using BD = kvtile::device::block_tile_decoder<Codec, B>;
  auto kern = decode_tiles<Codec, B, Out>;
  KVT_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(typename BD::TempStorage)));
  kern<<<n, B, sizeof(typename BD::TempStorage)>>>(drec.p, dout.p, f);
  KVT_CUDA(cudaGetLastError());
  KVT_CUDA(cudaDeviceSynchronize());
  std::vector<Out> got = dout.down();
  std::atomic<long> bad{0};
  parallel_for(n, [&](int i) {
    if (!kvtile::ok(static_cast<kvtile::status>(hst[i]))) return;
    std::vector<Out> ref(2 * E);
    const kvtile::status s = Codec::decode(rec.data() + static_cast<std::size_t>(i) * Codec::record_bytes, ref.data(), D,
                                           ref.data() + E, D, f);
    if (s != kvtile::status::success) {
      bad += 1;
      return;
    }
    long b = 0;
    for (int k = 0; k < 2 * E; ++k) b += bits_of(ref[k]) != bits_of(got[static_cast<std::size_t>(2) * i * E + k]);
    bad += b;
  });
  return bad.load();
}

// BF16Out: also check the bf16 decode (one codec per file does; the decode's
// element type only changes the final conversion, and every extra output type
// is another instantiation of the decoder per codec: CI compile time).
template <class Codec, class T, int B = 512, bool BF16Out = false, int MinBlocks = 1>
void run_codec(const char* name, int n, std::uint64_t seed, totals& tot) {
  constexpr int D = Codec::D, G = Codec::G, E = D * G;
  constexpr std::size_t RB = Codec::record_bytes;
  std::vector<T> in(static_cast<std::size_t>(2) * n * E);
  const int kinds = std::is_same_v<T, float> ? num_kinds : num_kinds - 1;
  parallel_for(2 * n, [&](int t) {
    std::mt19937_64 rng(seed * 1000003u + t);
    gen_tile<T>(rng, (t / 2) % kinds, D, G, in.data() + static_cast<std::size_t>(t) * E);
  });
  // host
  std::vector<unsigned char> hrec(n * RB, 0xAB);
  std::vector<int> hst(n);
  parallel_for(n, [&](int i) {
    hst[i] = static_cast<int>(Codec::encode(in.data() + (2 * static_cast<std::size_t>(i)) * E, D,
                                            in.data() + (2 * static_cast<std::size_t>(i) + 1) * E, D,
                                            hrec.data() + i * RB));
  });
  // device
  dbuf<T> din(in.size());
  din.up(in);
  dbuf<unsigned char> drec(n * RB);
  KVT_CUDA(cudaMemset(drec.p, 0xAB, n * RB));
  dbuf<int> dst(n);
  using BC = kvtile::device::block_tile_codec<Codec, B, MinBlocks>;
  auto kern = encode_tiles<Codec, B, T, MinBlocks>;
  KVT_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(typename BC::TempStorage)));
  kern<<<n, B, sizeof(typename BC::TempStorage)>>>(din.p, drec.p, dst.p);
  KVT_CUDA(cudaGetLastError());
  KVT_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> grec = drec.down();
  std::vector<int> gst = dst.down();
  long rec_bad = 0, st_bad = 0;
  int first_bad = -1;
  for (int i = 0; i < n; ++i) {
    if (gst[i] != hst[i]) ++st_bad;
    if (std::memcmp(grec.data() + i * RB, hrec.data() + i * RB, RB) != 0) {
      ++rec_bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  if (first_bad >= 0) {
    std::size_t k = 0;
    while (grec[first_bad * RB + k] == hrec[first_bad * RB + k]) ++k;
    std::printf("  first record mismatch: tile %d (kind %s) byte %zu host %02x dev %02x\n", first_bad,
                kind_name((2 * first_bad / 2) % kinds), k, hrec[first_bad * RB + k], grec[first_bad * RB + k]);
  }
  long dec_bad = 0;
  dec_bad += check_decode<Codec, float, 256>(hrec, hst, n, kvtile::frame::original);
  dec_bad += check_decode<Codec, kvtile::half_t, 256>(hrec, hst, n, kvtile::frame::rotated);
  if constexpr (BF16Out) dec_bad += check_decode<Codec, kvtile::bfloat16_t, 256>(hrec, hst, n, kvtile::frame::original);
  int nf = 0, oor = 0;
  for (int s : hst) {
    nf += s == static_cast<int>(kvtile::status::non_finite_input);
    oor += s == static_cast<int>(kvtile::status::out_of_range);
  }
  std::printf("%-34s %-4s B=%-4d%s tiles %5d  record mismatches %ld  status mismatches %ld  decode mismatches %ld"
              "  (non_finite %d, out_of_range %d)\n",
              name, type_name<T>(), B, MinBlocks > 1 ? " x2" : "", n, rec_bad, st_bad, dec_bad, nf, oor);
  std::fflush(stdout);
  tot.tiles += n;
  tot.rec_mismatch += rec_bad;
  tot.status_mismatch += st_bad;
  tot.dec_mismatch += dec_bad;
  tot.configs += 1;
}

template <template <int, class> class Preset, int D, bool BF16Out = false>
void run_preset(const char* name, int n, std::uint64_t seed, totals& tot) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s<%d, fp8_scales>", name, D);
  run_codec<Preset<D, kvtile::fp8_scales>, kvtile::half_t, 512, BF16Out>(buf, n, seed, tot);
  std::snprintf(buf, sizeof buf, "%s<%d, fp16_scales>", name, D);
  run_codec<Preset<D, kvtile::fp16_scales>, kvtile::half_t>(buf, n, seed + 1, tot);
}

inline int parse_tiles(int argc, char** argv, int def) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) return 3;
    if (!std::strcmp(argv[i], "--tiles") && i + 1 < argc) return std::atoi(argv[i + 1]);
  }
  return def;
}

inline int report(const totals& t) {
  std::printf("TOTAL configs %ld tiles %ld record mismatches %ld status mismatches %ld decode mismatches %ld -> %s\n",
              t.configs, t.tiles, t.rec_mismatch, t.status_mismatch, t.dec_mismatch,
              (t.rec_mismatch | t.status_mismatch | t.dec_mismatch) ? "FAIL" : "PASS");
  return (t.rec_mismatch | t.status_mismatch | t.dec_mismatch) ? 1 : 0;
}

}  // namespace kvtest
