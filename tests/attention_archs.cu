// tests/attention_archs.cu: the decode-attention kernels of the default policy
// chain for the hot preset (k4v2_g128, D = 128, half_t queries) and the fp16
// baseline, instantiated for tests/build_checks.sh, which compiles this unit
// for every architecture kvtile lists (ptxas -v: registers, spills) and runs
// it on the host to print each policy's shared memory. No GPU is needed.
#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/presets.hpp>

#include <cstdio>

namespace at = kvtile::attention;
using codec = kvtile::presets::k4v2_g128<128>;

// Every kernel variant of every policy of the chain (the launchers instantiate them).
kvtile::status instantiate(const kvtile::paged_cache_view& v, const kvtile::fp16_paged_cache_view& f,
                           const at::decode_args<kvtile::half_t>& a) {
  at::decode_plan plan;
  const std::int32_t lens[1] = {1};
  kvtile::status s = plan.plan<codec>(v, lens, a);
  if (s == kvtile::status::success) s = plan.run<codec>(v, a);
  if (s == kvtile::status::success) s = at::paged_decode<codec>(v, a);
  if (s == kvtile::status::success) s = at::paged_decode_fp16<128>(f, a);
  return s;
}

template <class P>
void row(const char* name) {
  using tr = at::quant_kernel_traits<codec, P>;
  using f16 = at::fp16_kernel_traits<128, P>;
  std::printf("%-6s %7zu %5s %5d x %d %7zu %4d / %-2d %7zu %4d x 2 %7zu %5d x %d %7zu\n", name, P::smem_budget,
              P::bulk_copies ? "bulk" : "cp16", tr::rings, tr::stages, tr::smem_bytes, tr::pool_warps, tr::pool,
              tr::pool_smem_bytes, tr::wide ? tr::wide_rings : 0, tr::wide_smem_bytes, f16::warps, f16::stages,
              f16::smem_bytes);
}

int main(int argc, char**) {
  if (argc > 1) {  // never taken: keeps the launchers (and so the kernels) referenced
    const kvtile::paged_cache_view v{};
    const kvtile::fp16_paged_cache_view f{};
    return static_cast<int>(instantiate(v, f, at::decode_args<kvtile::half_t>{}));
  }
  std::printf("k4v2_g128 D=128 shared memory per block (bytes) by policy:\n");
  std::printf("policy  budget  load  rings x st   ring  pool w/st    pool  16-row    16-row  fp16 w x st  fp16\n");
  row<at::decode_policy_sm90>("sm90");
  row<at::decode_policy_sm80>("sm80");
  row<at::decode_policy_sm86>("sm86");
  row<at::decode_policy_sm120>("sm120");
  return 0;
}
