// kvtile/device/attention/detail/fragments.cuh: register-level building blocks of the
// decode kernels: mma.sync m16n8k16, movmatrix, async bulk copies with mbarriers,
// and the code -> fp16 conversion that turns packed 2- and 4-bit codes into MMA
// operand registers without touching memory.
//
// Code conversion (method.md section 8, decode-kernel.md point 2): a code x in
// the mantissa of 1024.0 (0x6400) reads as 1024 + x, and one fma.f16x2 with an
// exact power-of-two scale and bias returns x. A code at bit 2k of a 16-bit half
// reads as 1024 + 2^(2k) x; the scale 2^(-2k) undoes that, so most codes need no
// shift. Both halves of a register come from two different code rows merged by
// one byte permute (prmt): that is how the MMA pairs (two channels of one token
// for keys, two tokens of one channel for values) are formed from row-major
// codes.
#pragma once

#include <cuda_runtime.h>
#include <nv/target>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../../config.hpp"

KVTILE_NAMESPACE_BEGIN
namespace attention::detail {

// c += A * B, A 16x16 row-major fp16, B 16x8 col-major fp16, c fp32.
KVTILE_DEVICE void mma_f16(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2, std::uint32_t a3,
                           std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Transposes the warp's 8x8 b16 matrix (thread 4r+t holds row r, columns 2t, 2t+1).
KVTILE_DEVICE std::uint32_t movmatrix_trans(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// {lo, hi} -> f16x2 (round to nearest even).
KVTILE_DEVICE std::uint32_t pack_half2(float lo, float hi) {
  std::uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

KVTILE_DEVICE void half2_to_float2(std::uint32_t h, float& lo, float& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(h));
}

// Four E4M3 bytes (lowest byte first) -> four floats, exact. sm_89+ converts
// in hardware; below, the byte's sign and magnitude bits moved into an fp16
// (exponent bias 15 instead of 7) read as the value times 2^-8 for normal and
// subnormal codes alike, and 0x7f / 0xff (E4M3's NaN) read as NaN.
KVTILE_DEVICE void e4m3x4_to_float(std::uint32_t w, float* f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t b = (w >> (8 * i)) & 0xffu;
    const std::uint32_t h = ((b & 0x80u) << 8) | ((b & 0x7fu) << 7);
    float lo, hi;
    half2_to_float2(h, lo, hi);
    f[i] = (b & 0x7fu) == 0x7fu ? __int_as_float(0x7fc00000) : lo * 256.0f;
  }
#else
  std::uint32_t h01, h23;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(h01), "=r"(h23)
      : "r"(w));
  half2_to_float2(h01, f[0], f[1]);
  half2_to_float2(h23, f[2], f[3]);
#endif
}

KVTILE_DEVICE std::uint32_t hfma2(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// (a & mask) | magic in ONE lop3 (nvcc otherwise emits and + or, which ptxas
// keeps as two LOP3s with immediates: ~250 extra instructions per k4v2 tile).
template <std::uint32_t Mask>
KVTILE_DEVICE std::uint32_t and_or(std::uint32_t a, std::uint32_t magic) {
  std::uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "n"(Mask), "r"(magic));
  return d;
}

KVTILE_DEVICE std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Loads NB (2, 4, 8, 16 or 32) bytes, aligned to min(NB, 16), into 32-bit words.
template <int NB>
KVTILE_DEVICE void load_words(const std::uint8_t* p, std::uint32_t* w) {
  static_assert(NB == 2 || NB == 4 || NB == 8 || NB == 16 || NB == 32, "unsupported stream size");
  if constexpr (NB == 2) {
    w[0] = *reinterpret_cast<const std::uint16_t*>(p);
  } else if constexpr (NB == 4) {
    w[0] = *reinterpret_cast<const std::uint32_t*>(p);
  } else if constexpr (NB == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < NB / 16; ++i) {
      const uint4 v = *reinterpret_cast<const uint4*>(p + 16 * i);
      w[4 * i + 0] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  }
}

// ---------------------------------------------------------------- code pairs
// Two code streams x, y (N codes of Bits bits each, element i at bits
// [i*Bits, (i+1)*Bits) of the little-endian stream) -> N registers whose low
// and high halves hold x_i and y_i. Per 16-bit chunk of the streams one prmt
// merges x's and y's chunk into a piece p (x low, y high) and one shift gives
// p2 = p >> (Bits == 4 ? 8 : 10); code k of the chunk then sits at bit offset
// raw_shift(k) of both halves of p (k < split) or p2, so `piece & mask(k)`
// isolates the pair. The conversions below differ only in what they do with
// that masked pair.
template <int Bits>
KVTILE_DEVICE constexpr int raw_shift(int i) {
  return Bits == 4 ? (i % 2) * 4 : ((i % 8) < 5 ? 2 * (i % 8) : 2 * (i % 8 - 5));
}
// 2^(24 - raw_shift(i)): out[i] of pair_extract times this is the code.
template <int Bits>
KVTILE_DEVICE constexpr float raw_unscale(int i) {
  return static_cast<float>(1u << (24 - raw_shift<Bits>(i)));
}

namespace pair_detail {
template <int Bits>
inline constexpr int split = Bits == 4 ? 2 : 5;  // first code of a chunk read from p2
template <int Bits, int K>
inline constexpr std::uint32_t mask = ((1u << Bits) - 1u) * 0x00010001u << raw_shift<Bits>(K);

template <int Bits, int Ck, class F, int... K>
KVTILE_DEVICE void chunk(const std::uint32_t* x, const std::uint32_t* y, std::uint32_t* out, F& f,
                         std::integer_sequence<int, K...>) {
  const std::uint32_t p = prmt(x[Ck / 2], y[Ck / 2], (Ck & 1) ? 0x7632u : 0x5410u);
  const std::uint32_t p2 = p >> (Bits == 4 ? 8 : 10);
  ((out[Ck * sizeof...(K) + K] = f(K < split<Bits> ? p : p2, std::integral_constant<int, K>{})), ...);
}
template <int Bits, class F, int... Ck>
KVTILE_DEVICE void chunks(const std::uint32_t* x, const std::uint32_t* y, std::uint32_t* out, F& f,
                          std::integer_sequence<int, Ck...>) {
  (chunk<Bits, Ck>(x, y, out, f, std::make_integer_sequence<int, 16 / Bits>{}), ...);
}
}  // namespace pair_detail

// The skeleton: out[16 / Bits * ck + k] = f(piece, std::integral_constant<int, k>)
// for chunk ck and code k of the chunk.
template <int Bits, int N, class F>
KVTILE_DEVICE void for_each_pair(const std::uint32_t* x, const std::uint32_t* y, std::uint32_t* out, F&& f) {
  static_assert(Bits == 2 || Bits == 4, "2- and 4-bit codes");
  static_assert((N * Bits) % 16 == 0, "a stream holds whole 16-bit chunks");
  pair_detail::chunks<Bits>(x, y, out, f, std::make_integer_sequence<int, N * Bits / 16>{});
}

// Codes -> f16x2 {x_i, y_i} (Center: {x_i - m, y_i - m}, m = 2^(Bits-1), the
// code midpoint), exact: the masked pair OR-ed into 0x6400 (one LOP3) reads as
// 1024 + 2^s x (s = raw_shift), and one fma.f16x2 with the exact scale 2^-s
// and bias -(1024 2^-s + m) returns x (- m).
template <int Bits, int N, bool Center = false>
KVTILE_DEVICE void pair_convert(const std::uint32_t* x, const std::uint32_t* y, std::uint32_t* out) {
  for_each_pair<Bits, N>(x, y, out, [](std::uint32_t piece, auto k) {
    constexpr int s = raw_shift<Bits>(decltype(k)::value);
    // fp16 2^-s; biases -(1024 / 2^s + m) for s = 0, 2, 4, 6, 8 (2-bit) and 0, 4 (4-bit)
    constexpr std::uint32_t scale = (0x3C00u - (static_cast<std::uint32_t>(s) << 10)) * 0x00010001u;
    constexpr std::uint32_t b2[5] = {Center ? 0xE402E402u : 0xE400E400u,   // -1026 : -1024
                                     Center ? 0xDC08DC08u : 0xDC00DC00u,   // -258 : -256
                                     Center ? 0xD420D420u : 0xD400D400u,   // -66 : -64
                                     Center ? 0xCC80CC80u : 0xCC00CC00u,   // -18 : -16
                                     Center ? 0xC600C600u : 0xC400C400u};  // -6 : -4
    constexpr std::uint32_t b4[2] = {Center ? 0xE408E408u : 0xE400E400u,   // -1032 : -1024
                                     Center ? 0xD480D480u : 0xD400D400u};  // -72 : -64
    constexpr std::uint32_t bias = Bits == 4 ? b4[s / 4] : b2[s / 2];
    return hfma2(and_or<pair_detail::mask<Bits, decltype(k)::value>>(piece, 0x64006400u), scale, bias);
  });
}

// pair_convert without the fma: the masked pair itself is the operand, read as
// fp16 SUBNORMALS. A code x at bit offset s of a 16-bit half, with s + Bits <=
// 10 (inside the mantissa, exponent field 0), reads as the fp16 x 2^(s - 24),
// exactly; so `piece & mask` (one LOP3) is an MMA operand, and the factor
// 2^(s - 24) is removed after the MMA, where it is a constant of the
// accumulator (raw_unscale). The tensor cores multiply fp16 subnormals exactly
// (the products are exact in fp32, see docs/attention.md, "Raw codes"). One
// instruction per register instead of two; not centered (no bias without the fma).
template <int Bits, int N>
KVTILE_DEVICE void pair_extract(const std::uint32_t* x, const std::uint32_t* y, std::uint32_t* out) {
  for_each_pair<Bits, N>(x, y, out, [](std::uint32_t piece, auto k) {
    return piece & pair_detail::mask<Bits, decltype(k)::value>;
  });
}

// ---------------------------------------------------------------- mbarriers and the two load paths
// A stage is filled by one of two load paths (decode_policy::bulk_copies and
// the target, bulk_path below) and completes on its "full" mbarrier either way:
// - bulk (sm_90+): one lane issues a cp.async.bulk per record segment and one
//   arrive.expect_tx for the record's bytes (barrier count 1);
// - cp.async (sm_80+): every lane of the issuing warp copies 16-byte pieces
//   with cp.async.cg and arrives once its copies have landed
//   (cp.async.mbarrier.arrive.noinc; barrier count 32).
// Waiting is try_wait on sm_90+, test_wait in a loop below.

template <bool Bulk>
inline constexpr std::uint32_t stage_arrivals = Bulk ? 1u : 32u;

// Whether a kernel of policy P uses bulk copies on the target being compiled.
template <class P>
KVTILE_DEVICE constexpr bool bulk_path() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return P::bulk_copies;
#else
  return false;
#endif
}

KVTILE_DEVICE std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

KVTILE_DEVICE void mbar_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes initialized barriers visible to the async proxy (sm_90+; below, the
// __syncthreads that follows the initialization orders it).
KVTILE_DEVICE void mbar_init_fence() {
  NV_IF_TARGET(NV_PROVIDES_SM_90, (asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");));
}

// Orders generic-proxy accesses of shared memory before later bulk copies
// (async proxy) into it; cp.async (sm_80 path) needs no proxy fence.
KVTILE_DEVICE void fence_proxy_async() {
  NV_IF_TARGET(NV_PROVIDES_SM_90, (asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");));
}

// Lets the dependent (merge) kernel start launching (PDL, sm_90+).
KVTILE_DEVICE void trigger_dependents() { NV_IF_TARGET(NV_PROVIDES_SM_90, (cudaTriggerProgrammaticLaunchCompletion();)); }

KVTILE_DEVICE void mbar_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  NV_IF_TARGET(NV_PROVIDES_SM_90,
               (asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                             "r"(bytes)
                             : "memory");),
               (__trap();));
}

// One bulk copy global -> shared, completing on `bar`. bytes % 16 == 0, both 16-byte aligned.
KVTILE_DEVICE void bulk_copy_g2s(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  NV_IF_TARGET(NV_PROVIDES_SM_90,
               (asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
                             "[%3];\n" ::"r"(smem_addr(dst)),
                             "l"(src), "r"(bytes), "r"(smem_addr(bar))
                             : "memory");),
               (__trap();));
}

// 16 bytes global -> shared (L2 only), asynchronously; both 16-byte aligned.
KVTILE_DEVICE void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)),
               "l"(static_cast<std::uint64_t>(__cvta_generic_to_global(src)))
               : "memory");
}

// The executing lane arrives on `bar` once its earlier cp.async copies have
// landed (the barrier's count includes this arrival).
KVTILE_DEVICE void cp_async_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Warp-cooperative copy of `bytes` (a multiple of 16, 16-byte aligned ends)
// in 16-byte pieces, lane `lane` taking pieces lane, lane + 32, ...
KVTILE_DEVICE void warp_copy_async(std::uint8_t* dst, const std::uint8_t* src, std::uint32_t bytes, int lane) {
  for (std::uint32_t o = 16u * static_cast<std::uint32_t>(lane); o < bytes; o += 512u) cp_async16(dst + o, src + o);
}

// Named CTA barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a
// multiple of 32, every lane of each participating warp). libcu++'s <cuda/ptx>
// wraps only the cluster barriers.
KVTILE_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

KVTILE_DEVICE void mbar_arrive(std::uint64_t* bar) {
  NV_IF_TARGET(NV_PROVIDES_SM_90,
               (asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");),
               (asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar))
                             : "memory");));
}

// Whether the phase of `bar` with the given parity (the current or the
// preceding one) has completed; does not wait.
KVTILE_DEVICE bool mbar_test(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile("{\n"
               ".reg .pred p;\n"
               "mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n"
               "}\n"
               : "=r"(done)
               : "r"(smem_addr(bar)), "r"(parity)
               : "memory");
  return done != 0;
}

// Waits for the completion of the phase of `bar` with the given parity.
KVTILE_DEVICE void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  NV_IF_TARGET(NV_PROVIDES_SM_90,
               (asm volatile("{\n"
                             ".reg .pred done;\n"
                             "WAIT_%=:\n"
                             "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                             "@!done bra WAIT_%=;\n"
                             "}\n" ::"r"(smem_addr(bar)),
                             "r"(parity)
                             : "memory");),
               (while (!mbar_test(bar, parity)) {
               }));
}

}  // namespace attention::detail
KVTILE_NAMESPACE_END
