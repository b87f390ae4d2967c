// tests/device/numeric.cu: kvtile's storage-type conversions against CUDA, for
// every one of the 2^32 float bit patterns and every storage code.
//
//  host:   kvtile (host build)   vs CUDA's host implementations in cuda_fp16.hpp,
//          cuda_bf16.hpp and cuda_fp8.hpp (plain C++ on the host), all 2^32
//          floats on all CPU threads (--host-stride N checks every N-th only).
//  device: kvtile (device build) vs the hardware conversions: cvt.rn/.rm/.rp.f16.f32
//          (__float2half_rn/_rd/_ru), cvt.rn.satfinite.e4m3x2.f32
//          (__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) and
//          cvt.rn.bf16.f32 (__float2bfloat16_rn), all 2^32 floats; decode of every
//          half, bfloat16 and E4M3 code against cvt.f32.f16, __bfloat162float and
//          cvt.rn.f16x2.e4m3x2 -> cvt.f32.f16, and against kvtile's host decode.
//  fp16: the device pass of half_t converts with cvt.rn.f16.f32 / cvt.f32.f16
//  itself, so the fp16 checks use half_t's integer reference path
//  (from_float_bits_reference, to_float_bits_reference: what the host runs);
//  their passing on the device is what makes the hardware path bit-identical.
//  E4M3 directed rounding (no CUDA counterpart) is checked on both sides against
//  a table search over the 127 non-negative E4M3 values.
//  quotient (device): detail::div_half_by (division of a half value by a
//  reciprocal and one correction step) against detail::div, every pair of
//  half and float significands plus every finite half at the range ends.
//
// Exit: 0 all passed, 1 a failure, 77 (printing "SKIPPED: no CUDA device") when
// there is no usable device. --host-only runs the host half without a device.
//
// Build: nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I include tests/device/numeric.cu
// (also passes with --use_fast_math: kvtile's conversions use integer operations
// only, so flush-to-zero does not change them).
// ctest-sanitize: run --host-stride 4096
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <kvtile/detail/bits.hpp>
#include <kvtile/numeric/numeric.hpp>

namespace {

int g_passed = 0;
int g_failed = 0;

void check(bool ok, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAILED: %s\n", what);
  }
}

#define CUDA_OK(expr)                                                                          \
  do {                                                                                         \
    cudaError_t err_ = (expr);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      std::printf("FAILED: %s: %s (%s:%d)\n", #expr, cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// ---------------------------------------------------------------------------
// Encode checks: each compares kvtile with a reference for one float.

enum Check { kHalfRn, kHalfRd, kHalfRu, kE4m3Rn, kE4m3Down, kE4m3Up, kBf16Rn, kNumChecks };
const char* const kCheckName[kNumChecks] = {
    "half_t(f) vs __float2half_rn",         "half_round_down vs __float2half_rd",
    "half_round_up vs __float2half_ru",     "float_e4m3_t(f) vs __nv_cvt_float_to_fp8(SATFINITE, E4M3)",
    "e4m3_round_down vs table search",      "e4m3_round_up vs table search",
    "bfloat16_t(f) vs __float2bfloat16_rn"};

// The 127 non-negative finite E4M3 values in code order (which is value order),
// from the definition: code = e << 3 | m, value = m * 2^-9 (e = 0) or
// (8 + m) * 2^(e - 10).
__host__ __device__ float e4m3_table_value(unsigned c) {
  const unsigned e = c >> 3, m = c & 7u;
  return e == 0 ? static_cast<float>(m) * 0.001953125f : ldexpf(static_cast<float>(8u + m), static_cast<int>(e) - 10);
}
__constant__ float d_e4m3_values[127];
float h_e4m3_values[127];

// Directed E4M3 rounding by search: largest code with value <= a (dir < 0) or
// smallest code with value >= a (dir > 0), for a >= 0, saturating at 0x7e.
__host__ __device__ unsigned e4m3_search(const float* values, float a, int dir) {
  // fp32 subnormals by their bits, so that the search also holds when built with
  // flush-to-zero (--use_fast_math), which would compare them as 0.
  std::uint32_t abits;
  memcpy(&abits, &a, sizeof abits);
  if (abits != 0 && abits < 0x00800000u) return dir < 0 ? 0u : 1u;
  if (dir < 0) {
    unsigned lo = 0;  // values[lo] <= a
    for (unsigned step = 64; step != 0; step >>= 1)
      if (lo + step <= 126u && values[lo + step] <= a) lo += step;
    return lo;
  }
  if (!(a <= values[126])) return 126u;  // above 448 (or Inf): saturate
  unsigned hi = 126;                     // values[hi] >= a
  for (unsigned step = 64; step != 0; step >>= 1)
    if (hi >= step && values[hi - step] >= a) hi -= step;
  return hi;
}
__host__ __device__ unsigned e4m3_directed_ref(const float* values, float v, int dir) {
  std::uint32_t vbits;
  memcpy(&vbits, &v, sizeof vbits);
  if ((vbits & 0x7fffffffu) > 0x7f800000u) return 0x7fu;  // NaN
  if ((vbits >> 31) == 0) return e4m3_search(values, v, dir);  // +0 and positive v
  // -0 and negative v: mirror (|v| by its bits: -v could flush a subnormal under
  // -ftz); a zero result keeps the sign.
  const std::uint32_t abits = vbits & 0x7fffffffu;
  float a;
  memcpy(&a, &abits, sizeof a);
  return 0x80u | e4m3_search(values, a, -dir);
}

struct Results {
  std::uint32_t got[kNumChecks];
  std::uint32_t want[kNumChecks];
};

// kvtile vs CUDA for float f. Host build: CUDA's host code; device build: the hardware.
__host__ __device__ void compare_one(float f, const float* e4m3_values, Results& r) {
  // The integer reference path: on the device half_t(f) itself is the hardware
  // cvt.rn.f16.f32, which this check is what justifies.
  r.got[kHalfRn] = kvtile::half_t::from_float_bits_reference(f);
  r.got[kHalfRd] = kvtile::half_round_down(f).bits();
  r.got[kHalfRu] = kvtile::half_round_up(f).bits();
  r.got[kE4m3Rn] = kvtile::float_e4m3_t(f).bits();
  r.got[kE4m3Down] = kvtile::e4m3_round_down(f).bits();
  r.got[kE4m3Up] = kvtile::e4m3_round_up(f).bits();
  r.got[kBf16Rn] = kvtile::bfloat16_t(f).bits();
  r.want[kHalfRn] = static_cast<__half_raw>(__float2half_rn(f)).x;
  r.want[kHalfRd] = static_cast<__half_raw>(__float2half_rd(f)).x;
  r.want[kHalfRu] = static_cast<__half_raw>(__float2half_ru(f)).x;
  r.want[kE4m3Rn] = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
  r.want[kE4m3Down] = e4m3_directed_ref(e4m3_values, f, -1);
  r.want[kE4m3Up] = e4m3_directed_ref(e4m3_values, f, 1);
  r.want[kBf16Rn] = static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x;
}

__device__ float bits_to_float_dev(std::uint32_t u) { return __uint_as_float(u); }

struct Tally {
  unsigned long long mismatches[kNumChecks];
  unsigned int first[kNumChecks];  // smallest mismatching float pattern
};

__global__ void sweep_kernel(Tally* tally) {
  const unsigned long long total = 1ull << 32;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const std::uint32_t u = static_cast<std::uint32_t>(i);
    Results r;
    compare_one(bits_to_float_dev(u), d_e4m3_values, r);
#pragma unroll
    for (int k = 0; k < kNumChecks; ++k) {
      if (r.got[k] != r.want[k]) {
        atomicAdd(&tally->mismatches[k], 1ull);
        atomicMin(&tally->first[k], u);
      }
    }
  }
}

__global__ void probe_kernel(const std::uint32_t* patterns, int n, Results* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) compare_one(bits_to_float_dev(patterns[i]), d_e4m3_values, out[i]);
}

// Decode of every code on the device: kvtile and CUDA, as float bits.
struct DecodeOut {
  std::uint32_t half_k[65536], half_cuda[65536];
  std::uint32_t bf16_k[65536], bf16_cuda[65536];
  std::uint32_t e4m3_k[256], e4m3_cuda[256], e4m3_cuda_op[256];
  std::uint32_t e4m3_half_cuda[256];  // CUDA's fp8 -> half bits
};

__global__ void decode_kernel(DecodeOut* out) {
  const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= 65536u) return;
  const unsigned short s = static_cast<unsigned short>(c);
  out->half_k[c] = __float_as_uint(kvtile::half_t::to_float_bits_reference(s));  // integer path (to_float is cvt here)
  out->half_cuda[c] = __float_as_uint(__half2float(__ushort_as_half(s)));
  out->bf16_k[c] = __float_as_uint(kvtile::bfloat16_t::from_bits(s).to_float());
  out->bf16_cuda[c] = __float_as_uint(__bfloat162float(__ushort_as_bfloat16(s)));
  if (c < 256u) {
    const unsigned char b = static_cast<unsigned char>(c);
    out->e4m3_k[c] = __float_as_uint(kvtile::float_e4m3_t::from_bits(b).to_float());
    const __half_raw hr = __nv_cvt_fp8_to_halfraw(b, __NV_E4M3);
    out->e4m3_half_cuda[c] = hr.x;
    out->e4m3_cuda[c] = __float_as_uint(__half2float(__half(hr)));
    __nv_fp8_e4m3 v;
    v.__x = b;
    out->e4m3_cuda_op[c] = __float_as_uint(static_cast<float>(v));
  }
}

// ---------------------------------------------------------------------------

struct HostTally {
  unsigned long long mismatches[kNumChecks] = {};
  std::uint32_t first[kNumChecks];
  HostTally() { std::fill(first, first + kNumChecks, 0xffffffffu); }
};

void report_encode(const char* side, const unsigned long long* mismatches, const std::uint32_t* first,
                   const Results* probe_first, unsigned long long checked) {
  for (int k = 0; k < kNumChecks; ++k) {
    char what[256];
    std::snprintf(what, sizeof what, "%s: %s (%llu floats)", side, kCheckName[k], checked);
    if (mismatches[k] != 0) {
      std::printf("  %s: %llu mismatches; first at float bits 0x%08x: kvtile 0x%x, reference 0x%x\n", side,
                  mismatches[k], first[k], probe_first[k].got[k], probe_first[k].want[k]);
    }
    check(mismatches[k] == 0, what);
  }
}

void host_sweep(std::uint64_t stride) {
  for (unsigned c = 0; c < 127; ++c) h_e4m3_values[c] = e4m3_table_value(c);
  unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<HostTally> tallies(nthreads);
  std::vector<std::thread> threads;
  const std::uint64_t total = 1ull << 32;
  const std::uint64_t n = (total + stride - 1) / stride;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      HostTally& tally = tallies[t];
      for (std::uint64_t j = t; j < n; j += nthreads) {
        const std::uint32_t u = static_cast<std::uint32_t>(j * stride);
        float f;
        std::memcpy(&f, &u, sizeof f);
        Results r;
        compare_one(f, h_e4m3_values, r);
        for (int k = 0; k < kNumChecks; ++k) {
          if (r.got[k] != r.want[k]) {
            ++tally.mismatches[k];
            tally.first[k] = std::min(tally.first[k], u);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  HostTally sum;
  for (const auto& t : tallies)
    for (int k = 0; k < kNumChecks; ++k) {
      sum.mismatches[k] += t.mismatches[k];
      sum.first[k] = std::min(sum.first[k], t.first[k]);
    }
  Results probe[kNumChecks];
  for (int k = 0; k < kNumChecks; ++k) {
    float f;
    std::memcpy(&f, &sum.first[k], sizeof f);
    compare_one(f, h_e4m3_values, probe[k]);
  }
  std::printf("host sweep: %llu floats (stride %llu) x %d checks on %u threads in %.1f s\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(stride), kNumChecks, nthreads, secs);
  report_encode("host", sum.mismatches, sum.first, probe, n);
}

// Decode of every code on the host: kvtile vs CUDA's host code.
void host_decode() {
  unsigned long long bad_half = 0, bad_bf16 = 0, bad_e4m3 = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(c);
    const std::uint32_t k = bits_of(kvtile::half_t::from_bits(static_cast<std::uint16_t>(c)).to_float());
    const std::uint32_t want = bits_of(__half2float(__half(hr)));
    if (k != want && bad_half++ < 4) std::printf("  host half 0x%04x: kvtile 0x%08x, CUDA 0x%08x\n", c, k, want);
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(c);
    const std::uint32_t kb = bits_of(kvtile::bfloat16_t::from_bits(static_cast<std::uint16_t>(c)).to_float());
    const std::uint32_t wantb = bits_of(__bfloat162float(__nv_bfloat16(br)));
    if (kb != wantb && bad_bf16++ < 4) std::printf("  host bf16 0x%04x: kvtile 0x%08x, CUDA 0x%08x\n", c, kb, wantb);
  }
  for (unsigned c = 0; c < 256u; ++c) {
    const std::uint32_t k = bits_of(kvtile::float_e4m3_t::from_bits(static_cast<std::uint8_t>(c)).to_float());
    const std::uint32_t want =
        bits_of(__half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3))));
    __nv_fp8_e4m3 v;
    v.__x = static_cast<__nv_fp8_storage_t>(c);
    const std::uint32_t want_op = bits_of(static_cast<float>(v));
    if ((k != want || k != want_op) && bad_e4m3++ < 4)
      std::printf("  host e4m3 0x%02x: kvtile 0x%08x, CUDA 0x%08x / 0x%08x\n", c, k, want, want_op);
  }
  check(bad_half == 0, "host: half decode, all 65536 codes, vs __half2float");
  check(bad_bf16 == 0, "host: bfloat16 decode, all 65536 codes, vs __bfloat162float");
  check(bad_e4m3 == 0, "host: E4M3 decode, all 256 codes, vs __nv_cvt_fp8_to_halfraw + __half2float");
}

// launch(blocks) with 16 blocks per SM between two events; the elapsed ms
// (after the launch completed).
template <class Launch>
float timed_sweep(Launch launch) {
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  CUDA_OK(cudaEventRecord(e0));
  launch(sms * 16);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaEventRecord(e1));
  CUDA_OK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  return ms;
}

void device_sweep() {
  for (unsigned c = 0; c < 127; ++c) h_e4m3_values[c] = e4m3_table_value(c);
  CUDA_OK(cudaMemcpyToSymbol(d_e4m3_values, h_e4m3_values, sizeof h_e4m3_values));
  Tally init;
  for (int k = 0; k < kNumChecks; ++k) {
    init.mismatches[k] = 0;
    init.first[k] = 0xffffffffu;
  }
  Tally* d_tally = nullptr;
  CUDA_OK(cudaMalloc(&d_tally, sizeof(Tally)));
  CUDA_OK(cudaMemcpy(d_tally, &init, sizeof init, cudaMemcpyHostToDevice));
  const float ms = timed_sweep([&](int blocks) { sweep_kernel<<<blocks, 256>>>(d_tally); });
  Tally tally;
  CUDA_OK(cudaMemcpy(&tally, d_tally, sizeof tally, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_tally));
  std::printf("device sweep: 2^32 floats x %d checks in %.1f ms\n", kNumChecks, ms);

  // Results for the first mismatching pattern of each check.
  std::uint32_t* d_pat = nullptr;
  Results* d_res = nullptr;
  CUDA_OK(cudaMalloc(&d_pat, sizeof(std::uint32_t) * kNumChecks));
  CUDA_OK(cudaMalloc(&d_res, sizeof(Results) * kNumChecks));
  CUDA_OK(cudaMemcpy(d_pat, tally.first, sizeof(std::uint32_t) * kNumChecks, cudaMemcpyHostToDevice));
  probe_kernel<<<1, 32>>>(d_pat, kNumChecks, d_res);
  CUDA_OK(cudaGetLastError());
  Results probe[kNumChecks];
  CUDA_OK(cudaMemcpy(probe, d_res, sizeof probe, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_pat));
  CUDA_OK(cudaFree(d_res));
  unsigned long long mism[kNumChecks];
  for (int k = 0; k < kNumChecks; ++k) mism[k] = tally.mismatches[k];
  report_encode("device", mism, tally.first, probe, 1ull << 32);

  // Spot values of the hardware conventions, printed for the record.
  const std::uint32_t spots[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x80000000u, 0x80000001u,
                                 0x7f800000u, 0xff800000u, 0x477ff000u, 0x43e80000u};
  const int nspots = static_cast<int>(sizeof spots / sizeof spots[0]);
  CUDA_OK(cudaMalloc(&d_pat, sizeof spots));
  CUDA_OK(cudaMalloc(&d_res, sizeof(Results) * nspots));
  CUDA_OK(cudaMemcpy(d_pat, spots, sizeof spots, cudaMemcpyHostToDevice));
  probe_kernel<<<1, 32>>>(d_pat, nspots, d_res);
  CUDA_OK(cudaGetLastError());
  std::vector<Results> sr(nspots);
  CUDA_OK(cudaMemcpy(sr.data(), d_res, sizeof(Results) * nspots, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_pat));
  CUDA_OK(cudaFree(d_res));
  for (int i = 0; i < nspots; ++i)
    std::printf("  hw: f=0x%08x -> half rn 0x%04x rd 0x%04x ru 0x%04x, e4m3 0x%02x, bf16 0x%04x\n", spots[i],
                sr[i].want[kHalfRn], sr[i].want[kHalfRd], sr[i].want[kHalfRu], sr[i].want[kE4m3Rn],
                sr[i].want[kBf16Rn]);
}

void device_decode() {
  DecodeOut* d_out = nullptr;
  CUDA_OK(cudaMalloc(&d_out, sizeof(DecodeOut)));
  decode_kernel<<<256, 256>>>(d_out);
  CUDA_OK(cudaGetLastError());
  std::vector<DecodeOut> out(1);
  CUDA_OK(cudaMemcpy(out.data(), d_out, sizeof(DecodeOut), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_out));
  const DecodeOut& o = out[0];
  unsigned long long bad_half = 0, bad_bf16 = 0, bad_e4m3 = 0, bad_host = 0;
  for (unsigned c = 0; c < 65536u; ++c) {
    if (o.half_k[c] != o.half_cuda[c] && bad_half++ < 4)
      std::printf("  device half 0x%04x: kvtile 0x%08x, cvt.f32.f16 0x%08x\n", c, o.half_k[c], o.half_cuda[c]);
    if (o.bf16_k[c] != o.bf16_cuda[c] && bad_bf16++ < 4)
      std::printf("  device bf16 0x%04x: kvtile 0x%08x, CUDA 0x%08x\n", c, o.bf16_k[c], o.bf16_cuda[c]);
    const std::uint16_t s = static_cast<std::uint16_t>(c);
    if (o.half_k[c] != bits_of(kvtile::half_t::from_bits(s).to_float()) ||
        o.bf16_k[c] != bits_of(kvtile::bfloat16_t::from_bits(s).to_float()))
      ++bad_host;
  }
  for (unsigned c = 0; c < 256u; ++c) {
    if ((o.e4m3_k[c] != o.e4m3_cuda[c] || o.e4m3_k[c] != o.e4m3_cuda_op[c]) && bad_e4m3++ < 4)
      std::printf("  device e4m3 0x%02x: kvtile 0x%08x, CUDA 0x%08x / 0x%08x (half 0x%04x)\n", c, o.e4m3_k[c],
                  o.e4m3_cuda[c], o.e4m3_cuda_op[c], o.e4m3_half_cuda[c]);
    if (o.e4m3_k[c] != bits_of(kvtile::float_e4m3_t::from_bits(static_cast<std::uint8_t>(c)).to_float())) ++bad_host;
  }
  std::printf("  hw: half 0xfe01 -> 0x%08x, bf16 0xffc1 -> 0x%08x, e4m3 0xff -> half 0x%04x -> 0x%08x\n",
              o.half_cuda[0xfe01], o.bf16_cuda[0xffc1], o.e4m3_half_cuda[0xff], o.e4m3_cuda[0xff]);
  check(bad_half == 0, "device: half decode, all 65536 codes, vs cvt.f32.f16");
  check(bad_bf16 == 0, "device: bfloat16 decode, all 65536 codes, vs __bfloat162float");
  check(bad_e4m3 == 0, "device: E4M3 decode, all 256 codes, vs cvt.rn.f16x2.e4m3x2 + cvt.f32.f16");
  check(bad_host == 0, "device decode == host decode, every half, bfloat16 and E4M3 code");
}

// ---------------------------------------------------------------------------
// detail::div_half_by (the block codec's Y = X / s^ for fp16-valued tiles)
// against detail::div (IEEE division): every significand of a half (a in
// [1, 2), 10 fraction bits) with every significand of a float (b in [1, 2),
// 23 fraction bits), inv = div(1, b). Where no intermediate leaves the normal
// range the three operations scale exactly with the exponents, so this covers
// every half a (normal or subnormal) and every b in the documented range;
// signed zeros, negative a and random exponents at the range ends are checked
// separately.

struct QuotientTally {
  unsigned long long mismatches;
  unsigned long long first;  // b index << 10 | a index of the first mismatch seen
};

__global__ void quotient_kernel(QuotientTally* t) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  unsigned long long bad = 0, first = ~0ull;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (1u << 23); i += stride) {
    const float b = __uint_as_float(0x3f800000u | i);
    const float inv = kvtile::detail::div(1.0f, b);
    for (std::uint32_t k = 0; k < 1024u; ++k) {
      const float a = __uint_as_float(0x3f800000u | (k << 13));
      if (__float_as_uint(kvtile::detail::div_half_by(a, b, inv)) != __float_as_uint(kvtile::detail::div(a, b))) {
        if (bad++ == 0) first = (static_cast<unsigned long long>(i) << 10) | k;
      }
    }
  }
  if (bad) {
    atomicAdd(&t->mismatches, bad);
    atomicMin(&t->first, first);
  }
}

// Spot pairs: every half bit pattern that is finite (signed zeros, subnormals,
// negative values) against b = 2^e * (1 + m 2^-23) for e in {-80, -79, -1, 0,
// 1, 79, 80} and a few m (the range ends included).
__global__ void quotient_spot_kernel(QuotientTally* t) {
  const std::uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= 65536u || (h & 0x7c00u) == 0x7c00u) return;  // Inf / NaN halves are not inputs
  const float a = kvtile::half_t::from_bits(static_cast<std::uint16_t>(h)).to_float();
  const int exps[] = {-80, -79, -1, 0, 1, 79};
  const std::uint32_t mants[] = {0u, 1u, 0x2aaaabu, 0x400000u, 0x555555u, 0x7fffffu};
  unsigned long long bad = 0;
  for (int e : exps)
    for (std::uint32_t m : mants) {
      const float b = ldexpf(__uint_as_float(0x3f800000u | m), e);
      const float inv = kvtile::detail::div(1.0f, b);
      if (!kvtile::detail::div_half_by_ok(b) ||
          __float_as_uint(kvtile::detail::div_half_by(a, b, inv)) != __float_as_uint(kvtile::detail::div(a, b)))
        ++bad;
    }
  const float b = 0x1p80f;  // the upper end itself
  if (!kvtile::detail::div_half_by_ok(b) ||
      __float_as_uint(kvtile::detail::div_half_by(a, b, kvtile::detail::div(1.0f, b))) !=
          __float_as_uint(kvtile::detail::div(a, b)))
    ++bad;
  if (bad) atomicAdd(&t->mismatches, bad);
}

void device_quotient() {
  QuotientTally init{0, ~0ull}, got{}, spot{};
  QuotientTally* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 2 * sizeof(QuotientTally)));
  CUDA_OK(cudaMemcpy(d, &init, sizeof init, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d + 1, &init, sizeof init, cudaMemcpyHostToDevice));
  const float ms = timed_sweep([&](int blocks) { quotient_kernel<<<blocks, 256>>>(d); });
  quotient_spot_kernel<<<256, 256>>>(d + 1);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&spot, d + 1, sizeof spot, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  std::printf("device quotient: 2^10 x 2^23 significand pairs in %.1f ms, %llu mismatches", ms, got.mismatches);
  if (got.mismatches)
    std::printf(" (first: b = 1 + %llu * 2^-23, a = 1 + %llu * 2^-10)", got.first >> 10, got.first & 1023u);
  std::printf("; spot pairs: %llu mismatches\n", spot.mismatches);
  check(got.mismatches == 0, "device: div_half_by == div, every half x float significand pair");
  check(spot.mismatches == 0, "device: div_half_by == div, every finite half x b at the range ends");
}

}  // namespace

int main(int argc, char** argv) {
  bool host_only = false;
  std::uint64_t host_stride = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host-only") {
      host_only = true;
    } else if (a == "--host-stride" && i + 1 < argc) {
      host_stride = std::max<std::uint64_t>(1, std::strtoull(argv[++i], nullptr, 0));
    } else {
      std::printf("usage: %s [--host-only] [--host-stride N]\n", argv[0]);
      return 2;
    }
  }
  if (!host_only) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("SKIPPED: no CUDA device\n");
      return 77;
    }
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  }

  host_decode();
  host_sweep(host_stride);
  if (!host_only) {
    device_decode();
    device_sweep();
    device_quotient();
  }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
