// kvtile-eval file readers: good and bad .npy / .safetensors files, written at
// run time to a temporary directory, plus the committed real slice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../evaluate.hpp"
#include "../npy.hpp"
#include "../safetensors.hpp"
#include "eval_test_support.hpp"

namespace fs = std::filesystem;
using namespace kvtile_eval;

namespace {

fs::path temp_dir(const char* tag) { return kvtile_eval_test::unique_temp_dir("kvtile_eval_io_", tag); }

std::vector<unsigned char> file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A raw .npy file with the given header dict and data bytes.
std::vector<unsigned char> raw_npy(const std::string& dict, std::size_t data_bytes, int major = 1) {
  std::string h = dict;
  const std::size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::vector<unsigned char> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  if (major == 1) {
    b.push_back(static_cast<unsigned char>(h.size() & 0xff));
    b.push_back(static_cast<unsigned char>(h.size() >> 8));
  } else {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(h.size() >> (8 * i)));
  }
  b.insert(b.end(), h.begin(), h.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

bool npy_error(const std::vector<unsigned char>& b, const std::string& expect) {
  tensor t;
  std::string err;
  const bool ok = read_npy_memory(b.data(), b.size(), t, err);
  if (ok) return false;
  INFO("error: " << err);
  CHECK(err.find(expect) != std::string::npos);
  return true;
}

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.125f;
  return v;
}

// A raw .safetensors file with the given JSON header and buffer size.
std::vector<unsigned char> raw_st(const std::string& json, std::size_t buffer) {
  // Sized once (no insert into a small vector: GCC 12 -O3 reports a false
  // -Warray-bounds inside vector's reallocating insert).
  std::vector<unsigned char> b(8 + json.size() + buffer, 0);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(json.size()) >> (8 * i));
  std::copy(json.begin(), json.end(), b.begin() + 8);
  return b;
}

bool st_error(const std::vector<unsigned char>& b, const std::string& expect, const std::string& name = "") {
  tensor t;
  std::string err;
  const bool ok = read_safetensors_memory(b.data(), b.size(), name, {"k"}, t, err);
  if (ok) return false;
  INFO("error: " << err);
  CHECK(err.find(expect) != std::string::npos);
  return true;
}

}  // namespace

TEST_CASE("eval npy: float16 and float32 files round-trip, 3-D and 4-D") {
  const fs::path d = temp_dir("npy");
  for (dtype t : {dtype::float16, dtype::float32}) {
    for (auto shape : {std::vector<std::size_t>{5, 2, 64}, std::vector<std::size_t>{2, 3, 1, 64}}) {
      std::size_t n = 1;
      for (auto s : shape) n *= s;
      const auto v = ramp(n);
      std::string err;
      const fs::path p = d / "a.npy";
      REQUIRE(write_npy_file(p.string(), shape, v.data(), t, err));
      tensor r;
      REQUIRE_MESSAGE(read_npy_file(p.string(), r, err), err);
      CHECK(r.shape == shape);
      CHECK(r.source_type == t);
      CHECK(r.data == v);  // ramp values are exact in fp16
      // the in-memory reader agrees
      const auto bytes = file_bytes(p);
      tensor m;
      REQUIRE(read_npy_memory(bytes.data(), bytes.size(), m, err));
      CHECK(m.data == v);
    }
  }
  fs::remove_all(d);
}

TEST_CASE("eval npy: version 2.0 header and big-endian float32") {
  auto b = raw_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, 2);
  const std::size_t off = b.size() - 8;
  const unsigned char one_be[4] = {0x3f, 0x80, 0x00, 0x00}, m2_be[4] = {0xc0, 0x00, 0x00, 0x00};
  std::copy(one_be, one_be + 4, b.begin() + static_cast<std::ptrdiff_t>(off));
  std::copy(m2_be, m2_be + 4, b.begin() + static_cast<std::ptrdiff_t>(off + 4));
  tensor t;
  std::string err;
  REQUIRE_MESSAGE(read_npy_memory(b.data(), b.size(), t, err), err);
  REQUIRE(t.data.size() == 2);
  CHECK(t.data[0] == 1.0f);
  CHECK(t.data[1] == -2.0f);
}

TEST_CASE("eval npy: bad files give clear errors") {
  const std::string good = "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 2, 64), }";
  const std::size_t bytes = 4 * 2 * 64 * 2;
  {
    auto b = raw_npy(good, bytes);
    tensor t;
    std::string err;
    REQUIRE_MESSAGE(read_npy_memory(b.data(), b.size(), t, err), err);
  }
  CHECK(npy_error(raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4, 2, 64), }", bytes * 4),
                  "unsupported dtype float64"));
  CHECK(npy_error(raw_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2, 64), }", bytes * 2),
                  "unsupported dtype int32"));
  CHECK(npy_error(raw_npy("{'descr': '<f2', 'fortran_order': True, 'shape': (4, 2, 64), }", bytes), "Fortran"));
  CHECK(npy_error(raw_npy(good, bytes - 1), "truncated"));
  CHECK(npy_error(raw_npy(good, bytes + 3), "unexpected bytes"));
  CHECK(npy_error(raw_npy("{'descr': '<f2', 'shape': (4, 2, 64), }", bytes), "missing"));
  CHECK(npy_error(raw_npy("{'descr': '<f2', 'fortran_order': False, 'shape': [4, 2], }", 16), "shape"));
  CHECK(npy_error(raw_npy("not a dict", 0), "malformed"));
  CHECK(npy_error(raw_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4294967296, 4294967296, 64), }", 0),
                  "too many elements"));
  CHECK(npy_error(raw_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999999999,), }", 0),
                  "shape"));
  CHECK(npy_error(raw_npy(good, bytes, 7), "version"));
  std::vector<unsigned char> junk = {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(npy_error(junk, "not a .npy file"));
  CHECK(npy_error({}, "not a .npy file"));
  // header length larger than the file
  auto b = raw_npy(good, 0);
  b.resize(40);
  CHECK(npy_error(b, "truncated"));
  // missing file
  tensor t;
  std::string err;
  CHECK_FALSE(read_npy_file("/nonexistent/kvtile_eval.npy", t, err));
  CHECK(err.find("cannot open") != std::string::npos);
}

TEST_CASE("eval npy/safetensors: random corruption never crashes") {
  // Mutations of valid files: each read returns true or false with a message.
  std::vector<float> v = ramp(2 * 2 * 64);
  const fs::path d = temp_dir("fuzz");
  std::string err;
  REQUIRE(write_npy_file((d / "a.npy").string(), {2, 2, 64}, v.data(), dtype::float16, err));
  REQUIRE(write_safetensors_file((d / "a.safetensors").string(), {{"k", {2, 2, 64}, v, dtype::bfloat16}}, err));
  const auto npy = file_bytes(d / "a.npy"), st = file_bytes(d / "a.safetensors");
  std::uint64_t x = 12345;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int failures = 0;
  for (int it = 0; it < 3000; ++it) {
    auto b = (it % 2) ? npy : st;
    const std::size_t hdr = (it % 2) ? 128 : 120;  // mutate mostly the headers
    const int kind = static_cast<int>(next() % 3);
    if (kind == 0) b.resize(next() % (b.size() + 1));
    for (int m = 0; m < 1 + static_cast<int>(next() % 4) && !b.empty(); ++m)
      b[next() % std::min(b.size(), hdr)] = static_cast<unsigned char>(next());
    tensor t;
    std::string e;
    const bool ok = (it % 2) ? read_npy_memory(b.data(), b.size(), t, e)
                             : read_safetensors_memory(b.data(), b.size(), "", {"k"}, t, e);
    if (!ok) {
      ++failures;
      CHECK_FALSE(e.empty());
    } else {
      std::size_t n = 0;
      CHECK(element_count(t.shape, n));
      CHECK(n == t.data.size());
    }
  }
  CHECK(failures > 100);
  fs::remove_all(d);
}

TEST_CASE("eval safetensors: F16, BF16 and F32 tensors, selection by name") {
  const fs::path d = temp_dir("st");
  const auto v = ramp(3 * 2 * 128);
  std::string err;
  REQUIRE(write_safetensors_file((d / "kv.safetensors").string(),
                                 {{"model.layers.0.k", {3, 2, 128}, v, dtype::float16},
                                  {"v", {3, 2, 128}, v, dtype::bfloat16},
                                  {"q", {3, 4, 64}, v, dtype::float32}},
                                 err));
  const std::string p = (d / "kv.safetensors").string();
  tensor t;
  REQUIRE_MESSAGE(read_safetensors_file(p, "model.layers.0.k", {}, t, err), err);
  CHECK(t.shape == std::vector<std::size_t>{3, 2, 128});
  CHECK(t.source_type == dtype::float16);
  CHECK(t.data == v);
  REQUIRE(read_safetensors_file(p, "", {"value", "v"}, t, err));  // default-name candidates
  CHECK(t.source_type == dtype::bfloat16);
  CHECK(t.data == v);  // ramp values are exact in bf16
  REQUIRE(read_safetensors_file(p, "q", {}, t, err));
  CHECK(t.source_type == dtype::float32);
  CHECK(t.shape == std::vector<std::size_t>{3, 4, 64});
  // ambiguous: several tensors, no name and no candidate
  CHECK_FALSE(read_safetensors_file(p, "", {"keys"}, t, err));
  CHECK(err.find("model.layers.0.k") != std::string::npos);
  CHECK_FALSE(read_safetensors_file(p, "nope", {}, t, err));
  CHECK(err.find("no tensor named 'nope'") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("eval safetensors: bad files give clear errors") {
  const std::string ok_json = R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]}})";
  {
    auto b = raw_st(ok_json, 256);
    tensor t;
    std::string err;
    REQUIRE_MESSAGE(read_safetensors_memory(b.data(), b.size(), "", {"k"}, t, err), err);
  }
  CHECK(st_error(raw_st(ok_json, 255), "outside"));  // truncated buffer
  CHECK(st_error(raw_st(R"({"k":{"dtype":"I32","shape":[2,64],"data_offsets":[0,512]}})", 512), "unsupported dtype I32"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[2,65],"data_offsets":[0,256]}})", 256), "does not match"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[2,-64],"data_offsets":[0,256]}})", 256), "non-negative"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[2,64]}})", 256), "data_offsets"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[256,0]}})", 256), "reversed"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,256]}})", 256),
                 "does not match"));
  CHECK(st_error(raw_st(R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]})", 256), "not a JSON object"));
  CHECK(st_error(raw_st(R"([1,2,3])", 0), "not a JSON object"));
  CHECK(st_error(raw_st(R"({"__metadata__":{"a":"b"}})", 0), "no tensors"));
  CHECK(st_error(raw_st(R"({"k":5})", 0), "not an object"));
  // header length beyond the file, and absurd
  auto b = raw_st(ok_json, 0);
  b.resize(20);
  CHECK(st_error(b, "truncated"));
  std::vector<unsigned char> huge = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
  CHECK(st_error(huge, "out of range"));
  CHECK(st_error({1, 2, 3}, "not a .safetensors file"));
}

TEST_CASE("eval dataset: shape checks") {
  auto mk = [](std::vector<std::size_t> shape) {
    tensor t;
    t.shape = shape;
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    t.data.assign(n, 0.5f);
    return t;
  };
  dataset ds;
  std::string err;
  {
    tensor q = mk({2, 16, 4, 128});
    REQUIRE_MESSAGE(make_dataset(mk({2, 16, 2, 128}), mk({2, 16, 2, 128}), &q, ds, err), err);
    CHECK(ds.layers == 2);
    CHECK(ds.tokens == 16);
    CHECK(ds.kv_heads == 2);
    CHECK(ds.q_heads == 4);
    CHECK(ds.qsrc == query_source::file);
  }
  CHECK_FALSE(make_dataset(mk({16, 2, 128}), mk({16, 3, 128}), nullptr, ds, err));
  CHECK(err.find("differ in shape") != std::string::npos);
  CHECK_FALSE(make_dataset(mk({16, 2, 96}), mk({16, 2, 96}), nullptr, ds, err));
  CHECK(err.find("head_dim 96") != std::string::npos);
  CHECK_FALSE(make_dataset(mk({16, 128}), mk({16, 128}), nullptr, ds, err));
  CHECK(err.find("expected shape") != std::string::npos);
  {
    tensor q = mk({16, 3, 128});
    CHECK_FALSE(make_dataset(mk({16, 2, 128}), mk({16, 2, 128}), &q, ds, err));
    CHECK(err.find("not a multiple") != std::string::npos);
  }
  {
    tensor q = mk({15, 2, 128});
    CHECK_FALSE(make_dataset(mk({16, 2, 128}), mk({16, 2, 128}), &q, ds, err));
    CHECK(err.find("do not match") != std::string::npos);
  }
  {
    tensor k = mk({16, 2, 128});
    k.data[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(make_dataset(std::move(k), mk({16, 2, 128}), nullptr, ds, err));
    CHECK(err.find("NaN/Inf") != std::string::npos);
  }
}

TEST_CASE("eval fixture: the committed tinylm slice loads") {
  const std::string dir = std::string(KVTILE_TEST_DATA_DIR) + "/kvtile-eval/";
  tensor k, v, q;
  std::string err;
  REQUIRE_MESSAGE(read_npy_file(dir + "tinylm_w0_l0_256_k.npy", k, err), err);
  REQUIRE_MESSAGE(read_npy_file(dir + "tinylm_w0_l0_256_v.npy", v, err), err);
  REQUIRE_MESSAGE(read_npy_file(dir + "tinylm_w0_l0_256_q.npy", q, err), err);
  CHECK(k.shape == std::vector<std::size_t>{256, 2, 128});
  CHECK(v.shape == std::vector<std::size_t>{256, 2, 128});
  CHECK(q.shape == std::vector<std::size_t>{256, 4, 128});
  CHECK(k.source_type == dtype::float16);
  double kk = 0;
  for (float x : k.data) kk += static_cast<double>(x) * x;
  CHECK(kk > 0);
  dataset ds;
  REQUIRE_MESSAGE(make_dataset(std::move(k), std::move(v), &q, ds, err), err);
  CHECK(ds.q_heads == 4);
}
