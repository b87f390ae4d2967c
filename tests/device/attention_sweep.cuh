// tests/device/attention_sweep.cuh: the preset x G x D accuracy sweep of one
// packing and head_dim (attention_sweep.cu, built once per packing and D).
#pragma once

#include "attention_common.cuh"

namespace attn_test {

// --small (for the compute-sanitizer runs): only the first case of each preset.
inline bool g_sweep_small = false;

template <class Codec, class Policy = attention::decode_policy>
void sweep_codec(const char* name, int idx, std::vector<std::string>& fp16_report) {
  constexpr int G = Codec::G;
  static const int groups[5] = {1, 2, 4, 8, 16};
  fp16_error e16;
  {
    case_cfg c;
    c.num_seqs = 5;
    c.kv_heads = 2;
    c.group = groups[idx % 5];
    c.sink = false;
    c.lens = {0, 1, G + 3, 4 * G - 1, 3 * G};
    c.seed = 1000 + idx;
    e16.merge(accuracy_case<Codec, half_t, Policy>(c, name));
  }
  if (!g_sweep_small) {
    case_cfg c;
    c.num_seqs = 4;
    c.kv_heads = 2;
    c.group = groups[(idx + 2) % 5];
    c.sink = true;
    c.lens = {G, 2 * G + 1, 5 * G + 7, G - 1};
    c.seed = 2000 + idx;
    e16.merge(accuracy_case<Codec, half_t, Policy>(c, name));
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%-10s D=%3d G=%3d: rel err vs unquantized fp16 attention: aggregate %.4f, worst row %.3f", name,
                Codec::D, G, e16.aggregate(), e16.max_row);
  fp16_report.push_back(buf);
}

template <int D, class Packer>
void sweep_head_dim(std::vector<std::string>& rep, int base) {
  using namespace kvtile::presets;
  sweep_codec<k4v2_g128<D, Packer>>("k4v2_g128", base + 0, rep);
  sweep_codec<k4v4_g128<D, Packer>>("k4v4_g128", base + 1, rep);
  sweep_codec<k2v2_g128<D, Packer>>("k2v2_g128", base + 2, rep);
  sweep_codec<k4v2_g64<D, Packer>>("k4v2_g64", base + 3, rep);
  sweep_codec<k4v4_g64<D, Packer>>("k4v4_g64", base + 4, rep);
  sweep_codec<kvarn<D, 64, 2, 2, Packer>>("k2v2_g64", base + 5, rep);
}

template <int D, class Packer>
int sweep_main(const char* packing, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) g_sweep_small |= std::string(argv[i]) == "--small";
  if (int rc = require_device(); rc) return rc;
  std::vector<std::string> rep;
  sweep_head_dim<D, Packer>(rep, D == 64 ? 6 : (D == 128 ? 0 : 12));
  std::printf("error vs unquantized fp16 attention (%s), per preset:\n", packing);
  for (auto& l : rep) std::printf("  %s\n", l.c_str());
  std::printf("max relative error vs fp64 on the dequantized cache (%s): %.3e\n", packing, g_max_rel);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

}  // namespace attn_test
