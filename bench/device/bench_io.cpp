// bench/device/bench_io.cpp: see bench_io.hpp.
#include "bench_io.hpp"

#include <cmath>
#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace kvtile_bench {
namespace {

// x to `digits` decimals, for the JSON rows
double rounded(double x, int digits) {
  const double m = std::pow(10.0, digits);
  return std::round(x * m) / m;
}

int run_parser(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

bool write(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  return f.good();
}

}  // namespace

int parse(int argc, char** argv, attention_options& o) {
  CLI::App app{"Paged decode attention on the quantized cache against the fp16 baseline and a read ceiling"};
  app.add_option("--json", o.json, "Write every row to FILE (JSON)")->option_text("FILE");
  app.add_option("--iters", o.iters, "CUDA-event timings per row, median reported")
      ->check(CLI::Range(50, 100000))
      ->capture_default_str();
  app.add_flag("--quick", o.quick, "Batch 1 and 16 and the ragged batches, k4v2_g128 only");
  app.add_flag("--policies", o.policies, "Also the other GPUs' policies (forced) at D = 128");
  app.add_option("--shape", o.shape,
                 "Only this shape: B,Hq,Hkv,D,tokens of the list, or ragged32 / ragged64 (for a profiler)");
  app.add_option("--kernel", o.kernel, "Only the rows of this kernel name (for a profiler)");
  return run_parser(app, argc, argv);
}

bool write_json(const std::string& path, const std::string& device, double read_ceiling_gbs, int iters,
                const std::vector<attention_row>& rows) {
  nlohmann::ordered_json j;
  j["device"] = device;
  j["read_ceiling_gbs"] = rounded(read_ceiling_gbs, 1);
  j["iterations"] = iters;
  j["results"] = nlohmann::ordered_json::array();
  for (const attention_row& r : rows)
    j["results"].push_back({{"kernel", r.kernel},
                            {"batch", r.batch},
                            {"q_heads", r.q_heads},
                            {"kv_heads", r.kv_heads},
                            {"head_dim", r.head_dim},
                            {"tokens", r.tokens},
                            {"lengths", r.lengths},
                            {"total_tokens", r.total_tokens},
                            {"chunks", r.chunks},
                            {"us", rounded(r.us, 3)},
                            {"bytes", rounded(r.bytes, 0)},
                            {"gbs", rounded(r.gbs, 1)},
                            {"ceiling_fraction", rounded(r.ceiling_fraction, 4)},
                            {"speedup_vs_fp16_baseline", rounded(r.speedup_vs_fp16_baseline, 3)},
                            {"small_batch_sweep", r.small_batch_sweep}});
  return write(path, j);
}

int parse(int argc, char** argv, codec_options& o) {
  CLI::App app{"Throughput of the device codec and paged kernels against a copy ceiling"};
  app.add_option("--out", o.out, "Directory of the JSON and Markdown results")->capture_default_str();
  app.add_option("--stem", o.stem, "File name of the results, without extension (default: <date>-gpu-codec)");
  app.add_option("--iters", o.iters, "CUDA-event timings per row, median reported")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--command", o.command, "How the run was made, for the results")->capture_default_str();
  CLI::Option* dec = app.add_flag("--decode-only", o.decode_only, "Copy ceiling and decode (prefill untimed)");
  app.add_flag("--encode-only", o.encode_only, "Copy ceiling and the prefill rows")->excludes(dec);
  return run_parser(app, argc, argv);
}

bool write_json(const std::string& path, const codec_run& run, const std::vector<codec_row>& rows) {
  nlohmann::ordered_json j;
  j["date"] = run.date;
  j["gpu"] = run.gpu;
  j["sms"] = run.sms;
  j["l2_bytes"] = run.l2_bytes;
  j["command"] = run.command;
  j["iterations"] = run.iterations;
  j["copy_gbps"] = rounded(run.copy_gbps, 1);
  j["results"] = nlohmann::ordered_json::array();
  for (const codec_row& r : rows)
    j["results"].push_back({{"name", r.name},
                            {"kind", r.kind},
                            {"median_us", rounded(r.median_us, 3)},
                            {"gbps", rounded(r.gbps, 2)},
                            {"ratio_to_copy", rounded(r.ratio_to_copy, 4)},
                            {"bytes", r.bytes}});
  return write(path, j);
}

}  // namespace kvtile_bench
