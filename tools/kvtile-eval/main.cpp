// kvtile-eval: measures every kvtile preset and baseline on your own K/V dumps
// (or on the embedded LLM-like generator) and writes a table, JSON, CSV and a
// Pareto plot. docs/kvtile-eval.md is the manual.
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "app.hpp"

namespace {
// A 64-bit unsigned seed written in decimal: no sign, no more than 2^64 - 1
// (CLI11 alone would wrap -1 and saturate 2^64 to 2^64 - 1 silently).
const CLI::Validator uint64_decimal(
    [](std::string& s) -> std::string {
      const std::string max = "18446744073709551615";
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
        return "must be a decimal integer in [0, " + max + "] (got '" + s + "')";
      const std::size_t nz = s.find_first_not_of('0');
      const std::string digits = nz == std::string::npos ? "0" : s.substr(nz);
      if (digits.size() > max.size() || (digits.size() == max.size() && digits > max))
        return "must be at most " + max + " (got " + s + ")";
      return std::string();
    },
    "UINT64");
}  // namespace

int main(int argc, char** argv) {
  using namespace kvtile_eval;
  app_options o;
  CLI::App app{
      "kvtile-eval: measure kvtile's presets and baselines on K/V dumps (.npy float16/float32, .safetensors "
      "F16/BF16/F32; shape [tokens][kv_heads][head_dim] or [layers][tokens][kv_heads][head_dim]). With no files, "
      "an embedded LLM-like generator is used (docs/kvtile-eval.md)."};
  app.get_formatter()->column_width(34);

  auto* in = app.add_option_group("Input");
  in->add_option("-k,--keys", o.keys, "keys file (.npy or .safetensors)");
  in->add_option("-v,--values", o.values, "values file (.npy or .safetensors)");
  in->add_option("-q,--queries", o.queries,
                 "queries file, [tokens][q_heads][head_dim] (or with layers); without it the keys serve as queries");
  in->add_option("--keys-tensor", o.keys_tensor, "tensor name in a .safetensors keys file");
  in->add_option("--values-tensor", o.values_tensor, "tensor name in a .safetensors values file");
  in->add_option("--queries-tensor", o.queries_tensor, "tensor name in a .safetensors queries file");
  in->add_option("--max-tokens", o.max_tokens, "use only the first N tokens of the dump (0: all)")
      ->check(CLI::Range(0, 1 << 30));

  auto* gen = app.add_option_group("Generator (when no files are given)");
  gen->add_option("--gen-tokens", o.gen.tokens, "tokens")->capture_default_str()->check(CLI::Range(1, max_gen_tokens));
  gen->add_option("--gen-layers", o.gen.layers, "layers")->capture_default_str()->check(CLI::Range(1, max_layers));
  gen->add_option("--gen-kv-heads", o.gen.kv_heads, "KV heads")->capture_default_str()->check(CLI::Range(1, max_kv_heads));
  gen->add_option("--gen-q-heads", o.gen.q_heads, "query heads (a multiple of the KV heads)")
      ->capture_default_str()
      ->check(CLI::Range(1, max_q_heads));
  gen->add_option("--gen-head-dim", o.gen.head_dim, "head_dim (" + kvtile_eval::head_dim_list() + ")")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<int>(std::begin(kvtile::head_dims), std::end(kvtile::head_dims))));
  gen->add_option("--seed", o.gen.seed, "generator seed")->capture_default_str()->check(uint64_decimal);
  gen->add_option("--gen-outlier-scale", o.outlier_scale,
                  "multiplies the key outlier channels' |mean| (default 20-40; 3: 60-120)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, max_outlier_scale));

  auto* ev = app.add_option_group("Evaluation");
  ev->add_option("-m,--methods", o.methods,
                 "comma-separated: all, presets, baselines, kvarn, kvarn-0.1 (kvtile 0.1's rounding, Sinkhorn 8, fp16 scales: "
                 "the original KVarN record), kivi, rotate_rtn, token_rtn, a shape (k4v2_g128, "
                 "k4v2), fp8, fp16, a full name; '+' intersects (kivi+k2v2)")
      ->capture_default_str();
  ev->add_option("--sinkhorn-iterations", o.sinkhorn_iterations,
                 "comma-separated Sinkhorn iteration counts from {0,1,2,4,8,16}: adds each selected kvarn method "
                 "k2v2_g128, k4v2_g128 or k4v4_g128 with fp8 scales at those counts (named e.g. 'k2v2_g128/fp8 "
                 "it4'; the preset itself runs " + std::to_string(kvtile_eval::preset_iterations) + ")")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<int>(std::begin(kvtile_eval::sinkhorn_iteration_choices),
                                             std::end(kvtile_eval::sinkhorn_iteration_choices))));
  ev->add_option("-j,--threads", o.threads, "worker threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, max_threads));
  ev->add_option("--queries-per-layer", o.queries_per_layer,
                 "sampled (position, KV head) pairs per layer; all query heads of the KV group attend (0: no "
                 "attention metrics)")
      ->capture_default_str()
      ->check(CLI::Range(0, max_queries_per_layer));
  ev->add_option("--context-queries", o.context_queries, "sampled (position, KV head) pairs per context checkpoint and layer")
      ->capture_default_str()
      ->check(CLI::Range(0, max_context_queries));
  ev->add_option("--max-memory", o.max_memory_gib,
                 "refuse a run whose estimated peak memory is above this many GiB (checked before allocating)")
      ->capture_default_str();
  ev->add_option("--sample-seed", o.sample_seed, "seed of the query sampling")->capture_default_str()->check(uint64_decimal);
  bool own_tile = false, sink_tile = false, all_quantized = false;
  ev->add_flag("--fp16-own-tile", own_tile,
               "a query sees its own tile's keys and values in fp16 (an engine's tail) and only the tiles before "
               "it quantized (on by default; with --all-quantized, turns it back on)");
  ev->add_flag("--fp16-sink-tile", sink_tile,
               "queries see the first tile (the attention sink) in fp16, as the paged cache's sink (on by default; "
               "with --all-quantized, turns it back on). Both: the decode semantics of tools/kv-fidelity");
  ev->add_flag("--all-quantized", all_quantized,
               "every complete tile up to a query quantized, the sink and the query's own tile included (the "
               "codec-only view of kvtile 0.2's first tables; harsher than a decode step)");
  ev->add_option("--budgets", o.budgets, "attention-error budgets (fractions) for the 'best' marks")
      ->capture_default_str()
      ->delimiter(',');
  ev->add_option("--device", o.device, "cpu, or cuda: encode/decode the tiles with the GPU codec (needs a CUDA build and a GPU)")
      ->capture_default_str();
  ev->add_flag("--compare-devices", o.compare_devices,
               "run the host and the GPU codec and check that records and decoded K/V are bit-identical "
               "(implies --device cuda; exit 1 on a mismatch)");

  auto* outg = app.add_option_group("Output");
  CLI::Option* json_opt = outg->add_option("--json", o.json, "write all results as JSON");
  CLI::Option* csv_opt = outg->add_option("--csv", o.csv, "write all results as CSV (one row per method and scope)");
  o.plot = "kvtile-eval.png";
  CLI::Option* plot_opt = outg->add_option("--plot", o.plot,
                   "write the Pareto plot with gnuplot: the name's extension picks .png (pngcairo) or .svg; by "
                   "default kvtile-eval.png in the working directory (stderr names the file written)")
      ->capture_default_str();
  bool no_plot = false;
  outg->add_flag("--no-plot", no_plot, "do not write the plot");
  bool no_table = false, no_progress = false, progress = false;
  outg->add_flag("--no-table", no_table, "do not print the table");
  outg->add_flag("--quiet", o.quiet, "no notes, warnings or progress on stderr");
  outg->add_flag("--progress", progress, "always show progress on stderr");
  outg->add_flag("--no-progress", no_progress, "never show progress");

  app.footer(
      "Exit codes: 0 the run finished (methods that failed are listed in the table); 1 an unreadable or invalid "
      "input, an evaluation, output or device error, or a --compare-devices mismatch; 2 a bad option or value, or a "
      "run above the limits (docs/kvtile-eval.md, 'Limits').");
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "kvtile-eval: " + std::string(e.what()) + " (see --help)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version or the error
    return rc == 0 ? kvtile_eval::exit_ok : kvtile_eval::exit_usage;
  }
  o.table = !no_table;
  o.fp16_own_tile = !all_quantized || own_tile;
  o.fp16_sink_tile = !all_quantized || sink_tile;
  for (const auto& [name, opt] : {std::pair<const char*, CLI::Option*>{"--json", json_opt}, {"--csv", csv_opt},
                                  {"--plot", plot_opt}})
    if (opt->count() > 0) o.outputs_named.insert(name);
  if (no_plot) {
    o.plot.clear();
    o.outputs_named.erase("--plot");
  }
  o.progress = no_progress ? 0 : progress ? 1 : -1;
  try {
    return kvtile_eval::run_app(o, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "kvtile-eval: error: " << e.what() << "\n";
    return kvtile_eval::exit_error;
  }
}
