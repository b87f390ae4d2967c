// kvtile/codec/tile_codec.hpp: the tile codec, composed from the four policies.
//
//   tile_codec<tile_config<D, G, bK, bV>, Rotation, Normalizer, Rounding, Packer>
//
// Host encode/decode between the engine layout (G tokens x D channels of one
// KV head, fp16/bf16/fp32, `token_stride` elements between tokens) and one
// contiguous record (docs/format.md). Encoding follows method.md:
//   1. rotate each token (Rotation), build XK[D x G] (rows = channels) or XV[G x D];
//   2. Normalizer gives the column scale Sc (keys: per token, values: per channel;
//      sinkhorn.hpp rescales by per-line reciprocals, X * (1/e^Lc) * (1/e^Lr));
//   3. Sc is rounded to its stored form s^ (nearest, raised where needed so
//      that every |X / s^| <= 65280 fits the fp16 zero points); Y = X / s^;
//   4. per row: the range [lo, hi] of Y, shrunk by the clip ratio, then the
//      stored step a^ and fp16 zero z^ by the row rounding policy
//      (rounding/asymmetric_rtn.hpp; default: the E4M3/fp16 neighbour of
//      (hi - lo) / qmax with the smaller max error, grid centred on [lo, hi]);
//   5. codes = clamp(round_half_even((Y - z^) / a^), 0, qmax).
// Each decision is a KVTILE_HOST_DEVICE function (codec/encode_rules.hpp,
// rounding/asymmetric_rtn.hpp) that the block codec calls too.
// Every float operation is a detail:: call in a fixed order, so the device
// codec reproduces records byte for byte.
//
// Input domain: finite |x| <= 2^48. NaN/Inf elements are replaced by 0 and the
// call returns status::non_finite_input (record written, valid). Larger
// magnitudes return status::out_of_range and leave the record untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "../config.hpp"
#include "../detail/bits.hpp"
#include "../normalization/sinkhorn.hpp"
#include "../numeric/half.hpp"
#include "../packing/bitpack.hpp"
#include "../packing/fp8_scales.hpp"
#include "../rotation/hadamard.hpp"
#include "../rounding/asymmetric_rtn.hpp"
#include "../status.hpp"
#include "../tile_config.hpp"
#include "element.hpp"
#include "encode_rules.hpp"
#include "record_span.hpp"
#include "record_view.hpp"

KVTILE_NAMESPACE_BEGIN

// Frame of decoded vectors: `original` undoes the rotation; `rotated` returns
// vectors in the rotated frame (what attention with a rotated query uses).
enum class frame { original, rotated };

template <class Config, class Rotation = hadamard, class Normalizer = sinkhorn<>, class Rounding = rtn<>,
          class Packer = fp8_scales>
class tile_codec {
 public:
  using config = Config;
  using rotation = Rotation;
  using normalizer = Normalizer;
  using rounding = Rounding;
  using packer = Packer;
  using key_rounder = typename Rounding::template key_rounder<Config::key_bits>;
  using value_rounder = typename Rounding::template value_rounder<Config::value_bits>;
  using layout = typename Packer::template layout<Config>;
  using format = typename Packer::scale_format;
  using code_type = typename format::code_type;
  using view = record_view<Config, Packer>;

  static constexpr int D = Config::head_dim;
  static constexpr int G = Config::tile_tokens;
  static constexpr int E = Config::elements;
  static constexpr std::size_t record_bytes = layout::bytes;
  // Bits per cached element, K and V together, all metadata included.
  static constexpr double bits_per_element = static_cast<double>(record_bytes) * 8.0 / (2.0 * E);
  // Capacity versus an fp16 cache.
  static constexpr double compression_vs_fp16 = static_cast<double>(Config::fp16_bytes) / record_bytes;
  // Largest reconstructed magnitude validate() accepts: 2^126 / D (2^120 at
  // D = 64, 2^118 at D = 256). Encode's input bound (2^48) stays far below.
  static constexpr double max_reconstructed_magnitude = 8.507059173023462e37 / D;  // 2^126 / D

  // One side (keys or values) of a record before it is written.
  template <int R, int C>
  struct side_stage {
    std::uint8_t codes[R * C];     // row-major R x C
    code_type col_scale[C];        // stored Sinkhorn column scale
    code_type row_scale[R];        // stored RTN step per row
    std::uint16_t zero[R];         // fp16 zero point per row
    float col_vector_scale;
    float row_vector_scale;
  };

  // Host scratch for one encode; reuse it across calls to avoid allocation.
  struct workspace {
    float x[E];
    float y[E];
    float col_want[D > G ? D : G];
    float row_scale[D > G ? D : G];
    float col_hat[D > G ? D : G];
    float col_lower[D > G ? D : G];
    float row_lo[D > G ? D : G];
    float row_hi[D > G ? D : G];
    float scratch[(Normalizer::template scratch_floats<D, G>) > 0 ? (Normalizer::template scratch_floats<D, G>) : 1];
    side_stage<D, G> key;
    side_stage<G, D> value;
  };

  // ---------------------------------------------------------------- encode

  template <class T>
  static status encode_keys(const T* keys, std::ptrdiff_t token_stride, void* record, workspace* ws = nullptr) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = check_input(keys, token_stride, record); s != status::success) return s;
    workspace& w = ws ? *ws : thread_workspace();
    bool non_finite = false;
    if (status s = stage_keys(keys, token_stride, w, non_finite); s != status::success) return s;
    write_keys(w.key, static_cast<std::uint8_t*>(record));
    return non_finite ? status::non_finite_input : status::success;
  }

  template <class T>
  static status encode_values(const T* values, std::ptrdiff_t token_stride, void* record, workspace* ws = nullptr) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = check_input(values, token_stride, record); s != status::success) return s;
    workspace& w = ws ? *ws : thread_workspace();
    bool non_finite = false;
    if (status s = stage_values(values, token_stride, w, non_finite); s != status::success) return s;
    write_values(w.value, static_cast<std::uint8_t*>(record));
    return non_finite ? status::non_finite_input : status::success;
  }

  // Both halves; the record is written only if both succeed.
  template <class T>
  static status encode(const T* keys, std::ptrdiff_t key_stride, const T* values, std::ptrdiff_t value_stride,
                       void* record, workspace* ws = nullptr) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = check_input(keys, key_stride, record); s != status::success) return s;
    if (status s = check_input(values, value_stride, record); s != status::success) return s;
    workspace& w = ws ? *ws : thread_workspace();
    bool non_finite = false;
    if (status s = stage_keys(keys, key_stride, w, non_finite); s != status::success) return s;
    if (status s = stage_values(values, value_stride, w, non_finite); s != status::success) return s;
    auto* out = static_cast<std::uint8_t*>(record);
    write_keys(w.key, out);
    write_values(w.value, out);
    if constexpr (layout::bytes > layout::unpadded)
      for (std::size_t i = layout::unpadded; i < layout::bytes; ++i) out[i] = 0;
    return non_finite ? status::non_finite_input : status::success;
  }

  // ---------------------------------------------------------------- decode

  template <class T>
  static status decode_keys(const void* record, T* keys, std::ptrdiff_t token_stride, frame f = frame::original) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = check_output(record, keys, token_stride); s != status::success) return s;
    if (status s = validate_keys(record); s != status::success) return s;
    write_decoded_keys(view(record), keys, token_stride, f);
    return status::success;
  }

  template <class T>
  static status decode_values(const void* record, T* values, std::ptrdiff_t token_stride, frame f = frame::original) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = check_output(record, values, token_stride); s != status::success) return s;
    if (status s = validate_values(record); s != status::success) return s;
    write_decoded_values(view(record), values, token_stride, f);
    return status::success;
  }

  // Both halves; validates the whole record and both outputs before writing.
  template <class T>
  static status decode(const void* record, T* keys, std::ptrdiff_t key_stride, T* values, std::ptrdiff_t value_stride,
                       frame f = frame::original) {
    static_assert(is_element_type_v<T>, "element type must be half_t, bfloat16_t or float");
    if (status s = validate(record); s != status::success) return s;
    if (status s = check_output(record, keys, key_stride); s != status::success) return s;
    if (status s = check_output(record, values, value_stride); s != status::success) return s;
    const view v(record);
    write_decoded_keys(v, keys, key_stride, f);
    write_decoded_values(v, values, value_stride, f);
    return status::success;
  }

  // Length-checked decode (record_span.hpp): status::truncated_record when
  // the span holds fewer than record_bytes (nothing read or written), else
  // the pointer overload's result. Use these for records from outside.
  template <class T>
  static status decode(record_span r, T* keys, std::ptrdiff_t key_stride, T* values, std::ptrdiff_t value_stride,
                       frame f = frame::original) {
    if (status s = check_records(r, 1, record_bytes); s != status::success) return s;
    return decode(r.data, keys, key_stride, values, value_stride, f);
  }
  template <class T>
  static status decode_keys(record_span r, T* keys, std::ptrdiff_t token_stride, frame f = frame::original) {
    if (status s = check_records(r, 1, record_bytes); s != status::success) return s;
    return decode_keys(r.data, keys, token_stride, f);
  }
  template <class T>
  static status decode_values(record_span r, T* values, std::ptrdiff_t token_stride, frame f = frame::original) {
    if (status s = check_records(r, 1, record_bytes); s != status::success) return s;
    return decode_values(r.data, values, token_stride, f);
  }


 private:
  // Decode bodies: the record and the output arguments are already validated.
  template <class T>
  static void write_decoded_keys(const view& v, T* keys, std::ptrdiff_t token_stride, frame f) {
    float a[D], z[D], vec[D];
    for (int d = 0; d < D; ++d) {
      a[d] = v.key_scale(d);
      z[d] = v.key_zero(d);
    }
    for (int g = 0; g < G; ++g) {
      const float t = v.key_token_scale(g);
      for (int d = 0; d < D; ++d) vec[d] = detail::mul(key_rounder::dequantize(v.key_code(d, g), a[d], z[d]), t);
      if (f == frame::original) Rotation::template inverse<D>(vec);
      T* dst = keys + static_cast<std::ptrdiff_t>(g) * token_stride;
      for (int d = 0; d < D; ++d) dst[d] = detail::element_from_float<T>(vec[d]);
    }
  }

  template <class T>
  static void write_decoded_values(const view& v, T* values, std::ptrdiff_t token_stride, frame f) {
    float c[D], vec[D];
    for (int d = 0; d < D; ++d) c[d] = v.value_channel_scale(d);
    for (int g = 0; g < G; ++g) {
      const float a = v.value_scale(g), z = v.value_zero(g);
      for (int d = 0; d < D; ++d) vec[d] = detail::mul(value_rounder::dequantize(v.value_code(g, d), a, z), c[d]);
      if (f == frame::original) Rotation::template inverse<D>(vec);
      T* dst = values + static_cast<std::ptrdiff_t>(g) * token_stride;
      for (int d = 0; d < D; ++d) dst[d] = detail::element_from_float<T>(vec[d]);
    }
  }


 public:
  // ---------------------------------------------------------------- validation

  // A record is valid when every field holds a value encode can write: scale
  // codes non-negative and finite, zero points finite, vector scales powers of
  // two, and the largest reconstructable magnitude (max a * qmax + max |z|) *
  // max s <= 2^126 / D (max_reconstructed_magnitude): the inverse rotation
  // sums D such values before its 1 / sqrt(D) scaling, so every partial sum
  // stays <= 2^126 and decode is finite for every D. Anything else:
  // status::corrupt_record.
  static status validate_keys(const void* record) {
    if (!record) return status::null_pointer;
    const view v(record);
    double amax = 0, zmax = 0, tmax = 0;
    if (!format::valid_vector_scale(v.vector_scale(vector_field::key_scale)) ||
        !format::valid_vector_scale(v.vector_scale(vector_field::key_token_scale)))
      return status::corrupt_record;
    for (int d = 0; d < D; ++d) {
      if (!format::valid_code(v.key_scale_code(d)) || (v.key_zero_bits(d) & 0x7c00u) == 0x7c00u)
        return status::corrupt_record;
      amax = amax > v.key_scale(d) ? amax : v.key_scale(d);
      const double z = v.key_zero(d) < 0 ? -v.key_zero(d) : v.key_zero(d);
      zmax = zmax > z ? zmax : z;
    }
    for (int g = 0; g < G; ++g) {
      if (!format::valid_code(v.key_token_scale_code(g))) return status::corrupt_record;
      tmax = tmax > v.key_token_scale(g) ? tmax : v.key_token_scale(g);
    }
    return bound_ok(amax, key_rounder::qmax, zmax, tmax) ? status::success : status::corrupt_record;
  }

  static status validate_values(const void* record) {
    if (!record) return status::null_pointer;
    const view v(record);
    double amax = 0, zmax = 0, cmax = 0;
    if (!format::valid_vector_scale(v.vector_scale(vector_field::value_scale)) ||
        !format::valid_vector_scale(v.vector_scale(vector_field::value_channel_scale)))
      return status::corrupt_record;
    for (int g = 0; g < G; ++g) {
      if (!format::valid_code(v.value_scale_code(g)) || (v.value_zero_bits(g) & 0x7c00u) == 0x7c00u)
        return status::corrupt_record;
      amax = amax > v.value_scale(g) ? amax : v.value_scale(g);
      const double z = v.value_zero(g) < 0 ? -v.value_zero(g) : v.value_zero(g);
      zmax = zmax > z ? zmax : z;
    }
    for (int d = 0; d < D; ++d) {
      if (!format::valid_code(v.value_channel_scale_code(d))) return status::corrupt_record;
      cmax = cmax > v.value_channel_scale(d) ? cmax : v.value_channel_scale(d);
    }
    return bound_ok(amax, value_rounder::qmax, zmax, cmax) ? status::success : status::corrupt_record;
  }

  static status validate(const void* record) {
    if (status s = validate_keys(record); s != status::success) return s;
    return validate_values(record);
  }
  static status validate(record_span r) {
    if (status s = check_records(r, 1, record_bytes); s != status::success) return s;
    return validate(r.data);
  }

 private:
  // ---------------------------------------------------------------- internals

  // Quantizes one side: X is R x C row-major (already rotated). Fills `st`.
  template <class Rounder, int R, int C>
  static status quantize_side(const float* X, side_stage<R, C>& st, workspace& w) {
    Normalizer::template run<R, C>(X, w.col_want, w.row_scale, w.scratch);
    // Column scale: nearest stored value, raised so that |X / s^| <= 65280.
    float vmax = 0.0f;
    for (int c = 0; c < C; ++c) {
      float m = 0.0f;
      for (int r = 0; r < R; ++r) m = detail::fmax(m, X[r * C + c] < 0 ? -X[r * C + c] : X[r * C + c]);
      const float lower = detail::column_scale_lower(m);
      w.col_lower[c] = lower;
      vmax = detail::fmax(vmax, detail::fmax(w.col_want[c], lower));
    }
    const float col_vs = format::vector_scale(vmax);
    for (int c = 0; c < C; ++c) {
      code_type code;
      if (!detail::column_scale_code<format>(w.col_want[c], w.col_lower[c], col_vs, code)) return status::out_of_range;
      st.col_scale[c] = code;
      w.col_hat[c] = format::decode(code, col_vs);
    }
    st.col_vector_scale = col_vs;
    // Rows: Y = X / s^, clipped range, the step the row asks for.
    float want_max = 0.0f;
    for (int r = 0; r < R; ++r) {
      float* y = w.y + r * C;
      for (int c = 0; c < C; ++c) y[c] = detail::div(X[r * C + c], w.col_hat[c]);
      float lo, hi;
      detail::min_max(y, C, lo, hi);
      Rounder::clipped_range(lo, hi, lo, hi);
      w.row_lo[r] = lo;
      w.row_hi[r] = hi;
      want_max = detail::fmax(want_max, Rounder::step_wanted(lo, hi));
    }
    const float row_vs = format::vector_scale(want_max);
    st.row_vector_scale = row_vs;
    // Stored step and zero per row, then the codes.
    for (int r = 0; r < R; ++r) {
      if (!Rounder::template fit<format>(w.row_lo[r], w.row_hi[r], row_vs, st.row_scale[r], st.zero[r]))
        return status::out_of_range;
      const float a = format::decode(st.row_scale[r], row_vs);
      const float zf = half_t::to_float_bits(st.zero[r]);
      const float* y = w.y + r * C;
      for (int c = 0; c < C; ++c) st.codes[r * C + c] = static_cast<std::uint8_t>(Rounder::quantize(y[c], a, zf));
    }
    return status::success;
  }

  static workspace& thread_workspace() {
    thread_local std::unique_ptr<workspace> w(new workspace);
    return *w;
  }

  static bool bound_ok(double amax, std::uint32_t qmax, double zmax, double smax) {
    return (amax * qmax + zmax) * smax <= max_reconstructed_magnitude;
  }

  template <class T>
  static status check_input(const T* data, std::ptrdiff_t token_stride, const void* record) {
    if (!data || !record) return status::null_pointer;
    if (token_stride < D) return status::invalid_argument;
    if (reinterpret_cast<std::uintptr_t>(data) % alignof(T) != 0) return status::misaligned;
    return status::success;
  }
  template <class T>
  static status check_output(const void* record, const T* data, std::ptrdiff_t token_stride) {
    return check_input(data, token_stride, record);
  }

  // Reads G tokens, rotates each; writes X with X[row(d, g)] chosen by `transpose`.
  template <class T, bool KeysLayout>
  static status load_rotated(const T* src, std::ptrdiff_t stride, float* X, bool& non_finite) {
    float vec[D];
    for (int g = 0; g < G; ++g) {
      const T* row = src + static_cast<std::ptrdiff_t>(g) * stride;
      unsigned flags = detail::input_ok;
      for (int d = 0; d < D; ++d) vec[d] = detail::sanitize_input(detail::element_to_float(row[d]), flags);
      if (flags & detail::input_out_of_range) return status::out_of_range;
      if (flags & detail::input_non_finite) non_finite = true;
      Rotation::template forward<D>(vec);
      for (int d = 0; d < D; ++d) {
        if constexpr (KeysLayout)
          X[d * G + g] = vec[d];
        else
          X[g * D + d] = vec[d];
      }
    }
    return status::success;
  }

  template <class T>
  static status stage_keys(const T* keys, std::ptrdiff_t stride, workspace& w, bool& non_finite) {
    if (status s = load_rotated<T, true>(keys, stride, w.x, non_finite); s != status::success) return s;
    return quantize_side<key_rounder, D, G>(w.x, w.key, w);
  }
  template <class T>
  static status stage_values(const T* values, std::ptrdiff_t stride, workspace& w, bool& non_finite) {
    if (status s = load_rotated<T, false>(values, stride, w.x, non_finite); s != status::success) return s;
    return quantize_side<value_rounder, G, D>(w.x, w.value, w);
  }

  template <int N>
  static void write_codes(const code_type (&codes)[N], std::uint8_t* dst) {
    for (int i = 0; i < N; ++i)
      detail::store_unaligned<code_type>(dst + sizeof(code_type) * static_cast<std::size_t>(i), codes[i]);
  }
  template <int N>
  static void write_zeros(const std::uint16_t (&z)[N], std::uint8_t* dst) {
    for (int i = 0; i < N; ++i) detail::store_unaligned<std::uint16_t>(dst + 2 * i, z[i]);
  }

  static void write_keys(const side_stage<D, G>& st, std::uint8_t* out) {
    if constexpr (format::has_vector_scale) {
      detail::store_unaligned<float>(out + layout::vector_scales + 4 * int(vector_field::key_scale), st.row_vector_scale);
      detail::store_unaligned<float>(out + layout::vector_scales + 4 * int(vector_field::key_token_scale),
                                     st.col_vector_scale);
    }
    write_codes(st.row_scale, out + layout::key_scale);
    write_codes(st.col_scale, out + layout::key_token_scale);
    write_zeros(st.zero, out + layout::key_zero);
    constexpr int row_bytes = G * Config::key_bits / 8;
    for (int d = 0; d < D; ++d)
      detail::pack_row<Config::key_bits>(st.codes + d * G, G, out + layout::key_codes + d * row_bytes);
  }

  static void write_values(const side_stage<G, D>& st, std::uint8_t* out) {
    if constexpr (format::has_vector_scale) {
      detail::store_unaligned<float>(out + layout::vector_scales + 4 * int(vector_field::value_scale),
                                     st.row_vector_scale);
      detail::store_unaligned<float>(out + layout::vector_scales + 4 * int(vector_field::value_channel_scale),
                                     st.col_vector_scale);
    }
    write_codes(st.row_scale, out + layout::value_scale);
    write_codes(st.col_scale, out + layout::value_channel_scale);
    write_zeros(st.zero, out + layout::value_zero);
    constexpr int row_bytes = D * Config::value_bits / 8;
    for (int g = 0; g < G; ++g)
      detail::pack_row<Config::value_bits>(st.codes + g * D, D, out + layout::value_codes + g * row_bytes);
  }
};

KVTILE_NAMESPACE_END
