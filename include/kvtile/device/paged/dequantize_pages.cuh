// kvtile/device/paged/dequantize_pages.cuh: dequantize pages back to fp16.
//
// For each i < num_pages_to_decode and KV head h, the record of page
// page_ids[i] is decoded into out_k/out_v[i][h][G][D] (fp16, token-major),
// in the original frame (frame::original, the default everywhere in kvtile:
// Codec's rotation undone) or the rotated one (frame::rotated, what attention
// with a rotated query reads).
// Bit-identical to paged_record_codec<Codec>::decode on the host followed, for
// frame::original, by Codec::rotation::inverse before the fp16 rounding
// (i.e. Codec::decode semantics on a record of already-rotated input).
// Grid (num_pages_to_decode, kv_heads), one block per (page, head); no host
// sync, no allocation, no atomics.
//
// Design (the kernel is a stream: ~13 KB of record in, 64 KB of fp16 out per
// tile for D = G = 128, so it must spend few instructions per element):
//  * No fp32 tile in shared memory. The scale fields are decoded once per
//    tile into small shared tables; every element is then
//      code -> float (2 instructions: one LOP3 builds the float 2^23 + code
//      2^s, one exact FMA removes the bias and the shift),
//      fma(code, a, z), mul(., scale)   (the host's two roundings),
//      fp16 with the clamp by cvt.rn.satfinite.f16x2.f32 (two elements),
//    and 8 channels of one token leave in one 16-byte store: about 5
//    instructions per element (SASS, k4v2_g128, D = 128).
//  * Keys are channel-major (a 32-bit word holds 32/b tokens of one channel).
//    A thread takes one word column of 8 consecutive channels (8 words) and
//    emits, per token of the column, the token's 8 channels as one 16-byte
//    store: the transpose happens in registers. Lanes are ordered so that a
//    load instruction reads whole 32-byte sectors and a store instruction
//    writes whole 32-byte sectors.
//  * Values are token-major: a thread reads the 8 codes of 8 consecutive
//    channels of one token (b bytes) and stores them as 16 bytes.
//  * frame::original (non-identity rotation): each token row is held by P
//    consecutive lanes, lane p owning Q = 4 chunks of 8 channels,
//    v[q][i] = channel 8 (p + P q) + i. The FWHT (warp_fwht.cuh, chunked
//    layout) runs the stages in the host's order (h = 1, 2, 4 inside a chunk;
//    h = 8 .. 4P across the P lanes with __shfl_xor_sync; h = 8P .. D/2
//    across the lane's chunks), then the normalization, so every value sees
//    the host's exact operation sequence;
//    the chunk layout keeps the stores coalesced. Keys first go through a
//    shared fp32 transpose (C tokens at a time). The randomized sign is folded
//    into c_V (values: exact) and applied to the key products (exact).
// Pages with ids outside [0, num_pages) are skipped (output left untouched).
// Output pointers that are not 16-byte aligned take the generic kernel (the
// block_tile_decoder: fp32 shared tile, 2-byte stores), which gives the same
// bits.
#pragma once

#include "../../config.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../../rotation/hadamard.hpp"
#include "../warp/warp_fwht.cuh"
#include "paged_common.cuh"
#include "paged_policy.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

namespace detail {

// ------------------------------------------------------------------ fp16 out

// 8 consecutive channels of one token -> one 16-byte store (dst 16-byte
// aligned). Written as PTX: through a uint4 lvalue the front end may split
// the store into four 4-byte ones.
// The 8 floats of two float4 (shared-memory chunks) as one array.
KVTILE_DEVICE void unpack8(const float4& lo, const float4& hi, float (&v)[8]) {
  v[0] = lo.x;
  v[1] = lo.y;
  v[2] = lo.z;
  v[3] = lo.w;
  v[4] = hi.x;
  v[5] = hi.y;
  v[6] = hi.z;
  v[7] = hi.w;
}

KVTILE_DEVICE void store8(half_t* dst, const float (&x)[8]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(half2_bits(x[0], x[1])),
               "r"(half2_bits(x[2], x[3])), "r"(half2_bits(x[4], x[5])), "r"(half2_bits(x[6], x[7])));
}

// ------------------------------------------------------------------ codes

// float(code) for code k of a word of B-bit codes (bits [k B, k B + B)),
// exact: OR-ing the code, left at its bit offset s, into the bits of 2^23
// gives the float 2^23 + code 2^s (an integer below 2^24, so exact while
// s + B <= 23); fma(that, 2^-s, -2^(23-s)) = code exactly (the product is
// exact and so is the difference). 2 instructions (LOP3, FFMA) instead of a
// shift, a mask and a slow I2F. Codes k >= high_code<B> (above bit 22) are
// read from the word shifted right by 16, which the caller passes as w from
// that code on (shifting in place: no second register per word).
template <int B>
inline constexpr int high_code = (23 - B) / B + 1;  // first k with k B + B > 23: 11, 5, 2

template <int B>
KVTILE_DEVICE float code_value(std::uint32_t w, int k) {
  const int s = k >= high_code<B> ? k * B - 16 : k * B;
  std::uint32_t bits;
  // (w & mask) | 2^23 as one LOP3 (written as PTX: ptxas would otherwise
  // emit two LOP3s, one per immediate operand).
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(bits) : "r"(w), "r"(((1u << B) - 1u) << s), "r"(0x4b000000u));
  return __fmaf_rn(__uint_as_float(bits), detail::exp2i(-s), -detail::exp2i(23 - s));
}

// The 8 codes of 8 consecutive elements of a row: B bytes (B = 2: the low 16
// bits of w[0]; 4: w[0]; 8: w[0], w[1]), element k at bit k B (little-endian).
template <int B>
struct code8 {
  static constexpr int words = B == 8 ? 2 : 1;
  std::uint32_t w[words];

  KVTILE_DEVICE void load(const std::uint8_t* p) {
    if constexpr (B == 2) {
      w[0] = *reinterpret_cast<const std::uint16_t*>(p);
    } else if constexpr (B == 4) {
      w[0] = *reinterpret_cast<const std::uint32_t*>(p);
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w[0] = v.x;
      w[1] = v.y;
    }
  }
  KVTILE_DEVICE void to_float(float (&c)[8]) const {
    constexpr int per_word = 8 / words;
#pragma unroll
    for (int j = 0; j < words; ++j) {
      std::uint32_t x = w[j];
#pragma unroll
      for (int k = 0; k < per_word; ++k) {
        if (k == high_code<B>) x >>= 16;
        c[j * per_word + k] = code_value<B>(x, k);
      }
    }
  }
};

// ------------------------------------------------------------------ the decoder

template <class Codec, int BLOCK_THREADS, frame F>
struct page_decoder {
  using config = typename Codec::config;
  using packer = typename Codec::packer;
  using view = record_view<config, packer>;
  using layout = typename view::layout;
  using rotation = typename Codec::rotation;

  static constexpr int D = config::head_dim;
  static constexpr int G = config::tile_tokens;
  static constexpr int KB = config::key_bits;
  static constexpr int VB = config::value_bits;
  // Inverse rotation in the kernel (frame::original of a rotating codec).
  static constexpr bool rotate = F == frame::original && !rotation::is_identity;
  // Per-channel signs to apply (randomized_hadamard); plain hadamard has none.
  static constexpr bool has_signs = rotate && !std::is_same_v<rotation, hadamard>;

  static constexpr int NCG = D / 8;    // groups of 8 channels (one 16-byte fp16 store)
  static constexpr int KT = 32 / KB;   // tokens per key code word
  static constexpr int KRW = G / KT;   // key code words per channel

  // Key units: (channel group cg, word column w), 8 words -> KT tokens x 8
  // channels. With rotate the keys go through shared memory C tokens (a pass
  // of KCOLS word columns) at a time.
  static constexpr int C = rotate ? (G < 8192 / D ? G : 8192 / D) : G;
  static constexpr int KCOLS = C / KT;
  static constexpr int KPASSES = G / C;
  static constexpr int KUNITS = NCG * KCOLS;                                   // per pass
  static constexpr int KUNITS_T = (KUNITS + BLOCK_THREADS - 1) / BLOCK_THREADS;  // per thread and pass

  // Token rows: P consecutive lanes per token, Q chunks of 8 channels per
  // lane; thread t holds lane p = t % P of tokens t / P + RPASS r.
  static constexpr int P = rotate ? D / 32 : NCG;
  static constexpr int Q = NCG / P;
  static constexpr int RPASS = BLOCK_THREADS / P;               // tokens per row pass
  static constexpr int VROWS = (G + RPASS - 1) / RPASS;         // value rows per thread
  // Value rows whose codes are loaded at once: at most 8 registers of codes
  // (4 next to the larger 2-bit key units: the first batch is held across
  // them), one row with rotate, whose rows are processed one at a time.
  static constexpr int VBATCH_MAX = rotate ? 1 : (KB == 2 ? 4 : 8) / code8<VB>::words;
  static constexpr int VBATCH = VBATCH_MAX < VROWS ? VBATCH_MAX : VROWS;
  static constexpr int VBATCHES = VROWS / VBATCH;
  // Rows of 32 values and their FWHT: one at a time (unrolled, the compiler
  // interleaves two rows and spills).
  static constexpr int VUNROLL = rotate ? 1 : VBATCHES;
  static constexpr int KROWS = (C + RPASS - 1) / RPASS;         // key rows per thread and pass (rotate)

  template <class Q>
  static constexpr bool is_asymmetric_rtn = std::is_same_v<Q, asymmetric_rtn<Q::bits, Q::clip_permille, Q::policy>>;
  static_assert(is_asymmetric_rtn<typename Codec::key_rounder> && is_asymmetric_rtn<typename Codec::value_rounder>,
                "the decoder implements asymmetric_rtn::dequantize: fma(float(code), scale, zero)");
  static_assert((BLOCK_THREADS & (BLOCK_THREADS - 1)) == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
                "BLOCK_THREADS must be a power of two in [64, 1024]");
  static_assert(layout::key_codes % 16 == 0 && layout::value_codes % 16 == 0, "code sections 16-byte aligned");
  static_assert(G % C == 0 && C % KT == 0 && KT % 4 == 0 && NCG % 4 == 0, "tile shape");
  static_assert((G * P) % 32 == 0 && (C * P) % 32 == 0,
                "row passes must be warp-uniform (inverse_fwht shuffles over the whole warp)");
  static_assert(VROWS % VBATCH == 0, "value batches");

  // Blocks per SM the register allocation must allow (__launch_bounds__):
  // 64 registers per thread (rotated), 80 (rotate: 32-value rows).
  static constexpr int min_blocks_raw = 65536 / (rotate ? 80 : 64) / BLOCK_THREADS;
  static constexpr int min_blocks = min_blocks_raw < 1 ? 1 : min_blocks_raw;

  // Scale fields decoded once per tile (record_view: the host's values).
  struct tables {
    float4 key_az[D / 2];   // (a_K[d], z_K[d], a_K[d+1], z_K[d+1])
    float4 key_t[G / 4];    // t_K[g]
    float2 value_az[G];     // (a_V[g], z_V[g])
    float4 value_c[D / 4];  // c_V[d], times sign(d) when has_signs (exact)
    float4 key_sign[has_signs ? D / 4 : 1];  // sign(d) (+-1) for the keys
  };
  struct storage {
    tables t;
    float4 x[rotate ? C * (D / 4 + 1) : 1];  // key transpose [C][D] fp32 (see x_chunk)
  };

  struct key_words {
    std::uint32_t w[8];  // word column w of channels 8 cg + j
  };
  struct value_batch {
    code8<VB> c[VBATCH][Q];  // rows b VBATCH + r, chunks q
  };

  const std::uint8_t* rec;
  storage& s;

  KVTILE_DEVICE static int tid() { return static_cast<int>(threadIdx.x); }
  KVTILE_DEVICE static int lane_p() { return tid() % P; }   // lane of the token row
  KVTILE_DEVICE static int row0() { return tid() / P; }     // first token row of the thread

  // Key-side fields by threads [0, L), value-side ones by [L, 2L) (L =
  // max(D, G)): every thread decodes about as many fields.
  KVTILE_DEVICE void fill_tables() const {
    constexpr int L = D > G ? D : G;
    const view v(rec);
    auto* kaz = reinterpret_cast<float2*>(s.t.key_az);
    auto* kt = reinterpret_cast<float*>(s.t.key_t);
    auto* vc = reinterpret_cast<float*>(s.t.value_c);
    auto* ks = reinterpret_cast<float*>(s.t.key_sign);
    for (int j = tid(); j < 2 * L; j += BLOCK_THREADS) {
      if (j < L) {
        const int i = j;
        if (i < D) {
          kaz[i] = make_float2(v.key_scale(i), v.key_zero(i));
          if constexpr (has_signs) ks[i] = rotation::sign(i);
        }
        if (i < G) kt[i] = v.key_token_scale(i);
      } else {
        const int i = j - L;
        if (i < D) {
          float c = v.value_channel_scale(i);
          // mul(y, c) * sign == mul(y, c * sign): exact, zeros included.
          if constexpr (has_signs) c = c * rotation::sign(i);
          vc[i] = c;
        }
        if (i < G) s.t.value_az[i] = make_float2(v.value_scale(i), v.value_zero(i));
      }
    }
  }

  // ---------------------------------------------------------------- keys

  // Unit u of a pass -> (channel group, word column in the pass). Lane order:
  // bits 0-1 = low bits of the channel group, then the word column, then the
  // rest of the group. A load instruction reads 8 consecutive words (one
  // sector) of each of 4 channel rows; a store instruction writes 64
  // contiguous bytes (two sectors) of each of 8 token rows.
  KVTILE_DEVICE static bool key_unit_of(int k, int& cg, int& w) {
    const int u = tid() + BLOCK_THREADS * k;
    cg = 4 * ((u >> 2) / KCOLS) + (u & 3);
    w = (u >> 2) % KCOLS;
    return KUNITS % BLOCK_THREADS == 0 || u < KUNITS;
  }

  KVTILE_DEVICE key_words load_key_words(int cg, int w) const {
    const auto* words = reinterpret_cast<const std::uint32_t*>(rec + layout::key_codes) + 8 * cg * KRW + w;
    key_words kw;
#pragma unroll
    for (int j = 0; j < 8; ++j) kw.w[j] = words[j * KRW];
    return kw;
  }

  // Channels [8 cg, 8 cg + 8) x the KT tokens of word column w. Calls
  // sink(tk, x[8]) with K[w KT + tk][8 cg + j] = x[j]: the host's
  // mul(fma(code, a, z), t) (times sign(d) when has_signs: the host's v * sign).
  template <class Sink>
  KVTILE_DEVICE void key_unit(const key_words& kw, int cg, int w, Sink&& sink) const {
    float a[8], z[8], sg[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 az = s.t.key_az[4 * cg + j];
      a[2 * j] = az.x;
      z[2 * j] = az.y;
      a[2 * j + 1] = az.z;
      z[2 * j + 1] = az.w;
    }
    if constexpr (has_signs) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float4 v = s.t.key_sign[2 * cg + j];
        sg[4 * j] = v.x;
        sg[4 * j + 1] = v.y;
        sg[4 * j + 2] = v.z;
        sg[4 * j + 3] = v.w;
      }
    }
    std::uint32_t cw[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) cw[j] = kw.w[j];
#pragma unroll
    for (int t4 = 0; t4 < KT / 4; ++t4) {
      const float4 tv = s.t.key_t[w * (KT / 4) + t4];
      const float ts[4] = {tv.x, tv.y, tv.z, tv.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (4 * t4 + k == high_code<KB>)
#pragma unroll
          for (int j = 0; j < 8; ++j) cw[j] >>= 16;  // see code_value
        float x[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          x[j] = detail::mul(detail::fma(code_value<KB>(cw[j], 4 * t4 + k), a[j], z[j]), ts[k]);
          if constexpr (has_signs) x[j] = x[j] * sg[j];  // exact
        }
        sink(4 * t4 + k, x);
      }
    }
  }

  // Rotated frame (or identity rotation): straight from the code words to fp16.
  KVTILE_DEVICE void keys_direct(half_t* __restrict__ out, const key_words& first) const {
#pragma unroll
    for (int k = 0; k < KUNITS_T; ++k) {
      int cg, w;
      if (!key_unit_of(k, cg, w)) continue;
      const key_words kw = k == 0 ? first : load_key_words(cg, w);
      half_t* base = out + w * KT * D + 8 * cg;
      key_unit(kw, cg, w, [&](int tk, const float (&x)[8]) { store8(base + tk * D, x); });
    }
  }

  // 16-byte chunk `c` (channels 4c..4c+3) of token row `r` in the transpose
  // buffer. Rows are padded by one chunk (consecutive rows start one bank
  // group apart: the P lanes of two or more consecutive rows that a
  // quarter-warp reads hit distinct bank groups) and the chunk index is XORed
  // with bits 0-1 of the row's word column spread to bits 0 and 2 (the key
  // units of a quarter-warp write 4 channel groups, chunk bits 1-2, of rows
  // KT apart in 2 consecutive columns: distinct bank groups). The
  // XOR depends on the column only, so the KT tokens of a unit are immediate
  // offsets from one address.
  static constexpr int XROW = D / 4 + 1;  // row stride in 16-byte chunks
  KVTILE_DEVICE static int x_swizzle(int col) { return (col & 1) | ((col & 2) << 1); }
  KVTILE_DEVICE static int x_chunk(int r, int c) { return r * XROW + (c ^ x_swizzle((r / KT) & 3)); }

  // Original frame: through the shared fp32 transpose, C tokens per pass.
  KVTILE_DEVICE void keys_rotated_back(half_t* __restrict__ out, const key_words& first) const {
    const int p = lane_p();
    key_words kw0 = first;  // unit 0 of the pass
#pragma unroll 1
    for (int pass = 0; pass < KPASSES; ++pass) {
#pragma unroll
      for (int k = 0; k < KUNITS_T; ++k) {
        int cg, w;
        if (!key_unit_of(k, cg, w)) continue;
        const key_words kw = k == 0 ? kw0 : load_key_words(cg, pass * KCOLS + w);
        // Rows w KT + tk: x_chunk(w KT + tk, c) = these + tk XROW.
        float4* x0 = s.x + x_chunk(w * KT, 2 * cg);
        float4* x1 = s.x + x_chunk(w * KT, 2 * cg + 1);
        key_unit(kw, cg, pass * KCOLS + w, [&](int tk, const float (&x)[8]) {
          x0[tk * XROW] = make_float4(x[0], x[1], x[2], x[3]);
          x1[tk * XROW] = make_float4(x[4], x[5], x[6], x[7]);
        });
      }
      __syncthreads();
      {  // the next pass's first unit is in flight during this pass's rows
        int cg, w;
        if (pass + 1 < KPASSES && key_unit_of(0, cg, w)) kw0 = load_key_words(cg, (pass + 1) * KCOLS + w);
      }
      if (C % RPASS == 0 || row0() < C) {  // warp-uniform
        half_t* base = out + (pass * C + row0()) * D + 8 * p;
#pragma unroll
        for (int rr = 0; rr < KROWS; ++rr) {
          const int r = row0() + RPASS * rr;
          float v[Q][8];
#pragma unroll
          for (int q = 0; q < Q; ++q) {
            const int c = 2 * (p + P * q);
            unpack8(s.x[x_chunk(r, c)], s.x[x_chunk(r, c + 1)], v[q]);
          }
          inverse_fwht(v);
          store_row(base + RPASS * rr * D, v);
        }
      }
      __syncthreads();  // the next pass overwrites x
    }
  }

  // ---------------------------------------------------------------- rows

  // v[q] = channels 8 (p + P q) .. + 7 of the row; row = the row's lane-p base.
  KVTILE_DEVICE static void store_row(half_t* __restrict__ row, const float (&v)[Q][8]) {
#pragma unroll
    for (int q = 0; q < Q; ++q) store8(row + 8 * P * q, v[q]);
  }

  // Codec::rotation::inverse on one token row (signs already applied), the
  // host's operation order (warp_fwht.cuh, chunked layout: v[q][i] is channel
  // 8 (p + P q) + i), then the multiplication by hadamard_norm.
  KVTILE_DEVICE static void inverse_fwht(float (&v)[Q][8]) {
    lane_fwht_unnormalized<P, fwht_lane_op::signed_fma>(v);  // memory-bound kernel: fewer instructions
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int i = 0; i < 8; ++i) v[q][i] = detail::mul(v[q][i], detail::hadamard_norm<D>::value);
  }

  // ---------------------------------------------------------------- values

  KVTILE_DEVICE static bool has_value_rows() { return G % RPASS == 0 || row0() < G; }  // warp-uniform

  // Codes of value rows b VBATCH .. b VBATCH + VBATCH - 1 of this thread.
  KVTILE_DEVICE value_batch load_value_batch(int b) const {
    const std::uint8_t* codes = rec + layout::value_codes + row0() * (D * VB / 8) + lane_p() * VB;
    value_batch vb;
#pragma unroll
    for (int r = 0; r < VBATCH; ++r)
#pragma unroll
      for (int q = 0; q < Q; ++q) vb.c[r][q].load(codes + (b * VBATCH + r) * RPASS * (D * VB / 8) + P * q * VB);
    return vb;
  }

  // V[g][d] = mul(fma(code, a_V[g], z_V[g]), c_V[d]) (c_V times sign(d) when
  // has_signs), straight from the token's codes; inverse rotation if rotate.
  KVTILE_DEVICE void values(half_t* __restrict__ out, const value_batch& first) const {
    if (!has_value_rows()) return;
    const int p = lane_p();
    // This lane's channel scales, the same for all its rows: kept in
    // registers for the 8 channels of a rotated-frame lane, re-read per row
    // (2 LDS.128 per 8 channels) for the 32 of a rotate lane (registers).
    float c[Q][8];
    auto load_c = [&] {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        unpack8(s.t.value_c[2 * (p + P * q)], s.t.value_c[2 * (p + P * q) + 1], c[q]);
      }
    };
    if constexpr (!rotate) load_c();
    half_t* base = out + row0() * D + 8 * p;
    value_batch cur = first;
#pragma unroll VUNROLL
    for (int b = 0; b < VBATCHES; ++b) {
      value_batch next;  // software pipelining: the next batch's codes are in flight meanwhile
      if (b + 1 < VBATCHES) next = load_value_batch(b + 1);
#pragma unroll
      for (int r = 0; r < VBATCH; ++r) {
        const int rr = b * VBATCH + r;
        const float2 az = s.t.value_az[row0() + RPASS * rr];
        if constexpr (rotate) load_c();
        float v[Q][8];
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          float cf[8];
          cur.c[r][q].to_float(cf);
#pragma unroll
          for (int i = 0; i < 8; ++i) v[q][i] = detail::mul(detail::fma(cf[i], az.x, az.y), c[q][i]);
        }
        if constexpr (rotate) inverse_fwht(v);
        store_row(base + RPASS * rr * D, v);
      }
      cur = next;
    }
  }

  // ---------------------------------------------------------------- tile

  KVTILE_DEVICE void run(half_t* __restrict__ out_k, half_t* __restrict__ out_v) const {
    // The first key unit's words and the first value batch's codes are loaded
    // before the scale tables, so their latency overlaps the table pass.
    // With rotate, values go first and only their codes are prefetched:
    // holding key words across the value rows (32 values and the FWHT per
    // row) would spill.
    key_words k0{};
    value_batch v0{};
    if constexpr (!rotate) {
      int cg, w;
      if (key_unit_of(0, cg, w)) k0 = load_key_words(cg, w);
    }
    if (has_value_rows()) v0 = load_value_batch(0);
    fill_tables();
    __syncthreads();
    if constexpr (rotate) {
      values(out_v, v0);
      int cg, w;
      if (key_unit_of(0, cg, w)) k0 = load_key_words(cg, w);
      keys_rotated_back(out_k, k0);
    } else {
      keys_direct(out_k, k0);
      values(out_v, v0);
    }
  }
};

}  // namespace detail

// Fast kernel (16-byte aligned outputs). Static shared memory (3-5 KB of
// tables; + C (D + 4) 4 = 33-35 KB of key transpose for frame::original), so
// no attribute to set.
template <class Codec, int BLOCK_THREADS, frame F>
__global__ void __launch_bounds__(BLOCK_THREADS, detail::page_decoder<Codec, BLOCK_THREADS, F>::min_blocks)
    dequantize_pages_kernel(const __grid_constant__ paged_cache_view view, const std::int32_t* __restrict__ page_ids,
                        half_t* __restrict__ out_k, half_t* __restrict__ out_v) {
  using decoder = detail::page_decoder<Codec, BLOCK_THREADS, F>;
  constexpr int D = Codec::D, G = Codec::G;
  __shared__ typename decoder::storage smem;
  const int i = blockIdx.x, h = blockIdx.y;
  const std::int32_t page = page_ids[i];
  if (page < 0 || page >= view.num_pages) return;  // block-uniform
  const std::int64_t o = (static_cast<std::int64_t>(i) * view.kv_heads + h) * G * D;
  decoder{view.record(page, h), smem}.run(out_k + o, out_v + o);
}

// Generic kernel: block_tile_decoder (fp32 tile in dynamic shared memory,
// 2-byte stores); any output alignment.
template <class Codec, int BLOCK_THREADS>
__global__ void __launch_bounds__(BLOCK_THREADS)
    dequantize_pages_generic_kernel(const __grid_constant__ paged_cache_view view,
                                const std::int32_t* __restrict__ page_ids, half_t* __restrict__ out_k,
                                half_t* __restrict__ out_v, frame f) {
  using decoder = block_tile_decoder<paged_record_codec<Codec>, BLOCK_THREADS>;
  constexpr int D = Codec::D, G = Codec::G;
  extern __shared__ __align__(16) unsigned char kvtile_smem[];
  auto& ts = *reinterpret_cast<typename decoder::TempStorage*>(kvtile_smem);
  const int i = blockIdx.x, h = blockIdx.y;
  const std::int32_t page = page_ids[i];
  if (page < 0 || page >= view.num_pages) return;
  const std::int64_t o = (static_cast<std::int64_t>(i) * view.kv_heads + h) * G * D;
  decoder(ts).template decode<half_t, typename Codec::rotation>(view.record(page, h), out_k + o, D, out_v + o, D, f);
}

// Dynamic shared memory of the generic kernel (the fast one uses static
// shared memory: sizeof(detail::page_decoder<...>::storage)), at
// Policy::dequantize_block_threads threads.
template <class Codec, class Policy = paged_policy>
constexpr std::size_t dequantize_pages_smem_bytes() {
  return sizeof(
      typename block_tile_decoder<paged_record_codec<Codec>, Policy::dequantize_block_threads>::TempStorage);
}

// Checks the current device and sets the generic kernel up on it (see
// prepare_append; the fast kernels use static shared memory only and are
// checked by launch_dequantize_pages itself).
template <class Codec, class Policy = paged_policy>
inline launch_result prepare_dequantize_pages() {
  return detail::prepare_kernel<dequantize_pages_generic_kernel<Codec, Policy::dequantize_block_threads>>(
      dequantize_pages_smem_bytes<Codec, Policy>(), paged_min_cc);
}

// Pages with ids outside [0, num_pages) are skipped (output left untouched).
// Policy (paged_policy.hpp): dequantize_block_threads for the rotated-frame
// and generic kernels, dequantize_original_block_threads for the
// original-frame kernel. Returns unsupported_arch on a GPU below sm_80 or
// without code for it in the binary.
template <class Codec, class Policy = paged_policy>
inline launch_result launch_dequantize_pages(const paged_cache_view& view, const std::int32_t* page_ids,
                                             std::int32_t count, half_t* out_k, half_t* out_v,
                                             frame f = frame::original, cudaStream_t stream = nullptr) {
  constexpr int BLOCK_THREADS = Policy::dequantize_block_threads;
  constexpr int ORIGINAL_BLOCK_THREADS = Policy::dequantize_original_block_threads;
  if (!view.pages || !page_ids || !out_k || !out_v) return status::null_pointer;
  // The records part of the view's structure (paged_cache.hpp, shared with validate_structure).
  if (status s = validate_pages(view, static_cast<std::int64_t>(Codec::record_bytes), Codec::D, Codec::G);
      s != status::success)
    return s;
  if (count < 0 || view.kv_heads > 65535) return status::invalid_argument;  // grid.y
  if (f != frame::original && f != frame::rotated) return status::invalid_argument;
  if (count == 0) return status::success;
  const dim3 grid(count, view.kv_heads);
  const launch_options opts{stream, false};
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(out_k) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out_v) % 16 == 0;
  if (!aligned) {
    constexpr auto kernel = dequantize_pages_generic_kernel<Codec, BLOCK_THREADS>;
    if (launch_result r = prepare_dequantize_pages<Codec, Policy>(); !r.ok()) return r;
    return detail::launch_kernel<kernel>(grid, dim3(BLOCK_THREADS), dequantize_pages_smem_bytes<Codec, Policy>(),
                                         opts, view, page_ids, out_k, out_v, f);
  }
  if (f == frame::original && !Codec::rotation::is_identity) {
    constexpr auto kernel = dequantize_pages_kernel<Codec, ORIGINAL_BLOCK_THREADS, frame::original>;
    if (launch_result r = detail::prepare_kernel<kernel>(0, paged_min_cc); !r.ok()) return r;
    return detail::launch_kernel<kernel>(grid, dim3(ORIGINAL_BLOCK_THREADS), 0, opts, view, page_ids, out_k, out_v);
  }
  constexpr auto kernel = dequantize_pages_kernel<Codec, BLOCK_THREADS, frame::rotated>;
  if (launch_result r = detail::prepare_kernel<kernel>(0, paged_min_cc); !r.ok()) return r;
  return detail::launch_kernel<kernel>(grid, dim3(BLOCK_THREADS), 0, opts, view, page_ids, out_k, out_v);
}

}  // namespace device
KVTILE_NAMESPACE_END
