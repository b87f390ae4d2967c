/* An installed kvtile_ops used from C: the host codec round-trips a tile;
 * prints whether this library has the device functions. */
#include <kvtile_ops.h>

#include <stdio.h>
#include <stdlib.h>

int main(void) {
  kvtile_ops_preset_info info;
  float k[128 * 128], v[128 * 128], k2[128 * 128], v2[128 * 128];
  unsigned char* rec;
  int i, st;
  double err = 0;
  if (kvtile_ops_get_preset_info(KVTILE_OPS_K4V2_G128, 128, &info) != KVTILE_OPS_SUCCESS) return 1;
  rec = malloc((size_t)info.record_bytes);
  if (!rec) return 1;
  for (i = 0; i < 128 * 128; ++i) {
    k[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    v[i] = (float)((i * 53) % 89) / 89.0f - 0.5f;
  }
  st = kvtile_ops_encode_tiles_host(KVTILE_OPS_K4V2_G128, 128, KVTILE_OPS_FP32, k, v, 1, rec, 0);
  if (st == KVTILE_OPS_SUCCESS)
    st = kvtile_ops_decode_tiles_host(KVTILE_OPS_K4V2_G128, 128, rec, (size_t)info.record_bytes, 1, KVTILE_OPS_FP32,
                                      k2, v2,
                                      KVTILE_OPS_FRAME_ORIGINAL);
  free(rec);
  if (st != KVTILE_OPS_SUCCESS) {
    fprintf(stderr, "ops_consumer: %s\n", kvtile_ops_last_error());
    return 1;
  }
  for (i = 0; i < 128 * 128; ++i) err += (k[i] - k2[i]) * (k[i] - k2[i]);
  if (!(err > 0 && err / (128 * 128) < 0.01)) {
    fprintf(stderr, "ops_consumer: round-trip error %g\n", err / (128 * 128));
    return 1;
  }
  printf("ops_consumer: kvtile_ops %s, host codec round trip ok, device functions: %s\n", kvtile_ops_version(),
         kvtile_ops_supported(KVTILE_OPS_K4V2_G128, 128) ? "yes" : "no (CPU-only library)");
  return 0;
}
