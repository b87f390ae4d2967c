// kvtile-eval end to end: the Sinkhorn memo leaves records byte-identical,
// run_app on the committed tinylm slice and on a small generated dump writes a
// consistent table, JSON, CSV and plot; errors and a missing gnuplot are
// reported, not fatal.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../app.hpp"
#include "eval_test_support.hpp"

namespace fs = std::filesystem;
using namespace kvtile_eval;

namespace {
fs::path temp_dir(const char* tag) { return kvtile_eval_test::unique_temp_dir("kvtile_eval_e2e_", tag); }
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

template <class Preset>
void check_memo_identical() {
  using Memo = with_memo_t<Preset>;
  static_assert(!std::is_same_v<Memo, Preset>, "kvarn presets get the memo");
  constexpr int D = Preset::D, G = Preset::G;
  generator_params p;
  p.tokens = 2 * G;
  p.kv_heads = 1;
  p.q_heads = 1;
  p.head_dim = D;
  dataset ds;
  generate_dataset(p, 1, ds);
  for (int tile = 0; tile < 2; ++tile) {
    const float* k = ds.key(0, tile * G, 0);
    const float* v = ds.value(0, tile * G, 0);
    std::vector<unsigned char> a(Preset::record_bytes, 0), b(Preset::record_bytes, 0), c(Preset::record_bytes, 0);
    REQUIRE(kvtile::ok(Preset::encode(k, D, v, D, a.data())));
    sinkhorn_memo_slot ks, vs;
    for (auto* rec : {&b, &c}) {  // first call fills the slots, the second reuses them
      memo_slot = &ks;
      REQUIRE(kvtile::ok(Memo::encode_keys(k, D, rec->data())));
      memo_slot = &vs;
      REQUIRE(kvtile::ok(Memo::encode_values(v, D, rec->data())));
      memo_slot = nullptr;
      CHECK(ks.valid);
    }
    CHECK(a == b);
    CHECK(a == c);
  }
}

nlohmann::json method_by_name(const nlohmann::json& j, const std::string& name) {
  for (const auto& m : j["methods"])
    if (m["name"] == name) return m;
  return nullptr;
}
}  // namespace

TEST_CASE("eval memo: records are byte-identical to the presets'") {
  check_memo_identical<kvtile::presets::k4v2_g128<128>>();
  check_memo_identical<kvtile::presets::k2v2_g128<128, kvtile::fp16_scales>>();
  check_memo_identical<kvtile::presets::k4v4_g64<64>>();
  // a slot filled by one tile is not reused for another (hash check)
  using Memo = with_memo_t<kvtile::presets::k4v2_g128<128>>;
  using Preset = kvtile::presets::k4v2_g128<128>;
  generator_params p;
  p.tokens = 256;
  p.kv_heads = 1;
  p.q_heads = 1;
  dataset ds;
  generate_dataset(p, 1, ds);
  sinkhorn_memo_slot s;
  std::vector<unsigned char> a(Preset::record_bytes), b(Preset::record_bytes);
  memo_slot = &s;
  REQUIRE(kvtile::ok(Memo::encode_keys(ds.key(0, 0, 0), 128, b.data())));
  REQUIRE(kvtile::ok(Memo::encode_keys(ds.key(0, 128, 0), 128, b.data())));
  memo_slot = nullptr;
  REQUIRE(kvtile::ok(Preset::encode_keys(ds.key(0, 128, 0), 128, a.data())));
  CHECK(std::equal(a.begin(), a.begin() + 128 * 128 / 2, b.begin()));
}

TEST_CASE("eval end to end: tinylm slice -> table, JSON, CSV and plot agree") {
  const fs::path d = temp_dir("tiny");
  const std::string dir = std::string(KVTILE_TEST_DATA_DIR) + "/kvtile-eval/";
  app_options o;
  o.keys = dir + "tinylm_w0_l0_256_k.npy";
  o.values = dir + "tinylm_w0_l0_256_v.npy";
  o.queries = dir + "tinylm_w0_l0_256_q.npy";
  o.threads = 2;
  o.json = (d / "r.json").string();
  o.csv = (d / "r.csv").string();
  o.plot = (d / "r.png").string();
  o.progress = 0;
  // 256 tokens are two tiles: with the default decode semantics every query
  // sees only fp16 tiles (the sink and its own), so the codecs' errors show
  // with every tile quantized.
  o.fp16_own_tile = o.fp16_sink_tile = false;
  std::ostringstream out, err;
  eval_result r;
  const int rc = run_app(o, out, err, &r);
  INFO("stderr: " << err.str());
  REQUIRE(rc == 0);
  const std::string table = out.str();
  for (const auto& m : all_methods()) CHECK_MESSAGE(table.find(m.name()) != std::string::npos, m.name());
  CHECK(table.find("best preset") != std::string::npos);
  CHECK(table.find("attention error by context length") != std::string::npos);

  const auto j = nlohmann::json::parse(slurp(d / "r.json"));
  REQUIRE(j["methods"].size() == 27);
  CHECK(j["input"]["tokens"] == 256);
  CHECK(j["input"]["q_heads"] == 4);
  CHECK(j["settings"]["context_positions"] == std::vector<int>{256});
  for (const auto& m : j["methods"]) {
    CHECK(m["ok"] == true);
    const double e = m["overall"]["attention"]["rel_err_mean"];
    CHECK(e >= 0);
    CHECK(m["overall"]["attention"]["samples"] == 64 * 2);
  }
  // bits are the codec's own accounting
  CHECK(method_by_name(j, "k4v2_g128/fp8")["bits_per_element"] ==
        doctest::Approx(kvtile::presets::k4v2_g128<128>::bits_per_element));
  CHECK(method_by_name(j, "k4v2_g64/fp16")["bits_per_element"] ==
        doctest::Approx(kvtile::presets::k4v2_g64<128, kvtile::fp16_scales>::bits_per_element));
  CHECK(method_by_name(j, "token_rtn k4v2")["bits_per_element"] == doctest::Approx(3.25));
  // same key side (bits 4, G, packing) -> identical key metrics
  CHECK(method_by_name(j, "k4v2_g128/fp8")["overall"]["keys"] == method_by_name(j, "k4v4_g128/fp8")["overall"]["keys"]);
  // more bits, less error
  const double e8 = method_by_name(j, "k8v8_g128/fp8")["overall"]["attention"]["rel_err_mean"];
  const double e4 = method_by_name(j, "k4v4_g128/fp8")["overall"]["attention"]["rel_err_mean"];
  const double e2 = method_by_name(j, "k2v2_g128/fp8")["overall"]["attention"]["rel_err_mean"];
  CHECK(e8 < e4);
  CHECK(e4 < e2);
  CHECK(method_by_name(j, "k8v8_g128/fp8")["overall"]["keys"]["snr_db"].get<double>() > 40.0);
  // the in-memory result is what was written
  REQUIRE(r.methods.size() == 27);
  CHECK(r.methods[0].all.attn.rel_err_mean == doctest::Approx(j["methods"][0]["overall"]["attention"]["rel_err_mean"].get<double>()));

  // CSV: header + one "all" and one "layer0" row per method; values match the JSON
  std::istringstream csv(slurp(d / "r.csv"));
  std::string line;
  std::getline(csv, line);
  CHECK(line.rfind("method,family,config,packing,scope,bits_per_element", 0) == 0);
  const std::size_t ncols = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    CHECK(static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1 == ncols);
    if (line.rfind("k2v2_g128/fp8,kvarn,k2v2_g128,fp8,all,", 0) == 0) {
      std::vector<std::string> f;
      std::stringstream ls(line);
      for (std::string c; std::getline(ls, c, ',');) f.push_back(c);
      REQUIRE(f.size() > 20);
      CHECK(std::stod(f[20]) == doctest::Approx(e2).epsilon(1e-6));  // attn_rel_err_mean
    }
  }
  CHECK(rows == 54);

  if (have_gnuplot()) {
    const std::string png = slurp(d / "r.png");
    REQUIRE(png.size() > 1000);
    CHECK(png.compare(1, 3, "PNG") == 0);
  } else {
    CHECK(err.str().find("gnuplot not found") != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("eval end to end: generated dump with layers, SVG plot, thread-count independence") {
  const fs::path d = temp_dir("gen");
  app_options o;
  o.gen.layers = 2;
  o.gen.tokens = 600;  // 4 tiles of 128 + 88 fp16 tail tokens; 9 tiles of 64 + 24
  o.gen.kv_heads = 2;
  o.gen.q_heads = 4;
  o.methods = "kvarn+k4v2_g128,kvarn+k4v2_g64,kivi+k4v2,token_rtn+k4v2";
  o.threads = 1;
  o.json = (d / "a.json").string();
  o.csv = (d / "a.csv").string();
  o.plot = (d / "a.svg").string();
  o.progress = 0;
  std::ostringstream out, err;
  REQUIRE(run_app(o, out, err) == 0);
  o.threads = 2;
  o.json = (d / "b.json").string();
  o.plot.clear();
  std::ostringstream out2, err2;
  REQUIRE(run_app(o, out2, err2) == 0);
  auto a = nlohmann::json::parse(slurp(d / "a.json")), b = nlohmann::json::parse(slurp(d / "b.json"));
  REQUIRE(a["methods"].size() == 6);
  for (std::size_t i = 0; i < a["methods"].size(); ++i) {
    CHECK(a["methods"][i]["overall"] == b["methods"][i]["overall"]);
    CHECK(a["methods"][i]["layers"].size() == 2);
  }
  // effective bits include the fp16 tail
  const auto m = a["methods"][0];
  CHECK(m["name"] == "k4v2_g128/fp8");
  const double bits = m["bits_per_element"], eff = m["effective_bits_per_element"];
  CHECK(eff == doctest::Approx((512 * bits + 88 * 16.0) / 600));
  CHECK(out.str().find("per layer") != std::string::npos);
  const std::string csv = slurp(d / "a.csv");
  CHECK(csv.find(",layer1,") != std::string::npos);
  if (have_gnuplot()) CHECK(slurp(d / "a.svg").find("<svg") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("eval end to end: errors are reported, a missing gnuplot only warns") {
  const fs::path d = temp_dir("err");
  std::ostringstream out, err;
  app_options o;
  o.progress = 0;
  // truncated input
  {
    std::vector<float> v(64 * 2 * 128, 0.25f);
    std::string e;
    REQUIRE(write_npy_file((d / "k.npy").string(), {64, 2, 128}, v.data(), dtype::float16, e));
    fs::resize_file(d / "k.npy", fs::file_size(d / "k.npy") - 10);
    o.keys = (d / "k.npy").string();
    o.values = o.keys;
    CHECK(run_app(o, out, err) == 1);
    CHECK(err.str().find("truncated") != std::string::npos);
  }
  // unknown extension, only one of K/V
  err.str("");
  o.keys = (d / "k.bin").string();
  CHECK(run_app(o, out, err) == 1);
  CHECK(err.str().find("unknown file type") != std::string::npos);
  err.str("");
  o.values.clear();
  CHECK(run_app(o, out, err) == 1);
  CHECK(err.str().find("both --keys and --values") != std::string::npos);
  // device and method errors
  o = app_options{};
  o.progress = 0;
  o.device = "cuda";
  err.str("");
  CHECK(run_app(o, out, err) == 1);
#if !KVTILE_EVAL_HAVE_CUDA
  CHECK(err.str().find("built without CUDA") != std::string::npos);
  // --compare-devices needs the GPU path too; the fallback supports no codec
  o.device = "cpu";
  o.compare_devices = true;
  err.str("");
  CHECK(run_app(o, out, err) == 1);
  CHECK(err.str().find("--compare-devices: kvtile-eval was built without CUDA") != std::string::npos);
  o.compare_devices = false;
  CHECK_FALSE(kvtile_eval::device_supports(kvtile::codec_params{}));
  {
    std::string why;
    CHECK_FALSE(kvtile_eval::device_available(why));
    CHECK(why.find("built without CUDA") != std::string::npos);
  }
#endif
  o.device = "tpu";
  CHECK(run_app(o, out, err) == 2);
  o.device = "cpu";
  o.methods = "k5v5";
  CHECK(run_app(o, out, err) == 2);
  // gnuplot missing: warning, exit 0, no plot
  o.methods = "k4v2_g128+fp8";
  o.gen.tokens = 256;
  o.gen.kv_heads = 1;
  o.gen.q_heads = 2;
  o.plot = (d / "p.png").string();
  ::setenv("KVTILE_EVAL_GNUPLOT", "kvtile-eval-no-such-gnuplot", 1);
  err.str("");
  std::ostringstream out2;
  CHECK(run_app(o, out2, err) == 0);
  ::unsetenv("KVTILE_EVAL_GNUPLOT");
  CHECK(err.str().find("gnuplot not found") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "p.png"));
  CHECK(out2.str().find("k4v2_g128/fp8") != std::string::npos);
  fs::remove_all(d);
}

// A small generated run (512 tokens x 2 KV heads, GQA 2) of `methods`, no plot or progress.
static app_options small_generated_run(const std::string& methods, int threads) {
  app_options o;
  o.gen.tokens = 512;
  o.gen.kv_heads = 2;
  o.gen.q_heads = 4;
  o.methods = methods;
  o.threads = threads;
  o.plot.clear();
  o.progress = 0;
  return o;
}

TEST_CASE("eval sinkhorn iterations: variants, their codec and their own memo") {
  std::vector<method_spec> ms;
  std::string err;
  REQUIRE(select_methods("kvarn+k2v2_g128+fp8,kvarn+k4v2_g64+fp8,kivi+k2v2", ms, err));  // in all_methods() order
  REQUIRE(add_iteration_variants({0, kvtile_eval::preset_iterations, 16, 0}, ms, err));
  std::vector<std::string> names;
  for (const auto& m : ms) names.push_back(m.name());
  CHECK(names == std::vector<std::string>{"k4v2_g64/fp8", "k2v2_g128/fp8", "k2v2_g128/fp8 it0",
                                          "k2v2_g128/fp8 it16", "kivi k2v2_g128/fp8"});
  CHECK_FALSE(add_iteration_variants({3}, ms, err));
  CHECK(err.find("3 is not supported") != std::string::npos);
  REQUIRE(select_methods("kvarn+k4v2_g64,kivi", ms, err));
  CHECK_FALSE(add_iteration_variants({2}, ms, err));
  CHECK(err.find("needs a selected kvarn method") != std::string::npos);

  // a variant dispatches presets::kvarn at its count (head_dim from p)
  method_spec v{family::kvarn, 128, 4, 4, kvtile::packing::fp8_scales, 4};
  kvtile::codec_params p{64, 128, 4, 4};
  bool hit = false;
  CHECK(dispatch_method(v, p, [&](auto tag) {
          using C = typename decltype(tag)::type;
          hit = std::is_same_v<C, kvtile::presets::kvarn<64, 128, 4, 4, kvtile::fp8_scales, kvtile::rtn<>, 4>>;
        }) == kvtile::status::success);
  CHECK(hit);
  v.pack = kvtile::packing::fp16_scales;
  CHECK(dispatch_method(v, p, [](auto) {}) == kvtile::status::invalid_argument);

  // Each count runs its own memo: the preset (2 iterations) ran first on the
  // same tiles, and 0 and 4 iterations still differ from it and each other.
  // rotate_rtn is no Sinkhorn count (null), and not Sinkhorn 0 (plain min-max rounding).
  app_options o = small_generated_run("kvarn+k2v2_g128+fp8,rotate_rtn+k2v2", 1);
  o.sinkhorn_iterations = {0, 4};
  const fs::path d = temp_dir("iter");
  o.json = (d / "it.json").string();
  std::ostringstream out, errs;
  REQUIRE(run_app(o, out, errs) == 0);
  const auto j = nlohmann::json::parse(slurp(d / "it.json"));
  const auto preset = method_by_name(j, "k2v2_g128/fp8"), it0 = method_by_name(j, "k2v2_g128/fp8 it0"),
             it4 = method_by_name(j, "k2v2_g128/fp8 it4"), rot = method_by_name(j, "rotate_rtn k2v2_g128/fp8");
  REQUIRE(!it0.is_null());
  REQUIRE(!it4.is_null());
  CHECK(it0["sinkhorn_iterations"] == 0);
  CHECK(rot["sinkhorn_iterations"].is_null());
  CHECK(it0["overall"] != rot["overall"]);
  CHECK(preset["overall"] != it0["overall"]);
  CHECK(it4["overall"] != it0["overall"]);
  fs::remove_all(d);
}

TEST_CASE("eval: every --sinkhorn-iterations count runs that count; baselines are plain min-max RTN (issue 31 item 12)") {
  // Before: no case 8, so 8 ran the default branch's 16 iterations (labelled it8).
  const kvtile::codec_params p{128, 128, 4, 2};
  for (int it : kvtile_eval::sinkhorn_iteration_choices) {
    CAPTURE(it);
    method_spec v{family::kvarn, 128, 4, 2, kvtile::packing::fp8_scales, it};
    int ran = -1;
    CHECK(dispatch_method(v, p, [&](auto tag) { ran = decltype(tag)::type::normalizer::iterations; }) ==
          kvtile::status::success);
    CHECK(ran == it);
  }
  method_spec odd{family::kvarn, 128, 4, 2, kvtile::packing::fp8_scales, 3};
  CHECK(dispatch_method(odd, p, [](auto) { FAIL("no codec for 3 iterations"); }) == kvtile::status::invalid_argument);
  // KIVI: no rotation, no normalization, min-max rounding without clip (rtn_cover), keys per channel.
  for (auto fam : {family::kivi, family::rotate_rtn}) {
    method_spec b{fam, 128, 2, 2, kvtile::packing::fp8_scales};
    kvtile::codec_params q{128, 128, 2, 2};
    q.algo = fam == family::kivi ? kvtile::method::kivi : kvtile::method::rotate_rtn;
    bool hit = false;
    CHECK(dispatch_method(b, q, [&](auto tag) {
            using C = typename decltype(tag)::type;
            const bool rotation = fam == family::kivi ? std::is_same_v<typename C::rotation, kvtile::identity>
                                                      : std::is_same_v<typename C::rotation, kvtile::hadamard>;
            hit = rotation && std::is_same_v<typename C::normalizer, kvtile::no_normalization> &&
                  std::is_same_v<typename C::rounding, kvtile::rtn_cover> &&
                  std::is_same_v<typename C::config, kvtile::tile_config<128, 128, 2, 2>> &&
                  std::is_same_v<typename C::packer, kvtile::fp8_scales>;
          }) == kvtile::status::success);
    CHECK(hit);
    CHECK_FALSE(b.has_sinkhorn());
    CHECK_FALSE(dispatch_codec(b));
  }
}

TEST_CASE("eval kvarn-0.1: kvtile 0.1's codec (covering rule, Sinkhorn 8) as a baseline") {
  // dispatch: presets::kvarn with rtn_cover and 8 iterations, in the packing asked for
  method_spec v{family::kvarn01, 128, 4, 2, kvtile::packing::fp16_scales, kvtile_eval::kvarn01_iterations};
  kvtile::codec_params p{256, 128, 4, 2, kvtile::packing::fp16_scales};
  bool hit = false;
  CHECK(dispatch_method(v, p, [&](auto tag) {
          using C = typename decltype(tag)::type;
          hit = std::is_same_v<C, kvtile::presets::kvarn<256, 128, 4, 2, kvtile::fp16_scales, kvtile::rtn_cover, 8>>;
        }) == kvtile::status::success);
  CHECK(hit);
  CHECK_FALSE(dispatch_codec(v));  // never the GPU codec of kvtile-eval (that runs dispatch(p)'s presets)
  method_spec g64 = v;
  g64.tile_tokens = 64;
  CHECK(dispatch_method(g64, p, [](auto) {}) == kvtile::status::invalid_argument);
  method_spec k8 = v;
  k8.key_bits = k8.value_bits = 8;
  CHECK(dispatch_method(k8, p, [](auto) {}) == kvtile::status::invalid_argument);
  p.head_dim = 96;
  CHECK(dispatch_method(v, p, [](auto) {}) == kvtile::status::unsupported_head_dim);

  app_options o = small_generated_run("kvarn-0.1,kvarn+k4v2_g128+fp16", 2);
  o.sinkhorn_iterations = {8};  // adds no variant for fp16 presets: rejected, since none is fp8
  const fs::path d = temp_dir("v01");
  o.json = (d / "v01.json").string();
  std::ostringstream out, errs;
  CHECK(run_app(o, out, errs) != 0);
  o.sinkhorn_iterations.clear();
  REQUIRE(run_app(o, out, errs) == 0);
  const auto j = nlohmann::json::parse(slurp(d / "v01.json"));
  REQUIRE(j["methods"].size() == 4);
  const auto k42 = method_by_name(j, "kvarn-0.1 k4v2_g128/fp16"), k44 = method_by_name(j, "kvarn-0.1 k4v4_g128/fp16"),
             k22 = method_by_name(j, "kvarn-0.1 k2v2_g128/fp16"), preset = method_by_name(j, "k4v2_g128/fp16");
  REQUIRE(!k42.is_null());
  REQUIRE(!k22.is_null());
  CHECK(k42["ok"] == true);
  CHECK(k42["family"] == "kvarn-0.1");
  CHECK(k42["sinkhorn_iterations"] == 8);
  CHECK(k42["bits_per_element"] == preset["bits_per_element"]);  // the same record layout
  CHECK(k42["overall"]["keys"] == k44["overall"]["keys"]);        // same key side
  CHECK(k42["overall"]["keys"] != preset["overall"]["keys"]);     // other rounding and count than the preset
  CHECK(k42["overall"]["values"] != preset["overall"]["values"]);
  CHECK(k22["overall"]["attention"]["kl_mean"].get<double>() > 4 * k42["overall"]["attention"]["kl_mean"].get<double>());
  fs::remove_all(d);
}

TEST_CASE("eval --fp16-own-tile, --fp16-sink-tile: decode semantics (own tile and sink tile in fp16)") {
  app_options o = small_generated_run("kvarn+k2v2_g128+fp8,kivi+k2v2,token_rtn+k2v2", 2);
  o.gen.tokens = 128;  // one tile: with the option every query sees only fp16 K/V
  o.fp16_own_tile = true;
  const fs::path d = temp_dir("own");
  o.json = (d / "own.json").string();
  std::ostringstream out, errs;
  REQUIRE(run_app(o, out, errs) == 0);
  CHECK(out.str().find("--fp16-own-tile") != std::string::npos);
  auto j = nlohmann::json::parse(slurp(d / "own.json"));
  CHECK(j["settings"]["fp16_own_tile"] == true);
  for (const auto& m : j["methods"]) {
    CHECK(m["overall"]["attention"]["rel_err_mean"] == 0.0);
    CHECK(m["overall"]["attention"]["kl_mean"] == 0.0);
    CHECK(m["overall"]["keys"]["snr_db"].get<double>() < 40.0);  // the tile itself is quantized
  }
  // 512 tokens: queries in later tiles see quantized earlier tiles; less error than with every tile quantized
  o.gen.tokens = 512;
  std::ostringstream out2, out3;
  REQUIRE(run_app(o, out2, errs) == 0);
  const auto own = nlohmann::json::parse(slurp(d / "own.json"));
  o.fp16_own_tile = false;
  REQUIRE(run_app(o, out3, errs) == 0);
  const auto all = nlohmann::json::parse(slurp(d / "own.json"));
  CHECK(all["settings"]["fp16_own_tile"] == false);
  for (const char* name : {"k2v2_g128/fp8", "kivi k2v2_g128/fp8"}) {
    const double e_own = method_by_name(own, name)["overall"]["attention"]["rel_err_mean"];
    const double e_all = method_by_name(all, name)["overall"]["attention"]["rel_err_mean"];
    CHECK(e_own > 0);
    CHECK(e_own < e_all);
    CHECK(method_by_name(own, name)["overall"]["keys"] == method_by_name(all, name)["overall"]["keys"]);
  }
  // with the sink tile in fp16 too, 256 tokens: every query sees fp16 K/V only (tile 0 sink, tile 1 own)
  o.gen.tokens = 256;
  o.fp16_own_tile = o.fp16_sink_tile = true;
  std::ostringstream out4;
  REQUIRE(run_app(o, out4, errs) == 0);
  CHECK(out4.str().find("--fp16-sink-tile") != std::string::npos);
  const auto both = nlohmann::json::parse(slurp(d / "own.json"));
  CHECK(both["settings"]["fp16_sink_tile"] == true);
  for (const auto& m : both["methods"]) CHECK(m["overall"]["attention"]["kl_mean"] == 0.0);
  o.fp16_own_tile = false;  // sink alone: the second tile is quantized for its own queries
  std::ostringstream out5;
  REQUIRE(run_app(o, out5, errs) == 0);
  const auto sink = nlohmann::json::parse(slurp(d / "own.json"));
  CHECK(method_by_name(sink, "k2v2_g128/fp8")["overall"]["attention"]["kl_mean"].get<double>() > 0.0);
  fs::remove_all(d);
}

TEST_CASE("eval: decode semantics by default, named in the table and JSON with the seeds; queries capped (issue 31 items 5, 11)") {
  app_options o = small_generated_run("kvarn+k4v2_g128+fp8", 1);
  CHECK(o.fp16_own_tile);  // the default view is a decode step's
  CHECK(o.fp16_sink_tile);
  o.gen.tokens = 256;  // x 2 KV heads: 512 (position, KV head) pairs
  o.queries_per_layer = 100000;
  o.gen.seed = 42;
  o.sample_seed = UINT64_MAX;
  const fs::path d = temp_dir("sem");
  o.json = (d / "s.json").string();
  std::ostringstream out, errs;
  REQUIRE(run_app(o, out, errs) == 0);
  CHECK(out.str().find("attention semantics: decode") != std::string::npos);
  CHECK(out.str().find("metrics: attn err") != std::string::npos);
  CHECK(errs.str().find("using 512") != std::string::npos);
  auto j = nlohmann::json::parse(slurp(d / "s.json"));
  CHECK(j["settings"]["queries_per_layer"] == 512);
  CHECK(j["settings"]["attention_semantics"] == "decode");
  CHECK(j["settings"]["seeds"]["sample"].get<std::uint64_t>() == UINT64_MAX);
  CHECK(j["settings"]["seeds"]["generator"].get<std::uint64_t>() == 42);
  o.fp16_own_tile = o.fp16_sink_tile = false;  // --all-quantized
  std::ostringstream out2;
  REQUIRE(run_app(o, out2, errs) == 0);
  CHECK(out2.str().find("attention semantics: all-quantized") != std::string::npos);
  j = nlohmann::json::parse(slurp(d / "s.json"));
  CHECK(j["settings"]["attention_semantics"] == "all-quantized");
  fs::remove_all(d);

  app_options bad;
  std::string e;
  bad.plot = "out.txt";  // the format comes from the extension: refused, not a PNG named out.txt
  CHECK_FALSE(check_options(bad, e));
  CHECK(e.find(".png or .svg") != std::string::npos);
  bad.plot = "out.SVG";
  CHECK(check_options(bad, e));
  bad.outputs_named = {"--json"};  // --json '' on the command line
  CHECK_FALSE(check_options(bad, e));
  CHECK(e.find("--json needs a file name") != std::string::npos);
  CHECK(default_max_memory_gib() > 0.0);
}
