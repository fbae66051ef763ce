// libFuzzer target for the TCP frame codec (examples/tcp_protocol.h): the input is a byte stream
// read the way serve_tcp and loadgen_tcp read one (header, type check, payload, parse by type),
// for a served shape chosen by the first bytes. Checks: nothing crashes; every refusal is a
// Status with a message; every frame that parses re-encodes (with the codec's own encoder) to
// the same bytes, or, where the encoding is not canonical, to a frame that parses back to the
// same values; and messages built from the input round-trip through encode and parse.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "examples/tcp_protocol.h"

namespace {

namespace tcp = attnrt::tcp;
using attnrt::Half;
using attnrt::ModelShape;
using attnrt::Status;
using Bytes = std::vector<std::uint8_t>;

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "tcp_protocol_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ",
               detail.c_str());
  std::abort();
}

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) Fail(what, detail);
}

// A refusal must say why.
void CheckRefusal(const Status& s, const char* what) {
  Check(!s.ok(), what, "expected an error");
  Check(s.code() == attnrt::StatusCode::kInvalidArgument, what, s.ToString());
  Check(!s.message().empty(), what, "error without a message");
}

bool SameHalves(const std::vector<Half>& a, const std::vector<Half>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Half)) == 0);
}

bool SameStatus(const Status& a, const Status& b) {
  return a.code() == b.code() && (a.ok() || a.message() == b.message());
}

bool SameShape(const ModelShape& a, const ModelShape& b) {
  return a.num_layers == b.num_layers && a.num_q_heads == b.num_q_heads &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.block_size == b.block_size && a.max_context == b.max_context;
}

Bytes Frame(const tcp::FrameHeader& h, std::span<const std::uint8_t> payload) {
  Bytes out = tcp::BeginFrame(static_cast<tcp::MessageType>(h.type), h.request_id);
  out.insert(out.end(), payload.begin(), payload.end());
  tcp::FinishFrame(&out);
  return out;
}

// Splits an encoded frame into its header (checked) and payload.
std::span<const std::uint8_t> PayloadOf(const Bytes& frame, tcp::FrameHeader* h) {
  Check(frame.size() >= tcp::kHeaderBytes, "encoded frame shorter than a header");
  Status s = tcp::ParseHeader(std::span(frame).first(tcp::kHeaderBytes), h);
  Check(s.ok(), "an encoded header does not parse", s.ToString());
  Check(h->payload_bytes == frame.size() - tcp::kHeaderBytes, "payload_bytes of an encoded frame");
  return std::span(frame).subspan(tcp::kHeaderBytes);
}

// The served shapes: small ones, so that whole Prefill/Decode payloads fit a fuzz input.
ModelShape ShapeFrom(FuzzedDataProvider& in) {
  ModelShape s;
  s.num_layers = in.ConsumeIntegralInRange(1, 4);
  s.num_kv_heads = in.ConsumeIntegralInRange(1, 2);
  s.num_q_heads = s.num_kv_heads * in.ConsumeIntegralInRange(1, 2);
  static constexpr int kHeadDims[] = {64, 128, 256};
  static constexpr int kBlocks[] = {8, 16, 32, 64};
  s.head_dim = kHeadDims[in.ConsumeIntegralInRange(0, 2)];
  s.block_size = kBlocks[in.ConsumeIntegralInRange(0, 3)];
  s.max_context = in.ConsumeIntegralInRange(1, 64);
  return s;
}

// One frame's payload, parsed by its type; what parses must re-encode to the same frame.
void ParseAndReencode(const tcp::FrameHeader& h, std::span<const std::uint8_t> payload,
                      const ModelShape& shape) {
  const Bytes original = Frame(h, payload);
  const std::uint64_t q_elems = std::uint64_t(shape.num_q_heads) * shape.head_dim;
  const std::uint64_t kv_elems = shape.kv_token_elems();
  switch (static_cast<tcp::MessageType>(h.type)) {
    case tcp::MessageType::kCreateSequence: {
      tcp::CreateSequenceMessage m;
      Status s = tcp::ParseCreateSequence(payload, &m);
      Check(s.ok() == (payload.size() == 8), "CreateSequence accepted iff 8 bytes", s.ToString());
      if (!s.ok()) return CheckRefusal(s, "CreateSequence refusal");
      Check(tcp::EncodeCreateSequence(h.request_id, m.sequence_id) == original,
            "CreateSequence does not re-encode to its bytes");
      return;
    }
    case tcp::MessageType::kPrefill: {
      tcp::PrefillMessage m;
      Status s = tcp::ParsePrefill(payload, shape, &m);
      if (!s.ok()) return CheckRefusal(s, "Prefill refusal");
      Check(m.num_tokens <= static_cast<std::uint32_t>(shape.max_context),
            "Prefill accepted num_tokens over max_context");
      Check(m.k.size() == m.num_tokens * kv_elems && m.v.size() == m.k.size(),
            "Prefill k/v sizes", std::to_string(m.k.size()));
      Check(tcp::EncodePrefill(h.request_id, m.sequence_id, m.layer, m.num_tokens, m.k, m.v) ==
                original,
            "Prefill does not re-encode to its bytes");
      return;
    }
    case tcp::MessageType::kDecode: {
      tcp::DecodeMessage m;
      Status s = tcp::ParseDecode(payload, shape, &m);
      const bool right_size = payload.size() == tcp::kDecodePrefixBytes + 2 * (q_elems + 2 * kv_elems);
      Check(s.ok() == right_size, "Decode accepted iff its exact size", s.ToString());
      if (!s.ok()) return CheckRefusal(s, "Decode refusal");
      Check(m.q.size() == q_elems && m.k.size() == kv_elems && m.v.size() == kv_elems,
            "Decode q/k/v sizes");
      Check(tcp::EncodeDecode(h.request_id, m.sequence_id, m.layer, m.priority, m.q, m.k, m.v) ==
                original,
            "Decode does not re-encode to its bytes");
      return;
    }
    case tcp::MessageType::kInfo:
    case tcp::MessageType::kShutdown:
      // CheckRequestPayloadBytes let it through, so it is empty.
      Check(payload.empty(), "Info/Shutdown with a payload passed the type check");
      Check(tcp::EncodeEmpty(static_cast<tcp::MessageType>(h.type), h.request_id) == original,
            "empty frame does not re-encode to its bytes");
      return;
    case tcp::MessageType::kStatusResult: {
      Status st;
      Status s = tcp::ParseStatusResult(payload, &st);
      if (!s.ok()) return CheckRefusal(s, "StatusResult refusal");
      const Bytes again = tcp::EncodeStatusResult(h.request_id, st);
      // An OK status drops its message: the encoding is canonical only for an empty one.
      std::uint32_t code = 0, n = 0;
      std::memcpy(&code, payload.data(), 4);
      std::memcpy(&n, payload.data() + 4, 4);
      if (code != 0 || n == 0) Check(again == original, "StatusResult does not re-encode");
      tcp::FrameHeader h2;
      Status st2;
      Check(tcp::ParseStatusResult(PayloadOf(again, &h2), &st2).ok() && SameStatus(st, st2),
            "StatusResult round trip");
      return;
    }
    case tcp::MessageType::kDecodeResult: {
      Status st;
      std::vector<Half> out;
      Status s = tcp::ParseDecodeResult(payload, &st, &out);
      if (!s.ok()) return CheckRefusal(s, "DecodeResult refusal");
      const Bytes again = tcp::EncodeDecodeResult(h.request_id, st, out);
      std::uint32_t n = 0;
      std::memcpy(&n, payload.data() + 4, 4);
      // Canonical: an OK status has no message, an error no output.
      if (st.ok() ? n == 0 : out.empty()) Check(again == original, "DecodeResult does not re-encode");
      tcp::FrameHeader h2;
      Status st2;
      std::vector<Half> out2;
      Check(tcp::ParseDecodeResult(PayloadOf(again, &h2), &st2, &out2).ok(),
            "re-encoded DecodeResult does not parse");
      Check(SameStatus(st, st2) && (st.ok() ? SameHalves(out, out2) : out2.empty()),
            "DecodeResult round trip");
      return;
    }
    case tcp::MessageType::kInfoResult: {
      tcp::InfoMessage info;
      Status s = tcp::ParseInfoResult(payload, &info);
      if (!s.ok()) return CheckRefusal(s, "InfoResult refusal");
      Check(info.shape.Validate().ok(), "InfoResult accepted an invalid shape");
      info.shape.softmax_scale = 0;  // not on the wire
      Check(tcp::EncodeInfoResult(h.request_id, info) == original,
            "InfoResult does not re-encode to its bytes");
      return;
    }
    default:
      Check(std::string(tcp::RequestTypeName(h.type)) == "unknown-type", "type name");
      return;
  }
}

// Reads frames from `stream` as a peer would until it ends or a header is refused.
void ReadStream(std::span<const std::uint8_t> stream, const ModelShape& shape) {
  const std::uint64_t largest = tcp::LargestRequestPayloadBytes(shape);
  Check(largest <= tcp::kMaxPayloadBytes, "largest payload over the cap");
  while (!stream.empty()) {
    tcp::FrameHeader h;
    const std::size_t head = std::min(stream.size(), tcp::kHeaderBytes);
    Status s = tcp::ParseHeader(stream.first(head), &h);
    if (head < tcp::kHeaderBytes) return CheckRefusal(s, "short header");
    if (!s.ok()) {
      CheckRefusal(s, "header refusal");
      std::uint32_t magic = 0, reserved = 0, payload_bytes = 0;
      std::uint16_t version = 0;
      std::memcpy(&magic, stream.data(), 4);
      std::memcpy(&version, stream.data() + 4, 2);
      std::memcpy(&payload_bytes, stream.data() + 16, 4);
      std::memcpy(&reserved, stream.data() + 20, 4);
      Check(magic != tcp::kMagic || version != tcp::kVersion || reserved != 0 ||
                payload_bytes > tcp::kMaxPayloadBytes,
            "a well-formed header was refused", s.ToString());
      return;
    }
    // The header round-trips through the encoder's header.
    Bytes rebuilt = tcp::BeginFrame(static_cast<tcp::MessageType>(h.type), h.request_id);
    std::memcpy(rebuilt.data() + 16, &h.payload_bytes, 4);
    Check(std::memcmp(rebuilt.data(), stream.data(), tcp::kHeaderBytes) == 0,
          "header does not re-encode to its bytes");
    stream = stream.subspan(tcp::kHeaderBytes);

    Status size = tcp::CheckRequestPayloadBytes(h, shape);
    const std::uint64_t max = tcp::MaxRequestPayloadBytes(h.type, shape);
    Check(max <= largest, "a type's largest payload exceeds the announced largest");
    Check(size.ok() == (h.payload_bytes <= max), "CheckRequestPayloadBytes");
    if (!size.ok()) return CheckRefusal(size, "payload size refusal");
    if (h.payload_bytes > stream.size()) return;  // the peer is still sending
    ParseAndReencode(h, stream.first(h.payload_bytes), shape);
    stream = stream.subspan(h.payload_bytes);
  }
}

std::vector<Half> HalvesFrom(FuzzedDataProvider& in, std::size_t n) {
  std::vector<Half> out(n);
  const std::vector<std::uint8_t> raw = in.ConsumeBytes<std::uint8_t>(n * sizeof(Half));
  if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());  // the rest stays zero
  return out;
}

// Messages built from the input: encode, then parse back to the same values.
void EncodeThenParse(FuzzedDataProvider& in, const ModelShape& shape) {
  const std::uint64_t request_id = in.ConsumeIntegral<std::uint64_t>();
  const std::uint64_t q_elems = std::uint64_t(shape.num_q_heads) * shape.head_dim;
  const std::uint64_t kv_elems = shape.kv_token_elems();
  tcp::FrameHeader h;
  switch (in.ConsumeIntegralInRange(0, 6)) {
    case 0: {
      const std::uint64_t id = in.ConsumeIntegral<std::uint64_t>();
      const Bytes f = tcp::EncodeCreateSequence(request_id, id);
      tcp::CreateSequenceMessage m;
      Check(tcp::ParseCreateSequence(PayloadOf(f, &h), &m).ok() && m.sequence_id == id,
            "CreateSequence encode/parse");
      Check(tcp::CheckRequestPayloadBytes(h, shape).ok(), "encoded CreateSequence too large");
      return;
    }
    case 1: {
      tcp::PrefillMessage want;
      want.sequence_id = in.ConsumeIntegral<std::uint64_t>();
      want.layer = in.ConsumeIntegral<std::uint32_t>();
      want.num_tokens = in.ConsumeIntegralInRange<std::uint32_t>(0, shape.max_context);
      want.k = HalvesFrom(in, want.num_tokens * kv_elems);
      want.v = HalvesFrom(in, want.num_tokens * kv_elems);
      const Bytes f = tcp::EncodePrefill(request_id, want.sequence_id, want.layer, want.num_tokens,
                                         want.k, want.v);
      tcp::PrefillMessage m;
      Status s = tcp::ParsePrefill(PayloadOf(f, &h), shape, &m);
      Check(s.ok() && m.sequence_id == want.sequence_id && m.layer == want.layer &&
                m.num_tokens == want.num_tokens && SameHalves(m.k, want.k) &&
                SameHalves(m.v, want.v),
            "Prefill encode/parse", s.ToString());
      Check(tcp::CheckRequestPayloadBytes(h, shape).ok(), "encoded Prefill too large");
      return;
    }
    case 2: {
      tcp::DecodeMessage want;
      want.sequence_id = in.ConsumeIntegral<std::uint64_t>();
      want.layer = in.ConsumeIntegral<std::uint32_t>();
      want.priority = in.ConsumeIntegral<std::uint32_t>();
      want.q = HalvesFrom(in, q_elems);
      want.k = HalvesFrom(in, kv_elems);
      want.v = HalvesFrom(in, kv_elems);
      const Bytes f = tcp::EncodeDecode(request_id, want.sequence_id, want.layer, want.priority,
                                        want.q, want.k, want.v);
      tcp::DecodeMessage m;
      Status s = tcp::ParseDecode(PayloadOf(f, &h), shape, &m);
      Check(s.ok() && m.sequence_id == want.sequence_id && m.layer == want.layer &&
                m.priority == want.priority && SameHalves(m.q, want.q) &&
                SameHalves(m.k, want.k) && SameHalves(m.v, want.v),
            "Decode encode/parse", s.ToString());
      Check(tcp::CheckRequestPayloadBytes(h, shape).ok(), "encoded Decode too large");
      return;
    }
    case 3: {
      const auto type = in.PickValueInArray({tcp::MessageType::kInfo, tcp::MessageType::kShutdown});
      const Bytes f = tcp::EncodeEmpty(type, request_id);
      Check(PayloadOf(f, &h).empty() && h.type == static_cast<std::uint16_t>(type) &&
                h.request_id == request_id && tcp::CheckRequestPayloadBytes(h, shape).ok(),
            "empty frame encode/parse");
      return;
    }
    case 4:
    case 5: {
      // Any code the codec knows, any message (cut to kMaxMessageBytes on encode).
      const auto code =
          static_cast<attnrt::StatusCode>(in.ConsumeIntegralInRange<std::uint32_t>(0, 10));
      std::string msg = in.ConsumeRandomLengthString(8192);
      const Status st = code == attnrt::StatusCode::kOk ? Status::Ok() : Status(code, msg);
      msg.resize(std::min<std::size_t>(msg.size(), tcp::kMaxMessageBytes));
      Status got;
      if (in.ConsumeBool()) {
        const Bytes f = tcp::EncodeStatusResult(request_id, st);
        Status s = tcp::ParseStatusResult(PayloadOf(f, &h), &got);
        Check(s.ok(), "StatusResult encode/parse", s.ToString());
      } else {
        const std::vector<Half> out = HalvesFrom(in, q_elems);
        const Bytes f = tcp::EncodeDecodeResult(request_id, st, out);
        std::vector<Half> got_out;
        Status s = tcp::ParseDecodeResult(PayloadOf(f, &h), &got, &got_out);
        Check(s.ok(), "DecodeResult encode/parse", s.ToString());
        Check(st.ok() ? SameHalves(got_out, out) : got_out.empty(), "DecodeResult output");
      }
      Check(got.code() == st.code() && (st.ok() || got.message() == msg),
            "status encode/parse", got.ToString());
      return;
    }
    default: {
      tcp::InfoMessage want;
      want.shape = shape;
      want.max_payload_bytes = tcp::LargestRequestPayloadBytes(shape);
      want.device = in.ConsumeRandomLengthString(8192);
      const Bytes f = tcp::EncodeInfoResult(request_id, want);
      tcp::InfoMessage got;
      Status s = tcp::ParseInfoResult(PayloadOf(f, &h), &got);
      want.device.resize(std::min<std::size_t>(want.device.size(), tcp::kMaxMessageBytes));
      Check(s.ok() && SameShape(got.shape, shape) &&
                got.max_payload_bytes == want.max_payload_bytes && got.device == want.device,
            "InfoResult encode/parse", s.ToString());
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const ModelShape shape = ShapeFrom(in);
  Check(shape.Validate().ok(), "harness shape invalid");
  if (in.ConsumeBool()) {
    EncodeThenParse(in, shape);
  } else {
    const std::vector<std::uint8_t> stream = in.ConsumeRemainingBytes<std::uint8_t>();
    ReadStream(stream, shape);
  }
  return 0;
}
