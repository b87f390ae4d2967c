// tests/device/attention.cu: decode attention (kvtile/device/attention/paged_decode.cuh):
// bf16 queries, independence from page placement and split count, argument
// checks before launch, the fp16 baseline kernel against fp64, and the
// decode_plan tests of attention_plan.cuh. `--small` runs a reduced set (for
// compute-sanitizer).
// ctest-sanitize: run --small
#include "attention_common.cuh"
#include "attention_plan.cuh"

using namespace attn_test;
using kvtile::half_t;
using kvtile::bfloat16_t;

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
  fp16_baseline_test<64>({5, 300}, 1, 22);
  fp16_baseline_test<256>({129, 64}, 16, 23);
  attn_plan_test::run_plan_tests(false);
  std::printf("max relative error vs fp64: %.3e\n", g_max_rel);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
