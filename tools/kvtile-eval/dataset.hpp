// tools/kvtile-eval/dataset.hpp: the K/V/Q data kvtile-eval measures.
//
// A dataset holds keys and values [layers][tokens][kv_heads][head_dim] as
// floats, and the queries: from a file, from the embedded generator (computed
// on demand) or, without either, the keys themselves (a documented proxy).
// make_dataset checks and adopts tensors read from files; generate_dataset
// fills one from the generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kvtile/tile_config.hpp>

#include "generator.hpp"
#include "tensor.hpp"
#include "thread_pool.hpp"

namespace kvtile_eval {

enum class query_source { file, generated, keys_proxy };

struct dataset {
  int layers = 0, tokens = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  std::vector<float> k, v;  // [layers][tokens][kv_heads][head_dim]
  std::vector<float> q;     // [layers][tokens][q_heads][head_dim] when from a file
  query_source qsrc = query_source::keys_proxy;
  std::shared_ptr<const kv_generator> gen;
  std::string description;
  std::string k_dtype = "float16", v_dtype = "float16", q_dtype = "";

  std::size_t row(int l, int t, int h) const {
    return ((static_cast<std::size_t>(l) * tokens + t) * kv_heads + h) * head_dim;
  }
  const float* key(int l, int t, int h) const { return k.data() + row(l, t, h); }
  const float* value(int l, int t, int h) const { return v.data() + row(l, t, h); }
  void query(int l, int t, int qh, float* out) const {
    if (qsrc == query_source::file) {
      const float* p = q.data() + ((static_cast<std::size_t>(l) * tokens + t) * q_heads + qh) * head_dim;
      std::copy(p, p + head_dim, out);
    } else if (qsrc == query_source::generated) {
      gen->query(l, t, qh, out);
    } else {
      const float* p = key(l, t, qh);
      std::copy(p, p + head_dim, out);
    }
  }
};

namespace detail {
inline bool count_non_finite(const std::vector<float>& v, const char* what, std::string& err) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) && bad++ == 0) first = i;
  if (bad) {
    err = std::string(what) + " hold " + std::to_string(bad) + " NaN/Inf values (first at flat index " +
          std::to_string(first) + "); kvtile-eval needs finite data";
    return false;
  }
  return true;
}
}  // namespace detail

// Checks shapes ([tokens][heads][D] or [layers][tokens][heads][D]) and moves
// the tensors into `ds`. q may be null (queries = keys, a documented proxy).
inline bool make_dataset(tensor&& k, tensor&& v, tensor* q, dataset& ds, std::string& err) {
  auto dims = [&](const tensor& t, const char* what, std::size_t out[4]) {
    if (t.shape.size() == 3) {
      out[0] = 1;
      std::copy(t.shape.begin(), t.shape.end(), out + 1);
    } else if (t.shape.size() == 4) {
      std::copy(t.shape.begin(), t.shape.end(), out);
    } else {
      err = std::string(what) + ": expected shape [tokens][heads][head_dim] or [layers][tokens][heads][head_dim], got " +
            shape_string(t.shape);
      return false;
    }
    for (int i = 0; i < 4; ++i)
      if (out[i] == 0 || out[i] > (1u << 30)) {
        err = std::string(what) + ": shape " + shape_string(t.shape) + " has an empty or too large dimension";
        return false;
      }
    return true;
  };
  std::size_t kd[4], vd[4], qd[4];
  if (!dims(k, "keys", kd) || !dims(v, "values", vd)) return false;
  if (!std::equal(kd, kd + 4, vd)) {
    err = "keys " + shape_string(k.shape) + " and values " + shape_string(v.shape) + " differ in shape";
    return false;
  }
  if (!std::any_of(std::begin(kvtile::head_dims), std::end(kvtile::head_dims), [&](int d) { return kd[3] == static_cast<std::size_t>(d); })) {
    std::string dims_text;
    for (int i = 0; i < kvtile::num_head_dims; ++i)
      dims_text += (i == 0 ? "" : i + 1 == kvtile::num_head_dims ? " or " : ", ") + std::to_string(kvtile::head_dims[i]);
    err = "head_dim " + std::to_string(kd[3]) + " is not supported by kvtile (" + dims_text + ")";
    return false;
  }
  if (q) {
    if (!dims(*q, "queries", qd)) return false;
    if (qd[0] != kd[0] || qd[1] != kd[1] || qd[3] != kd[3]) {
      err = "queries " + shape_string(q->shape) + " do not match keys " + shape_string(k.shape) +
            " (layers, tokens and head_dim must agree)";
      return false;
    }
    if (qd[2] % kd[2] != 0) {
      err = "queries have " + std::to_string(qd[2]) + " heads, not a multiple of the " + std::to_string(kd[2]) +
            " KV heads";
      return false;
    }
  }
  if (!detail::count_non_finite(k.data, "keys", err) || !detail::count_non_finite(v.data, "values", err)) return false;
  if (q && !detail::count_non_finite(q->data, "queries", err)) return false;
  ds = dataset{};
  ds.layers = static_cast<int>(kd[0]);
  ds.tokens = static_cast<int>(kd[1]);
  ds.kv_heads = static_cast<int>(kd[2]);
  ds.head_dim = static_cast<int>(kd[3]);
  ds.k_dtype = to_string(k.source_type);
  ds.v_dtype = to_string(v.source_type);
  ds.k = std::move(k.data);
  ds.v = std::move(v.data);
  if (q) {
    ds.q_heads = static_cast<int>(qd[2]);
    ds.q_dtype = to_string(q->source_type);
    ds.q = std::move(q->data);
    ds.qsrc = query_source::file;
  } else {
    ds.q_heads = ds.kv_heads;
    ds.qsrc = query_source::keys_proxy;
  }
  return true;
}

inline void generate_dataset(const generator_params& p, int threads, dataset& ds) {
  ds = dataset{};
  ds.layers = p.layers;
  ds.tokens = p.tokens;
  ds.kv_heads = p.kv_heads;
  ds.q_heads = p.q_heads;
  ds.head_dim = p.head_dim;
  ds.gen = std::make_shared<kv_generator>(p);
  ds.qsrc = query_source::generated;
  ds.k.assign(static_cast<std::size_t>(p.layers) * p.tokens * p.kv_heads * p.head_dim, 0.0f);
  ds.v.assign(ds.k.size(), 0.0f);
  const std::size_t rows = static_cast<std::size_t>(p.layers) * p.tokens;
  parallel_for(rows, threads, [&](std::size_t r, int) {
    const int l = static_cast<int>(r / p.tokens), t = static_cast<int>(r % p.tokens);
    for (int h = 0; h < p.kv_heads; ++h) {
      ds.gen->key(l, t, h, ds.k.data() + ds.row(l, t, h));
      ds.gen->value(l, t, h, ds.v.data() + ds.row(l, t, h));
    }
  });
  ds.description = "generated: " + std::to_string(p.layers) + " layer(s) x " + std::to_string(p.tokens) +
                   " tokens x " + std::to_string(p.kv_heads) + " KV heads (" + std::to_string(p.q_heads) +
                   " query heads) x D=" + std::to_string(p.head_dim) + ", seed " + std::to_string(p.seed);
  const generator_params def;
  if (p.outlier_min != def.outlier_min || p.outlier_max != def.outlier_max) {
    char b[96];
    std::snprintf(b, sizeof b, ", key outlier |mean| %g-%g", p.outlier_min, p.outlier_max);
    ds.description += b;
  }
}

}  // namespace kvtile_eval
