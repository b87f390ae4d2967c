/* ops/tests/c99_test.c: kvtile_ops.h compiles as C99 and the library's host
 * codec round-trips a tile; a bad preset gives a status and a message; the
 * decode params, decode and plan / run functions reject bad arguments (no GPU
 * needed: every call here fails before touching a device). */
#include "kvtile_ops.h"

#include <math.h>
#include <stdint.h>
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
    st = kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec, (size_t)info.record_bytes - 1, 1, KVTILE_OPS_FP32,
                                      k2, v2, KVTILE_OPS_FRAME_ORIGINAL);
    CHECK(st == KVTILE_OPS_TRUNCATED_RECORD); /* one byte short: refused before any read */
    st = kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, D, rec, (size_t)info.record_bytes, 1, KVTILE_OPS_FP32, k2,
                                      v2, KVTILE_OPS_FRAME_ORIGINAL);
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
    kvtile_ops_decode_params wp;
    size_t ws = 0;
    memset(&c, 0, sizeof c);
    CHECK(kvtile_ops_decode_params_init(&wp, sizeof wp) == KVTILE_OPS_SUCCESS);
    wp.q_heads = 4;
    CHECK(kvtile_ops_append(NULL, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL) == KVTILE_OPS_NULL_POINTER);
    c.preset = 9;
    c.head_dim = 128;
    CHECK(kvtile_ops_prefill(&c, KVTILE_OPS_FP16, NULL, NULL, NULL, 0, NULL, NULL) == KVTILE_OPS_UNSUPPORTED_PRESET);
    CHECK(strstr(kvtile_ops_last_error(), "kvtile_ops_prefill") != NULL);
    c.preset = KVTILE_OPS_K2V2_G128;
    c.head_dim = 64;
    CHECK(kvtile_ops_decode_workspace_bytes(&c, &wp, &ws) == KVTILE_OPS_UNSUPPORTED_HEAD_DIM);
    CHECK(strstr(kvtile_ops_last_error(), "no device instantiation") != NULL);
    c.head_dim = 128;
    c.kv_heads = 2;
    wp.q_heads = 3;
    CHECK(kvtile_ops_decode_workspace_bytes(&c, &wp, &ws) == KVTILE_OPS_INVALID_ARGUMENT);
    /* null pointers in a well-formed descriptor: the launcher's structural check */
    c.num_seqs = 1;
    CHECK(kvtile_ops_append(&c, KVTILE_OPS_FP16, NULL, NULL, NULL, NULL) == KVTILE_OPS_NULL_POINTER);
    CHECK(kvtile_ops_dequantize_pages(&c, NULL, 0, NULL, NULL, KVTILE_OPS_FRAME_ORIGINAL, NULL) ==
          KVTILE_OPS_NULL_POINTER);
    CHECK(kvtile_ops_dequantize_pages(&c, NULL, 0, NULL, NULL, 5, NULL) == KVTILE_OPS_INVALID_ARGUMENT);
  }
  {
    /* Decode params, the decode functions and plan / run: every bad argument is
     * rejected with a status and a message before any device is touched. */
    kvtile_ops_cache c;
    kvtile_ops_fp16_cache f;
    kvtile_ops_decode_params p;
    kvtile_ops_decode_plan* plan = NULL;
    size_t ws = 0;
    int32_t ctas = -1, chunks = -1, lens[2] = {5, 0};
    static const int32_t fake_indptr[3] = {0, 1, 2}; /* a non-null pointer; never read on these paths */
    int32_t host_indptr[3] = {0, 3, 4}; /* counts 3 and 1 */
    float fake_io[8];
    unsigned char fake_ws_bytes[64];
    void* fake_ws = (void*)(((uintptr_t)fake_ws_bytes + 15) & ~(uintptr_t)15);
    memset(&c, 0, sizeof c);
    memset(&f, 0, sizeof f);
    c.preset = KVTILE_OPS_K4V2_G128;
    c.head_dim = 128;
    c.kv_heads = 2;
    c.num_seqs = 2;
    c.max_pages_per_seq = 3;
    f.head_dim = 128;
    f.kv_heads = 2;
    f.num_seqs = 2;
    f.max_pages_per_seq = 3;

    CHECK(kvtile_ops_decode_params_init(NULL, sizeof p) == KVTILE_OPS_NULL_POINTER);
    CHECK(kvtile_ops_decode_params_init(&p, sizeof p - 4) == KVTILE_OPS_INVALID_ARGUMENT);
    CHECK(strstr(kvtile_ops_last_error(), "struct_size") != NULL);
    CHECK(kvtile_ops_decode_params_init(&p, sizeof p) == KVTILE_OPS_SUCCESS);
    CHECK(p.struct_size == sizeof p && p.max_q_tokens == 1 && p.window_left == -1 && p.logit_softcap == 0.0f);
    CHECK(p.q_dtype == KVTILE_OPS_FP16 && p.qo_indptr == NULL && p.num_splits == 0);

#define RESET_PARAMS()                                           \
  do {                                                           \
    CHECK(kvtile_ops_decode_params_init(&p, sizeof p) == 0);     \
    p.q_heads = 4;                                               \
    p.q = fake_io;                                               \
    p.out = fake_io;                                             \
    p.softmax_scale = 0.125f;                                    \
    p.workspace = fake_ws;                                       \
    p.workspace_bytes = 1u << 20;                                \
  } while (0)
/* call gives status, and the message contains text */
#define EXPECT(call, status, text)                                                     \
  do {                                                                                 \
    CHECK((call) == (status));                                                         \
    if (strstr(kvtile_ops_last_error(), (text)) == NULL) {                             \
      fprintf(stderr, "%s:%d: message '%s' lacks '%s'\n", __FILE__, __LINE__,          \
              kvtile_ops_last_error(), (text));                                        \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

    RESET_PARAMS();
    EXPECT(kvtile_ops_decode(NULL, &p, NULL), KVTILE_OPS_NULL_POINTER, "cache descriptor is NULL");
    EXPECT(kvtile_ops_decode(&c, NULL, NULL), KVTILE_OPS_NULL_POINTER, "params is NULL");
    p.struct_size = 8;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "struct_size 8");
    RESET_PARAMS();
    p.q_dtype = KVTILE_OPS_FP32;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_UNSUPPORTED_DTYPE, "fp16 or bf16");
    RESET_PARAMS();
    p.qo_indptr = fake_indptr;
    p.max_q_tokens = 9;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "max_q_tokens 9 is not in [1, 8]");
    p.max_q_tokens = 0;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "max_q_tokens 0");
    p.qo_indptr = NULL;
    p.max_q_tokens = 4;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "needs qo_indptr");
    RESET_PARAMS();
    p.window_left = -2;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "window_left -2");
    RESET_PARAMS();
    p.logit_softcap = (float)NAN;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "logit_softcap");
    p.logit_softcap = (float)INFINITY;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "logit_softcap");
    p.logit_softcap = -1.0f;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "logit_softcap");
    RESET_PARAMS();
    p.softmax_scale = 0.0f;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "softmax_scale");
    RESET_PARAMS();
    p.num_splits = -1;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "num_splits");
    RESET_PARAMS();
    p.workspace = NULL;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_NULL_POINTER, "workspace is NULL");
    p.workspace = (unsigned char*)fake_ws + 4;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_MISALIGNED, "16-byte aligned");
    RESET_PARAMS();
    p.q = NULL;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_NULL_POINTER, "q or out is NULL");
    RESET_PARAMS();
    p.q_heads = 3;
    EXPECT(kvtile_ops_decode(&c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "multiple of kv_heads 2");
    /* the workspace query reads sizes only, and checks the same ranges */
    RESET_PARAMS();
    EXPECT(kvtile_ops_decode_workspace_bytes(&c, &p, NULL), KVTILE_OPS_NULL_POINTER, "bytes is NULL");
    p.max_q_tokens = 9;
    EXPECT(kvtile_ops_decode_workspace_bytes(&c, &p, &ws), KVTILE_OPS_INVALID_ARGUMENT, "max_q_tokens 9");
    p.max_q_tokens = 2;
    p.q_heads = 5;
    EXPECT(kvtile_ops_decode_workspace_bytes(&c, &p, &ws), KVTILE_OPS_INVALID_ARGUMENT, "multiple of kv_heads");
    /* the fp16 baseline: one token per sequence */
    RESET_PARAMS();
    p.qo_indptr = fake_indptr;
    p.max_q_tokens = 2;
    EXPECT(kvtile_ops_fp16_decode(&f, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "one token per sequence");
    RESET_PARAMS();
    p.logit_softcap = -3.0f;
    EXPECT(kvtile_ops_fp16_decode(&f, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "logit_softcap");
    EXPECT(kvtile_ops_fp16_decode(NULL, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "logit_softcap");
    RESET_PARAMS();
    EXPECT(kvtile_ops_fp16_decode(NULL, &p, NULL), KVTILE_OPS_NULL_POINTER, "cache is NULL");
    /* the fp16 baseline's workspace query: the same checks, sizes only */
    EXPECT(kvtile_ops_fp16_decode_workspace_bytes(&f, &p, NULL), KVTILE_OPS_NULL_POINTER, "bytes is NULL");
    EXPECT(kvtile_ops_fp16_decode_workspace_bytes(NULL, &p, &ws), KVTILE_OPS_NULL_POINTER, "cache is NULL");
    p.q_heads = 3;
    EXPECT(kvtile_ops_fp16_decode_workspace_bytes(&f, &p, &ws), KVTILE_OPS_INVALID_ARGUMENT, "multiple of kv_heads 2");
    RESET_PARAMS();
    p.num_splits = -1;
    EXPECT(kvtile_ops_fp16_decode_workspace_bytes(&f, &p, &ws), KVTILE_OPS_INVALID_ARGUMENT, "num_splits");

    /* plan / run */
    EXPECT(kvtile_ops_decode_plan_create(NULL), KVTILE_OPS_NULL_POINTER, "plan is NULL");
    CHECK(kvtile_ops_decode_plan_create(&plan) == KVTILE_OPS_SUCCESS && plan != NULL);
    CHECK(kvtile_ops_decode_plan_info(plan, &ctas, &chunks) == KVTILE_OPS_SUCCESS && ctas == 0 && chunks == 0);
    EXPECT(kvtile_ops_decode_plan_limit_ctas(plan, -1), KVTILE_OPS_INVALID_ARGUMENT, "max_ctas -1");
    CHECK(kvtile_ops_decode_plan_limit_ctas(plan, 0) == KVTILE_OPS_SUCCESS);
    RESET_PARAMS();
    EXPECT(kvtile_ops_decode_plan_run(plan, &c, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "has not been planned");
    EXPECT(kvtile_ops_decode_plan_run_fp16(plan, &f, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "has not been planned");
    EXPECT(kvtile_ops_decode_plan_run(NULL, &c, &p, NULL), KVTILE_OPS_NULL_POINTER, "plan is NULL");
    EXPECT(kvtile_ops_decode_plan_build(NULL, &c, lens, NULL, &p, NULL), KVTILE_OPS_NULL_POINTER, "plan is NULL");
    EXPECT(kvtile_ops_decode_plan_build(plan, NULL, lens, NULL, &p, NULL), KVTILE_OPS_NULL_POINTER, "cache descriptor");
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, NULL, NULL, &p, NULL), KVTILE_OPS_NULL_POINTER, "host_seq_lens is NULL");
    /* capacity of 3 pages of 128 tokens plus a tail: 511 */
    lens[1] = 512;
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, NULL, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "host_seq_lens[1] = 512 is outside [0, 511]");
    lens[1] = -1;
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, NULL, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "host_seq_lens[1] = -1");
    lens[1] = 0;
    p.window_left = -5;
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, NULL, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT, "window_left -5");
    /* the host copy of qo_indptr: only with qo_indptr, every count in [0, max_q_tokens] */
    RESET_PARAMS();
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, host_indptr, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "host_qo_indptr 0 needs qo_indptr");
    p.qo_indptr = fake_indptr;
    p.max_q_tokens = 2;
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, host_indptr, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "host_qo_indptr 3 has a count (new tokens of a sequence) outside [0, max_q_tokens]");
    host_indptr[1] = 2; /* counts 2 and -1 */
    host_indptr[2] = 1;
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, host_indptr, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "host_qo_indptr -1 has a count");
    /* plan ignores q and out; run needs them */
    RESET_PARAMS();
    p.q = NULL;
    EXPECT(kvtile_ops_decode_plan_run(plan, &c, &p, NULL), KVTILE_OPS_NULL_POINTER, "q or out is NULL");
    c.preset = 5;
    RESET_PARAMS();
    EXPECT(kvtile_ops_decode_plan_build(plan, &c, lens, NULL, &p, NULL), KVTILE_OPS_UNSUPPORTED_PRESET, "preset 5");
    c.preset = KVTILE_OPS_K4V2_G128;
    /* fp16: capacity 3 pages of 64 tokens */
    lens[0] = 193;
    EXPECT(kvtile_ops_decode_plan_build_fp16(plan, &f, lens, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "host_seq_lens[0] = 193 is outside [0, 192]");
    p.qo_indptr = fake_indptr;
    p.max_q_tokens = 2;
    EXPECT(kvtile_ops_decode_plan_build_fp16(plan, &f, lens, &p, NULL), KVTILE_OPS_INVALID_ARGUMENT,
           "one token per sequence");
    CHECK(kvtile_ops_decode_plan_info(plan, &ctas, &chunks) == KVTILE_OPS_SUCCESS && ctas == 0);
    CHECK(kvtile_ops_decode_plan_destroy(plan) == KVTILE_OPS_SUCCESS);
    /* A second destroy is refused before the freed handle is read (ASan: no use after free). */
    EXPECT(kvtile_ops_decode_plan_destroy(plan), KVTILE_OPS_INVALID_ARGUMENT, "not a live plan");
    CHECK(kvtile_ops_decode_plan_destroy(NULL) == KVTILE_OPS_SUCCESS);
#undef RESET_PARAMS
#undef EXPECT
  }
  CHECK(kvtile_ops_supported(KVTILE_OPS_K4V2_G128, 128) == 1);
  CHECK(kvtile_ops_supported(KVTILE_OPS_K4V4_G128, 64) == 0);
  printf("kvtile_ops %s: C99 header, host codec and decode argument checks ok\n", kvtile_ops_version());
  return 0;
}
