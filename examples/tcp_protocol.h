// The wire protocol of examples/serve_tcp.cc and examples/loadgen_tcp.cc: little-endian frames,
// one header and one payload each, encoded and parsed here so both binaries share one codec.
// Header-only; needs nothing but the public api/ leaf types.
//
// Frame = header (24 bytes) + payload (payload_bytes bytes), every integer little-endian:
//   u32 magic          0x54524E41 (the bytes "ANRT")
//   u16 version        1
//   u16 type           MessageType below
//   u64 request_id     chosen by the client, echoed in the response
//   u32 payload_bytes  at most kMaxPayloadBytes (64 MiB), and at most the largest legal payload
//                      of the frame's type for the served shape (MaxRequestPayloadBytes); both
//                      are checked before any payload byte is read
//   u32 reserved       0
//
// Requests (client -> server) and their payloads; FP16 arrays are IEEE binary16, row-major:
//   1 CreateSequence  u64 sequence_id                                   -> StatusResult
//   2 Prefill         u64 sequence_id, u32 layer, u32 num_tokens,
//                     k [num_tokens][Hkv][D], v [num_tokens][Hkv][D]    -> StatusResult
//   3 Decode          u64 sequence_id, u32 layer, u32 priority,
//                     q [H][D], k [Hkv][D], v [Hkv][D]                  -> DecodeResult
//   4 Info            (empty)                                           -> InfoResult
//   5 Shutdown        (empty)                                           -> StatusResult, then the
//                                                                          server drains and exits
// Responses (server -> client), with the request's request_id:
//   0x81 StatusResult  u32 code, u32 message_bytes, message (UTF-8)
//   0x83 DecodeResult  u32 code, u32 message_bytes, message, u32 output_elems,
//                      output [H][D] FP16 (output_elems = H*D when code is 0, else 0)
//   0x84 InfoResult    i32 num_layers, num_q_heads, num_kv_heads, head_dim, block_size,
//                      max_context, u32 max_payload_bytes, u32 device_bytes, device (UTF-8),
//                      [u32 kv_cache_type]; max_payload_bytes is the largest request payload
//                      the server accepts; kv_cache_type (attnrt::KvCacheType: 1 = fp8_e4m3,
//                      with the default scales 1.0) is present only when it is not fp16 (0), so
//                      an FP16 server's InfoResult is the same bytes as before it existed
// `code` is attnrt::StatusCode (0 = OK, 1 = InvalidArgument, ... 10 = Unimplemented); the
// message names the offending field and value, like every attnrt Status.
//
// Pipelining: a client may send any number of requests without waiting. Responses may come back
// out of order (match them by request_id); the server submits a connection's Decode frames in
// the order it reads them, and the runtime keeps that order per (sequence, layer) at one priority.
// Errors: a frame whose header is intact but whose payload is wrong (size, field) gets an error
// response naming the field and the connection stays usable; a bad header (magic, version,
// reserved, payload_bytes over the largest legal payload of its type) gets a StatusResult naming
// the field and the server then closes the connection (gracefully: the reply is delivered first).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>

namespace attnrt::tcp {

static_assert(std::endian::native == std::endian::little,
              "the codec copies FP16 arrays as raw bytes: the host must be little-endian");

inline constexpr std::uint32_t kMagic = 0x54524E41u;  // "ANRT" in wire byte order
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 24;
inline constexpr std::uint32_t kMaxPayloadBytes = 64u << 20;
// Status messages longer than this are cut on encode: a response never grows without bound.
inline constexpr std::uint32_t kMaxMessageBytes = 4096;
inline constexpr std::size_t kDecodePrefixBytes = 16;   // sequence_id, layer, priority
inline constexpr std::size_t kPrefillPrefixBytes = 16;  // sequence_id, layer, num_tokens

enum class MessageType : std::uint16_t {
  kCreateSequence = 1,
  kPrefill = 2,
  kDecode = 3,
  kInfo = 4,
  kShutdown = 5,
  kStatusResult = 0x81,
  kDecodeResult = 0x83,
  kInfoResult = 0x84,
};

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t type = 0;
  std::uint64_t request_id = 0;
  std::uint32_t payload_bytes = 0;
  std::uint32_t reserved = 0;
};

// Appends little-endian fields to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<std::uint8_t>* out) : out_(out) {}
  void U16(std::uint16_t x) { Raw(&x, sizeof(x)); }
  void U32(std::uint32_t x) { Raw(&x, sizeof(x)); }
  void U64(std::uint64_t x) { Raw(&x, sizeof(x)); }
  void I32(std::int32_t x) { Raw(&x, sizeof(x)); }
  void Halves(std::span<const Half> h) { Raw(h.data(), h.size_bytes()); }
  void Raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }

 private:
  std::vector<std::uint8_t>* out_;
};

// Reads little-endian fields from a byte span; every read fails (returns false) past the end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> in) : in_(in) {}
  bool U16(std::uint16_t* x) { return Raw(x, sizeof(*x)); }
  bool U32(std::uint32_t* x) { return Raw(x, sizeof(*x)); }
  bool U64(std::uint64_t* x) { return Raw(x, sizeof(*x)); }
  bool I32(std::int32_t* x) { return Raw(x, sizeof(*x)); }
  bool Halves(std::size_t n, std::vector<Half>* out) {
    if (n > remaining() / sizeof(Half)) return false;
    out->resize(n);
    return Raw(out->data(), n * sizeof(Half));
  }
  bool String(std::size_t n, std::string* out) {
    if (n > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool Raw(void* p, std::size_t n) {
    if (n > remaining()) return false;
    if (n != 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::size_t remaining() const { return in_.size() - pos_; }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

inline std::string Hex(std::uint64_t x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(x));
  return buf;
}

// A frame with its header written and payload_bytes still 0; FinishFrame patches the length.
inline std::vector<std::uint8_t> BeginFrame(MessageType type, std::uint64_t request_id) {
  std::vector<std::uint8_t> frame;
  frame.reserve(kHeaderBytes + 64);
  ByteWriter w(&frame);
  w.U32(kMagic);
  w.U16(kVersion);
  w.U16(static_cast<std::uint16_t>(type));
  w.U64(request_id);
  w.U32(0);
  w.U32(0);
  return frame;
}

inline void FinishFrame(std::vector<std::uint8_t>* frame) {
  const auto payload = static_cast<std::uint32_t>(frame->size() - kHeaderBytes);
  std::memcpy(frame->data() + 16, &payload, sizeof(payload));
}

// Parses and checks a header; a non-OK Status names the field (the stream cannot be re-framed).
inline Status ParseHeader(std::span<const std::uint8_t> bytes, FrameHeader* h) {
  ByteReader r(bytes);
  if (!r.U32(&h->magic) || !r.U16(&h->version) || !r.U16(&h->type) || !r.U64(&h->request_id) ||
      !r.U32(&h->payload_bytes) || !r.U32(&h->reserved)) {
    return InvalidArgumentError("header has " + std::to_string(bytes.size()) +
                                " bytes, expected " + std::to_string(kHeaderBytes));
  }
  if (h->magic != kMagic) {
    return InvalidArgumentError("magic = " + Hex(h->magic) + ", expected " + Hex(kMagic));
  }
  if (h->version != kVersion) {
    return InvalidArgumentError("version = " + std::to_string(h->version) + ", expected " +
                                std::to_string(kVersion));
  }
  if (h->reserved != 0) {
    return InvalidArgumentError("reserved = " + std::to_string(h->reserved) + ", expected 0");
  }
  if (h->payload_bytes > kMaxPayloadBytes) {
    return InvalidArgumentError("payload_bytes = " + std::to_string(h->payload_bytes) +
                                " exceeds the cap of " + std::to_string(kMaxPayloadBytes));
  }
  return Status::Ok();
}

// The largest payload a request of `type` can legally carry for `shape`: Decode exactly
// 16 + 2*(H*D + 2*Hkv*D), Prefill 16 + 4*max_context*Hkv*D (at most kMaxPayloadBytes),
// CreateSequence 8, Info and Shutdown 0. A type outside the protocol gets the largest of these,
// so that its frame can be read past and answered.
inline std::uint64_t MaxRequestPayloadBytes(std::uint16_t type, const ModelShape& shape) {
  const std::uint64_t kv = static_cast<std::uint64_t>(shape.kv_token_elems());
  const std::uint64_t q = static_cast<std::uint64_t>(shape.num_q_heads) * shape.head_dim;
  const std::uint64_t decode = kDecodePrefixBytes + (q + 2 * kv) * sizeof(Half);
  const std::uint64_t prefill = std::min<std::uint64_t>(
      kMaxPayloadBytes,
      kPrefillPrefixBytes + 2 * sizeof(Half) * static_cast<std::uint64_t>(shape.max_context) * kv);
  switch (static_cast<MessageType>(type)) {
    case MessageType::kCreateSequence:
      return 8;
    case MessageType::kPrefill:
      return prefill;
    case MessageType::kDecode:
      return decode;
    case MessageType::kInfo:
    case MessageType::kShutdown:
      return 0;
    default:
      return std::max({decode, prefill, std::uint64_t{8}});
  }
}

// The largest request payload of any type for `shape` (what InfoResult announces).
inline std::uint32_t LargestRequestPayloadBytes(const ModelShape& shape) {
  return static_cast<std::uint32_t>(MaxRequestPayloadBytes(0, shape));
}

inline const char* RequestTypeName(std::uint16_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kCreateSequence: return "CreateSequence";
    case MessageType::kPrefill: return "Prefill";
    case MessageType::kDecode: return "Decode";
    case MessageType::kInfo: return "Info";
    case MessageType::kShutdown: return "Shutdown";
    default: return "unknown-type";
  }
}

// Checks a parsed header's payload_bytes against its type's largest legal payload. A frame over
// it cannot be a valid request, and reading it would let a peer make the server hold bytes no
// request needs; the stream is then closed, so the Status names the field.
inline Status CheckRequestPayloadBytes(const FrameHeader& h, const ModelShape& shape) {
  const std::uint64_t max = MaxRequestPayloadBytes(h.type, shape);
  if (h.payload_bytes <= max) return Status::Ok();
  return InvalidArgumentError("payload_bytes = " + std::to_string(h.payload_bytes) +
                              " exceeds the largest legal " + RequestTypeName(h.type) +
                              " payload, " + std::to_string(max) + " bytes for this shape");
}

// --- requests ------------------------------------------------------------------------------

struct CreateSequenceMessage {
  std::uint64_t sequence_id = 0;
};

struct PrefillMessage {
  std::uint64_t sequence_id = 0;
  std::uint32_t layer = 0;
  std::uint32_t num_tokens = 0;
  std::vector<Half> k, v;  // [num_tokens][Hkv][D]
};

struct DecodeMessage {
  std::uint64_t sequence_id = 0;
  std::uint32_t layer = 0;
  std::uint32_t priority = 0;
  std::vector<Half> q;     // [H][D]
  std::vector<Half> k, v;  // [Hkv][D]
};

inline std::vector<std::uint8_t> EncodeCreateSequence(std::uint64_t request_id,
                                                      std::uint64_t sequence_id) {
  auto frame = BeginFrame(MessageType::kCreateSequence, request_id);
  ByteWriter(&frame).U64(sequence_id);
  FinishFrame(&frame);
  return frame;
}

inline std::vector<std::uint8_t> EncodePrefill(std::uint64_t request_id,
                                               std::uint64_t sequence_id, std::uint32_t layer,
                                               std::uint32_t num_tokens,
                                               std::span<const Half> k,
                                               std::span<const Half> v) {
  auto frame = BeginFrame(MessageType::kPrefill, request_id);
  ByteWriter w(&frame);
  w.U64(sequence_id);
  w.U32(layer);
  w.U32(num_tokens);
  w.Halves(k);
  w.Halves(v);
  FinishFrame(&frame);
  return frame;
}

inline std::vector<std::uint8_t> EncodeDecode(std::uint64_t request_id, std::uint64_t sequence_id,
                                              std::uint32_t layer, std::uint32_t priority,
                                              std::span<const Half> q, std::span<const Half> k,
                                              std::span<const Half> v) {
  auto frame = BeginFrame(MessageType::kDecode, request_id);
  frame.reserve(kHeaderBytes + kDecodePrefixBytes + (q.size() + k.size() + v.size()) * 2);
  ByteWriter w(&frame);
  w.U64(sequence_id);
  w.U32(layer);
  w.U32(priority);
  w.Halves(q);
  w.Halves(k);
  w.Halves(v);
  FinishFrame(&frame);
  return frame;
}

inline std::vector<std::uint8_t> EncodeEmpty(MessageType type, std::uint64_t request_id) {
  auto frame = BeginFrame(type, request_id);
  FinishFrame(&frame);
  return frame;
}

inline Status PayloadSizeError(std::string_view what, std::size_t got, std::string_view formula,
                               std::uint64_t expected) {
  return InvalidArgumentError(std::string(what) + " payload_bytes = " + std::to_string(got) +
                              ", expected " + std::string(formula) + " = " +
                              std::to_string(expected));
}

inline Status ParseCreateSequence(std::span<const std::uint8_t> payload,
                                  CreateSequenceMessage* m) {
  if (payload.size() != 8) return PayloadSizeError("CreateSequence", payload.size(), "8", 8);
  ByteReader(payload).U64(&m->sequence_id);
  return Status::Ok();
}

inline Status ParsePrefill(std::span<const std::uint8_t> payload, const ModelShape& shape,
                           PrefillMessage* m) {
  ByteReader r(payload);
  if (!r.U64(&m->sequence_id) || !r.U32(&m->layer) || !r.U32(&m->num_tokens)) {
    return InvalidArgumentError("Prefill payload_bytes = " + std::to_string(payload.size()) +
                                ", shorter than its 16-byte prefix");
  }
  if (m->num_tokens > static_cast<std::uint32_t>(shape.max_context)) {
    return InvalidArgumentError("num_tokens = " + std::to_string(m->num_tokens) +
                                " exceeds max_context = " + std::to_string(shape.max_context));
  }
  const std::uint64_t elems = std::uint64_t{m->num_tokens} * shape.kv_token_elems();
  const std::uint64_t expected = kPrefillPrefixBytes + 2 * elems * sizeof(Half);
  if (payload.size() != expected) {
    return PayloadSizeError("Prefill", payload.size(),
                            "16 + 4*num_tokens*Hkv*D (num_tokens = " +
                                std::to_string(m->num_tokens) + ")",
                            expected);
  }
  r.Halves(elems, &m->k);
  r.Halves(elems, &m->v);
  return Status::Ok();
}

inline Status ParseDecode(std::span<const std::uint8_t> payload, const ModelShape& shape,
                          DecodeMessage* m) {
  const std::uint64_t q_elems = std::uint64_t(shape.num_q_heads) * shape.head_dim;
  const std::uint64_t kv_elems = shape.kv_token_elems();
  const std::uint64_t expected = kDecodePrefixBytes + (q_elems + 2 * kv_elems) * sizeof(Half);
  if (payload.size() != expected) {
    return PayloadSizeError("Decode", payload.size(), "16 + 2*(H*D + 2*Hkv*D)", expected);
  }
  ByteReader r(payload);
  r.U64(&m->sequence_id);
  r.U32(&m->layer);
  r.U32(&m->priority);
  r.Halves(q_elems, &m->q);
  r.Halves(kv_elems, &m->k);
  r.Halves(kv_elems, &m->v);
  return Status::Ok();
}

// --- responses -----------------------------------------------------------------------------

inline void WriteStatus(const Status& status, ByteWriter* w) {
  const std::string& msg = status.message();
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(msg.size(), kMaxMessageBytes));
  w->U32(static_cast<std::uint32_t>(status.code()));
  w->U32(n);
  w->Raw(msg.data(), n);
}

inline bool ReadStatus(ByteReader* r, Status* status) {
  std::uint32_t code = 0, n = 0;
  std::string msg;
  if (!r->U32(&code) || !r->U32(&n) || n > kMaxMessageBytes || !r->String(n, &msg)) return false;
  if (code > static_cast<std::uint32_t>(StatusCode::kUnimplemented)) return false;
  *status = code == 0 ? Status::Ok() : Status(static_cast<StatusCode>(code), std::move(msg));
  return true;
}

inline std::vector<std::uint8_t> EncodeStatusResult(std::uint64_t request_id,
                                                    const Status& status) {
  auto frame = BeginFrame(MessageType::kStatusResult, request_id);
  ByteWriter w(&frame);
  WriteStatus(status, &w);
  FinishFrame(&frame);
  return frame;
}

inline std::vector<std::uint8_t> EncodeDecodeResult(std::uint64_t request_id,
                                                    const Status& status,
                                                    std::span<const Half> output) {
  auto frame = BeginFrame(MessageType::kDecodeResult, request_id);
  ByteWriter w(&frame);
  WriteStatus(status, &w);
  if (!status.ok()) output = {};
  w.U32(static_cast<std::uint32_t>(output.size()));
  w.Halves(output);
  FinishFrame(&frame);
  return frame;
}

struct InfoMessage {
  ModelShape shape;
  std::uint32_t max_payload_bytes = kMaxPayloadBytes;
  std::string device;
};

inline std::vector<std::uint8_t> EncodeInfoResult(std::uint64_t request_id,
                                                  const InfoMessage& info) {
  auto frame = BeginFrame(MessageType::kInfoResult, request_id);
  ByteWriter w(&frame);
  const ModelShape& s = info.shape;
  for (int x : {s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.block_size,
                s.max_context}) {
    w.I32(x);
  }
  w.U32(info.max_payload_bytes);
  const auto n =
      static_cast<std::uint32_t>(std::min<std::size_t>(info.device.size(), kMaxMessageBytes));
  w.U32(n);
  w.Raw(info.device.data(), n);
  if (s.kv_cache_type != KvCacheType::kFp16) w.U32(static_cast<std::uint32_t>(s.kv_cache_type));
  FinishFrame(&frame);
  return frame;
}

// Client side: a StatusResult payload.
inline Status ParseStatusResult(std::span<const std::uint8_t> payload, Status* status) {
  ByteReader r(payload);
  if (!ReadStatus(&r, status) || r.remaining() != 0) {
    return InvalidArgumentError("StatusResult payload_bytes = " + std::to_string(payload.size()) +
                                " does not hold a valid code and message");
  }
  return Status::Ok();
}

// Client side: a DecodeResult payload; `status` is the request's outcome, the return value says
// whether the frame itself was well formed.
inline Status ParseDecodeResult(std::span<const std::uint8_t> payload, Status* status,
                                std::vector<Half>* output) {
  ByteReader r(payload);
  std::uint32_t elems = 0;
  if (!ReadStatus(&r, status) || !r.U32(&elems) || !r.Halves(elems, output) ||
      r.remaining() != 0) {
    return InvalidArgumentError("DecodeResult payload_bytes = " + std::to_string(payload.size()) +
                                " does not hold a code, message and output_elems FP16 values");
  }
  return Status::Ok();
}

inline Status ParseInfoResult(std::span<const std::uint8_t> payload, InfoMessage* info) {
  ByteReader r(payload);
  ModelShape& s = info->shape;
  std::uint32_t n = 0;
  if (!r.I32(&s.num_layers) || !r.I32(&s.num_q_heads) || !r.I32(&s.num_kv_heads) ||
      !r.I32(&s.head_dim) || !r.I32(&s.block_size) || !r.I32(&s.max_context) ||
      !r.U32(&info->max_payload_bytes) || !r.U32(&n) || n > kMaxMessageBytes ||
      !r.String(n, &info->device)) {
    return InvalidArgumentError("InfoResult payload_bytes = " + std::to_string(payload.size()) +
                                " does not hold a shape and device name");
  }
  s.kv_cache_type = KvCacheType::kFp16;
  if (r.remaining() != 0) {
    std::uint32_t type = 0;
    // Present only for a cache type other than fp16 (one encoding per message).
    if (!r.U32(&type) || r.remaining() != 0 ||
        type != static_cast<std::uint32_t>(KvCacheType::kFp8E4M3)) {
      return InvalidArgumentError("InfoResult payload_bytes = " +
                                  std::to_string(payload.size()) +
                                  " does not end with a kv_cache_type other than fp16 (1) "
                                  "after the device name");
    }
    s.kv_cache_type = KvCacheType::kFp8E4M3;
  }
  return s.Validate();
}

}  // namespace attnrt::tcp
