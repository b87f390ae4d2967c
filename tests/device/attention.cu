// tests/device/attention.cu: decode attention (kvtile/device/attention/paged_decode.cuh):
// bf16 queries, independence from page placement and split count, argument
// checks before launch, the fp16 baseline kernel against fp64, and the
// decode_plan suite (run_plan_tests, over the cases of attention_plan.cuh).
// `--small` runs a reduced set (for compute-sanitizer).
// ctest-sanitize: run --small
#include "attention_common.cuh"
#include "attention_plan.cuh"

using namespace attn_test;
using kvtile::half_t;
using kvtile::bfloat16_t;

// The decode_plan suite of this test (the cases: attention_plan.cuh).
namespace attn_plan_test {
namespace {

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
void run_plan_tests(bool small) {
  using namespace kvtile::presets;
  using C = k4v2_g128<128>;
  std::printf("16 query rows per unit (groups of 9-32):\n");
  plan_case<C>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, mods{}, 41, "k4v2_g128 group 16");
  // Several chunks per CTA (the barriers kept from chunk to chunk), in the small set too.
  plan_case<C>({150 * 128 + 7, 140 * 128, 0}, 1, 16, true, mods{}, 44, "k4v2_g128 group 16, long, 3 CTAs", true, 3, 0);
  if (!small) {
    plan_case<C>({77, 3 * 128, 1, 9 * 128 + 100}, 2, 12, false, mods{}, 42, "k4v2_g128 group 12 (half a second n-block)");
    plan_case<C>({700, 129, 20 * 128 + 3}, 1, 32, true, mods{}, 43, "k4v2_g128 group 32 (two 16-row units)");
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
  std::printf("16-row units, each warp of a ring one n-block (nblock_split; every policy at D = 256):\n");
  plan_case<C, nblock_split_policy>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, mods{}, 41, "k4v2_g128 group 16, n-block split");
  mq_case<C, half_t, nblock_split_policy>({1000, 3 * 128 + 2, 5, 129 * 128, 77}, {1, 8, 4, 3, 0}, 8, 2, 4, true, mods{},
                                          51, "k4v2_g128 ragged multi-query, n-block split");
  if (!small) {
    plan_case<C, nblock_split_policy>({77, 3 * 128, 1, 9 * 128 + 100}, 2, 12, false, mods{}, 42,
                                      "k4v2_g128 group 12, n-block split");
    plan_case<C, nblock_split_policy>({700, 129, 20 * 128 + 3}, 1, 32, true, mods{}, 43, "k4v2_g128 group 32, n-block split");
    plan_case<C, nblock_split_policy>({150 * 128 + 7, 140 * 128, 0}, 1, 16, true, mods{}, 44,
                                      "k4v2_g128 group 16, long, 3 CTAs, n-block split", true, 3, 0);
    plan_case<C, nblock_split_policy>({2000, 1, 256, 700}, 1, 16, true, mods{300, 2.0f}, 45,
                                      "k4v2_g128 group 16 window 300 + soft-cap 2, n-block split");
    plan_case<k2v2_g128<64, kvtile::fp16_scales>, nblock_split_policy>({0, 77, 5 * 128 + 1, 900}, 1, 16, true, mods{}, 46,
                                                                       "k2v2_g128 fp16_scales D=64 group 16, n-block split");
    mq_case<k4v4_g128<128>, bfloat16_t, nblock_split_policy>({600, 2 * 128 + 1, 129}, {2, 2, 1}, 2, 1, 16, false,
                                                             mods{200, 3.0f}, 54, "k4v4_g128 GQA 16 bf16 window, n-block split");
  }
  std::printf("fused merge, units with one chunk (no merge work):\n");
  sole_chunk_case<C>("k4v2_g128 fused merge, sole chunks");
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
  // Several chunks per CTA on the 8-row ring kernels and the stage pool (the
  // barriers initialized once, kept from chunk to chunk).
  // 3 CTAs for 6 units of 130-150 tiles: the stage-pool kernel, two chunks per CTA.
  plan_case<C>({140 * 128, 150 * 128 + 9, 130 * 128}, 2, 4, true, mods{}, 6, "k4v2_g128 stage pool, 3 CTAs", true, 3, 1);
  // One chunk of 291-301 tiles per CTA (3), each with 2 tail pieces of 64 tiles; then sequence 2 cut to
  // 21 tiles on the device, so that its CTA takes pieces of the others.
  steal_case<C, attention::decode_policy_tail_pieces>({300 * 128 + 5, 300 * 128, 290 * 128 + 77}, 1, 4, 3, 64,
                                                      "k4v2_g128 stage pool, tail pieces, 3 CTAs", 2, !small);
  plan_case<C>({0, 1, 127, 128, 129, 3 * 128 + 77, 40 * 128 + 5}, 2, 4, true, mods{}, 61,
               "k4v2_g128 ragged, rings, 2 CTAs", false, 2, 0);
  plan_case<C>({5, 1000, 0, 2 * 128 + 1, 9 * 128}, 2, 8, false, mods{300, 2.0f}, 62,
               "k4v2_g128 group 8 window 300 + soft-cap 2, rings, 3 CTAs", false, 3, 0);
  if (!small) {
    plan_case<k2v2_g128<64, kvtile::fp16_scales>>({0, 77, 5 * 128 + 1, 900, 30 * 128}, 2, 2, true, mods{}, 63,
                                                  "k2v2_g128 fp16_scales D=64, rings, 2 CTAs", false, 2, 0);
    plan_case<C>({64 * 128 + 1, 1, 129}, 1, 16, true, mods{}, 3, "k4v2_g128 group 16");
    plan_case<C>({1 << 16}, 8, 4, false, mods{}, 4, "k4v2_g128 batch 1, 64K");
    std::vector<int> lens(40);
    std::mt19937 lr(17);
    std::uniform_real_distribution<double> u(std::log(256.0), std::log(40000.0));
    for (auto& l : lens) l = static_cast<int>(std::exp(u(lr)));
    plan_case<C>(lens, 2, 4, true, mods{}, 5, "k4v2_g128 40 log-uniform lengths", false);
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

}  // namespace
}  // namespace attn_plan_test

namespace {

template <class Codec>
void invariance_test() {
  constexpr int D = Codec::D, G = Codec::G;
  case_cfg c;
  c.num_seqs = 3;
  c.kv_heads = 2;
  c.group = 4;
  c.sink = true;
  c.lens = {9 * G + 17, 3 * G, 1};
  c.seed = 77;
  std::mt19937_64 rng(c.seed);
  quant_cache<Codec> qc;
  original_kv orig;
  build_cache<Codec>(c, rng, qc, orig);
  const int Hq = c.kv_heads * c.group;
  auto q = random_queries<half_t>(c.num_seqs * Hq * D, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  run_result base = run_quant<Codec, half_t>(qc, q, Hq, scale, 1);
  double worst = 0;
  for (int splits : {2, 3, 5, 0}) {
    run_result r = run_quant<Codec, half_t>(qc, q, Hq, scale, splits);
    for (int row = 0; row < c.num_seqs * Hq; ++row)
      worst = std::max(worst, rel_err(r.out.data() + row * D, base.out.data() + row * D, D));
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "split count 1/2/3/5/auto: max rel difference %.2e (<= 1e-3: fp32 merge order + fp16 output)", worst);
  check(worst <= 1e-3, buf);
  std::printf("  %s\n", buf);
  qc.shuffle_pages(rng);
  run_result moved = run_quant<Codec, half_t>(qc, q, Hq, scale, 1);
  bool same = moved.out == base.out;
  check(same, "page placement: outputs bit-identical after moving every page");
  std::printf("  page placement: %s\n", same ? "bit-identical" : "DIFFERENT");
}

// One split (num_splits = 1) and a page table of >= 128 tiles: paged_decode
// takes the stage-pool kernel (checked through the accuracy case's own checks).
template <class Codec>
void pool_case(int group, bool sink, std::vector<int> lens, const char* name) {
  case_cfg c;
  c.num_seqs = static_cast<int>(lens.size());
  c.kv_heads = 2;
  c.group = group;
  c.sink = sink;
  c.lens = std::move(lens);
  c.num_splits = 1;
  c.seed = 31 + group;
  accuracy_case<Codec, half_t>(c, name);
}

void bad_args_test() {
  using C = kvtile::presets::k4v2_g128<128>;
  using C4 = kvtile::presets::k4v4_g128<128>;
  case_cfg c;
  c.num_seqs = 1;
  c.kv_heads = 2;
  c.group = 2;
  c.lens = {200};
  std::mt19937_64 rng(5);
  quant_cache<C> qc;
  original_kv orig;
  build_cache<C>(c, rng, qc, orig);
  dbuf<half_t> q(512), out(512);
  dbuf<std::uint8_t> ws(1 << 20);
  attention::decode_args<half_t> a;
  a.q = q.p;
  a.out = out.p;
  a.q_heads = 4;
  a.softmax_scale = 0.1f;
  a.workspace = ws.p;
  a.workspace_bytes = 1 << 20;
  paged_cache_view v = qc.view();
  check(attention::can_implement<C>(v, a) == status::success, "good arguments accepted");
  check(attention::paged_decode<C4>(v, a) == status::invalid_argument, "record size of another preset rejected");
  paged_cache_view v96 = v;
  v96.head_dim = 96;
  check(attention::paged_decode<C>(v96, a) == status::unsupported_head_dim, "head_dim 96 rejected");
  auto a2 = a;
  a2.q = nullptr;
  check(attention::paged_decode<C>(v, a2) == status::null_pointer, "null query rejected");
  a2 = a;
  a2.q_heads = 5;
  check(attention::paged_decode<C>(v, a2) == status::invalid_argument, "q_heads not a multiple of kv_heads rejected");
  a2 = a;
  a2.workspace_bytes = 16;
  check(attention::paged_decode<C>(v, a2) == status::insufficient_space, "small workspace rejected");
  a2 = a;
  a2.softmax_scale = -1.0f;
  check(attention::paged_decode<C>(v, a2) == status::invalid_argument, "negative softmax scale rejected");
  paged_cache_view vn = v;
  vn.tail_k = nullptr;
  check(attention::paged_decode<C>(vn, a) == status::null_pointer, "missing tail rejected");
  fp16_paged_cache_view fv;
  fv.k = reinterpret_cast<half_t*>(ws.p);
  fv.v = fv.k;
  fv.page_table = qc.d_ptab.p;
  fv.seq_lens = qc.d_lens.p;
  fv.num_seqs = 1;
  fv.kv_heads = 2;
  fv.head_dim = 128;
  fv.page_tokens = 32;
  check(attention::paged_decode_fp16<128>(fv, a) == status::unsupported_tile_tokens, "fp16 baseline: wrong page size rejected");
  ATTN_CUDA(cudaDeviceSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = require_device(); rc) return rc;
  const bool small = argc > 1 && std::string(argv[1]) == "--small";
  using namespace kvtile::presets;
  if (small) {
    case_cfg c;
    c.num_seqs = 2;
    c.kv_heads = 1;
    c.group = 4;
    c.sink = true;
    c.lens = {3 * 128 + 5, 129};
    accuracy_case<k4v2_g128<128>, half_t>(c, "k4v2_g128 (small)");
    pool_case<k4v2_g64<128>>(4, true, {128 * 64 + 5, 3}, "k4v2_g64 stage-pool kernel (small)");
    fp16_baseline_test<128>({70, 1}, 4, 3);
    fp16_baseline_test<128>({40 * 64 + 5, 3, 25 * 64}, 4, 24, 2);  // planned on 2 CTAs: several chunks per CTA
    attn_plan_test::run_plan_tests(true);
    std::printf("max relative error: %.3e\n%d passed, %d failed\n", g_max_rel, g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
  }
  {
    case_cfg c;
    c.num_seqs = 3;
    c.kv_heads = 2;
    c.group = 8;
    c.lens = {1000, 128, 77};
    c.seed = 11;
    accuracy_case<k4v2_g128<128>, bfloat16_t>(c, "k4v2_g128 bf16 queries");
    c.group = 16;
    c.sink = true;
    c.seed = 12;
    accuracy_case<k4v2_g128<128, kvtile::fp16_scales>, bfloat16_t>(c, "k4v2_g128 fp16_scales bf16 queries");
  }
  // The stage-pool kernel (one split over >= 128 tiles per sequence), with
  // short and empty sequences in the same launch, packed and 8-query layouts.
  std::printf("stage-pool kernel:\n");
  pool_case<k4v2_g128<128>>(4, true, {128 * 128 + 37, 0, 1, 1000}, "k4v2_g128 pool, group 4, sink");
  pool_case<k4v2_g128<128, kvtile::fp16_scales>>(8, false, {130 * 128, 5, 128, 3 * 128 + 1},
                                                 "k4v2_g128 fp16_scales pool, group 8");
  pool_case<k2v2_g128<64>>(2, false, {129 * 128 + 64, 17}, "k2v2_g128 D=64 pool, group 2");
  std::printf("invariance (k4v2_g128 D=128):\n");
  invariance_test<k4v2_g128<128>>();
  bad_args_test();
  std::printf("fp16 baseline:\n");
  fp16_baseline_test<128>({0, 1, 63, 64, 65, 700}, 4, 21);
  fp16_baseline_test<128>({40 * 64 + 5, 3, 25 * 64}, 4, 24, 2);
  fp16_baseline_test<64>({5, 300}, 1, 22);
  fp16_baseline_test<256>({129, 64}, 16, 23);
  attn_plan_test::run_plan_tests(false);
  std::printf("max relative error vs fp64: %.3e\n", g_max_rel);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
