// tests/fuzz/decode_record.cpp: arbitrary bytes decoded as a record of every
// dispatchable codec (108 combinations: head_dim x shape x packing x method).
//
// Input: [combo][flags][payload...]. The record buffer is exactly
// Codec::record_bytes (optionally at an odd address: records have no host
// alignment requirement). Properties checked (abort on violation):
//  * validate_keys / validate_values / validate return success or corrupt_record,
//    and validate == first failure of (validate_keys, validate_values);
//  * decode_keys == validate_keys, decode_values == validate_values, decode == validate;
//  * on failure the output buffer is untouched; on success every decoded element
//    is finite and the stride gaps between tokens are untouched;
//  * null pointers give null_pointer, token_stride < head_dim gives invalid_argument;
//  * the length-checked API (record_span) over the raw input, in a buffer of
//    exactly its size: shorter than record_bytes gives truncated_record and
//    reads nothing (ASan), otherwise it equals the pointer API on those bytes.
// Seeds: tests/fuzz/corpus/decode_record/ holds real records of every preset
// shape (tests/fuzz/tools/make_record_corpus.cpp writes them).
// Fill modes: raw copy (zero padded), cyclic repeat, 0xff padded, and a
// structured mode that sets each field uniformly (reaches the 2^120 bound).
#include "fuzz_common.hpp"

#include <vector>

using namespace kvtile;
using namespace kvtile_fuzz;

namespace {

template <class Codec>
void fill_structured(std::uint8_t* rec, reader& in) {
  using L = typename Codec::layout;
  using F = typename Codec::format;
  using code_t = typename Codec::code_type;
  constexpr int D = Codec::D, G = Codec::G;
  std::memset(rec, in.u8(), Codec::record_bytes);
  if constexpr (F::has_vector_scale) {
    for (int f = 0; f < 4; ++f) {
      const std::uint8_t e = in.u8();
      float vs;
      if (e == 0)
        vs = detail::float_from_bits(in.u32());  // arbitrary bits
      else
        vs = detail::exp2i(e < 2 ? -126 : (e - 128 > 127 ? 127 : e - 128));
      detail::store_unaligned<float>(rec + L::vector_scales + 4 * f, vs);
    }
  }
  auto scale_field = [&](std::size_t off, int n) {
    const std::uint8_t mode = in.u8();
    const code_t base = sizeof(code_t) == 1 ? static_cast<code_t>(in.u8()) : static_cast<code_t>(in.u16());
    for (int i = 0; i < n; ++i) {
      code_t c = base;
      if (mode % 4 == 1) c = sizeof(code_t) == 1 ? static_cast<code_t>(in.u8()) : static_cast<code_t>(in.u16());
      if (mode % 4 == 2) c = static_cast<code_t>(base + i);
      if (mode % 4 == 3 && i == n - 1) c = static_cast<code_t>(in.u16());
      detail::store_unaligned<code_t>(rec + off + sizeof(code_t) * static_cast<std::size_t>(i), c);
    }
  };
  scale_field(L::key_scale, D);
  scale_field(L::key_token_scale, G);
  scale_field(L::value_channel_scale, D);
  scale_field(L::value_scale, G);
  auto zero_field = [&](std::size_t off, int n) {
    const std::uint8_t mode = in.u8();
    const std::uint16_t base = in.u16();
    for (int i = 0; i < n; ++i) {
      std::uint16_t z = base;
      if (mode & 1) z = in.u16();
      if ((mode & 2) && (i & 1)) z = static_cast<std::uint16_t>(z ^ 0x8000u);
      detail::store_unaligned<std::uint16_t>(rec + off + 2 * static_cast<std::size_t>(i), z);
    }
  };
  zero_field(L::key_zero, D);
  zero_field(L::value_zero, G);
  const std::uint8_t kc = in.u8(), vc = in.u8();
  std::memset(rec + L::key_codes, kc, Codec::config::key_code_bytes);
  std::memset(rec + L::value_codes, vc, Codec::config::value_code_bytes);
  // Whatever input is left overwrites the record from a chosen offset.
  const std::size_t off = in.u16() % Codec::record_bytes;
  const std::size_t n = in.left() < Codec::record_bytes - off ? in.left() : Codec::record_bytes - off;
  std::memcpy(rec + off, in.rest(), n);
}

template <class Codec, class T>
void check_decode(const std::uint8_t* rec, std::uint8_t flags, status sk, status sv, status s) {
  constexpr int D = Codec::D, G = Codec::G;
  static constexpr std::ptrdiff_t extras[4] = {0, 1, 7, D};
  const std::ptrdiff_t stride = D + extras[(flags >> 6) & 3];
  const frame fr = (flags & 0x20) ? frame::rotated : frame::original;
  const std::size_t n = static_cast<std::size_t>((G - 1) * stride + D);
  exact_buffer<T> k(n), v(n);
  const std::uint16_t sentinel = 0x7e5a;  // a finite half / bf16 / part of a float
  std::vector<std::uint8_t> pristine(n * sizeof(T));
  for (std::size_t i = 0; i < pristine.size(); i += 2) std::memcpy(&pristine[i], &sentinel, 2);
  auto reset = [&](exact_buffer<T>& b) { std::memcpy(b.p, pristine.data(), pristine.size()); };
  auto untouched = [&](const exact_buffer<T>& b) { return std::memcmp(b.p, pristine.data(), pristine.size()) == 0; };
  auto check_written = [&](const exact_buffer<T>& b) {
    for (int g = 0; g < G; ++g) {
      const T* row = b.p + static_cast<std::ptrdiff_t>(g) * stride;
      for (int d = 0; d < D; ++d) FUZZ_CHECK(finite_elem(row[d]));
      if (g + 1 < G)  // the gap between tokens must stay untouched
        FUZZ_CHECK(std::memcmp(row + D, pristine.data(), static_cast<std::size_t>(stride - D) * sizeof(T)) == 0);
    }
  };

  reset(k);
  FUZZ_CHECK(Codec::decode_keys(rec, k.p, stride, fr) == sk);
  if (sk == status::success) check_written(k); else FUZZ_CHECK(untouched(k));

  reset(v);
  FUZZ_CHECK(Codec::decode_values(rec, v.p, stride, fr) == sv);
  if (sv == status::success) check_written(v); else FUZZ_CHECK(untouched(v));

  reset(k);
  reset(v);
  FUZZ_CHECK(Codec::decode(rec, k.p, stride, v.p, stride, fr) == s);
  if (s == status::success) {
    check_written(k);
    check_written(v);
  } else {
    FUZZ_CHECK(untouched(k) && untouched(v));
  }

  // Argument checks come before any read of the record.
  FUZZ_CHECK(Codec::decode_keys(rec, static_cast<T*>(nullptr), stride, fr) == status::null_pointer);
  FUZZ_CHECK(Codec::decode_values(static_cast<const void*>(nullptr), v.p, stride, fr) == status::null_pointer);
  FUZZ_CHECK(Codec::decode_keys(rec, k.p, D - 1, fr) == status::invalid_argument);
  FUZZ_CHECK(Codec::decode_values(rec, v.p, -stride, fr) == status::invalid_argument);
}

// The span API over exactly the input bytes (a heap buffer of that size).
template <class Codec>
void check_span(std::uint8_t flags, const std::uint8_t* data, std::size_t size) {
  constexpr int D = Codec::D, G = Codec::G;
  exact_buffer<std::uint8_t> raw(size > 0 ? size : 1);
  if (size > 0) std::memcpy(raw.p, data, size);
  const record_span span{raw.p, size};
  const frame fr = (flags & 0x20) ? frame::rotated : frame::original;
  exact_buffer<float> k(static_cast<std::size_t>(G) * D), v(static_cast<std::size_t>(G) * D);
  const status s = Codec::decode(span, k.p, D, v.p, D, fr);
  if (size < Codec::record_bytes) {
    FUZZ_CHECK(s == status::truncated_record);
    FUZZ_CHECK(Codec::validate(span) == status::truncated_record);
    FUZZ_CHECK(Codec::decode_keys(span, k.p, D, fr) == status::truncated_record);
    FUZZ_CHECK(Codec::decode_values(span, v.p, D, fr) == status::truncated_record);
  } else {
    FUZZ_CHECK(s == Codec::validate(raw.p));
    FUZZ_CHECK(Codec::validate(span) == s);
  }
}

template <class Codec>
void fuzz_one(std::uint8_t flags, const std::uint8_t* data, std::size_t size) {
  check_span<Codec>(flags, data, size);
  constexpr std::size_t rb = Codec::record_bytes;
  const std::size_t misalign = flags & 1;
  exact_buffer<std::uint8_t> buf(rb + misalign);  // record ends exactly at the allocation's end
  std::uint8_t* rec = buf.p + misalign;
  switch ((flags >> 1) & 3) {
    case 0:
    case 3: {
      const std::size_t n = size < rb ? size : rb;
      std::memcpy(rec, data, n);
      std::memset(rec + n, ((flags >> 1) & 3) == 3 ? 0xff : 0x00, rb - n);
      break;
    }
    case 1:
      if (size == 0) {
        std::memset(rec, 0, rb);
      } else {
        for (std::size_t i = 0; i < rb; ++i) rec[i] = data[i % size];
      }
      break;
    case 2: {
      reader in(data, size);
      fill_structured<Codec>(rec, in);
      break;
    }
  }

  const status sk = Codec::validate_keys(rec);
  const status sv = Codec::validate_values(rec);
  const status s = Codec::validate(rec);
  FUZZ_CHECK(sk == status::success || sk == status::corrupt_record);
  FUZZ_CHECK(sv == status::success || sv == status::corrupt_record);
  FUZZ_CHECK(s == (sk != status::success ? sk : sv));
  FUZZ_CHECK(Codec::validate(nullptr) == status::null_pointer);

  switch ((flags >> 3) % 3) {
    case 0: check_decode<Codec, half_t>(rec, flags, sk, sv, s); break;
    case 1: check_decode<Codec, bfloat16_t>(rec, flags, sk, sv, s); break;
    default: check_decode<Codec, float>(rec, flags, sk, sv, s); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const codec_params p = combo(data[0]);
  const std::uint8_t flags = data[1];
  const status st = dispatch(p, [&](auto tag) {
    using Codec = typename decltype(tag)::type;
    fuzz_one<Codec>(flags, data + 2, size - 2);
  });
  FUZZ_CHECK(st == status::success);
  return 0;
}
