// tests/device/ring_sync.cu: the stage synchronization of decode attention's
// 16-row ring kernel in isolation (detail/pipeline.cuh warp_loop, H = 2),
// checked for results here and for hazards by compute-sanitizer's racecheck
// (CTest sanitize/racecheck/ring_sync, label sanitizer).
//
// 8 warps = 4 rings of 2 warps; ring r takes tiles r, r + 4, ... of n; warp 0
// of a ring bulk-copies a tile into one of the ring's 2 stages (full mbarrier),
// both warps read it, and the stage is refilled once both are done. Then the
// CTA merges through a __syncthreads and shared-memory scratch over the stage
// area, as write_partial does. Modes (one kernel each, so that racecheck names
// them): 0 named barriers (bar.sync per ring; n = 10: rings run 3, 3, 2, 2
// tiles), 2 named barriers with equal counts per ring (n = 8), 3 named
// barriers, unequal counts, every ring padded to ceil(n / 4) barrier phases
// before the merge (the form warp_loop uses), and, with --mbarrier, 1 an
// "empty" mbarrier the second warp arrives on and the first waits for. Every
// mode's sum must be exact (integer data). Racecheck (CUDA 13.0, H200,
// 2026-12-03) reports mode 1 (it does not take the mbarrier arrive/wait as
// ordering the reads before the refill's bulk copy) and none of 0, 2, 3; in
// the full kernel (attention --small) it reports unequal counts, so warp_loop
// pads as mode 3 does. The default run is expected racecheck-clean.
// Exit 0 pass, 1 fail, 77 no device (or not sm_90: bulk copies).
// ctest-sanitize: run
#include "gpu_codec_common.cuh"

#include <kvtile/device/attention/detail/fragments.cuh>

#include <cstdio>
#include <string>
#include <vector>

namespace {
namespace ad = kvtile::attention::detail;
constexpr int kRings = 4, kStages = 2, kFloats = 64, kWarps = 2 * kRings;

template <int Mode>
__global__ void __launch_bounds__(kWarps * 32, 1) ring_sync_kernel(const float* src, int n, float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  __shared__ __align__(128) float stage[kRings * kStages * kFloats];
  __shared__ __align__(8) std::uint64_t full[kRings * kStages], empty[kRings * kStages];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ring = warp / 2, sub = warp % 2;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kRings * kStages; ++i) {
      ad::mbar_init(full + i, 1);
      ad::mbar_init(empty + i, 1);
    }
    ad::mbar_init_fence();
  }
  __syncthreads();
  float* my = stage + ring * kStages * kFloats;
  auto issue = [&](int j, int s) {
    ad::mbar_expect_tx(full + ring * kStages + s, kFloats * 4);
    ad::bulk_copy_g2s(my + s * kFloats, src + j * kFloats, kFloats * 4, full + ring * kStages + s);
  };
  if (sub == 0 && lane == 0)
    for (int s = 0; s < kStages; ++s)
      if (ring + s * kRings < n) issue(ring + s * kRings, s);
  float acc = 0.0f;
  std::uint32_t parity = 0, eparity = 0;
  int phases = 0;
  for (int k = 0;; ++k) {
    const int j = ring + k * kRings;
    if (j >= n) break;
    const int s = k % kStages;
    ad::mbar_wait(full + ring * kStages + s, (parity >> s) & 1u);
    parity ^= 1u << s;
    acc += my[s * kFloats + lane + 32 * sub];
    __syncwarp();
    const int jn = j + kStages * kRings;
    if (jn >= n) continue;
    if constexpr (Mode == 1) {
      if (sub != 0) {
        if (lane == 0) ad::mbar_arrive(empty + ring * kStages + s);
        continue;
      }
      if (lane == 0) ad::mbar_wait(empty + ring * kStages + s, (eparity >> s) & 1u);
      eparity ^= 1u << s;
    } else {
      ad::named_barrier_sync(1 + ring, 64);
      ++phases;
      if (sub != 0) continue;
    }
    if (lane == 0) {
      ad::fence_proxy_async();
      issue(jn, s);
    }
  }
  if constexpr (Mode == 3) {  // every ring to the same count: the loop's iterations of ring 0, a bound on any ring's
    const int most = (n + kRings - 1) / kRings;
    for (; phases < most; ++phases) ad::named_barrier_sync(1 + ring, 64);
  }
  __syncthreads();  // every warp is done with its stages
  stage[warp * 32 + lane] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += stage[w * 32 + threadIdx.x];
    out[threadIdx.x] = sum;
  }
#endif
}

template <int Mode>
int run(int n, const char* what) {
  std::vector<float> h(static_cast<std::size_t>(n) * kFloats);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((i * 7) % 31);
  kvtest::dbuf<float> src(h.size()), out(32);
  src.up(h);
  ring_sync_kernel<Mode><<<1, kWarps * 32>>>(src.p, n, out.p);
  KVT_CUDA(cudaGetLastError());
  KVT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = out.down();
  int bad = 0;
  for (int l = 0; l < 32; ++l) {
    float want = 0.0f;
    for (int j = 0; j < n; ++j) want += h[j * kFloats + l] + h[j * kFloats + l + 32];
    bad += got[l] != want;
  }
  std::printf("  %s: mode %d, %d tiles: %s\n", bad ? "FAIL" : "ok  ", Mode, n, what);
  return bad ? 1 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  const bool mbarrier = argc > 1 && std::string(argv[1]) == "--mbarrier";
  if (int r = kvtest::require_device()) return r;
  cudaDeviceProp prop;
  KVT_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) {
    std::printf("SKIPPED: bulk copies need compute capability 9.0 (this GPU: %d.%d)\n", prop.major, prop.minor);
    return 77;
  }
  int fail = 0;
  fail += run<0>(10, "named barrier per ring, unequal phase counts");
  if (mbarrier) fail += run<1>(10, "empty mbarrier per stage, unequal counts");
  fail += run<2>(8, "named barrier per ring, equal phase counts");
  fail += run<3>(10, "named barrier per ring, padded to equal phase counts");
  std::printf("ring_sync: %d failures -> %s\n", fail, fail ? "FAIL" : "PASS");
  return fail ? 1 : 0;
}
