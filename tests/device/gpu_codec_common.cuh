// tests/device/gpu_codec_common.cuh: helpers shared by the device codec tests
// (block_codec_d*.cu, paged_cache.cu). Not a test itself (CMake globs *.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <kvtile/device/device.cuh>
#include <kvtile/presets.hpp>

#include "device_test.cuh"

namespace kvtest {

#define KVT_CUDA(call)                                                                              \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { KVT_CUDA(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T))); }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf&) = delete;
  void up(const std::vector<T>& h) { KVT_CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> down() const { return down(n); }
  // The first count elements (those a kernel wrote: initcheck reports copies of unwritten ones).
  std::vector<T> down(std::size_t count) const {
    std::vector<T> h(std::min(count, n));
    KVT_CUDA(cudaMemcpy(h.data(), p, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Tile generators. kind cycles over: 0 gaussian, 1 outlier channels (a few
// channels 10-100x), 2 zero tile, 3 constant rows (identical tokens, constant
// tokens), 4 tiny values (fp16 subnormals), 5 large (near fp16 max), 6 heavy
// tails, 7 gaussian with a few NaN/Inf, 8 channel offsets (every token shares
// a per-channel mean 3-30x its spread, as values with a v_proj bias), 9 (float
// input only) |x| > 2^48.
inline constexpr int num_kinds = 10;
inline const char* kind_name(int k) {
  static const char* n[] = {"gaussian", "outlier", "zero", "const", "tiny", "large", "heavy", "nonfinite", "offset", "oor"};
  return n[k];
}

template <class T>
void gen_tile(std::mt19937_64& rng, int kind, int D, int G, T* out) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(D) * G);
  const float base = std::exp(ud(rng) * 6.0f - 3.0f);
  std::vector<float> ch(D, 1.0f);
  if (kind == 1)
    for (int i = 0; i < 1 + static_cast<int>(rng() % 4); ++i) ch[rng() % D] = 10.0f + 90.0f * ud(rng);
  std::vector<float> tokvec(D);
  for (auto& t : tokvec) t = nd(rng) * base;
  const float offset_gain = 3.0f + 27.0f * ud(rng);
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < D; ++d) {
      float v = nd(rng) * base * ch[d];
      switch (kind) {
        case 2: v = 0.0f; break;
        case 3: v = (g % 3 == 0) ? tokvec[d] : (g % 3 == 1 ? tokvec[0] : static_cast<float>(rng() % 2 ? 0.0f : -0.0f)); break;
        case 4: v = nd(rng) * 3e-6f; break;
        case 5: v = std::fmax(std::fmin(nd(rng) * 20000.0f, 65000.0f), -65000.0f); break;
        case 6: v = nd(rng) / std::fmax(std::fabs(nd(rng)), 0.05f) * base; break;
        case 8: v = tokvec[d] * offset_gain + nd(rng) * base; break;
        default: break;
      }
      x[static_cast<std::size_t>(g) * D + d] = v;
    }
  if (kind == 7) {
    for (int i = 0; i < 3; ++i) x[rng() % x.size()] = NAN;
    x[rng() % x.size()] = INFINITY;
    x[rng() % x.size()] = -INFINITY;
  }
  if (kind == 9) x[rng() % x.size()] = 1e15f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      out[i] = x[i];
    else
      out[i] = T(x[i]);
  }
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, kvtile::half_t>) return "f16";
  else return "bf16";
}

}  // namespace kvtest
