// tools/kvtile-eval/src/app.cpp: run_app (app.hpp), the whole program but
// the command line (main.cpp).
#include "../app.hpp"

namespace kvtile_eval {

namespace detail {
namespace {
int run_app_unguarded(const app_options& o, std::ostream& out, std::ostream& errs, eval_result* result_out) {
  if (o.device != "cpu" && o.device != "cuda") {
    errs << "kvtile-eval: unknown --device '" << printable(o.device) << "' (cpu or cuda)\n";
    return exit_usage;
  }
  eval_options eo;
  std::string err;
  if (!check_options(o, err)) {
    errs << "kvtile-eval: " << err << "\n";
    return exit_usage;
  }
  eo.use_device = o.device == "cuda" || o.compare_devices;
  eo.compare_devices = o.compare_devices;
  if (eo.use_device && !device_available(err)) {
    errs << "kvtile-eval: " << (o.compare_devices ? "--compare-devices" : "--device cuda") << ": " << err
         << "; use --device cpu\n";
    return exit_error;
  }
  if (!select_methods(o.methods, eo.methods, err) || !add_iteration_variants(o.sinkhorn_iterations, eo.methods, err)) {
    errs << "kvtile-eval: " << err << "\n";
    return exit_usage;
  }
  for (double b : o.budgets)
    if (!(b > 0)) {
      errs << "kvtile-eval: budgets must be positive fractions (e.g. 0.05 for 5%)\n";
      return exit_usage;
    }
  eo.threads = o.threads;
  eo.queries = o.queries_per_layer;  // capped below once the dataset's positions are known
  eo.context_queries = o.context_queries;
  eo.sample_seed = o.sample_seed;
  eo.fp16_own_tile = o.fp16_own_tile;
  eo.fp16_sink_tile = o.fp16_sink_tile;
  const bool show = o.progress == 1 || (o.progress == -1 && !o.quiet && stderr_is_terminal());
  detail::progress_meter meter(show);
  eo.progress = [&](std::size_t d, std::size_t t, const std::string& w) { meter(d, t, w); };

  const bool generated = o.keys.empty() && o.values.empty();
  if (generated &&
      !check_memory(estimate_run_memory(o, eo.methods.size(), o.gen.layers, o.gen.tokens, o.gen.kv_heads,
                                        o.gen.q_heads, o.gen.head_dim, false),
                    o.max_memory_gib, err)) {
    errs << "kvtile-eval: " << err << "\n";
    return exit_usage;
  }
  dataset ds;
  meter(0, 1, "loading");
  if (!load_inputs(o, ds, err)) {
    meter.finish();
    errs << "kvtile-eval: " << err << "\n";
    return exit_error;
  }
  if (!generated &&
      !check_memory(estimate_run_memory(o, eo.methods.size(), ds.layers, ds.tokens, ds.kv_heads, ds.q_heads,
                                        ds.head_dim, ds.qsrc == query_source::file),
                    o.max_memory_gib, err)) {
    meter.finish();
    errs << "kvtile-eval: " << err << "\n";
    return exit_usage;
  }
  // More (position, KV head) pairs than exist measure nothing new: cap them.
  const long long pairs = static_cast<long long>(ds.tokens) * ds.kv_heads;
  if (eo.queries > pairs) {
    if (!o.quiet)
      errs << "kvtile-eval: note: --queries-per-layer " << eo.queries << " is more than the " << pairs
           << " (position, KV head) pairs of a layer; using " << pairs << "\n";
    eo.queries = static_cast<int>(pairs);
  }
  if (eo.context_queries > pairs) eo.context_queries = static_cast<int>(pairs);
  if (ds.qsrc == query_source::keys_proxy && !o.quiet)
    errs << "kvtile-eval: note: no --queries given; the keys serve as queries (a proxy: real queries attend "
            "differently)\n";
  if (ds.tokens < 128 && !o.quiet)
    errs << "kvtile-eval: warning: " << ds.tokens
         << " tokens: fewer than one 128-token tile, most methods quantize nothing\n";
  eval_result r;
  if (!evaluate(ds, eo, r, err)) {
    meter.finish();
    errs << "kvtile-eval: " << err << "\n";
    return exit_error;
  }
  meter.finish();
  r.sample_seed = o.sample_seed;
  r.generated = generated;
  r.generator_seed = o.gen.seed;
  const ranking k = rank_methods(r, o.budgets);
  if (o.table) print_table(r, k, out);
  int rc = 0;
  if (eo.use_device && !o.quiet) {
    std::string host_only;
    for (const auto& m : r.methods)
      if (m.device != "cuda") host_only += (host_only.empty() ? "" : ", ") + m.spec.name();
    if (!host_only.empty())
      errs << "kvtile-eval: note: --device cuda: no GPU codec for " << host_only << "; they ran on the host\n";
  }
  if (eo.compare_devices) {
    std::size_t tiles = 0, bad = 0, methods = 0;
    for (const auto& m : r.methods)
      if (m.compared) {
        ++methods;
        tiles += m.compared_tiles;
        bad += m.mismatched_tiles;
      }
    for (const auto& m : r.methods)
      if (m.compared && m.mismatched_tiles)
        out << "  " << m.spec.name() << ": " << m.mismatched_tiles << " of " << m.compared_tiles
            << " tiles differ (first: " << m.compare_note << ")\n";
    out << "device vs host: " << tiles << " tiles, " << bad << " mismatches (" << methods
        << " methods; per (tile, KV head): record bytes and decoded K/V bits, a failure on one side only: every tile) -> "
        << (bad ? "FAIL" : "PASS") << "\n";
    if (bad) rc = exit_error;
  }
  for (const auto& m : r.methods)
    if (!m.ok && !o.quiet) errs << "kvtile-eval: warning: " << m.spec.name() << " failed: " << m.error << "\n";
  if (!o.json.empty() && !write_json(r, k, o.json, err)) {
    errs << "kvtile-eval: " << err << "\n";
    rc = exit_error;
  }
  if (!o.csv.empty() && !write_csv(r, k, o.csv, err)) {
    errs << "kvtile-eval: " << err << "\n";
    rc = exit_error;
  }
  if (!o.plot.empty() && r.queries_per_layer == 0) {
    if (!o.quiet) errs << "kvtile-eval: warning: no queries sampled (--queries-per-layer 0); plot " << o.plot
                       << " skipped\n";
  } else if (!o.plot.empty()) {
    std::string msg;
    const plot_status ps = write_plot(r, k, o.plot, msg);
    if (ps == plot_status::written && !o.quiet) errs << "kvtile-eval: wrote the Pareto plot " << o.plot << "\n";
    if (ps == plot_status::no_gnuplot) {
      errs << "kvtile-eval: warning: " << msg << "\n";
    } else if (ps == plot_status::failed) {
      errs << "kvtile-eval: " << msg << "\n";
      rc = exit_error;
    }
  }
  if (result_out) *result_out = std::move(r);
  return rc;
}
}  // namespace
}  // namespace detail

// The whole program; returns the exit code (exit_ok, exit_error or
// exit_usage). A worker thread that cannot be started or memory that runs
// out ends the run with a one-line error and exit_error.
int run_app(const app_options& o, std::ostream& out, std::ostream& errs, eval_result* result_out) {
  try {
    return detail::run_app_unguarded(o, out, errs, result_out);
  } catch (const thread_start_error& e) {
    errs << "kvtile-eval: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    errs << "kvtile-eval: out of memory (lower --max-memory to be stopped before starting, or use fewer tokens, "
            "layers or queries)\n";
  }
  return exit_error;
}

}  // namespace kvtile_eval
