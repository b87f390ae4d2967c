// tests/fuzz/fuzz_common.hpp: helpers shared by kvtile's libFuzzer targets.
//
// FUZZ_CHECK aborts (libFuzzer records a crash) when a documented property of
// kvtile fails; the sanitizers catch out-of-bounds access and UB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <kvtile/kvtile.hpp>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace kvtile_fuzz {

// Reads bytes from the fuzzer input; 0 once exhausted (so every input is usable).
class reader {
 public:
  reader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  std::uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u16()) | (static_cast<std::uint32_t>(u16()) << 16); }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::int64_t i64() {
    const std::uint64_t lo = u32(), hi = u32();
    return static_cast<std::int64_t>(lo | (hi << 32));
  }
  std::size_t left() const { return n_ - i_; }
  const std::uint8_t* rest() const { return p_ + i_; }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t i_ = 0;
};

// The dispatcher's instantiated set: 3 head dims x 6 shapes x 2 packings x 3 methods = 108.
inline constexpr int num_combos = 108;
inline kvtile::codec_params combo(int i) {
  struct shape { int g, kb, vb; };
  static constexpr shape shapes[6] = {{128, 4, 2}, {128, 4, 4}, {128, 2, 2}, {128, 8, 8}, {64, 4, 2}, {64, 4, 4}};
  static constexpr int dims[3] = {64, 128, 256};
  i %= num_combos;
  kvtile::codec_params p;
  p.head_dim = dims[i % 3];
  i /= 3;
  const shape s = shapes[i % 6];
  i /= 6;
  p.tile_tokens = s.g;
  p.key_bits = s.kb;
  p.value_bits = s.vb;
  p.pack = (i % 2) ? kvtile::packing::fp16_scales : kvtile::packing::fp8_scales;
  i /= 2;
  p.algo = static_cast<kvtile::method>(i % 3);
  return p;
}

// Heap buffer of exactly n elements (ASan reports any access past the end).
template <class T>
struct exact_buffer {
  explicit exact_buffer(std::size_t n) : n(n), p(static_cast<T*>(std::malloc(n * sizeof(T) + (n == 0)))) {}
  ~exact_buffer() { std::free(p); }
  exact_buffer(const exact_buffer&) = delete;
  exact_buffer& operator=(const exact_buffer&) = delete;
  std::size_t n;
  T* p;
};

template <class T>
inline float to_f(T v) {
  return kvtile::detail::element_to_float(v);
}

template <class T>
inline bool finite_elem(T v) {
  return kvtile::detail::is_finite(to_f(v));
}

template <class T>
inline T from_bits32(std::uint32_t b) {
  if constexpr (std::is_same_v<T, float>)
    return kvtile::detail::float_from_bits(b);
  else
    return T::from_bits(static_cast<std::uint16_t>(b));
}

// Bit-identical floats, or both NaN (a reader may return any NaN payload).
inline bool same_value(float want, float got) {
  return std::memcmp(&want, &got, 4) == 0 || (kvtile::detail::is_nan(want) && kvtile::detail::is_nan(got));
}

// The file reader agrees with the memory reader: writes the input to `path`,
// reads it back with read_file(path, tensor, err) and checks the status, and
// on success the tensor (shape, type, bits), against the memory read (ok, t).
template <class Tensor, class ReadFile>
void check_file_read(const std::uint8_t* data, std::size_t size, const std::string& path, bool ok, const Tensor& t,
                     ReadFile read_file) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  const bool wrote = size == 0 || std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!wrote) return;
  Tensor t2;
  std::string err2;
  const bool ok2 = read_file(path, t2, err2);
  FUZZ_CHECK(ok2 == ok);
  if (ok) {
    FUZZ_CHECK(t2.shape == t.shape && t2.source_type == t.source_type && t2.data.size() == t.data.size());
    FUZZ_CHECK(t.data.empty() || std::memcmp(t2.data.data(), t.data.data(), 4 * t.data.size()) == 0);
  } else {
    FUZZ_CHECK(!err2.empty());
  }
}

}  // namespace kvtile_fuzz
