// tests/fuzz/dispatch_paged.cpp: the runtime dispatcher and the paged-cache
// validators with arbitrary sizes, enum values, pointers and tables.
//
// Input: [selector][fields...]. Properties checked (abort on violation):
//  * check(p) == dispatch(p, f); f is called exactly once iff success, with a
//    codec whose config, packing and method match p; to_string never fails;
//  * validate_structure agrees with an independent model of its documented
//    checks (pointers are fake addresses and never dereferenced);
//  * validate_tables agrees with an independent model, reads only
//    seq_lens[0, num_seqs) and the page-table entries of complete tiles
//    (exact-size buffers), writes only scratch marks [0, num_pages), never
//    divides by zero or overflows, whatever the view holds.
#include "fuzz_common.hpp"

#include <kvtile/paged/paged_cache.hpp>

#include <type_traits>
#include <vector>

using namespace kvtile;
using namespace kvtile_fuzz;

namespace {

void fuzz_dispatch(reader& in) {
  codec_params p;
  const std::uint8_t sel = in.u8();
  if (sel & 1) {  // near-valid values, so every branch is reached
    static constexpr int dims[] = {64, 128, 256, 32, 0, -128, 512};
    static constexpr int gs[] = {64, 128, 32, 256, 0, -64};
    static constexpr int bits[] = {2, 4, 8, 0, 1, 3, 16, -4};
    p.head_dim = dims[in.u8() % 7];
    p.tile_tokens = gs[in.u8() % 6];
    p.key_bits = bits[in.u8() % 8];
    p.value_bits = bits[in.u8() % 8];
    p.pack = static_cast<packing>(in.u8() % 3);
    p.algo = static_cast<method>(in.u8() % 4);
  } else {
    p.head_dim = in.i32();
    p.tile_tokens = in.i32();
    p.key_bits = in.i32();
    p.value_bits = in.i32();
    p.pack = static_cast<packing>(in.i32());  // scoped enums: any int value is valid
    p.algo = static_cast<method>(in.i32());
  }
  const status expect = check(p);
  int calls = 0;
  const status got = dispatch(p, [&](auto tag) {
    using C = typename decltype(tag)::type;
    ++calls;
    FUZZ_CHECK(C::D == p.head_dim && C::G == p.tile_tokens);
    FUZZ_CHECK(C::config::key_bits == p.key_bits && C::config::value_bits == p.value_bits);
    FUZZ_CHECK((std::is_same_v<typename C::packer, fp16_scales>) == (p.pack == packing::fp16_scales));
    const method m = C::normalizer::is_none ? (C::rotation::is_identity ? method::kivi : method::rotate_rtn)
                                            : method::kvarn;
    FUZZ_CHECK(m == p.algo);
    FUZZ_CHECK(C::record_bytes % 16 == 0);
  });
  FUZZ_CHECK(got == expect);
  FUZZ_CHECK(calls == (expect == status::success ? 1 : 0));
  if (expect != status::success) {
    FUZZ_CHECK(expect == status::unsupported_head_dim || expect == status::unsupported_tile_tokens ||
               expect == status::unsupported_bits || expect == status::invalid_argument);
  }
  FUZZ_CHECK(to_string(static_cast<status>(in.i32())) != nullptr);
  FUZZ_CHECK(to_string(p.pack) != nullptr && to_string(p.algo) != nullptr);
}

// A fake, never dereferenced address with chosen low bits (or null).
template <class T>
T* fake_ptr(std::uint8_t b) {
  if (b == 0) return nullptr;
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(0x100000u) + (b & 0x3fu));
}

status model_structure(const paged_cache_view& v, std::int64_t rb, int hd, int g) {
  auto mis = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 != 0; };
  if (!v.pages || !v.page_table || !v.seq_lens || !v.tail_k || !v.tail_v) return status::null_pointer;
  if (!v.sink_k != !v.sink_v) return status::invalid_argument;
  if (v.head_dim != hd) return status::unsupported_head_dim;
  if (v.tile_tokens != g) return status::unsupported_tile_tokens;
  if (v.record_bytes != rb || v.record_bytes <= 0) return status::invalid_argument;
  // the records part (pages_error), then the rest
  if (v.head_dim <= 0 || v.tile_tokens <= 0) return status::invalid_argument;
  if (v.kv_heads <= 0 || v.num_pages < 0) return status::invalid_argument;
  std::int64_t t;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(v.num_pages) * v.kv_heads, v.record_bytes, &t))
    return status::invalid_argument;
  if (mis(v.pages) || v.record_bytes % 16 != 0) return status::misaligned;
  if (v.num_seqs < 0 || v.max_pages_per_seq < 0) return status::invalid_argument;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(v.num_seqs) * v.kv_heads,
                             static_cast<std::int64_t>(v.tile_tokens) * v.head_dim, &t))
    return status::invalid_argument;
  if (mis(v.tail_k) || mis(v.tail_v)) return status::misaligned;
  if (v.sink_k && (mis(v.sink_k) || mis(v.sink_v))) return status::misaligned;
  return status::success;
}

void fuzz_structure(reader& in) {
  paged_cache_view v;
  v.pages = fake_ptr<std::uint8_t>(in.u8());
  v.page_table = fake_ptr<const std::int32_t>(in.u8());
  v.seq_lens = fake_ptr<const std::int32_t>(in.u8());
  v.tail_k = fake_ptr<half_t>(in.u8());
  v.tail_v = fake_ptr<half_t>(in.u8());
  v.sink_k = fake_ptr<half_t>(in.u8());
  v.sink_v = fake_ptr<half_t>(in.u8());
  v.num_seqs = in.i32();
  v.kv_heads = in.i32();
  v.head_dim = in.i32();
  v.tile_tokens = in.i32();
  v.max_pages_per_seq = in.i32();
  v.num_pages = in.i32();
  v.record_bytes = in.i64();
  const std::int64_t rb = (in.u8() & 1) ? v.record_bytes : in.i64();
  const int hd = (in.u8() & 1) ? v.head_dim : in.i32();
  const int g = (in.u8() & 1) ? v.tile_tokens : in.i32();
  const status st = validate_structure(v, rb, hd, g);
  FUZZ_CHECK(st == model_structure(v, rb, hd, g));
  if (st == status::success && v.num_pages > 0 && v.num_seqs > 0) {
    // The offsets kernels compute for the last record / tail element are defined (UBSan checks).
    const std::uint8_t* last = v.record(v.num_pages - 1, v.kv_heads - 1);
    FUZZ_CHECK(last == v.pages + (last - v.pages));
    FUZZ_CHECK(v.tile_offset(v.num_seqs - 1, v.kv_heads - 1) >= 0);
  }
  FUZZ_CHECK(v.has_sink() == (v.sink_k != nullptr));
}

status model_tables(const paged_cache_view& v, const std::int32_t* pt, const std::int32_t* lens, bool marks) {
  if (v.num_seqs < 0 || v.tile_tokens <= 0 || v.max_pages_per_seq < 0 || v.num_pages < 0)
    return status::invalid_argument;
  std::vector<bool> used(static_cast<std::size_t>(v.num_pages), false);
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t len = lens[s];
    if (len < 0) return status::invalid_argument;
    const std::int64_t full = len / v.tile_tokens;
    if (full > v.max_pages_per_seq) return status::invalid_argument;
    for (std::int64_t i = v.has_sink() ? 1 : 0; i < full; ++i) {
      const std::int32_t p = pt[static_cast<std::int64_t>(s) * v.max_pages_per_seq + i];
      if (p < 0 || p >= v.num_pages) return status::invalid_argument;
      if (marks) {
        if (used[static_cast<std::size_t>(p)]) return status::invalid_argument;
        used[static_cast<std::size_t>(p)] = true;
      }
    }
  }
  return status::success;
}

void fuzz_tables(reader& in) {
  paged_cache_view v;
  const std::uint8_t shape = in.u8();
  // Sizes: small, so the host tables fit in memory; signs and zeros included.
  auto small = [&](int lim) { return static_cast<std::int32_t>(static_cast<std::int8_t>(in.u8())) % lim; };
  v.num_seqs = small(40);
  v.max_pages_per_seq = small(40);
  v.num_pages = (shape & 2) ? small(100) : static_cast<std::int32_t>(in.u8()) * 4;
  v.tile_tokens = (shape & 4) ? small(128) : 16 << (in.u8() % 4);
  v.kv_heads = 1 + in.u8() % 8;
  v.head_dim = 128;
  static half_t dummy[8];
  if (shape & 8) {
    v.sink_k = dummy;
    v.sink_v = dummy;
  }
  const bool marks = shape & 16;
  const std::size_t nseq = v.num_seqs > 0 ? static_cast<std::size_t>(v.num_seqs) : 0;
  const std::size_t npt = nseq * static_cast<std::size_t>(v.max_pages_per_seq > 0 ? v.max_pages_per_seq : 0);
  const std::size_t npages = v.num_pages > 0 ? static_cast<std::size_t>(v.num_pages) : 0;
  exact_buffer<std::int32_t> lens(nseq), pt(npt);
  exact_buffer<std::uint8_t> scratch(npages);
  for (std::size_t s = 0; s < nseq; ++s) {
    const std::uint8_t b = in.u8();
    // Mostly plausible lengths, sometimes negative or huge.
    lens.p[s] = (b & 0x80) ? in.i32() : static_cast<std::int32_t>((b & 0x7f) * (v.tile_tokens > 0 ? v.tile_tokens : 1) / 4);
  }
  for (std::size_t i = 0; i < npt; ++i) {
    const std::uint8_t b = in.u8();
    pt.p[i] = (b & 0x80) ? in.i32() : static_cast<std::int32_t>(b & 0x7f) - 2;
  }
  std::memset(scratch.p, 0, npages);
  const status expect = model_tables(v, pt.p, lens.p, marks);
  const status got = validate_tables(v, pt.p, lens.p, marks ? scratch.p : nullptr);
  FUZZ_CHECK(got == expect);
  FUZZ_CHECK(validate_tables(v, nullptr, lens.p) == status::null_pointer);
  FUZZ_CHECK(validate_tables(v, pt.p, nullptr) == status::null_pointer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  reader in(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: fuzz_dispatch(in); break;
    case 1: fuzz_structure(in); break;
    default: fuzz_tables(in); break;
  }
  return 0;
}
