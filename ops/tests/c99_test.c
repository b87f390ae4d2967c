/* ops/tests/c99_test.c: kvtile_ops.h compiles as C99 and the library's host
 * codec round-trips a tile; a bad preset gives a status and a message. */
#include "kvtile_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                 \
  do {                                                           \
    if (!(c)) {                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int main(void) {
  kvtile_ops_preset_info info;
  int st = kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, 128, &info);
  CHECK(st == KVTILE_OPS_SUCCESS);
  CHECK(info.tile_tokens == 128 && info.key_bits == 4 && info.value_bits == 2);
  CHECK(info.record_bytes > 0 && info.record_bytes % 16 == 0);

  /* A bad preset: status and a message naming the function. */
  st = kvtile_ops_get_preset_info(7, 128, &info);
  CHECK(st == KVTILE_OPS_UNSUPPORTED_PRESET);
  CHECK(strstr(kvtile_ops_last_error(), "kvtile_ops_get_preset_info") != NULL);
  st = kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, 96, &info);
  CHECK(st == KVTILE_OPS_UNSUPPORTED_HEAD_DIM);

  {
    const int G = 128, D = 128;
    const size_t n = (size_t)G * D;
    float* k = malloc(n * sizeof(float));
    float* v = malloc(n * sizeof(float));
    float* k2 = malloc(n * sizeof(float));
    float* v2 = malloc(n * sizeof(float));
    unsigned char* rec = malloc((size_t)info.record_bytes);
    size_t i;
    double err = 0, ref = 0;
    CHECK(k && v && k2 && v2 && rec);
    srand(1);
    for (i = 0; i < n; ++i) {
      k[i] = (float)rand() / RAND_MAX - 0.5f;
      v[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    st = kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, k, v, 1, rec, 0);
    CHECK(st == KVTILE_OPS_SUCCESS);
    st = kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec, 1, KVTILE_OPS_FP32, k2, v2,
                                      KVTILE_OPS_FRAME_ORIGINAL);
    CHECK(st == KVTILE_OPS_SUCCESS);
    for (i = 0; i < n; ++i) {
      err += (k[i] - k2[i]) * (k[i] - k2[i]);
      ref += k[i] * k[i];
    }
    /* 4-bit keys of a uniform tile: relative error well under 20%, far from 0 */
    CHECK(err > 0 && sqrt(err / ref) < 0.2);
    free(k), free(v), free(k2), free(v2), free(rec);
  }
  {
    /* Device entry points reject bad descriptors before touching a device. */
    kvtile_ops_cache c;
    size_t ws = 0;
    memset(&c, 0, sizeof c);
    CHECK(kvtile_ops_append(NULL, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL) == KVTILE_OPS_NULL_POINTER);
    c.preset = 9;
    c.head_dim = 128;
    CHECK(kvtile_ops_prefill(&c, KVTILE_OPS_FP16, NULL, NULL, NULL, 0, NULL, NULL) == KVTILE_OPS_UNSUPPORTED_PRESET);
    CHECK(strstr(kvtile_ops_last_error(), "kvtile_ops_prefill") != NULL);
    c.preset = KVTILE_OPS_K2V2_G128;
    c.head_dim = 64;
    CHECK(kvtile_ops_decode_workspace_bytes(&c, 4, 0, &ws) == KVTILE_OPS_UNSUPPORTED_HEAD_DIM);
    CHECK(strstr(kvtile_ops_last_error(), "no device instantiation") != NULL);
    c.head_dim = 128;
    c.kv_heads = 2;
    CHECK(kvtile_ops_decode_workspace_bytes(&c, 3, 0, &ws) == KVTILE_OPS_INVALID_ARGUMENT);
    /* null pointers in a well-formed descriptor: the launcher's structural check */
    c.num_seqs = 1;
    CHECK(kvtile_ops_append(&c, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL) == KVTILE_OPS_NULL_POINTER);
    CHECK(kvtile_ops_dequantize_pages(&c, NULL, 0, NULL, NULL, KVTILE_OPS_FRAME_ORIGINAL, NULL) ==
          KVTILE_OPS_NULL_POINTER);
    CHECK(kvtile_ops_dequantize_pages(&c, NULL, 0, NULL, NULL, 5, NULL) == KVTILE_OPS_INVALID_ARGUMENT);
  }
  CHECK(kvtile_ops_supported(KVTILE_OPS_K4V2_G128, 128) == 1);
  CHECK(kvtile_ops_supported(KVTILE_OPS_K4V4_G128, 64) == 0);
  printf("kvtile_ops %s: C99 header and host codec ok\n", kvtile_ops_version());
  return 0;
}
