// tools/kvtile-eval/limits.hpp: the sizes kvtile-eval accepts, checked before
// anything is allocated.
//
// Every option has a range (docs/kvtile-eval.md, "Limits"), and the memory a
// run will hold at its peak is estimated from the shape and the options
// (estimate_memory) and compared with a budget (`--max-memory`, default 3/4
// of the machine's physical memory) before the generator or the evaluation allocates. The estimate
// counts what evaluate() holds at once: the K/V (and file queries) as float,
// one layer's head-major buffers, the per-token errors kept for the overall
// scope, the sampled queries' reference softmax and output, and the
// per-thread scratch and codec workspaces.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "tensor.hpp"
#include "thread_pool.hpp"

namespace kvtile_eval {

inline constexpr int max_layers = 1024;
inline constexpr int max_gen_tokens = 1 << 22;  // generator; files: bounded by the memory budget
inline constexpr int max_kv_heads = 256;
inline constexpr int max_q_heads = 4096;
inline constexpr int max_queries_per_layer = 1 << 20;
inline constexpr int max_context_queries = 1 << 16;
inline constexpr double max_outlier_scale = 100.0;  // --gen-outlier-scale (x100: key outlier means up to 4000)
// The default --max-memory: 3/4 of the machine's physical memory (sysconf),
// or 16 GiB where that cannot be read.
inline double default_max_memory_gib() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return 0.75 * static_cast<double>(pages) * static_cast<double>(page) / (1024.0 * 1024 * 1024);
#endif
  return 16.0;
}
inline constexpr double max_memory_gib_limit = 1 << 20;  // the largest --max-memory accepted (1 PiB)

// What a run holds at its peak (bytes, as double: products of the limits
// above overflow no double). file_queries: the queries come from a file
// (held in memory); otherwise they are generated or are the keys.
struct memory_estimate {
  double dataset = 0, layer = 0, per_token = 0, samples = 0, threads = 0;
  double total() const { return dataset + layer + per_token + samples + threads; }
  std::string describe() const {
    return format_bytes(total()) + " (K/V " + format_bytes(dataset) + ", layer buffers " + format_bytes(layer) +
           ", per-token errors " + format_bytes(per_token) + ", sampled queries " + format_bytes(samples) +
           ", per-thread scratch " + format_bytes(threads) + ")";
  }
};

inline memory_estimate estimate_memory(int layers, int tokens, int kv_heads, int q_heads, int head_dim,
                                       bool file_queries, int threads, int queries, int context_queries,
                                       std::size_t methods, bool compare_devices) {
  memory_estimate m;
  const double L = layers, T = tokens, H = kv_heads, D = head_dim;
  const double group = kv_heads > 0 ? static_cast<double>(q_heads) / kv_heads : 1.0;
  const double f = sizeof(float), d = sizeof(double);
  m.dataset = 2 * L * T * H * D * f + (file_queries ? L * T * q_heads * D * f : 0.0);
  m.layer = (compare_devices ? 6 : 4) * T * H * D * f + T * H * (6 * d + 2 * f);
  m.per_token = static_cast<double>(methods) * L * T * H * 2 * f;
  // Reference softmax (group x (pos + 1) doubles), output and query per
  // sample; main positions are stratified over [0, T), context ones sit just
  // below each checkpoint (1K, 4K, ... and T).
  double ctx_positions = 0, checkpoints = 0;
  for (double c = 1024; c < T; c *= 4) {
    ctx_positions += c;
    ++checkpoints;
  }
  ctx_positions += T;
  ++checkpoints;
  const double rows = queries * (T / 2 + 1) + context_queries * ctx_positions;
  const double count = queries + context_queries * checkpoints;
  m.samples = group * (rows * d + count * (D * (f + d) + 2 * d));
  const double nthreads = threads > 0 ? threads : default_threads();
  m.threads = nthreads * (group * ((T + D) * f + T * d + D * d) + 2.0 * (1 << 20));  // + codec workspace
  return m;
}

// False (with a one-line message) when the estimate exceeds max_gib.
inline bool check_memory(const memory_estimate& m, double max_gib, std::string& err) {
  const double limit = max_gib * 1024.0 * 1024.0 * 1024.0;
  if (m.total() <= limit) return true;
  err = "this run would need about " + m.describe() + ", above the --max-memory budget of " + format_bytes(limit) +
        "; use fewer tokens (--max-tokens, --gen-tokens), layers, heads or queries, or raise --max-memory";
  return false;
}

}  // namespace kvtile_eval
