// tools/kvtile-eval/cuda/device_codec_kernels.cuh: the kernels behind
// device_codec.hpp (included by device_codec_d{64,128,256}.cu, one head_dim each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda_runtime.h>

#include <kvtile/kvtile.hpp>
#include <kvtile/device/block/block_tile_codec.cuh>

namespace kvtile_eval::cuda {

constexpr int block_threads = 512;

// The codecs kvtile-eval measures (methods.hpp all_methods()): every kvarn
// preset in both packings, kivi and rotate_rtn at G = 128 with fp8 scales.
template <class Codec>
constexpr bool evaluated() {
  using C = typename Codec::config;
  constexpr int D = C::head_dim, G = C::tile_tokens, KB = C::key_bits, VB = C::value_bits;
  using P = typename Codec::packer;
  return std::is_same_v<Codec, kvtile::presets::kvarn<D, G, KB, VB, P>> ||
         std::is_same_v<Codec, kvtile::presets::kivi<D, 128, KB, VB, kvtile::fp8_scales>> ||
         std::is_same_v<Codec, kvtile::presets::rotate_rtn<D, 128, KB, VB, kvtile::fp8_scales>>;
}

struct launch_args {
  const float* k = nullptr;  // head-major [heads][tokens][D]
  const float* v = nullptr;
  float* kh = nullptr;  // decoded, same layout
  float* vh = nullptr;
  unsigned char* rec = nullptr;  // items * record_bytes
  int* st = nullptr;             // items
  int heads = 0, tokens = 0;
};

// One block per item = tile * heads + head: encode, then (status ok) decode.
template <class Codec, int B>
__global__ void __launch_bounds__(B) roundtrip_kernel(launch_args a) {
  using BC = kvtile::device::block_tile_codec<Codec, B>;
  constexpr int D = Codec::D, G = Codec::G;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& ts = *reinterpret_cast<typename BC::TempStorage*>(smem);
  const std::size_t item = blockIdx.x;
  const std::size_t tile = item / static_cast<std::size_t>(a.heads), head = item % static_cast<std::size_t>(a.heads);
  const std::size_t off = (head * static_cast<std::size_t>(a.tokens) + tile * G) * D;
  unsigned char* rec = a.rec + item * Codec::record_bytes;
  BC bc(ts);
  const kvtile::status s = bc.encode(a.k + off, D, a.v + off, D, rec);
  if (kvtile::ok(s)) bc.decode(rec, a.kh + off, D, a.vh + off, D, kvtile::frame::original);
  if (threadIdx.x == 0) a.st[item] = static_cast<int>(s);
}

// Result of launch_for: supported = a kernel exists for p (and p's head_dim is
// this TU's); record_bytes of the codec.
struct launch_result {
  bool supported = false;
  std::size_t record_bytes = 0;
  cudaError_t error = cudaSuccess;
};

// Query (a.rec == nullptr: only fill supported / record_bytes) or launch (on
// the default stream; the caller synchronizes) p's codec for head_dim D.
template <int D>
launch_result launch_for(const kvtile::codec_params& p, const launch_args& a, std::size_t items) {
  launch_result r;
  if (p.head_dim != D) return r;
  (void)kvtile::dispatch(p, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    if constexpr (Codec::D == D && evaluated<Codec>()) {
      r.supported = true;
      r.record_bytes = Codec::record_bytes;
      if (!a.rec || items == 0) return;
      using BC = kvtile::device::block_tile_codec<Codec, block_threads>;
      auto kern = roundtrip_kernel<Codec, block_threads>;
      const std::size_t smem = sizeof(typename BC::TempStorage);
      r.error = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (r.error != cudaSuccess) return;
      kern<<<static_cast<unsigned>(items), block_threads, smem>>>(a);
      r.error = cudaGetLastError();
    }
  });
  return r;
}

launch_result launch_d64(const kvtile::codec_params& p, const launch_args& a, std::size_t items);
launch_result launch_d128(const kvtile::codec_params& p, const launch_args& a, std::size_t items);
launch_result launch_d256(const kvtile::codec_params& p, const launch_args& a, std::size_t items);

}  // namespace kvtile_eval::cuda
