// tests/device/attention_policies.cu: the decode kernels of every non-Hopper
// policy, forced on the GPU at hand (attention::forced<P>): the 163 KB sm_80
// and the 99 KB sm_86/89 policies (16-byte cp.async with mbarrier arrivals,
// on any target) and the 99 KB sm_120 policy (bulk copies on sm_90+), each
// with the shared memory it plans for on its own GPUs.
// Against fp64 (attention_common.cuh): k4v2_g128 at D 64/128/256 and
// k2v2_g128 D 64 with fp16 scales (every record size class and both
// packers), GQA 1-16 (8- and 16-row units), sinks, ragged lengths
// 0/1/127/128/129, the ring and stage-pool kernels, plan/run with
// multi-query 1-8 tokens, window and soft-cap, CUDA-graph replay, and the
// fp16 baseline. What a policy changes (load path, stages, rings, pool and
// 16-row kernels, shared memory) does not depend on the bit widths or the
// query type, whose code the sweeps cover under the Hopper policy; keeping
// those out keeps this unit's build within CI's time.
//
//   attention_policies [--policy sm80|sm86|sm120] [--small]
//
// Without --policy every forced policy runs. The default chain (Hopper policy
// on an H200) is covered by attention.cu and the sweeps.
// ctest-sanitize: run --small
#include "attention_common.cuh"
#include "attention_plan.cuh"
#include "attention_sweep.cuh"

#include <cstring>

using namespace attn_test;
using kvtile::half_t;

namespace {

template <class P>
void policy_cases(const char* name, bool small) {
  using namespace kvtile::presets;
  using F = attention::forced<P>;
  std::printf("policy %s (forced):\n", name);
  std::vector<std::string> rep;
  sweep_codec<k4v2_g128<128>, F>("k4v2_g128", 0, rep);
  if (!small) {
    sweep_codec<k4v2_g128<64>, F>("k4v2_g128", 3, rep);
    sweep_codec<k4v2_g128<256>, F>("k4v2_g128", 4, rep);
  }
  for (auto& l : rep) std::printf("  %s\n", l.c_str());
  using C = k4v2_g128<128>;
  const attn_plan_test::mods none{};
  attn_plan_test::plan_case<C, F>({0, 1, 127, 128, 129, 3 * 128 + 77, small ? 9 * 128 : 200 * 128 + 5}, 2, 4, true,
                                  none, 1, "k4v2_g128 ragged group 4");
  attn_plan_test::plan_case<C, F>({5, 1000, 0, 2 * 128 + 1}, 1, 16, true, none, 41, "k4v2_g128 group 16");
  // Several chunks per CTA (the barriers kept from chunk to chunk):
  // the 8-row rings, the 16-row rings, the stage pool where the policy has one.
  attn_plan_test::plan_case<C, F>({0, 1, 127, 128, 129, 3 * 128 + 77, 40 * 128 + 5}, 2, 4, true, none, 61,
                                  "k4v2_g128 ragged, rings, 2 CTAs", false, 2, 0);
  attn_plan_test::plan_case<C, F>({5, 1000, 0, 2 * 128 + 1, 9 * 128}, 2, 8, false, attn_plan_test::mods{300, 2.0f}, 62,
                                  "k4v2_g128 group 8 window 300 + soft-cap 2, rings, 3 CTAs", false, 3, 0);
  attn_plan_test::plan_case<C, F>({150 * 128 + 7, 140 * 128, 0}, 1, 16, true, none, 44,
                                  "k4v2_g128 group 16, long, 3 CTAs", false, 3, 0);
  attn_plan_test::plan_case<C, F>({140 * 128, 150 * 128 + 9, 130 * 128}, 2, 4, true, none, 6,
                                  "k4v2_g128 long chunks, 3 CTAs", true, 3);
  attn_plan_test::plan_case<C, F>({1000, 1, 129, 5 * 128, 3000}, 2, 4, true, attn_plan_test::mods{200, 0.0f}, 11,
                                  "window 200");
  attn_plan_test::plan_case<C, F>({2000, 1, 256, 700}, 2, 8, true, attn_plan_test::mods{300, 2.0f}, 14,
                                  "window 300 + soft-cap 2");
  attn_plan_test::mq_case<C, half_t, F>({1000, 3 * 128 + 2, 5, 129 * 128, 77}, {1, 8, 4, 3, 0}, 8, 2, 4, true, none,
                                         51, "k4v2_g128 multi-query ragged");
  attn_plan_test::graph_case<C, F>(small);
  if (!small) {
    attn_plan_test::plan_case<k4v2_g128<256>, F>({700, 129, 20 * 128 + 3}, 1, 16, true, none, 43,
                                                 "k4v2_g128 D=256 group 16");
    attn_plan_test::mq_case<k4v2_g128<256>, half_t, F>({600, 2 * 128 + 1, 129}, {2, 2, 1}, 2, 1, 16, false, none, 54,
                                                        "k4v2_g128 D=256 multi-query GQA 16");
    attn_plan_test::mq_case<k2v2_g128<64, kvtile::fp16_scales>, half_t, F>(
        {900, 130, 3 * 128 + 5}, {2, 8, 1}, 8, 2, 1, true, attn_plan_test::mods{100, 3.0f}, 53,
        "k2v2_g128 D=64 fp16_scales multi-query window + soft-cap");
  }
  fp16_baseline_test<128, F>({0, 1, 63, 64, 65, 700}, 4, 21);
  fp16_baseline_test<128, F>({40 * 64 + 5, 3, 25 * 64}, 4, 24, 2);  // planned on 2 CTAs: several chunks per CTA
  if (!small) {
    fp16_baseline_test<64, F>({5, 300}, 1, 22);
    fp16_baseline_test<256, F>({129, 64}, 16, 23);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool small = false;
  const char* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0) {
      small = true;
      g_sweep_small = true;
    } else if (std::strcmp(argv[i], "--policy") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--policy sm80|sm86|sm120] [--small]\n", argv[0]);
      return 2;
    }
  }
  if (only && std::strcmp(only, "sm80") != 0 && std::strcmp(only, "sm86") != 0 && std::strcmp(only, "sm120") != 0) {
    std::fprintf(stderr, "unknown policy '%s' (sm80, sm86 or sm120)\n", only);
    return 2;
  }
  if (int rc = require_device(); rc) return rc;
  auto want = [&](const char* p) { return !only || std::strcmp(only, p) == 0; };
  if (want("sm80")) policy_cases<attention::decode_policy_sm80>("sm80 (163 KB, cp.async below sm_90)", small);
  if (want("sm86")) policy_cases<attention::decode_policy_sm86>("sm86 (99 KB, cp.async below sm_90)", small);
  if (want("sm120")) policy_cases<attention::decode_policy_sm120>("sm120 (99 KB, bulk copies)", small);
  std::printf("max relative error vs fp64: %.3e\n", g_max_rel);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
