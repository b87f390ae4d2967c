// tests/device/attention_fp8_d128.cu: decode attention accuracy, fp8_scales records, D = 128:
// every preset (k4v2/k4v4/k2v2 at G = 64 and 128), GQA 1..16, tails, sinks,
// empty sequences. Reference: fp64 attention on the cache dequantized by the
// host codec (tests/device/attention_common.cuh, attention_sweep.cuh).
#include "attention_sweep.cuh"

int main(int argc, char** argv) { return attn_test::sweep_main<128, kvtile::fp8_scales>("fp8_scales", argc, argv); }
