// tests/device/attention_common.cuh: shared harness of the decode-attention tests
// (tests/device/attention*.cu). The quantized cache is built on the HOST with the
// host codec (tile_codec::encode), uploaded, decoded by the kernel and compared
// with an fp64 reference computed on the DEQUANTIZED cache (tile_codec::decode_*
// in the rotated frame, plus the fp16 tail and sink) with the rotated query.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/kvtile.hpp>

#include "device_test.cuh"

namespace attn_test {

using namespace kvtile;

inline int g_passed = 0, g_failed = 0;
inline double g_max_rel = 0.0;  // max per-row relative error vs the dequantized reference

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

#define ATTN_CUDA(expr)                                                                               \
  do {                                                                                                \
    cudaError_t e_ = (expr);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      std::printf("FAILED: %s: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, __LINE__);    \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

using kvtest::attend;
using kvtest::fwht_d;
using kvtest::rel_err;
using kvtest::require_device;

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  dbuf() = default;
  explicit dbuf(std::size_t count) { alloc(count); }
  void alloc(std::size_t count) {
    free();
    n = count;
    if (count) ATTN_CUDA(cudaMalloc(&p, count * sizeof(T)));
  }
  void upload(const std::vector<T>& h) {
    alloc(h.size());
    if (n) ATTN_CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    if (n) ATTN_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void free() {
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
  }
  ~dbuf() { free(); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
};

struct case_cfg {
  int num_seqs = 2;
  int kv_heads = 2;
  int group = 4;
  bool sink = false;
  std::vector<int> lens;
  int num_splits = 0;
  bool bf16 = false;
  std::uint64_t seed = 1;
};

// Original (unrotated) K/V, fp16 values, per (seq, head): [len][D].
struct original_kv {
  std::vector<std::vector<half_t>> k, v;  // index seq * H + h
};

// The host model of a quantized paged cache plus its device copy.
template <class Codec>
struct quant_cache {
  static constexpr int D = Codec::D, G = Codec::G;
  int S = 0, H = 0, max_pages = 0, num_pages = 0;
  bool sink = false;
  std::vector<std::uint8_t> pages;
  std::vector<std::int32_t> ptab, lens;
  std::vector<half_t> tail_k, tail_v, sink_k, sink_v;
  dbuf<std::uint8_t> d_pages;
  dbuf<std::int32_t> d_ptab, d_lens;
  dbuf<half_t> d_tail_k, d_tail_v, d_sink_k, d_sink_v;

  paged_cache_view view() {
    paged_cache_view v;
    v.pages = d_pages.p;
    v.page_table = d_ptab.p;
    v.seq_lens = d_lens.p;
    v.tail_k = d_tail_k.p;
    v.tail_v = d_tail_v.p;
    v.sink_k = sink ? d_sink_k.p : nullptr;
    v.sink_v = sink ? d_sink_v.p : nullptr;
    v.num_seqs = S;
    v.kv_heads = H;
    v.head_dim = D;
    v.tile_tokens = G;
    v.max_pages_per_seq = max_pages;
    v.num_pages = num_pages;
    v.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
    return v;
  }

  // Moves every used page to a new random place (same content), for the placement test.
  void shuffle_pages(std::mt19937_64& rng) {
    std::vector<std::int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<std::uint8_t> np(pages.size());
    const std::size_t pb = static_cast<std::size_t>(H) * Codec::record_bytes;
    for (int p = 0; p < num_pages; ++p) std::memcpy(np.data() + perm[p] * pb, pages.data() + p * pb, pb);
    pages.swap(np);
    for (auto& e : ptab)
      if (e >= 0) e = perm[e];
    d_pages.upload(pages);
    d_ptab.upload(ptab);
  }
};

inline std::vector<half_t> random_tokens(int n, int D, std::mt19937_64& rng, double outlier_scale) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> chan_scale(D), chan_off(D);
  for (int d = 0; d < D; ++d) {
    chan_scale[d] = std::exp(0.5 * nd(rng));
    chan_off[d] = 0.3 * nd(rng);
  }
  for (int i = 0; i < 2; ++i) chan_scale[rng() % D] *= outlier_scale;  // a few outlier channels
  std::vector<half_t> out(static_cast<std::size_t>(n) * D);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(t) * D + d] = half_t(static_cast<float>(chan_off[d] + chan_scale[d] * nd(rng)));
  return out;
}

template <class Codec>
void build_cache(const case_cfg& c, std::mt19937_64& rng, quant_cache<Codec>& qc, original_kv& orig) {
  constexpr int D = Codec::D, G = Codec::G;
  const int S = c.num_seqs, H = c.kv_heads;
  qc.S = S;
  qc.H = H;
  qc.sink = c.sink;
  qc.lens.assign(c.lens.begin(), c.lens.end());
  int max_full = 0, total_full = 0;
  for (int L : c.lens) {
    max_full = std::max(max_full, L / G);
    total_full += L / G;
  }
  qc.max_pages = std::max(1, max_full);
  qc.num_pages = total_full + 3;  // a few unused pages
  qc.pages.assign(static_cast<std::size_t>(qc.num_pages) * H * Codec::record_bytes, 0xA5);
  qc.ptab.assign(static_cast<std::size_t>(S) * qc.max_pages, -1);
  std::vector<std::int32_t> perm(qc.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int next = 0;
  const std::size_t tile_elems = static_cast<std::size_t>(G) * D;
  qc.tail_k.assign(static_cast<std::size_t>(S) * H * tile_elems, half_t(0.0f));
  qc.tail_v = qc.tail_k;
  // Unused tail slots hold NaN: the kernel must never let them reach the result.
  for (auto& x : qc.tail_k) x = half_t::from_bits(0x7e00);
  for (auto& x : qc.tail_v) x = half_t::from_bits(0x7e00);
  if (c.sink) {
    qc.sink_k.assign(static_cast<std::size_t>(S) * H * tile_elems, half_t(0.0f));
    qc.sink_v = qc.sink_k;
  }
  orig.k.assign(static_cast<std::size_t>(S) * H, {});
  orig.v.assign(static_cast<std::size_t>(S) * H, {});
  for (int s = 0; s < S; ++s) {
    const int L = c.lens[s];
    for (int i = 0; i < L / G; ++i) qc.ptab[static_cast<std::size_t>(s) * qc.max_pages + i] = perm[next++];
  }
  auto* ws = new typename Codec::workspace;
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      const int L = c.lens[s];
      auto K = random_tokens(L, D, rng, 8.0);
      auto V = random_tokens(L, D, rng, 2.0);
      const int n_full = L / G;
      const std::size_t toff = (static_cast<std::size_t>(s) * H + h) * tile_elems;
      auto rotate_into = [&](const half_t* src, int n, half_t* dst) {
        float vec[D];
        for (int t = 0; t < n; ++t) {
          for (int d = 0; d < D; ++d) vec[d] = src[static_cast<std::size_t>(t) * D + d].to_float();
          hadamard::forward<D>(vec);
          for (int d = 0; d < D; ++d) dst[static_cast<std::size_t>(t) * D + d] = half_t(vec[d]);
        }
      };
      for (int i = 0; i < n_full; ++i) {
        const half_t* kt = K.data() + static_cast<std::size_t>(i) * tile_elems;
        const half_t* vt = V.data() + static_cast<std::size_t>(i) * tile_elems;
        if (c.sink && i == 0) {
          rotate_into(kt, G, qc.sink_k.data() + toff);
          rotate_into(vt, G, qc.sink_v.data() + toff);
          continue;
        }
        const int page = qc.ptab[static_cast<std::size_t>(s) * qc.max_pages + i];
        std::uint8_t* rec = qc.pages.data() + (static_cast<std::size_t>(page) * H + h) * Codec::record_bytes;
        const status st = Codec::encode(kt, D, vt, D, rec, ws);
        if (!ok(st)) {
          std::printf("FAILED: host encode: %s\n", to_string(st));
          std::exit(1);
        }
      }
      const int tail = L % G;
      rotate_into(K.data() + static_cast<std::size_t>(n_full) * tile_elems, tail, qc.tail_k.data() + toff);
      rotate_into(V.data() + static_cast<std::size_t>(n_full) * tile_elems, tail, qc.tail_v.data() + toff);
      orig.k[s * H + h] = std::move(K);
      orig.v[s * H + h] = std::move(V);
    }
  delete ws;
  qc.d_pages.upload(qc.pages);
  qc.d_ptab.upload(qc.ptab);
  qc.d_lens.upload(qc.lens);
  qc.d_tail_k.upload(qc.tail_k);
  qc.d_tail_v.upload(qc.tail_v);
  if (c.sink) {
    qc.d_sink_k.upload(qc.sink_k);
    qc.d_sink_v.upload(qc.sink_v);
  }
}

// Dequantized K/V of (seq, head) in the rotated frame, [len][D] doubles.
template <class Codec>
void dequantized_kv(const quant_cache<Codec>& qc, int s, int h, std::vector<double>& K, std::vector<double>& V) {
  constexpr int D = Codec::D, G = Codec::G;
  const int L = qc.lens[s], n_full = L / G;
  K.assign(static_cast<std::size_t>(L) * D, 0.0);
  V.assign(static_cast<std::size_t>(L) * D, 0.0);
  std::vector<float> tk(static_cast<std::size_t>(G) * D), tv(tk.size());
  const std::size_t toff = (static_cast<std::size_t>(s) * qc.H + h) * G * D;
  for (int i = 0; i < n_full; ++i) {
    if (qc.sink && i == 0) {
      for (std::size_t e = 0; e < tk.size(); ++e) {
        tk[e] = qc.sink_k[toff + e].to_float();
        tv[e] = qc.sink_v[toff + e].to_float();
      }
    } else {
      const int page = qc.ptab[static_cast<std::size_t>(s) * qc.max_pages + i];
      const std::uint8_t* rec = qc.pages.data() + (static_cast<std::size_t>(page) * qc.H + h) * Codec::record_bytes;
      const status a = Codec::decode_keys(rec, tk.data(), D, frame::rotated);
      const status b = Codec::decode_values(rec, tv.data(), D, frame::rotated);
      if (a != status::success || b != status::success) {
        std::printf("FAILED: host decode\n");
        std::exit(1);
      }
    }
    for (std::size_t e = 0; e < tk.size(); ++e) {
      K[static_cast<std::size_t>(i) * G * D + e] = tk[e];
      V[static_cast<std::size_t>(i) * G * D + e] = tv[e];
    }
  }
  for (int t = 0; t < L % G; ++t)
    for (int d = 0; d < D; ++d) {
      K[(static_cast<std::size_t>(n_full) * G + t) * D + d] = qc.tail_k[toff + static_cast<std::size_t>(t) * D + d].to_float();
      V[(static_cast<std::size_t>(n_full) * G + t) * D + d] = qc.tail_v[toff + static_cast<std::size_t>(t) * D + d].to_float();
    }
}

struct run_result {
  std::vector<double> out;  // [S][Hq][D]
  std::vector<float> lse;
};

template <class Codec, class QT, class Policy = attention::decode_policy>
run_result run_quant(quant_cache<Codec>& qc, const std::vector<QT>& q, int q_heads, float scale, int num_splits,
                     kvtile::status* st_out = nullptr) {
  paged_cache_view v = qc.view();
  dbuf<QT> dq;
  dq.upload(q);
  dbuf<QT> dout(q.size());
  dbuf<float> dlse(static_cast<std::size_t>(qc.S) * q_heads);
  ATTN_CUDA(cudaMemset(dout.p, 0xFF, q.size() * sizeof(QT)));  // poison: NaN
  attention::decode_args<QT> a;
  a.q = dq.p;
  a.out = dout.p;
  a.lse = dlse.p;
  a.q_heads = q_heads;
  a.softmax_scale = scale;
  a.num_splits = num_splits;
  const std::size_t wsb = attention::workspace_bytes<Codec>(v, q_heads, num_splits);
  dbuf<std::uint8_t> ws(wsb);
  a.workspace = ws.p;
  a.workspace_bytes = wsb;
  const status st = attention::paged_decode<Codec, Policy>(v, a);
  if (st_out) *st_out = st;
  run_result r;
  if (st != status::success) {
    check(false, std::string("paged_decode returned ") + to_string(st));
    return r;
  }
  ATTN_CUDA(cudaDeviceSynchronize());
  ATTN_CUDA(cudaGetLastError());
  auto ho = dout.download();
  r.out.resize(ho.size());
  for (std::size_t i = 0; i < ho.size(); ++i) r.out[i] = ho[i].to_float();
  r.lse = dlse.download();
  return r;
}

template <class QT>
std::vector<QT> random_queries(int n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<QT> q(n);
  for (auto& x : q) x = QT(nd(rng));
  return q;
}

// Error of the kernel's output against unquantized fp16 attention over a case:
// the worst row's relative L2 error, and the aggregate ||O - O16||_F / ||O16||_F
// over all rows (the worst row is dominated by rows whose exact output is
// nearly 0: diffuse attention over random values).
struct fp16_error {
  double max_row = 0;
  double err2 = 0, ref2 = 0;  // sums over rows: ||O - O16||^2 and ||O16||^2
  double aggregate() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0; }
  void merge(const fp16_error& o) {
    max_row = std::max(max_row, o.max_row);
    err2 += o.err2;
    ref2 += o.ref2;
  }
};

// One case of the accuracy sweep: compares against the fp64 reference on the
// dequantized cache (pass/fail, tolerance 1e-3 per row) and reports the error
// against unquantized fp16 attention (returned).
template <class Codec, class QT, class Policy = attention::decode_policy>
fp16_error accuracy_case(const case_cfg& c, const char* name) {
  constexpr int D = Codec::D;
  std::mt19937_64 rng(c.seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const int Hq = c.kv_heads * c.group;
  auto q = random_queries<QT>(c.num_seqs * Hq * D, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  run_result r = run_quant<Codec, QT, Policy>(qc, q, Hq, scale, c.num_splits);
  if (r.out.empty()) return {};
  double max_rel = 0, max_lse = 0;
  fp16_error e16;
  bool finite = true;
  std::vector<double> K, V, Ko, Vo;
  std::vector<double> qd(D), qr(D), o(D), oref(D), oref16(D);
  for (int s = 0; s < c.num_seqs; ++s)
    for (int h = 0; h < c.kv_heads; ++h) {
      dequantized_kv<Codec>(qc, s, h, K, V);
      const int L = c.lens[s];
      Ko.assign(static_cast<std::size_t>(L) * D, 0);
      Vo.assign(Ko.size(), 0);
      for (std::size_t e = 0; e < Ko.size(); ++e) {
        Ko[e] = orig.k[s * c.kv_heads + h][e].to_float();
        Vo[e] = orig.v[s * c.kv_heads + h][e].to_float();
      }
      for (int g = 0; g < c.group; ++g) {
        const int qh = h * c.group + g;
        const std::size_t row = static_cast<std::size_t>(s) * Hq + qh;
        for (int d = 0; d < D; ++d) qd[d] = q[row * D + d].to_float();
        qr = qd;
        fwht_d(qr.data(), D);
        const double lse_ref = attend(qr.data(), K, V, L, D, scale, o.data());
        fwht_d(o.data(), D);  // un-rotate
        attend(qd.data(), Ko, Vo, L, D, scale, oref16.data());
        const double* got = r.out.data() + row * D;
        for (int d = 0; d < D; ++d) finite = finite && std::isfinite(got[d]);
        const double e1 = rel_err(got, o.data(), D);
        max_rel = std::max(max_rel, e1);
        if (L > 0) {
          e16.max_row = std::max(e16.max_row, rel_err(got, oref16.data(), D));
          for (int d = 0; d < D; ++d) {
            e16.err2 += (got[d] - oref16[d]) * (got[d] - oref16[d]);
            e16.ref2 += oref16[d] * oref16[d];
          }
          max_lse = std::max(max_lse, std::fabs(static_cast<double>(r.lse[row]) - lse_ref));
        } else {
          finite = finite && std::isinf(r.lse[row]) && r.lse[row] < 0;
        }
      }
    }
  // The output is stored in the query type: a bf16 output alone carries up to
  // 2^-9 relative rounding error, so bf16 cases get that on top of 1e-3.
  const bool bf16_out = std::is_same_v<QT, bfloat16_t>;
  const double tol = bf16_out ? 1e-3 + 1.0 / 512 : 1e-3;
  if (!bf16_out) g_max_rel = std::max(g_max_rel, max_rel);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s D=%d G=%d group=%d sink=%d seqs=%d: rel err vs dequantized %.2e (tol %.2g), lse err %.1e",
                name, D, Codec::G, c.group, c.sink ? 1 : 0, c.num_seqs, max_rel, tol, max_lse);
  std::printf("  %s\n", buf);
  check(finite && max_rel <= tol && max_lse <= 1e-3, buf);
  return e16;
}

// fp16 baseline vs fp64 on the same fp16 data (original frame). max_ctas > 0:
// through a plan limited to that many CTAs (several chunks per CTA).
template <int D, class Policy = attention::decode_policy>
void fp16_baseline_test(const std::vector<int>& lens, int group, std::uint64_t seed, int max_ctas = 0) {
  constexpr int PT = attention::fp16_kernel_traits<D>::page_tokens;
  const int S = static_cast<int>(lens.size()), H = 2, Hq = H * group;
  std::mt19937_64 rng(seed);
  int max_pages = 1, total = 0;
  for (int L : lens) {
    max_pages = std::max(max_pages, (L + PT - 1) / PT);
    total += (L + PT - 1) / PT;
  }
  const int num_pages = total + 2;
  std::vector<std::int32_t> perm(num_pages), ptab(static_cast<std::size_t>(S) * max_pages, -1);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int next = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < (lens[s] + PT - 1) / PT; ++i) ptab[static_cast<std::size_t>(s) * max_pages + i] = perm[next++];
  const std::size_t blk = static_cast<std::size_t>(PT) * D;
  std::vector<half_t> hk(static_cast<std::size_t>(num_pages) * H * blk, half_t::from_bits(0x7e00)), hv = hk;
  std::vector<std::vector<double>> K(S * H), V(S * H);
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      auto k = random_tokens(lens[s], D, rng, 8.0), v = random_tokens(lens[s], D, rng, 2.0);
      K[s * H + h].resize(k.size());
      V[s * H + h].resize(v.size());
      for (std::size_t e = 0; e < k.size(); ++e) {
        K[s * H + h][e] = k[e].to_float();
        V[s * H + h][e] = v[e].to_float();
      }
      for (int t = 0; t < lens[s]; ++t) {
        const int page = ptab[static_cast<std::size_t>(s) * max_pages + t / PT];
        const std::size_t off = (static_cast<std::size_t>(page) * H + h) * blk + static_cast<std::size_t>(t % PT) * D;
        std::copy(k.begin() + static_cast<std::size_t>(t) * D, k.begin() + static_cast<std::size_t>(t + 1) * D, hk.begin() + off);
        std::copy(v.begin() + static_cast<std::size_t>(t) * D, v.begin() + static_cast<std::size_t>(t + 1) * D, hv.begin() + off);
      }
    }
  dbuf<half_t> dk, dv;
  dk.upload(hk);
  dv.upload(hv);
  dbuf<std::int32_t> dpt, dl;
  dpt.upload(ptab);
  std::vector<std::int32_t> l32(lens.begin(), lens.end());
  dl.upload(l32);
  fp16_paged_cache_view fv;
  fv.k = dk.p;
  fv.v = dv.p;
  fv.page_table = dpt.p;
  fv.seq_lens = dl.p;
  fv.num_seqs = S;
  fv.kv_heads = H;
  fv.head_dim = D;
  fv.page_tokens = PT;
  fv.max_pages_per_seq = max_pages;
  fv.num_pages = num_pages;
  auto q = random_queries<half_t>(S * Hq * D, rng);
  dbuf<half_t> dq, dout(q.size());
  dq.upload(q);
  ATTN_CUDA(cudaMemset(dout.p, 0xFF, q.size() * 2));
  attention::decode_args<half_t> a;
  a.q = dq.p;
  a.out = dout.p;
  a.q_heads = Hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::size_t wsb = attention::workspace_bytes_fp16<D>(fv, Hq);
  dbuf<std::uint8_t> ws(wsb);
  a.workspace = ws.p;
  a.workspace_bytes = wsb;
  attention::decode_plan plan;
  status st = status::success;
  if (max_ctas > 0) {
    plan.limit_ctas(max_ctas);
    st = plan.plan_fp16<D, Policy>(fv, l32.data(), a);
    check(st == status::success, "fp16 baseline plan");
    if (st == status::success) st = plan.run_fp16<D, Policy>(fv, a);
  } else {
    st = attention::paged_decode_fp16<D, Policy>(fv, a);
  }
  check(st == status::success, "fp16 baseline launch");
  ATTN_CUDA(cudaDeviceSynchronize());
  auto ho = dout.download();
  double worst = 0;
  bool finite = true;
  std::vector<double> qd(D), o(D), got(D);
  for (int s = 0; s < S; ++s)
    for (int qh = 0; qh < Hq; ++qh) {
      const std::size_t row = static_cast<std::size_t>(s) * Hq + qh;
      for (int d = 0; d < D; ++d) {
        qd[d] = q[row * D + d].to_float();
        got[d] = ho[row * D + d].to_float();
        finite = finite && std::isfinite(got[d]);
      }
      attend(qd.data(), K[s * H + qh / group], V[s * H + qh / group], lens[s], D, a.softmax_scale, o.data());
      worst = std::max(worst, rel_err(got.data(), o.data(), D));
    }
  g_max_rel = std::max(g_max_rel, worst);
  char buf[160];
  if (max_ctas > 0)
    std::snprintf(buf, sizeof buf, "fp16 baseline D=%d group=%d plan(%d CTAs, %d chunks): rel err vs fp64 %.2e (tol 1e-3)", D,
                  group, plan.ctas(), plan.chunks(), worst);
  else
    std::snprintf(buf, sizeof buf, "fp16 baseline D=%d group=%d: rel err vs fp64 %.2e (tol 1e-3)", D, group, worst);
  check(finite && worst <= 1e-3, buf);
  std::printf("  %s\n", buf);
}

}  // namespace attn_test
