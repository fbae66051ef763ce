// The C interface (attnrt/c_api.h) over the C++ Runtime. Only conversions live here.
#include <attnrt/c_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include <attnrt/log.h>
#include <attnrt/runtime.h>
#include <attnrt/version.h>

struct attnrt_runtime {
  std::unique_ptr<attnrt::Runtime> rt;
};

namespace {

static_assert(static_cast<int>(attnrt::StatusCode::kUnimplemented) == ATTNRT_UNIMPLEMENTED &&
                  static_cast<int>(attnrt::StatusCode::kInvalidArgument) == ATTNRT_INVALID_ARGUMENT,
              "attnrt_code must mirror attnrt::StatusCode");

attnrt_code Report(const attnrt::Status& status, char* error, std::size_t error_len) {
  if (!status.ok() && error != nullptr && error_len > 0) {
    const std::string& m = status.message();
    const std::size_t n = std::min(m.size(), error_len - 1);
    std::memcpy(error, m.data(), n);
    error[n] = '\0';
  }
  return static_cast<attnrt_code>(status.code());
}

attnrt::Status NoRuntime() { return attnrt::InvalidArgumentError("runtime is NULL"); }

const attnrt::Half* AsHalf(const uint16_t* p) { return reinterpret_cast<const attnrt::Half*>(p); }

// Validates the pointers of a decode and builds the request (spans over the caller's buffers).
attnrt::Status MakeRequest(const attnrt::Runtime& rt, uint64_t id, int layer, int priority,
                           const uint16_t* q, const uint16_t* k, const uint16_t* v,
                           attnrt::DecodeRequest* req) {
  if (q == nullptr || k == nullptr || v == nullptr) {
    return attnrt::InvalidArgumentError(std::string(q == nullptr ? "q" : k == nullptr ? "k" : "v") +
                                        " is NULL");
  }
  const attnrt::ModelShape& s = rt.shape();
  const std::size_t q_elems = static_cast<std::size_t>(s.num_q_heads) * s.head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(s.kv_token_elems());
  req->sequence_id = id;
  req->layer = layer;
  req->priority = priority;
  req->q = std::span<const attnrt::Half>(AsHalf(q), q_elems);
  req->k = std::span<const attnrt::Half>(AsHalf(k), kv_elems);
  req->v = std::span<const attnrt::Half>(AsHalf(v), kv_elems);
  return attnrt::Status::Ok();
}

}  // namespace

extern "C" {

void attnrt_options_init(attnrt_options* o) {
  if (o == nullptr) return;
  const attnrt::RuntimeOptions d;
  o->num_layers = d.shape.num_layers;
  o->num_q_heads = d.shape.num_q_heads;
  o->num_kv_heads = d.shape.num_kv_heads;
  o->head_dim = d.shape.head_dim;
  o->block_size = d.shape.block_size;
  o->max_context = d.shape.max_context;
  o->softmax_scale = d.shape.softmax_scale;
  o->device = ATTNRT_DEVICE_AUTO;
  o->kv_cache_bytes = d.kv_cache_bytes;
  o->max_batch_size = d.max_batch_size;
  o->max_queue_delay_us = static_cast<int>(d.max_queue_delay.count());
  o->default_timeout_us = d.default_timeout.count();
  o->kv_cache_type = ATTNRT_KV_CACHE_FP16;
  o->kv_scales = nullptr;
  o->num_kv_scales = 0;
}

attnrt_code attnrt_create(const attnrt_options* o, attnrt_runtime** runtime, char* error,
                          size_t error_len) {
  if (o == nullptr || runtime == nullptr) {
    return Report(attnrt::InvalidArgumentError(o == nullptr ? "options is NULL" : "runtime is NULL"),
                  error, error_len);
  }
  *runtime = nullptr;
  attnrt::RuntimeOptions ro;
  ro.shape.num_layers = o->num_layers;
  ro.shape.num_q_heads = o->num_q_heads;
  ro.shape.num_kv_heads = o->num_kv_heads;
  ro.shape.head_dim = o->head_dim;
  ro.shape.block_size = o->block_size;
  ro.shape.max_context = o->max_context;
  ro.shape.softmax_scale = o->softmax_scale;
  // A C caller may store any int in the enum; in C++ loading a value outside the enumerators'
  // range through the enum type is undefined, so the field is read as its underlying integer.
  std::underlying_type_t<attnrt_device> device;
  std::memcpy(&device, &o->device, sizeof(device));
  switch (device) {
    case ATTNRT_DEVICE_AUTO: ro.device = attnrt::DeviceKind::kAuto; break;
    case ATTNRT_DEVICE_CUDA: ro.device = attnrt::DeviceKind::kCuda; break;
    case ATTNRT_DEVICE_CPU: ro.device = attnrt::DeviceKind::kCpu; break;
    default:
      return Report(attnrt::InvalidArgumentError("options.device = " + std::to_string(device) +
                                                 ", expected 0 (auto), 1 (cuda) or 2 (cpu)"),
                    error, error_len);
  }
  std::underlying_type_t<attnrt_kv_cache_type> kv_type;  // read as device is, for the same reason
  std::memcpy(&kv_type, &o->kv_cache_type, sizeof(kv_type));
  switch (kv_type) {
    case ATTNRT_KV_CACHE_FP16: ro.shape.kv_cache_type = attnrt::KvCacheType::kFp16; break;
    case ATTNRT_KV_CACHE_FP8_E4M3: ro.shape.kv_cache_type = attnrt::KvCacheType::kFp8E4M3; break;
    default:
      return Report(attnrt::InvalidArgumentError("options.kv_cache_type = " +
                                                 std::to_string(kv_type) +
                                                 ", expected 0 (fp16) or 1 (fp8_e4m3)"),
                    error, error_len);
  }
  if (o->kv_scales == nullptr && o->num_kv_scales != 0) {
    return Report(attnrt::InvalidArgumentError("options.kv_scales is NULL, but num_kv_scales = " +
                                               std::to_string(o->num_kv_scales)),
                  error, error_len);
  }
  // ModelShape::Validate checks the count and every value; a count past the shape's is refused
  // here, before anything is read (a bogus count must not make us copy gigabytes). With a bad
  // shape nothing is copied: Validate names the shape's field first.
  if (o->num_layers > 0 && o->num_kv_heads > 0 && o->num_kv_scales > 0) {
    const std::size_t expected =
        2 * static_cast<std::size_t>(o->num_layers) * static_cast<std::size_t>(o->num_kv_heads);
    if (o->num_kv_scales > expected) {
      return Report(attnrt::InvalidArgumentError(
                        "options.num_kv_scales = " + std::to_string(o->num_kv_scales) +
                        ", expected 2 * num_layers * num_kv_heads = " + std::to_string(expected) +
                        " (or 0: 1.0 everywhere)"),
                    error, error_len);
    }
    ro.shape.kv_scales.assign(o->kv_scales, o->kv_scales + o->num_kv_scales);
  }
  ro.kv_cache_bytes = o->kv_cache_bytes;
  ro.max_batch_size = o->max_batch_size;
  if (o->max_queue_delay_us < 0 || o->default_timeout_us < 0) {
    return Report(attnrt::InvalidArgumentError(
                      o->max_queue_delay_us < 0
                          ? "options.max_queue_delay_us = " + std::to_string(o->max_queue_delay_us) +
                                ", expected >= 0"
                          : "options.default_timeout_us = " +
                                std::to_string(o->default_timeout_us) + ", expected >= 0"),
                  error, error_len);
  }
  ro.max_queue_delay = std::chrono::microseconds(o->max_queue_delay_us);
  ro.default_timeout = std::chrono::microseconds(o->default_timeout_us);
  auto created = attnrt::Runtime::Create(ro);
  if (!created.ok()) return Report(created.status(), error, error_len);
  *runtime = new attnrt_runtime{std::move(*created)};
  return ATTNRT_OK;
}

void attnrt_destroy(attnrt_runtime* runtime) {
  if (runtime == nullptr) return;
  runtime->rt->Drain();
  delete runtime;
}

attnrt_code attnrt_create_sequence(attnrt_runtime* r, uint64_t id, char* error, size_t len) {
  return Report(r ? r->rt->CreateSequence(id) : NoRuntime(), error, len);
}

attnrt_code attnrt_fork_sequence(attnrt_runtime* r, uint64_t parent, uint64_t child, char* error,
                                 size_t len) {
  return Report(r ? r->rt->ForkSequence(parent, child) : NoRuntime(), error, len);
}

attnrt_code attnrt_free_sequence(attnrt_runtime* r, uint64_t id, char* error, size_t len) {
  return Report(r ? r->rt->FreeSequence(id) : NoRuntime(), error, len);
}

attnrt_code attnrt_prefill(attnrt_runtime* r, uint64_t id, int layer, int num_tokens,
                           const uint16_t* k, const uint16_t* v, char* error, size_t len) {
  if (r == nullptr) return Report(NoRuntime(), error, len);
  if (k == nullptr || v == nullptr) {
    return Report(attnrt::InvalidArgumentError(std::string(k == nullptr ? "k" : "v") + " is NULL"),
                  error, len);
  }
  if (num_tokens < 1) {
    return Report(attnrt::InvalidArgumentError("num_tokens = " + std::to_string(num_tokens) +
                                               ", expected >= 1"),
                  error, len);
  }
  const std::size_t n = static_cast<std::size_t>(num_tokens) * r->rt->shape().kv_token_elems();
  return Report(r->rt->Prefill(id, layer, num_tokens, std::span(AsHalf(k), n),
                               std::span(AsHalf(v), n)),
                error, len);
}

attnrt_code attnrt_sequence_length(attnrt_runtime* r, uint64_t id, int layer, int* length,
                                   char* error, size_t len) {
  if (r == nullptr) return Report(NoRuntime(), error, len);
  if (length == nullptr) return Report(attnrt::InvalidArgumentError("length is NULL"), error, len);
  auto l = r->rt->SequenceLength(id, layer);
  if (!l.ok()) return Report(l.status(), error, len);
  *length = *l;
  return ATTNRT_OK;
}

attnrt_code attnrt_decode(attnrt_runtime* r, uint64_t id, int layer, const uint16_t* q,
                          const uint16_t* k, const uint16_t* v, uint16_t* out, char* error,
                          size_t len) {
  if (r == nullptr) return Report(NoRuntime(), error, len);
  if (out == nullptr) return Report(attnrt::InvalidArgumentError("out is NULL"), error, len);
  attnrt::DecodeRequest req;
  if (attnrt::Status s = MakeRequest(*r->rt, id, layer, 0, q, k, v, &req); !s.ok()) {
    return Report(s, error, len);
  }
  req.out = reinterpret_cast<attnrt::Half*>(out);
  return Report(r->rt->Decode(req).status, error, len);
}

attnrt_code attnrt_submit(attnrt_runtime* r, uint64_t id, int layer, int priority,
                          const uint16_t* q, const uint16_t* k, const uint16_t* v,
                          attnrt_done_fn done, void* user, char* error, size_t len) {
  if (r == nullptr) return Report(NoRuntime(), error, len);
  if (done == nullptr) return Report(attnrt::InvalidArgumentError("done is NULL"), error, len);
  attnrt::DecodeRequest req;
  if (attnrt::Status s = MakeRequest(*r->rt, id, layer, priority, q, k, v, &req); !s.ok()) {
    return Report(s, error, len);
  }
  auto handle = r->rt->Submit(req, [done, user](attnrt::DecodeResult result) {
    const uint16_t* out =
        result.status.ok() ? reinterpret_cast<const uint16_t*>(result.output.data()) : nullptr;
    done(user, static_cast<attnrt_code>(result.status.code()), result.status.message().c_str(),
         out);
  });
  return Report(handle.status(), error, len);
}

void attnrt_drain(attnrt_runtime* r) {
  if (r != nullptr) r->rt->Drain();
}

const char* attnrt_version(void) { return attnrt::Version(); }

attnrt_code attnrt_set_log_level(const char* level, char* error, size_t len) {
  if (level == nullptr) return Report(attnrt::InvalidArgumentError("level is NULL"), error, len);
  return Report(attnrt::SetLogLevel(level), error, len);
}

}  // extern "C"
