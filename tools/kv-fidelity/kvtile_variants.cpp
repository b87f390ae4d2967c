// kvtile's real host codec with the encode knobs chosen at run time, for
// choosing defaults by next-token KL (kv_fidelity.py --variant). The rounding
// family below calls the same decision functions as kvtile::rtn<> (rounding/
// asymmetric_rtn.hpp) with a policy and clip ratios set by kvt_variant_config;
// Sinkhorn iterations select one of the instantiated sinkhorn<N>.
// Build: g++ -O2 -std=c++17 -shared -fPIC -pthread -I PROJECT/include kvtile_variants.cpp -o libkvtvariants.so
#include <kvtile/kvtile.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {
struct knobs {
  static inline kvtile::row_rounding policy = kvtile::row_rounding::min_max_error;
  static inline float clip[2] = {1.0f, 1.0f};  // keys, values
};

template <int Bits, int Side>
struct rt_rounder {
  static constexpr int bits = Bits;
  static constexpr std::uint32_t qmax = (1u << Bits) - 1u;
  static void clipped_range(float lo, float hi, float& a, float& b) { kvtile::detail::clip_range(lo, hi, knobs::clip[Side], a, b); }
  static float step_wanted(float lo, float hi) { return kvtile::detail::row_step_wanted(lo, hi, qmax, knobs::policy); }
  template <class Format>
  static bool fit(float lo, float hi, float vs, typename Format::code_type& c, std::uint16_t& z) {
    return kvtile::detail::fit_row<Format>(lo, hi, vs, qmax, knobs::policy, c, z);
  }
  static std::uint32_t quantize(float y, float a, float z) { return kvtile::detail::rtn_quantize(y, a, z, qmax); }
  static float dequantize(std::uint32_t c, float a, float z) { return kvtile::detail::rtn_dequantize(c, a, z); }
};
struct rt_rtn {
  template <int B> using key_rounder = rt_rounder<B, 0>;
  template <int B> using value_rounder = rt_rounder<B, 1>;
};

template <int KB, int VB, class Packer, int It>
using codec = kvtile::tile_codec<kvtile::tile_config<128, 128, KB, VB>, kvtile::hadamard, kvtile::sinkhorn<It>, rt_rtn, Packer>;

template <class C>
int roundtrip(const float* k, const float* v, long ntiles, float* kout, float* vout, int nthreads) {
  std::atomic<int> err{0};
  std::atomic<long> next{0};
  const long E = 128L * 128;
  auto work = [&]() {
    auto ws = std::make_unique<typename C::workspace>();
    std::vector<std::uint8_t> rec(C::record_bytes);
    for (long t; (t = next.fetch_add(1)) < ntiles;) {
      kvtile::status e = C::encode(k + t * E, 128, v + t * E, 128, rec.data(), ws.get());
      if (e != kvtile::status::success && e != kvtile::status::non_finite_input) { err = 100 + int(e); continue; }
      kvtile::status d = C::decode(rec.data(), kout + t * E, 128, vout + t * E, 128, kvtile::frame::original);
      if (d != kvtile::status::success) err = 200 + int(d);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < (nthreads > 0 ? nthreads : 1); ++i) pool.emplace_back(work);
  for (auto& th : pool) th.join();
  return err;
}

template <int KB, int VB, class Packer>
int by_iters(int it, const float* k, const float* v, long n, float* ko, float* vo, int th) {
  switch (it) {
    case 0: return roundtrip<codec<KB, VB, Packer, 0>>(k, v, n, ko, vo, th);
    case 1: return roundtrip<codec<KB, VB, Packer, 1>>(k, v, n, ko, vo, th);
    case 2: return roundtrip<codec<KB, VB, Packer, 2>>(k, v, n, ko, vo, th);
    case 4: return roundtrip<codec<KB, VB, Packer, 4>>(k, v, n, ko, vo, th);
    case 8: return roundtrip<codec<KB, VB, Packer, 8>>(k, v, n, ko, vo, th);
    case 16: return roundtrip<codec<KB, VB, Packer, 16>>(k, v, n, ko, vo, th);
    default: return -2;
  }
}
template <int KB, int VB>
int by_pack(int fp16, int it, const float* k, const float* v, long n, float* ko, float* vo, int th) {
  return fp16 ? by_iters<KB, VB, kvtile::fp16_scales>(it, k, v, n, ko, vo, th)
              : by_iters<KB, VB, kvtile::fp8_scales>(it, k, v, n, ko, vo, th);
}
}  // namespace

// policy: 0 cover, 1 nearest, 2 min_max_error; clips in permille (1000 = none).
extern "C" void kvt_variant_config(int policy, int key_clip, int value_clip) {
  knobs::policy = static_cast<kvtile::row_rounding>(policy);
  knobs::clip[0] = key_clip / 1000.0f;
  knobs::clip[1] = value_clip / 1000.0f;
}

// k, v: [ntiles][128][128] float32 (original frame), D = G = 128. Returns 0 on success.
extern "C" int kvt_variant_roundtrip(const float* k, const float* v, long ntiles, int kb, int vb, int fp16, int iters,
                                     float* kout, float* vout, int nthreads) {
  if (kb == 2 && vb == 2) return by_pack<2, 2>(fp16, iters, k, v, ntiles, kout, vout, nthreads);
  if (kb == 4 && vb == 2) return by_pack<4, 2>(fp16, iters, k, v, ntiles, kout, vout, nthreads);
  if (kb == 4 && vb == 4) return by_pack<4, 4>(fp16, iters, k, v, ntiles, kout, vout, nthreads);
  return -1;
}
