// bench/device/bench_io.hpp: the device benchmarks' options (CLI11) and JSON
// results (nlohmann_json), compiled once by the host compiler (bench_io.cpp)
// rather than in each CUDA translation unit. Options are read before the GPU
// is looked for, so a bad one fails anywhere (CTest label bench-args).
#pragma once

#include <string>
#include <vector>

namespace kvtile_bench {

// parse(): -1 to go on, otherwise the exit status (0 after --help; CLI11's for a bad option, message printed).

struct attention_options {
  std::string json;    // --json FILE: every row
  std::string shape;   // --shape: only this shape (B,Hq,Hkv,D,tokens or a ragged batch's name)
  std::string kernel;  // --kernel: only the rows of this kernel name
  int iters = 60;      // --iters, at least 50
  bool quick = false;
  bool policies = false;
};
int parse(int argc, char** argv, attention_options& o);

struct attention_row {
  std::string kernel, lengths;  // lengths: "uniform" or the ragged batch's name
  int batch, q_heads, kv_heads, head_dim, tokens, chunks;
  long long total_tokens;
  double us, bytes, gbs, ceiling_fraction, speedup_vs_fp16_baseline;
  bool small_batch_sweep;
};
// false when the file cannot be written
bool write_json(const std::string& path, const std::string& device, double read_ceiling_gbs, int iters,
                const std::vector<attention_row>& rows);

struct codec_options {
  std::string out = "bench/results";  // --out DIR
  std::string stem;                   // --stem NAME (empty: <date>-gpu-codec)
  std::string command = "gpu_codec";  // --command: how the run was made
  int iters = 15;                     // --iters, at least 1
  bool decode_only = false, encode_only = false;
};
int parse(int argc, char** argv, codec_options& o);

struct codec_row {
  std::string name, kind;
  double median_us, gbps, ratio_to_copy;
  std::string bytes;  // what the GB/s count
};
struct codec_run {
  std::string date, gpu, command;
  int sms, l2_bytes, iterations;
  double copy_gbps;
};
bool write_json(const std::string& path, const codec_run& run, const std::vector<codec_row>& rows);

}  // namespace kvtile_bench
