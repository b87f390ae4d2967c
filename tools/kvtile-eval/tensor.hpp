// tools/kvtile-eval/tensor.hpp: the in-memory tensor kvtile-eval works on, and
// overflow-checked size arithmetic shared by the file readers.
//
// Readers (npy.hpp, safetensors.hpp) convert every supported element type to
// float (exact for float16, bfloat16 and float32) and never throw: they return
// false with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <kvtile/numeric/bfloat16.hpp>
#include <kvtile/numeric/half.hpp>

namespace kvtile_eval {

enum class dtype { float16, bfloat16, float32 };

inline const char* to_string(dtype t) {
  switch (t) {
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
  }
  return "?";
}
inline std::size_t dtype_size(dtype t) { return t == dtype::float32 ? 4u : 2u; }

struct tensor {
  std::vector<std::size_t> shape;
  std::vector<float> data;  // row-major (C order)
  dtype source_type = dtype::float32;

  std::size_t dim(std::size_t i) const { return i < shape.size() ? shape[i] : 0; }
};

inline std::string shape_string(const std::vector<std::size_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// `s` made safe for a terminal, for messages about names and strings read
// from files: bytes outside printable ASCII as \xNN, a backslash as \\, and at
// most `max_bytes` bytes of `s` (then "...").
inline std::string printable(const std::string& s, std::size_t max_bytes = 80) {
  static const char hex[] = "0123456789abcdef";
  std::string r;
  for (std::size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      r += "\\\\";
    } else if (c < 0x20 || c > 0x7e) {
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    } else {
      r += static_cast<char>(c);
    }
  }
  if (s.size() > max_bytes) r += "...";
  return r;
}

// a * b, false on overflow.
inline bool checked_mul(std::size_t a, std::size_t b, std::size_t& out) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return false;
  out = a * b;
  return true;
}
inline bool checked_add(std::size_t a, std::size_t b, std::size_t& out) {
  if (b > std::numeric_limits<std::size_t>::max() - a) return false;
  out = a + b;
  return true;
}

// Number of elements of `shape`, false on overflow (an empty shape is a scalar: 1).
inline bool element_count(const std::vector<std::size_t>& shape, std::size_t& n) {
  n = 1;
  for (std::size_t d : shape)
    if (!checked_mul(n, d, n)) return false;
  return true;
}

// Largest tensor the readers accept, in elements (2^34 = 64 GiB of float): a
// guard against absurd headers on top of the file-size checks.
inline constexpr std::size_t max_elements = std::size_t(1) << 34;

// A byte count for messages: "512 B", "1.5 GiB", "3.2 TiB".
inline std::string format_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024.0 && u < 6) {
    b /= 1024.0;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, b < 10 && u > 0 ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return s;
}

// The file readers' memory budget: false (with a message) when a tensor of
// `count` elements would need more than `max_elems` floats.
inline bool within_read_budget(const std::vector<std::size_t>& shape, std::size_t count, std::size_t max_elems,
                               std::string& err) {
  if (count <= max_elems) return true;
  err = "shape " + shape_string(shape) + " needs " + format_bytes(4.0 * static_cast<double>(count)) +
        " as float, above the memory budget of " + format_bytes(4.0 * static_cast<double>(max_elems)) +
        " (--max-memory)";
  return false;
}

// Converts `count` little- or big-endian elements of type t from src to float.
inline void convert_elements(const unsigned char* src, std::size_t count, dtype t, bool big_endian, float* dst) {
  const std::size_t es = dtype_size(t);
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char* p = src + i * es;
    if (es == 2) {
      const std::uint16_t b = big_endian ? static_cast<std::uint16_t>((p[0] << 8) | p[1])
                                         : static_cast<std::uint16_t>(p[0] | (p[1] << 8));
      dst[i] = t == dtype::float16 ? kvtile::half_t::to_float_bits(b) : kvtile::bfloat16_t::from_bits(b).to_float();
    } else {
      std::uint32_t u = big_endian ? (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) |
                                         (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3])
                                   : std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) |
                                         (std::uint32_t(p[3]) << 24);
      float f;
      std::memcpy(&f, &u, 4);
      dst[i] = f;
    }
  }
}

// Opens `path` for binary reading and reports its size; on failure sets `err`.
inline bool open_with_size(const std::string& path, std::ifstream& f, std::size_t& size, std::string& err) {
  f.open(path, std::ios::binary);
  if (!f) {
    err = path + ": cannot open";
    return false;
  }
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  if (end < 0) {
    err = path + ": cannot determine the file size";
    return false;
  }
  size = static_cast<std::size_t>(end);
  f.seekg(0);
  return true;
}

}  // namespace kvtile_eval
