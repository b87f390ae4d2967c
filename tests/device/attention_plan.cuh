// tests/device/attention_plan.cuh: the decode_plan tests of tests/device/attention.cu
// (one translation unit for both, to compile the kernels once): plan/run against
// fp64 on the dequantized cache: ragged lengths (0, 1, inside a tile, long),
// window and soft-cap (both paths), the stage pool with several chunks per CTA,
// forced chunk counts, PDL on/off, CUDA-graph capture of run() replayed with
// changing lengths, and a corrupt page table that the context survives.
#pragma once

#include "attention_common.cuh"

namespace attn_plan_test {

using namespace attn_test;
using kvtile::half_t;

struct mods {
  int window_left = -1;
  float softcap = 0.0f;
};

// fp64 attention of one query row over K/V [L][D] with the window and soft-cap
// of decode_args (the query at position L - 1); returns lse.
double attend_mod(const double* q, const std::vector<double>& K, const std::vector<double>& V, int L, int D,
                  double scale, const mods& m, double* out) {
  for (int d = 0; d < D; ++d) out[d] = 0.0;
  const int lo = (m.window_left >= 0 && L - 1 - m.window_left > 0) ? L - 1 - m.window_left : 0;
  if (L <= 0) return -INFINITY;
  std::vector<double> sc(L, -INFINITY);
  double mx = -INFINITY;
  for (int t = lo; t < L; ++t) {
    double acc = 0;
    for (int d = 0; d < D; ++d) acc += q[d] * K[static_cast<std::size_t>(t) * D + d];
    double s = acc * scale;
    if (m.softcap > 0) s = m.softcap * std::tanh(s / m.softcap);
    sc[t] = s;
    mx = std::max(mx, s);
  }
  double sum = 0;
  for (int t = lo; t < L; ++t) {
    const double p = std::exp(sc[t] - mx);
    sum += p;
    for (int d = 0; d < D; ++d) out[d] += p * V[static_cast<std::size_t>(t) * D + d];
  }
  for (int d = 0; d < D; ++d) out[d] /= sum;
  return mx + std::log(sum);
}

// Device buffers of one decode step (queries, outputs, lse, workspace).
template <class Codec>
struct step {
  dbuf<half_t> q, out;
  dbuf<float> lse;
  dbuf<std::uint8_t> ws;
  attention::decode_args<half_t> a;
  std::vector<half_t> hq;
  step(quant_cache<Codec>& qc, int Hq, std::mt19937_64& rng, const mods& m, int num_splits = 0) {
    hq = random_queries<half_t>(qc.S * Hq * Codec::D, rng);
    q.upload(hq);
    out.alloc(hq.size());
    lse.alloc(static_cast<std::size_t>(qc.S) * Hq);
    a.q = q.p;
    a.out = out.p;
    a.lse = lse.p;
    a.q_heads = Hq;
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(Codec::D));
    a.num_splits = num_splits;
    a.window_left = m.window_left;
    a.logit_softcap = m.softcap;
    a.workspace_bytes = attention::workspace_bytes<Codec>(qc.view(), Hq, num_splits);
    ws.alloc(a.workspace_bytes);
    a.workspace = ws.p;
  }
  void poison() { ATTN_CUDA(cudaMemset(out.p, 0xFF, out.n * sizeof(half_t))); }
};

// Max relative error of the step's output against fp64 on the dequantized
// cache (qc.lens); checks finiteness and lse (-inf for empty rows).
template <class Codec>
double check_step(quant_cache<Codec>& qc, step<Codec>& st, const mods& m, const std::string& name) {
  constexpr int D = Codec::D;
  ATTN_CUDA(cudaDeviceSynchronize());
  const auto ho = st.out.download();
  const auto hl = st.lse.download();
  const int Hq = st.a.q_heads, group = Hq / qc.H;
  double worst = 0, worst_lse = 0;
  bool finite = true;
  std::vector<double> K, V, qr(D), o(D);
  for (int s = 0; s < qc.S; ++s)
    for (int h = 0; h < qc.H; ++h) {
      dequantized_kv<Codec>(qc, s, h, K, V);
      for (int g = 0; g < group; ++g) {
        const std::size_t row = static_cast<std::size_t>(s) * Hq + h * group + g;
        for (int d = 0; d < D; ++d) qr[d] = st.hq[row * D + d].to_float();
        fwht_d(qr.data(), D);
        const double lref = attend_mod(qr.data(), K, V, qc.lens[s], D, st.a.softmax_scale, m, o.data());
        fwht_d(o.data(), D);
        std::vector<double> got(D);
        for (int d = 0; d < D; ++d) {
          got[d] = ho[row * D + d].to_float();
          finite = finite && std::isfinite(got[d]);
        }
        worst = std::max(worst, rel_err(got.data(), o.data(), D));
        if (qc.lens[s] > 0) {
          worst_lse = std::max(worst_lse, std::fabs(static_cast<double>(hl[row]) - lref));
        } else {
          finite = finite && std::isinf(hl[row]) && hl[row] < 0;
        }
      }
    }
  g_max_rel = std::max(g_max_rel, worst);
  char buf[400];
  std::snprintf(buf, sizeof buf, "%s: rel err vs fp64 %.2e (tol 1e-3), lse err %.1e", name.c_str(), worst, worst_lse);
  std::printf("  %s\n", buf);
  check(finite && worst <= 1e-3 && worst_lse <= 1e-3, buf);
  return worst;
}

template <class Codec, class Policy = attention::decode_policy>
void plan_case(std::vector<int> lens, int kv_heads, int group, bool sink, const mods& m, std::uint64_t seed,
               const char* name, bool also_one_call = true, int max_ctas = 0, int expect_pool = -1) {
  case_cfg c;
  c.num_seqs = static_cast<int>(lens.size());
  c.kv_heads = kv_heads;
  c.group = group;
  c.sink = sink;
  c.lens = lens;
  std::mt19937_64 rng(seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  step<Codec> st(qc, kv_heads * group, rng, m);
  attention::decode_plan plan;
  plan.limit_ctas(max_ctas);
  st.poison();
  status s = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), st.a);
  if (expect_pool >= 0)
    check(plan.stage_pool() == (expect_pool == 1), std::string(name) + ": the planned kernel variant");
  check(s == status::success, std::string(name) + ": plan returns success (" + to_string(s) + ")");
  s = plan.run<Codec, Policy>(qc.view(), st.a);
  check(s == status::success, std::string(name) + ": run returns success (" + to_string(s) + ")");
  char buf[300];
  std::snprintf(buf, sizeof buf, "%s D=%d G=%d group=%d sink=%d window=%d cap=%g plan(%d CTAs, %d chunks, pool %d)",
                name, Codec::D, Codec::G, group, sink ? 1 : 0, m.window_left, m.softcap, plan.ctas(), plan.chunks(),
                plan.stage_pool() ? 1 : 0);
  check_step<Codec>(qc, st, m, buf);
  if (also_one_call) {
    st.poison();
    s = attention::paged_decode<Codec, Policy>(qc.view(), st.a);
    check(s == status::success, std::string(name) + ": paged_decode returns success");
    check_step<Codec>(qc, st, m, std::string(buf) + " one-call");
  }
}

// A plan and the one-call path on separate workspaces: the one-call launch
// between plan and run leaves the plan's work list intact (the contract of
// docs/attention.md, "Workspaces": one workspace per plan, another for
// paged_decode).
template <class Codec>
void separate_workspace_case() {
  case_cfg c;
  c.num_seqs = 4;
  c.kv_heads = 2;
  c.group = 4;
  c.sink = true;
  c.lens = {9 * Codec::G + 5, 1, 3 * Codec::G, 40 * Codec::G + 17};
  std::mt19937_64 rng(909);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const mods m{};
  step<Codec> planned(qc, 8, rng, m), other(qc, 8, rng, m);
  attention::decode_plan plan;
  check(plan.plan<Codec>(qc.view(), qc.lens.data(), planned.a) == status::success, "separate workspaces: plan");
  other.poison();
  check(attention::paged_decode<Codec>(qc.view(), other.a) == status::success,
        "separate workspaces: one-call path on its own workspace");
  planned.poison();
  check(plan.run<Codec>(qc.view(), planned.a) == status::success, "separate workspaces: run after the one-call path");
  check_step<Codec>(qc, planned, m, "separate workspaces: run after a one-call launch on another workspace");
  check_step<Codec>(qc, other, m, "separate workspaces: the one-call output");
}

// Forced chunk counts and PDL off change results only by fp32 merge rounding.
template <class Codec>
void invariance_case() {
  case_cfg c;
  c.num_seqs = 4;
  c.kv_heads = 2;
  c.group = 4;
  c.sink = true;
  c.lens = {9 * Codec::G + 17, 1, 0, 40 * Codec::G};
  std::mt19937_64 rng(91);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  step<Codec> base(qc, 8, rng, mods{}, 5);
  attention::decode_plan plan;
  check(plan.plan<Codec>(qc.view(), qc.lens.data(), base.a) == status::success, "plan (5 forced chunks)");
  check(plan.run<Codec>(qc.view(), base.a) == status::success, "run (5 forced chunks)");
  ATTN_CUDA(cudaDeviceSynchronize());
  const auto ref = base.out.download();
  double worst = 0;
  for (int splits : {1, 2, 0}) {
    for (bool pdl : {true, false}) {
      step<Codec> st(qc, 8, rng, mods{}, splits);
      ATTN_CUDA(cudaMemcpy(st.q.p, base.q.p, base.q.n * sizeof(half_t), cudaMemcpyDeviceToDevice));
      st.a.pdl = pdl;
      attention::decode_plan p2;
      check(p2.plan<Codec>(qc.view(), qc.lens.data(), st.a) == status::success, "plan");
      check(p2.run<Codec>(qc.view(), st.a) == status::success, "run");
      ATTN_CUDA(cudaDeviceSynchronize());
      const auto o = st.out.download();
      for (std::size_t i = 0; i < o.size(); ++i) {
        const double x = o[i].to_float(), y = ref[i].to_float();
        worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
      }
    }
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "plan: chunk counts 5/1/2/auto x PDL on/off: max difference %.2e (<= 2e-3)", worst);
  std::printf("  %s\n", buf);
  check(worst <= 2e-3, buf);
}

// run() captured once in a CUDA graph; new lengths (device and host) and a new
// plan before each replay; every replay checked against fp64.
template <class Codec, class Policy = attention::decode_policy>
void graph_case(bool small) {
  constexpr int G = Codec::G;
  case_cfg c;
  c.num_seqs = 5;
  c.kv_heads = 2;
  c.group = 4;
  c.sink = true;
  // Tails 5, 0, 100, 1, 50 tokens: a later length's tail must not be longer
  // than the built one (the tail slots past it hold NaN).
  const std::vector<int> full = {small ? 6 * G + 5 : 70 * G + 5, 3 * G, 2 * G + 100, (small ? 12 : 20) * G + 1, 50};
  c.lens = full;
  std::mt19937_64 rng(123);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const mods m{};
  step<Codec> st(qc, 8, rng, m);
  ATTN_CUDA(cudaDeviceSynchronize());  // legacy-stream uploads, which the non-blocking stream does not wait for
  cudaStream_t stream;
  ATTN_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  attention::decode_plan plan;
  check(plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), st.a, stream) == status::success, "graph: first plan");
  cudaGraph_t graph;
  ATTN_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const status rs = plan.run<Codec, Policy>(qc.view(), st.a, stream);
  ATTN_CUDA(cudaStreamEndCapture(stream, &graph));
  check(rs == status::success, std::string("graph: run captured (") + to_string(rs) + ")");
  cudaGraphExec_t exec;
  ATTN_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  // Lengths within the cache's capacity (every length <= the built one, so
  // every complete tile has a record): shrink, empty, one token, inside a tile.
  const std::vector<std::vector<int>> steps = {
      full,
      {full[0] - 3, G, 0, 10 * G + 1, 49},
      {G + 1, 3 * G, 2 * G, 0, 1},
      {full[0], 0, 2 * G + 99, G + 1, 0},
  };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    qc.lens.assign(steps[k].begin(), steps[k].end());
    ATTN_CUDA(cudaMemcpyAsync(qc.d_lens.p, qc.lens.data(), qc.lens.size() * sizeof(std::int32_t),
                              cudaMemcpyHostToDevice, stream));
    const status ps = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), st.a, stream);
    check(ps == status::success, "graph: re-plan with new lengths");
    ATTN_CUDA(cudaMemsetAsync(st.out.p, 0xFF, st.out.n * sizeof(half_t), stream));
    ATTN_CUDA(cudaGraphLaunch(exec, stream));
    ATTN_CUDA(cudaStreamSynchronize(stream));
    char name[100];
    std::snprintf(name, sizeof name, "graph replay %zu (%d chunks)", k, plan.chunks());
    check_step<Codec>(qc, st, m, name);
  }
  ATTN_CUDA(cudaGraphExecDestroy(exec));
  ATTN_CUDA(cudaGraphDestroy(graph));
  // The one-call path is capturable too (lengths read on the device).
  qc.lens = full;
  ATTN_CUDA(cudaMemcpy(qc.d_lens.p, qc.lens.data(), qc.lens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  ATTN_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const status os = attention::paged_decode<Codec, Policy>(qc.view(), st.a, stream);
  ATTN_CUDA(cudaStreamEndCapture(stream, &graph));
  check(os == status::success, "graph: paged_decode captured");
  ATTN_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  qc.lens = steps[1];
  ATTN_CUDA(cudaMemcpy(qc.d_lens.p, qc.lens.data(), qc.lens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  st.poison();
  ATTN_CUDA(cudaDeviceSynchronize());  // the copy and the memset (legacy stream) before the replay
  ATTN_CUDA(cudaGraphLaunch(exec, stream));
  ATTN_CUDA(cudaStreamSynchronize(stream));
  check_step<Codec>(qc, st, m, "graph replay of paged_decode with new lengths");
  ATTN_CUDA(cudaGraphExecDestroy(exec));
  ATTN_CUDA(cudaGraphDestroy(graph));
  ATTN_CUDA(cudaStreamDestroy(stream));
}

// Out-of-range page ids in the device page table: the kernel skips those tiles
// (nothing out of bounds), the launch succeeds, the context survives and the
// next decode on a repaired table is correct.
template <class Codec>
void corrupt_table_case() {
  constexpr int G = Codec::G;
  case_cfg c;
  c.num_seqs = 3;
  c.kv_heads = 2;
  c.group = 2;
  c.lens = {10 * G + 3, 4 * G, 200 * G};
  std::mt19937_64 rng(5);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  step<Codec> st(qc, 4, rng, mods{});
  std::vector<std::int32_t> bad = qc.ptab;
  bad[2] = 1 << 30;
  bad[static_cast<std::size_t>(qc.max_pages) + 1] = -7;
  bad[2 * static_cast<std::size_t>(qc.max_pages) + 150] = qc.num_pages;  // one past the end
  ATTN_CUDA(cudaMemcpy(qc.d_ptab.p, bad.data(), bad.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  attention::decode_plan plan;
  check(plan.plan<Codec>(qc.view(), qc.lens.data(), st.a) == status::success, "corrupt table: plan");
  check(plan.run<Codec>(qc.view(), st.a) == status::success, "corrupt table: run");
  check(attention::paged_decode<Codec>(qc.view(), st.a) == status::success, "corrupt table: one-call");
  const cudaError_t e = cudaDeviceSynchronize();
  check(e == cudaSuccess, std::string("corrupt table: the context survives (") + cudaGetErrorString(e) + ")");
  bool finite = true;
  for (const half_t& x : st.out.download()) finite = finite && std::isfinite(x.to_float());
  check(finite, "corrupt table: outputs finite");
  ATTN_CUDA(cudaMemcpy(qc.d_ptab.p, qc.ptab.data(), qc.ptab.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  check(plan.run<Codec>(qc.view(), st.a) == status::success, "repaired table: run");
  check_step<Codec>(qc, st, mods{}, "repaired table after a corrupt one");
}

void api_case() {
  using C = kvtile::presets::k4v2_g128<128>;
  case_cfg c;
  c.num_seqs = 2;
  c.kv_heads = 2;
  c.group = 2;
  c.lens = {300, 5};
  std::mt19937_64 rng(9);
  quant_cache<C> qc;
  original_kv orig;
  build_cache<C>(c, rng, qc, orig);
  step<C> st(qc, 4, rng, mods{});
  attention::decode_plan plan;
  check(plan.run<C>(qc.view(), st.a) == status::invalid_argument, "run before plan rejected");
  check(plan.plan<C>(qc.view(), nullptr, st.a) == status::null_pointer, "plan without host lengths rejected");
  check(plan.plan<C>(qc.view(), qc.lens.data(), st.a) == status::success, "plan");
  auto a2 = st.a;
  a2.window_left = 10;
  check(plan.run<C>(qc.view(), a2) == status::invalid_argument, "run with another window than planned rejected");
  a2 = st.a;
  a2.logit_softcap = -1.0f;
  check(attention::paged_decode<C>(qc.view(), a2) == status::invalid_argument, "negative soft-cap rejected");
  a2.logit_softcap = INFINITY;
  check(attention::paged_decode<C>(qc.view(), a2) == status::invalid_argument, "infinite soft-cap rejected");
  check(attention::can_implement<C>(qc.view(), st.a) == status::success, "can_implement on this device (sm_90)");
  check(std::string(to_string(status::unsupported_arch)) != to_string(status::cuda_error) &&
            std::string(to_string(status::unsupported_arch)).find("GPU") != std::string::npos,
        "unsupported_arch has its own text");
  ATTN_CUDA(cudaDeviceSynchronize());
}

// Units of 8 query rows (each record read once per 8 rows): the kernels of
// the default policy before the 16-row units, for comparisons.
// decode_policy_with: a chain over every architecture's policy, like the
// default, so the case runs wherever the default does (compute_80 PTX selects rows8<decode_policy_sm80>).
template <class P>
struct rows8 : P {
  static constexpr int max_unit_rows = 8;
};
using rows8_policy = attention::decode_policy_with<rows8>;
// Planned steps merged in the attention kernel (fused_merge on): that path of run().
template <class P>
struct merge_in_kernel : P {
  static constexpr bool fused_merge = true;
};
using fused_merge_policy = attention::decode_policy_with<merge_in_kernel>;

// Groups of more than 8 query heads: 16 query rows per unit (two n-blocks of a
// ring's two warps) give the results of 8-row units up to fp32 merge rounding.
template <class Codec>
void unit_rows_case(int group, std::vector<int> lens, const mods& m, std::uint64_t seed) {
  case_cfg c;
  c.num_seqs = static_cast<int>(lens.size());
  c.kv_heads = 2;
  c.group = group;
  c.sink = true;
  c.lens = lens;
  std::mt19937_64 rng(seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  step<Codec> a(qc, 2 * group, rng, m), b(qc, 2 * group, rng, m);
  ATTN_CUDA(cudaMemcpy(b.q.p, a.q.p, a.q.n * sizeof(half_t), cudaMemcpyDeviceToDevice));
  attention::decode_plan p16, p8;
  check(p16.plan<Codec>(qc.view(), qc.lens.data(), a.a) == status::success, "16-row plan");
  check(p16.run<Codec>(qc.view(), a.a) == status::success, "16-row run");
  check(p8.plan<Codec, rows8_policy>(qc.view(), qc.lens.data(), b.a) == status::success, "8-row plan");
  check(p8.run<Codec, rows8_policy>(qc.view(), b.a) == status::success, "8-row run");
  check(p16.run<Codec, rows8_policy>(qc.view(), a.a) == status::invalid_argument, "run with another policy rejected");
  ATTN_CUDA(cudaDeviceSynchronize());
  const auto x = a.out.download(), y = b.out.download();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = x[i].to_float(), v = y[i].to_float();
    worst = std::max(worst, std::fabs(u - v) / std::max(1.0, std::fabs(v)));
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "group %d: 16-row units (%d chunks) vs 8-row units (%d chunks): max difference %.2e (<= 2e-3)",
                group, p16.chunks(), p8.chunks(), worst);
  std::printf("  %s\n", buf);
  check(worst <= 2e-3 && p16.chunks() > 0, buf);
}

// Multi-query decode: sequence s has n[s] new tokens (its last n[s]
// positions; 0 <= n[s] <= max_q), query rows qo_indptr[s] + i; each row
// against fp64 over its own causal prefix (length len - (n - 1 - i)) with the
// window and soft-cap counted from its position. Plan/run with the host counts
// (each sequence planned for its own tokens), also re-planned before a CUDA
// graph replay; plan/run without them (every sequence at max_q), where the
// device counts may change under the same plan; then the one-call path (last:
// it reuses the workspace, which holds the plan's work list).
template <class Codec, class QT = half_t, class Policy = attention::decode_policy>
void mq_case(std::vector<int> lens, std::vector<int> n, int max_q, int kv_heads, int group, bool sink, const mods& m,
             std::uint64_t seed, const char* name, int max_ctas = 0) {
  constexpr int D = Codec::D;
  case_cfg c;
  c.num_seqs = static_cast<int>(lens.size());
  c.kv_heads = kv_heads;
  c.group = group;
  c.sink = sink;
  c.lens = lens;
  std::mt19937_64 rng(seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const int S = c.num_seqs, Hq = kv_heads * group, rows_cap = S * max_q;
  auto hq = random_queries<QT>(rows_cap * Hq * D, rng);  // room for every count below
  dbuf<QT> q, out(hq.size());
  q.upload(hq);
  dbuf<float> lse(static_cast<std::size_t>(rows_cap) * Hq);
  dbuf<std::int32_t> indptr(static_cast<std::size_t>(S) + 1);
  attention::decode_args<QT> a;
  a.q = q.p;
  a.out = out.p;
  a.lse = lse.p;
  a.q_heads = Hq;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.window_left = m.window_left;
  a.logit_softcap = m.softcap;
  a.qo_indptr = indptr.p;
  a.max_q_tokens = max_q;
  a.workspace_bytes = attention::workspace_bytes<Codec>(qc.view(), Hq, 0, max_q);
  dbuf<std::uint8_t> ws(a.workspace_bytes);
  a.workspace = ws.p;
  check(attention::workspace_bytes<Codec>(qc.view(), Hq, 0, max_q) >= attention::workspace_bytes<Codec>(qc.view(), Hq),
        "multi-query workspace bound");
  attention::decode_plan plan;
  plan.limit_ctas(max_ctas);
  std::vector<std::int32_t> off(S + 1, 0);
  auto set_counts = [&](const std::vector<int>& cnt) {
    for (int s = 0; s < S; ++s) off[s + 1] = off[s] + cnt[s];
    ATTN_CUDA(cudaMemcpy(indptr.p, off.data(), off.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  };
  auto verify = [&](const std::vector<int>& cnt, const std::string& what) {
    ATTN_CUDA(cudaDeviceSynchronize());
    const auto ho = out.download();
    const auto hl = lse.download();
    double worst = 0, worst_lse = 0;
    bool finite = true;
    std::vector<double> K, V, qr(D), o(D), got(D);
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < kv_heads; ++h) {
        dequantized_kv<Codec>(qc, s, h, K, V);
        for (int i = 0; i < cnt[s]; ++i) {
          const int Li = qc.lens[s] - (cnt[s] - 1 - i);
          for (int g = 0; g < group; ++g) {
            const std::size_t row = static_cast<std::size_t>(off[s] + i) * Hq + h * group + g;
            for (int d = 0; d < D; ++d) qr[d] = hq[row * D + d].to_float();
            fwht_d(qr.data(), D);
            const double lref = attend_mod(qr.data(), K, V, Li, D, a.softmax_scale, m, o.data());
            fwht_d(o.data(), D);
            for (int d = 0; d < D; ++d) {
              got[d] = ho[row * D + d].to_float();
              finite = finite && std::isfinite(got[d]);
            }
            worst = std::max(worst, rel_err(got.data(), o.data(), D));
            if (Li > 0) {
              worst_lse = std::max(worst_lse, std::fabs(static_cast<double>(hl[row]) - lref));
            } else {
              finite = finite && std::isinf(hl[row]) && hl[row] < 0;
            }
          }
        }
      }
    // Rows past the last sequence's tokens are never written (still poisoned).
    bool untouched = true;
    for (std::size_t e = static_cast<std::size_t>(off[S]) * Hq * D; e < ho.size(); ++e)
      untouched = untouched && !(ho[e].to_float() == ho[e].to_float());
    const bool bf16_out = std::is_same_v<QT, bfloat16_t>;
    const double tol = bf16_out ? 1e-3 + 1.0 / 512 : 1e-3;
    if (!bf16_out) g_max_rel = std::max(g_max_rel, worst);
    char buf[400];
    std::snprintf(buf, sizeof buf, "%s %s D=%d group=%d max_q=%d sink=%d window=%d cap=%g (%d chunks): rel err vs fp64 %.2e (tol %.2g), lse err %.1e",
                  name, what.c_str(), D, group, max_q, sink ? 1 : 0, m.window_left, m.softcap, plan.chunks(), worst, tol,
                  worst_lse);
    std::printf("  %s\n", buf);
    check(finite && untouched && worst <= tol && worst_lse <= 1e-3, buf);
  };
  auto poison = [&](cudaStream_t stream) {  // rows past the tokens are never written
    ATTN_CUDA(cudaMemsetAsync(out.p, 0xFF, out.n * sizeof(QT), stream));
    ATTN_CUDA(cudaMemsetAsync(lse.p, 0xFF, lse.n * sizeof(float), stream));
  };
  // Other counts (every one <= max_q).
  std::vector<int> n2(n.size());
  int any = 0;
  for (int s = 0; s < S; ++s) any += n2[s] = std::min(max_q, std::min(qc.lens[s], (n[s] + 1 + s) % (max_q + 1)));
  if (any == 0) n2[S - 1] = std::min(max_q, qc.lens[S - 1]);  // at least one row to check
  // Planned with the host counts (each sequence only its own query groups).
  set_counts(n);
  poison(nullptr);
  status st = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), off.data(), a);
  check(st == status::success, std::string(name) + ": multi-query plan, host counts (" + to_string(st) + ")");
  st = plan.run<Codec, Policy>(qc.view(), a);
  check(st == status::success, std::string(name) + ": multi-query run (" + to_string(st) + ")");
  verify(n, "plan/run, host counts");
  // Captured once in a CUDA graph, planned again with other host counts before a replay.
  {
    ATTN_CUDA(cudaDeviceSynchronize());
    cudaStream_t stream;
    ATTN_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    ATTN_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const status rs = plan.run<Codec, Policy>(qc.view(), a, stream);
    ATTN_CUDA(cudaStreamEndCapture(stream, &graph));
    check(rs == status::success, std::string(name) + ": multi-query run captured");
    cudaGraphExec_t exec;
    ATTN_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (const std::vector<int>* cnt : {&n2, &n}) {
      set_counts(*cnt);
      st = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), off.data(), a, stream);
      check(st == status::success, std::string(name) + ": multi-query re-plan before a replay");
      poison(stream);
      ATTN_CUDA(cudaGraphLaunch(exec, stream));
      ATTN_CUDA(cudaStreamSynchronize(stream));
      verify(*cnt, cnt == &n2 ? "graph replay, other host counts" : "graph replay, first host counts");
    }
    ATTN_CUDA(cudaGraphExecDestroy(exec));
    ATTN_CUDA(cudaGraphDestroy(graph));
    ATTN_CUDA(cudaStreamDestroy(stream));
  }
  // Planned without host counts (every sequence at max_q): any device counts, same plan.
  set_counts(n);
  poison(nullptr);
  st = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), a);
  check(st == status::success, std::string(name) + ": multi-query plan (" + to_string(st) + ")");
  st = plan.run<Codec, Policy>(qc.view(), a);
  check(st == status::success, std::string(name) + ": multi-query run (" + to_string(st) + ")");
  verify(n, "plan/run at max_q_tokens");
  set_counts(n2);
  poison(nullptr);
  st = plan.run<Codec, Policy>(qc.view(), a);
  check(st == status::success, std::string(name) + ": multi-query run, new counts");
  verify(n2, "new counts, same plan");
  set_counts(n);
  poison(nullptr);
  st = attention::paged_decode<Codec, Policy>(qc.view(), a);
  check(st == status::success, std::string(name) + ": multi-query paged_decode (" + to_string(st) + ")");
  verify(n, "one-call");
}

void mq_api_case() {
  using C = kvtile::presets::k4v2_g128<128>;
  case_cfg c;
  c.num_seqs = 1;
  c.kv_heads = 2;
  c.group = 2;
  c.lens = {300};
  std::mt19937_64 rng(19);
  quant_cache<C> qc;
  original_kv orig;
  build_cache<C>(c, rng, qc, orig);
  step<C> st(qc, 4, rng, mods{});
  dbuf<std::int32_t> indptr(2);
  auto a = st.a;
  a.max_q_tokens = 2;  // without qo_indptr
  check(attention::paged_decode<C>(qc.view(), a) == status::invalid_argument, "max_q_tokens > 1 without qo_indptr rejected");
  a.qo_indptr = indptr.p;
  a.max_q_tokens = 9;
  check(attention::paged_decode<C>(qc.view(), a) == status::invalid_argument, "max_q_tokens 9 rejected");
  a.max_q_tokens = 0;
  check(attention::paged_decode<C>(qc.view(), a) == status::invalid_argument, "max_q_tokens 0 rejected");
  a.max_q_tokens = 8;  // 16-row units of 8 tokens x 2 heads: more than the one-token workspace
  check(attention::can_implement<C>(qc.view(), a) == status::insufficient_space,
        "multi-query workspace checked against max_q_tokens");
  attention::decode_plan plan;
  a.max_q_tokens = 1;
  check(plan.plan<C>(qc.view(), qc.lens.data(), a) == status::success, "plan with qo_indptr");
  const std::int32_t host_off[2] = {0, 2};  // 2 new tokens, max_q_tokens 1
  check(plan.plan<C>(qc.view(), qc.lens.data(), host_off, a) == status::invalid_argument,
        "host counts above max_q_tokens rejected");
  check(plan.plan<C>(qc.view(), qc.lens.data(), host_off, st.a) == status::invalid_argument,
        "host counts without qo_indptr rejected");
  check(plan.plan<C>(qc.view(), qc.lens.data(), a) == status::success, "plan with qo_indptr again");
  check(plan.run<C>(qc.view(), st.a) == status::invalid_argument, "run without the planned qo_indptr rejected");
  fp16_paged_cache_view fv;  // a valid baseline view (nothing is read)
  fv.k = reinterpret_cast<half_t*>(st.ws.p);
  fv.v = fv.k;
  fv.page_table = qc.d_ptab.p;
  fv.seq_lens = qc.d_lens.p;
  fv.num_seqs = 1;
  fv.kv_heads = 2;
  fv.head_dim = 128;
  fv.page_tokens = attention::fp16_kernel_traits<128>::page_tokens;
  fv.max_pages_per_seq = 1;
  fv.num_pages = 1;
  a = st.a;
  check(attention::can_implement_fp16<128>(fv, a) == status::success, "fp16 baseline view accepted");
  a.qo_indptr = indptr.p;
  check(attention::can_implement_fp16<128>(fv, a) == status::invalid_argument, "fp16 baseline: multi-query rejected");
}

// Every plan/run test; `small`: the reduced set (for compute-sanitizer).
inline void run_plan_tests(bool small) {
  using namespace kvtile::presets;
  using C = k4v2_g128<128>;
  std::printf("16 query rows per unit (groups of 9-32):\n");
  plan_case<C>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, mods{}, 41, "k4v2_g128 group 16");
  if (!small) {
    plan_case<C>({77, 3 * 128, 1, 9 * 128 + 100}, 2, 12, false, mods{}, 42, "k4v2_g128 group 12 (half a second n-block)");
    plan_case<C>({700, 129, 20 * 128 + 3}, 1, 32, true, mods{}, 43, "k4v2_g128 group 32 (two 16-row units)");
    plan_case<C>({150 * 128 + 7, 140 * 128, 0}, 1, 16, true, mods{}, 44, "k4v2_g128 group 16, long, 3 CTAs", true, 3, 0);
    plan_case<C>({2000, 1, 256, 700}, 1, 16, true, mods{300, 2.0f}, 45, "k4v2_g128 group 16 window 300 + soft-cap 2");
    plan_case<k2v2_g128<64, kvtile::fp16_scales>>({0, 77, 5 * 128 + 1, 900}, 1, 16, true, mods{}, 46,
                                                  "k2v2_g128 fp16_scales D=64 group 16");
    plan_case<C, rows8_policy>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, mods{}, 41, "k4v2_g128 group 16, 8-row units");
    plan_case<C, fused_merge_policy>({0, 1, 127, 3 * 128 + 77, 40 * 128 + 5}, 2, 4, true, mods{}, 8,
                                     "k4v2_g128 ragged, fused merge");
    plan_case<C, fused_merge_policy>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, mods{}, 41, "k4v2_g128 group 16, fused merge");
    plan_case<C, fused_merge_policy>({150 * 128 + 7, 140 * 128, 0}, 1, 16, true, mods{}, 44,
                                     "k4v2_g128 group 16, long, 3 CTAs, fused merge", true, 3, 0);
    mq_case<C, half_t, fused_merge_policy>({1000, 3 * 128 + 2, 5, 0}, {1, 8, 4, 0}, 8, 2, 4, true, mods{}, 58,
                                           "k4v2_g128 ragged multi-query, fused merge");
    unit_rows_case<C>(16, {3000, 1, 130 * 128 + 5}, mods{}, 47);
    unit_rows_case<C>(10, {900, 2 * 128}, mods{200, 4.0f}, 48);
  }
  std::printf("multi-query:\n");
  mq_case<C>({1000, 3 * 128 + 2, 5, 129 * 128, 77}, {1, 8, 4, 3, 0}, 8, 2, 4, true, mods{}, 51, "k4v2_g128 ragged");
  mq_case<C>({700, 2 * 128 + 1}, {2, 1}, 2, 2, 2, false, mods{}, 52, "k4v2_g128 packed rows");
  if (!small) {
    mq_case<k2v2_g128<64, kvtile::fp16_scales>>({900, 130, 3 * 128 + 5}, {2, 8, 1}, 8, 2, 1, true, mods{100, 3.0f}, 53,
                                                "k2v2_g128 fp16_scales D=64 GQA 1 window 100 + soft-cap 3");
    mq_case<k4v2_g128<256>, bfloat16_t>({600, 2 * 128 + 1, 129}, {2, 2, 1}, 2, 1, 16, false, mods{}, 54,
                                        "k4v2_g128 D=256 GQA 16 bf16");
    mq_case<C>({150 * 128 + 3, 140 * 128 + 7}, {4, 2}, 4, 2, 2, true, mods{}, 55, "k4v2_g128 long, 3 CTAs", 3);
    mq_case<C>({2000, 64, 3 * 128}, {8, 8, 5}, 8, 1, 8, true, mods{0, 0.0f}, 56, "k4v2_g128 GQA 8 window 0");
    mq_case<C>({300, 1, 129}, {1, 1, 0}, 1, 2, 8, false, mods{}, 57, "k4v2_g128 qo_indptr, one token");
    mq_api_case();
  }
  std::printf("plan/run, ragged lengths:\n");
  plan_case<C>({0, 1, 127, 128, 129, 3 * 128 + 77, small ? 9 * 128 : 300 * 128 + 5}, 2, 4, true, mods{}, 1,
               "k4v2_g128 ragged");
  plan_case<C>({5, 1000, 0, 2 * 128}, 2, 8, false, mods{}, 2, "k4v2_g128 ragged group 8");
  if (!small) {
    plan_case<C>({64 * 128 + 1, 1, 129}, 1, 16, true, mods{}, 3, "k4v2_g128 group 16");
    plan_case<C>({1 << 16}, 8, 4, false, mods{}, 4, "k4v2_g128 batch 1, 64K");
    std::vector<int> lens(40);
    std::mt19937 lr(17);
    std::uniform_real_distribution<double> u(std::log(256.0), std::log(40000.0));
    for (auto& l : lens) l = static_cast<int>(std::exp(u(lr)));
    plan_case<C>(lens, 2, 4, true, mods{}, 5, "k4v2_g128 40 log-uniform lengths", false);
    // 3 CTAs for 6 units of 130-150 tiles: the stage-pool kernel, two chunks per CTA.
    plan_case<C>({140 * 128, 150 * 128 + 9, 130 * 128}, 2, 4, true, mods{}, 6, "k4v2_g128 stage pool, 3 CTAs", true, 3, 1);
    plan_case<C>({140 * 128, 150 * 128 + 9, 130 * 128}, 2, 4, false, mods{}, 6, "k4v2_g128 rings, 132 CTAs", false, 0, 0);
    plan_case<k2v2_g128<64, kvtile::fp16_scales>>({0, 77, 5 * 128 + 1, 900}, 2, 2, true, mods{}, 7,
                                                  "k2v2_g128 fp16_scales D=64");
  }
  std::printf("window and soft-cap:\n");
  plan_case<C>({1000, 1, 129, 5 * 128, 3000}, 2, 4, true, mods{200, 0.0f}, 11, "window 200");
  plan_case<C>({1000, 64, 129, 3000}, 2, 4, true, mods{0, 0.0f}, 12, "window 0 (own token only)");
  plan_case<C>({1000, 300, 3000}, 2, 4, false, mods{-1, 5.0f}, 13, "soft-cap 5");
  plan_case<C>({2000, 1, 256, 700}, 2, 8, true, mods{300, 2.0f}, 14, "window 300 + soft-cap 2");
  if (!small) {
    plan_case<C>({150 * 128 + 7, 140 * 128}, 2, 4, false, mods{5000, 8.0f}, 15, "window 5000 + soft-cap 8", true, 0, 0);
    plan_case<C>({150 * 128 + 7, 140 * 128, 300 * 128}, 2, 4, true, mods{30000, 8.0f}, 17,
                 "window 30000 + soft-cap 8, stage pool, 3 CTAs", true, 3, 1);
    plan_case<k2v2_g128<64, kvtile::fp16_scales>>({900, 3 * 128}, 2, 2, true, mods{128, 3.0f}, 16,
                                                  "k2v2_g128 fp16_scales D=64 window 128 + soft-cap 3");
  }
  std::printf("invariance:\n");
  invariance_case<C>();
  std::printf("CUDA graph:\n");
  graph_case<C>(small);
  separate_workspace_case<C>();
  std::printf("corrupt page table:\n");
  corrupt_table_case<C>();
  api_case();
}

}  // namespace attn_plan_test
