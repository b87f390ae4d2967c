// tools/kvtile-eval/evaluate.hpp: the evaluation loop.
//
// For every method (methods.hpp) and every layer, the layer is quantized
// (layer_codec.hpp) and compared with the original:
//  * K and V errors: relative MSE, SNR, mean per-token cosine, per-token
//    relative error (p95 and the mean of the worst 5%);
//  * attention: for sampled (position, query head) pairs, causal softmax
//    attention over all keys up to the position with the original and the
//    reconstructed K/V: relative output error and KL(p || p^); also at the
//    context-length checkpoints 1K, 4K, 16K, ... and the dump length.
// With eval_options::use_device (`--device cuda`), the tiles of a layer are
// encoded and decoded on the GPU instead (one launch per method and layer,
// the layer uploaded once); methods without a device codec (token_rtn) run on
// the host. compare_devices runs both and counts the (tile, KV head) items
// whose status, record or decoded K/V bits differ. Work is split over
// thread_pool.hpp's workers; every sum is reduced in a fixed order, so
// results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "dataset.hpp"
#include "device_codec.hpp"
#include "layer_codec.hpp"
#include "limits.hpp"
#include "methods.hpp"
#include "metrics.hpp"
#include "results.hpp"
#include "sinkhorn_memo.hpp"
#include "thread_pool.hpp"

namespace kvtile_eval {

struct eval_options {
  int threads = 0;              // 0: hardware concurrency
  int queries = 64;             // sampled (position, KV head) pairs per layer; all query heads of the group attend
  int context_queries = 16;     // the same, per context checkpoint and layer
  std::uint64_t sample_seed = 1;
  // Decode semantics (tools/kv-fidelity's): a query attends to its own
  // tile's tokens in fp16 (an engine's tail) and to the quantized tiles
  // before it; fp16_sink_tile also keeps the first tile in fp16 (the paged
  // cache's sink). Off: every complete tile up to the query is quantized.
  bool fp16_own_tile = false;
  bool fp16_sink_tile = false;
  std::vector<method_spec> methods = all_methods();
  // GPU codec (the caller checks device_available first); compare_devices
  // also runs the host codec and compares (implies use_device).
  bool use_device = false;
  bool compare_devices = false;
  // progress(done units, total units, current method name)
  std::function<void(std::size_t, std::size_t, const std::string&)> progress;
};

// 1K, 4K, 16K, ... below the dump length, then the dump length.
inline std::vector<int> context_positions(int tokens) {
  std::vector<int> r;
  for (long long c = 1024; c < tokens; c *= 4) r.push_back(static_cast<int>(c));
  r.push_back(tokens);
  return r;
}

namespace detail {

// One sampled (position, KV head): all query heads of the group attend.
struct sample {
  int pos = 0, kv_head = 0, group = -1;  // group: -1 main sample, else checkpoint index
  std::vector<float> q;                  // g x D
  std::vector<double> logp, out;         // reference: g x (pos + 1), g x D
};

inline void token_stats(const float* x, const float* y, int D, double& err2, double& sig2, double& cos,
                        float& rel) {
  error_sums s;
  s.add(x, y, static_cast<std::size_t>(D));
  err2 = s.err2;
  sig2 = s.sig2;
  cos = cosine(x, y, static_cast<std::size_t>(D));
  rel = static_cast<float>(relative_l2(x, y, static_cast<std::size_t>(D)));
}

inline side_metrics side_summary(const std::vector<double>& err2, const std::vector<double>& sig2,
                                 const std::vector<double>& cos, const std::vector<float>& tok) {
  side_metrics s;
  error_sums e;
  double c = 0;
  for (std::size_t i = 0; i < err2.size(); ++i) {
    e.err2 += err2[i];
    e.sig2 += sig2[i];
    c += cos[i];
  }
  s.rel_mse = e.relative_mse();
  s.snr_db = snr_db(s.rel_mse);
  s.cosine = cos.empty() ? 1.0 : c / static_cast<double>(cos.size());
  s.token_p95 = percentile(tok, 95.0);
  s.token_worst5 = tail_mean(tok, 0.05);
  return s;
}

inline attention_metrics attention_summary(const std::vector<double>& rel, const std::vector<double>& kl) {
  attention_metrics a;
  a.samples = rel.size();
  if (rel.empty()) return a;
  a.rel_err_mean = mean(rel);
  a.rel_err_p95 = percentile(rel, 95.0);
  a.rel_err_worst5 = tail_mean(rel, 0.05);
  a.kl_mean = mean(kl);
  a.kl_worst5 = tail_mean(kl, 0.05);
  a.kl_worst5_share = tail_share(kl, 0.05);
  return a;
}

// Accumulates what the overall ("all layers") scope needs.
struct method_accumulator {
  std::vector<double> k_err2, k_sig2, k_cos, v_err2, v_sig2, v_cos;  // per layer sums (fixed order)
  std::vector<float> k_tok, v_tok;
  std::vector<double> rel, kl;
  std::vector<std::vector<double>> ctx_rel, ctx_kl;
  double effective_bits_num = 0, effective_bits_den = 0;
};

}  // namespace detail

// Runs every method on every layer. Returns false (with err) only for invalid
// options; a method that fails (e.g. a range the packing cannot store) is
// reported in its result (ok = false, error) and the others still run.
// Defined in src/evaluate.cpp (the library kvtile_eval_core); the codecs it
// runs are compiled there once (src/host_codec_d*.cpp).
bool evaluate(const dataset& ds, const eval_options& opt, eval_result& res, std::string& err);

}  // namespace kvtile_eval
