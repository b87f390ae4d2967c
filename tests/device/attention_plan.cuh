// tests/device/attention_plan.cuh: the decode_plan cases (templates over the
// codec and the policy chain) of tests/device/attention.cu, whose suite
// (run_plan_tests) calls them for the default chain, and of
// tests/device/attention_policies.cu, for each forced policy: plan/run against
// fp64 on the dequantized cache: ragged lengths (0, 1, inside a tile, long),
// window and soft-cap (both paths), the stage pool with several chunks per CTA,
// forced chunk counts, PDL on/off, CUDA-graph capture of run() replayed with
// changing lengths, a corrupt page table that the context survives, and the
// fused merge's units with one chunk (no merge work: their slots unwritten). Only
// templates here: a function that names a codec and a chain would compile its
// kernels in every unit that includes this header.
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

// Tail pieces (decode_policy_tail_pieces): a stage-pool plan whose
// chunks' tails other CTAs may take, run twice without a new plan (the claim
// words reset by the last CTA), both runs checked against the reference.
// Then sequence `shorten` is cut on the device (and in the reference) to
// 20 tiles + 7 tokens, so its CTA finishes early and takes pieces of the
// others (theft: pieces whose slot holds a partial with rows, not the
// owner's empty one), run twice more. require_theft: at least one piece must
// have been taken (not under the sanitizers, whose timing may run the CTAs
// one after another). Under a policy without tail pieces on this device (the
// cp.async pools) the plan must list none, and the four runs are checked the same.
template <class Codec, class Policy>
void steal_case(std::vector<int> lens, int kv_heads, int group, int max_ctas, std::uint64_t seed, const char* name,
                int shorten, bool require_theft) {
  case_cfg c;
  c.num_seqs = static_cast<int>(lens.size());
  c.kv_heads = kv_heads;
  c.group = group;
  c.sink = true;
  c.lens = lens;
  std::mt19937_64 rng(seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  step<Codec> st(qc, kv_heads * group, rng, mods{});
  attention::decode_plan plan;
  plan.limit_ctas(max_ctas);
  status s = plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), st.a);
  check(s == status::success, std::string(name) + ": plan returns success (" + to_string(s) + ")");
  const auto& sc = plan.last_schedule();
  // Whether the policy selected on this device has tail pieces (detail::tails_on: the bulk-copy stage pools;
  // the cp.async pools of decode_policy_sm80 / sm86 never get them, and their plans list none).
  const bool tails = attention::detail::with_policy(
      typename attention::detail::chain_of<Policy>::type{}, plan.policy(), [](auto tag) {
        using P = typename decltype(tag)::type;
        using tr = attention::quant_kernel_traits<Codec, P>;
        if constexpr (!tr::fits) {
          return false;
        } else {
          return attention::detail::tails_on<P, tr::pool>();
        }
      });
  check(plan.stage_pool(), std::string(name) + ": the stage pool");
  check((sc.cuts > 0 && sc.tail_pieces > 0) == tails,
        std::string(name) + (tails ? ": the plan has tail pieces" : ": no tail pieces under this policy (cp.async pool)"));
  // The pieces' slots: m of row 0 (finite: the piece ran on another CTA; -inf: kept, the owner's empty partial),
  // read slot by slot (the workspace's other slots are never written).
  const attention::detail::ws_layout L = attention::detail::layout_for(
      c.num_seqs, kv_heads, st.a.q_heads, 0, plan.ctas(), Codec::D, attention::detail::max_group, 1);
  const int slot_rows = std::min(group, attention::detail::max_group);
  auto taken = [&] {
    int n = 0;
    for (int i = sc.cta_begin[plan.ctas()]; i < sc.cta_begin[plan.ctas() + 1]; ++i) {
      float m = 0.0f;
      ATTN_CUDA(cudaMemcpy(&m, st.ws.p + L.ml + sizeof(float) * 2 * static_cast<std::size_t>(sc.items[i].slot) * slot_rows,
                           sizeof(float), cudaMemcpyDeviceToHost));
      n += m != -INFINITY;
    }
    return n;
  };
  const int pieces = sc.cta_begin[plan.ctas() + 1] - sc.cta_begin[plan.ctas()];
  int stolen = 0;
  for (int run = 0; run < 4; ++run) {
    if (run == 2) {
      qc.lens[shorten] = 20 * Codec::G + 7;
      ATTN_CUDA(cudaMemcpy(qc.d_lens.p, qc.lens.data(), qc.lens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    }
    st.poison();
    s = plan.run<Codec, Policy>(qc.view(), st.a);
    check(s == status::success, std::string(name) + ": run returns success (" + to_string(s) + ")");
    ATTN_CUDA(cudaDeviceSynchronize());
    const int t = taken();
    if (run >= 2) stolen += t;
    char buf[300];
    std::snprintf(buf, sizeof buf, "%s D=%d group=%d plan(%d CTAs, %d chunks, %d pieces) run %d%s: %d pieces taken", name,
                  Codec::D, group, plan.ctas(), plan.chunks(), pieces, run + 1, run >= 2 ? " (one sequence cut)" : "",
                  t);
    check_step<Codec>(qc, st, mods{}, buf);
  }
  if (require_theft && tails) check(stolen > 0, std::string(name) + ": a CTA that finished early took pieces");
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
// 16-row units whose ring warps split each tile's n-blocks (each warp one
// n-block), as every policy runs them at D = 256; the default policies split
// the tokens of 128-token tiles at D <= 128 (wide_token_split).
template <class P>
struct nblock_split : P {
  static constexpr bool wide_token_split = false;
};
using nblock_split_policy = attention::decode_policy_with<nblock_split>;

// The fused merge does no merge work for a unit with one chunk: the
// workspace's partial slots are filled with NaN before the plan, so a merge
// that read a slot nobody wrote would put NaN into the output. After run(),
// the slot of every unit with one chunk is still NaN (its CTA wrote the
// outputs itself), every slot of a unit with several chunks was written, and
// the outputs match fp64. Policy: a chain with fused_merge.
template <class Codec, class Policy = fused_merge_policy>
void sole_chunk_case(const char* name) {
  case_cfg c;
  c.num_seqs = 5;
  c.kv_heads = 2;
  c.group = 4;
  c.sink = true;
  c.lens = {60 * Codec::G + 9, 3, 0, 2 * Codec::G + 7, 45 * Codec::G};
  std::mt19937_64 rng(4242);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const mods m{};
  constexpr int D = Codec::D;
  const int slot_rows = c.group;  // rows per slot: min(rows per KV head, unit rows)
  // Whether slot k still holds the NaN fill in every float of its rows.
  auto untouched = [&](const std::vector<std::uint8_t>& ws, std::int64_t k) {
    const std::size_t b = static_cast<std::size_t>(k) * slot_rows * D * sizeof(float);
    for (std::size_t i = b; i < b + static_cast<std::size_t>(slot_rows) * D * sizeof(float); ++i)
      if (ws[i] != 0xFF) return false;
    return true;
  };
  step<Codec> st(qc, c.kv_heads * c.group, rng, m);
  ATTN_CUDA(cudaMemset(st.ws.p, 0xFF, st.ws.n));
  attention::decode_plan plan;
  check(plan.plan<Codec, Policy>(qc.view(), qc.lens.data(), st.a) == status::success, std::string(name) + ": plan");
  st.poison();
  check(plan.run<Codec, Policy>(qc.view(), st.a) == status::success, std::string(name) + ": run");
  check_step<Codec>(qc, st, m, std::string(name) + ": outputs, slots filled with NaN");
  const auto ws = st.ws.download();
  int sole = 0, split = 0, bad = 0;
  for (const auto& sp : plan.last_schedule().spans) {
    if (sp.count == 1) {
      ++sole;
      bad += !untouched(ws, sp.first);
    } else if (sp.count > 1) {
      ++split;
      for (int k = 0; k < sp.count; ++k) bad += untouched(ws, sp.first + k);
    }
  }
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "%s: %d units with one chunk (slot never written), %d with several (every slot written): %d wrong",
                name, sole, split, bad);
  std::printf("  %s\n", buf);
  check(sole > 0 && split > 0 && bad == 0, buf);
}

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

}  // namespace attn_plan_test
