// docs/format.md must contain, verbatim, every table docs/gen/format_tables.hpp
// generates from the constexpr record layouts, so the doc cannot drift from the
// code. On failure, regenerate:
//   g++ -std=c++17 -I include docs/gen/format_tables.cpp -o /tmp/gen && /tmp/gen
// and paste the printed tables into docs/format.md.
// Also pins the numbers method.md states (D = 128).
#include <doctest/doctest.h>

#include <kvtile/kvtile.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../docs/gen/format_tables.hpp"

namespace {

// The source tree's docs/format.md: KVTILE_SOURCE_DIR when the build defines
// it, else relative to this file (CMake compiles it by absolute path), else
// relative to the test data directory (<source>/tests/data).
std::string read_format_doc(std::string& tried) {
  std::vector<std::string> candidates;
#ifdef KVTILE_SOURCE_DIR
  candidates.push_back(std::string(KVTILE_SOURCE_DIR) + "/docs/format.md");
#endif
  std::string here = __FILE__;
  const std::size_t slash = here.find_last_of("/\\");
  here = slash == std::string::npos ? std::string(".") : here.substr(0, slash);
  candidates.push_back(here + "/../../docs/format.md");
#ifdef KVTILE_TEST_DATA_DIR
  std::string data = KVTILE_TEST_DATA_DIR;
  const std::size_t s2 = data.find_last_of("/\\");
  if (s2 != std::string::npos) {
    data = data.substr(0, s2);  // <source>/tests
    const std::size_t s3 = data.find_last_of("/\\");
    if (s3 != std::string::npos) candidates.push_back(data.substr(0, s3) + "/docs/format.md");
  }
#endif
  for (const std::string& path : candidates) {
    tried += path + "\n";
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return {};
}

}  // namespace

TEST_CASE("format_doc: docs/format.md holds the generated layout tables") {
  std::string tried;
  const std::string doc = read_format_doc(tried);
  INFO("looked for docs/format.md at:\n" << tried);
  REQUIRE_FALSE(doc.empty());
  for (const kvtile_docs::table& t : kvtile_docs::all_tables()) {
    INFO("table '" << std::string(t.title) << "' is out of date in docs/format.md; expected:\n" << t.markdown);
    CHECK(doc.find(t.markdown) != std::string::npos);
  }
  // The format version the doc describes is the one the headers write.
  CHECK(doc.find("format version " + std::to_string(KVTILE_FORMAT_VERSION)) != std::string::npos);
}

TEST_CASE("format_doc: record sizes match method.md (D = 128)") {
  using namespace kvtile::presets;
  using kvtile::fp16_scales;
  CHECK(k4v2_g128<128>::record_bytes == 13328);
  CHECK(k4v2_g128<128, fp16_scales>::record_bytes == 13824);
  CHECK(k4v4_g128<128>::record_bytes == 17424);
  CHECK(k4v4_g128<128, fp16_scales>::record_bytes == 17920);
  CHECK(k2v2_g128<128>::record_bytes == 9232);
  CHECK(k2v2_g128<128, fp16_scales>::record_bytes == 9728);
  CHECK(k4v2_g64<128>::record_bytes == 6928);
  CHECK(k4v2_g64<128, fp16_scales>::record_bytes == 7296);
  CHECK(kvtile_docs::fixed(13328 * 8, 2 * 128 * 128, 3) == "3.254");
  CHECK(kvtile_docs::fixed(7296 * 8, 2 * 128 * 64, 3) == "3.563");  // a tie: rounded half up
  CHECK(k4v2_g128<128>::bits_per_element == doctest::Approx(3.25390625));
}
