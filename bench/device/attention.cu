// bench/device/attention.cu: paged decode attention on the quantized cache
// (decode_plan: plan once, run timed; and the one-call paged_decode) vs the fp16
// baseline of the same kernel family (plan/run), against a same-run
// read-bandwidth ceiling. L2 is flushed (a 512 MB memset) before every timed
// launch; each number is the median of N >= 50 CUDA-event timings of one decode
// step (both kernels: attention + merge). Shapes: the uniform ones of issue 13,
// a small-batch sweep (batch 1-4, 4K-256K, 1 / 2 / 8 KV heads) and two ragged
// batches (lengths log-uniform over [256, 64K], fixed seeds).
//
// Usage: attention [--json FILE] [--iters N] [--quick] [--policies] [--shape S] [--kernel K] (--help: the options)
// The quantized caches are filled from a pool of 64 records encoded on the host
// from random data (real records, replicated over the pages in a random page
// order); the fp16 caches hold random values.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/kvtile.hpp>

#include "bench_io.hpp"

using namespace kvtile;

#define BCUDA(expr)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #expr, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

int g_iters = 60;
std::string g_only_shape, g_only_kernel;  // --shape, --kernel (profiling one configuration); empty: all
void* g_flush = nullptr;
const std::size_t g_flush_bytes = 512ull << 20;

__global__ void read_ceiling_kernel(const uint4* __restrict__ p, std::size_t n, unsigned* sink) {
  unsigned acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = p[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

__global__ void fill_random_half(std::uint16_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
    p[i] = __half_as_ushort(__float2half_rn(u));
  }
}

// pages[i] = pool[perm(i) % pool_n], record by record (uint4 granularity).
__global__ void replicate_records(uint4* pages, std::size_t n_records, const uint4* pool, int pool_n, int rec_u4) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n_records * rec_u4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / rec_u4, w = i % rec_u4;
    const std::size_t src = (r * 2654435761ull) % pool_n;
    pages[i] = pool[src * rec_u4 + w];
  }
}

template <class F>
double time_median(F&& launch) {
  cudaEvent_t a, b;
  BCUDA(cudaEventCreate(&a));
  BCUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < g_iters; ++i) {
    BCUDA(cudaMemsetAsync(g_flush, i & 0xff, g_flush_bytes));
    BCUDA(cudaEventRecord(a));
    launch();
    BCUDA(cudaEventRecord(b));
    BCUDA(cudaEventSynchronize(b));
    float ms = 0;
    BCUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  BCUDA(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 1000.0 * t[t.size() / 2];
}

double read_ceiling_gbs() {
  const std::size_t bytes = 4ull << 30;
  void* buf;
  BCUDA(cudaMalloc(&buf, bytes));
  BCUDA(cudaMemset(buf, 1, bytes));
  unsigned* sink;
  BCUDA(cudaMalloc(&sink, 4));
  int sms = 0;
  BCUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  double best = 0;
  for (int blocks_per_sm : {4, 8}) {
    const double us = time_median([&] {
      read_ceiling_kernel<<<sms * blocks_per_sm, 512>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    });
    best = std::max(best, bytes / us / 1e3);
  }
  cudaFree(buf);
  cudaFree(sink);
  return best;
}

struct shape {
  int B, Hq, Hkv, D, L;  // L: the longest length (uniform shapes: every length)
  std::string name;      // "" or the ragged batch's name
  std::vector<int> lens; // empty: uniform
  bool sweep = false;    // a small-batch sweep shape: the default kernel and the fp16 baseline only
  std::vector<int> lengths() const { return lens.empty() ? std::vector<int>(B, L) : lens; }
  long long tokens() const {
    long long t = 0;
    for (int l : lengths()) t += l;
    return t;
  }
};

struct result {
  std::string kernel;
  shape s;
  double us, bytes, gbs, frac, speedup;
  int chunks;  // partials of the step (plan) or splits per unit (one-call)
};

std::vector<result> g_results;
double g_ceiling = 0;

void print_result(const result& r) {
  std::printf("%-18s %4d %4d %4d %4d %7d %-10s %6d %10.2f %9.0f %7.1f%% %7.1f %7.2fx\n", r.kernel.c_str(), r.s.B, r.s.Hq,
              r.s.Hkv, r.s.D, r.s.L, r.s.name.empty() ? "uniform" : r.s.name.c_str(), r.chunks, r.us, r.gbs,
              100 * r.frac, r.bytes / 1e6, r.speedup);
  std::fflush(stdout);
}

struct queries {
  void* q = nullptr;
  void* out = nullptr;
  void* ws = nullptr;
  std::size_t ws_bytes = 0;
};

queries make_queries(const shape& s, std::size_t ws_bytes, int tokens_per_seq = 1) {
  queries q;
  const std::size_t n = static_cast<std::size_t>(s.B) * tokens_per_seq * s.Hq * s.D;
  BCUDA(cudaMalloc(&q.q, n * 2));
  BCUDA(cudaMalloc(&q.out, n * 2));
  fill_random_half<<<256, 256>>>(static_cast<std::uint16_t*>(q.q), n, 99);
  q.ws_bytes = ws_bytes;
  BCUDA(cudaMalloc(&q.ws, q.ws_bytes));
  return q;
}
void free_queries(queries& q) {
  cudaFree(q.q);
  cudaFree(q.out);
  cudaFree(q.ws);
}

// Pages of sequence b: a random permutation of all pages, max_pages per row
// (rows of shorter sequences are partly unused).
std::vector<std::int32_t> random_page_table(int B, int pages_per_seq, std::mt19937_64& rng) {
  std::vector<std::int32_t> perm(static_cast<std::size_t>(B) * pages_per_seq);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// The fp16 baseline (plan/run), D = s.D.
template <int D>
double fp16_baseline(const shape& s) {
  if (!g_only_kernel.empty() && g_only_kernel != "fp16_baseline") return 0.0;
  constexpr int PT = attention::fp16_kernel_traits<D>::page_tokens;
  std::mt19937_64 rng(1);
  const int pps = std::max(1, (s.L + PT - 1) / PT);
  const std::size_t n = static_cast<std::size_t>(s.B) * pps * s.Hkv * PT * D;
  half_t *k, *v;
  BCUDA(cudaMalloc(&k, n * 2));
  BCUDA(cudaMalloc(&v, n * 2));
  fill_random_half<<<1024, 256>>>(reinterpret_cast<std::uint16_t*>(k), n, 1);
  fill_random_half<<<1024, 256>>>(reinterpret_cast<std::uint16_t*>(v), n, 2);
  auto pt = random_page_table(s.B, pps, rng);
  std::vector<std::int32_t> lens;
  for (int l : s.lengths()) lens.push_back(l);
  std::int32_t *dpt, *dl;
  BCUDA(cudaMalloc(&dpt, pt.size() * 4));
  BCUDA(cudaMalloc(&dl, lens.size() * 4));
  BCUDA(cudaMemcpy(dpt, pt.data(), pt.size() * 4, cudaMemcpyHostToDevice));
  BCUDA(cudaMemcpy(dl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  fp16_paged_cache_view cv;
  cv.k = k;
  cv.v = v;
  cv.page_table = dpt;
  cv.seq_lens = dl;
  cv.num_seqs = s.B;
  cv.kv_heads = s.Hkv;
  cv.head_dim = D;
  cv.page_tokens = PT;
  cv.max_pages_per_seq = pps;
  cv.num_pages = s.B * pps;
  queries q = make_queries(s, attention::workspace_bytes_fp16<D>(cv, s.Hq));
  attention::decode_args<half_t> a;
  a.q = static_cast<const half_t*>(q.q);
  a.out = static_cast<half_t*>(q.out);
  a.q_heads = s.Hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.workspace = q.ws;
  a.workspace_bytes = q.ws_bytes;
  attention::decode_plan plan;
  status st = plan.plan_fp16<D>(cv, lens.data(), a);
  if (st == status::success) st = plan.run_fp16<D>(cv, a);
  if (st != status::success) {
    std::fprintf(stderr, "fp16 baseline: %s\n", to_string(st));
    std::exit(1);
  }
  const double us = time_median([&] { (void)plan.run_fp16<D>(cv, a); });
  const double bytes = static_cast<double>(s.Hkv) * s.tokens() * D * 2 * 2;
  g_results.push_back({"fp16_baseline", s, us, bytes, bytes / us / 1e3, bytes / us / 1e3 / g_ceiling, 1.0, plan.chunks()});
  print_result(g_results.back());
  free_queries(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(dpt);
  cudaFree(dl);
  return us;
}

// kvtile over the quantized cache: plan/run (timed: run; the plan is host work
// done before the step), and with one_call also the one-call paged_decode.
// Units of 8 query rows (each record read once per 8 query heads), and the
// 16-row kernel with two stages per ring: comparisons for groups of 16.
// (decode_policy_with: chains over every architecture's policy, like the default, so they run from compute_80 PTX too)
template <class P>
struct rows8 : P {
  static constexpr int max_unit_rows = 8;
};
template <class P>
struct wide2 : P {
  static constexpr int wide_stages = 2;
};
using rows8_policy = attention::decode_policy_with<rows8>;
using wide2_policy = attention::decode_policy_with<wide2>;
// 16-row units whose ring warps split each tile's n-blocks (the default policies split the tokens).
template <class P>
struct nblock_split : P {
  static constexpr bool wide_token_split = false;
};
using nblock_split_policy = attention::decode_policy_with<nblock_split>;
// The token split with each warp making every k-step's query operands (no exchange).
template <class P>
struct no_exchange : P {
  static constexpr bool token_split_exchange = false;
};
using no_exchange_policy = attention::decode_policy_with<no_exchange>;
// A planned step merged by the CTA that finishes a unit's last chunk instead of a second kernel.
template <class P>
struct merge_in_kernel : P {
  static constexpr bool fused_merge = true;
};
using fused_merge_policy = attention::decode_policy_with<merge_in_kernel>;
// Tuning of the smaller budgets (--policies, at 16 x 64K and ragged32): the 163 KB budget with bulk
// copies (what the cp.async load path costs at the same shared memory). Settled, numbers in
// docs/attention.md: sm80 pool_warps 10, sm86 pool_warps 5.
struct sm80_bulk_policy : attention::decode_policy_sm80 {
  static constexpr bool bulk_copies = true;  // (sm_90+ images; below sm_90 the cp.async path regardless)
};
static_assert(sm80_bulk_policy::bulk_copies, "the 163 KB budget with bulk copies");

// mq > 0: multi-query decode, mq new tokens per sequence (qo_indptr); ragged:
// sequence b has 1 + (5 b + 3) % mq of them instead (a speculative batch), the
// plan given the host counts unless bound_plan (every sequence planned at mq).
// splits > 0: every sequence's tiles cut into that many chunks (decode_args::num_splits).
template <class Codec, class QT = half_t, class P = attention::decode_policy>
void quant_run(const char* name, const shape& s, double fp16_us, bool one_call, bool sink = false, int mq = 0,
               bool ragged = false, bool bound_plan = false, int splits = 0) {
  if (!g_only_kernel.empty() && g_only_kernel != name) return;
  constexpr int D = Codec::D, G = Codec::G;
  constexpr std::size_t RB = Codec::record_bytes;
  std::mt19937_64 rng(7);
  // Pool of real records.
  const int pool_n = 64;
  std::vector<std::uint8_t> pool(pool_n * RB);
  {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<half_t> kt(static_cast<std::size_t>(G) * D), vt(kt.size());
    auto* ws = new typename Codec::workspace;
    for (int i = 0; i < pool_n; ++i) {
      for (std::size_t e = 0; e < kt.size(); ++e) {
        kt[e] = half_t(nd(rng) * (1.0f + (e % D == 3 ? 6.0f : 0.0f)));
        vt[e] = half_t(nd(rng));
      }
      (void)Codec::encode(kt.data(), D, vt.data(), D, pool.data() + i * RB, ws);
    }
    delete ws;
  }
  const int pps = std::max(1, s.L / G);
  const std::size_t n_rec = static_cast<std::size_t>(s.B) * pps * s.Hkv;
  std::uint8_t *pages, *dpool;
  BCUDA(cudaMalloc(&pages, n_rec * RB));
  BCUDA(cudaMalloc(&dpool, pool.size()));
  BCUDA(cudaMemcpy(dpool, pool.data(), pool.size(), cudaMemcpyHostToDevice));
  replicate_records<<<2048, 256>>>(reinterpret_cast<uint4*>(pages), n_rec, reinterpret_cast<const uint4*>(dpool), pool_n,
                                   static_cast<int>(RB / 16));
  BCUDA(cudaGetLastError());
  auto pt = random_page_table(s.B, pps, rng);
  std::vector<std::int32_t> lens;
  for (int l : s.lengths()) lens.push_back(l);
  std::int32_t *dpt, *dl;
  BCUDA(cudaMalloc(&dpt, pt.size() * 4));
  BCUDA(cudaMalloc(&dl, lens.size() * 4));
  BCUDA(cudaMemcpy(dpt, pt.data(), pt.size() * 4, cudaMemcpyHostToDevice));
  BCUDA(cudaMemcpy(dl, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  const std::size_t tail_n = static_cast<std::size_t>(s.B) * s.Hkv * G * D;
  half_t *tk, *tv, *sk = nullptr, *sv = nullptr;
  BCUDA(cudaMalloc(&tk, tail_n * 2));
  BCUDA(cudaMalloc(&tv, tail_n * 2));
  fill_random_half<<<256, 256>>>(reinterpret_cast<std::uint16_t*>(tk), tail_n, 3);
  fill_random_half<<<256, 256>>>(reinterpret_cast<std::uint16_t*>(tv), tail_n, 4);
  if (sink) {
    BCUDA(cudaMalloc(&sk, tail_n * 2));
    BCUDA(cudaMalloc(&sv, tail_n * 2));
    fill_random_half<<<256, 256>>>(reinterpret_cast<std::uint16_t*>(sk), tail_n, 5);
    fill_random_half<<<256, 256>>>(reinterpret_cast<std::uint16_t*>(sv), tail_n, 6);
  }
  paged_cache_view cv;
  cv.pages = pages;
  cv.page_table = dpt;
  cv.seq_lens = dl;
  cv.tail_k = tk;
  cv.tail_v = tv;
  cv.sink_k = sk;
  cv.sink_v = sv;
  cv.num_seqs = s.B;
  cv.kv_heads = s.Hkv;
  cv.head_dim = D;
  cv.tile_tokens = G;
  cv.max_pages_per_seq = pps;
  cv.num_pages = static_cast<int>(s.B * pps);
  cv.record_bytes = static_cast<std::int64_t>(RB);
  const std::size_t nq = static_cast<std::size_t>(s.B) * s.Hq * D;
  const int span = mq > 0 ? mq : 1;
  queries q = make_queries(s, attention::workspace_bytes<Codec>(cv, s.Hq, splits, span), span);
  std::int32_t* dind = nullptr;
  attention::decode_args<QT> a;
  std::vector<std::int32_t> off;
  if (mq > 0) {
    off.assign(s.B + 1, 0);
    for (int b = 0; b < s.B; ++b) off[b + 1] = off[b] + (ragged ? 1 + (5 * b + 3) % mq : mq);
    BCUDA(cudaMalloc(&dind, off.size() * 4));
    BCUDA(cudaMemcpy(dind, off.data(), off.size() * 4, cudaMemcpyHostToDevice));
    a.qo_indptr = dind;
    a.max_q_tokens = mq;
  }
  a.q = static_cast<const QT*>(q.q);
  a.out = static_cast<QT*>(q.out);
  a.q_heads = s.Hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.workspace = q.ws;
  a.workspace_bytes = q.ws_bytes;
  a.num_splits = splits;
  (void)nq;
  double bytes = 0;  // records of complete tiles (not the sink) + the fp16 tails and sinks
  for (int l : lens) {
    const int full = l / G, quant = full - (sink && full > 0 ? 1 : 0);
    bytes += static_cast<double>(s.Hkv) * (static_cast<double>(quant) * RB + (l % G) * D * 4.0 +
                                           (sink && full > 0 ? G * D * 4.0 : 0.0));
  }
  attention::decode_plan plan;
  status st = plan.plan<Codec, P>(cv, lens.data(), mq > 0 && !bound_plan ? off.data() : nullptr, a);
  if (st == status::success) st = plan.run<Codec, P>(cv, a);
  if (st != status::success) {
    std::fprintf(stderr, "%s: %s\n", name, to_string(st));
    std::exit(1);
  }
  BCUDA(cudaDeviceSynchronize());
  const double us = time_median([&] { (void)plan.run<Codec, P>(cv, a); });
  g_results.push_back({name, s, us, bytes, bytes / us / 1e3, bytes / us / 1e3 / g_ceiling, fp16_us / us, plan.chunks()});
  print_result(g_results.back());
  if (one_call) {
    const double us1 = time_median([&] { (void)attention::paged_decode<Codec, P>(cv, a); });
    g_results.push_back({std::string(name) + "_onecall", s, us1, bytes, bytes / us1 / 1e3, bytes / us1 / 1e3 / g_ceiling,
                         fp16_us / us1, attention::plan_splits<Codec, P>(cv, s.Hq, 0, span)});
    print_result(g_results.back());
  }
  free_queries(q);
  if (dind) cudaFree(dind);
  cudaFree(pages);
  cudaFree(dpool);
  cudaFree(dpt);
  cudaFree(dl);
  cudaFree(tk);
  cudaFree(tv);
  if (sk) cudaFree(sk);
  if (sv) cudaFree(sv);
}

// Lengths log-uniform over [lo, hi], fixed seed.
std::vector<int> log_uniform(int n, double lo, double hi, unsigned seed) {
  std::mt19937 r(seed);
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  std::vector<int> v(n);
  for (int& x : v) x = static_cast<int>(std::exp(u(r)));
  return v;
}

template <class Codec>
void print_size(const char* name, const char* packing) {
  constexpr int D = Codec::D;
  const double per_token = static_cast<double>(Codec::record_bytes) / Codec::G;  // one KV head
  std::printf("  %-10s %-11s record %6zu B  %7.2f B/token/head  %6.1f B/token (8 KV heads)  %.3f bits/elem  %.2fx capacity vs fp16\n",
              name, packing, Codec::record_bytes, per_token, 8 * per_token, Codec::bits_per_element,
              (2.0 * 2 * D) / per_token);
}

}  // namespace

int main(int argc, char** argv) {
  kvtile_bench::attention_options opt;
  if (const int rc = kvtile_bench::parse(argc, argv, opt); rc >= 0) return rc;
  g_iters = opt.iters;
  g_only_shape = opt.shape;
  g_only_kernel = opt.kernel;
  const bool quick = opt.quick, policies = opt.policies;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  BCUDA(cudaGetDeviceProperties(&prop, 0));
  BCUDA(cudaMalloc(&g_flush, g_flush_bytes));
  using namespace kvtile::presets;
  std::printf("bytes per token (D=128; fp16 = 512 B/token/head):\n");
  print_size<k4v2_g128<128>>("k4v2_g128", "fp8_scales");
  print_size<k4v4_g128<128>>("k4v4_g128", "fp8_scales");
  print_size<k2v2_g128<128>>("k2v2_g128", "fp8_scales");
  print_size<k4v2_g64<128>>("k4v2_g64", "fp8_scales");
  print_size<k4v4_g64<128>>("k4v4_g64", "fp8_scales");
  print_size<k4v2_g128<128, fp16_scales>>("k4v2_g128", "fp16_scales");
  print_size<k4v4_g128<128, fp16_scales>>("k4v4_g128", "fp16_scales");
  print_size<k2v2_g128<128, fp16_scales>>("k2v2_g128", "fp16_scales");
  print_size<k4v2_g64<128, fp16_scales>>("k4v2_g64", "fp16_scales");

  g_ceiling = read_ceiling_gbs();
  std::printf("device %s, %d SMs; read ceiling (read-only kernel, 4 GiB): %.0f GB/s; iterations %d (median)\n", prop.name,
              prop.multiProcessorCount, g_ceiling, g_iters);
  const char* hdr = "%-18s %4s %4s %4s %4s %7s %-10s %6s %10s %9s %8s %7s %8s\n";
  std::printf(hdr, "kernel", "B", "Hq", "Hkv", "D", "tokens", "lengths", "chunks", "us", "GB/s", "ceil%", "MB", "vs fp16");
  // (B, Hq, Hkv, D, tokens): the issue's shapes (batch 1-4 at 16K-256K, GQA 1/4/8/16, D 64/128/256, batch 64-128);
  // the GQA 16 shapes also with 8-row units and two stages per 16-row ring.
  std::vector<shape> shapes = {
      {1, 32, 8, 128, 16384},   {1, 32, 8, 128, 65536},  {1, 32, 8, 128, 262144}, {2, 32, 8, 128, 32768},
      {4, 32, 8, 128, 16384},   {2, 8, 1, 128, 32768},   {16, 32, 8, 128, 65536}, {8, 128, 8, 128, 32768},
      {2, 16, 1, 128, 65536},
      {8, 8, 8, 128, 32768},    {64, 32, 8, 128, 8192},  {128, 32, 8, 128, 4096},
      {16, 16, 8, 256, 32768},  {8, 32, 8, 64, 32768},
  };
  // Small batches (issue 29): batch 1, 2, 4 at 4K-256K with 1, 2 and 8 KV heads (GQA 8, 8, 4), the
  // shapes not in the list above; the default kernel and the fp16 baseline only.
  for (int kvh : {1, 2, 8})
    for (int b : {1, 2, 4})
      for (int l : {4096, 16384, 65536, 262144}) {
        const int hq = kvh == 8 ? 32 : 8 * kvh;
        const bool listed = std::any_of(shapes.begin(), shapes.end(), [&](const shape& x) {
          return x.B == b && x.Hq == hq && x.Hkv == kvh && x.D == 128 && x.L == l;
        });
        if (!listed) shapes.push_back(shape{b, hq, kvh, 128, l, "", {}, true});
      }
  {
    shape r1{32, 32, 8, 128, 0, "ragged32", log_uniform(32, 256, 65536, 1)};
    shape r2{64, 32, 8, 128, 0, "ragged64", log_uniform(64, 256, 65536, 2)};
    for (shape* r : {&r1, &r2}) r->L = *std::max_element(r->lens.begin(), r->lens.end());
    shapes.push_back(r1);
    shapes.push_back(r2);
  }
  auto shape_id = [](const shape& s) {
    return s.name.empty() ? std::to_string(s.B) + "," + std::to_string(s.Hq) + "," + std::to_string(s.Hkv) + "," +
                                std::to_string(s.D) + "," + std::to_string(s.L)
                          : s.name;
  };
  if (!g_only_shape.empty() &&
      std::none_of(shapes.begin(), shapes.end(), [&](const shape& s) { return shape_id(s) == g_only_shape; })) {
    std::fprintf(stderr, "--shape %s: not a shape of this benchmark (B,Hq,Hkv,D,tokens as listed, or ragged32 / "
                         "ragged64)\n", g_only_shape.c_str());
    return 2;
  }
  for (const shape& s : shapes) {
    if (quick && (s.sweep || (s.name.empty() && s.B != 16 && s.B != 1))) continue;
    if (!g_only_shape.empty() && g_only_shape != shape_id(s)) continue;
    double f = 0;
    if (s.D == 64) {
      f = fp16_baseline<64>(s);
      quant_run<k4v2_g128<64>>("k4v2_g128", s, f, true);
    } else if (s.D == 256) {
      f = fp16_baseline<256>(s);
      quant_run<k4v2_g128<256>>("k4v2_g128", s, f, true);
    } else {
      f = fp16_baseline<128>(s);
      quant_run<k4v2_g128<128>>("k4v2_g128", s, f, true);
      // Small batches: the step at forced split counts against the plan's own choice (the data of its
      // cost model, docs/attention.md "Schedule").
      if (s.B <= 4 && s.name.empty() && !quick) {
        for (int n = 1; n <= 256 && n <= s.L / 128; n *= 2) {
          const std::string nm = "k4v2_g128_split" + std::to_string(n);
          quant_run<k4v2_g128<128>>(nm.c_str(), s, f, false, false, 0, false, false, n);
        }
      }
      if (s.sweep) continue;
      if (policies) {  // the other GPUs' configurations on this one (docs/attention.md, "Architectures")
        quant_run<k4v2_g128<128>, half_t, attention::forced<attention::decode_policy_sm80>>("k4v2_g128_sm80", s, f, false);
        quant_run<k4v2_g128<128>, half_t, attention::forced<attention::decode_policy_sm86>>("k4v2_g128_sm86", s, f, false);
        quant_run<k4v2_g128<128>, half_t, attention::forced<attention::decode_policy_sm120>>("k4v2_g128_sm120", s, f,
                                                                                               false);
        if ((s.B == 16 && s.L == 65536) || s.name == "ragged32") {
          quant_run<k4v2_g128<128>, half_t, attention::forced<sm80_bulk_policy>>("k4v2_g128_sm80_bulk", s, f, false);
          // Tail pieces (decode_policy_tail_pieces, opt-in) against the default kernels, same run: the
          // one-token step, the sink, and the kernels whose SMs run evenly (k2v2, fp16 scales, 2 new
          // tokens); the 163 KB bulk pool with them.
          using attention::forced;
          using tails90 = forced<attention::tail_pieces<attention::decode_policy_sm90>>;
          quant_run<k4v2_g128<128>, half_t, tails90>("k4v2_g128_tails", s, f, false);
          quant_run<k4v2_g128<128>, half_t, forced<attention::tail_pieces<sm80_bulk_policy>>>("k4v2_g128_sm80_bulk_tails",
                                                                                              s, f, false);
          if (s.B == 16) {
            quant_run<k2v2_g128<128>, half_t, tails90>("k2v2_g128_tails", s, f, false);
            quant_run<k4v2_g128<128, fp16_scales>, half_t, tails90>("k4v2_g128_fp16s_tails", s, f, false);
            quant_run<k4v2_g128<128>, half_t, tails90>("k4v2_g128_mq2_tails", s, f, false, false, 2);
            quant_run<k4v2_g128<128>, half_t, tails90>("k4v2_g128_sink_tails", s, f, false, true);
          }
        }
        // The token split (default) against the n-block split on the 163 / 99 KB budgets.
        {
          using attention::forced;
          using sm80 = attention::decode_policy_sm80;
          using sm86 = attention::decode_policy_sm86;
          using sm120 = attention::decode_policy_sm120;
          using k4v2 = k4v2_g128<128>;
          if (s.Hq == 16 * s.Hkv) {
            quant_run<k4v2, half_t, forced<nblock_split<sm80>>>("k4v2_g128_sm80_nsplit", s, f, false);
            quant_run<k4v2, half_t, forced<nblock_split<sm86>>>("k4v2_g128_sm86_nsplit", s, f, false);
            quant_run<k4v2, half_t, forced<nblock_split<sm120>>>("k4v2_g128_sm120_nsplit", s, f, false);
          }
          if ((s.B == 16 && s.L == 65536) || (s.B == 64 && s.L == 8192)) {
            quant_run<k4v2, half_t, forced<sm80>>("k4v2_g128_sm80_mq8", s, f, false, false, 8);
            quant_run<k4v2, half_t, forced<nblock_split<sm80>>>("k4v2_g128_sm80_mq8_nsplit", s, f, false, false, 8);
            quant_run<k4v2, half_t, forced<sm86>>("k4v2_g128_sm86_mq8", s, f, false, false, 8);
            quant_run<k4v2, half_t, forced<nblock_split<sm86>>>("k4v2_g128_sm86_mq8_nsplit", s, f, false, false, 8);
          }
        }
      }
      // the fused merge against the merge kernel (same run): small batches, 16 x 64K, ragged, and
      // 128 x 4K / 64 x 8K (one chunk per unit: no merge work in the fused path)
      if (s.B <= 4 || (s.B == 16 && s.L == 65536) || s.name == "ragged32" || (s.B == 128 && s.L == 4096) ||
          (s.B == 64 && s.L == 8192)) {
        quant_run<k4v2_g128<128>, half_t, fused_merge_policy>("k4v2_g128_fused", s, f, false);
      }
      if (s.Hq == 16 * s.Hkv) {
        quant_run<k4v2_g128<128>, half_t, rows8_policy>("k4v2_g128_rows8", s, f, false);
        quant_run<k4v2_g128<128>, half_t, wide2_policy>("k4v2_g128_wide2", s, f, false);
        quant_run<k4v2_g128<128>, half_t, nblock_split_policy>("k4v2_g128_nsplit", s, f, false);
        quant_run<k4v2_g128<128>, half_t, no_exchange_policy>("k4v2_g128_noxchg", s, f, false);
      }
      if (quick) continue;
      if (s.B == 16 && s.L == 65536) {
        quant_run<k4v4_g128<128>>("k4v4_g128", s, f, false);
        quant_run<k2v2_g128<128>>("k2v2_g128", s, f, false);
        quant_run<k4v2_g128<128, fp16_scales>>("k4v2_g128_fp16s", s, f, false);
        quant_run<k4v2_g128<128>, bfloat16_t>("k4v2_g128_bf16q", s, f, false);
        quant_run<k4v2_g128<128>>("k4v2_g128_sink", s, f, false, true);
      }
      // Multi-query (speculative verification): 2, 4 and 8 new tokens per sequence at batch 1, 16 and
      // 64, and ragged 1-8 new tokens per sequence, planned with the host counts and at the bound of 8
      // for every sequence.
      if ((s.B == 16 && s.L == 65536) || (s.B == 1 && s.L == 65536) || (s.B == 64 && s.L == 8192)) {
        quant_run<k4v2_g128<128>>("k4v2_g128_mq2", s, f, false, false, 2);
        quant_run<k4v2_g128<128>>("k4v2_g128_mq4", s, f, false, false, 4);
        quant_run<k4v2_g128<128>>("k4v2_g128_mq8", s, f, false, false, 8);
        quant_run<k4v2_g128<128>, half_t, nblock_split_policy>("k4v2_g128_mq4_nsplit", s, f, false, false, 4);
        quant_run<k4v2_g128<128>, half_t, nblock_split_policy>("k4v2_g128_mq8_nsplit", s, f, false, false, 8);
        quant_run<k4v2_g128<128>, half_t, no_exchange_policy>("k4v2_g128_mq8_noxchg", s, f, false, false, 8);
      }
      if ((s.B == 16 && s.L == 65536) || !s.name.empty()) {
        quant_run<k4v2_g128<128>>("k4v2_g128_mqr", s, f, false, false, 8, true);
        quant_run<k4v2_g128<128>>("k4v2_g128_mqr_bound", s, f, false, false, 8, true, true);
      }
    }
  }
  std::printf("\nsummary\n");
  std::printf(hdr, "kernel", "B", "Hq", "Hkv", "D", "tokens", "lengths", "chunks", "us", "GB/s", "ceil%", "MB", "vs fp16");
  for (const auto& r : g_results) print_result(r);
  if (!opt.json.empty()) {
    std::vector<kvtile_bench::attention_row> rows;
    for (const result& r : g_results)
      rows.push_back({r.kernel, r.s.name.empty() ? "uniform" : r.s.name, r.s.B, r.s.Hq, r.s.Hkv, r.s.D, r.s.L,
                      r.chunks, r.s.tokens(), r.us, r.bytes, r.gbs, r.frac, r.speedup, r.s.sweep});
    if (!kvtile_bench::write_json(opt.json, prop.name, g_ceiling, g_iters, rows)) {
      std::fprintf(stderr, "cannot write %s\n", opt.json.c_str());
      return 1;
    }
  }
  cudaFree(g_flush);
  return 0;
}
