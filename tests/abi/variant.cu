// tests/abi/variant.cu: one translation unit built twice with different kvtile
// tuning (ABI_VARIANT a / b names the build and picks its policy:
// abi_policy_a or abi_policy_b, dequantize_block_threads 128 / 512), into
// object files linked into one executable and into two shared libraries
// loaded by one executable (tests/abi/CMakeLists.txt). Each build exports only
// its own extern "C" entry points; kvtile's symbols stay hidden.
#include <kvtile/device/paged/dequantize_pages.cuh>
#include <kvtile/presets.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#if !defined(ABI_VARIANT)
#error "ABI_VARIANT must name the build (a or b)"
#endif
#define ABI_CAT2(x, y) x##y
#define ABI_CAT(x, y) ABI_CAT2(x, y)
#define ABI_FN(name) ABI_CAT(ABI_CAT(kvtile_abi_, ABI_VARIANT), ABI_CAT(_, name))
#define ABI_EXPORT extern "C" __attribute__((visibility("default")))

// Both builds define both policies (the same definitions: no ODR conflict);
// each uses its own. Named namespace, not an anonymous one: the launchers and
// kernels they instantiate keep external (hidden) linkage, as in a library.
namespace abi_test {
struct abi_policy_a : kvtile::device::paged_policy {
  static constexpr int dequantize_block_threads = 128;
};
struct abi_policy_b : kvtile::device::paged_policy {
  static constexpr int dequantize_block_threads = 512;
};
}  // namespace abi_test

namespace {
using Policy = abi_test::ABI_CAT(abi_policy_, ABI_VARIANT);
using Codec = kvtile::presets::k4v2_g128<128>;
using Rec = kvtile::device::paged_record_codec<Codec>;
constexpr int D = Codec::D, G = Codec::G, H = 2, P = 3;
}  // namespace

// The launcher this build instantiates (its address tells two builds apart).
ABI_EXPORT const void* ABI_FN(launcher)() {
  return reinterpret_cast<const void*>(&kvtile::device::launch_dequantize_pages<Codec, Policy>);
}

ABI_EXPORT int ABI_FN(block_threads)() { return Policy::dequantize_block_threads; }

// Dequantizes P pages x H heads encoded on the host and compares every bit with
// the host decode. Returns 0 when identical, 77 without a GPU, 1 otherwise.
ABI_EXPORT int ABI_FN(run)(unsigned seed) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 77;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::uint8_t> pages(static_cast<std::size_t>(P) * H * Codec::record_bytes);
  std::vector<kvtile::half_t> want(static_cast<std::size_t>(P) * H * G * D * 2);
  std::vector<kvtile::half_t> k(G * D), v(G * D);
  for (int p = 0; p < P; ++p)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < G * D; ++i) {
        k[i] = kvtile::half_t(nd(rng) * (i % D == 5 ? 12.0f : 1.0f));
        v[i] = kvtile::half_t(nd(rng));
      }
      std::uint8_t* rec = pages.data() + (static_cast<std::size_t>(p) * H + h) * Codec::record_bytes;
      if (!kvtile::ok(Rec::encode(k.data(), D, v.data(), D, rec))) return 1;
      kvtile::half_t* wk = want.data() + (static_cast<std::size_t>(p) * H + h) * G * D;
      kvtile::half_t* wv = wk + static_cast<std::size_t>(P) * H * G * D;
      if (Rec::decode(rec, wk, D, wv, D, kvtile::frame::rotated) != kvtile::status::success) return 1;
    }
  const std::size_t out_elems = static_cast<std::size_t>(P) * H * G * D;
  std::uint8_t* d_pages = nullptr;
  std::int32_t* d_ids = nullptr;
  kvtile::half_t *d_k = nullptr, *d_v = nullptr;
  int rc = 1;
  std::vector<std::int32_t> ids(P);
  for (int i = 0; i < P; ++i) ids[i] = P - 1 - i;  // reversed: output i is page P-1-i
  std::vector<kvtile::half_t> got_k(out_elems), got_v(out_elems);
  kvtile::paged_cache_view view;
  if (cudaMalloc(&d_pages, pages.size()) != cudaSuccess || cudaMalloc(&d_ids, P * sizeof(std::int32_t)) != cudaSuccess ||
      cudaMalloc(&d_k, out_elems * 2) != cudaSuccess || cudaMalloc(&d_v, out_elems * 2) != cudaSuccess)
    goto done;
  if (cudaMemcpy(d_pages, pages.data(), pages.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(d_ids, ids.data(), P * sizeof(std::int32_t), cudaMemcpyHostToDevice) != cudaSuccess)
    goto done;
  view.pages = d_pages;
  view.kv_heads = H;
  view.head_dim = D;
  view.tile_tokens = G;
  view.num_pages = P;
  view.record_bytes = Codec::record_bytes;
  if (kvtile::device::launch_dequantize_pages<Codec, Policy>(view, d_ids, P, d_k, d_v, kvtile::frame::rotated) !=
      kvtile::status::success)
    goto done;
  if (cudaMemcpy(got_k.data(), d_k, out_elems * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(got_v.data(), d_v, out_elems * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
    goto done;
  rc = 0;
  for (int i = 0; i < P; ++i) {
    const std::size_t o = static_cast<std::size_t>(i) * H * G * D, w = static_cast<std::size_t>(ids[i]) * H * G * D;
    if (std::memcmp(&got_k[o], &want[w], H * G * D * 2) != 0 ||
        std::memcmp(&got_v[o], &want[out_elems + w], H * G * D * 2) != 0)
      rc = 1;
  }
done:
  cudaFree(d_pages);
  cudaFree(d_ids);
  cudaFree(d_k);
  cudaFree(d_v);
  return rc;
}
