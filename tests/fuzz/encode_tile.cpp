// tests/fuzz/encode_tile.cpp: encoding arbitrary fp16 / bf16 / fp32 bit patterns
// (NaN, Inf, subnormals, extremes) with every dispatchable codec.
//
// Input: [combo][flags][mode][payload...]. flags: element type, entry point
// (encode_keys / encode_values / encode), token stride, misaligned pointer.
// Properties checked (abort on violation):
//  * any finite |x| > 2^48 read by the call -> out_of_range, record untouched;
//  * otherwise: fp8_scales -> success or non_finite_input (never out_of_range);
//    fp16_scales -> the same, or out_of_range with the record untouched
//    (fp16 scales cannot represent every input range);
//  * non_finite_input exactly when an element read was NaN or Inf;
//  * after success: validate == success, every vector scale a finite power of
//    two, every stored scale finite and >= 0, every zero point finite, decode
//    (both frames, fp32) finite, and |x - x^| within the storage-aware bound
//    (a/2 per element in the normalized domain, plus float rounding);
//  * encode writes nothing outside the record (exact buffer) and reads only
//    D elements per token (input buffer exactly (G-1)*stride + D elements).
#include "fuzz_common.hpp"

#include <cmath>
#include <vector>

using namespace kvtile;
using namespace kvtile_fuzz;

namespace {

std::uint64_t mix(std::uint64_t x) { return detail::splitmix64(x); }

// Element bit patterns for G tokens x stride, from the input.
template <class T>
void fill(T* dst, std::size_t n, std::uint8_t mode, reader& in, std::uint64_t salt) {
  const std::uint8_t* pay = in.rest();
  const std::size_t pn = in.left();
  constexpr int bytes = sizeof(T);
  switch (mode % 4) {
    case 0:  // raw bit patterns, cycled
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t b = 0;
        for (int j = 0; j < bytes; ++j)
          b |= static_cast<std::uint32_t>(pn ? pay[(i * bytes + static_cast<std::size_t>(j)) % pn] : 0) << (8 * j);
        dst[i] = from_bits32<T>(b);
      }
      break;
    case 1:    // pseudo-random values at a chosen scale, specials at chosen positions
    case 2: {  // the same with a per-token / per-channel scale (outliers)
      const int e = static_cast<int>(in.u8() % 140) - 110;  // 2^-110 .. 2^29, then times up to 2^24
      const std::uint64_t seed = in.u32() ^ salt;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t r = mix(seed + i);
        float v = static_cast<float>(static_cast<std::int32_t>(r >> 40) - (1 << 23)) * std::ldexp(1.0f, e);
        if (mode % 4 == 2) v *= std::ldexp(1.0f, static_cast<int>((r >> 8) % 8) * ((i % 7 == 0) ? 3 : 0));
        dst[i] = T(v);
      }
      const int specials = in.u8() % 16;
      for (int k = 0; k < specials; ++k) {
        const std::size_t pos = in.u16() % n;
        dst[pos] = from_bits32<T>(bytes == 4 ? in.u32() : in.u16());
      }
      break;
    }
    default: {  // constant rows / columns / tiles (degenerate ranges)
      const std::uint32_t a = bytes == 4 ? in.u32() : in.u16();
      const std::uint32_t b = bytes == 4 ? in.u32() : in.u16();
      const int period = 1 + in.u8() % 64;
      for (std::size_t i = 0; i < n; ++i) dst[i] = from_bits32<T>((i / static_cast<std::size_t>(period)) % 2 ? b : a);
      break;
    }
  }
}

struct scan_result {
  bool non_finite = false;
  bool too_large = false;
};

template <class T>
scan_result scan(const T* src, std::ptrdiff_t stride, int D, int G) {
  scan_result r;
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < D; ++d) {
      const float x = to_f(src[g * stride + d]);
      if (!detail::is_finite(x)) r.non_finite = true;
      else if (std::fabs(x) > max_input_magnitude) r.too_large = true;
    }
  return r;
}

// Checks one side of a successfully encoded record.
template <class Codec, bool Keys>
void check_side(const std::uint8_t* rec, const float* src, std::ptrdiff_t stride) {
  using F = typename Codec::format;
  using V = typename Codec::view;
  constexpr int D = Codec::D, G = Codec::G;
  const V view(rec);
  FUZZ_CHECK((Keys ? Codec::validate_keys(rec) : Codec::validate_values(rec)) == status::success);
  if constexpr (F::has_vector_scale) {
    const vector_field f1 = Keys ? vector_field::key_scale : vector_field::value_scale;
    const vector_field f2 = Keys ? vector_field::key_token_scale : vector_field::value_channel_scale;
    for (vector_field f : {f1, f2}) {
      const float vs = view.vector_scale(f);
      FUZZ_CHECK(detail::is_finite(vs) && vs > 0.0f && F::valid_vector_scale(vs));
    }
  }
  // Row fields (a, z) and the column (Sinkhorn) scale.
  constexpr int R = Keys ? D : G, C = Keys ? G : D;
  for (int r = 0; r < R; ++r) {
    const float a = Keys ? view.key_scale(r) : view.value_scale(r);
    const float z = Keys ? view.key_zero(r) : view.value_zero(r);
    FUZZ_CHECK(detail::is_finite(a) && a >= 0.0f);
    FUZZ_CHECK(detail::is_finite(z));
  }
  for (int c = 0; c < C; ++c) {
    const float s = Keys ? view.key_token_scale(c) : view.value_channel_scale(c);
    FUZZ_CHECK(detail::is_finite(s) && s > 0.0f);
  }
  // Decode (fp32, both frames) is finite.
  std::vector<float> out(static_cast<std::size_t>(G) * D), rot(static_cast<std::size_t>(G) * D);
  FUZZ_CHECK((Keys ? Codec::decode_keys(rec, out.data(), D, frame::original)
                   : Codec::decode_values(rec, out.data(), D, frame::original)) == status::success);
  FUZZ_CHECK((Keys ? Codec::decode_keys(rec, rot.data(), D, frame::rotated)
                   : Codec::decode_values(rec, rot.data(), D, frame::rotated)) == status::success);
  for (float x : out) FUZZ_CHECK(detail::is_finite(x));
  for (float x : rot) FUZZ_CHECK(detail::is_finite(x));
  // Error bound in the rotated frame: x = X[r][c] (rotated input, non-finite -> 0),
  // x^ = (code a + z) s. Covering rule: |x / s - (code a + z)| <= a / 2. Centred
  // policies (min_max_error): at most the error of the centred grid with the
  // next stored step up, a+ / 2, plus half an fp16 ulp of z (the zero's rounding).
  // A clip ratio rho < 1 lets saturated elements lie up to (1 - rho) / rho *
  // qmax * a+ / 2 beyond the grid (test_util.hpp's check_rotated_bound).
  using Rounder = std::conditional_t<Keys, typename Codec::key_rounder, typename Codec::value_rounder>;
  static_assert(Rounder::policy != row_rounding::nearest, "bound assumes cover or min_max_error");
  constexpr bool covering = Rounder::policy == row_rounding::cover;
  double vs = 1;
  if constexpr (F::has_vector_scale) vs = view.vector_scale(Keys ? vector_field::key_scale : vector_field::value_scale);
  float vec[D];
  for (int g = 0; g < G; ++g) {
    for (int d = 0; d < D; ++d) {
      const float x = src[g * stride + d];
      vec[d] = detail::is_finite(x) ? x : 0.0f;
    }
    Codec::rotation::template forward<D>(vec);
    for (int d = 0; d < D; ++d) {
      const int r = Keys ? d : g, c = Keys ? g : d;
      const double a = Keys ? view.key_scale(r) : view.value_scale(r);
      const double z = Keys ? view.key_zero(r) : view.value_zero(r);
      const double s = Keys ? view.key_token_scale(c) : view.value_channel_scale(c);
      const double xr = vec[d], xh = rot[static_cast<std::size_t>(g) * D + d];
      const double up = covering ? a
                        : a + (F::has_vector_scale ? std::max(a / 8, std::ldexp(vs, -9)) : std::max(a / 1024, 0x1p-24));
      const double zr = covering ? 0.0 : std::fabs(z) * 0x1p-11 + 0x1p-25;
      constexpr double rho = Rounder::clip_ratio;
      const double tol = (0.5 * up * (1 + Rounder::qmax * (1 - rho) / rho) + zr) * s * (1 + 1e-6) + 1e-6 * (std::fabs(xr) + (std::fabs(z) + up * Rounder::qmax) * s) + 1e-40;
      if (!(std::fabs(xr - xh) <= tol)) {
        std::fprintf(stderr, "bound: %s r=%d c=%d x=%.9g x^=%.9g a=%.9g z=%.9g s=%.9g tol=%.9g\n",
                     Keys ? "K" : "V", r, c, xr, xh, a, z, s, tol);
        FUZZ_CHECK(false);
      }
    }
  }
}

template <class Codec, class T>
void fuzz_typed(std::uint8_t flags, reader& in) {
  constexpr int D = Codec::D, G = Codec::G;
  static constexpr std::ptrdiff_t extras[4] = {0, 1, 3, D};
  const std::ptrdiff_t stride = D + extras[(flags >> 4) & 3];
  const int api = (flags >> 2) % 3;  // 0 keys, 1 values, 2 both
  const bool misalign = (flags & 0x40) && sizeof(T) > 1;
  const std::size_t n = static_cast<std::size_t>((G - 1) * stride + D);
  const std::uint8_t mode = in.u8();

  // Inputs: exact buffers (a misaligned one is one byte off, still ending at the end).
  exact_buffer<std::uint8_t> kbuf(n * sizeof(T) + misalign), vbuf(n * sizeof(T) + misalign);
  std::vector<T> kin(n), vin(n);
  reader in2 = in;
  fill(kin.data(), n, mode, in, 0);
  fill(vin.data(), n, static_cast<std::uint8_t>(mode >> 2), in2, 0x9e3779b9u);
  std::memcpy(kbuf.p + misalign, kin.data(), n * sizeof(T));
  std::memcpy(vbuf.p + misalign, vin.data(), n * sizeof(T));
  const T* kp = reinterpret_cast<const T*>(kbuf.p + misalign);
  const T* vp = reinterpret_cast<const T*>(vbuf.p + misalign);

  constexpr std::size_t rb = Codec::record_bytes;
  exact_buffer<std::uint8_t> rec(rb);
  std::memset(rec.p, 0xa5, rb);
  auto untouched = [&] {
    for (std::size_t i = 0; i < rb; ++i)
      if (rec.p[i] != 0xa5) return false;
    return true;
  };

  status st;
  if (misalign) {
    st = api == 0 ? Codec::encode_keys(kp, stride, rec.p)
         : api == 1 ? Codec::encode_values(vp, stride, rec.p)
                    : Codec::encode(kp, stride, vp, stride, rec.p);
    FUZZ_CHECK(st == status::misaligned && untouched());
    return;
  }
  typename Codec::workspace* ws = nullptr;
  std::unique_ptr<typename Codec::workspace> own;
  if (flags & 0x80) {
    own.reset(new typename Codec::workspace);
    ws = own.get();
  }
  scan_result sk{}, sv{};
  if (api != 1) sk = scan(kp, stride, D, G);
  if (api != 0) sv = scan(vp, stride, D, G);
  st = api == 0 ? Codec::encode_keys(kp, stride, rec.p, ws)
       : api == 1 ? Codec::encode_values(vp, stride, rec.p, ws)
                  : Codec::encode(kp, stride, vp, stride, rec.p, ws);

  const bool too_large = sk.too_large || sv.too_large;
  const bool non_finite = sk.non_finite || sv.non_finite;
  if (too_large) {
    // Which side failed first does not matter: any too-large element -> out_of_range, nothing written.
    FUZZ_CHECK(st == status::out_of_range);
    FUZZ_CHECK(untouched());
    return;
  }
  if (st == status::out_of_range) {
    if (Codec::format::has_vector_scale) {
      std::fprintf(stderr, "fp8_scales returned out_of_range for in-domain input\n");
      FUZZ_CHECK(false);
    }
    FUZZ_CHECK(untouched());
    return;
  }
  FUZZ_CHECK(st == (non_finite ? status::non_finite_input : status::success));
  // The checks run on fp32 copies (one instantiation per codec, not per element type).
  std::vector<float> f(n);
  if (api != 1) {
    for (std::size_t i = 0; i < n; ++i) f[i] = to_f(kp[i]);
    check_side<Codec, true>(rec.p, f.data(), stride);
  }
  if (api != 0) {
    for (std::size_t i = 0; i < n; ++i) f[i] = to_f(vp[i]);
    check_side<Codec, false>(rec.p, f.data(), stride);
  }
  if (api == 2) {
    FUZZ_CHECK(Codec::validate(rec.p) == status::success);
    for (std::size_t i = Codec::layout::unpadded; i < rb; ++i) FUZZ_CHECK(rec.p[i] == 0);  // padding zeroed
  }
}

template <class Codec>
void fuzz_one(std::uint8_t flags, reader& in) {
  switch (flags % 3) {
    case 0: fuzz_typed<Codec, half_t>(flags, in); break;
    case 1: fuzz_typed<Codec, bfloat16_t>(flags, in); break;
    default: fuzz_typed<Codec, float>(flags, in); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const codec_params p = combo(data[0]);
  const std::uint8_t flags = data[1];
  reader in(data + 2, size - 2);
  const status st = dispatch(p, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    fuzz_one<Codec>(flags, in);
  });
  FUZZ_CHECK(st == status::success);
  return 0;
}
