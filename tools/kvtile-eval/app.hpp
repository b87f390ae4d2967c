// tools/kvtile-eval/app.hpp: kvtile-eval's main logic as a function (main.cpp
// parses the command line with CLI11 and calls run_app; tests call it directly).
// run_app is defined in src/app.cpp (the library kvtile_eval_core).
#pragma once

#include <cctype>
#include <chrono>
#include <cstdio>
#include <new>
#include <set>
#include <utility>
#include <ostream>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#define KVTILE_EVAL_HAVE_ISATTY 1
#endif

#include "dataset.hpp"
#include "device_codec.hpp"
#include "evaluate.hpp"
#include "limits.hpp"
#include "methods.hpp"
#include "npy.hpp"
#include "plot.hpp"
#include "ranking.hpp"
#include "report.hpp"
#include "safetensors.hpp"

namespace kvtile_eval {

// Exit codes (docs/kvtile-eval.md, `--help`).
inline constexpr int exit_ok = 0;     // the run finished (methods that failed are reported in the table)
inline constexpr int exit_error = 1;  // unreadable or invalid input, evaluation, output or device error,
                                      // or a --compare-devices mismatch
inline constexpr int exit_usage = 2;  // a bad option or value, or a run above the limits (limits.hpp)

struct app_options {
  // inputs (all empty: the embedded generator)
  std::string keys, values, queries;
  std::string keys_tensor, values_tensor, queries_tensor;  // safetensors tensor names
  int max_tokens = 0;                                      // use only the first N tokens (0: all)
  // generator
  generator_params gen;
  double outlier_scale = 1.0;  // multiplies gen.outlier_min and gen.outlier_max (key outlier means)
  // evaluation
  std::string methods = "all";
  std::vector<int> sinkhorn_iterations;  // extra Sinkhorn counts for the kvarn methods (add_iteration_variants)
  int threads = 0;
  int queries_per_layer = 64;  // (position, KV head) pairs; every query head of the group attends
  int context_queries = 16;
  std::uint64_t sample_seed = 1;
  // Attention semantics (eval_options'): decode semantics by default, the sink
  // tile and each query's own tile in fp16 as the paged cache serves them
  // (main.cpp's --all-quantized sets both false: every complete tile quantized).
  bool fp16_own_tile = true, fp16_sink_tile = true;
  std::vector<double> budgets = default_budgets();
  std::string device = "cpu";
  bool compare_devices = false;  // run host and GPU codecs, report bit-identity (implies --device cuda)
  double max_memory_gib = default_max_memory_gib();  // refuse runs whose estimated peak memory is above this
  // outputs
  std::string json, csv, plot;
  std::set<std::string> outputs_named;  // output options given on the command line ("--json", ...; main.cpp)
  bool table = true;
  bool quiet = false;
  int progress = -1;  // -1: when stderr is a terminal; 0: never; 1: always
};

namespace detail {
inline bool ends_with_ci(const std::string& s, const std::string& e) {
  if (s.size() < e.size()) return false;
  for (std::size_t i = 0; i < e.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - e.size() + i])) != e[i]) return false;
  return true;
}

inline bool load_tensor(const std::string& path, const std::string& name, const std::vector<std::string>& candidates,
                        tensor& t, std::size_t max_elems, std::string& err) {
  if (ends_with_ci(path, ".npy")) {
    if (!name.empty()) {
      err = path + ": a tensor name was given, but .npy files hold one array";
      return false;
    }
    return read_npy_file(path, t, err, max_elems);
  }
  if (ends_with_ci(path, ".safetensors")) return read_safetensors_file(path, name, candidates, t, err, max_elems);
  err = path + ": unknown file type (expected .npy or .safetensors)";
  return false;
}

// Keeps the first n tokens of a [tokens][h][d] or [layers][tokens][h][d] tensor.
inline void truncate_tokens(tensor& t, std::size_t n) {
  if (t.shape.size() < 3 || t.shape.size() > 4) return;
  const std::size_t ax = t.shape.size() - 3;
  if (t.shape[ax] <= n) return;
  const std::size_t outer = ax ? t.shape[0] : 1;
  const std::size_t inner = t.shape[ax + 1] * t.shape[ax + 2];
  const std::size_t old_t = t.shape[ax];
  std::vector<float> d(outer * n * inner);
  for (std::size_t o = 0; o < outer; ++o)
    std::copy(t.data.begin() + static_cast<std::ptrdiff_t>(o * old_t * inner),
              t.data.begin() + static_cast<std::ptrdiff_t>((o * old_t + n) * inner),
              d.begin() + static_cast<std::ptrdiff_t>(o * n * inner));
  t.data.swap(d);
  t.shape[ax] = n;
}

class progress_meter {
 public:
  explicit progress_meter(bool enabled) : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
  void operator()(std::size_t done, std::size_t total, const std::string& what) {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s < 1.5 && done < total) return;  // quiet for short runs
    const double frac = total ? static_cast<double>(done) / total : 1.0;
    std::fprintf(stderr, "\r[kvtile-eval] %3d%% %-44.44s %6.1f s", static_cast<int>(100 * frac + 0.5), what.c_str(), s);
    if (done >= total) std::fprintf(stderr, "\r%-80s\r", "");
    std::fflush(stderr);
    shown_ = true;
  }
  ~progress_meter() { finish(); }  // also when an exception ends the run
  void finish() {
    if (enabled_ && shown_) {
      std::fprintf(stderr, "\r%-80s\r", "");
      std::fflush(stderr);
      shown_ = false;
    }
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace detail

inline bool stderr_is_terminal() {
#ifdef KVTILE_EVAL_HAVE_ISATTY
  return isatty(2) != 0;
#else
  return false;
#endif
}

namespace detail {
inline bool in_range(long long v, long long lo, long long hi, const char* what, std::string& err) {
  if (v >= lo && v <= hi) return true;
  err = std::string(what) + " " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "]";
  return false;
}
}  // namespace detail

// Checks every size option against limits.hpp before anything is allocated
// (false: a usage error, exit code 2).
inline bool check_options(const app_options& o, std::string& err) {
  using detail::in_range;
  if (!in_range(o.threads, 0, max_threads, "--threads", err) ||
      !in_range(o.queries_per_layer, 0, max_queries_per_layer, "--queries-per-layer", err) ||
      !in_range(o.context_queries, 0, max_context_queries, "--context-queries", err) ||
      !in_range(o.max_tokens, 0, 1 << 30, "--max-tokens", err))
    return false;
  if (!(o.max_memory_gib > 0 && o.max_memory_gib <= max_memory_gib_limit)) {
    err = "--max-memory must be in (0, " + std::to_string(static_cast<long long>(max_memory_gib_limit)) + "] GiB";
    return false;
  }
  // An output option given an empty name would write nothing, silently.
  for (const auto& [name, path] : {std::pair<const char*, const std::string*>{"--json", &o.json}, {"--csv", &o.csv}})
    if (path->empty() && o.outputs_named.count(name)) {
      err = std::string(name) + " needs a file name";
      return false;
    }
  if (!o.plot.empty() && !plot_extension_ok(o.plot)) {
    err = "--plot " + printable(o.plot) + ": the file name must end in .png or .svg (the format is chosen by it)";
    return false;
  }
  if (o.plot.empty() && o.outputs_named.count("--plot")) {
    err = "--plot needs a file name (or --no-plot)";
    return false;
  }
  if (o.keys.empty() && o.values.empty()) {
    const generator_params& g = o.gen;
    if (!in_range(g.layers, 1, max_layers, "--gen-layers", err) ||
        !in_range(g.tokens, 1, max_gen_tokens, "--gen-tokens", err) ||
        !in_range(g.kv_heads, 1, max_kv_heads, "--gen-kv-heads", err) ||
        !in_range(g.q_heads, 1, max_q_heads, "--gen-q-heads", err))
      return false;
    if (g.q_heads % g.kv_heads != 0) {
      err = "--gen-q-heads " + std::to_string(g.q_heads) + " is not a multiple of --gen-kv-heads " +
            std::to_string(g.kv_heads);
      return false;
    }
    if (!(o.outlier_scale >= 0 && o.outlier_scale <= max_outlier_scale)) {
      err = "--gen-outlier-scale must be in [0, " + std::to_string(static_cast<int>(max_outlier_scale)) + "]";
      return false;
    }
    if (!kvtile::is_head_dim(g.head_dim)) {
      err = "--gen-head-dim " + std::to_string(g.head_dim) + " is not supported (" + head_dim_list(" or ") + ")";
      return false;
    }
  }
  return true;
}

// The estimated peak memory of evaluating `o` on a dataset of this shape.
inline memory_estimate estimate_run_memory(const app_options& o, std::size_t methods, int layers, int tokens,
                                           int kv_heads, int q_heads, int head_dim, bool file_queries) {
  // Queries beyond the (position, KV head) pairs that exist are capped (run_app), so they cost nothing.
  const long long pairs = static_cast<long long>(tokens) * kv_heads;
  const int queries = o.queries_per_layer > pairs ? static_cast<int>(pairs) : o.queries_per_layer;
  const int context = o.context_queries > pairs ? static_cast<int>(pairs) : o.context_queries;
  return estimate_memory(layers, tokens, kv_heads, q_heads, head_dim, file_queries, o.threads, queries, context,
                         methods, o.compare_devices);
}

// Loads the inputs (files or generator) into ds.
inline bool load_inputs(const app_options& o, dataset& ds, std::string& err) {
  if (o.keys.empty() && o.values.empty()) {
    if (!o.queries.empty()) {
      err = "--queries needs --keys and --values";
      return false;
    }
    generator_params g = o.gen;
    g.outlier_min = static_cast<float>(g.outlier_min * o.outlier_scale);
    g.outlier_max = static_cast<float>(g.outlier_max * o.outlier_scale);
    generate_dataset(g, o.threads > 0 ? o.threads : default_threads(), ds);
    return true;
  }
  if (o.keys.empty() || o.values.empty()) {
    err = "give both --keys and --values (or neither, for the embedded generator)";
    return false;
  }
  // Each tensor as float within --max-memory, checked from its header before
  // its data is read (the whole run is checked once the shapes are known).
  const double budget = o.max_memory_gib * 1024.0 * 1024.0 * 1024.0 / sizeof(float);
  const std::size_t max_elems =
      budget < static_cast<double>(max_elements) ? static_cast<std::size_t>(budget) : max_elements;
  tensor k, v, q;
  if (!detail::load_tensor(o.keys, o.keys_tensor, {"k", "key", "keys", "k_cache", "key_cache"}, k, max_elems, err) ||
      !detail::load_tensor(o.values, o.values_tensor, {"v", "value", "values", "v_cache", "value_cache"}, v, max_elems,
                           err))
    return false;
  const bool have_q = !o.queries.empty();
  if (have_q && !detail::load_tensor(o.queries, o.queries_tensor, {"q", "query", "queries"}, q, max_elems, err))
    return false;
  if (o.max_tokens > 0) {
    detail::truncate_tokens(k, static_cast<std::size_t>(o.max_tokens));
    detail::truncate_tokens(v, static_cast<std::size_t>(o.max_tokens));
    if (have_q) detail::truncate_tokens(q, static_cast<std::size_t>(o.max_tokens));
  }
  if (!make_dataset(std::move(k), std::move(v), have_q ? &q : nullptr, ds, err)) return false;
  ds.description = "K " + o.keys + ", V " + o.values + (have_q ? ", Q " + o.queries : std::string()) + " (" +
                   std::to_string(ds.layers) + " layer(s) x " + std::to_string(ds.tokens) + " tokens x " +
                   std::to_string(ds.kv_heads) + " KV heads x D=" + std::to_string(ds.head_dim) + ", " + ds.k_dtype +
                   ")";
  return true;
}

// The whole program; returns the exit code (exit_ok, exit_error or
// exit_usage). A worker thread that cannot be started or memory that runs
// out ends the run with a one-line error and exit_error.
// Defined in src/app.cpp (the library kvtile_eval_core).
int run_app(const app_options& o, std::ostream& out, std::ostream& errs, eval_result* result_out = nullptr);

}  // namespace kvtile_eval
