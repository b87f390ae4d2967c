// tools/kvtile-eval/src/evaluate.cpp: evaluate() (evaluate.hpp), the
// evaluation loop. The codecs it runs are compiled in src/host_codec_d*.cpp.
#include "../evaluate.hpp"

namespace kvtile_eval {

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
        detail::host_codec_result hc;
        const kvtile::status st = detail::quantize_layer_method(spec, p, on_host, ds, l, memo, threads, b, merr,
                                                                cmp ? &host_rec : nullptr, hc);
        if (st == kvtile::status::success) {
          mr.bits = hc.bits;
          mr.record_bytes = hc.record_bytes;
          ok = hc.ok;
        }
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
