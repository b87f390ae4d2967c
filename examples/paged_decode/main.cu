// examples/paged_decode/main.cu: build a small quantized paged KV cache on the
// host (kvtile's host codec), run one decode step of attention on the GPU,
// check it against an fp64 reference on the dequantized cache and time it.
//
// Build: nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//          -I include examples/paged_decode/main.cu -o paged_decode
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/kvtile.hpp>

using namespace kvtile;
using Codec = presets::k4v2_g128<128>;  // D = 128, G = 128, fp8_scales

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::printf("CUDA error: %s (%s)\n", cudaGetErrorString(e), #x);               \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  constexpr int D = Codec::D, G = Codec::G;
  const int S = 2, H = 4, group = 4, Hq = H * group;
  const std::vector<int> lens = {1000, 300};  // 7 full tiles + 104-token tail; 2 tiles + 44
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);

  // 1. Host: encode full tiles into records, keep the rest as a rotated fp16 tail.
  const int max_pages = 8;
  int num_pages = 0;
  std::vector<int> ptab(S * max_pages, 0);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < lens[s] / G; ++i) ptab[s * max_pages + i] = num_pages++;
  std::vector<std::uint8_t> pages(static_cast<size_t>(num_pages) * H * Codec::record_bytes);
  std::vector<half_t> tail_k(static_cast<size_t>(S) * H * G * D, half_t(0.0f)), tail_v = tail_k;
  std::vector<std::vector<float>> K(S * H), V(S * H);  // dequantized, rotated frame (for the check)
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      std::vector<half_t> k(static_cast<size_t>(lens[s]) * D), v(k.size());
      for (auto& x : k) x = half_t(nd(rng));
      for (auto& x : v) x = half_t(nd(rng));
      auto& kd = K[s * H + h];
      auto& vd = V[s * H + h];
      kd.resize(k.size());
      vd.resize(v.size());
      const int full = lens[s] / G;
      for (int i = 0; i < full; ++i) {
        std::uint8_t* rec = pages.data() + (static_cast<size_t>(ptab[s * max_pages + i]) * H + h) * Codec::record_bytes;
        const status se =
            Codec::encode(k.data() + static_cast<size_t>(i) * G * D, D, v.data() + static_cast<size_t>(i) * G * D, D, rec);
        const status sk = Codec::decode_keys(rec, kd.data() + static_cast<size_t>(i) * G * D, D, frame::rotated);
        const status sv = Codec::decode_values(rec, vd.data() + static_cast<size_t>(i) * G * D, D, frame::rotated);
        if (!ok(se) || sk != status::success || sv != status::success) {
          std::printf("host codec: %s / %s / %s\n", to_string(se), to_string(sk), to_string(sv));
          return 1;
        }
      }
      for (int t = full * G; t < lens[s]; ++t) {
        float kv[D], vv[D];
        for (int d = 0; d < D; ++d) {
          kv[d] = k[static_cast<size_t>(t) * D + d].to_float();
          vv[d] = v[static_cast<size_t>(t) * D + d].to_float();
        }
        hadamard::forward<D>(kv);
        hadamard::forward<D>(vv);
        const size_t off = ((static_cast<size_t>(s) * H + h) * G + (t - full * G)) * D;
        for (int d = 0; d < D; ++d) {
          tail_k[off + d] = half_t(kv[d]);
          tail_v[off + d] = half_t(vv[d]);
          kd[static_cast<size_t>(t) * D + d] = tail_k[off + d].to_float();
          vd[static_cast<size_t>(t) * D + d] = tail_v[off + d].to_float();
        }
      }
    }
  std::vector<half_t> q(static_cast<size_t>(S) * Hq * D);
  for (auto& x : q) x = half_t(nd(rng));

  // 2. Upload and describe the cache.
  std::uint8_t* d_pages;
  int *d_ptab, *d_lens;
  half_t *d_tk, *d_tv, *d_q, *d_out;
  float* d_lse;
  CK(cudaMalloc(&d_pages, pages.size()));
  CK(cudaMalloc(&d_ptab, ptab.size() * 4));
  CK(cudaMalloc(&d_lens, lens.size() * 4));
  CK(cudaMalloc(&d_tk, tail_k.size() * 2));
  CK(cudaMalloc(&d_tv, tail_v.size() * 2));
  CK(cudaMalloc(&d_q, q.size() * 2));
  CK(cudaMalloc(&d_out, q.size() * 2));
  CK(cudaMalloc(&d_lse, S * Hq * 4));
  CK(cudaMemcpy(d_pages, pages.data(), pages.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_ptab, ptab.data(), ptab.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_tk, tail_k.data(), tail_k.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_tv, tail_v.data(), tail_v.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  paged_cache_view cache;
  cache.pages = d_pages;
  cache.page_table = d_ptab;
  cache.seq_lens = d_lens;
  cache.tail_k = d_tk;
  cache.tail_v = d_tv;
  cache.num_seqs = S;
  cache.kv_heads = H;
  cache.head_dim = D;
  cache.tile_tokens = G;
  cache.max_pages_per_seq = max_pages;
  cache.num_pages = num_pages;
  cache.record_bytes = Codec::record_bytes;

  // 3. Decode.
  attention::decode_args<half_t> a;
  a.q = d_q;
  a.out = d_out;
  a.lse = d_lse;
  a.q_heads = Hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.workspace_bytes = attention::workspace_bytes<Codec>(cache, Hq);
  CK(cudaMalloc(&a.workspace, a.workspace_bytes));
  // plan: from the host copy of the lengths (balanced chunks over the SMs, the
  // work list copied into the workspace); run: the kernels (capturable in a
  // CUDA graph). attention::paged_decode<Codec>(cache, a) does both in one call
  // without host lengths (uniform splits).
  attention::decode_plan plan;
  status st = plan.plan<Codec>(cache, lens.data(), a);
  if (st == status::success) st = plan.run<Codec>(cache, a);
  if (st != status::success) {
    std::printf("decode_plan: %s\n", to_string(st));
    return 1;
  }
  CK(cudaDeviceSynchronize());
  std::vector<half_t> out(q.size());
  CK(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));

  // 4. Check: fp64 attention with the rotated query on the dequantized cache, un-rotated.
  double worst = 0;
  for (int s = 0; s < S; ++s)
    for (int qh = 0; qh < Hq; ++qh) {
      const auto& kd = K[s * H + qh / group];
      const auto& vd = V[s * H + qh / group];
      float qr[D];
      for (int d = 0; d < D; ++d) qr[d] = q[(static_cast<size_t>(s) * Hq + qh) * D + d].to_float();
      hadamard::forward<D>(qr);
      std::vector<double> sc(lens[s]);
      double mx = -1e300, sum = 0, o[D] = {};
      for (int t = 0; t < lens[s]; ++t) {
        double acc = 0;
        for (int d = 0; d < D; ++d) acc += static_cast<double>(qr[d]) * kd[static_cast<size_t>(t) * D + d];
        sc[t] = acc * a.softmax_scale;
        mx = std::max(mx, sc[t]);
      }
      for (int t = 0; t < lens[s]; ++t) {
        const double p = std::exp(sc[t] - mx);
        sum += p;
        for (int d = 0; d < D; ++d) o[d] += p * vd[static_cast<size_t>(t) * D + d];
      }
      float of[D];
      for (int d = 0; d < D; ++d) of[d] = static_cast<float>(o[d] / sum);
      hadamard::inverse<D>(of);
      double num = 0, den = 0;
      for (int d = 0; d < D; ++d) {
        const double g = out[(static_cast<size_t>(s) * Hq + qh) * D + d].to_float();
        num += (g - of[d]) * (g - of[d]);
        den += static_cast<double>(of[d]) * of[d];
      }
      worst = std::max(worst, std::sqrt(num / den));
    }

  // 5. Time (warm L2: this cache is tiny; see bench/device/attention.cu for real numbers).
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 10; ++i) (void)plan.run<Codec>(cache, a);
  cudaEventRecord(e0);
  for (int i = 0; i < 100; ++i) (void)plan.run<Codec>(cache, a);
  cudaEventRecord(e1);
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  std::printf("k4v2_g128 decode: %d seqs x %d q heads (%d KV heads), D=%d, lens {%d, %d}\n", S, Hq, H, D, lens[0], lens[1]);
  std::printf("max relative error vs fp64 on the dequantized cache: %.2e (%s)\n", worst, worst <= 1e-3 ? "ok" : "TOO LARGE");
  std::printf("time per decode step (average of 100, warm): %.2f us\n", 1000.0f * ms / 100);
  return worst <= 1e-3 ? 0 : 1;
}
