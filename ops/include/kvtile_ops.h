/* kvtile_ops.h: the C ABI of libkvtile_ops, a prebuilt instantiation of kvtile's
 * header-only templates (host codec, paged store, page dequantization, decode
 * attention) behind extern "C" functions over plain pointers, sizes, a CUDA
 * stream and a preset/shape descriptor. C99, no CUDA headers needed.
 *
 * Instantiated set (kvtile_ops_supported() answers at run time):
 *   presets    KVTILE_OPS_K4V2_G128, KVTILE_OPS_K4V4_G128, KVTILE_OPS_K2V2_G128
 *              (KVarN: Hadamard, Sinkhorn(2), RTN, FP8 E4M3 scales; the
 *              kvtile::presets aliases of the same names)
 *   head_dim   device functions: k4v2_g128 at 64, 128 and 256; k4v4_g128 and
 *              k2v2_g128 at 128 (each (preset, head_dim) is one translation
 *              unit; the set is kept small for build time). Host codec: all
 *              three presets at 64, 128 and 256.
 *   tokens     fp16 or bf16 (prefill, append); queries fp16 or bf16 (decode)
 * The host codec functions (kvtile_ops_encode_tiles_host,
 * kvtile_ops_decode_tiles_host) need no GPU.
 *
 * Every function returns a kvtile_ops_status (0 = success). On failure,
 * kvtile_ops_last_error() returns a message for the calling thread that names
 * the function and the argument. Memory layouts are those of
 * kvtile/paged/paged_cache.hpp; docs/python.md describes the lifecycle.
 */
#ifndef KVTILE_OPS_H
#define KVTILE_OPS_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVTILE_OPS_API
#else
#define KVTILE_OPS_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The same type as cudaStream_t (struct CUstream_st*); NULL = legacy default stream. */
typedef struct CUstream_st* kvtile_ops_stream;

/* Values of kvtile::status, plus the ABI's own. */
typedef enum kvtile_ops_status {
  KVTILE_OPS_SUCCESS = 0,
  KVTILE_OPS_NON_FINITE_INPUT = 1, /* warning: NaN/Inf inputs were replaced by 0, output written */
  KVTILE_OPS_NULL_POINTER = 2,
  KVTILE_OPS_INVALID_ARGUMENT = 3,
  KVTILE_OPS_MISALIGNED = 4,
  KVTILE_OPS_UNSUPPORTED_HEAD_DIM = 5,
  KVTILE_OPS_UNSUPPORTED_TILE_TOKENS = 6,
  KVTILE_OPS_UNSUPPORTED_BITS = 7,
  KVTILE_OPS_UNSUPPORTED_DTYPE = 8,
  KVTILE_OPS_OUT_OF_RANGE = 9,
  KVTILE_OPS_CORRUPT_RECORD = 10,
  KVTILE_OPS_INSUFFICIENT_SPACE = 11,
  KVTILE_OPS_CUDA_ERROR = 12,
  KVTILE_OPS_NO_DEVICE = 13,
  KVTILE_OPS_UNSUPPORTED_ARCH = 14, /* the GPU cannot run the kernel (architecture, code in the binary, shared memory) */
  KVTILE_OPS_TRUNCATED_RECORD = 15, /* a records buffer is shorter than num_tiles * record_bytes */
  KVTILE_OPS_UNSUPPORTED_PRESET = 100 /* preset id not in the instantiated set */
} kvtile_ops_status;

typedef enum kvtile_ops_preset {
  KVTILE_OPS_K4V2_G128 = 0, /* the default: 4-bit keys, 2-bit values, 128-token tiles */
  KVTILE_OPS_K4V4_G128 = 1,
  KVTILE_OPS_K2V2_G128 = 2,
  KVTILE_OPS_NUM_PRESETS = 3
} kvtile_ops_preset;

typedef enum kvtile_ops_dtype {
  KVTILE_OPS_FP16 = 0,
  KVTILE_OPS_BF16 = 1,
  KVTILE_OPS_FP32 = 2 /* host codec only */
} kvtile_ops_dtype;

typedef enum kvtile_ops_frame {
  KVTILE_OPS_FRAME_ORIGINAL = 0, /* the rotation undone (the default everywhere) */
  KVTILE_OPS_FRAME_ROTATED = 1
} kvtile_ops_frame;

/* What a (preset, head_dim) stores. */
typedef struct kvtile_ops_preset_info {
  int32_t tile_tokens;  /* G */
  int32_t key_bits;
  int32_t value_bits;
  int64_t record_bytes; /* one record: one (page, KV head), G tokens of K and V */
  double bits_per_element;
} kvtile_ops_preset_info;

/* A paged quantized cache (kvtile::paged_cache_view). Device pointers.
 *   pages       [num_pages][kv_heads][record_bytes] uint8, 16-byte aligned
 *   page_table  [num_seqs][max_pages_per_seq] int32
 *   seq_lens    [num_seqs] int32 (lengths that already include the tokens a
 *               prefill/append writes)
 *   tail_k/v    [num_slots][kv_heads][G][head_dim] fp16, rotated frame
 *   sink_k/v    same shape, or both NULL (sink off)
 *   tail_slots  [num_seqs] int32 slot of each sequence in the tail/sink pools,
 *               or NULL (slot = sequence index; then num_slots >= num_seqs or 0) */
typedef struct kvtile_ops_cache {
  int32_t preset; /* kvtile_ops_preset */
  int32_t head_dim;
  int32_t kv_heads;
  int32_t num_seqs;
  int32_t max_pages_per_seq;
  int32_t num_pages;
  int32_t num_slots;
  void* pages;
  const int32_t* page_table;
  const int32_t* seq_lens;
  void* tail_k;
  void* tail_v;
  void* sink_k;
  void* sink_v;
  const int32_t* tail_slots;
} kvtile_ops_cache;

/* An fp16 paged cache (kvtile::fp16_paged_cache_view), for the fp16 decode
 * baseline: k, v [num_pages][kv_heads][page_tokens = 64][head_dim] fp16, original frame. */
typedef struct kvtile_ops_fp16_cache {
  int32_t head_dim;
  int32_t kv_heads;
  int32_t num_seqs;
  int32_t max_pages_per_seq;
  int32_t num_pages;
  void* k;
  void* v;
  const int32_t* page_table;
  const int32_t* seq_lens;
} kvtile_ops_fp16_cache;

/* ---- information ---------------------------------------------------------- */
KVTILE_OPS_API const char* kvtile_ops_status_string(int status);
/* Message of the calling thread's last failed call ("" if none). */
KVTILE_OPS_API const char* kvtile_ops_last_error(void);
KVTILE_OPS_API const char* kvtile_ops_version(void);
KVTILE_OPS_API const char* kvtile_ops_preset_name(int preset);
/* 1 when the device functions exist for (preset, head_dim), 0 otherwise. */
KVTILE_OPS_API int kvtile_ops_supported(int preset, int head_dim);
KVTILE_OPS_API int kvtile_ops_get_preset_info(int preset, int head_dim, kvtile_ops_preset_info* info);
/* Tokens per page of the fp16 baseline cache (64). */
KVTILE_OPS_API int32_t kvtile_ops_fp16_page_tokens(void);
/* The rules of the decode options alone, in CPU-only builds too: what the
 * decode, plan, run and workspace functions check in params (q_heads > 0,
 * max_q_tokens in [1, 8], window_left >= -1, logit_softcap >= 0 and finite,
 * num_splits in [0, 4096]; with need_io != 0 also max_q_tokens > 1 only with
 * qo_indptr (has_qo_indptr != 0) and softmax_scale > 0 and finite), for a
 * binding that checks its arguments before it has tensors. KVTILE_OPS_SUCCESS,
 * or KVTILE_OPS_INVALID_ARGUMENT with a message naming the option, its value
 * and the rule. */
KVTILE_OPS_API int kvtile_ops_check_decode_options(int32_t q_heads, int32_t max_q_tokens, int has_qo_indptr,
                                                   int32_t window_left, float logit_softcap, int32_t num_splits,
                                                   int need_io, float softmax_scale);

/* ---- host codec (no GPU) --------------------------------------------------- */
/* Encodes num_tiles tiles: keys/values [num_tiles][G][head_dim] in dtype
 * (fp16, bf16 or fp32), records [num_tiles][record_bytes]. paged = 0: the
 * codec of the preset (kvtile::presets::...::encode). paged = 1: the record the
 * paged store writes for these tokens (rotation, fp16 rounding, then the codec
 * with identity rotation: byte-identical to prefill/append's pages). Tiles are
 * independent; a non-finite input gives KVTILE_OPS_NON_FINITE_INPUT (records written).
 * A value the record cannot hold gives KVTILE_OPS_OUT_OF_RANGE naming the tile
 * (tiles before it are written): paged = 0, |x| > 2^48; paged = 1, a rotated
 * value beyond fp16's +-65504 (the paged store saturates it and sets
 * paged_flag_saturated; its record would not be the input's). */
KVTILE_OPS_API int kvtile_ops_encode_tiles_host(int preset, int head_dim, int dtype, const void* keys,
                                                const void* values, int64_t num_tiles, void* records, int paged);
/* Decodes num_tiles records into keys/values [num_tiles][G][head_dim] (dtype
 * fp16, bf16 or fp32) in the given frame (kvtile_ops_frame). records_bytes is
 * the size of the records buffer: shorter than num_tiles * record_bytes gives
 * KVTILE_OPS_TRUNCATED_RECORD before anything is read (0.2: this parameter is new). */
KVTILE_OPS_API int kvtile_ops_decode_tiles_host(int preset, int head_dim, const void* records, size_t records_bytes,
                                                int64_t num_tiles, int dtype, void* keys, void* values, int frame);

/* ---- paged store (device) ---------------------------------------------------- */
/* k, v: [total_tokens][kv_heads][head_dim] in dtype (fp16/bf16), sequence s at
 * rows [cu_seqlens[s], cu_seqlens[s+1]) (device int32, num_seqs + 1 entries);
 * max_tokens_per_seq bounds the chunk lengths; flags: optional [num_seqs]
 * int32 (kvtile::device::paged_flag bits OR-ed in). */
KVTILE_OPS_API int kvtile_ops_prefill(const kvtile_ops_cache* cache, int dtype, const void* k, const void* v,
                                      const int32_t* cu_seqlens, int64_t max_tokens_per_seq, int32_t* flags,
                                      kvtile_ops_stream stream);
/* k_new, v_new: [num_seqs][kv_heads][head_dim], one token per sequence with seq_lens > 0. */
KVTILE_OPS_API int kvtile_ops_append(const kvtile_ops_cache* cache, int dtype, const void* k_new, const void* v_new,
                                     int32_t* flags, kvtile_ops_stream stream);
/* Pages page_ids[0..count) -> out_k, out_v [count][kv_heads][G][head_dim] fp16. */
KVTILE_OPS_API int kvtile_ops_dequantize_pages(const kvtile_ops_cache* cache, const int32_t* page_ids, int32_t count,
                                               void* out_k, void* out_v, int frame, kvtile_ops_stream stream);

/* ---- decode attention (device): one call, or plan / run ------------------------- */
/* Most new query tokens per sequence of a multi-query step. */
#define KVTILE_OPS_MAX_Q_TOKENS 8

/* The arguments of kvtile_ops_decode, kvtile_ops_fp16_decode and the plan /
 * run functions. Versioned by struct_size: call
 * kvtile_ops_decode_params_init(&p, sizeof p) first (it zeroes the struct and
 * sets the defaults below), then set the fields. */
typedef struct kvtile_ops_decode_params {
  size_t struct_size;        /* sizeof(kvtile_ops_decode_params) as the caller compiled it */
  int32_t q_dtype;           /* KVTILE_OPS_FP16 (default) or KVTILE_OPS_BF16 */
  int32_t q_heads;           /* a positive multiple of kv_heads */
  const void* q;             /* [rows][q_heads][head_dim], original frame; rows = num_seqs, or
                                qo_indptr[num_seqs] with qo_indptr */
  void* out;                 /* same shape and dtype as q */
  float* lse;                /* [rows][q_heads] fp32 (ln sum exp of the scores; -inf for no key) or NULL */
  float softmax_scale;       /* > 0, finite (usually 1 / sqrt(head_dim)) */
  float logit_softcap;       /* 0 (default): off; > 0 and finite: each score s becomes cap * tanh(s / cap) */
  int32_t window_left;       /* -1 (default): no window; >= 0: the query at position p attends the
                                keys at positions p - window_left .. p (window_left + 1 tokens) */
  int32_t max_q_tokens;      /* 1 (default) .. KVTILE_OPS_MAX_Q_TOKENS: bound on any sequence's new
                                tokens; 1 without qo_indptr */
  const int32_t* qo_indptr;  /* NULL (default): one query token per sequence. Otherwise device int32
                                [num_seqs + 1], nondecreasing (cu_seqlens style): sequence s has
                                n_s = qo_indptr[s+1] - qo_indptr[s] new tokens (0 allowed; clamped
                                to max_q_tokens), the last n_s positions of its seq_lens[s],
                                query rows qo_indptr[s] .. +n_s-1; new token i attends positions
                                < seq_lens[s] - (n_s - 1 - i) (causal among the new tokens) */
  int32_t num_splits;        /* 0 (default): automatic; > 0: every sequence cut into this many chunks */
  void* workspace;           /* kvtile_ops_decode_workspace_bytes() bytes, 16-byte aligned */
  size_t workspace_bytes;
} kvtile_ops_decode_params;

/* Zeroes *params and sets struct_size and the defaults; struct_size must be
 * sizeof(kvtile_ops_decode_params) of the caller's header. */
KVTILE_OPS_API int kvtile_ops_decode_params_init(kvtile_ops_decode_params* params, size_t struct_size);
/* Workspace of kvtile_ops_decode and of a plan for these params (q_heads,
 * max_q_tokens, num_splits are read) on the current device. */
KVTILE_OPS_API int kvtile_ops_decode_workspace_bytes(const kvtile_ops_cache* cache,
                                                     const kvtile_ops_decode_params* params, size_t* bytes);
/* One decode step in one call (no host lengths): q, out [rows][q_heads][head_dim]
 * in q_dtype, original frame; window, soft-cap and multi-query as params says.
 * num_splits 0 = automatic. Capturable in a CUDA graph once the same
 * configuration has run once outside the capture. */
KVTILE_OPS_API int kvtile_ops_decode(const kvtile_ops_cache* cache, const kvtile_ops_decode_params* params,
                                     kvtile_ops_stream stream);
/* The same over an fp16 paged cache (the baseline kernel), one token per
 * sequence (qo_indptr NULL, max_q_tokens 1); its workspace (q_heads and
 * num_splits are read). */
KVTILE_OPS_API int kvtile_ops_fp16_decode_workspace_bytes(const kvtile_ops_fp16_cache* cache,
                                                          const kvtile_ops_decode_params* params, size_t* bytes);
KVTILE_OPS_API int kvtile_ops_fp16_decode(const kvtile_ops_fp16_cache* cache, const kvtile_ops_decode_params* params,
                                          kvtile_ops_stream stream);

/* A decode step split into a host plan and a launch (kvtile::attention::decode_plan).
 *   kvtile_ops_decode_plan_create(&plan);
 *   per step: kvtile_ops_decode_plan_build(plan, &cache, host_seq_lens, host_qo_indptr, &params, stream);
 *                                                                                    (outside any capture)
 *             kvtile_ops_decode_plan_run(plan, &cache, &params, stream);  (capturable in a CUDA graph)
 *   kvtile_ops_decode_plan_destroy(plan);
 * plan reads a HOST copy of the lengths (the values seq_lens will hold on the
 * device when run executes; in [0, capacity]), balances the work over the SMs
 * and copies a work list into params.workspace on stream. run launches with a
 * grid fixed by the plan: capture it once and, before each replay, plan again
 * with the new lengths. run must use the planned cache shape (preset,
 * head_dim, kv_heads, num_seqs, max_pages_per_seq) and params (q_dtype,
 * q_heads, max_q_tokens, qo_indptr, window_left, num_splits, workspace,
 * workspace_bytes; q, out, lse, softmax_scale and logit_softcap may change);
 * otherwise it returns KVTILE_OPS_INVALID_ARGUMENT naming the field. The device
 * lengths are not read by the host: if they differ from the planned ones the
 * result is wrong but every read stays within the page table, tails and sinks.
 * plan ignores q, out and lse (NULL allowed). Another decode or plan on the
 * same workspace overwrites the work list. A plan is used by one thread at a
 * time. */
typedef struct kvtile_ops_decode_plan kvtile_ops_decode_plan;
KVTILE_OPS_API int kvtile_ops_decode_plan_create(kvtile_ops_decode_plan** plan);
/* Destroys a plan made by kvtile_ops_decode_plan_create; NULL is a no-op.
 * Destroy each plan exactly once: afterwards the handle is invalid (like
 * free()). A handle that is not a live plan of this library (destroyed
 * already, or never created) is refused with KVTILE_OPS_INVALID_ARGUMENT and
 * nothing is freed, unless its address has been reused by a newer plan
 * (which it then destroys): do not rely on the check. */
KVTILE_OPS_API int kvtile_ops_decode_plan_destroy(kvtile_ops_decode_plan* plan);
/* At most max_ctas persistent CTAs from the next plan on (0: one per SM). */
KVTILE_OPS_API int kvtile_ops_decode_plan_limit_ctas(kvtile_ops_decode_plan* plan, int32_t max_ctas);
/* The grid of run and the partial results of the last successful plan. */
KVTILE_OPS_API int kvtile_ops_decode_plan_info(const kvtile_ops_decode_plan* plan, int32_t* ctas, int32_t* chunks);
/* host_qo_indptr: NULL, or (multi-query) a HOST copy of params->qo_indptr
 * (num_seqs + 1 offsets, the values it will hold when run executes; every
 * count in [0, max_q_tokens], else KVTILE_OPS_INVALID_ARGUMENT): each sequence
 * is then planned for its own new tokens, so a ragged speculative batch costs
 * its rows, not num_seqs x max_q_tokens. NULL plans every sequence at
 * max_q_tokens. Device counts above the planned ones give a wrong result
 * (like the lengths), never a read outside the cache. */
KVTILE_OPS_API int kvtile_ops_decode_plan_build(kvtile_ops_decode_plan* plan, const kvtile_ops_cache* cache,
                                          const int32_t* host_seq_lens, const int32_t* host_qo_indptr,
                                          const kvtile_ops_decode_params* params, kvtile_ops_stream stream);
KVTILE_OPS_API int kvtile_ops_decode_plan_run(const kvtile_ops_decode_plan* plan, const kvtile_ops_cache* cache,
                                         const kvtile_ops_decode_params* params, kvtile_ops_stream stream);
/* The same over an fp16 paged cache (qo_indptr NULL). */
KVTILE_OPS_API int kvtile_ops_decode_plan_build_fp16(kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* cache,
                                               const int32_t* host_seq_lens, const kvtile_ops_decode_params* params,
                                               kvtile_ops_stream stream);
KVTILE_OPS_API int kvtile_ops_decode_plan_run_fp16(const kvtile_ops_decode_plan* plan, const kvtile_ops_fp16_cache* cache,
                                              const kvtile_ops_decode_params* params, kvtile_ops_stream stream);


/* ---- speculative decoding and forks ----------------------------------------------
 * docs/api.md ("Speculative decoding and shared prefixes") has the lifecycle:
 * append drafts (seq_lens already include them), verify (decode with
 * qo_indptr = cu_drafts), commit the accepted prefix per row (0 = roll back);
 * fork a slot. The staging area of a cache (kvtile::draft_view):
 *   draft_k/v    [num_slots][kv_heads][G + KVTILE_OPS_MAX_DRAFT_TOKENS][head_dim] fp16, 16-byte aligned
 *   draft_state  [num_slots][kv_heads][2] int32, zeroed once at allocation (= no drafts pending)
 * A row that breaks the draft rules (drafts while drafts are pending, more
 * than 8 or more than seq_lens drafts, commit with nothing pending or of more
 * than appended, fork of a slot with pending drafts) is skipped and gets
 * KVTILE_OPS_FLAG_BAD_DRAFTS in flags. Every device function here launches
 * without host synchronization (capturable in a CUDA graph). */
#define KVTILE_OPS_MAX_DRAFT_TOKENS 8
#define KVTILE_OPS_FLAG_BAD_DRAFTS 32 /* kvtile::device::paged_flag_bad_drafts */

typedef struct kvtile_ops_drafts {
  void* draft_k;
  void* draft_v;
  int32_t* draft_state;
} kvtile_ops_drafts;

/* Bytes of the staging area and state for num_slots slots (no GPU needed). */
KVTILE_OPS_API int kvtile_ops_draft_bytes(int preset, int head_dim, int32_t num_slots, int32_t kv_heads,
                                          int64_t* bytes);
/* k, v [total][kv_heads][head_dim] (fp16/bf16), row s at [cu_drafts[s], cu_drafts[s+1])
 * (device int32, num_seqs + 1 entries), 0..8 per row; rows with seq_lens 0 and no
 * drafts are skipped. Tiles the drafts complete are quantized as append would. */
KVTILE_OPS_API int kvtile_ops_append_drafts(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts, int dtype,
                                            const void* k, const void* v, const int32_t* cu_drafts, int32_t* flags,
                                            kvtile_ops_stream stream);
/* accepted: device int32 [num_seqs], drafts kept per row (0 = roll back; < 0 = row
 * skipped). new_seq_lens: optional device int32 [num_seqs], written with the committed
 * lengths (may be cache->seq_lens itself). */
KVTILE_OPS_API int kvtile_ops_commit_drafts(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts,
                                            const int32_t* accepted, int32_t* new_seq_lens, int32_t* flags,
                                            kvtile_ops_stream stream);
/* Slot dst_slots[i] gets slot src_slots[i]'s tail and sink (device int32 [count]);
 * drafts may be NULL (no staging area). flags: optional device int32 [count]. The
 * engine then points the new row's page_table[0, L / G) at the source's pages and
 * sets its seq_lens; shared pages are immutable (never written by any writer). */
KVTILE_OPS_API int kvtile_ops_fork(const kvtile_ops_cache* cache, const kvtile_ops_drafts* drafts,
                                   const int32_t* src_slots, const int32_t* dst_slots, int32_t count, int32_t* flags,
                                   kvtile_ops_stream stream);
/* Host check of a fork (no GPU): host copies of the pairs, of cache->tail_slots (or
 * NULL when the cache has none) and of seq_lens. KVTILE_OPS_INVALID_ARGUMENT, with
 * a message, for a slot out of range, a destination twice or also a source, or a
 * destination that is the slot of a live row (seq_lens > 0). */
KVTILE_OPS_API int kvtile_ops_validate_fork(const kvtile_ops_cache* cache, const int32_t* host_src_slots,
                                            const int32_t* host_dst_slots, int32_t count,
                                            const int32_t* host_tail_slots, const int32_t* host_seq_lens);

#ifdef __cplusplus
}
#endif

#endif /* KVTILE_OPS_H */
