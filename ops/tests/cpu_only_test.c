/* ops/tests/cpu_only_test.c: a CPU-only kvtile_ops (built without CUDA,
 * src/device_none.cpp): the host codec round-trips a tile; every device
 * function returns KVTILE_OPS_NO_DEVICE with a message naming it;
 * kvtile_ops_supported() is 0 everywhere; destroying the NULL plan is a no-op. */
#include "kvtile_ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      return 1;                                                             \
    }                                                                       \
  } while (0)

/* call returns KVTILE_OPS_NO_DEVICE and the message names fn and the cause */
#define NO_DEVICE(fn, args)                                                                            \
  do {                                                                                                 \
    CHECK(fn args == KVTILE_OPS_NO_DEVICE);                                                            \
    if (strstr(kvtile_ops_last_error(), #fn ":") == NULL ||                                            \
        strstr(kvtile_ops_last_error(), "built without CUDA") == NULL) {                               \
      fprintf(stderr, "%s:%d: message '%s' lacks '%s:' or 'built without CUDA'\n", __FILE__, __LINE__, \
              kvtile_ops_last_error(), #fn);                                                           \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

int main(void) {
  const int G = 128, D = 128;
  const size_t n = (size_t)G * D;
  kvtile_ops_preset_info info;
  float *k, *v, *k2, *v2;
  unsigned char* rec;
  size_t i, ws = 0;
  double err = 0, ref = 0;
  int p, d;
  kvtile_ops_cache c;
  kvtile_ops_fp16_cache f;
  kvtile_ops_decode_params params;
  kvtile_ops_decode_plan* plan = (kvtile_ops_decode_plan*)&c; /* create must reset it */
  int32_t ctas = 0, chunks = 0, lens[1] = {0};

  /* the host codec */
  CHECK(kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, D, &info) == KVTILE_OPS_SUCCESS);
  k = malloc(n * sizeof(float));
  v = malloc(n * sizeof(float));
  k2 = malloc(n * sizeof(float));
  v2 = malloc(n * sizeof(float));
  rec = malloc((size_t)info.record_bytes);
  CHECK(k && v && k2 && v2 && rec);
  srand(1);
  for (i = 0; i < n; ++i) {
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
  }
  CHECK(kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, D, KVTILE_OPS_FP32, k, v, 1, rec, 0) == KVTILE_OPS_SUCCESS);
  CHECK(kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec, (size_t)info.record_bytes, 1, KVTILE_OPS_FP32, k2, v2,
                                     KVTILE_OPS_FRAME_ORIGINAL) == KVTILE_OPS_SUCCESS);
  for (i = 0; i < n; ++i) {
    err += (k[i] - k2[i]) * (k[i] - k2[i]);
    ref += k[i] * k[i];
  }
  CHECK(err > 0 && sqrt(err / ref) < 0.2); /* 4-bit keys of a uniform tile */
  CHECK(kvtile_ops_get_preset_info(7, D, &info) == KVTILE_OPS_UNSUPPORTED_PRESET);
  free(k), free(v), free(k2), free(v2), free(rec);

  /* the device functions */
  for (p = 0; p < KVTILE_OPS_NUM_PRESETS; ++p)
    for (d = 64; d <= 256; d *= 2) CHECK(kvtile_ops_supported(p, d) == 0);
  memset(&c, 0, sizeof c);
  memset(&f, 0, sizeof f);
  memset(&params, 0, sizeof params);
  c.head_dim = f.head_dim = D;
  c.kv_heads = f.kv_heads = 1;
  NO_DEVICE(kvtile_ops_prefill, (&c, KVTILE_OPS_FP16, NULL, NULL, NULL, 0, NULL, NULL));
  NO_DEVICE(kvtile_ops_append, (&c, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL));
  NO_DEVICE(kvtile_ops_dequantize_pages, (&c, NULL, 0, NULL, NULL, KVTILE_OPS_FRAME_ORIGINAL, NULL));
  NO_DEVICE(kvtile_ops_decode_params_init, (&params, sizeof params));
  NO_DEVICE(kvtile_ops_decode_workspace_bytes, (&c, &params, &ws));
  NO_DEVICE(kvtile_ops_decode, (&c, &params, NULL));
  NO_DEVICE(kvtile_ops_fp16_decode_workspace_bytes, (&f, &params, &ws));
  NO_DEVICE(kvtile_ops_fp16_decode, (&f, &params, NULL));
  NO_DEVICE(kvtile_ops_decode_plan_create, (&plan));
  CHECK(plan == NULL);
  CHECK(kvtile_ops_decode_plan_destroy(NULL) == KVTILE_OPS_SUCCESS);
  NO_DEVICE(kvtile_ops_decode_plan_limit_ctas, (plan, 0));
  NO_DEVICE(kvtile_ops_decode_plan_info, (plan, &ctas, &chunks));
  NO_DEVICE(kvtile_ops_decode_plan_build, (plan, &c, lens, NULL, &params, NULL));
  NO_DEVICE(kvtile_ops_decode_plan_run, (plan, &c, &params, NULL));
  NO_DEVICE(kvtile_ops_decode_plan_build_fp16, (plan, &f, lens, &params, NULL));
  NO_DEVICE(kvtile_ops_decode_plan_run_fp16, (plan, &f, &params, NULL));
  NO_DEVICE(kvtile_ops_append_drafts, (&c, NULL, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL, NULL));
  NO_DEVICE(kvtile_ops_commit_drafts, (&c, NULL, NULL, NULL, NULL, NULL));
  NO_DEVICE(kvtile_ops_fork, (&c, NULL, NULL, NULL, 0, NULL, NULL));
  printf("cpu_only: the host codec works, every device function answers no_device\n");
  return 0;
}
