// tests/device/unsupported_arch.cu: a binary without code for the GPU it runs
// on. tests/CMakeLists.txt builds this file for sm_86 machine code ONLY (no
// PTX), so on any GPU that cannot run sm_86
// SASS (sm_80, sm_90, sm_100, ...) every paged launcher must return
// unsupported_arch (with the CUDA error behind it) instead of cuda_error or a
// failure later, and the CUDA context must stay usable. On a GPU that runs
// sm_86 code (compute capability 8.6 to 8.9) the same launches must succeed.
// In a compute_80 PTX-only build (KVTILE_CUDA_ARCHITECTURES=80-virtual, CMake
// preset gpu-jit80) it is built from that PTX with -DKVTILE_TEST_PTX80 (the
// driver JIT-compiles it for the GPU), and the paged launchers
// must succeed wherever compute capability >= 8.0. Decode attention follows
// the same rule (its sm_80 / sm_86 policies have bodies in both images) and
// leaves the context usable either way.
// Exit 0 pass, 1 fail, 77 no device.
// ctest-sanitize: off (its launches fail on purpose where the binary holds no code for the GPU)
#include "gpu_codec_common.cuh"

#include <kvtile/device/attention/paged_decode.cuh>

namespace {
namespace kd = kvtile::device;
using kvtile::half_t;
using kvtile::status;
using Codec = kvtile::presets::k4v2_g128<128>;
long g_fail = 0;
void expect(bool c, const char* what) {
  std::printf("  %s: %s\n", c ? "ok  " : "FAIL", what);
  if (!c) ++g_fail;
}
}  // namespace

int main() {
  if (int r = kvtest::require_device()) return r;
  kd::device_caps caps;
  if (kd::query_current_device(caps) != status::success) {
    std::printf("FAIL: query_current_device\n");
    return 1;
  }
#ifdef KVTILE_TEST_PTX80
  const bool runs_sm86 = caps.cc >= 80;  // the compute_80 PTX runs there
  const char* holds = "compute_80 PTX only";
#else
  const bool runs_sm86 = caps.cc >= 86 && caps.cc < 90;
  const char* holds = "sm_86 SASS only";
#endif
  const status want = runs_sm86 ? status::success : status::unsupported_arch;
  std::printf("device sm_%d; binary holds %s: expecting %s from the paged launchers\n", caps.cc, holds,
              kvtile::to_string(want));
  constexpr int D = Codec::D, G = Codec::G;
  kvtest::dbuf<unsigned char> pages(2 * Codec::record_bytes);
  kvtest::dbuf<std::int32_t> table(1), lens(1), cu(2), ids(1);
  kvtest::dbuf<half_t> tk(G * D), tv(G * D), tok(G * D), out(G * D + 8);
  table.up({0});
  lens.up({G});
  cu.up({0, G});
  ids.up({0});
  KVT_CUDA(cudaMemset(tok.p, 0, G * D * sizeof(half_t)));
  kvtile::paged_cache_view v{};
  v.pages = pages.p;
  v.page_table = table.p;
  v.seq_lens = lens.p;
  v.tail_k = tk.p;
  v.tail_v = tv.p;
  v.num_seqs = 1;
  v.kv_heads = 1;
  v.head_dim = D;
  v.tile_tokens = G;
  v.max_pages_per_seq = 1;
  v.num_pages = 2;
  v.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
  char buf[160];
  auto check = [&](const char* name, kd::launch_result r) {
    std::snprintf(buf, sizeof buf, "%s returns %s (%s)", name, kvtile::to_string(r.code),
                  r.error == cudaSuccess ? "no CUDA error" : cudaGetErrorName(r.error));
    expect(r == want && (runs_sm86 || r.error != cudaSuccess), buf);
    expect(cudaPeekAtLastError() == cudaSuccess, "  ... and leaves no error behind");
  };
  check("launch_prefill", kd::launch_prefill<Codec, half_t>(v, tok.p, tok.p, cu.p, G));
  check("launch_append", kd::launch_append<Codec, half_t>(v, tok.p, tok.p));
  check("launch_dequantize_pages (original frame)",
        kd::launch_dequantize_pages<Codec>(v, ids.p, 1, out.p, out.p, kvtile::frame::original));
  check("launch_dequantize_pages (rotated frame)",
        kd::launch_dequantize_pages<Codec>(v, ids.p, 1, out.p, out.p, kvtile::frame::rotated));
  check("launch_dequantize_pages (generic kernel)", kd::launch_dequantize_pages<Codec>(v, ids.p, 1, out.p + 1, out.p));
  // Decode attention: as the paged launchers (a policy with a body in the image, or unsupported_arch).
  {
    kvtest::dbuf<half_t> q(D), o(D);
    kvtile::attention::decode_args<half_t> a;
    a.q = q.p;
    a.out = o.p;
    a.q_heads = 1;
    a.softmax_scale = 0.125f;
    a.workspace_bytes = kvtile::attention::workspace_bytes<Codec>(v, a.q_heads);
    kvtest::dbuf<unsigned char> ws(a.workspace_bytes);
    a.workspace = ws.p;
    const status s = kvtile::attention::paged_decode<Codec>(v, a);
    std::snprintf(buf, sizeof buf, "paged_decode returns %s", kvtile::to_string(s));
    expect(s == want, buf);
    if (s == status::success) expect(cudaDeviceSynchronize() == cudaSuccess, "  ... and the decode ran");
    expect(cudaPeekAtLastError() == cudaSuccess, "  ... and leaves no error behind");
  }
  // The context is intact.
  int* p = nullptr;
  const bool alive = cudaMalloc(&p, 64) == cudaSuccess && cudaMemset(p, 1, 64) == cudaSuccess &&
                     cudaDeviceSynchronize() == cudaSuccess && cudaFree(p) == cudaSuccess;
  expect(alive, "the CUDA context is still usable");
  std::printf("unsupported_arch: %ld failures -> %s\n", g_fail, g_fail ? "FAIL" : "PASS");
  return g_fail ? 1 : 0;
}
