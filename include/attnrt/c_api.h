/* attnrt's C interface, for hosts that are not C++ (Python ctypes, Rust, Go, C). A thin layer
 * over attnrt/runtime.h: same semantics, statuses as integer codes (attnrt_code, the values of
 * attnrt::StatusCode) with the message copied into a caller buffer. FP16 values travel as their
 * IEEE binary16 bits (uint16_t). No CUDA header, no C++ type.
 *
 * Thread safety: as Runtime: every call may come from any thread; attnrt_destroy must not race
 * with other calls on the same runtime. */
#ifndef ATTNRT_C_API_H_
#define ATTNRT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include <attnrt/export.h>
#include <attnrt/version.h> /* ATTNRT_VERSION_STRING, ATTNRT_WITH_CUDA */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ATTNRT_OK = 0,
  ATTNRT_INVALID_ARGUMENT = 1,
  ATTNRT_NOT_FOUND = 2,
  ATTNRT_ALREADY_EXISTS = 3,
  ATTNRT_RESOURCE_EXHAUSTED = 4,
  ATTNRT_FAILED_PRECONDITION = 5,
  ATTNRT_UNAVAILABLE = 6,
  ATTNRT_DEADLINE_EXCEEDED = 7,
  ATTNRT_CANCELLED = 8,
  ATTNRT_INTERNAL = 9,
  ATTNRT_UNIMPLEMENTED = 10
} attnrt_code;

typedef enum { ATTNRT_DEVICE_AUTO = 0, ATTNRT_DEVICE_CUDA = 1, ATTNRT_DEVICE_CPU = 2 } attnrt_device;

/* How the KV cache stores K and V (attnrt::KvCacheType in attnrt/config.h: the scaling rule,
 * the accuracy). FP8 E4M3 halves the bytes per token; both executors (the CUDA one through
 * its split_kv, split_kv_simt and simple paths; decode_path gemm refuses it). */
typedef enum { ATTNRT_KV_CACHE_FP16 = 0, ATTNRT_KV_CACHE_FP8_E4M3 = 1 } attnrt_kv_cache_type;

typedef struct {
  int num_layers, num_q_heads, num_kv_heads, head_dim, block_size, max_context;
  float softmax_scale;           /* 0: 1/sqrt(head_dim) */
  attnrt_device device;
  size_t kv_cache_bytes;         /* 0: the runtime's default */
  int max_batch_size;
  int max_queue_delay_us;
  int64_t default_timeout_us;    /* 0: no deadline */
  attnrt_kv_cache_type kv_cache_type;  /* ATTNRT_KV_CACHE_FP16 by default */
  /* FP8 only, optional: NULL (with num_kv_scales 0) means 1.0 everywhere; otherwise
   * num_kv_scales = 2 * num_layers * num_kv_heads finite scales > 0, read during attnrt_create
   * only: K's first, then V's, each layer-major, i.e. kv_scales[(kv * num_layers + layer) *
   * num_kv_heads + kv_head], kv = 0 for K and 1 for V. A bad one is refused naming its index
   * ("ModelShape.kv_scales[5] = -1, ..."). */
  const float* kv_scales;
  size_t num_kv_scales;
} attnrt_options;

typedef struct attnrt_runtime attnrt_runtime;

/* Runs once per accepted request on a completion thread. `out` ([H][D] FP16 bits) is valid only
 * during the call and only when code == ATTNRT_OK. */
typedef void (*attnrt_done_fn)(void* user, attnrt_code code, const char* message,
                               const uint16_t* out);

/* Fills the defaults of RuntimeOptions (a 32-head, D=128 shape; set the shape fields). */
ATTNRT_EXPORT void attnrt_options_init(attnrt_options* options);

/* Each call returns ATTNRT_OK or an error code; on error, when `error` is not NULL, the message
 * (naming the bad field and value) is copied there, truncated to error_len - 1 characters. */
ATTNRT_EXPORT attnrt_code attnrt_create(const attnrt_options* options, attnrt_runtime** runtime,
                                        char* error, size_t error_len);
/* Finishes admitted requests (their callbacks run), then frees the runtime. NULL is a no-op. */
ATTNRT_EXPORT void attnrt_destroy(attnrt_runtime* runtime);

ATTNRT_EXPORT attnrt_code attnrt_create_sequence(attnrt_runtime* runtime, uint64_t id, char* error,
                                                 size_t error_len);
ATTNRT_EXPORT attnrt_code attnrt_fork_sequence(attnrt_runtime* runtime, uint64_t parent,
                                               uint64_t child, char* error, size_t error_len);
ATTNRT_EXPORT attnrt_code attnrt_free_sequence(attnrt_runtime* runtime, uint64_t id, char* error,
                                               size_t error_len);
/* k and v: [num_tokens][Hkv][D]. */
ATTNRT_EXPORT attnrt_code attnrt_prefill(attnrt_runtime* runtime, uint64_t id, int layer,
                                         int num_tokens, const uint16_t* k, const uint16_t* v,
                                         char* error, size_t error_len);
ATTNRT_EXPORT attnrt_code attnrt_sequence_length(attnrt_runtime* runtime, uint64_t id, int layer,
                                                 int* length, char* error, size_t error_len);

/* One decode step, blocking until its result: q [H][D], k and v [Hkv][D], out [H][D].
 * Runs on the calling thread when the runtime is idle (Runtime::Decode). */
ATTNRT_EXPORT attnrt_code attnrt_decode(attnrt_runtime* runtime, uint64_t id, int layer,
                                        const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                        uint16_t* out, char* error, size_t error_len);
/* The same, asynchronous: q/k/v are copied before it returns; `done` runs exactly once if (and
 * only if) this returns ATTNRT_OK. */
ATTNRT_EXPORT attnrt_code attnrt_submit(attnrt_runtime* runtime, uint64_t id, int layer,
                                        int priority, const uint16_t* q, const uint16_t* k,
                                        const uint16_t* v, attnrt_done_fn done, void* user,
                                        char* error, size_t error_len);

/* Blocks until every admitted request has completed; later submits fail with UNAVAILABLE. */
ATTNRT_EXPORT void attnrt_drain(attnrt_runtime* runtime);

/* The version of the library linked at run time ("0.1.0"); the header's: ATTNRT_VERSION_STRING. */
ATTNRT_EXPORT const char* attnrt_version(void);
/* Sets the level of the library's logger ("attnrt"): "trace", "debug", "info", "warn", "error",
 * "critical" or "off". ATTNRT_INVALID_ARGUMENT naming the level otherwise. */
ATTNRT_EXPORT attnrt_code attnrt_set_log_level(const char* level, char* error, size_t error_len);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* ATTNRT_C_API_H_ */
