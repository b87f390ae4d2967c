// tests/fuzz/safetensors_reader.cpp: kvtile-eval's .safetensors reader on
// arbitrary bytes.
//
// Properties checked (abort on violation): parse_safetensors_header and
// read_safetensors_memory never crash, never read outside the input
// (exact-size copy), never throw; every parsed entry lies inside the data
// buffer with begin <= end and, for known dtypes, bytes == prod(shape) * size,
// and no two non-empty ranges overlap; error messages are plain printable ASCII;
// on success the tensor holds (end - begin) / element size elements equal to
// the little-endian input converted exactly. For a quarter of the inputs the
// streaming file reader must agree (same success, shape and bits).
#include "fuzz_common.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "../../tools/kvtile-eval/safetensors.hpp"

using namespace kvtile_fuzz;

// Error messages are safe to print: no control or non-ASCII bytes from the input.
static bool plain_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  exact_buffer<unsigned char> buf(size);
  if (size) std::memcpy(buf.p, data, size);
  kvtile_eval::safetensors_index idx;
  std::string err;
  if (kvtile_eval::parse_safetensors_header(buf.p, size, size, idx, err)) {
    FUZZ_CHECK(!idx.entries.empty());
    FUZZ_CHECK(idx.buffer_offset + idx.buffer_bytes == size);
    for (const auto& e : idx.entries) {
      FUZZ_CHECK(e.begin <= e.end && e.end <= idx.buffer_bytes);
      const std::size_t es = kvtile_eval::detail::safetensors_dtype_size(e.dtype_name);
      std::size_t count = 0;
      if (es) FUZZ_CHECK(kvtile_eval::element_count(e.shape, count) && count * es == e.end - e.begin);
      for (const auto& o : idx.entries)  // no two non-empty ranges overlap
        if (&o != &e && e.begin < e.end && o.begin < o.end) FUZZ_CHECK(e.end <= o.begin || o.end <= e.begin);
    }
  } else {
    FUZZ_CHECK(!err.empty() && plain_ascii(err));
  }
  // The candidate list and the name come from the input's last byte.
  const std::uint8_t sel = size ? data[size - 1] : 0;
  const std::vector<std::string> candidates = {"k", "keys", "v"};
  const std::string name = (sel & 4) ? "k" : "";
  kvtile_eval::tensor t;
  err.clear();
  const bool ok = kvtile_eval::read_safetensors_memory(buf.p, size, name, candidates, t, err);
  if (ok) {
    const kvtile_eval::safetensors_entry* e = nullptr;
    std::string e2;
    FUZZ_CHECK(kvtile_eval::select_safetensors_entry(idx, name, candidates, e, e2) && e);
    kvtile_eval::dtype type;
    FUZZ_CHECK(kvtile_eval::detail::safetensors_dtype(e->dtype_name, type) && type == t.source_type);
    const std::size_t es = kvtile_eval::dtype_size(type);
    FUZZ_CHECK(t.data.size() * es == e->end - e->begin && t.shape == e->shape);
    for (std::size_t i = 0; i < t.data.size(); ++i) {
      const unsigned char* p = buf.p + idx.buffer_offset + e->begin + i * es;
      float want;
      if (es == 2) {
        const std::uint16_t b = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
        want = type == kvtile_eval::dtype::float16 ? kvtile::half_t::to_float_bits(b)
                                                   : kvtile::bfloat16_t::from_bits(b).to_float();
      } else {
        want = kvtile::detail::float_from_bits(std::uint32_t(p[3]) << 24 | std::uint32_t(p[2]) << 16 |
                                               std::uint32_t(p[1]) << 8 | p[0]);
      }
      FUZZ_CHECK(same_value(want, t.data[i]));
    }
  } else {
    FUZZ_CHECK(!err.empty() && plain_ascii(err));
  }
  if ((sel & 3) == 0) {
    static const std::string path = "/tmp/kvtile_fuzz_st_" + std::to_string(::getpid()) + ".safetensors";
    check_file_read(data, size, path, ok, t, [&](const std::string& p, kvtile_eval::tensor& t2, std::string& e) {
      return kvtile_eval::read_safetensors_file(p, name, candidates, t2, e);
    });
  }
  return 0;
}
