// kvtile-eval on hostile options and files: worker threads that cannot start,
// sizes above the limits (rejected before anything is allocated), runs
// without queries, control characters in names and dtypes, reversed and
// overlapping .safetensors ranges.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "../app.hpp"
#include "../limits.hpp"
#include "../npy.hpp"
#include "../safetensors.hpp"
#include "../thread_pool.hpp"
#include "eval_test_support.hpp"

using namespace kvtile_eval;

namespace {

// Lets workers 1 and 2 start, then fails like a std::thread constructor
// that hits a thread or memory limit.
void fail_from_worker_3(int w) {
  if (w >= 3) throw std::system_error(EAGAIN, std::generic_category(), "thread limit (test)");
}

struct hook_guard {
  explicit hook_guard(void (*h)(int)) { detail::thread_start_hook = h; }
  ~hook_guard() { detail::thread_start_hook = nullptr; }
};

bool has_control_chars(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

app_options small_run() {
  app_options o;
  o.gen.tokens = 256;
  o.gen.kv_heads = 2;
  o.gen.q_heads = 4;
  o.methods = "k4v2_g128,kivi+k4v2";
  o.plot.clear();
  o.progress = 0;
  o.threads = 1;
  return o;
}

std::vector<unsigned char> raw_st(const std::string& json, std::size_t buffer) {
  std::vector<unsigned char> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(json.size()) >> (8 * i));
  b.insert(b.end(), json.begin(), json.end());
  b.resize(b.size() + buffer, 0);
  return b;
}

std::string st_error(const std::string& json, std::size_t buffer) {
  const auto b = raw_st(json, buffer);
  tensor t;
  std::string err;
  if (read_safetensors_memory(b.data(), b.size(), "", {"k"}, t, err)) return "(read)";
  return err;
}

}  // namespace

TEST_CASE("eval threads: a worker that cannot start is an error, the started ones are joined") {
  hook_guard g(fail_from_worker_3);
  std::atomic<int> done{0};
  bool thrown = false;
  try {
    parallel_for(1000, 8, [&](std::size_t, int) { ++done; });
  } catch (const thread_start_error& e) {
    thrown = true;
    CHECK(e.started() == 2);
    CHECK(std::string(e.what()).find("cannot start worker thread 3 of 7") != std::string::npos);
  }
  CHECK(thrown);
  CHECK(done.load() <= 1000);
  // The whole program: one line, exit_error, no std::terminate.
  app_options o = small_run();
  o.threads = 8;
  std::ostringstream out, err;
  CHECK(run_app(o, out, err) == exit_error);
  CHECK(err.str().find("kvtile-eval: cannot start worker thread 3 of 7") != std::string::npos);
  CHECK(lines(err.str()) == 1);
}

TEST_CASE("eval threads: an exception in a worker reaches the caller after every thread is joined") {
  bool thrown = false;
  std::atomic<int> running{0};
  try {
    parallel_for(64, 4, [&](std::size_t i, int) {
      ++running;
      if (i == 5) throw std::runtime_error("item 5");
      --running;
    });
  } catch (const std::runtime_error& e) {
    thrown = std::string(e.what()) == "item 5";
  }
  CHECK(thrown);
  CHECK(running.load() == 1);  // only the throwing call never returned; every thread has finished
}

TEST_CASE("eval limits: sizes above the limits are usage errors, before anything is allocated") {
  struct bad_case {
    const char* what;
    void (*set)(app_options&);
    const char* expect;
  };
  const bad_case cases[] = {
      {"-j 100000", [](app_options& o) { o.threads = 100000; }, "--threads 100000 is out of range [0, 1024]"},
      {"-j -1", [](app_options& o) { o.threads = -1; }, "--threads -1 is out of range [0, 1024]"},
      {"--gen-tokens 16777216", [](app_options& o) { o.gen.tokens = 16777216; },
       "--gen-tokens 16777216 is out of range [1, 4194304]"},
      {"--gen-q-heads 2147483647", [](app_options& o) { o.gen.q_heads = 2147483647; },
       "--gen-q-heads 2147483647 is out of range [1, 4096]"},
      {"--gen-kv-heads 1 --gen-q-heads 2147483647",
       [](app_options& o) {
         o.gen.kv_heads = 1;
         o.gen.q_heads = 2147483647;
       },
       "--gen-q-heads 2147483647 is out of range"},
      {"--queries-per-layer 2000000000", [](app_options& o) { o.queries_per_layer = 2000000000; },
       "--queries-per-layer 2000000000 is out of range [0, 1048576]"},
      {"--context-queries 2000000000", [](app_options& o) { o.context_queries = 2000000000; },
       "--context-queries 2000000000 is out of range"},
      {"--gen-layers 100000", [](app_options& o) { o.gen.layers = 100000; }, "--gen-layers 100000 is out of range"},
      {"--gen-head-dim 96", [](app_options& o) { o.gen.head_dim = 96; }, "--gen-head-dim 96 is not supported"},
      // Each size within its range, together far above the memory budget:
      // 64 layers x 4M tokens x 256 KV heads x D=256 (128 TiB of K/V).
      {"a 128 TiB generator run",
       [](app_options& o) {
         o.gen.layers = 64;
         o.gen.tokens = max_gen_tokens;
         o.gen.kv_heads = 256;
         o.gen.q_heads = 256;
         o.gen.head_dim = 256;
         o.max_memory_gib = 16;  // the default is 3/4 of this machine's memory
       },
       "above the --max-memory budget of 16 GiB"},
      // 2^20 queries per layer at 1M tokens: ~16 TiB of reference softmax.
      {"queries x tokens",
       [](app_options& o) {
         o.gen.tokens = 1 << 20;
         o.gen.kv_heads = 1;
         o.queries_per_layer = max_queries_per_layer;
       },
       "sampled queries"},
      {"--max-memory 0", [](app_options& o) { o.max_memory_gib = 0; }, "--max-memory must be in"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    app_options o = small_run();
    c.set(o);
    std::ostringstream out, err;
    CHECK(run_app(o, out, err) == exit_usage);
    INFO("stderr: " << err.str());
    CHECK(err.str().find(c.expect) != std::string::npos);
    CHECK(lines(err.str()) == 1);
    CHECK(err.str().size() < 400);  // readable: no 309-digit numbers
    CHECK(out.str().empty());
  }
  // evaluate() checks its own options too.
  dataset ds;
  generate_dataset(small_run().gen, 1, ds);
  eval_options eo;
  eo.methods.resize(1);
  eval_result r;
  std::string e;
  eo.threads = max_threads + 1;
  CHECK_FALSE(evaluate(ds, eo, r, e));
  CHECK(e.find("threads must be in [0, 1024]") != std::string::npos);
  eo.threads = 1;
  eo.queries = max_queries_per_layer + 1;
  CHECK_FALSE(evaluate(ds, eo, r, e));
  CHECK(e.find("query counts") != std::string::npos);
}

TEST_CASE("eval limits: the memory estimate of the default run and its breakdown") {
  const app_options o;
  const memory_estimate m = estimate_run_memory(o, all_methods().size(), o.gen.layers, o.gen.tokens, o.gen.kv_heads,
                                                o.gen.q_heads, o.gen.head_dim, false);
  // K and V as float: 2 x 8192 x 8 x 128 x 4 bytes.
  CHECK(m.dataset == doctest::Approx(2.0 * 8192 * 8 * 128 * 4));
  CHECK(m.total() > m.dataset);
  CHECK(m.total() < 1024.0 * 1024 * 1024);  // the default run fits the default budget with room to spare
  std::string err;
  CHECK(check_memory(m, 16.0, err));
  CHECK(default_max_memory_gib() > 0);
  CHECK_FALSE(check_memory(m, m.total() / 2 / (1024.0 * 1024 * 1024), err));
  CHECK(err.find("K/V 64 MiB") != std::string::npos);
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(3.0 * 1024 * 1024 * 1024 * 1024 * 1024 * 2) == "6.0 PiB");
}

TEST_CASE("eval limits: a file tensor above the memory budget is refused from its header") {
  const auto dir = kvtile_eval_test::unique_temp_dir("kvtile_eval_rb_", "budget");
  std::vector<float> x(64 * 2 * 128, 0.5f);
  std::string e;
  const std::string npy = (dir / "k.npy").string(), st = (dir / "k.safetensors").string();
  REQUIRE(write_npy_file(npy, {64, 2, 128}, x.data(), dtype::float16, e));
  REQUIRE(write_safetensors_file(st, {{"k", {64, 2, 128}, x, dtype::float16}}, e));
  tensor t;
  CHECK(read_npy_file(npy, t, e, x.size()));
  CHECK_FALSE(read_npy_file(npy, t, e, x.size() - 1));
  CHECK(e.find("shape [64, 2, 128] needs 64 KiB as float, above the memory budget") != std::string::npos);
  CHECK(read_safetensors_file(st, "", {"k"}, t, e, x.size()));
  CHECK_FALSE(read_safetensors_file(st, "", {"k"}, t, e, 1000));
  CHECK(e.find("tensor 'k': shape [64, 2, 128] needs 64 KiB as float") != std::string::npos);
  // The program: exit 1 with the reader's message, one line.
  app_options o = small_run();
  o.keys = npy;
  o.values = npy;
  o.max_memory_gib = 32.0 / (1024 * 1024);  // 32 KiB
  std::ostringstream out, err;
  CHECK(run_app(o, out, err) == exit_error);
  CHECK(err.str().find("above the memory budget of 32 KiB (--max-memory)") != std::string::npos);
  CHECK(lines(err.str()) == 1);
  // Within the per-tensor budget but not the whole run's: exit 2.
  o.max_memory_gib = 1.0 / 1024;  // 1 MiB
  std::ostringstream out2, err2;
  CHECK(run_app(o, out2, err2) == exit_usage);
  CHECK(err2.str().find("above the --max-memory budget of 1.0 MiB") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("eval queries: a run without queries says so and marks no method") {
  app_options o = small_run();
  o.queries_per_layer = 0;
  o.context_queries = 0;
  const auto dir = kvtile_eval_test::unique_temp_dir("kvtile_eval_rb_", "noq");
  o.json = (dir / "r.json").string();
  o.plot = (dir / "p.png").string();
  std::ostringstream out, err;
  eval_result r;
  REQUIRE(run_app(o, out, err, &r) == exit_ok);
  const std::string t = out.str();
  CHECK(t.find("no queries sampled") != std::string::npos);
  CHECK(t.find("<=") == std::string::npos);  // no best marks
  std::istringstream ts(t);
  int rows = 0;
  for (std::string line; std::getline(ts, line);) {
    CHECK(line.rfind("* ", 0) != 0);  // no method on a Pareto front
    if (line.rfind("  k4v2_g128/fp8 ", 0) != 0 && line.rfind("  kivi k4v2_g128/fp8 ", 0) != 0) continue;
    if (line.find("x ") == std::string::npos) continue;  // the main table's rows (with "x fp16")
    ++rows;
    std::istringstream ls(line);
    std::vector<std::string> cols;
    for (std::string c; ls >> c;) cols.push_back(c);
    REQUIRE(cols.size() >= 4);
    for (std::size_t i = cols.size() - 4; i < cols.size(); ++i) CHECK(cols[i] == "-");  // attn err, p95, KL, KL w5%
  }
  CHECK(rows == 2);
  CHECK(err.str().find("plot") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "p.png"));
  const ranking k = rank_methods(r, default_budgets());
  for (int b : k.best) CHECK(b == -1);
  for (bool p : k.pareto) CHECK_FALSE(p);
  std::ifstream f(dir / "r.json");
  const auto j = nlohmann::json::parse(f);
  CHECK(j["methods"][0]["overall"]["attention"]["samples"] == 0);
  CHECK(j["methods"][0]["overall"]["attention"]["rel_err_mean"].is_null());
  CHECK(j["methods"][0]["overall"]["keys"]["snr_db"].is_number());  // K/V metrics are still there
  std::filesystem::remove_all(dir);
  // Context queries only: still no primary attention metric, still no marks.
  o = small_run();
  o.queries_per_layer = 0;
  o.context_queries = 4;
  std::ostringstream out2, err2;
  REQUIRE(run_app(o, out2, err2, &r) == exit_ok);
  CHECK(out2.str().find("no queries sampled") != std::string::npos);
  CHECK(out2.str().find("<=") == std::string::npos);
}

TEST_CASE("eval messages: names and dtypes from files are escaped") {
  CHECK(printable("k.0") == "k.0");
  CHECK(printable("a\x1b[2Jb\n\\") == "a\\x1b[2Jb\\x0a\\\\");
  CHECK(printable("\xe5\xb1\x82") == "\\xe5\\xb1\\x82");
  CHECK(printable(std::string(200, 'x')) == std::string(80, 'x') + "...");
  // A tensor name with a terminal escape sequence, a dtype with control characters.
  std::string e = st_error("{\"k\\u001b[2J\":{\"dtype\":\"F16\",\"shape\":[2,65],\"data_offsets\":[0,256]}}", 256);
  CHECK(e.find("k\\x1b[2J") != std::string::npos);
  CHECK_FALSE(has_control_chars(e));
  e = st_error("{\"k\":{\"dtype\":\"F16\\r\\u0007\",\"shape\":[2,64],\"data_offsets\":[0,256]}}", 256);
  CHECK(e.find("unsupported dtype F16\\x0d\\x07") != std::string::npos);
  CHECK_FALSE(has_control_chars(e));
  e = st_error("{\"a\\n\":{\"dtype\":\"F16\",\"shape\":[2,64],\"data_offsets\":[0,256]},"
               "\"b\\t\":{\"dtype\":\"F16\",\"shape\":[2,64],\"data_offsets\":[256,512]}}",
               512);
  CHECK(e.find("tensors: a\\x0a, b\\x09") != std::string::npos);
  CHECK_FALSE(has_control_chars(e));
  // .npy: a dtype string with an escape character.
  std::string dict = "{'descr': '<f\x1b', 'fortran_order': False, 'shape': (2, 64), }";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::vector<unsigned char> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(dict.size()), 0};
  b.insert(b.end(), dict.begin(), dict.end());
  b.resize(b.size() + 256, 0);
  tensor t;
  std::string err;
  CHECK_FALSE(read_npy_memory(b.data(), b.size(), t, err));
  CHECK(err.find("\\x1b") != std::string::npos);
  CHECK_FALSE(has_control_chars(err));
}

TEST_CASE("eval safetensors: reversed offsets have their own message; overlapping ranges are rejected") {
  std::string e = st_error(R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[256,0]}})", 256);
  CHECK(e.find("data_offsets [256, 0] are reversed") != std::string::npos);
  e = st_error(R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]},)"
               R"("v":{"dtype":"F16","shape":[2,64],"data_offsets":[128,384]}})",
               384);
  CHECK(e.find("tensors 'k' [0, 256) and 'v' [128, 384) overlap") != std::string::npos);
  // The same range twice is an overlap too.
  e = st_error(R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]},)"
               R"("v":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]}})",
               256);
  CHECK(e.find("overlap") != std::string::npos);
  // Adjacent ranges and empty tensors anywhere are fine.
  const std::string ok = R"({"k":{"dtype":"F16","shape":[2,64],"data_offsets":[0,256]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[128,128]},)"
                         R"("v":{"dtype":"F16","shape":[2,64],"data_offsets":[256,512]}})";
  CHECK(st_error(ok, 512) == "(read)");
}
