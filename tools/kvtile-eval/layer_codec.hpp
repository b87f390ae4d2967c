// tools/kvtile-eval/layer_codec.hpp: one method applied to one layer.
//
// The layer is held head-major ([kv_heads][tokens][D], contiguous keys per
// head) in layer_buffers. Tiles of G consecutive tokens of one KV head are
// encoded to a record and decoded (frame::original) with the library's
// tile_codec on std::thread workers, each with its own workspace
// (quantize_layer), or by the GPU codec (quantize_layer_device,
// device_codec.hpp); tokens of a trailing partial tile stay fp16, as the fp16
// tail of an engine's cache. compare_layer counts the (tile, KV head) items
// whose record or decoded K/V bits differ between host and GPU.
// quantize_layer_method runs quantize_layer with a method's codec; it is
// compiled once, in the library kvtile_eval_core (src/host_codec*.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <kvtile/kvtile.hpp>

#include "dataset.hpp"
#include "device_codec.hpp"
#include "methods.hpp"
#include "sinkhorn_memo.hpp"
#include "thread_pool.hpp"
#include "token_rtn.hpp"

namespace kvtile_eval {

namespace detail {

// One layer, head-major [kv_heads][tokens][D] (contiguous keys per head).
struct layer_buffers {
  std::vector<float> ko, vo;  // originals
  std::vector<float> kh, vh;  // reconstructions
  std::vector<float> kh_host, vh_host;  // compare_devices: the host's reconstructions
  std::vector<double> k_err2, k_sig2, v_err2, v_sig2, k_cos, v_cos;  // per (head, token)
  std::vector<float> k_tok, v_tok;  // per-token relative errors
  std::vector<double> s_rel, s_kl;  // per query of each sample
  std::size_t at(int h, int t, int T, int D) const {
    return (static_cast<std::size_t>(h) * T + t) * static_cast<std::size_t>(D);
  }
};

// Tokens [t0, T) of every head stay fp16 (the tail of an engine's cache).
inline void copy_tail(const dataset& ds, int t0, layer_buffers& b) {
  const int T = ds.tokens, D = ds.head_dim;
  for (int h = 0; h < ds.kv_heads; ++h)
    for (std::size_t i = b.at(h, t0, T, D); i < b.at(h, T, T, D); ++i) {
      b.kh[i] = kvtile::half_t(b.ko[i]).to_float();
      b.vh[i] = kvtile::half_t(b.vo[i]).to_float();
    }
}

// records (optional): item * record_bytes, item = tile * kv_heads + head.
template <class Codec>
bool quantize_layer(const dataset& ds, int l, sinkhorn_memo* memo, int threads, layer_buffers& b, std::string& err,
                    std::vector<unsigned char>* records = nullptr) {
  constexpr int G = Codec::G;
  const int T = ds.tokens, D = ds.head_dim;
  const int tiles = T / G;
  const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(ds.kv_heads) * D;
  const int nthreads = std::max(1, threads);
  std::vector<std::unique_ptr<typename Codec::workspace>> ws(nthreads);
  std::vector<std::vector<unsigned char>> rec(nthreads);
  std::atomic<bool> failed{false};
  std::vector<kvtile::status> first(nthreads, kvtile::status::success);
  if (records) records->assign(static_cast<std::size_t>(tiles) * ds.kv_heads * Codec::record_bytes, 0);
  parallel_for(static_cast<std::size_t>(tiles) * ds.kv_heads, nthreads, [&](std::size_t item, int w) {
    if (failed.load()) return;
    if (!ws[w]) {
      ws[w].reset(new typename Codec::workspace);
      rec[w].assign(Codec::record_bytes, 0);
    }
    const int h = static_cast<int>(item % ds.kv_heads), tile = static_cast<int>(item / ds.kv_heads);
    const float* k = ds.key(l, tile * G, h);  // engine layout: token stride kv_heads * D
    const float* v = ds.value(l, tile * G, h);
    const std::size_t dst = b.at(h, tile * G, T, D);
    memo_slot = memo ? &memo->keys[item] : nullptr;
    kvtile::status s = Codec::encode_keys(k, stride, rec[w].data(), ws[w].get());
    if (kvtile::ok(s)) {
      memo_slot = memo ? &memo->values[item] : nullptr;
      s = Codec::encode_values(v, stride, rec[w].data(), ws[w].get());
    }
    memo_slot = nullptr;
    if (kvtile::ok(s) && records)
      std::copy(rec[w].begin(), rec[w].end(), records->begin() + static_cast<std::ptrdiff_t>(item * Codec::record_bytes));
    const kvtile::record_span span{rec[w].data(), rec[w].size()};  // the length-checked decode
    if (kvtile::ok(s)) s = Codec::decode_keys(span, b.kh.data() + dst, D, kvtile::frame::original);
    if (kvtile::ok(s)) s = Codec::decode_values(span, b.vh.data() + dst, D, kvtile::frame::original);
    if (!kvtile::ok(s)) {
      first[w] = s;
      failed = true;
    }
  });
  for (auto s : first)
    if (!kvtile::ok(s)) {
      err = std::string("codec error: ") + kvtile::to_string(s);
      return false;
    }
  copy_tail(ds, tiles * G, b);
  return true;
}

// What quantize_layer_method reports of the codec it ran.
struct host_codec_result {
  double bits = 0;               // Codec::bits_per_element
  std::size_t record_bytes = 0;  // Codec::record_bytes
  bool ok = true;                // quantize_layer's result (true when run is false)
};

// quantize_layer<with_memo_t<Codec>> for method m's codec (dispatch_method(m,
// p)) on layer l when `run`; with run false only the codec's sizes are
// reported. Returns dispatch_method's status. Not a template: the codecs are
// compiled once, in the library kvtile_eval_core (src/host_codec.cpp picks
// the head_dim's translation unit, src/host_codec_d{64,128,256}.cpp).
kvtile::status quantize_layer_method(const method_spec& m, const kvtile::codec_params& p, bool run,
                                     const dataset& ds, int l, sinkhorn_memo* memo, int threads, layer_buffers& b,
                                     std::string& err, std::vector<unsigned char>* records, host_codec_result& out);

// The GPU codec on the uploaded layer (device_codec.hpp): decoded tiles into
// b.kh / b.vh, then the fp16 tail. Fails like the host path on the first
// (in item order) tile whose status is not ok, or on a CUDA error.
inline bool quantize_layer_device(const dataset& ds, const kvtile::codec_params& p, device_codec_session& s,
                                  layer_buffers& b, std::vector<unsigned char>* records, std::string& err) {
  std::vector<int> st;
  if (!s.roundtrip(p, b.kh.data(), b.vh.data(), st, records, err)) {
    err = "GPU codec: " + err;
    return false;
  }
  for (int v : st)
    if (!kvtile::ok(static_cast<kvtile::status>(v))) {
      err = std::string("codec error: ") + kvtile::to_string(static_cast<kvtile::status>(v)) + " (GPU codec)";
      return false;
    }
  copy_tail(ds, ds.tokens / p.tile_tokens * p.tile_tokens, b);
  return true;
}

// compare_devices: counts the items (tile, head) of one layer whose record or
// decoded K/V bits differ between the host (b.kh_host, host_rec) and the
// device (b.kh, dev_rec); notes the first difference.
inline std::size_t compare_layer(const dataset& ds, int G, std::size_t record_bytes, const layer_buffers& b,
                                 const std::vector<unsigned char>& host_rec, const std::vector<unsigned char>& dev_rec,
                                 int layer, std::string& note) {
  const int T = ds.tokens, D = ds.head_dim, H = ds.kv_heads;
  const std::size_t items = static_cast<std::size_t>(T / G) * H;
  const std::size_t n = static_cast<std::size_t>(G) * D;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < items; ++i) {
    const int tile = static_cast<int>(i / H), h = static_cast<int>(i % H);
    const std::size_t off = b.at(h, tile * G, T, D);
    const bool rec_ok = host_rec.size() == dev_rec.size() &&
                        std::memcmp(host_rec.data() + i * record_bytes, dev_rec.data() + i * record_bytes,
                                    record_bytes) == 0;
    const bool k_ok = std::memcmp(b.kh.data() + off, b.kh_host.data() + off, n * sizeof(float)) == 0;
    const bool v_ok = std::memcmp(b.vh.data() + off, b.vh_host.data() + off, n * sizeof(float)) == 0;
    if (rec_ok && k_ok && v_ok) continue;
    if (bad++ == 0 && note.empty())
      note = "layer " + std::to_string(layer) + ", tile " + std::to_string(tile) + ", KV head " + std::to_string(h) +
             ": " + (rec_ok ? "" : "record ") + (k_ok ? "" : "keys ") + (v_ok ? "" : "values ") + "differ";
  }
  return bad;
}

inline bool quantize_layer_token_rtn(const dataset& ds, const method_spec& m, int threads, layer_buffers& b,
                                     std::string& err) {
  const int T = ds.tokens, D = ds.head_dim;
  const int tq = T / m.tile_tokens * m.tile_tokens;
  std::atomic<bool> failed{false};
  parallel_for(static_cast<std::size_t>(ds.kv_heads), threads, [&](std::size_t h, int) {
    for (int t = 0; t < tq; ++t) {
      const std::size_t off = b.at(static_cast<int>(h), t, T, D);
      if (!token_rtn_row(m.key_bits, b.ko.data() + off, D, b.kh.data() + off) ||
          !token_rtn_row(m.value_bits, b.vo.data() + off, D, b.vh.data() + off))
        failed = true;
    }
  });
  if (failed) {
    err = "per-token RTN: a token's range does not fit fp16 scales";
    return false;
  }
  copy_tail(ds, tq, b);
  return true;
}

}  // namespace detail

}  // namespace kvtile_eval
