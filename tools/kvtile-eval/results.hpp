// tools/kvtile-eval/results.hpp: what an evaluation produces (per method:
// K/V and attention metrics per layer and overall).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "methods.hpp"

namespace kvtile_eval {

struct side_metrics {
  double rel_mse = 0, snr_db = 0, cosine = 1, token_p95 = 0, token_worst5 = 0;
};
struct attention_metrics {
  std::size_t samples = 0;
  double rel_err_mean = 0, rel_err_p95 = 0, rel_err_worst5 = 0;
  double kl_mean = 0, kl_worst5 = 0, kl_worst5_share = 0;
};
struct scope_metrics {
  side_metrics k, v;
  attention_metrics attn;
  std::vector<attention_metrics> context;  // one per checkpoint
};

struct method_result {
  method_spec spec;
  bool ok = true;
  std::string error;
  double bits = 0;            // bits per element of a quantized tile (K and V, all metadata)
  double effective_bits = 0;  // over the whole dump, the fp16 tail included
  double capacity = 0;        // 16 / bits: tokens held versus an fp16 cache
  std::size_t record_bytes = 0;
  double seconds = 0;
  std::string device = "cpu";  // where the tiles were encoded and decoded ("cuda": the GPU codec)
  // compare_devices: (tile, KV head) items compared, and those that differ
  bool compared = false;
  std::size_t compared_tiles = 0, mismatched_tiles = 0;
  std::string compare_note;  // first difference, if any
  std::vector<scope_metrics> layers;
  scope_metrics all;
};

struct eval_result {
  std::string description;
  int layers = 0, tokens = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  query_source qsrc = query_source::keys_proxy;
  std::vector<int> context_positions;
  int queries_per_layer = 0, context_queries = 0;
  bool fp16_own_tile = false, fp16_sink_tile = false;  // eval_options'
  std::uint64_t sample_seed = 0;     // the query sampling's seed
  bool generated = false;            // the K/V came from the embedded generator
  std::uint64_t generator_seed = 0;  // its seed (when generated)
  int threads = 1;
  double seconds = 0;
  std::string device = "cpu";  // "cuda" when use_device
  bool compared = false;       // compare_devices ran
  std::vector<method_result> methods;
};

}  // namespace kvtile_eval
