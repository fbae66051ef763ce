// serve_tcp: attnrt behind a Boost.Asio TCP server. One connection is one session; decode
// requests are pipelined and completed through the Runtime's callback Submit, so no thread blocks
// per request. Built on the public attnrt::Runtime (attnrt/runtime.h) only.
//
// Protocol (full definition and codec in examples/tcp_protocol.h): little-endian frames, a
// 24-byte header {u32 magic "ANRT", u16 version 1, u16 type, u64 request_id, u32 payload_bytes
// (<= the largest legal payload of the type, see Limits), u32 reserved 0} and a payload:
//   CreateSequence(u64 seq)                                             -> StatusResult
//   Prefill(u64 seq, u32 layer, u32 n, k[n][Hkv][D], v[n][Hkv][D])     -> StatusResult
//   Decode(u64 seq, u32 layer, u32 priority, q[H][D], k[Hkv][D], v[Hkv][D])
//                                                 -> DecodeResult(code, message, out[H][D])
//   Info                                          -> InfoResult(shape, max payload, device)
//   Shutdown                                      -> StatusResult; the server drains and exits
// A client may send many frames without waiting; responses carry the request id and may come back
// out of order. A frame with an intact header but a bad payload gets an error response naming the
// field; a bad header (or payload_bytes over the type's largest legal payload) gets one too, and
// then the connection is closed (it cannot be re-framed).
//
// Threads: each of --threads runs its own io_context, and a session stays on one of them for its
// whole life (reads, parsing, Submit, CreateSequence, Prefill, writes). That is what keeps a
// connection's Decode frames in order: the runtime's intake queue is FIFO per submitting thread
// only, so two frames of one (sequence, layer) submitted from two threads could swap. The
// runtime's completion threads encode DecodeResults and post them to the session's io_context,
// which owns the socket and its write queue.
//
// Limits: what a peer can make the server hold is bounded, whatever it sends.
//   Per frame: payload_bytes may not exceed the largest legal payload of the frame's type for the
//     served shape (Decode exactly 16 + 2*(H*D + 2*Hkv*D); Prefill 16 + 4*max_context*Hkv*D, at
//     most 64 MiB; CreateSequence 8; Info, Shutdown 0). A larger announcement is answered with
//     InvalidArgument naming payload_bytes, and the connection is closed.
//   Committed bytes: a payload is read as its bytes arrive, so memory follows bytes received,
//     not bytes announced. All connections together hold at most --max-pending-mb in partially
//     received payloads; a frame over 64 KiB that would pass the budget is read and dropped and
//     answered ResourceExhausted (the connection stays usable; Decode frames and frames up to
//     64 KiB are always admitted). A frame must complete within --frame-timeout-ms of its
//     first byte, else it is answered (when its header arrived) and the connection is closed.
//   Connections: at most --max-connections open; the next ones are answered Unavailable and
//     closed at once, and counted as refused.
//   Replies: while a connection's queued replies plus the replies of its in-flight decodes exceed
//     --max-reply-backlog-kb, the server reads no new request from it (a slow reader throttles
//     itself; nothing is dropped).
//   So memory stays under about --max-pending-mb + --max-connections * (--max-reply-backlog-kb +
//   80 KiB) on top of the runtime's KV cache.
// Drain: --max-seconds, a Shutdown message, SIGINT or SIGTERM stop accepting connections and
// reading requests (bytes that arrive later are discarded, a partly received frame is dropped);
// every request already read is answered (admitted decodes run to completion); then each
// connection writes its last reply, shuts down its sending side, reads and discards until the
// peer's end of stream or --close-linger-ms, and closes, so no reset destroys replies the peer has
// not read yet. Connections not closed within --drain-timeout-s are closed (their unwritten
// replies counted as dropped). The summary ends with a machine-readable 'serve_tcp: counts:' line;
// replies_written counts replies whose last byte went to the socket.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded
#include <vector>

#include <malloc.h>
#include <sys/resource.h>

#include <boost/asio.hpp>

#include <attnrt/runtime.h>
#include "examples/tcp_protocol.h"
#include "tools/flags.h"

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using attnrt::Half;
using attnrt::Status;
using attnrt::tcp::MessageType;
using Clock = std::chrono::steady_clock;

// Reads land in a per-connection buffer of this size and are copied into headers and payloads.
constexpr std::size_t kReadChunkBytes = 16u << 10;
// Payloads up to this size (or a Decode's, if larger) are admitted whatever the committed-bytes
// budget says, and a connection keeps a payload buffer this large between frames: a Decode never
// fails for want of budget, and what it holds is bounded per connection instead.
constexpr std::size_t kAlwaysAdmittedPayloadBytes = 64u << 10;
// Most replies sent by one gathered write.
constexpr std::size_t kMaxGatheredReplies = 64;
// Lines about misbehaving peers on stderr, at most (the summary counts them all).
constexpr long kMaxPeerLogLines = 50;
// Allocations from this size up are mmapped and returned to the system when freed (see main).
constexpr int kMmapThresholdBytes = 256 << 10;
// An accept that failed (e.g. out of descriptors) is retried after this, not at once.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);

struct ServerOptions {
  attnrt::DeviceKind device = attnrt::DeviceKind::kAuto;
  std::string bind = "127.0.0.1";
  int port = 0;
  bool allow_remote = false;
  int threads = 2;
  int layers = 2;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  int max_context = 4096;
  int window_us = 100;
  int max_batch = 64;
  int kv_cache_mb = 0;
  attnrt::KvCacheType kv_cache_type = attnrt::KvCacheType::kFp16;
  int max_seconds = 0;
  int max_connections = 256;
  int max_pending_mb = 128;
  int max_reply_backlog_kb = 1024;
  int frame_timeout_ms = 30000;
  int close_linger_ms = 2000;
  int drain_timeout_s = 10;
  int metrics_port = -1;  // -1: no HTTP metrics endpoint
};

// Parses the flags into *o; returns FlagSet::kContinue or the exit code.
int ParseArgs(int argc, char** argv, ServerOptions* o) {
  std::string device = "auto";
  std::string kv_cache_type = "fp16";
  attnrt::tools::FlagSet flags(
      "serve_tcp",
      "serve_tcp: the attnrt runtime behind a TCP server (Boost.Asio). Protocol: little-endian\n"
      "frames {magic, version, type, request id, payload length} carrying CreateSequence,\n"
      "Prefill, Decode (pipelined; responses by request id, any order), Info and Shutdown;\n"
      "see examples/tcp_protocol.h. Prints 'serve_tcp: listening on ADDRESS:PORT (DEVICE)'.");
  flags.Choice("--device", &device, attnrt::tools::DeviceChoices(),
               "executor (auto: CUDA when a GPU is present)");
  flags.String("--bind", &o->bind, "address to listen on; non-loopback needs --allow-remote");
  flags.Int("--port", &o->port, "port; 0 picks a free one (printed in the banner)", 0, 65535);
  flags.Bool("--allow-remote", &o->allow_remote, "allow a non-loopback --bind (no authentication: trusted nets)");
  flags.Int("--threads", &o->threads, "io threads (each runs its own connections)", 1, 256);
  flags.Int("--layers", &o->layers, "layers", 1, 1024);
  flags.Int("--heads", &o->heads, "query heads H", 1, 1024);
  flags.Int("--kv-heads", &o->kv_heads, "KV heads Hkv", 1, 1024);
  flags.Int("--head-dim", &o->head_dim, "64, 128 or 256");
  flags.Int("--block-size", &o->block_size, "8, 16, 32 or 64");
  flags.Int("--max-context", &o->max_context, "longest sequence in tokens", 1, 1 << 24);
  flags.Int("--window-us", &o->window_us, "batching window: max queue delay in us");
  flags.Int("--max-batch", &o->max_batch, "max batch size", 1, 1 << 16);
  flags.Int("--kv-cache-mb", &o->kv_cache_mb, "KV cache size in MiB (0: runtime default)", 0,
            1 << 24);
  flags.Choice("--kv-cache-type", &kv_cache_type, {"fp16", "fp8_e4m3"},
               "how the KV cache stores K and V: fp16, or fp8_e4m3 (one byte an element, scales "
               "1.0: twice the sequences, an approximate cache; see attnrt::KvCacheType)");
  flags.Int("--max-seconds", &o->max_seconds,
            "exit after N seconds (0: run until Shutdown, SIGINT, SIGTERM)");
  flags.Int("--max-connections", &o->max_connections,
            "connections open at once; later ones are answered Unavailable and closed", 1,
            1 << 20);
  flags.Int("--max-pending-mb", &o->max_pending_mb,
            "MiB all partially received payloads may hold together; a frame over 64 KiB past it "
            "is dropped and answered ResourceExhausted", 1, 1 << 20);
  flags.Int("--max-reply-backlog-kb", &o->max_reply_backlog_kb,
            "per connection: KiB of unwritten and in-flight replies above which its requests are "
            "not read", 1, 1 << 22);
  flags.Int("--frame-timeout-ms", &o->frame_timeout_ms,
            "a frame must arrive within N ms of its first byte, else the connection is closed "
            "(0: no limit)");
  flags.Int("--close-linger-ms", &o->close_linger_ms,
            "a closing connection reads and discards for up to N ms awaiting the peer's end of "
            "stream");
  flags.Int("--drain-timeout-s", &o->drain_timeout_s,
            "a closing connection's time to write its last replies; then it is closed and they "
            "count as dropped", 1, 3600);
  flags.Int("--metrics-port", &o->metrics_port,
            "also serve GET /metrics (Prometheus text) over HTTP on this port of --bind; 0 picks "
            "a free one (printed); -1: off", -1, 65535);
  const int rc = flags.Parse(argc, argv);
  o->device = attnrt::tools::ToDeviceKind(device);
  attnrt::ParseKvCacheType(kv_cache_type, &o->kv_cache_type);  // a Choice: always one of them
  return rc;
}

struct ServerLimits {
  long max_connections = 0;
  std::size_t max_pending_payload_bytes = 0;
  std::size_t max_reply_backlog_bytes = 0;
  Clock::duration frame_timeout{};  // zero: none
  Clock::duration close_linger{};
  Clock::duration flush_timeout{};
};

class Session;

// Limits, counters, the committed-bytes budget and the stop request, shared by every session.
// Thread safety: all members may be used from any thread.
class Server {
 public:
  Server(attnrt::Runtime* runtime, ServerLimits limits) : runtime_(runtime), limits_(limits) {}

  attnrt::Runtime& runtime() { return *runtime_; }
  const ServerLimits& limits() const { return limits_; }

  // The first call wins; later calls only log.
  void RequestStop(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
    stop_reason_ = why;
    cv_.notify_all();
  }
  std::string WaitForStop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_requested_; });
    return stop_reason_;
  }

  void Register(const std::shared_ptr<Session>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
    sessions_.push_back(s);
  }
  std::vector<std::shared_ptr<Session>> LiveSessions() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Session>> out;
    for (auto& w : sessions_) {
      if (auto s = w.lock()) out.push_back(std::move(s));
    }
    return out;
  }

  // Commits `bytes` of payload buffer to the budget of --max-pending-mb; `always` commits past it
  // (small frames). False, and nothing committed, when the budget has no room.
  bool TryCommitPayload(std::size_t bytes, bool always) {
    std::size_t now = pending_payload_bytes_.load();
    do {
      if (!always && now + bytes > limits_.max_pending_payload_bytes) return false;
    } while (!pending_payload_bytes_.compare_exchange_weak(now, now + bytes));
    std::size_t peak = peak_pending_payload_bytes_.load();
    while (now + bytes > peak &&
           !peak_pending_payload_bytes_.compare_exchange_weak(peak, now + bytes)) {
    }
    return true;
  }
  void ReleasePayload(std::size_t bytes) { pending_payload_bytes_ -= bytes; }
  std::size_t pending_payload_bytes() const { return pending_payload_bytes_.load(); }
  std::size_t peak_pending_payload_bytes() const { return peak_pending_payload_bytes_.load(); }

  // One stderr line about a peer, up to kMaxPeerLogLines in all.
  void LogPeer(const std::string& peer, const std::string& what) {
    const long n = ++peer_log_lines_;
    if (n <= kMaxPeerLogLines) std::fprintf(stderr, "serve_tcp: %s: %s\n", peer.c_str(), what.c_str());
    if (n == kMaxPeerLogLines) {
      std::fprintf(stderr, "serve_tcp: further lines about peers suppressed (see the summary)\n");
    }
  }

  // Waits until `counter` is 0 or the deadline passes; true when it reached 0.
  static bool WaitForZero(const std::atomic<long>& counter, Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    while (counter.load() != 0) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  std::atomic<long> connections{0};       // accepted and served
  std::atomic<long> refused{0};           // over --max-connections: answered and closed
  std::atomic<long> open_connections{0};  // served sockets not yet closed
  std::atomic<long> live_sessions{0};     // Session objects alive
  std::atomic<long> frames{0};            // requests read whole (each gets exactly one reply)
  std::atomic<long> decodes_ok{0};
  std::atomic<long> decode_errors{0};     // rejected at Submit or completed with an error
  std::atomic<long> request_errors{0};    // other requests answered non-OK
  std::atomic<long> protocol_errors{0};   // bad headers, oversized payload_bytes: closed
  std::atomic<long> budget_rejections{0}; // frames dropped for --max-pending-mb
  std::atomic<long> incomplete_frames{0}; // dropped part-way: end of stream, reset, timeout, drain
  std::atomic<long> timed_out_frames{0};  // --frame-timeout-ms (also counted as incomplete)
  std::atomic<long> replies_written{0};   // last byte handed to the socket
  std::atomic<long> decode_replies_written{0};
  std::atomic<long> decode_ok_written{0};
  std::atomic<long> replies_dropped{0};   // never written: the peer went away or would not read
  std::atomic<long> in_flight{0};         // decodes submitted whose callback has not finished

 private:
  attnrt::Runtime* runtime_;
  const ServerLimits limits_;
  std::atomic<std::size_t> pending_payload_bytes_{0};
  std::atomic<std::size_t> peak_pending_payload_bytes_{0};
  std::atomic<long> peer_log_lines_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;                   // GUARDED_BY(mu_)
  std::string stop_reason_;                       // GUARDED_BY(mu_)
  std::vector<std::weak_ptr<Session>> sessions_;  // GUARDED_BY(mu_)
};

enum class ReplyKind { kDecodeOk, kDecodeError, kOther };

// One TCP connection. Reads bytes as they come, cuts them into frames and handles each complete
// frame at once (so Decode frames reach Submit in the peer's order, from one thread); replies go
// through a write queue. See the top comment for the limits and the closing sequence.
// Thread safety: the socket, the timers, the read state and the write queue belong to the
// socket's io_context, which one thread runs; the public methods may be called from any thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server* server)
      : socket_(std::move(socket)), frame_timer_(socket_.get_executor()),
        close_timer_(socket_.get_executor()), server_(server), rx_(kReadChunkBytes) {
    boost::system::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : ep.address().to_string() + ":" + std::to_string(ep.port());
    const attnrt::ModelShape& s = shape();
    decode_reply_bytes_ = attnrt::tcp::kHeaderBytes + 12 +
                          static_cast<std::size_t>(s.num_q_heads) * s.head_dim * sizeof(Half);
    always_admitted_bytes_ = std::max<std::size_t>(
        kAlwaysAdmittedPayloadBytes,
        attnrt::tcp::MaxRequestPayloadBytes(static_cast<std::uint16_t>(MessageType::kDecode), s));
    ++server_->live_sessions;
  }
  ~Session() { --server_->live_sessions; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void Start() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->ReadMore(); });
  }

  // A decode's reply, from a runtime completion thread.
  void SendDecodeReply(std::vector<std::uint8_t> frame, ReplyKind kind) {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), frame = std::move(frame), kind]() mutable {
                 --self->in_flight_;
                 self->Enqueue(std::move(frame), kind);
               });
  }

  // Drain, first step: no further request is read (what arrives is discarded); `done` runs on
  // the session's thread once that holds.
  void StopReading(std::function<void()> done) {
    asio::post(socket_.get_executor(), [self = shared_from_this(), done = std::move(done)] {
      self->DiscardInput();
      done();
    });
  }

  // Drain, last step: write every reply, then close gracefully (see BeginClose).
  void CloseWhenFlushed() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->BeginClose(); });
  }

  void CloseNowFromAnyThread(std::string why) {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), why = std::move(why)] { self->CloseNow(why); });
  }

 private:
  const attnrt::ModelShape& shape() const { return server_->runtime().shape(); }
  bool FrameStarted() const { return header_filled_ > 0 || in_payload_; }
  // What this connection's replies hold or will hold: queued ones and those of in-flight decodes.
  std::size_t ReplyBacklog() const {
    return queued_bytes_ + static_cast<std::size_t>(in_flight_) * decode_reply_bytes_;
  }

  // --- reading --------------------------------------------------------------------------------

  void ReadMore() {
    if (closed_ || reading_ || peer_eof_) return;
    if (!discarding_ && rx_begin_ != rx_end_) return;  // buffered bytes first (backlog pause)
    reading_ = true;
    socket_.async_read_some(asio::buffer(rx_), [self = shared_from_this()](
                                                   boost::system::error_code ec, std::size_t n) {
      self->OnRead(ec, n);
    });
  }

  void OnRead(boost::system::error_code ec, std::size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec == asio::error::eof) {
      peer_eof_ = true;
      DropPartialFrame();
      if (write_shut_) {
        CloseNow("");  // both directions finished: nothing unread on either side
      } else {
        BeginClose();  // answer what the peer sent, then close
      }
      return;
    }
    if (ec) {
      const bool quiet = ec == asio::error::operation_aborted ||
                         ec == asio::error::connection_reset;
      CloseNow(quiet ? "" : "read: " + ec.message());
      return;
    }
    if (discarding_) {
      ReadMore();
      return;
    }
    rx_begin_ = 0;
    rx_end_ = n;
    Consume();
  }

  // Cuts buffered bytes into frames and handles each complete one, then reads more. Pauses at a
  // frame boundary while the reply backlog is over its cap (OnWritten resumes).
  void Consume() {
    const ServerLimits& limits = server_->limits();
    while (!closed_ && !discarding_ && rx_begin_ != rx_end_) {
      if (!FrameStarted()) {
        if (ReplyBacklog() >= limits.max_reply_backlog_bytes) {
          paused_ = true;
          return;
        }
        frame_deadline_ = Clock::now() + limits.frame_timeout;
      }
      const std::uint8_t* bytes = rx_.data() + rx_begin_;
      const std::size_t available = rx_end_ - rx_begin_;
      if (!in_payload_) {
        const std::size_t take = std::min(available, header_bytes_.size() - header_filled_);
        std::memcpy(header_bytes_.data() + header_filled_, bytes, take);
        header_filled_ += take;
        rx_begin_ += take;
        if (header_filled_ == header_bytes_.size()) OnHeader();
        continue;
      }
      const std::size_t take =
          std::min<std::size_t>(available, header_.payload_bytes - payload_received_);
      if (!discard_payload_ && ReservePayload(payload_received_ + take)) {
        payload_.insert(payload_.end(), bytes, bytes + take);
      }
      payload_received_ += take;
      rx_begin_ += take;
      if (payload_received_ == header_.payload_bytes) OnFrame();
    }
    paused_ = false;
    if (closed_) return;
    if (FrameStarted() && !discarding_) ArmFrameTimer();
    ReadMore();
  }

  void OnHeader() {
    Status st = attnrt::tcp::ParseHeader(header_bytes_, &header_);
    if (st.ok()) st = attnrt::tcp::CheckRequestPayloadBytes(header_, shape());
    if (!st.ok()) {
      // The stream cannot be re-framed (or the frame is no request): answer, then close.
      ++server_->protocol_errors;
      server_->LogPeer(peer_, "bad frame header (" + st.ToString() + "); closing the connection");
      header_filled_ = 0;
      Enqueue(attnrt::tcp::EncodeStatusResult(header_.request_id, st), ReplyKind::kOther);
      BeginClose();
      return;
    }
    in_payload_ = true;
    payload_received_ = 0;
    payload_.clear();
    discard_payload_ = false;
    if (header_.type < static_cast<std::uint16_t>(MessageType::kCreateSequence) ||
        header_.type > static_cast<std::uint16_t>(MessageType::kShutdown)) {
      discard_payload_ = true;
      discard_status_ = attnrt::InvalidArgumentError(
          "type = " + std::to_string(header_.type) +
          " is not a request type (1 CreateSequence .. 5 Shutdown)");
    }
    if (header_.payload_bytes == 0) OnFrame();
  }

  // Makes room for `bytes` of the current payload, committing the growth to the server's budget.
  // When the budget refuses, the rest of the frame is read and dropped and the frame is answered
  // ResourceExhausted; returns false then.
  bool ReservePayload(std::size_t bytes) {
    if (payload_.capacity() >= bytes) return true;
    const std::size_t want = std::min<std::size_t>(
        header_.payload_bytes, std::max({bytes, 2 * payload_.capacity(), kReadChunkBytes}));
    const std::size_t growth = want > committed_ ? want - committed_ : 0;
    const bool always = header_.payload_bytes <= always_admitted_bytes_;
    if (!server_->TryCommitPayload(growth, always)) {
      ++server_->budget_rejections;
      discard_payload_ = true;
      discard_status_ = attnrt::ResourceExhaustedError(
          "payload_bytes = " + std::to_string(header_.payload_bytes) +
          ": partially received payloads already hold " +
          std::to_string(server_->pending_payload_bytes()) + " bytes, the server's budget is " +
          std::to_string(server_->limits().max_pending_payload_bytes >> 20) +
          " MiB (--max-pending-mb); retry later");
      ReleasePayload();
      return false;
    }
    committed_ += growth;
    payload_.reserve(want);
    return true;
  }

  // Frees the payload buffer (a small one is kept) and returns its commitment to the budget.
  void ReleasePayload() {
    server_->ReleasePayload(committed_);
    committed_ = 0;
    if (payload_.capacity() > kAlwaysAdmittedPayloadBytes) {
      std::vector<std::uint8_t>().swap(payload_);
    } else {
      payload_.clear();
    }
  }

  // A frame that will never complete (end of stream, reset, timeout, drain): no reply is owed.
  void DropPartialFrame() {
    if (!FrameStarted()) return;
    ++server_->incomplete_frames;
    header_filled_ = 0;
    in_payload_ = false;
    discard_payload_ = false;
    ReleasePayload();
  }

  void OnFrame() {
    ++server_->frames;
    in_payload_ = false;
    header_filled_ = 0;
    if (discard_payload_) {
      ReplyError(discard_status_);
    } else {
      Handle();
    }
    discard_payload_ = false;
    ReleasePayload();
  }

  void ArmFrameTimer() {
    if (frame_timer_armed_ || server_->limits().frame_timeout == Clock::duration::zero()) return;
    frame_timer_armed_ = true;
    frame_timer_.expires_at(frame_deadline_);
    frame_timer_.async_wait(
        [self = shared_from_this()](boost::system::error_code ec) { self->OnFrameTimer(ec); });
  }

  void OnFrameTimer(boost::system::error_code ec) {
    frame_timer_armed_ = false;
    if (ec || closed_ || discarding_ || !FrameStarted()) return;
    if (Clock::now() < frame_deadline_) {  // the frame it was armed for completed; a later one
      ArmFrameTimer();
      return;
    }
    ++server_->timed_out_frames;
    const std::string limit = " within --frame-timeout-ms = " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                           server_->limits().frame_timeout).count());
    std::string what;
    if (in_payload_) {
      what = "payload_bytes = " + std::to_string(header_.payload_bytes) + ", of which " +
             std::to_string(payload_received_) + " arrived" + limit;
      ReplyError(attnrt::DeadlineExceededError(what));  // before the drop: it names the frame
    } else {
      what = "frame header: " + std::to_string(header_filled_) + " of " +
             std::to_string(header_bytes_.size()) + " bytes arrived" + limit;
    }
    server_->LogPeer(peer_, "incomplete frame (" + what + "); closing the connection");
    DropPartialFrame();
    BeginClose();
  }

  // --- requests -------------------------------------------------------------------------------

  void Handle() {
    const std::uint64_t id = header_.request_id;
    attnrt::Runtime& rt = server_->runtime();
    switch (static_cast<MessageType>(header_.type)) {
      case MessageType::kDecode:
        HandleDecode();
        break;
      case MessageType::kCreateSequence: {
        attnrt::tcp::CreateSequenceMessage m;
        Status st = attnrt::tcp::ParseCreateSequence(payload_, &m);
        if (st.ok()) st = rt.CreateSequence(m.sequence_id);
        Reply(id, st);
        break;
      }
      case MessageType::kPrefill: {
        attnrt::tcp::PrefillMessage m;
        Status st = attnrt::tcp::ParsePrefill(payload_, shape(), &m);
        if (st.ok()) st = CheckedLayer(m.layer);
        if (st.ok()) {
          st = rt.Prefill(m.sequence_id, static_cast<int>(m.layer),
                          static_cast<int>(m.num_tokens), m.k, m.v);
        }
        Reply(id, st);
        break;
      }
      case MessageType::kInfo: {
        // The header check admitted no payload, so the frame is well formed.
        attnrt::tcp::InfoMessage info;
        info.shape = shape();
        info.max_payload_bytes = attnrt::tcp::LargestRequestPayloadBytes(shape());
        info.device = rt.device_description();
        Enqueue(attnrt::tcp::EncodeInfoResult(id, info), ReplyKind::kOther);
        break;
      }
      case MessageType::kShutdown:
        Reply(id, Status::Ok());
        server_->RequestStop("Shutdown message from " + peer_);
        break;
      default:  // OnHeader marks other types for discarding
        ReplyError(attnrt::InternalError("type = " + std::to_string(header_.type) +
                                         " reached Handle"));
        break;
    }
  }

  Status CheckedLayer(std::uint32_t layer) const {
    // Larger values would wrap when cast to the API's int; the runtime checks the real bound.
    if (layer > (1u << 30)) {
      return attnrt::InvalidArgumentError("layer = " + std::to_string(layer) + " is out of range");
    }
    return Status::Ok();
  }

  void HandleDecode() {
    const std::uint64_t id = header_.request_id;
    attnrt::tcp::DecodeMessage m;
    Status st = attnrt::tcp::ParseDecode(payload_, shape(), &m);
    if (st.ok()) st = CheckedLayer(m.layer);
    if (st.ok() && m.priority > (1u << 30)) {
      st = attnrt::InvalidArgumentError("priority = " + std::to_string(m.priority) +
                                        " is out of range");
    }
    if (!st.ok()) {
      ReplyError(st);
      return;
    }
    attnrt::DecodeRequest req;
    req.sequence_id = m.sequence_id;
    req.layer = static_cast<int>(m.layer);
    req.priority = static_cast<int>(m.priority);
    req.q = m.q;
    req.k = m.k;
    req.v = m.v;
    ++server_->in_flight;
    ++in_flight_;
    Server* server = server_;
    // Runs on a runtime completion thread. The session reference is dropped before in_flight
    // falls, so once in_flight is 0 no completion thread holds a session.
    auto done = [self = shared_from_this(), server, id](attnrt::DecodeResult r) mutable {
      const bool ok = r.status.ok();
      ++(ok ? server->decodes_ok : server->decode_errors);
      self->SendDecodeReply(attnrt::tcp::EncodeDecodeResult(id, r.status, r.output),
                            ok ? ReplyKind::kDecodeOk : ReplyKind::kDecodeError);
      self.reset();
      --server->in_flight;
    };
    auto submitted = server_->runtime().Submit(req, std::move(done));
    if (!submitted.ok()) {  // rejected: the callback will never run
      --server_->in_flight;
      --in_flight_;
      ReplyError(submitted.status());
    }
  }

  void Reply(std::uint64_t id, const Status& st) {
    if (!st.ok()) ++server_->request_errors;
    Enqueue(attnrt::tcp::EncodeStatusResult(id, st), ReplyKind::kOther);
  }

  // An error reply to the current frame, in the response type its request type expects.
  void ReplyError(const Status& st) {
    if (header_.type == static_cast<std::uint16_t>(MessageType::kDecode)) {
      ++server_->decode_errors;
      Enqueue(attnrt::tcp::EncodeDecodeResult(header_.request_id, st, {}),
              ReplyKind::kDecodeError);
    } else {
      Reply(header_.request_id, st);
    }
  }

  // --- writing and closing --------------------------------------------------------------------

  void Enqueue(std::vector<std::uint8_t> frame, ReplyKind kind) {
    if (closed_) {
      ++server_->replies_dropped;
      return;
    }
    queued_bytes_ += frame.size();
    write_queue_.push_back({std::move(frame), kind});
    WriteNext();
  }

  void WriteNext() {
    if (closed_ || writing_) return;
    if (write_queue_.empty()) {
      MaybeShutDownSending();
      return;
    }
    writing_ = true;
    gathered_ = std::min(write_queue_.size(), kMaxGatheredReplies);
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(gathered_);
    for (std::size_t i = 0; i < gathered_; ++i) buffers.push_back(asio::buffer(write_queue_[i].bytes));
    asio::async_write(socket_, buffers,
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(boost::system::error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      const bool quiet = ec == asio::error::broken_pipe || ec == asio::error::connection_reset;
      CloseNow(quiet ? "" : "write: " + ec.message());
      return;
    }
    for (std::size_t i = 0; i < gathered_; ++i) {
      const QueuedReply& r = write_queue_.front();
      ++server_->replies_written;
      if (r.kind != ReplyKind::kOther) ++server_->decode_replies_written;
      if (r.kind == ReplyKind::kDecodeOk) ++server_->decode_ok_written;
      queued_bytes_ -= r.bytes.size();
      write_queue_.pop_front();
    }
    if (paused_ && ReplyBacklog() < server_->limits().max_reply_backlog_bytes) Consume();
    WriteNext();
  }

  // Reads no further request: from now on what arrives is read and discarded (never left unread,
  // which would turn the eventual close into a reset). A partly received frame is dropped.
  void DiscardInput() {
    if (discarding_) return;
    discarding_ = true;
    DropPartialFrame();
    rx_begin_ = rx_end_ = 0;
    paused_ = false;
    ReadMore();
  }

  // Starts a graceful close: no further request is read; once every reply is written (those of
  // in-flight decodes too) the sending side is shut down and the peer's end of stream awaited.
  void BeginClose() {
    if (closed_) return;
    DiscardInput();
    if (!closing_) {
      closing_ = true;
      close_timer_.expires_after(server_->limits().flush_timeout);
      close_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec) self->CloseNow("replies not read by the peer within --drain-timeout-s");
      });
    }
    MaybeShutDownSending();
  }

  void MaybeShutDownSending() {
    if (closed_ || !closing_ || write_shut_ || writing_ || !write_queue_.empty() ||
        in_flight_ > 0) {
      return;
    }
    write_shut_ = true;
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (peer_eof_ || ec) {
      CloseNow("");
      return;
    }
    // The peer sees our end of stream after the last reply; wait (bounded) for its own.
    close_timer_.expires_after(server_->limits().close_linger);  // cancels the flush deadline
    close_timer_.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (!e) self->CloseNow("");
    });
    ReadMore();
  }

  void CloseNow(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    if (!why.empty()) server_->LogPeer(peer_, "closing the connection: " + why);
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    frame_timer_.cancel();
    close_timer_.cancel();
    DropPartialFrame();
    server_->replies_dropped += static_cast<long>(write_queue_.size());
    write_queue_.clear();
    queued_bytes_ = 0;
    --server_->open_connections;
  }

  struct QueuedReply {
    std::vector<std::uint8_t> bytes;
    ReplyKind kind;
  };

  tcp::socket socket_;  // on one single-threaded io_context for the session's life
  asio::steady_timer frame_timer_;  // --frame-timeout-ms
  asio::steady_timer close_timer_;  // flush deadline, then the linger deadline
  Server* server_;
  std::string peer_;
  std::size_t decode_reply_bytes_ = 0;     // a DecodeResult's size, for the backlog
  std::size_t always_admitted_bytes_ = 0;  // payloads this small skip the budget

  // Reading: rx_[rx_begin_, rx_end_) is read but not yet cut into frames.
  std::vector<std::uint8_t> rx_;
  std::size_t rx_begin_ = 0, rx_end_ = 0;
  std::array<std::uint8_t, attnrt::tcp::kHeaderBytes> header_bytes_{};
  std::size_t header_filled_ = 0;
  attnrt::tcp::FrameHeader header_;
  bool in_payload_ = false;  // the header is complete; payload_received_ of its bytes arrived
  std::size_t payload_received_ = 0;
  std::vector<std::uint8_t> payload_;
  std::size_t committed_ = 0;     // payload_ bytes charged to the server's budget
  bool discard_payload_ = false;  // the payload is read and dropped; discard_status_ answers it
  Status discard_status_;
  Clock::time_point frame_deadline_;
  bool frame_timer_armed_ = false;

  // Writing.
  std::deque<QueuedReply> write_queue_;
  std::size_t queued_bytes_ = 0;
  std::size_t gathered_ = 0;  // replies in the write in progress
  int in_flight_ = 0;         // decodes submitted whose reply is not queued yet

  bool reading_ = false;     // a read is in progress
  bool writing_ = false;     // a write is in progress
  bool paused_ = false;      // buffered frames wait for the reply backlog to shrink
  bool discarding_ = false;  // no further request is read
  bool peer_eof_ = false;    // the peer shut down its sending side
  bool closing_ = false;     // BeginClose ran
  bool write_shut_ = false;  // our sending side is shut down; awaiting the peer's end of stream
  bool closed_ = false;
};

// Over --max-connections: an Unavailable StatusResult (request_id 0) if the socket takes it at
// once, then close. A client that already sent bytes may see a reset instead; either way it
// learns promptly.
void Refuse(tcp::socket socket, Server* server) {
  ++server->refused;
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  const auto frame = attnrt::tcp::EncodeStatusResult(
      0, attnrt::UnavailableError("the server has --max-connections = " +
                                  std::to_string(server->limits().max_connections) +
                                  " connections open; retry later"));
  socket.write_some(asio::buffer(frame), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

// Opens, binds and listens `acceptor` on `endpoint` (address reuse on).
boost::system::error_code Listen(tcp::acceptor& acceptor, const tcp::endpoint& endpoint) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  return ec;
}

// GET /metrics over HTTP/1.0 (Prometheus' convention), one request per connection, on its own
// port: the runtime's MetricsText(). Anything else gets 404 (another path) or 405 (another
// method); a request head over 8 KiB or slower than 5 s is dropped. Runs on one io_context.
class MetricsEndpoint {
 public:
  MetricsEndpoint(asio::io_context& io, attnrt::Runtime* runtime)
      : io_(io), acceptor_(io), runtime_(runtime) {}

  boost::system::error_code Listen(const tcp::endpoint& endpoint) {
    const boost::system::error_code ec = ::Listen(acceptor_, endpoint);
    if (!ec) AcceptNext();
    return ec;
  }
  tcp::endpoint local_endpoint() const {
    boost::system::error_code ec;
    return acceptor_.local_endpoint(ec);
  }
  void Close() {
    boost::system::error_code ec;
    acceptor_.close(ec);
  }

 private:
  struct Exchange {
    explicit Exchange(asio::io_context& io) : socket(io), timer(io), head(8192) {}
    tcp::socket socket;
    asio::steady_timer timer;
    asio::streambuf head;
    std::string reply;
  };

  void AcceptNext() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) Serve(std::move(socket));
      AcceptNext();
    });
  }

  void Serve(tcp::socket socket) {
    auto x = std::make_shared<Exchange>(io_);
    x->socket = std::move(socket);
    x->timer.expires_after(std::chrono::seconds(5));
    x->timer.async_wait([x](boost::system::error_code ec) {
      if (!ec) x->socket.close(ec);
    });
    asio::async_read_until(x->socket, x->head, "\r\n\r\n",
                           [this, x](boost::system::error_code ec, std::size_t) {
      if (ec) {
        x->timer.cancel();
        return;
      }
      std::istream in(&x->head);
      std::string method, target;
      in >> method >> target;
      std::string status = "200 OK", body;
      if (method != "GET") {
        status = "405 Method Not Allowed";
        body = "only GET /metrics\n";
      } else if (target != "/metrics") {
        status = "404 Not Found";
        body = "only GET /metrics\n";
      } else {
        body = runtime_->MetricsText();
      }
      x->reply = "HTTP/1.0 " + status +
                 "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      asio::async_write(x->socket, asio::buffer(x->reply),
                        [x](boost::system::error_code, std::size_t) {
        boost::system::error_code ignored;
        x->socket.shutdown(tcp::socket::shutdown_both, ignored);
        x->socket.close(ignored);
        x->timer.cancel();
      });
    });
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  attnrt::Runtime* runtime_;
};

// Accepts connections and spreads them over the io_contexts, round robin.
void Accept(tcp::acceptor* acceptor, std::vector<std::unique_ptr<asio::io_context>>* contexts,
            std::size_t next, Server* server, asio::steady_timer* retry) {
  asio::io_context& io = *(*contexts)[next % contexts->size()];
  acceptor->async_accept(io, [=](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // E.g. out of descriptors: retry a little later instead of spinning on the error.
      server->LogPeer("acceptor", "accept: " + ec.message());
      retry->expires_after(kAcceptRetryDelay);
      retry->async_wait([=](boost::system::error_code e) {
        if (!e && acceptor->is_open()) Accept(acceptor, contexts, next, server, retry);
      });
      return;
    }
    if (server->open_connections.load() >= server->limits().max_connections) {
      Refuse(std::move(socket), server);
    } else {
      ++server->connections;
      ++server->open_connections;
      boost::system::error_code opt_ec;
      socket.set_option(tcp::no_delay(true), opt_ec);  // small frames: no Nagle delay
      auto session = std::make_shared<Session>(std::move(socket), server);
      server->Register(session);
      session->Start();
    }
    Accept(acceptor, contexts, next + 1, server, retry);
  });
}

// Raises the descriptor limit to fit --max-connections where the hard limit allows; warns if not.
void FitDescriptorLimit(long max_connections) {
  constexpr rlim_t kSpareDescriptors = 64;  // runtime, listener, stdio, a refused socket
  const rlim_t need = static_cast<rlim_t>(max_connections) + kSpareDescriptors;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= need) return;
  rlimit raised = lim;
  raised.rlim_cur = std::min(need, lim.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  if (lim.rlim_cur < need) {
    std::fprintf(stderr,
                 "serve_tcp: --max-connections = %ld but the descriptor limit is %llu; accepts "
                 "beyond it fail and are retried\n",
                 max_connections, static_cast<unsigned long long>(lim.rlim_cur));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the banner must reach a pipe or file at once
  // Large payload buffers come and go with frames. By default glibc raises its mmap threshold
  // after the first large free and serves later ones from heaps it seldom trims, so the process
  // would keep the high-water mark of payloads (budget-rejected frames included) instead of
  // what it holds; a fixed threshold gives them back to the system when freed.
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  ServerOptions o;
  if (const int rc = ParseArgs(argc, argv, &o); rc != attnrt::tools::FlagSet::kContinue) {
    return rc;
  }

  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(o.bind, ec);
  if (ec) {
    std::fprintf(stderr, "serve_tcp: --bind = '%s' is not an IP address\n", o.bind.c_str());
    return 2;
  }
  if (!address.is_loopback() && !o.allow_remote) {
    std::fprintf(stderr,
                 "serve_tcp: --bind = '%s' is not a loopback address; the protocol has no "
                 "authentication, so pass --allow-remote to serve other hosts\n",
                 o.bind.c_str());
    return 2;
  }
  FitDescriptorLimit(o.max_connections);

  attnrt::RuntimeOptions ro;
  ro.shape.num_layers = o.layers;
  ro.shape.num_q_heads = o.heads;
  ro.shape.num_kv_heads = o.kv_heads;
  ro.shape.head_dim = o.head_dim;
  ro.shape.block_size = o.block_size;
  ro.shape.max_context = o.max_context;
  ro.shape.kv_cache_type = o.kv_cache_type;
  ro.device = o.device;
  ro.max_batch_size = o.max_batch;
  ro.max_queue_delay = std::chrono::microseconds(o.window_us);
  ro.kv_cache_bytes = static_cast<std::size_t>(o.kv_cache_mb) << 20;
  auto created = attnrt::Runtime::Create(ro);
  if (!created.ok()) {
    std::fprintf(stderr, "serve_tcp: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<attnrt::Runtime> runtime = std::move(*created);

  ServerLimits limits;
  limits.max_connections = o.max_connections;
  limits.max_pending_payload_bytes = static_cast<std::size_t>(o.max_pending_mb) << 20;
  limits.max_reply_backlog_bytes = static_cast<std::size_t>(o.max_reply_backlog_kb) << 10;
  limits.frame_timeout = std::chrono::milliseconds(o.frame_timeout_ms);
  limits.close_linger = std::chrono::milliseconds(o.close_linger_ms);
  limits.flush_timeout = std::chrono::seconds(o.drain_timeout_s);

  int exit_code = 0;
  {
    Server server(runtime.get(), limits);
    std::vector<std::unique_ptr<asio::io_context>> contexts;
    std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
    for (int t = 0; t < o.threads; ++t) {
      contexts.push_back(std::make_unique<asio::io_context>(1));
      guards.push_back(asio::make_work_guard(*contexts.back()));
    }
    asio::io_context& io = *contexts[0];  // also runs the acceptor, signals and timers
    tcp::acceptor acceptor(io);
    ec = Listen(acceptor, tcp::endpoint(address, static_cast<unsigned short>(o.port)));
    if (ec) {
      std::fprintf(stderr, "serve_tcp: cannot listen on %s:%d: %s\n", o.bind.c_str(), o.port,
                   ec.message().c_str());
      return 1;
    }
    const tcp::endpoint local = acceptor.local_endpoint(ec);
    const attnrt::ModelShape& s = runtime->shape();
    std::printf("serve_tcp: listening on %s:%u (%s); shape %d layers, H=%d, Hkv=%d, D=%d, "
                "block %d, max context %d, kv cache %s\n",
                local.address().to_string().c_str(), static_cast<unsigned>(local.port()),
                runtime->device_description().c_str(), s.num_layers, s.num_q_heads,
                s.num_kv_heads, s.head_dim, s.block_size, s.max_context,
                std::string(attnrt::KvCacheTypeName(s.kv_cache_type)).c_str());
    std::printf("serve_tcp: limits: largest request payload %u bytes, %d MiB for partially "
                "received payloads, %d connections, reply backlog %d KiB per connection\n",
                attnrt::tcp::LargestRequestPayloadBytes(s), o.max_pending_mb, o.max_connections,
                o.max_reply_backlog_kb);

    MetricsEndpoint metrics(io, runtime.get());
    if (o.metrics_port >= 0) {
      ec = metrics.Listen(tcp::endpoint(address, static_cast<unsigned short>(o.metrics_port)));
      if (ec) {
        std::fprintf(stderr, "serve_tcp: cannot listen for metrics on %s:%d: %s\n",
                     o.bind.c_str(), o.metrics_port, ec.message().c_str());
        return 1;
      }
      const tcp::endpoint m = metrics.local_endpoint();
      std::printf("serve_tcp: metrics on http://%s:%u/metrics\n",
                  m.address().to_string().c_str(), static_cast<unsigned>(m.port()));
    }

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code e, int signo) {
      if (!e) server.RequestStop(signo == SIGINT ? "SIGINT" : "SIGTERM");
    });
    asio::steady_timer max_timer(io), accept_retry(io);
    if (o.max_seconds > 0) {
      max_timer.expires_after(std::chrono::seconds(o.max_seconds));
      max_timer.async_wait([&](boost::system::error_code e) {
        if (!e) server.RequestStop("--max-seconds " + std::to_string(o.max_seconds) + " reached");
      });
    }
    Accept(&acceptor, &contexts, 0, &server, &accept_retry);

    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (auto& c : contexts) threads.emplace_back([&c] { c->run(); });

    const std::string reason = server.WaitForStop();
    std::printf("serve_tcp: stopping (%s)\n", reason.c_str());
    // 1. No new connections, no more timers or signals: only sessions keep the io_contexts busy.
    std::promise<void> intake_closed;
    asio::post(io, [&] {
      boost::system::error_code e;
      acceptor.close(e);
      metrics.Close();
      signals.cancel(e);
      max_timer.cancel();
      accept_retry.cancel();
      intake_closed.set_value();
    });
    intake_closed.get_future().wait();
    // 2. No new requests: every session discards what arrives from now on, so nothing reaches
    //    Submit after the runtime's drain begins.
    std::atomic<long> reading{0};
    {
      const auto sessions = server.LiveSessions();
      reading = static_cast<long>(sessions.size());
      for (auto& session : sessions) session->StopReading([&reading] { --reading; });
    }
    if (!Server::WaitForZero(reading, std::chrono::seconds(10))) {
      std::fprintf(stderr, "serve_tcp: %ld sessions did not stop reading within 10 s\n",
                   reading.load());
      exit_code = 1;
    }
    // 3. Every admitted decode completes and queues its reply.
    runtime->Drain();
    if (!Server::WaitForZero(server.in_flight, std::chrono::seconds(10))) {
      std::fprintf(stderr, "serve_tcp: %ld decode callbacks still running after the drain\n",
                   server.in_flight.load());
      exit_code = 1;
    }
    // 4. Each session writes its last replies, shuts down its sending side, reads until the
    //    peer's end of stream (or --close-linger-ms) and closes; its own timers bound that.
    guards.clear();
    for (auto& session : server.LiveSessions()) session->CloseWhenFlushed();
    if (!Server::WaitForZero(server.open_connections,
                             limits.flush_timeout + limits.close_linger + std::chrono::seconds(2))) {
      for (auto& session : server.LiveSessions()) session->CloseNowFromAnyThread("drain timed out");
    }
    for (auto& t : threads) t.join();  // run() returns once every socket and timer is done
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    const long errors = server.decode_errors + server.request_errors + server.protocol_errors;
    std::printf("serve_tcp: summary: %.1f s, %ld connections (%ld refused), %ld requests (%ld "
                "decodes OK), %ld errors (%ld decode, %ld other requests, %ld bad frames), %ld "
                "replies written, %ld dropped\n",
                seconds, server.connections.load(), server.refused.load(), server.frames.load(),
                server.decodes_ok.load(), errors, server.decode_errors.load(),
                server.request_errors.load(), server.protocol_errors.load(),
                server.replies_written.load(), server.replies_dropped.load());
    std::printf("serve_tcp: counts: connections=%ld refused=%ld requests=%ld decodes_ok=%ld "
                "decode_errors=%ld request_errors=%ld bad_frames=%ld budget_rejections=%ld "
                "incomplete_frames=%ld timed_out_frames=%ld replies_written=%ld "
                "decode_replies_written=%ld decode_ok_written=%ld replies_dropped=%ld "
                "peak_pending_payload_bytes=%zu\n",
                server.connections.load(), server.refused.load(), server.frames.load(),
                server.decodes_ok.load(), server.decode_errors.load(),
                server.request_errors.load(), server.protocol_errors.load(),
                server.budget_rejections.load(), server.incomplete_frames.load(),
                server.timed_out_frames.load(), server.replies_written.load(),
                server.decode_replies_written.load(), server.decode_ok_written.load(),
                server.replies_dropped.load(), server.peak_pending_payload_bytes());
  }
  runtime.reset();
  return exit_code;
}
