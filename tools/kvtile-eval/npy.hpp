// tools/kvtile-eval/npy.hpp: NumPy .npy reader (format versions 1.0, 2.0, 3.0).
//
// Accepts C-order float16 ('<f2', '>f2') and float32 ('<f4', '>f4') arrays
// and converts them to float. Everything else (other dtypes, Fortran order,
// malformed or truncated files, trailing bytes) is an error with a message;
// nothing throws and every size is overflow-checked against the file size.
//
//   kvtile_eval::tensor t; std::string err;
//   if (!kvtile_eval::read_npy_file("k.npy", t, err)) fprintf(stderr, "%s\n", err.c_str());
#pragma once

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace kvtile_eval {

struct npy_header {
  dtype type = dtype::float32;
  bool big_endian = false;
  bool fortran_order = false;
  std::vector<std::size_t> shape;
  std::size_t data_offset = 0;  // bytes from the start of the file
  std::size_t data_bytes = 0;   // element count * element size
};

namespace detail {

// A small parser for the header's Python dict literal.
class py_literal_parser {
 public:
  py_literal_parser(const char* p, std::size_t n) : p_(p), n_(n) {}

  void skip_ws() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t' || p_[i_] == '\n' || p_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < n_ && p_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_ws();
    return i_ < n_ && p_[i_] == c;
  }
  bool string(std::string& out) {
    skip_ws();
    if (i_ >= n_ || (p_[i_] != '\'' && p_[i_] != '"')) return false;
    const char q = p_[i_++];
    out.clear();
    while (i_ < n_ && p_[i_] != q) {
      if (p_[i_] == '\\') return false;  // no escapes in numpy headers
      out += p_[i_++];
      if (out.size() > 256) return false;
    }
    if (i_ >= n_) return false;
    ++i_;
    return true;
  }
  bool word(std::string& out) {
    skip_ws();
    out.clear();
    while (i_ < n_ && std::isalpha(static_cast<unsigned char>(p_[i_])) && out.size() < 16) out += p_[i_++];
    return !out.empty();
  }
  bool integer(std::size_t& v) {
    skip_ws();
    if (i_ >= n_ || !std::isdigit(static_cast<unsigned char>(p_[i_]))) return false;
    v = 0;
    while (i_ < n_ && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      if (!checked_mul(v, 10, v) || !checked_add(v, static_cast<std::size_t>(p_[i_] - '0'), v)) return false;
      ++i_;
    }
    if (i_ < n_ && (p_[i_] == 'L' || p_[i_] == 'l')) ++i_;  // Python 2 long suffix
    return true;
  }
  // (a, b, c) or (a,) or ()
  bool tuple(std::vector<std::size_t>& out) {
    out.clear();
    if (!eat('(')) return false;
    if (eat(')')) return true;
    for (;;) {
      std::size_t v;
      if (!integer(v)) return false;
      out.push_back(v);
      if (out.size() > 32) return false;
      if (eat(')')) return true;
      if (!eat(',')) return false;
      if (eat(')')) return true;
    }
  }
  bool at_end() {
    skip_ws();
    return i_ == n_;
  }

 private:
  const char* p_;
  std::size_t n_;
  std::size_t i_ = 0;
};

inline bool npy_descr(const std::string& d, npy_header& h, std::string& err) {
  auto describe = [](const std::string& s) -> std::string {
    if (s.size() < 3) return "'" + printable(s) + "'";
    const char k = s[1];
    const std::string w = s.substr(2);
    // Bits from the byte count, without atoi (UB when out of range) or an overflowing * 8.
    const unsigned long long nbytes = std::strtoull(w.c_str(), nullptr, 10);
    const std::string bits = nbytes <= 1024 ? std::to_string(nbytes * 8) : std::string("?");
    std::string name;
    if (k == 'f') name = "float" + bits;
    else if (k == 'i') name = "int" + bits;
    else if (k == 'u') name = "uint" + bits;
    else if (k == 'b') name = "bool";
    else if (k == 'V') name = "raw bytes (bfloat16 from ml_dtypes?)";
    else name = "unknown";
    return name + " ('" + printable(s) + "')";
  };
  if (d.size() != 3 || (d[0] != '<' && d[0] != '>' && d[0] != '=' && d[0] != '|') || d[1] != 'f' ||
      (d[2] != '2' && d[2] != '4')) {
    err = "unsupported dtype " + describe(d) + "; kvtile-eval reads float16 and float32 .npy files "
          "(bfloat16: use .safetensors)";
    return false;
  }
  if (d[0] == '|') {
    err = "invalid byte order '|' for a multi-byte dtype ('" + printable(d) + "')";
    return false;
  }
  h.big_endian = d[0] == '>';
  h.type = d[2] == '2' ? dtype::float16 : dtype::float32;
  return true;
}

}  // namespace detail

// Parses the header at the start of a .npy file; `n` bytes are available
// (at least the whole header). Sets data_offset and data_bytes.
inline bool parse_npy_header(const unsigned char* p, std::size_t n, npy_header& h, std::string& err) {
  h = npy_header{};
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (n < 10 || std::memcmp(p, magic, 6) != 0) {
    err = "not a .npy file (missing \\x93NUMPY magic)";
    return false;
  }
  const unsigned major = p[6];
  std::size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = std::size_t(p[8]) | (std::size_t(p[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) {
      err = "truncated .npy header";
      return false;
    }
    header_len = std::size_t(p[8]) | (std::size_t(p[9]) << 8) | (std::size_t(p[10]) << 16) | (std::size_t(p[11]) << 24);
    start = 12;
  } else {
    err = "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(p[7]);
    return false;
  }
  if (header_len > (1u << 20)) {
    err = "malformed .npy header: header length " + std::to_string(header_len) + " exceeds 1 MiB";
    return false;
  }
  if (n - start < header_len) {
    err = "truncated .npy file: header needs " + std::to_string(header_len) + " bytes, file has " +
          std::to_string(n - start);
    return false;
  }
  detail::py_literal_parser ps(reinterpret_cast<const char*>(p + start), header_len);
  bool have_descr = false, have_order = false, have_shape = false;
  if (!ps.eat('{')) {
    err = "malformed .npy header: expected a dict";
    return false;
  }
  while (!ps.eat('}')) {
    std::string key;
    if (!ps.string(key) || !ps.eat(':')) {
      err = "malformed .npy header: expected 'key': value";
      return false;
    }
    if (key == "descr") {
      std::string d;
      if (!ps.string(d)) {
        err = ps.peek('[') ? "unsupported dtype: structured arrays are not K/V tensors"
                           : "malformed .npy header: 'descr' is not a string";
        return false;
      }
      if (!detail::npy_descr(d, h, err)) return false;
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string w;
      if (!ps.word(w) || (w != "True" && w != "False")) {
        err = "malformed .npy header: 'fortran_order' is not True/False";
        return false;
      }
      h.fortran_order = w == "True";
      have_order = true;
    } else if (key == "shape") {
      if (!ps.tuple(h.shape)) {
        err = "malformed .npy header: 'shape' is not a tuple of integers";
        return false;
      }
      have_shape = true;
    } else {
      err = "malformed .npy header: unexpected key '" + printable(key) + "'";
      return false;
    }
    if (!ps.eat(',')) {
      if (!ps.eat('}')) {
        err = "malformed .npy header: expected ',' or '}'";
        return false;
      }
      break;
    }
  }
  if (!ps.at_end()) {
    err = "malformed .npy header: unexpected text after the dict";
    return false;
  }
  if (!have_descr || !have_order || !have_shape) {
    err = "malformed .npy header: missing 'descr', 'fortran_order' or 'shape'";
    return false;
  }
  if (h.fortran_order && h.shape.size() > 1) {
    err = "unsupported .npy layout: Fortran order (save with np.ascontiguousarray)";
    return false;
  }
  std::size_t count = 0;
  if (!element_count(h.shape, count) || count > max_elements || !checked_mul(count, dtype_size(h.type), h.data_bytes)) {
    err = "invalid .npy shape " + shape_string(h.shape) + ": too many elements";
    return false;
  }
  h.data_offset = start + header_len;
  return true;
}

// Whole file in memory (tests, fuzzers).
inline bool read_npy_memory(const unsigned char* p, std::size_t n, tensor& t, std::string& err) {
  try {
    npy_header h;
    if (!parse_npy_header(p, n, h, err)) return false;
    const std::size_t have = n - h.data_offset;
    if (have < h.data_bytes) {
      err = "truncated .npy file: shape " + shape_string(h.shape) + " needs " + std::to_string(h.data_bytes) +
            " data bytes, file has " + std::to_string(have);
      return false;
    }
    if (have > h.data_bytes) {
      err = "malformed .npy file: " + std::to_string(have - h.data_bytes) + " unexpected bytes after the data";
      return false;
    }
    t.shape = h.shape;
    t.source_type = h.type;
    t.data.assign(h.data_bytes / dtype_size(h.type), 0.0f);
    convert_elements(p + h.data_offset, t.data.size(), h.type, h.big_endian, t.data.data());
    return true;
  } catch (const std::bad_alloc&) {
    err = "out of memory reading .npy data";
  } catch (const std::exception& e) {
    err = std::string("error reading .npy: ") + e.what();
  }
  return false;
}

// Reads a file, streaming the data in chunks (no second copy of the file).
// max_elems: refuse (before allocating) a tensor of more elements.
inline bool read_npy_file(const std::string& path, tensor& t, std::string& err, std::size_t max_elems = max_elements) {
  try {
    std::ifstream f;
    std::size_t size = 0;
    if (!open_with_size(path, f, size, err)) return false;
    std::vector<unsigned char> head(size < 12 ? size : 12);
    f.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
    npy_header h;
    if (head.size() >= 10 && head[6] >= 1 && head[6] <= 3) {
      std::size_t hl = head[6] == 1 ? (std::size_t(head[8]) | (std::size_t(head[9]) << 8))
                       : head.size() >= 12
                           ? (std::size_t(head[8]) | (std::size_t(head[9]) << 8) | (std::size_t(head[10]) << 16) |
                              (std::size_t(head[11]) << 24))
                           : 0;
      std::size_t want = (head[6] == 1 ? 10 : 12) + (hl > (1u << 20) ? 0 : hl);
      if (want > size) want = size;
      head.resize(want);
      f.seekg(0);
      f.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
      if (!f) {
        err = path + ": read error";
        return false;
      }
    }
    if (!parse_npy_header(head.data(), head.size(), h, err)) {
      err = path + ": " + err;
      return false;
    }
    const std::size_t have = size - h.data_offset;
    if (have < h.data_bytes) {
      err = path + ": truncated .npy file: shape " + shape_string(h.shape) + " needs " + std::to_string(h.data_bytes) +
            " data bytes, file has " + std::to_string(have);
      return false;
    }
    if (have > h.data_bytes) {
      err = path + ": malformed .npy file: " + std::to_string(have - h.data_bytes) + " unexpected bytes after the data";
      return false;
    }
    const std::size_t count = h.data_bytes / dtype_size(h.type);
    if (!within_read_budget(h.shape, count, max_elems, err)) {
      err = path + ": " + err;
      return false;
    }
    t.shape = h.shape;
    t.source_type = h.type;
    t.data.assign(count, 0.0f);
    f.seekg(static_cast<std::streamoff>(h.data_offset));
    const std::size_t chunk = std::size_t(1) << 20;
    std::vector<unsigned char> buf(chunk * dtype_size(h.type));
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = count - done < chunk ? count - done : chunk;
      f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n * dtype_size(h.type)));
      if (!f) {
        err = path + ": read error";
        return false;
      }
      convert_elements(buf.data(), n, h.type, h.big_endian, t.data.data() + done);
      done += n;
    }
    return true;
  } catch (const std::bad_alloc&) {
    err = path + ": out of memory";
  } catch (const std::exception& e) {
    err = path + ": " + e.what();
  }
  return false;
}

// Writes a little-endian float16 or float32 .npy (fixtures, tests). false on I/O error.
inline bool write_npy_file(const std::string& path, const std::vector<std::size_t>& shape, const float* data,
                           dtype type, std::string& err) {
  if (type == dtype::bfloat16) {
    err = "bfloat16 has no .npy dtype";
    return false;
  }
  std::string dict = std::string("{'descr': '<f") + (type == dtype::float16 ? "2" : "4") +
                     "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  std::size_t total = 10 + dict.size() + 1;
  const std::size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) {
    err = path + ": cannot create";
    return false;
  }
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(dict.size() & 0xff),
                                 static_cast<unsigned char>(dict.size() >> 8)};
  f.write(reinterpret_cast<const char*>(pre), 10);
  f.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  std::size_t count = 1;
  for (auto d : shape) count *= d;
  for (std::size_t i = 0; i < count; ++i) {
    if (type == dtype::float16) {
      const std::uint16_t b = kvtile::half_t(data[i]).bits();
      const unsigned char c[2] = {static_cast<unsigned char>(b & 0xff), static_cast<unsigned char>(b >> 8)};
      f.write(reinterpret_cast<const char*>(c), 2);
    } else {
      std::uint32_t u;
      std::memcpy(&u, &data[i], 4);
      const unsigned char c[4] = {static_cast<unsigned char>(u), static_cast<unsigned char>(u >> 8),
                                  static_cast<unsigned char>(u >> 16), static_cast<unsigned char>(u >> 24)};
      f.write(reinterpret_cast<const char*>(c), 4);
    }
  }
  if (!f) {
    err = path + ": write error";
    return false;
  }
  return true;
}

}  // namespace kvtile_eval
