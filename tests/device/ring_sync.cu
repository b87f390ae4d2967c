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
// them): 0 (with --unequal) named barriers (bar.sync per ring; n = 10: rings
// run 3, 3, 2, 2 tiles), 2 named barriers with equal counts per ring (n = 8),
// 3 named barriers, unequal counts, every ring padded to ceil(n / 4) barrier
// phases before the merge (the form warp_loop uses), and, with --mbarrier, 1
// an "empty" mbarrier the second warp arrives on and the first waits for.
// Modes 4 and 5 run two chunks per CTA (the planned kernels' form), each from
// parity 0: 4 (with --reinit) invalidates and initializes the barriers again
// between them; 5 (pipeline.cuh's init_barriers) pads as mode 3 and, at the second
// chunk's start, gives each barrier whose count of completed phases is odd an
// empty phase (mbarrier arrive, no copy) that thread 0 waits for. Every mode's
// sum must be exact (integer data). Racecheck (CUDA 13.0, H200, 2026-12-03)
// reports mode 1 (it does not take the mbarrier arrive/wait as ordering the
// reads before the refill's bulk copy) and none of 0, 2, 3; on 2026-12-07
// (H200) it reported mode 0 in this file's two-chunk form (a stage read
// against the merge's scratch write), as it reports unequal counts in the full
// kernel, which is why warp_loop pads as mode 3 does. Racecheck (H100,
// 2026-12-07) reports mode 4: the bulk copies of the two chunks into a stage
// (2 warnings), as it did the kernels' multi-chunk cases with an inval + init
// between chunks. The default run (modes 2, 3, 5) is expected
// racecheck-clean.
// Exit 0 pass, 1 fail, 77 no device (or not sm_90: bulk copies).
// ctest-sanitize: run
#include "gpu_codec_common.cuh"

#include <kvtile/device/attention/detail/fragments.cuh>
#include <kvtile/device/attention/detail/pipeline.cuh>

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
  constexpr int kChunks = Mode >= 4 ? 2 : 1;  // modes 4, 5: two chunks per CTA (the planned kernels' form)
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
  float* my = stage + ring * kStages * kFloats;
  float total = 0.0f;
  std::uint32_t parity = 0, eparity = 0;
  for (int c = 0; c < kChunks; ++c) {
    const float* csrc = src + static_cast<std::size_t>(c) * n * kFloats;
    if (Mode == 4 && c > 0 && threadIdx.x == 0) {  // barriers invalidated and initialized again per chunk
      for (int i = 0; i < kRings * kStages; ++i) {
        asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(ad::smem_addr(full + i)) : "memory");
        ad::mbar_init(full + i, 1);
      }
      ad::mbar_init_fence();
    }
    // the kernels' own reset: an odd phase count gets an empty phase (no tickets: Pool = 0)
    if (Mode == 5 && c > 0) ad::init_barriers<kRings * kStages, 0, true>(full, nullptr, false);
    parity = 0;  // modes 4, 5: each chunk starts at parity 0 (inval + init, or an even phase count)
    __syncthreads();
    auto issue = [&](int j, int s) {
      ad::mbar_expect_tx(full + ring * kStages + s, kFloats * 4);
      ad::bulk_copy_g2s(my + s * kFloats, csrc + j * kFloats, kFloats * 4, full + ring * kStages + s);
    };
    if (sub == 0 && lane == 0)
      for (int s = 0; s < kStages; ++s)
        if (ring + s * kRings < n) issue(ring + s * kRings, s);
    float acc = 0.0f;
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
    if constexpr (Mode >= 3) {  // every ring to the same count: the loop's iterations of ring 0, a bound on any ring's
      const int most = (n + kRings - 1) / kRings;
      for (; phases < most; ++phases) ad::named_barrier_sync(1 + ring, 64);
    }
    __syncthreads();  // every warp is done with its stages
    stage[warp * 32 + lane] = acc;
    __syncthreads();
    if (threadIdx.x < 32)
      for (int w = 0; w < kWarps; ++w) total += stage[w * 32 + threadIdx.x];
    ad::fence_proxy_async();  // the stage area was scratch before the next chunk's bulk copies
    __syncthreads();
  }
  if (threadIdx.x < 32) out[threadIdx.x] = total;
#endif
}

template <int Mode>
int run(int n, const char* what) {
  const int chunks = Mode >= 4 ? 2 : 1;
  std::vector<float> h(static_cast<std::size_t>(chunks) * n * kFloats);
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
    for (int j = 0; j < chunks * n; ++j) want += h[j * kFloats + l] + h[j * kFloats + l + 32];
    bad += got[l] != want;
  }
  std::printf("  %s: mode %d, %d tiles: %s\n", bad ? "FAIL" : "ok  ", Mode, n, what);
  return bad ? 1 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  bool unequal = false, mbarrier = false, reinit = false;
  for (int i = 1; i < argc; ++i) {
    unequal |= std::string(argv[i]) == "--unequal";
    mbarrier |= std::string(argv[i]) == "--mbarrier";
    reinit |= std::string(argv[i]) == "--reinit";
  }
  if (int r = kvtest::require_device()) return r;
  cudaDeviceProp prop;
  KVT_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) {
    std::printf("SKIPPED: bulk copies need compute capability 9.0 (this GPU: %d.%d)\n", prop.major, prop.minor);
    return 77;
  }
  int fail = 0;
  if (unequal) fail += run<0>(10, "named barrier per ring, unequal phase counts");
  if (mbarrier) fail += run<1>(10, "empty mbarrier per stage, unequal counts");
  fail += run<2>(8, "named barrier per ring, equal phase counts");
  fail += run<3>(10, "named barrier per ring, padded to equal phase counts");
  if (reinit) fail += run<4>(10, "two chunks, barriers invalidated and initialized again between them");
  fail += run<5>(10, "two chunks, an odd phase count completed by an empty phase between them");
  std::printf("ring_sync: %d failures -> %s\n", fail, fail ? "FAIL" : "PASS");
  return fail ? 1 : 0;
}
