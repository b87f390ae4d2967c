// tools/kvtile-eval/safetensors.hpp: .safetensors reader (F16, BF16, F32).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}}, then the byte buffer (offsets relative to its start).
// The JSON is parsed with nlohmann::json without exceptions (and any that
// escape are caught); every entry is validated (types, shape product vs
// offsets, offsets in order and inside the file, no two tensors overlapping)
// before any data is read; names and dtypes in messages go through printable().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor.hpp"

namespace kvtile_eval {

struct safetensors_entry {
  std::string name;
  std::string dtype_name;  // as written ("F16", "BF16", "F32", "I64", ...)
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;  // relative to the byte buffer
};

struct safetensors_index {
  std::vector<safetensors_entry> entries;
  std::size_t buffer_offset = 0;  // 8 + N
  std::size_t buffer_bytes = 0;   // file size - buffer_offset
};

inline constexpr std::size_t safetensors_max_header = std::size_t(100) << 20;  // as the reference implementation

namespace detail {
inline bool safetensors_dtype(const std::string& s, dtype& t) {
  if (s == "F16") t = dtype::float16;
  else if (s == "BF16") t = dtype::bfloat16;
  else if (s == "F32") t = dtype::float32;
  else return false;
  return true;
}
// Element size of any safetensors dtype (0 if unknown).
inline std::size_t safetensors_dtype_size(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "F32" || s == "I32" || s == "U32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}
}  // namespace detail

namespace detail {
// The format forbids tensors whose byte ranges overlap (empty ranges overlap nothing).
inline bool safetensors_check_overlap(const safetensors_index& idx, std::string& err) {
  std::vector<const safetensors_entry*> by_begin;
  for (const auto& e : idx.entries)
    if (e.begin < e.end) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const safetensors_entry* a, const safetensors_entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (std::size_t i = 1; i < by_begin.size(); ++i) {
    const safetensors_entry& a = *by_begin[i - 1];
    const safetensors_entry& b = *by_begin[i];
    if (b.begin < a.end) {
      err = "malformed .safetensors header: tensors '" + printable(a.name) + "' [" + std::to_string(a.begin) + ", " +
            std::to_string(a.end) + ") and '" + printable(b.name) + "' [" + std::to_string(b.begin) + ", " +
            std::to_string(b.end) + ") overlap (the format forbids it)";
      return false;
    }
  }
  return true;
}
}  // namespace detail

// Parses the header. `p` holds at least the first min(file_size, 8 + N) bytes;
// `file_size` is the whole file's size (for the offset checks).
inline bool parse_safetensors_header(const unsigned char* p, std::size_t n, std::size_t file_size,
                                     safetensors_index& idx, std::string& err) {
  idx = safetensors_index{};
  if (n < 8 || file_size < 8) {
    err = "not a .safetensors file: shorter than its 8-byte header length";
    return false;
  }
  std::uint64_t hl = 0;
  for (int i = 7; i >= 0; --i) hl = (hl << 8) | p[i];
  if (hl < 2 || hl > safetensors_max_header) {
    err = "malformed .safetensors file: header length " + std::to_string(hl) + " out of range";
    return false;
  }
  if (hl > file_size - 8 || hl > n - 8) {
    err = "truncated .safetensors file: header needs " + std::to_string(hl) + " bytes, file has " +
          std::to_string(file_size - 8);
    return false;
  }
  idx.buffer_offset = 8 + static_cast<std::size_t>(hl);
  idx.buffer_bytes = file_size - idx.buffer_offset;
  try {
    const auto j = nlohmann::json::parse(p + 8, p + idx.buffer_offset, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      err = "malformed .safetensors header: not a JSON object";
      return false;
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      const auto& v = it.value();
      const std::string where = "malformed .safetensors header: tensor '" + printable(it.key()) + "': ";
      if (!v.is_object()) {
        err = where + "not an object";
        return false;
      }
      safetensors_entry e;
      e.name = it.key();
      auto dt = v.find("dtype");
      auto sh = v.find("shape");
      auto of = v.find("data_offsets");
      if (dt == v.end() || !dt->is_string() || sh == v.end() || !sh->is_array() || of == v.end() || !of->is_array() ||
          of->size() != 2) {
        err = where + "needs a string 'dtype', an array 'shape' and a 2-element 'data_offsets'";
        return false;
      }
      e.dtype_name = dt->get<std::string>();
      if (sh->size() > 32) {
        err = where + "too many dimensions";
        return false;
      }
      for (const auto& d : *sh) {
        if (!d.is_number_unsigned()) {
          err = where + "shape entries must be non-negative integers";
          return false;
        }
        e.shape.push_back(static_cast<std::size_t>(d.get<std::uint64_t>()));
      }
      if (!(*of)[0].is_number_unsigned() || !(*of)[1].is_number_unsigned()) {
        err = where + "data_offsets must be non-negative integers";
        return false;
      }
      const std::uint64_t b = (*of)[0].get<std::uint64_t>(), en = (*of)[1].get<std::uint64_t>();
      if (b > en) {
        err = where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
              "] are reversed (begin after end)";
        return false;
      }
      if (en > idx.buffer_bytes) {
        err = where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] outside the " +
              std::to_string(idx.buffer_bytes) + "-byte data buffer (truncated file?)";
        return false;
      }
      e.begin = static_cast<std::size_t>(b);
      e.end = static_cast<std::size_t>(en);
      const std::size_t es = detail::safetensors_dtype_size(e.dtype_name);
      std::size_t count = 0, bytes = 0;
      if (es != 0) {
        if (!element_count(e.shape, count) || !checked_mul(count, es, bytes) || bytes != e.end - e.begin) {
          err = where + "shape " + shape_string(e.shape) + " of " + printable(e.dtype_name) + " does not match its " +
                std::to_string(e.end - e.begin) + " data bytes";
          return false;
        }
      }
      idx.entries.push_back(std::move(e));
    }
  } catch (const std::exception& ex) {
    err = "malformed .safetensors header: " + printable(ex.what(), 200);
    return false;
  }
  if (idx.entries.empty()) {
    err = ".safetensors file holds no tensors";
    return false;
  }
  return detail::safetensors_check_overlap(idx, err);
}

// Picks a tensor: `name` if given; else the only tensor; else the first of
// `candidates` present. On failure lists the names in the file.
inline bool select_safetensors_entry(const safetensors_index& idx, const std::string& name,
                                     const std::vector<std::string>& candidates, const safetensors_entry*& out,
                                     std::string& err) {
  out = nullptr;
  auto find = [&](const std::string& n) -> const safetensors_entry* {
    for (const auto& e : idx.entries)
      if (e.name == n) return &e;
    return nullptr;
  };
  if (!name.empty()) {
    out = find(name);
  } else if (idx.entries.size() == 1) {
    out = &idx.entries[0];
  } else {
    for (const auto& c : candidates)
      if ((out = find(c)) != nullptr) break;
  }
  if (out) return true;
  std::string names;
  for (std::size_t i = 0; i < idx.entries.size() && i < 20; ++i) names += (i ? ", " : "") + printable(idx.entries[i].name);
  if (idx.entries.size() > 20) names += ", ...";
  err = (name.empty() ? std::string("several tensors and none with a default name; choose one with the tensor-name option")
                      : "no tensor named '" + printable(name) + "'") +
        " (tensors: " + names + ")";
  return false;
}

namespace detail {
inline bool safetensors_check_dtype(const safetensors_entry& e, dtype& t, std::string& err) {
  if (!safetensors_dtype(e.dtype_name, t)) {
    err = "tensor '" + printable(e.name) + "': unsupported dtype " + printable(e.dtype_name) +
          "; kvtile-eval reads F16, BF16 and F32";
    return false;
  }
  return true;
}
}  // namespace detail

// Whole file in memory (tests, fuzzers).
inline bool read_safetensors_memory(const unsigned char* p, std::size_t n, const std::string& name,
                                    const std::vector<std::string>& candidates, tensor& t, std::string& err) {
  try {
    safetensors_index idx;
    if (!parse_safetensors_header(p, n, n, idx, err)) return false;
    const safetensors_entry* e = nullptr;
    if (!select_safetensors_entry(idx, name, candidates, e, err)) return false;
    dtype type;
    if (!detail::safetensors_check_dtype(*e, type, err)) return false;
    t.shape = e->shape;
    t.source_type = type;
    t.data.assign((e->end - e->begin) / dtype_size(type), 0.0f);
    convert_elements(p + idx.buffer_offset + e->begin, t.data.size(), type, false, t.data.data());
    return true;
  } catch (const std::bad_alloc&) {
    err = "out of memory reading .safetensors data";
  } catch (const std::exception& ex) {
    err = std::string("error reading .safetensors: ") + ex.what();
  }
  return false;
}

// max_elems: refuse (before allocating) a tensor of more elements.
inline bool read_safetensors_file(const std::string& path, const std::string& name,
                                  const std::vector<std::string>& candidates, tensor& t, std::string& err,
                                  std::size_t max_elems = max_elements) {
  try {
    std::ifstream f;
    std::size_t size = 0;
    if (!open_with_size(path, f, size, err)) return false;
    std::vector<unsigned char> head(size < 8 ? size : 8);
    f.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
    if (head.size() == 8) {
      std::uint64_t hl = 0;
      for (int i = 7; i >= 0; --i) hl = (hl << 8) | head[i];
      if (hl <= safetensors_max_header && hl <= size - 8) {
        head.resize(8 + static_cast<std::size_t>(hl));
        f.read(reinterpret_cast<char*>(head.data() + 8), static_cast<std::streamsize>(hl));
        if (!f) {
          err = path + ": read error";
          return false;
        }
      }
    }
    safetensors_index idx;
    if (!parse_safetensors_header(head.data(), head.size(), size, idx, err)) {
      err = path + ": " + err;
      return false;
    }
    const safetensors_entry* e = nullptr;
    dtype type;
    if (!select_safetensors_entry(idx, name, candidates, e, err) || !detail::safetensors_check_dtype(*e, type, err)) {
      err = path + ": " + err;
      return false;
    }
    const std::size_t count = (e->end - e->begin) / dtype_size(type);
    if (!within_read_budget(e->shape, count, max_elems, err)) {
      err = path + ": tensor '" + printable(e->name) + "': " + err;
      return false;
    }
    t.shape = e->shape;
    t.source_type = type;
    t.data.assign(count, 0.0f);
    f.seekg(static_cast<std::streamoff>(idx.buffer_offset + e->begin));
    const std::size_t chunk = std::size_t(1) << 20;
    std::vector<unsigned char> buf(chunk * dtype_size(type));
    for (std::size_t done = 0; done < count;) {
      const std::size_t k = count - done < chunk ? count - done : chunk;
      f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(k * dtype_size(type)));
      if (!f) {
        err = path + ": read error";
        return false;
      }
      convert_elements(buf.data(), k, type, false, t.data.data() + done);
      done += k;
    }
    return true;
  } catch (const std::bad_alloc&) {
    err = path + ": out of memory";
  } catch (const std::exception& ex) {
    err = path + ": " + ex.what();
  }
  return false;
}

// A tensor to write (tests, fixtures).
struct safetensors_tensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> data;
  dtype type = dtype::float16;
};

inline bool write_safetensors_file(const std::string& path, const std::vector<safetensors_tensor>& ts,
                                   std::string& err) {
  try {
    nlohmann::json h = nlohmann::json::object();
    std::vector<unsigned char> buf;
    for (const auto& t : ts) {
      const std::size_t b = buf.size();
      for (float x : t.data) {
        if (t.type == dtype::float32) {
          std::uint32_t u;
          std::memcpy(&u, &x, 4);
          for (int i = 0; i < 4; ++i) buf.push_back(static_cast<unsigned char>(u >> (8 * i)));
        } else {
          const std::uint16_t u = t.type == dtype::float16 ? kvtile::half_t(x).bits() : kvtile::bfloat16_t(x).bits();
          buf.push_back(static_cast<unsigned char>(u & 0xff));
          buf.push_back(static_cast<unsigned char>(u >> 8));
        }
      }
      h[t.name] = {{"dtype", t.type == dtype::float16 ? "F16" : t.type == dtype::bfloat16 ? "BF16" : "F32"},
                   {"shape", t.shape},
                   {"data_offsets", {b, buf.size()}}};
    }
    h["__metadata__"] = {{"format", "pt"}};
    std::string js = h.dump();
    while (js.size() % 8) js += ' ';
    std::ofstream f(path, std::ios::binary);
    if (!f) {
      err = path + ": cannot create";
      return false;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(js.size()) >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(js.data(), static_cast<std::streamsize>(js.size()));
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    if (!f) {
      err = path + ": write error";
      return false;
    }
    return true;
  } catch (const std::exception& ex) {
    err = path + ": " + ex.what();
    return false;
  }
}

}  // namespace kvtile_eval
