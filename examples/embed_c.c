/* The C interface (attnrt/c_api.h) from a C program: one sequence, a prompt, one decode step.
 * Every V is 0.5, so every output element is 0.5 whatever the scores. */
#include <stdio.h>
#include <string.h>

#include <attnrt/c_api.h>

#define HEADS 8
#define KV_HEADS 2
#define HEAD_DIM 64
#define PROMPT 16

static const uint16_t kHalfOne = 0x3c00, kHalfHalf = 0x3800; /* FP16 bits of 1.0 and 0.5 */

int main(int argc, char** argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("embed_c: one decode request through attnrt's C interface. Takes no options.\n");
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("embed_c (attnrt %s)\n", attnrt_version());
    return 0;
  }
  static uint16_t k[PROMPT * KV_HEADS * HEAD_DIM], v[PROMPT * KV_HEADS * HEAD_DIM];
  static uint16_t q[HEADS * HEAD_DIM], out[HEADS * HEAD_DIM];
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); ++i) k[i] = v[i] = kHalfHalf;
  for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); ++i) q[i] = kHalfOne;

  attnrt_options options;
  attnrt_options_init(&options);
  options.num_layers = 1;
  options.num_q_heads = HEADS;
  options.num_kv_heads = KV_HEADS;
  options.head_dim = HEAD_DIM;
  options.max_context = 256;
  options.kv_cache_bytes = 16u << 20;

  char error[256];
  attnrt_runtime* rt = NULL;
  if (attnrt_create(&options, &rt, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_create_sequence(rt, 1, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_prefill(rt, 1, 0, PROMPT, k, v, error, sizeof(error)) != ATTNRT_OK ||
      attnrt_decode(rt, 1, 0, q, k, v, out, error, sizeof(error)) != ATTNRT_OK) {
    fprintf(stderr, "embed_c: %s\n", error);
    attnrt_destroy(rt);
    return 1;
  }
  int length = 0;
  attnrt_sequence_length(rt, 1, 0, &length, NULL, 0);
  attnrt_destroy(rt);
  printf("embed_c: out[0] bits 0x%04x (expected 0x3800), sequence length %d\n", out[0], length);
  return out[0] == kHalfHalf && length == PROMPT + 1 ? 0 : 1;
}
