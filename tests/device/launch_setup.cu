// tests/device/launch_setup.cu: kvtile/device/detail/launch.cuh and the paged
// launchers' use of it.
//   - a launch error the caller left in the thread's last-error slot is not
//     reported by launch_append / launch_prefill / launch_dequantize_pages
//     (whether the slot still holds it afterwards is the CUDA runtime's
//     business: printed, not checked);
//   - a failed launch returns cuda_error WITH its cudaError_t and leaves the
//     last-error slot clean;
//   - compute capability and opt-in shared memory checks return
//     unsupported_arch before anything is launched;
//   - eight host threads racing on the first launch of a kernel that needs the
//     dynamic shared memory attribute all succeed (per-device, thread-safe setup);
//   - PDL as an explicit launch option;
//   - reset_launch_setup() after cudaDeviceReset.
// Exit 0 pass, 1 fail, 77 no device.
// ctest-sanitize: off (provokes CUDA API errors on purpose)
#include "gpu_codec_common.cuh"

namespace {

namespace kd = kvtile::device;
using kvtile::half_t;
using kvtile::status;
long g_fail = 0;

void expect(bool c, const char* what) {
  std::printf("  %s: %s\n", c ? "ok  " : "FAIL", what);
  if (!c) ++g_fail;
}

__global__ void noop_kernel() {}

// out[blockIdx.x] = sum over the block's dynamic shared memory of (i + tag).
template <int Tag>
__global__ void smem_kernel(int* out, int n) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i + Tag;
  __syncthreads();
  if (threadIdx.x == 0) {
    long s = 0;
    for (int i = 0; i < n; ++i) s += buf[i];
    out[blockIdx.x] = static_cast<int>(s);
  }
}

long expected_sum(int n, int tag) { return static_cast<long>(n) * (n - 1) / 2 + static_cast<long>(n) * tag; }

// A small paged cache with one complete tile per sequence (device memory).
struct small_cache {
  using Codec = kvtile::presets::k4v2_g64<64>;
  static constexpr int D = Codec::D, G = Codec::G, S = 2, H = 2;
  kvtest::dbuf<unsigned char> pages{static_cast<std::size_t>(S) * H * Codec::record_bytes};
  kvtest::dbuf<std::int32_t> table{S}, lens{S}, cu{S + 1}, ids{S};
  kvtest::dbuf<half_t> tk{static_cast<std::size_t>(S) * H * G * D}, tv{tk.n}, tok{static_cast<std::size_t>(S) * G * H * D},
      outk{static_cast<std::size_t>(S) * H * G * D}, outv{outk.n};
  kvtile::paged_cache_view view{};
  small_cache() {
    table.up({0, 1});
    lens.up({G, G});
    cu.up({0, G, 2 * G});
    ids.up({1, 0});
    std::vector<half_t> t(tok.n);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (auto& x : t) x = half_t(nd(rng));
    tok.up(t);
    view.pages = pages.p;
    view.page_table = table.p;
    view.seq_lens = lens.p;
    view.tail_k = tk.p;
    view.tail_v = tv.p;
    view.num_seqs = S;
    view.kv_heads = H;
    view.head_dim = D;
    view.tile_tokens = G;
    view.max_pages_per_seq = 1;
    view.num_pages = S;
    view.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
  }
  status prefill() { return kd::launch_prefill<Codec, half_t>(view, tok.p, tok.p, cu.p, G); }
  status append() { return kd::launch_append<Codec, half_t>(view, tok.p, tok.p); }
  status dequantize() { return kd::launch_dequantize_pages<Codec>(view, ids.p, S, outk.p, outv.p); }
};

}  // namespace

int main() {
  if (int r = kvtest::require_device()) return r;
  kd::device_caps caps;
  expect(kd::query_current_device(caps) == status::success, "query_current_device succeeds");
  cudaDeviceProp prop{};
  KVT_CUDA(cudaGetDeviceProperties(&prop, caps.ordinal));
  expect(caps.cc == prop.major * 10 + prop.minor && caps.sm_count == prop.multiProcessorCount &&
             caps.smem_optin == prop.sharedMemPerBlockOptin,
         "device_caps match cudaGetDeviceProperties");
  std::printf("device %d: %s, sm_%d, %d SMs, opt-in shared memory %zu bytes\n", caps.ordinal, prop.name, caps.cc,
              caps.sm_count, caps.smem_optin);

  // 1. Someone else's pending launch error is not ours: an invalid launch
  // configuration (2048 threads) leaves an error in the thread's last-error
  // slot; every paged launcher must still succeed.
  noop_kernel<<<1, 2048>>>();
  const cudaError_t theirs = cudaGetLastError();  // what such a launch leaves behind
  expect(theirs != cudaSuccess, "a <<<1, 2048>>> launch fails and leaves an error in the last-error slot");
  {
    small_cache c;
    struct step {
      const char* name;
      status (small_cache::*fn)();
    };
    for (step st : {step{"launch_prefill", &small_cache::prefill}, step{"launch_append", &small_cache::append},
                    step{"launch_dequantize_pages", &small_cache::dequantize}}) {
      noop_kernel<<<1, 2048>>>();
      const status s = (c.*st.fn)();
      const cudaError_t left = cudaGetLastError();
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s succeeds after an unrelated failed launch (%s; the slot holds %s afterwards)",
                    st.name, kvtile::to_string(s), cudaGetErrorName(left));
      expect(s == status::success, buf);
    }
    KVT_CUDA(cudaDeviceSynchronize());
  }

  // 2. A failed launch reports its own error and clears it.
  {
    kvtest::dbuf<int> out(1);
    const kd::launch_result r =
        kd::detail::launch_kernel<smem_kernel<0>>(dim3(1), dim3(2048), 0, kd::launch_options{}, out.p, 1);
    char buf[160];
    std::snprintf(buf, sizeof buf, "launch_kernel with 2048 threads: cuda_error carrying the launch's error (%s)",
                  cudaGetErrorName(r.error));
    expect(r == status::cuda_error && r.error != cudaSuccess, buf);
    expect(cudaGetLastError() == cudaSuccess, "... and the last-error slot is clean afterwards");
    expect(std::strlen(r.cuda_message()) > 0, "... with a CUDA message");
  }

  // 3. Architecture and shared-memory checks, before any launch.
  {
    const kd::launch_result r = kd::detail::prepare_kernel<smem_kernel<1>>(0, caps.cc + 1);
    expect(r == status::unsupported_arch, "prepare_kernel with min_cc above the device: unsupported_arch");
    const kd::launch_result big = kd::detail::prepare_kernel<smem_kernel<1>>(caps.smem_optin + 1);
    expect(big == status::unsupported_arch, "prepare_kernel asking for more than the opt-in shared memory: unsupported_arch");
    cudaFuncAttributes fa{};
    KVT_CUDA(cudaFuncGetAttributes(&fa, smem_kernel<1>));
    const std::size_t most = caps.smem_optin - fa.sharedSizeBytes;
    const int n = static_cast<int>(most / sizeof(int));
    kvtest::dbuf<int> out(4);
    kd::launch_result ok = kd::detail::prepare_kernel<smem_kernel<1>>(most);
    if (ok.ok()) ok = kd::detail::launch_kernel<smem_kernel<1>>(dim3(4), dim3(256), most, kd::launch_options{}, out.p, n);
    KVT_CUDA(cudaDeviceSynchronize());
    const std::vector<int> o = out.down();
    bool right = ok.ok();
    for (int v : o) right &= v == static_cast<int>(expected_sum(n, 1));
    expect(right, "a launch with all of the opt-in shared memory succeeds after prepare_kernel");
  }

  // 4. Eight threads race on the first use of a kernel needing > 48 KB.
  {
    constexpr int T = 8;
    const std::size_t smem = 96 * 1024 <= caps.smem_optin - 1024 ? 96 * 1024 : caps.smem_optin / 2;
    const int n = static_cast<int>(smem / sizeof(int));
    std::vector<int> results(T * 2, 0);
    std::vector<kd::launch_result> rs(T);
    std::atomic<int> ready{0};
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t)
      th.emplace_back([&, t] {
        KVT_CUDA(cudaSetDevice(caps.ordinal));
        cudaStream_t s;
        KVT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        int* out = nullptr;
        KVT_CUDA(cudaMalloc(&out, 2 * sizeof(int)));
        ready.fetch_add(1);
        while (ready.load() < T) std::this_thread::yield();
        kd::launch_result r = kd::detail::prepare_kernel<smem_kernel<2>>(smem);
        if (r.ok()) r = kd::detail::launch_kernel<smem_kernel<2>>(dim3(2), dim3(128), smem, kd::launch_options{s}, out, n);
        rs[t] = r;
        KVT_CUDA(cudaStreamSynchronize(s));
        KVT_CUDA(cudaMemcpy(&results[2 * t], out, 2 * sizeof(int), cudaMemcpyDeviceToHost));
        KVT_CUDA(cudaFree(out));
        KVT_CUDA(cudaStreamDestroy(s));
      });
    for (auto& x : th) x.join();
    bool all = true;
    for (int t = 0; t < T; ++t) all &= rs[t].ok() && results[2 * t] == static_cast<int>(expected_sum(n, 2)) &&
                                       results[2 * t + 1] == results[2 * t];
    expect(all, "8 threads racing on the first launch of a 96 KB-shared-memory kernel all succeed");
  }

  // 5. PDL as an explicit option: two dependent launches in one stream.
  {
    kvtest::dbuf<int> out(2);
    const int n = 1024;
    kd::launch_result a = kd::detail::launch_kernel<smem_kernel<3>>(dim3(2), dim3(128), n * sizeof(int),
                                                                    kd::launch_options{nullptr, true}, out.p, n);
    kd::launch_result b = kd::detail::launch_kernel<smem_kernel<3>>(dim3(2), dim3(128), n * sizeof(int),
                                                                    kd::launch_options{nullptr, true}, out.p, n);
    KVT_CUDA(cudaDeviceSynchronize());
    const std::vector<int> o = out.down();
    expect(a.ok() && b.ok() && o[0] == static_cast<int>(expected_sum(n, 3)), "launches with pdl = true succeed");
  }

  // 6. After cudaDeviceReset, reset_launch_setup() makes the next launch set
  // the attribute again.
  {
    const std::size_t smem = 64 * 1024;
    const int n = static_cast<int>(smem / sizeof(int));
    auto run = [&]() {
      int* out = nullptr;
      KVT_CUDA(cudaMalloc(&out, sizeof(int)));
      kd::launch_result r = kd::detail::prepare_kernel<smem_kernel<4>>(smem);
      if (r.ok()) r = kd::detail::launch_kernel<smem_kernel<4>>(dim3(1), dim3(128), smem, kd::launch_options{}, out, n);
      int v = 0;
      if (r.ok()) KVT_CUDA(cudaMemcpy(&v, out, sizeof(int), cudaMemcpyDeviceToHost));
      cudaFree(out);
      return r.ok() && v == static_cast<int>(expected_sum(n, 4));
    };
    const bool before = run();
    KVT_CUDA(cudaDeviceReset());
    kd::reset_launch_setup();
    const bool after = run();
    expect(before && after, "a 64 KB-shared-memory launch works before and after cudaDeviceReset + reset_launch_setup");
  }

  std::printf("launch_setup: %ld failures -> %s\n", g_fail, g_fail ? "FAIL" : "PASS");
  return g_fail ? 1 : 0;
}
