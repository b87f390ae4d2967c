// tests/device/attention_sweep.cu: decode attention accuracy for one head_dim
// and one record packing: every preset (k4v2/k4v4/k2v2 at G = 64 and 128),
// GQA 1..16, tails, sinks, empty sequences. Reference: fp64 attention on the
// cache dequantized by the host codec (attention_common.cuh, attention_sweep.cuh).
// tests/CMakeLists.txt builds it once per (packing, D): kvtile_device_attention_<fp8|fp16s>_d<D>,
// with KVTILE_TEST_HEAD_DIM and KVTILE_TEST_PACKING (fp8_scales or fp16_scales) defined.
// Exit 0 pass, 1 fail, 77 no device. --small: the first case of each preset only.
// ctest-sanitize: run --small
#include "attention_sweep.cuh"

#if !defined(KVTILE_TEST_HEAD_DIM) || !defined(KVTILE_TEST_PACKING)
#error "define KVTILE_TEST_HEAD_DIM (64, 128, 256) and KVTILE_TEST_PACKING (fp8_scales, fp16_scales): tests/CMakeLists.txt"
#endif
#define KVTILE_TEST_STR2(x) #x
#define KVTILE_TEST_STR(x) KVTILE_TEST_STR2(x)

int main(int argc, char** argv) {
  return attn_test::sweep_main<KVTILE_TEST_HEAD_DIM, kvtile::KVTILE_TEST_PACKING>(KVTILE_TEST_STR(KVTILE_TEST_PACKING), argc,
                                                                                  argv);
}
