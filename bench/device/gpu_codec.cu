// bench/device/gpu_codec.cu: throughput of the device codec and paged kernels.
//
// One run measures, with CUDA events, the L2 flushed before every iteration by
// writing a buffer of 2x the L2 size, median of the iterations:
//   copy        uint4 device-to-device copy of the prefill input (ceiling: read+write bytes / time)
//   prefill     launch_prefill of 64K tokens x 8 KV heads x D=128, K and V fp16
//               (16 sequences x 4096 tokens), k4v2/k4v4/k2v2_g128 and, to show
//               where the time goes, k4v2 with Sinkhorn 0 / 4 / 8 iterations (the presets: 2) and
//               without normalization (rotate_rtn)
//   append      launch_append, batch 1..256 x 8 heads, no tile filling and every tile filling,
//               at the default block size (paged_policy::append_block_threads, 512) and at 256 and
//               1024 threads
//   decode      launch_dequantize_pages of all 4096 x 8 pages to fp16, rotated and original frames
// Reports GB/s of fp16 data (prefill: fp16 bytes read; decode: fp16 bytes
// written) and the ratio to the copy ceiling. Writes <dir>/<stem>.json and .md.
// Every prefill row also checks sampled records (32 tiles spread over
// sequences, tiles and heads) byte for byte against the host codec's encode of
// the same tokens (host_rotate_to_half + paged_record_codec, the paged cache's
// host model); a mismatch fails the run (exit 1). Each prefill row prints the
// kernel's registers, local memory and resident blocks per SM. Rows marked
// "(MIN_BLOCKS 1)" run launch_prefill with a policy of prefill_min_blocks = 1
// (one 512-thread block per SM, registers uncapped); the others the default,
// paged_policy::prefill_min_blocks (2).
// Usage: gpu_codec [--out DIR] [--stem NAME] [--iters N] [--command "how it was run"] [--decode-only | --encode-only]
//   (--help: the options)
//   --decode-only: copy ceiling and decode (prefill encodes once, untimed)
//   --encode-only: copy ceiling and the prefill rows (no decode, no append)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <kvtile/device/device.cuh>
#include <kvtile/presets.hpp>

#include "bench_io.hpp"

#define CK(call)                                                                                    \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "CUDA error %s: %s\n", #call, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {
using kvtile::half_t;

// A launcher's status (host-side check, outside the timed GPU work).
void check(kvtile::status s) {
  if (s != kvtile::status::success) {
    std::fprintf(stderr, "launch failed: status %d\n", static_cast<int>(s));
    std::exit(1);
  }
}
constexpr int D = 128, G = 128, H = 8, SEQS = 16, TOK = 4096;  // 64K tokens
int g_iters = 15;
char* g_flush = nullptr;
std::size_t g_flush_bytes = 0;

__global__ void copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    b[i] = a[i];
}

template <class F>
double median_us(F launch, int iters = -1) {
  if (iters < 0) iters = g_iters;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  launch();  // warm-up
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaMemsetAsync(g_flush, i & 0xff, g_flush_bytes));
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

struct row {
  std::string name, kind;
  double us, gbps, ratio;
  std::string note;
};
std::vector<row> g_rows;
double g_copy_gbps = 0;

struct cache {
  kvtile::paged_cache_view v{};
  unsigned char* pages = nullptr;
  std::int32_t *table = nullptr, *lens = nullptr;
  half_t *tk = nullptr, *tv = nullptr;
  void make(int seqs, int maxp, std::int64_t rb) {
    const std::int64_t np = static_cast<std::int64_t>(seqs) * maxp;
    CK(cudaMalloc(&pages, np * H * rb));
    CK(cudaMalloc(&table, np * 4));
    CK(cudaMalloc(&lens, seqs * 4));
    CK(cudaMalloc(&tk, static_cast<std::size_t>(seqs) * H * G * D * 2));
    CK(cudaMalloc(&tv, static_cast<std::size_t>(seqs) * H * G * D * 2));
    CK(cudaMemset(tk, 0, static_cast<std::size_t>(seqs) * H * G * D * 2));
    CK(cudaMemset(tv, 0, static_cast<std::size_t>(seqs) * H * G * D * 2));
    std::vector<std::int32_t> t(np);
    for (std::int64_t i = 0; i < np; ++i) t[i] = static_cast<std::int32_t>((i * 7919) % np);  // permuted
    CK(cudaMemcpy(table, t.data(), np * 4, cudaMemcpyHostToDevice));
    v.pages = pages;
    v.page_table = table;
    v.seq_lens = lens;
    v.tail_k = tk;
    v.tail_v = tv;
    v.num_seqs = seqs;
    v.kv_heads = H;
    v.head_dim = D;
    v.tile_tokens = G;
    v.max_pages_per_seq = maxp;
    v.num_pages = static_cast<std::int32_t>(np);
    v.record_bytes = rb;
  }
  void set_lens(const std::vector<std::int32_t>& l) { CK(cudaMemcpy(lens, l.data(), l.size() * 4, cudaMemcpyHostToDevice)); }
  ~cache() {
    cudaFree(pages);
    cudaFree(table);
    cudaFree(lens);
    cudaFree(tk);
    cudaFree(tv);
  }
};

half_t *g_k = nullptr, *g_v = nullptr;
std::vector<half_t> g_hk, g_hv;  // host copies of the inputs (identity check)
bool g_decode_only = false;  // --decode-only: copy ceiling and decode to fp16 (prefill encodes once, untimed)
bool g_encode_only = false;  // --encode-only: copy ceiling and prefill rows only
long g_identity_fail = 0, g_identity_checked = 0;
std::int32_t* g_cu = nullptr;
constexpr std::size_t kTokElems = static_cast<std::size_t>(SEQS) * TOK * H * D;

// Sampled records of the prefill vs the host codec on the same tokens.
template <class Codec>
void check_identity(const char* name, const kvtile::paged_cache_view& v) {
  using PC = kvtile::device::paged_record_codec<Codec>;
  constexpr std::size_t RB = Codec::record_bytes;
  constexpr int samples = 32, tiles = TOK / G;
  std::vector<std::int32_t> table(static_cast<std::size_t>(SEQS) * tiles);
  CK(cudaMemcpy(table.data(), v.page_table, table.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<half_t> tk(G * D), tv(G * D);
  std::vector<unsigned char> host(RB), dev(RB);
  int bad = 0;
  for (int i = 0; i < samples; ++i) {
    const int s = (i * 5) % SEQS, tile = (i * 13 + i / 4) % tiles, h = (i * 3) % H;
    for (int g = 0; g < G; ++g) {
      const std::size_t src = ((static_cast<std::size_t>(s) * TOK + tile * G + g) * H + h) * D;
      kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(&g_hk[src], &tk[g * D]);
      kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(&g_hv[src], &tv[g * D]);
    }
    const kvtile::status st = PC::encode(tk.data(), D, tv.data(), D, host.data());
    const std::int32_t page = table[static_cast<std::size_t>(s) * tiles + tile];
    CK(cudaMemcpy(dev.data(), v.record(page, h), RB, cudaMemcpyDeviceToHost));
    if (!kvtile::ok(st) || std::memcmp(host.data(), dev.data(), RB) != 0) ++bad;
  }
  std::printf("identity %-28s %d/%d sampled records byte-identical to the host codec\n", name, samples - bad, samples);
  g_identity_fail += bad;
  g_identity_checked += samples;
}

// Policies of the non-default rows: the default paged_policy with another
// prefill block size / minimum blocks per SM, or another append block size.
template <int THREADS, int MIN_BLOCKS = kvtile::device::paged_policy::prefill_min_blocks>
struct prefill_tuning : kvtile::device::paged_policy {
  static constexpr int prefill_block_threads = THREADS;
  static constexpr int prefill_min_blocks = MIN_BLOCKS;
};
template <int THREADS>
struct append_tuning : kvtile::device::paged_policy {
  static constexpr int append_block_threads = THREADS;
};

template <class Codec, class Policy = kvtile::device::paged_policy>
void bench_prefill(const char* name, bool decode_too) {
  constexpr int BLOCK_THREADS = Policy::prefill_block_threads;
  cache c;
  c.make(SEQS, TOK / G, static_cast<std::int64_t>(Codec::record_bytes));
  c.set_lens(std::vector<std::int32_t>(SEQS, TOK));
  auto prefill = [&] { check(kvtile::device::launch_prefill<Codec, half_t, Policy>(c.v, g_k, g_v, g_cu, TOK)); };
  {  // the kernel's resources
    auto* kern = kvtile::device::prefill_kernel<Codec, BLOCK_THREADS, half_t, Policy::prefill_min_blocks>;
    constexpr std::size_t smem = kvtile::device::prefill_smem_bytes<Codec, Policy>();
    cudaFuncAttributes fa{};
    int blocks = 0;
    CK(cudaFuncGetAttributes(&fa, kern));
    check(kvtile::device::prepare_prefill<Codec, half_t, Policy>());  // shared-memory limit set
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kern, BLOCK_THREADS, smem));
    std::printf("kernel  %-28s %d registers, %zu B local, %zu B shared, %d blocks/SM of %d threads\n", name,
                fa.numRegs, static_cast<std::size_t>(fa.localSizeBytes), smem, blocks, BLOCK_THREADS);
  }
  if (g_decode_only) {
    if (!decode_too) return;
    prefill();  // the records to decode, untimed
    CK(cudaDeviceSynchronize());
    check_identity<Codec>(name, c.v);
  } else {
    const double us = median_us(prefill);
    const double bytes = 2.0 * kTokElems * 2;  // K and V fp16 read
    const double gbps = bytes / us / 1e3;
    g_rows.push_back({name, "prefill_encode", us, gbps, gbps / g_copy_gbps, "fp16 bytes read (K+V)"});
    std::printf("prefill %-28s %9.1f us  %8.1f GB/s fp16 read  %.3f of copy\n", name, us, gbps, gbps / g_copy_gbps);
    std::fflush(stdout);
    check_identity<Codec>(name, c.v);
  }
  if (!decode_too || g_encode_only) return;
  const int n = SEQS * TOK / G;
  std::int32_t* ids;
  CK(cudaMalloc(&ids, n * 4));
  std::vector<std::int32_t> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  CK(cudaMemcpy(ids, h.data(), n * 4, cudaMemcpyHostToDevice));
  half_t *ok, *ov;
  CK(cudaMalloc(&ok, kTokElems * 2));
  CK(cudaMalloc(&ov, kTokElems * 2));
  for (kvtile::frame f : {kvtile::frame::rotated, kvtile::frame::original}) {
    const double dus = median_us([&] { check(kvtile::device::launch_dequantize_pages<Codec>(c.v, ids, n, ok, ov, f)); });
    const double w = 2.0 * kTokElems * 2;
    const double g = w / dus / 1e3;
    std::string nm = std::string(name) + (f == kvtile::frame::rotated ? " rotated" : " original");
    g_rows.push_back({nm, "decode_fp16", dus, g, g / g_copy_gbps, "fp16 bytes written (K+V)"});
    std::printf("decode  %-28s %9.1f us  %8.1f GB/s fp16 written  %.3f of copy\n", nm.c_str(), dus, g, g / g_copy_gbps);
    std::fflush(stdout);
  }
  cudaFree(ids);
  cudaFree(ok);
  cudaFree(ov);
}

template <class Codec, class Policy = kvtile::device::paged_policy>
void bench_append(const char* name) {
  for (int batch : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    cache c;
    c.make(batch, 8, static_cast<std::int64_t>(Codec::record_bytes));
    half_t *k, *v;
    CK(cudaMalloc(&k, static_cast<std::size_t>(batch) * H * D * 2));
    CK(cudaMalloc(&v, static_cast<std::size_t>(batch) * H * D * 2));
    CK(cudaMemset(k, 0x3c, static_cast<std::size_t>(batch) * H * D * 2));
    CK(cudaMemset(v, 0x3b, static_cast<std::size_t>(batch) * H * D * 2));
    for (int fill = 0; fill < 2; ++fill) {
      std::vector<std::int32_t> l(batch);
      for (int s = 0; s < batch; ++s) l[s] = fill ? G * (1 + s % 4) : 1 + 37 * s % (G - 1);  // fill: pos % G == G-1
      c.set_lens(l);
      const double us =
          median_us([&] { check(kvtile::device::launch_append<Codec, half_t, Policy>(c.v, k, v)); }, 41);
      const double bytes = 2.0 * batch * H * D * 2;
      char nm[64];
      std::snprintf(nm, sizeof nm, "%s batch %d %s", name, batch, fill ? "all tiles fill" : "no tile fills");
      g_rows.push_back({nm, fill ? "append_fill" : "append", us, bytes / us / 1e3, 0.0, "fp16 token bytes read"});
      std::printf("append  %-40s %8.2f us\n", nm, us);
    }
    std::fflush(stdout);
    cudaFree(k);
    cudaFree(v);
  }
}
}  // namespace

int main(int argc, char** argv) {
  kvtile_bench::codec_options opt;
  if (const int rc = kvtile_bench::parse(argc, argv, opt); rc >= 0) return rc;
  g_iters = opt.iters;
  g_decode_only = opt.decode_only;
  g_encode_only = opt.encode_only;
  const std::string out = opt.out, command = opt.command;
  std::string stem = opt.stem;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  if (stem.empty()) stem = std::string(date) + "-gpu-codec";
  g_flush_bytes = static_cast<std::size_t>(prop.l2CacheSize) * 2;
  CK(cudaMalloc(&g_flush, g_flush_bytes));

  // Inputs: 64K tokens x 8 heads x 128, K and V, fp16 N(0,1) with outlier channels.
  CK(cudaMalloc(&g_k, kTokElems * 2));
  CK(cudaMalloc(&g_v, kTokElems * 2));
  {
    g_hk.resize(kTokElems);
    g_hv.resize(kTokElems);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (std::size_t i = 0; i < kTokElems; ++i) g_hk[i] = half_t(nd(rng) * ((i % D) % 29 == 0 ? 20.0f : 1.0f));
    CK(cudaMemcpy(g_k, g_hk.data(), kTokElems * 2, cudaMemcpyHostToDevice));
    for (std::size_t i = 0; i < kTokElems; ++i) g_hv[i] = half_t(nd(rng));
    CK(cudaMemcpy(g_v, g_hv.data(), kTokElems * 2, cudaMemcpyHostToDevice));
    std::vector<std::int32_t> cu(SEQS + 1);
    for (int s = 0; s <= SEQS; ++s) cu[s] = s * TOK;
    CK(cudaMalloc(&g_cu, (SEQS + 1) * 4));
    CK(cudaMemcpy(g_cu, cu.data(), (SEQS + 1) * 4, cudaMemcpyHostToDevice));
  }
  // Copy ceiling: K+V fp16 (537 MB) read and written.
  {
    half_t* dst;
    CK(cudaMalloc(&dst, 2 * kTokElems * 2));
    const std::size_t n16 = kTokElems * 2 / 16;
    const double us = median_us([&] {
      copy_kernel<<<prop.multiProcessorCount * 8, 512>>>(reinterpret_cast<const uint4*>(g_k), reinterpret_cast<uint4*>(dst), n16);
      copy_kernel<<<prop.multiProcessorCount * 8, 512>>>(reinterpret_cast<const uint4*>(g_v),
                                                         reinterpret_cast<uint4*>(dst) + n16, n16);
    });
    g_copy_gbps = 2.0 * 2 * kTokElems * 2 / us / 1e3;
    g_rows.push_back({"copy K+V (read+write)", "copy", us, g_copy_gbps, 1.0, "read + write bytes"});
    std::printf("copy    %9.1f us  %8.1f GB/s (read+write)\n", us, g_copy_gbps);
    cudaFree(dst);
  }
  using namespace kvtile;
  using k4v2_s0 = tile_codec<tile_config<D, G, 4, 2>, hadamard, sinkhorn<0>, rtn<>, fp8_scales>;
  using k4v2_s4 = tile_codec<tile_config<D, G, 4, 2>, hadamard, sinkhorn<4>, rtn<>, fp8_scales>;
  using k4v2_s8 = tile_codec<tile_config<D, G, 4, 2>, hadamard, sinkhorn<8>, rtn<>, fp8_scales>;
  bench_prefill<presets::k4v2_g128<D>>("k4v2_g128", true);
  bench_prefill<presets::k4v2_g128<D>, prefill_tuning<1024>>("k4v2_g128 (1024 threads/block)", false);
  bench_prefill<presets::k4v2_g128<D>, prefill_tuning<512, 1>>("k4v2_g128 (MIN_BLOCKS 1)", false);
  bench_prefill<k4v2_s4, prefill_tuning<512, 1>>("k4v2_g128 sinkhorn<4> (MIN_BLOCKS 1)", false);
  bench_prefill<presets::k4v4_g128<D>>("k4v4_g128", false);
  bench_prefill<presets::k2v2_g128<D>>("k2v2_g128", true);
  bench_prefill<presets::k4v2_g128<D, fp16_scales>>("k4v2_g128 fp16_scales", false);
  bench_prefill<presets::kvarn<D, G, 4, 2, fp8_scales, rtn_cover>>("k4v2_g128 rtn_cover (0.1 rounding)", false);
  bench_prefill<k4v2_s8>("k4v2_g128 sinkhorn<8>", false);
  bench_prefill<k4v2_s4>("k4v2_g128 sinkhorn<4>", false);
  bench_prefill<k4v2_s0>("k4v2_g128 sinkhorn<0>", false);
  bench_prefill<presets::rotate_rtn<D>>("rotate_rtn (no normalization)", false);
  if (!g_decode_only && !g_encode_only) {
    bench_append<presets::k4v2_g128<D>>("k4v2_g128");
    bench_append<presets::k4v2_g128<D>, append_tuning<256>>("k4v2_g128 (256 threads/block)");
    bench_append<presets::k4v2_g128<D>, append_tuning<1024>>("k4v2_g128 (1024 threads/block)");
  }

  // JSON + Markdown.
  const std::string base = out + "/" + stem;
  std::error_code mkdir_error;
  std::filesystem::create_directories(out, mkdir_error);  // an existing directory is fine
  int written = 0;
  {
    std::vector<kvtile_bench::codec_row> rows;
    for (const row& r : g_rows) rows.push_back({r.name, r.kind, r.us, r.gbps, r.ratio, r.note});
    written += kvtile_bench::write_json(base + ".json",
                                        {date, prop.name, command, prop.multiProcessorCount, prop.l2CacheSize,
                                         g_iters, g_copy_gbps},
                                        rows);
  }
  if (FILE* f = std::fopen((base + ".md").c_str(), "w")) {
    std::fprintf(f, "# GPU codec benchmark (%s)\n\n- GPU: %s (%d SMs, L2 %d MB)\n- command: `%s`\n"
                    "- median of %d iterations (append: 41), CUDA events, L2 flushed (2x L2 written) before each\n"
                    "- copy ceiling: %.1f GB/s (read + write)\n\n| kernel | case | median us | GB/s | vs copy |\n|---|---|---:|---:|---:|\n",
                 date, prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, command.c_str(), g_iters, g_copy_gbps);
    for (const row& r : g_rows)
      std::fprintf(f, "| %s | %s | %.2f | %.1f | %s |\n", r.kind.c_str(), r.name.c_str(), r.us, r.gbps,
                   r.ratio > 0 ? (std::to_string(r.ratio).substr(0, 5)).c_str() : "-");
    written += std::fclose(f) == 0;
  }
  if (written != 2) {
    std::fprintf(stderr, "cannot write %s.json / %s.md\n", base.c_str(), base.c_str());
    return 1;
  }
  std::printf("wrote %s.json and %s.md\n", base.c_str(), base.c_str());
  std::printf("identity check: %ld of %ld sampled prefill records byte-identical to the host codec\n",
              g_identity_checked - g_identity_fail, g_identity_checked);
  if (g_identity_fail) {
    std::printf("FAILED: %ld sampled prefill records differ from the host codec\n", g_identity_fail);
    return 1;
  }
  return 0;
}
