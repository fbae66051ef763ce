/* A C consumer of the installed attnrt: one decode through the C interface on the CPU executor.
 * Every V is 0.5, so every output element must be 0.5 whatever the scores; exits 0 only then. */
#include <stdio.h>
#include <string.h>

#include <attnrt/c_api.h>

#define HEADS 8
#define KV_HEADS 2
#define HEAD_DIM 64
#define PROMPT 16

static const uint16_t kHalfOne = 0x3c00, kHalfHalf = 0x3800; /* FP16 bits of 1.0 and 0.5 */

int main(void) {
  static uint16_t k[PROMPT * KV_HEADS * HEAD_DIM], v[PROMPT * KV_HEADS * HEAD_DIM];
  static uint16_t q[HEADS * HEAD_DIM], out[HEADS * HEAD_DIM];
  size_t i;
  for (i = 0; i < sizeof(k) / sizeof(k[0]); ++i) k[i] = v[i] = kHalfHalf;
  for (i = 0; i < sizeof(q) / sizeof(q[0]); ++i) q[i] = kHalfOne;
  if (strcmp(attnrt_version(), ATTNRT_VERSION_STRING) != 0) {
    fprintf(stderr, "consumer_c: header %s, library %s\n", ATTNRT_VERSION_STRING,
            attnrt_version());
    return 1;
  }

  attnrt_options options;
  attnrt_options_init(&options);
  options.num_layers = 1;
  options.num_q_heads = HEADS;
  options.num_kv_heads = KV_HEADS;
  options.head_dim = HEAD_DIM;
  options.max_context = 256;
  options.device = ATTNRT_DEVICE_CPU;
  options.kv_cache_bytes = 16u << 20;

  char error[256] = "";
  attnrt_runtime* rt = NULL;
  if (attnrt_create(&options, &rt, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_create_sequence(rt, 1, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_prefill(rt, 1, 0, PROMPT, k, v, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_decode(rt, 1, 0, q, k, v, out, error, sizeof(error)) != ATTNRT_OK) {
    fprintf(stderr, "consumer_c: %s\n", error);
    attnrt_destroy(rt);
    return 1;
  }
  attnrt_destroy(rt);
  for (i = 0; i < sizeof(out) / sizeof(out[0]); ++i) {
    if (out[i] != kHalfHalf) {
      fprintf(stderr, "consumer_c: out[%zu] = 0x%04x, expected 0x%04x (0.5)\n", i, out[i],
              kHalfHalf);
      return 1;
    }
  }
  printf("consumer_c: attnrt %s: %d outputs, all 0.5: OK\n", attnrt_version(), HEADS * HEAD_DIM);
  return 0;
}
