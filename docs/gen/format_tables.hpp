// docs/gen/format_tables.hpp: the generated tables of docs/format.md.
//
// Every number comes from the constexpr record layouts (packing/fp8_scales.hpp,
// packing/fp16_scales.hpp) and tile_codec's bits_per_element, so the doc
// cannot drift from the code: docs/gen/format_tables.cpp prints these tables
// and tests/host/format_doc.cpp checks that docs/format.md contains each one
// verbatim. Regenerate after a layout change:
//   g++ -std=c++17 -I include docs/gen/format_tables.cpp -o /tmp/gen && /tmp/gen
// and paste the output over the tables in docs/format.md.
#pragma once

#include <kvtile/kvtile.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvtile_docs {

// 13328 -> "13,328"
inline std::string grouped(std::uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

// num / den with `decimals` decimals, rounded half up, in integer arithmetic
// (so 3.5625 prints 3.563 on every platform, like method.md's table).
inline std::string fixed(std::uint64_t num, std::uint64_t den, int decimals) {
  std::uint64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  const std::uint64_t q = (2 * num * scale + den) / (2 * den);
  std::string frac = std::to_string(q % scale);
  while (static_cast<int>(frac.size()) < decimals) frac.insert(0, "0");
  return std::to_string(q / scale) + "." + frac;
}

struct field_row {
  std::size_t offset;
  std::size_t bytes;
  const char* name;
  std::string type;
};

inline std::string offsets_table(std::vector<field_row> rows, std::size_t total) {
  std::sort(rows.begin(), rows.end(), [](const field_row& a, const field_row& b) { return a.offset < b.offset; });
  std::string s = "| offset | bytes | field | type |\n|---:|---:|---|---|\n";
  for (const field_row& r : rows)
    s += "| " + grouped(r.offset) + " | " + grouped(r.bytes) + " | " + r.name + " | " + r.type + " |\n";
  s += "| | **" + grouped(total) + "** | **record** | multiple of 16 |\n";
  return s;
}

// Field offsets of one record, fp8_scales (format version 1).
template <class Config>
std::string fp8_offsets() {
  using L = kvtile::fp8_scales::layout<Config>;
  const std::size_t D = Config::head_dim, G = Config::tile_tokens;
  const std::string d = std::to_string(D), g = std::to_string(G);
  const std::string kb = std::to_string(Config::key_bits), vb = std::to_string(Config::value_bits);
  std::vector<field_row> rows = {
      {L::vector_scales + 0, 4, "vector scale of a_K", "fp32, power of two"},
      {L::vector_scales + 4, 4, "vector scale of t_K", "fp32, power of two"},
      {L::vector_scales + 8, 4, "vector scale of c_V", "fp32, power of two"},
      {L::vector_scales + 12, 4, "vector scale of a_V", "fp32, power of two"},
      {L::key_scale, D, "a_K: key step per channel", "E4M3 x " + d},
      {L::key_token_scale, G, "t_K: key Sinkhorn scale per token", "E4M3 x " + g},
      {L::value_channel_scale, D, "c_V: value Sinkhorn scale per channel", "E4M3 x " + d},
      {L::value_scale, G, "a_V: value step per token", "E4M3 x " + g},
      {L::key_zero, 2 * D, "z_K: key zero point per channel", "fp16 x " + d},
      {L::value_zero, 2 * G, "z_V: value zero point per token", "fp16 x " + g},
      {L::key_codes, Config::key_code_bytes, "K codes", d + " rows (channels) x " + g + " tokens, " + kb + " bit"},
      {L::value_codes, Config::value_code_bytes, "V codes", g + " rows (tokens) x " + d + " channels, " + vb + " bit"},
  };
  return offsets_table(rows, L::bytes);
}

// Field offsets of one record, fp16_scales (the KVarN vLLM layout).
template <class Config>
std::string fp16_offsets() {
  using L = kvtile::fp16_scales::layout<Config>;
  const std::size_t D = Config::head_dim, G = Config::tile_tokens;
  const std::string d = std::to_string(D), g = std::to_string(G);
  const std::string kb = std::to_string(Config::key_bits), vb = std::to_string(Config::value_bits);
  std::vector<field_row> rows = {
      {L::key_codes, Config::key_code_bytes, "K codes", d + " rows (channels) x " + g + " tokens, " + kb + " bit"},
      {L::key_scale, 2 * D, "a_K: key step per channel", "fp16 x " + d},
      {L::key_zero, 2 * D, "z_K: key zero point per channel", "fp16 x " + d},
      {L::key_token_scale, 2 * G, "t_K: key Sinkhorn scale per token", "fp16 x " + g},
      {L::value_codes, Config::value_code_bytes, "V codes", g + " rows (tokens) x " + d + " channels, " + vb + " bit"},
      {L::value_channel_scale, 2 * D, "c_V: value Sinkhorn scale per channel", "fp16 x " + d},
      {L::value_scale, 2 * G, "a_V: value step per token", "fp16 x " + g},
      {L::value_zero, 2 * G, "z_V: value zero point per token", "fp16 x " + g},
  };
  if (L::bytes > L::unpadded) rows.push_back({L::unpadded, L::bytes - L::unpadded, "padding", "zero bytes"});
  return offsets_table(rows, L::bytes);
}

// "13,328 B = 3.254 b (4.92x)" for one shape.
template <int D, int G, int KB, int VB, class Packer>
std::string size_cell() {
  using codec = kvtile::tile_codec<kvtile::tile_config<D, G, KB, VB>, kvtile::hadamard, kvtile::sinkhorn<>,
                                   kvtile::rtn<>, Packer>;
  const std::uint64_t bytes = codec::record_bytes;
  const std::uint64_t elements = 2ull * D * G;  // K and V
  const std::uint64_t fp16 = codec::config::fp16_bytes;
  return grouped(bytes) + " B = " + fixed(bytes * 8, elements, 3) + " b (" + fixed(fp16, bytes, 2) + "x)";
}

template <int D, int G, class Packer>
std::string size_row() {
  return "| " + std::to_string(D) + " | " + std::to_string(G) + " | " + size_cell<D, G, 4, 2, Packer>() + " | " +
         size_cell<D, G, 4, 4, Packer>() + " | " + size_cell<D, G, 2, 2, Packer>() + " | " +
         size_cell<D, G, 8, 8, Packer>() + " |\n";
}

template <int D, class Packer>
std::string size_rows_for_d() {
  return size_row<D, 32, Packer>() + size_row<D, 64, Packer>() + size_row<D, 128, Packer>() +
         size_row<D, 256, Packer>();
}

// Record bytes, bits per element (K and V, all metadata) and capacity versus
// fp16 for every head_dim x tile size x preset bit combination.
template <class Packer>
std::string size_table() {
  std::string s = "| D | G | k4v2 | k4v4 | k2v2 | k8v8 |\n|---:|---:|---|---|---|---|\n";
  return s + size_rows_for_d<64, Packer>() + size_rows_for_d<128, Packer>() + size_rows_for_d<256, Packer>();
}

struct table {
  const char* title;
  std::string markdown;
};

// Every generated table of docs/format.md, in the order the doc shows them.
inline std::vector<table> all_tables() {
  using cfg = kvtile::tile_config<128, 128, 4, 2>;
  return {
      {"fp8_scales offsets, D = 128, G = 128, k4v2", fp8_offsets<cfg>()},
      {"fp16_scales offsets, D = 128, G = 128, k4v2", fp16_offsets<cfg>()},
      {"fp8_scales sizes", size_table<kvtile::fp8_scales>()},
      {"fp16_scales sizes", size_table<kvtile::fp16_scales>()},
  };
}

}  // namespace kvtile_docs
