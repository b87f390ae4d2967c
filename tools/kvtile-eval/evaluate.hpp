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
// (A template only so that translation units which include this header but
// never call evaluate() do not compile dispatch's ~100 codec instantiations.)
template <int Unused = 0>
bool evaluate(const dataset& ds, const eval_options& opt, eval_result& res, std::string& err) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  if (ds.layers <= 0 || ds.tokens <= 0 || ds.kv_heads <= 0 || ds.q_heads <= 0 || ds.q_heads % ds.kv_heads != 0) {
    err = "empty or inconsistent dataset";
    return false;
  }
  if (opt.queries < 0 || opt.queries > max_queries_per_layer || opt.context_queries < 0 ||
      opt.context_queries > max_context_queries) {
    err = "query counts must be in [0, " + std::to_string(max_queries_per_layer) + "] per layer and [0, " +
          std::to_string(max_context_queries) + "] per context checkpoint";
    return false;
  }
  if (opt.threads < 0 || opt.threads > max_threads) {
    err = "threads must be in [0, " + std::to_string(max_threads) + "]";
    return false;
  }
  const int threads = opt.threads > 0 ? opt.threads : default_threads();
  const int D = ds.head_dim, T = ds.tokens, H = ds.kv_heads;
  const int group = ds.q_heads / ds.kv_heads;
  res = eval_result{};
  res.description = ds.description;
  res.layers = ds.layers;
  res.tokens = T;
  res.kv_heads = H;
  res.q_heads = ds.q_heads;
  res.head_dim = D;
  res.qsrc = ds.qsrc;
  res.context_positions = context_positions(T);
  res.queries_per_layer = opt.queries;
  res.context_queries = opt.context_queries;
  res.fp16_own_tile = opt.fp16_own_tile;
  res.fp16_sink_tile = opt.fp16_sink_tile;
  res.threads = threads;
  const std::size_t nctx = res.context_positions.size();
  const std::size_t nm = opt.methods.size();
  res.methods.resize(nm);
  std::vector<detail::method_accumulator> acc(nm);
  for (std::size_t m = 0; m < nm; ++m) {
    res.methods[m].spec = opt.methods[m];
    res.methods[m].layers.resize(ds.layers);
    acc[m].ctx_rel.resize(nctx);
    acc[m].ctx_kl.resize(nctx);
  }

  const std::size_t layer_elems = static_cast<std::size_t>(T) * H * D;
  const std::size_t layer_rows = static_cast<std::size_t>(T) * H;
  detail::layer_buffers b;
  for (auto* v : {&b.ko, &b.vo, &b.kh, &b.vh}) v->resize(layer_elems);
  for (auto* v : {&b.k_err2, &b.k_sig2, &b.v_err2, &b.v_sig2, &b.k_cos, &b.v_cos}) v->resize(layer_rows);
  b.k_tok.resize(layer_rows);
  b.v_tok.resize(layer_rows);
  const bool use_device = opt.use_device || opt.compare_devices;
  std::unique_ptr<device_codec_session> session;
  if (use_device) {
    if (!device_available(err)) {
      err = "--device cuda: " + err;
      return false;
    }
    session.reset(new device_codec_session);
    res.device = "cuda";
    res.compared = opt.compare_devices;
    if (opt.compare_devices) {
      b.kh_host.resize(layer_elems);
      b.vh_host.resize(layer_elems);
    }
  }
  const std::size_t total_units = static_cast<std::size_t>(ds.layers) * (nm + 1);
  std::size_t done_units = 0;

  for (int l = 0; l < ds.layers; ++l) {
    if (opt.progress) opt.progress(done_units, total_units, "reference attention, layer " + std::to_string(l));
    // ---- head-major copy of the layer
    parallel_for(static_cast<std::size_t>(H), threads, [&](std::size_t h, int) {
      for (int t = 0; t < T; ++t) {
        std::copy(ds.key(l, t, static_cast<int>(h)), ds.key(l, t, static_cast<int>(h)) + D,
                  b.ko.begin() + static_cast<std::ptrdiff_t>(b.at(static_cast<int>(h), t, T, D)));
        std::copy(ds.value(l, t, static_cast<int>(h)), ds.value(l, t, static_cast<int>(h)) + D,
                  b.vo.begin() + static_cast<std::ptrdiff_t>(b.at(static_cast<int>(h), t, T, D)));
      }
    });
    // ---- samples and reference attention
    std::vector<detail::sample> samples;
    {
      detail::rng r(opt.sample_seed, 77, static_cast<std::uint64_t>(l), 0, 0);
      for (int i = 0; i < opt.queries; ++i) {
        detail::sample s;
        s.pos = std::min(T - 1, static_cast<int>((i + r.uniform()) * T / opt.queries));
        s.kv_head = static_cast<int>(r.uniform() * H) % H;
        samples.push_back(std::move(s));
      }
      for (std::size_t c = 0; c < nctx; ++c) {
        const int cp = res.context_positions[c];
        const int window = std::max(1, std::min(64, cp / 8));
        for (int i = 0; i < opt.context_queries; ++i) {
          detail::sample s;
          s.pos = cp - 1 - static_cast<int>(r.uniform() * window) % window;
          s.kv_head = static_cast<int>(r.uniform() * H) % H;
          s.group = static_cast<int>(c);
          samples.push_back(std::move(s));
        }
      }
    }
    std::vector<std::vector<float>> scratch(threads, std::vector<float>(static_cast<std::size_t>(group) * (T + D)));
    std::vector<std::vector<double>> lscratch(threads, std::vector<double>(static_cast<std::size_t>(group) * T));
    std::vector<std::vector<double>> oscratch(threads, std::vector<double>(static_cast<std::size_t>(group) * D));
    parallel_for(samples.size(), threads, [&](std::size_t i, int w) {
      detail::sample& s = samples[i];
      s.q.resize(static_cast<std::size_t>(group) * D);
      for (int j = 0; j < group; ++j) ds.query(l, s.pos, s.kv_head * group + j, s.q.data() + static_cast<std::size_t>(j) * D);
      s.logp.resize(static_cast<std::size_t>(group) * (s.pos + 1));
      s.out.resize(static_cast<std::size_t>(group) * D);
      attention_group(s.q.data(), group, b.ko.data() + b.at(s.kv_head, 0, T, D), b.vo.data() + b.at(s.kv_head, 0, T, D),
                      static_cast<std::size_t>(D), s.pos + 1, D, s.logp.data(), s.out.data(), scratch[w].data());
    });
    ++done_units;
    b.s_rel.assign(samples.size() * group, 0.0);
    b.s_kl.assign(samples.size() * group, 0.0);

    std::vector<sinkhorn_memo> memos;
    bool uploaded = false;  // this layer's K/V on the GPU (the first device method uploads them)
    for (std::size_t m = 0; m < nm; ++m) {
      const method_spec& spec = opt.methods[m];
      method_result& mr = res.methods[m];
      if (opt.progress) opt.progress(done_units, total_units, spec.name() + ", layer " + std::to_string(l));
      const auto t0 = clock::now();
      if (!mr.ok) {
        ++done_units;
        continue;
      }
      std::string merr;
      bool ok = true;
      if (spec.fam == family::token_rtn) {
        ok = detail::quantize_layer_token_rtn(ds, spec, threads, b, merr);
        mr.bits = (spec.key_bits + spec.value_bits) / 2.0 + 32.0 / D;
        mr.record_bytes = 0;
      } else {
        sinkhorn_memo* memo = nullptr;
        if (spec.has_sinkhorn()) {  // one Sinkhorn run per (tile, G, count)
          for (auto& mm : memos)
            if (mm.tile_tokens == spec.tile_tokens && mm.iterations == spec.iterations) memo = &mm;
          if (!memo) {
            memos.emplace_back();
            memo = &memos.back();
            memo->tile_tokens = spec.tile_tokens;
            memo->iterations = spec.iterations;
            const std::size_t n = static_cast<std::size_t>(T / spec.tile_tokens) * H;
            memo->keys.resize(n);
            memo->values.resize(n);
          }
        }
        kvtile::codec_params p;
        p.head_dim = D;
        p.tile_tokens = spec.tile_tokens;
        p.key_bits = spec.key_bits;
        p.value_bits = spec.value_bits;
        p.pack = spec.pack;
        p.algo = spec.fam == family::kivi ? kvtile::method::kivi
                 : spec.fam == family::rotate_rtn ? kvtile::method::rotate_rtn
                                                  : kvtile::method::kvarn;
        // The GPU codec runs dispatch(p)'s codecs only (presets at their own count, kivi, rotate_rtn).
        const bool on_device = use_device && dispatch_codec(spec) && device_supports(p);
        const bool on_host = !on_device || opt.compare_devices;
        std::vector<unsigned char> host_rec, dev_rec;
        const bool cmp = on_device && opt.compare_devices;
        const kvtile::status st = dispatch_method(spec, p, [&](auto tag) {
          using Codec = typename decltype(tag)::type;
          using Run = with_memo_t<Codec>;
          static_assert(Run::record_bytes == Codec::record_bytes, "memo must not change the record");
          mr.bits = Codec::bits_per_element;
          mr.record_bytes = Codec::record_bytes;
          if (on_host) ok = detail::quantize_layer<Run>(ds, l, memo, threads, b, merr, cmp ? &host_rec : nullptr);
        });
        if (st != kvtile::status::success) {
          ok = false;
          merr = std::string("unsupported configuration: ") + kvtile::to_string(st);
        } else if (on_device) {
          mr.device = "cuda";
          if (!uploaded) {
            std::string uerr;
            if (!session->upload(b.ko.data(), b.vo.data(), H, T, D, uerr)) {
              err = "--device cuda: " + uerr;
              return false;
            }
            uploaded = true;
          }
          if (cmp) {
            b.kh.swap(b.kh_host);
            b.vh.swap(b.vh_host);
          }
          const bool host_ok = ok;
          std::string derr;
          ok = detail::quantize_layer_device(ds, p, *session, b, cmp ? &dev_rec : nullptr, derr);
          if (cmp) {
            const std::size_t items = static_cast<std::size_t>(T / spec.tile_tokens) * H;
            mr.compared = true;
            mr.compared_tiles += items;
            if (host_ok && ok) {
              mr.mismatched_tiles +=
                  detail::compare_layer(ds, spec.tile_tokens, mr.record_bytes, b, host_rec, dev_rec, l, mr.compare_note);
            } else if (host_ok != ok) {
              mr.mismatched_tiles += items;
              if (mr.compare_note.empty())
                mr.compare_note = "layer " + std::to_string(l) + ": " +
                                  (ok ? "the host failed (" + merr + "), the GPU did not"
                                      : "the GPU failed (" + derr + "), the host did not");
            }
          }
          if (!ok) merr = derr.empty() ? merr : derr;
        }
      }
      if (!ok) {
        mr.ok = false;
        mr.error = merr;
        ++done_units;
        continue;
      }
      mr.capacity = mr.bits > 0 ? 16.0 / mr.bits : 0;
      // effective bits over the dump (tail tokens at 16 bits)
      {
        const double tq = static_cast<double>(T / spec.tile_tokens * spec.tile_tokens);
        acc[m].effective_bits_num += (tq * mr.bits + (T - tq) * 16.0) * H * D;
        acc[m].effective_bits_den += static_cast<double>(T) * H * D;
      }
      // ---- K/V per-token metrics (head-major order)
      parallel_for(layer_rows, threads, [&](std::size_t r, int) {
        const std::size_t off = r * D;
        detail::token_stats(b.ko.data() + off, b.kh.data() + off, D, b.k_err2[r], b.k_sig2[r], b.k_cos[r], b.k_tok[r]);
        detail::token_stats(b.vo.data() + off, b.vh.data() + off, D, b.v_err2[r], b.v_sig2[r], b.v_cos[r], b.v_tok[r]);
      });
      // ---- attention
      parallel_for(samples.size(), threads, [&](std::size_t i, int w) {
        const detail::sample& s = samples[i];
        const std::size_t n = static_cast<std::size_t>(s.pos) + 1;
        const std::size_t head = b.at(s.kv_head, 0, T, D);
        // quantized tokens: [lo, hi); the others from the original K/V
        const int lo = opt.fp16_sink_tile ? spec.tile_tokens : 0;
        const int hi = opt.fp16_own_tile ? s.pos / spec.tile_tokens * spec.tile_tokens : s.pos + 1;
        attention_group(s.q.data(), group, b.kh.data() + head, b.vh.data() + head, static_cast<std::size_t>(D),
                        s.pos + 1, D, lscratch[w].data(), oscratch[w].data(), scratch[w].data(), lo, hi,
                        b.ko.data() + head, b.vo.data() + head);
        for (int j = 0; j < group; ++j) {
          b.s_rel[i * group + j] = relative_l2(s.out.data() + static_cast<std::size_t>(j) * D,
                                               oscratch[w].data() + static_cast<std::size_t>(j) * D,
                                               static_cast<std::size_t>(D));
          b.s_kl[i * group + j] = kl_divergence(s.logp.data() + j * n, lscratch[w].data() + j * n, n);
        }
      });
      // ---- layer summary (fixed order)
      scope_metrics& sc = mr.layers[l];
      sc.k = detail::side_summary(b.k_err2, b.k_sig2, b.k_cos, b.k_tok);
      sc.v = detail::side_summary(b.v_err2, b.v_sig2, b.v_cos, b.v_tok);
      std::vector<double> rel, kl;
      std::vector<std::vector<double>> crel(nctx), ckl(nctx);
      for (std::size_t i = 0; i < samples.size(); ++i)
        for (int j = 0; j < group; ++j) {
          const std::size_t x = i * group + j;
          if (samples[i].group < 0) {
            rel.push_back(b.s_rel[x]);
            kl.push_back(b.s_kl[x]);
          } else {
            crel[samples[i].group].push_back(b.s_rel[x]);
            ckl[samples[i].group].push_back(b.s_kl[x]);
          }
        }
      sc.attn = detail::attention_summary(rel, kl);
      sc.context.resize(nctx);
      for (std::size_t c = 0; c < nctx; ++c) sc.context[c] = detail::attention_summary(crel[c], ckl[c]);
      // ---- accumulate for the overall scope
      detail::method_accumulator& a = acc[m];
      auto sum = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return s;
      };
      a.k_err2.push_back(sum(b.k_err2));
      a.k_sig2.push_back(sum(b.k_sig2));
      a.k_cos.push_back(sum(b.k_cos));
      a.v_err2.push_back(sum(b.v_err2));
      a.v_sig2.push_back(sum(b.v_sig2));
      a.v_cos.push_back(sum(b.v_cos));
      a.k_tok.insert(a.k_tok.end(), b.k_tok.begin(), b.k_tok.end());
      a.v_tok.insert(a.v_tok.end(), b.v_tok.begin(), b.v_tok.end());
      a.rel.insert(a.rel.end(), rel.begin(), rel.end());
      a.kl.insert(a.kl.end(), kl.begin(), kl.end());
      for (std::size_t c = 0; c < nctx; ++c) {
        a.ctx_rel[c].insert(a.ctx_rel[c].end(), crel[c].begin(), crel[c].end());
        a.ctx_kl[c].insert(a.ctx_kl[c].end(), ckl[c].begin(), ckl[c].end());
      }
      mr.seconds += std::chrono::duration<double>(clock::now() - t0).count();
      ++done_units;
    }
  }
  // ---- overall scope
  for (std::size_t m = 0; m < nm; ++m) {
    method_result& mr = res.methods[m];
    if (!mr.ok) {
      mr.layers.clear();
      continue;
    }
    detail::method_accumulator& a = acc[m];
    const double rows = static_cast<double>(a.k_tok.size());
    std::vector<double> ke(1, 0), ks(1, 0), kc(1, 0), ve(1, 0), vs(1, 0), vc(1, 0);
    for (std::size_t i = 0; i < a.k_err2.size(); ++i) {
      ke[0] += a.k_err2[i];
      ks[0] += a.k_sig2[i];
      kc[0] += a.k_cos[i];
      ve[0] += a.v_err2[i];
      vs[0] += a.v_sig2[i];
      vc[0] += a.v_cos[i];
    }
    mr.all.k = detail::side_summary(ke, ks, kc, a.k_tok);
    mr.all.v = detail::side_summary(ve, vs, vc, a.v_tok);
    mr.all.k.cosine = rows > 0 ? kc[0] / rows : 1.0;
    mr.all.v.cosine = rows > 0 ? vc[0] / rows : 1.0;
    mr.all.attn = detail::attention_summary(a.rel, a.kl);
    mr.all.context.resize(nctx);
    for (std::size_t c = 0; c < nctx; ++c) mr.all.context[c] = detail::attention_summary(a.ctx_rel[c], a.ctx_kl[c]);
    mr.effective_bits = a.effective_bits_den > 0 ? a.effective_bits_num / a.effective_bits_den : 0;
  }
  if (opt.progress) opt.progress(total_units, total_units, "done");
  res.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return true;
}

}  // namespace kvtile_eval
