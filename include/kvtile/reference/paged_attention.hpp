// kvtile/reference/paged_attention.hpp: a reference decode attention in fp64
// over a HOST copy of a paged cache (plain C++17, no CUDA): what
// attention::paged_decode / decode_plan compute, written as a direct loop,
// for integrators' tests and kvtile's own.
//
//   kvtile::reference::attention_options o;
//   o.q_heads = 32;
//   o.softmax_scale = 1.0 / std::sqrt(128.0);
//   std::vector<double> out(rows * o.q_heads * 128), lse(rows * o.q_heads);
//   status s = kvtile::reference::paged_attention<Codec>(host_view, q, o, out.data(), lse.data());
//
// host_view: a paged_cache_view whose pointers (pages, page_table, seq_lens,
// tail_k/v, sink_k/v, tail_slots) all point to host memory, laid out as on the
// device (paged/paged_cache.hpp). Codec: the preset the cache was written with
// (its records are the paged store's, paged/paged_record.hpp).
// Semantics (decode_args.hpp): sequence s of length L = seq_lens[s] has n_s
// new tokens (qo_indptr null: 1; else qo_indptr[s + 1] - qo_indptr[s],
// clamped to [0, max_q_tokens]) at its last n_s positions; new token i (query
// row qo_indptr[s] + i, or s) attends positions t < L - (n_s - 1 - i) with
// t >= that query's position - window_left when window_left >= 0. Score
// softmax_scale * q.k, soft-capped to cap * tanh(score / cap) when
// logit_softcap > 0; lse = natural log of the sum of exp(score). K and V:
// complete tile i from its record (page_table[s][i]; tile 0 from the sink at
// the sequence's slot when the sink is on), the L % G tail tokens from the
// tail at the slot; everything in the ORIGINAL frame (the rotation undone),
// so q and out are in the original frame as well. A query with no key gets
// out = 0 and lse = -infinity.
// Statuses: validate_structure's, validate_tables' and validate_slots' on the
// host copies, with duplicate detection (invalid_argument for a bad length,
// a page outside [0, num_pages) or used twice, a slot out of range or shared); null_pointer for q or out; invalid_argument
// for an option that breaks attention::check_decode_options (q_heads, softmax_scale,
// logit_softcap, window_left, max_q_tokens with qo_indptr), q_heads not a
// multiple of kv_heads, or qo_indptr not starting at 0 and non-decreasing; corrupt_record for a
// record that does not validate. Cost: O(rows x q_heads x L x D) doubles; meant
// for tests, not serving.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../codec/element.hpp"
#include "../codec/record_span.hpp"
#include "../codec/tile_codec.hpp"
#include "../config.hpp"
#include "../device/attention/decode_args.hpp"
#include "../numeric/half.hpp"
#include "../paged/paged_cache.hpp"
#include "../status.hpp"

KVTILE_NAMESPACE_BEGIN
namespace reference {

struct attention_options {
  int q_heads = 0;                             // a positive multiple of the cache's kv_heads
  double softmax_scale = 0;                    // usually 1 / sqrt(head_dim)
  int window_left = -1;                        // -1: no window; >= 0: a window (< -1: invalid_argument)
  double logit_softcap = 0;                    // > 0: soft-cap
  const std::int32_t* qo_indptr = nullptr;     // HOST [num_seqs + 1], or null: one query per sequence
  int max_q_tokens = 1;                        // 1..8 (with qo_indptr): bound on every n_s
};

namespace detail {
template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return static_cast<double>(::kvtile::detail::element_to_float(x));
}
}  // namespace detail

// The decoded keys and values of (seq, head) in the original frame, [L][D]
// each (L = seq_lens[seq]). The view must have passed validate_structure and
// validate_tables (paged_attention checks both first).
template <class Codec>
status gather_kv(const paged_cache_view& v, std::int32_t seq, std::int32_t head, std::vector<double>& keys,
                 std::vector<double>& values) {
  constexpr int D = Codec::D, G = Codec::G;
  const std::int64_t len = v.seq_lens[seq], full = len / G;
  keys.assign(static_cast<std::size_t>(len) * D, 0.0);
  values.assign(keys.size(), 0.0);
  std::vector<float> tk(static_cast<std::size_t>(G) * D), tv(tk.size());
  const std::int64_t slot_off = v.tile_offset(seq, head);
  // fp16 rotated rows (a sink or tail tile) -> original-frame floats
  auto unrotate = [&](const half_t* src, int rows, std::vector<float>& dst) {
    for (int g = 0; g < rows; ++g) {
      float* row = dst.data() + static_cast<std::size_t>(g) * D;
      for (int d = 0; d < D; ++d) row[d] = src[static_cast<std::ptrdiff_t>(g) * D + d].to_float();
      Codec::rotation::template inverse<D>(row);
    }
  };
  for (std::int64_t i = 0; i < full; ++i) {
    if (i == 0 && v.has_sink()) {
      unrotate(v.sink_k + slot_off, G, tk);
      unrotate(v.sink_v + slot_off, G, tv);
    } else {
      const std::int32_t page = v.page_table[static_cast<std::int64_t>(seq) * v.max_pages_per_seq + i];
      const record_span rec{v.record(page, head), static_cast<std::size_t>(v.record_bytes)};
      if (status s = Codec::decode(rec, tk.data(), D, tv.data(), D, frame::original); s != status::success) return s;
    }
    for (std::size_t e = 0; e < tk.size(); ++e) {
      keys[static_cast<std::size_t>(i) * G * D + e] = tk[e];
      values[static_cast<std::size_t>(i) * G * D + e] = tv[e];
    }
  }
  const int tail = static_cast<int>(len % G);
  unrotate(v.tail_k + slot_off, tail, tk);
  unrotate(v.tail_v + slot_off, tail, tv);
  for (std::size_t e = 0; e < static_cast<std::size_t>(tail) * D; ++e) {
    keys[static_cast<std::size_t>(full) * G * D + e] = tk[e];
    values[static_cast<std::size_t>(full) * G * D + e] = tv[e];
  }
  return status::success;
}

// One decode step's attention (see the top of this file). q: [rows][q_heads][D]
// with rows = num_seqs (qo_indptr null) or qo_indptr[num_seqs]; out: the same
// shape in double; lse: [rows][q_heads] or null. QT: half_t, bfloat16_t, float
// or double.
template <class Codec, class QT>
status paged_attention(const paged_cache_view& v, const QT* q, const attention_options& o, double* out,
                       double* lse = nullptr) {
  constexpr int D = Codec::D, G = Codec::G;
  if (status s = validate_structure(v, static_cast<std::int64_t>(Codec::record_bytes), D, G); s != status::success)
    return s;
  std::vector<std::uint8_t> page_marks(static_cast<std::size_t>(v.num_pages)), slot_marks(static_cast<std::size_t>(v.slots()));
  if (status s = validate_tables(v, v.page_table, v.seq_lens, page_marks.data()); s != status::success) return s;
  if (status s = validate_slots(v, v.tail_slots, v.seq_lens, slot_marks.data()); s != status::success) return s;
  if (!q || !out) return status::null_pointer;
  // The decode options' rules of the kernels (attention::check_decode_options),
  // with max_q_tokens read only with qo_indptr and splits not applying here.
  if (attention::arg_error e = attention::check_decode_options(o.q_heads, o.qo_indptr ? o.max_q_tokens : 1,
                                                               o.qo_indptr != nullptr, o.window_left,
                                                               o.logit_softcap, 0, true, o.softmax_scale))
    return e.code;
  if (o.q_heads % v.kv_heads != 0) return status::invalid_argument;
  if (o.qo_indptr) {
    if (o.qo_indptr[0] != 0) return status::invalid_argument;
    for (std::int32_t s = 0; s < v.num_seqs; ++s)
      if (o.qo_indptr[s + 1] < o.qo_indptr[s]) return status::invalid_argument;
  }
  const int group = o.q_heads / v.kv_heads;
  std::vector<double> keys, values, scores;
  for (std::int32_t s = 0; s < v.num_seqs; ++s) {
    const std::int64_t len = v.seq_lens[s];
    std::int64_t first_row = s, n = 1;
    if (o.qo_indptr) {
      first_row = o.qo_indptr[s];
      n = o.qo_indptr[s + 1] - o.qo_indptr[s];
    }
    const std::int64_t used = n < o.max_q_tokens || !o.qo_indptr ? n : o.max_q_tokens;  // n_s clamped
    for (std::int32_t h = 0; h < v.kv_heads; ++h) {
      if (status st = gather_kv<Codec>(v, s, h, keys, values); st != status::success) return st;
      for (std::int64_t i = 0; i < used; ++i) {
        const std::int64_t end = len - (used - 1 - i);  // keys [lo, end)
        std::int64_t lo = 0;
        if (o.window_left >= 0 && end - 1 - o.window_left > 0) lo = end - 1 - o.window_left;
        for (int j = 0; j < group; ++j) {
          const int qh = h * group + j;
          const std::int64_t row = (first_row + i) * o.q_heads + qh;
          const QT* qv = q + row * D;
          double* ov = out + row * D;
          for (int d = 0; d < D; ++d) ov[d] = 0.0;
          if (end <= lo || end <= 0) {
            if (lse) lse[row] = -std::numeric_limits<double>::infinity();
            continue;
          }
          scores.assign(static_cast<std::size_t>(end - lo), 0.0);
          double mx = -std::numeric_limits<double>::infinity();
          for (std::int64_t t = lo; t < end; ++t) {
            double acc = 0;
            for (int d = 0; d < D; ++d) acc += detail::to_double(qv[d]) * keys[static_cast<std::size_t>(t * D + d)];
            double sc = acc * o.softmax_scale;
            if (o.logit_softcap > 0) sc = o.logit_softcap * std::tanh(sc / o.logit_softcap);
            scores[static_cast<std::size_t>(t - lo)] = sc;
            mx = sc > mx ? sc : mx;
          }
          double sum = 0;
          for (std::int64_t t = lo; t < end; ++t) {
            const double p = std::exp(scores[static_cast<std::size_t>(t - lo)] - mx);
            sum += p;
            for (int d = 0; d < D; ++d) ov[d] += p * values[static_cast<std::size_t>(t * D + d)];
          }
          for (int d = 0; d < D; ++d) ov[d] /= sum;
          if (lse) lse[row] = mx + std::log(sum);
        }
      }
    }
  }
  return status::success;
}

}  // namespace reference
KVTILE_NAMESPACE_END
