// tests/fuzz/npy_reader.cpp: kvtile-eval's .npy reader on arbitrary bytes.
//
// Properties checked (abort on violation): read_npy_memory never crashes,
// never reads outside the input (exact-size copy), never throws; on success the
// tensor holds exactly prod(shape) elements, each equal to the matching input
// element converted exactly; on failure the error message is non-empty and
// plain printable ASCII. For a
// quarter of the inputs the streaming file reader (read_npy_file) reads the same
// bytes from a temporary file and must agree (same success, shape and bits).
#include "fuzz_common.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "../../tools/kvtile-eval/npy.hpp"

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
  kvtile_eval::tensor t;
  std::string err;
  const bool ok = kvtile_eval::read_npy_memory(buf.p, size, t, err);
  if (ok) {
    std::size_t count = 0;
    FUZZ_CHECK(kvtile_eval::element_count(t.shape, count));
    FUZZ_CHECK(t.data.size() == count);
    kvtile_eval::npy_header h;
    std::string e2;
    FUZZ_CHECK(kvtile_eval::parse_npy_header(buf.p, size, h, e2));
    FUZZ_CHECK(h.data_offset + h.data_bytes == size);
    const std::size_t es = kvtile_eval::dtype_size(h.type);
    for (std::size_t i = 0; i < count; ++i) {
      const unsigned char* p = buf.p + h.data_offset + i * es;
      float want;
      if (es == 2) {
        const std::uint16_t b = h.big_endian ? static_cast<std::uint16_t>((p[0] << 8) | p[1])
                                             : static_cast<std::uint16_t>(p[0] | (p[1] << 8));
        want = kvtile::half_t::to_float_bits(b);
      } else {
        const std::uint32_t u = h.big_endian ? (std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 |
                                                std::uint32_t(p[2]) << 8 | p[3])
                                             : (std::uint32_t(p[3]) << 24 | std::uint32_t(p[2]) << 16 |
                                                std::uint32_t(p[1]) << 8 | p[0]);
        want = kvtile::detail::float_from_bits(u);
      }
      FUZZ_CHECK(same_value(want, t.data[i]));
    }
  } else {
    FUZZ_CHECK(!err.empty() && plain_ascii(err));
  }
  if (size > 0 && (data[size - 1] & 3) == 0) {
    static const std::string path = "/tmp/kvtile_fuzz_npy_" + std::to_string(::getpid()) + ".npy";
    check_file_read(data, size, path, ok, t, [](const std::string& p, kvtile_eval::tensor& t2, std::string& e) {
      return kvtile_eval::read_npy_file(p, t2, e);
    });
  }
  return 0;
}
