// loadgen_tcp: open-loop load for serve_tcp (protocol: examples/tcp_protocol.h). Asks Info,
// creates sequences with random FP16 prompts, then sends Poisson-timed Decode frames, pipelined,
// over several connections for a bounded time and count, and reports the achieved rate, latency
// from each request's intended send time, errors and, with --verify, the largest deviation from
// a dense FP64 reference over a host mirror of the cache. Exits non-zero on any failure.
//
// With --tolerate-server-stop the server may stop mid-run (SIGTERM, Shutdown from elsewhere): a
// connection that reaches the server's end of stream stops sending, and its requests still
// unanswered count as unanswered instead of failing the run. The last line but one,
// 'loadgen_tcp: counts: sent=N received=N ok=N ...', is machine-readable.
//
// Ordering: each sequence belongs to one connection, whose frames the server submits in order,
// and the runtime keeps per-(sequence, layer) order at one priority; so the mirror is appended
// when a request is sent and each response is checked against the mirror's prefix at that time.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded
#include <vector>

#include <boost/asio.hpp>

#include <attnrt/half.h>
#include <attnrt/status.h>
#include "examples/tcp_protocol.h"
#include "tools/dense_reference.h"
#include "tools/flags.h"
#include "tools/kv_cache_support.h"
#include "tools/percentile.h"
#include "tools/progress.h"
#include "tools/watchdog.h"

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using attnrt::Half;
using attnrt::Status;
using attnrt::tcp::MessageType;
using Clock = std::chrono::steady_clock;

constexpr double kTolerance = 2e-3;  // max |out - ref|: FP16 output rounding plus FP32 softmax
// The whole run, setup included, ends within duration + drain timeout + this, whatever the server
// does: a blocking read on a silent server cannot hang the load generator (or a test) forever.
constexpr double kWatchdogSlackS = 300;

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  bool allow_remote = false;
  int connections = 2;
  int threads = 2;
  int sequences = 8;
  int context = 64;
  double rate = 1000;
  double duration_s = 1.0;
  long max_requests = 1000000;
  int priority = 0;
  double drain_timeout_s = 10;
  std::uint64_t first_sequence = 0;  // 0: random
  std::uint64_t seed = 1;
  bool verify = false;
  bool check_malformed = false;
  bool shutdown_server = false;
  bool tolerate_server_stop = false;
};

// Parses the flags into *o; returns FlagSet::kContinue or the exit code.
int ParseArgs(int argc, char** argv, LoadOptions* o) {
  attnrt::tools::FlagSet flags(
      "loadgen_tcp",
      "loadgen_tcp: open-loop Poisson decode load for serve_tcp, with optional verification.");
  flags.String("--host", &o->host, "server address; non-loopback needs --allow-remote");
  flags.Int("--port", &o->port, "server port (required: serve_tcp's banner names it)", 1, 65535);
  flags.Bool("--allow-remote", &o->allow_remote, "allow a --host that is not a loopback address");
  flags.Int("--connections", &o->connections, "TCP connections; each owns sequences i % N", 1,
            4096);
  flags.Int("--threads", &o->threads, "io threads", 1, 256);
  flags.Int("--sequences", &o->sequences, "sequences created for the run", 0, 1 << 24);
  flags.Int("--context", &o->context, "prompt tokens prefilled per sequence and layer", 0,
            1 << 24);
  flags.Double("--rate", &o->rate, "offered decode requests/s, Poisson arrivals");
  flags.Double("--duration", &o->duration_s, "seconds of arrivals", 0, 86400);
  flags.Int("--max-requests", &o->max_requests, "stop sending after N requests", 0, 1e15);
  flags.Int("--priority", &o->priority, "priority level of every decode");
  flags.Double("--drain-timeout", &o->drain_timeout_s,
               "seconds to wait for outstanding responses after the last send", 0, 3600);
  flags.Int("--first-sequence", &o->first_sequence,
            "first sequence id (0: random, so runs do not collide)", 0, 1e18);
  flags.Int("--seed", &o->seed, "random seed for q/k/v and arrivals", 0, 1e18);
  flags.Bool("--verify", &o->verify, "check every output against a dense FP64 reference (2e-3)");
  flags.Bool("--check-malformed", &o->check_malformed,
             "first send malformed frames and expect error responses");
  flags.Bool("--shutdown-server", &o->shutdown_server,
             "finally send Shutdown and wait for its acknowledgement");
  flags.Bool("--tolerate-server-stop", &o->tolerate_server_stop,
             "the server may end the stream mid-run (drain): stop sending, count what is still "
             "unanswered, and fail only on wrong or lost replies (a reset)");
  flags.Footer("With --sequences 0 or --duration 0 no load runs (e.g. only --shutdown-server).");
  if (const int rc = flags.Parse(argc, argv); rc != attnrt::tools::FlagSet::kContinue) {
    return rc;
  }
  if (o->port == 0) {
    std::fprintf(stderr, "loadgen_tcp: --port is required (see --help)\n");
    return 2;
  }
  if (o->sequences > 0 && o->duration_s > 0 && (o->rate <= 0 || o->context < 1)) {
    std::fprintf(stderr, "loadgen_tcp: --rate and --context must be > 0 for a load run\n");
    return 2;
  }
  return attnrt::tools::FlagSet::kContinue;
}


// --- blocking calls (setup, checks, Shutdown) ------------------------------------------------

Status IoError(const char* what, const boost::system::error_code& ec) {
  return attnrt::UnavailableError(std::string(what) + ": " + ec.message());
}

Status WriteFrame(tcp::socket& s, const std::vector<std::uint8_t>& frame) {
  boost::system::error_code ec;
  asio::write(s, asio::buffer(frame), ec);
  return ec ? IoError("write", ec) : Status::Ok();
}

Status ReadFrame(tcp::socket& s, attnrt::tcp::FrameHeader* h,
                 std::vector<std::uint8_t>* payload) {
  std::array<std::uint8_t, attnrt::tcp::kHeaderBytes> bytes;
  boost::system::error_code ec;
  asio::read(s, asio::buffer(bytes), ec);
  if (ec) return IoError("read", ec);
  ATTNRT_RETURN_IF_ERROR(attnrt::tcp::ParseHeader(bytes, h));
  payload->resize(h->payload_bytes);
  asio::read(s, asio::buffer(*payload), ec);
  return ec ? IoError("read payload", ec) : Status::Ok();
}

// Sends one frame and reads its response, which must have `type` and the frame's request id.
Status Call(tcp::socket& s, const std::vector<std::uint8_t>& frame, MessageType type,
            std::vector<std::uint8_t>* payload) {
  ATTNRT_RETURN_IF_ERROR(WriteFrame(s, frame));
  attnrt::tcp::FrameHeader h;
  ATTNRT_RETURN_IF_ERROR(ReadFrame(s, &h, payload));
  std::uint64_t id;
  std::memcpy(&id, frame.data() + 8, sizeof(id));
  if (h.type != static_cast<std::uint16_t>(type) || h.request_id != id) {
    return attnrt::InternalError("response type = " + std::to_string(h.type) + ", request_id = " +
                                 std::to_string(h.request_id) + "; expected type " +
                                 std::to_string(static_cast<int>(type)) + ", request_id " +
                                 std::to_string(id));
  }
  return Status::Ok();
}

// A call answered by a StatusResult: returns the server's status (or the transport's error).
Status CallForStatus(tcp::socket& s, const std::vector<std::uint8_t>& frame) {
  std::vector<std::uint8_t> payload;
  ATTNRT_RETURN_IF_ERROR(Call(s, frame, MessageType::kStatusResult, &payload));
  Status result;
  ATTNRT_RETURN_IF_ERROR(attnrt::tcp::ParseStatusResult(payload, &result));
  return result;
}

attnrt::StatusOr<tcp::socket> Connect(asio::io_context& io, const LoadOptions& o) {
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(o.host, std::to_string(o.port), ec);
  if (ec) {
    return attnrt::InvalidArgumentError("--host = '" + o.host + "' does not resolve: " +
                                        ec.message());
  }
  for (const auto& e : endpoints) {
    if (!o.allow_remote && !e.endpoint().address().is_loopback()) {
      return attnrt::InvalidArgumentError(
          "--host = '" + o.host + "' resolves to " + e.endpoint().address().to_string() +
          ", which is not a loopback address (pass --allow-remote)");
    }
  }
  tcp::socket socket(asio::make_strand(io));
  asio::connect(socket, endpoints, ec);
  if (ec) {
    return attnrt::UnavailableError("connect to " + o.host + ":" + std::to_string(o.port) +
                                    ": " + ec.message());
  }
  socket.set_option(tcp::no_delay(true), ec);
  return socket;
}

// --- malformed-frame checks ------------------------------------------------------------------

// Sends frames the server must reject and checks that each rejection names the field and that
// the server stays up. Returns the number of failed checks.
int CheckMalformed(asio::io_context& io, const LoadOptions& o, const attnrt::ModelShape& shape) {
  int failed = 0, passed = 0;
  auto expect = [&](const char* what, bool ok, const std::string& detail) {
    if (ok) {
      ++passed;
    } else {
      ++failed;
      std::fprintf(stderr, "loadgen_tcp: malformed-frame check '%s' FAILED: %s\n", what,
                   detail.c_str());
    }
  };
  auto connect = [&]() -> std::unique_ptr<tcp::socket> {
    auto s = Connect(io, o);
    if (!s.ok()) {
      expect("connect", false, s.status().ToString());
      return nullptr;
    }
    return std::make_unique<tcp::socket>(std::move(*s));
  };
  const std::size_t q_elems = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_elems = shape.kv_token_elems();
  std::vector<Half> q(q_elems, attnrt::FloatToHalf(0.5f)), kv(kv_elems, attnrt::FloatToHalf(0.5f));
  std::vector<std::uint8_t> payload;

  if (auto s = connect()) {
    // A Decode frame two bytes short: intact header, so an error response and a usable stream.
    auto frame = attnrt::tcp::EncodeDecode(101, 1, 0, 0, q, kv, kv);
    frame.resize(frame.size() - 2);
    attnrt::tcp::FinishFrame(&frame);
    Status st = Call(*s, frame, MessageType::kDecodeResult, &payload);
    Status result;
    std::vector<Half> out;
    if (st.ok()) st = attnrt::tcp::ParseDecodeResult(payload, &result, &out);
    expect("short Decode payload", st.ok() && result.code() == attnrt::StatusCode::kInvalidArgument
                                       && result.message().find("payload_bytes") != std::string::npos,
           st.ok() ? result.ToString() : st.ToString());

    // An unknown message type.
    st = CallForStatus(*s, attnrt::tcp::EncodeEmpty(static_cast<MessageType>(77), 102));
    expect("unknown type", st.code() == attnrt::StatusCode::kInvalidArgument &&
                               st.message().find("type") != std::string::npos,
           st.ToString());

    // A well-formed Decode with an out-of-range layer: the runtime names the field.
    frame = attnrt::tcp::EncodeDecode(103, 1, static_cast<std::uint32_t>(shape.num_layers), 0, q,
                                      kv, kv);
    st = Call(*s, frame, MessageType::kDecodeResult, &payload);
    if (st.ok()) st = attnrt::tcp::ParseDecodeResult(payload, &result, &out);
    expect("layer out of range", st.ok() && !result.ok() &&
                                     result.message().find("layer") != std::string::npos,
           st.ok() ? result.ToString() : st.ToString());

    // The connection still serves.
    st = Call(*s, attnrt::tcp::EncodeEmpty(MessageType::kInfo, 104), MessageType::kInfoResult,
              &payload);
    expect("Info after errors", st.ok(), st.ToString());
  }

  // Bad headers: an error naming the field, then the server closes the connection.
  auto bad_header = [&](const char* what, std::size_t offset, std::uint32_t value,
                        const char* field) {
    auto s = connect();
    if (!s) return;
    auto frame = attnrt::tcp::EncodeEmpty(MessageType::kInfo, 105);
    std::memcpy(frame.data() + offset, &value, sizeof(value));
    Status st = WriteFrame(*s, frame);
    attnrt::tcp::FrameHeader h;
    if (st.ok()) st = ReadFrame(*s, &h, &payload);
    Status result;
    if (st.ok()) st = attnrt::tcp::ParseStatusResult(payload, &result);
    const bool named = st.ok() && result.code() == attnrt::StatusCode::kInvalidArgument &&
                       result.message().find(field) != std::string::npos;
    std::array<std::uint8_t, 1> byte;
    boost::system::error_code ec;
    asio::read(*s, asio::buffer(byte), ec);  // the server must close: end of stream
    expect(what, named && ec == asio::error::eof,
           (st.ok() ? result.ToString() : st.ToString()) + "; then " + ec.message());
  };
  bad_header("bad magic", 0, 0xdeadbeefu, "magic");
  bad_header("payload over the cap", 16, attnrt::tcp::kMaxPayloadBytes + 1, "payload_bytes");
  bad_header("Info payload over its largest legal (0)", 16, 1, "payload_bytes");

  std::printf("malformed-frame checks: %d of %d passed\n", passed, passed + failed);
  return failed;
}

// --- the load --------------------------------------------------------------------------------

// What the server's cache holds for an input value: the value (fp16), or its E4M3 code read
// back (fp8_e4m3; serve_tcp uses the default scales, 1.0). The reference runs over these.
float Stored(const attnrt::ModelShape& s, Half h) {
  return attnrt::tools::StoredKvValue(s.kv_cache_type, h);
}


// What all connections share. Thread safety: atomics only, plus `connections_done` (set once).
struct LoadRun {
  attnrt::ModelShape shape;
  const LoadOptions* options = nullptr;
  Clock::time_point start, end;  // arrivals are drawn in [start, end)
  std::atomic<long> budget{0};   // requests still allowed (--max-requests)
  std::atomic<long> sent{0}, completed{0}, errors{0}, verify_failures{0};
  std::atomic<long> received{0};     // reply frames read on the load connections
  std::atomic<long> unanswered{0};   // --tolerate-server-stop: pending when the server ended
  std::atomic<long> unavailable{0};  // --tolerate-server-stop: answered Unavailable (draining)
  std::atomic<int> active{0};
  std::function<void()> connections_done;

  void Error(const std::string& what) {
    if (errors++ < 10) std::fprintf(stderr, "loadgen_tcp: %s\n", what.c_str());
  }
};

// One (sequence, layer): its length and, with --verify, the host mirror of its K and V.
struct Stream {
  std::uint64_t sequence_id = 0;
  int layer = 0;
  int tokens = 0;
  std::vector<float> k, v;  // [tokens][Hkv][D] as the cache holds them (FP16 values)
  // A request of this stream failed, so the server's cache may differ from the mirror: later
  // outputs are not verified (the failure itself already fails the run).
  bool poisoned = false;
};

// One connection: its own sequences, Poisson arrivals at rate/connections, pipelined frames.
// Thread safety: everything runs on the socket's strand; ForceFinish may be called from any
// thread.
class LoadConnection {
 public:
  LoadConnection(int index, tcp::socket socket, LoadRun* run)
      : index_(index), socket_(std::move(socket)), timer_(socket_.get_executor()), run_(run),
        rng_(run->options->seed * 7919 + index) {
    const attnrt::ModelShape& s = run_->shape;
    q_elems_ = static_cast<std::size_t>(s.num_q_heads) * s.head_dim;
    kv_elems_ = s.kv_token_elems();
    // q, k and v are windows at random offsets of a pool of N(0, 1) FP16 values: no per-request
    // generation cost at high rates, and still fresh-looking inputs for every request.
    std::normal_distribution<float> normal(0.0f, 1.0f);
    pool_.resize(std::max<std::size_t>(1 << 16, 8 * (q_elems_ + 2 * kv_elems_)));
    for (Half& h : pool_) h = attnrt::FloatToHalf(normal(rng_));
  }

  // Creates this connection's sequences (blocking, before the load) and prefills every layer.
  Status Setup(const std::vector<std::uint64_t>& sequence_ids, int context) {
    const attnrt::ModelShape& s = run_->shape;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<Half> k(static_cast<std::size_t>(context) * kv_elems_), v(k.size());
    for (std::uint64_t id : sequence_ids) {
      Status st = CallForStatus(socket_, attnrt::tcp::EncodeCreateSequence(next_id_++, id));
      if (!st.ok()) return attnrt::Status(st.code(), "CreateSequence " + std::to_string(id) +
                                                         ": " + st.message());
      for (int layer = 0; layer < s.num_layers; ++layer) {
        for (Half& h : k) h = attnrt::FloatToHalf(normal(rng_));
        for (Half& h : v) h = attnrt::FloatToHalf(normal(rng_));
        st = CallForStatus(socket_, attnrt::tcp::EncodePrefill(next_id_++, id, layer, context,
                                                                k, v));
        if (!st.ok()) return attnrt::Status(st.code(), "Prefill " + std::to_string(id) +
                                                           " layer " + std::to_string(layer) +
                                                           ": " + st.message());
        Stream stream{id, layer, context, {}, {}, false};
        if (run_->options->verify) {
          for (Half h : k) stream.k.push_back(Stored(run_->shape, h));
          for (Half h : v) stream.v.push_back(Stored(run_->shape, h));
        }
        streams_.push_back(std::move(stream));
      }
    }
    return Status::Ok();
  }

  void Start() {
    asio::post(socket_.get_executor(), [this] {
      per_connection_rate_ = run_->options->rate / run_->options->connections;
      next_arrival_ = run_->start + NextGap();
      sending_done_ = streams_.empty();
      ReadHeader();
      if (!sending_done_) Arm();
      MaybeFinish();
    });
  }

  void ForceFinish(const std::string& why) {
    asio::post(socket_.get_executor(), [this, why] { Fail(why); });
  }

  const std::vector<double>& latencies_us() const { return latencies_us_; }
  double max_error() const { return max_error_; }
  Clock::time_point last_response() const { return last_response_; }

 private:
  Clock::duration NextGap() {
    std::exponential_distribution<double> gap(per_connection_rate_);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng_)));
  }

  void Arm() {
    timer_.expires_at(next_arrival_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) OnTimer();
    });
  }

  // Sends every arrival that is due (a late timer catches up: latency counts from the intended
  // time, so a slow sender shows up in the percentiles instead of lowering the offered load).
  void OnTimer() {
    if (sending_done_) return;
    const auto now = Clock::now();
    while (next_arrival_ <= now) {
      if (next_arrival_ >= run_->end || run_->budget.fetch_sub(1) <= 0 ||
          !SendOne(next_arrival_)) {
        sending_done_ = true;
        MaybeFinish();
        return;
      }
      next_arrival_ += NextGap();
    }
    if (next_arrival_ >= run_->end) {
      sending_done_ = true;
      MaybeFinish();
      return;
    }
    Arm();
  }

  // False when every stream of this connection is full (max_context reached).
  bool SendOne(Clock::time_point intended) {
    const int max_context = run_->shape.max_context;
    std::size_t pick = std::uniform_int_distribution<std::size_t>(0, streams_.size() - 1)(rng_);
    for (std::size_t tried = 0; streams_[pick].tokens >= max_context; ++tried) {
      if (tried == streams_.size()) return false;
      pick = (pick + 1) % streams_.size();
    }
    Stream& stream = streams_[pick];
    const std::size_t span = q_elems_ + 2 * kv_elems_;
    const std::size_t offset =
        std::uniform_int_distribution<std::size_t>(0, pool_.size() - span)(rng_);
    const Half* q = &pool_[offset];
    const Half* k = q + q_elems_;
    const Half* v = k + kv_elems_;
    const std::uint64_t id = next_id_++;
    Enqueue(attnrt::tcp::EncodeDecode(
        id, stream.sequence_id, static_cast<std::uint32_t>(stream.layer),
        static_cast<std::uint32_t>(run_->options->priority), {q, q_elems_}, {k, kv_elems_},
        {v, kv_elems_}));
    ++stream.tokens;
    if (run_->options->verify) {
      for (std::size_t i = 0; i < kv_elems_; ++i) stream.k.push_back(Stored(run_->shape, k[i]));
      for (std::size_t i = 0; i < kv_elems_; ++i) stream.v.push_back(Stored(run_->shape, v[i]));
    }
    pending_.emplace(id, Pending{intended, pick, static_cast<std::size_t>(stream.tokens), offset});
    ++run_->sent;
    return true;
  }

  void Enqueue(std::vector<std::uint8_t> frame) {
    write_queue_.push_back(std::move(frame));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (finished_ || write_queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(write_queue_.front()),
                      [this](boost::system::error_code ec, std::size_t) {
                        writing_ = false;
                        if (finished_) return;
                        if (ec) {
                          if (run_->options->tolerate_server_stop) {
                            // The server stopped reading; its end of stream (or reset) comes on
                            // the read side, which decides.
                            sending_done_ = true;
                            MaybeFinish();
                            return;
                          }
                          Fail("connection " + std::to_string(index_) + ": write: " +
                               ec.message());
                          return;
                        }
                        write_queue_.pop_front();
                        WriteNext();
                      });
  }

  void ReadHeader() {
    if (finished_) return;
    asio::async_read(socket_, asio::buffer(header_bytes_),
                     [this](boost::system::error_code ec, std::size_t) {
                       if (finished_) return;
                       if (ec) {
                         ReadFailed("read", ec);
                         return;
                       }
                       if (Status st = attnrt::tcp::ParseHeader(header_bytes_, &header_);
                           !st.ok()) {
                         Fail("connection " + std::to_string(index_) + ": bad response " +
                              st.ToString());
                         return;
                       }
                       payload_.resize(header_.payload_bytes);
                       asio::async_read(socket_, asio::buffer(payload_),
                                        [this](boost::system::error_code ec2, std::size_t) {
                                          if (finished_) return;
                                          if (ec2) {
                                            ReadFailed("read payload", ec2);
                                            return;
                                          }
                                          OnResponse();
                                          ReadHeader();
                                        });
                     });
  }

  void OnResponse() {
    const auto now = Clock::now();
    ++run_->received;
    auto it = pending_.find(header_.request_id);
    if (it == pending_.end() ||
        header_.type != static_cast<std::uint16_t>(MessageType::kDecodeResult)) {
      run_->Error("connection " + std::to_string(index_) + ": unexpected response type " +
                  std::to_string(header_.type) + " for request_id " +
                  std::to_string(header_.request_id));
      return;
    }
    const Pending p = it->second;
    pending_.erase(it);
    last_response_ = now;
    latencies_us_.push_back(std::chrono::duration<double, std::micro>(now - p.intended).count());
    Status result;
    Status parsed = attnrt::tcp::ParseDecodeResult(payload_, &result, &output_);
    if (parsed.ok() && result.code() == attnrt::StatusCode::kUnavailable &&
        run_->options->tolerate_server_stop) {
      streams_[p.stream].poisoned = true;  // not appended on the server: the mirror is ahead
      ++run_->unavailable;
    } else if (!parsed.ok() || !result.ok()) {
      streams_[p.stream].poisoned = true;
      run_->Error("request " + std::to_string(header_.request_id) + ": " +
                  (parsed.ok() ? result : parsed).ToString());
    } else {
      ++run_->completed;
      if (run_->options->verify && !streams_[p.stream].poisoned) {
        const Stream& s = streams_[p.stream];
        const double err = attnrt::tools::MaxDecodeError(run_->shape, s.k.data(), s.v.data(),
                                                          p.tokens, &pool_[p.q_offset], output_);
        max_error_ = std::max(max_error_, err);
        if (!(err <= kTolerance) && run_->verify_failures++ < 5) {
          std::fprintf(stderr,
                       "loadgen_tcp: sequence %llu layer %d at %zu tokens: max |out - ref| = "
                       "%.3e > %.0e\n",
                       static_cast<unsigned long long>(s.sequence_id), s.layer, p.tokens, err,
                       kTolerance);
        }
      }
    }
    MaybeFinish();
  }

  // A read ended. With --tolerate-server-stop, the server's end of stream ends the connection
  // cleanly: requests still pending were never accepted by the server (it answers every one it
  // read before closing), so they count as unanswered. A reset is still a failure: the server
  // must not destroy replies that were on their way.
  void ReadFailed(const char* what, const boost::system::error_code& ec) {
    if (finished_) return;
    if (run_->options->tolerate_server_stop && ec == asio::error::eof) {
      run_->unanswered += static_cast<long>(pending_.size());
      pending_.clear();
      sending_done_ = true;
      MaybeFinish();
      return;
    }
    Fail("connection " + std::to_string(index_) + ": " + what + ": " + ec.message());
  }

  // Ends the connection now: every request still waiting counts as an error.
  void Fail(const std::string& why) {
    if (finished_) return;
    if (!pending_.empty()) {
      run_->Error(why + " (" + std::to_string(pending_.size()) + " requests unanswered)");
      run_->errors += static_cast<long>(pending_.size()) - 1;
      pending_.clear();
    } else if (!sending_done_) {
      run_->Error(why);
    }
    sending_done_ = true;
    MaybeFinish();
  }

  void MaybeFinish() {
    if (finished_ || !sending_done_ || !pending_.empty()) return;
    finished_ = true;
    timer_.cancel();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    if (--run_->active == 0 && run_->connections_done) run_->connections_done();
  }

  struct Pending {
    Clock::time_point intended;
    std::size_t stream;
    std::size_t tokens;    // the stream's length including this request's token
    std::size_t q_offset;  // q's position in pool_
  };

  int index_;
  tcp::socket socket_;  // its executor is this connection's strand
  asio::steady_timer timer_;
  LoadRun* run_;
  std::mt19937_64 rng_;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  std::vector<Half> pool_;
  std::vector<Stream> streams_;
  std::uint64_t next_id_ = 1;
  double per_connection_rate_ = 0;
  Clock::time_point next_arrival_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::deque<std::vector<std::uint8_t>> write_queue_;
  std::array<std::uint8_t, attnrt::tcp::kHeaderBytes> header_bytes_{};
  attnrt::tcp::FrameHeader header_;
  std::vector<std::uint8_t> payload_;
  std::vector<Half> output_;
  std::vector<double> latencies_us_;
  double max_error_ = 0;
  Clock::time_point last_response_;
  bool writing_ = false, sending_done_ = false, finished_ = false;
};

using attnrt::tools::Percentile;

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  LoadOptions o;
  if (const int rc = ParseArgs(argc, argv, &o); rc != attnrt::tools::FlagSet::kContinue) {
    return rc;
  }
  // Exits the process if the run outlives its bound (see kWatchdogSlackS).
  const double bound_s = o.duration_s + o.drain_timeout_s + kWatchdogSlackS;
  attnrt::tools::Watchdog watchdog(bound_s, [bound_s] {
    std::fprintf(stderr, "loadgen_tcp: FAILED: still running after %.0f s; giving up\n", bound_s);
  });
  asio::io_context io(o.threads);

  // Info on a control connection, which also sends the final Shutdown.
  auto control = Connect(io, o);
  if (!control.ok()) {
    std::fprintf(stderr, "loadgen_tcp: %s\n", control.status().ToString().c_str());
    return control.status().code() == attnrt::StatusCode::kInvalidArgument ? 2 : 1;
  }
  attnrt::tcp::InfoMessage info;
  {
    std::vector<std::uint8_t> payload;
    Status st = Call(*control, attnrt::tcp::EncodeEmpty(MessageType::kInfo, 1),
                     MessageType::kInfoResult, &payload);
    if (st.ok()) st = attnrt::tcp::ParseInfoResult(payload, &info);
    if (!st.ok()) {
      std::fprintf(stderr, "loadgen_tcp: Info: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  const attnrt::ModelShape& shape = info.shape;
  std::printf("loadgen_tcp: connected to %s:%d (%s); shape %d layers, H=%d, Hkv=%d, D=%d, "
              "block %d, max context %d, kv cache %s\n",
              o.host.c_str(), o.port, info.device.c_str(), shape.num_layers, shape.num_q_heads,
              shape.num_kv_heads, shape.head_dim, shape.block_size, shape.max_context,
              std::string(attnrt::KvCacheTypeName(shape.kv_cache_type)).c_str());

  bool ok = true;
  if (o.check_malformed && CheckMalformed(io, o, shape) != 0) ok = false;

  LoadRun run;
  run.shape = shape;
  run.options = &o;
  std::vector<std::unique_ptr<LoadConnection>> connections;
  const bool load = o.sequences > 0 && o.duration_s > 0 && o.max_requests > 0;
  if (load) {
    if (o.context >= shape.max_context) {
      std::fprintf(stderr, "loadgen_tcp: --context = %d leaves no room under max_context = %d\n",
                   o.context, shape.max_context);
      return 2;
    }
    std::uint64_t first = o.first_sequence;
    if (first == 0) first = (std::uint64_t{std::random_device{}()} << 24) | 1;
    const auto setup_start = Clock::now();
    const int num_connections = std::min(o.connections, o.sequences);
    for (int c = 0; c < num_connections; ++c) {
      auto socket = Connect(io, o);
      if (!socket.ok()) {
        std::fprintf(stderr, "loadgen_tcp: %s\n", socket.status().ToString().c_str());
        return 1;
      }
      auto conn = std::make_unique<LoadConnection>(c, std::move(*socket), &run);
      std::vector<std::uint64_t> ids;
      for (int i = c; i < o.sequences; i += num_connections) ids.push_back(first + i);
      if (Status st = conn->Setup(ids, o.context); !st.ok()) {
        std::fprintf(stderr, "loadgen_tcp: setup: %s\n", st.ToString().c_str());
        return 1;
      }
      connections.push_back(std::move(conn));
    }
    std::printf("setup: %d sequences x %d layers x %d prompt tokens over %d connections in "
                "%.2f s\n",
                o.sequences, shape.num_layers, o.context, num_connections,
                std::chrono::duration<double>(Clock::now() - setup_start).count());

    // The load: arrivals for duration_s, then up to drain_timeout_s for the last responses.
    run.budget = o.max_requests;
    run.start = Clock::now();
    run.end = run.start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(o.duration_s));
    auto control_strand = asio::make_strand(io);  // the two timers below live on it
    asio::steady_timer deadline(control_strand), progress(control_strand);
    bool all_done = false;  // on control_strand: a tick already queued must not re-arm
    run.connections_done = [&] {
      asio::post(control_strand, [&] {
        all_done = true;
        deadline.cancel();
        progress.cancel();
      });
    };
    deadline.expires_at(run.end + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.drain_timeout_s)));
    deadline.async_wait([&](boost::system::error_code ec) {
      if (ec || all_done) return;
      for (auto& c : connections) c->ForceFinish("no response within --drain-timeout");
    });
    // A line per second on stdout for long runs; on a terminal also the time left on stderr.
    attnrt::tools::Progress bar("loadgen_tcp", o.duration_s);
    std::function<void(boost::system::error_code)> tick = [&](boost::system::error_code ec) {
      if (ec || all_done) return;
      const double elapsed = std::chrono::duration<double>(Clock::now() - run.start).count();
      if (o.duration_s >= 2) {
        bar.Done();
        std::printf("  %.0f s: sent %ld, completed %ld, errors %ld\n", elapsed, run.sent.load(),
                    run.completed.load(), run.errors.load());
      }
      bar.Update(std::min(elapsed, o.duration_s),
                 (elapsed > o.duration_s ? "draining: " : "") + std::to_string(run.sent.load()) +
                     " sent, " + std::to_string(run.completed.load()) + " completed, " +
                     std::to_string(run.errors.load()) + " errors");
      progress.expires_after(std::chrono::seconds(1));
      progress.async_wait(tick);
    };
    if (o.duration_s >= 2 || bar.enabled()) {
      progress.expires_after(std::chrono::seconds(1));
      progress.async_wait(tick);
    }
    run.active = static_cast<int>(connections.size());  // before any Start: none ends early
    for (auto& c : connections) c->Start();
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) threads.emplace_back([&io] { io.run(); });
    for (auto& t : threads) t.join();
    bar.Done();

    std::vector<double> latencies;
    double max_error = 0;
    Clock::time_point last = run.start;
    for (auto& c : connections) {
      latencies.insert(latencies.end(), c->latencies_us().begin(), c->latencies_us().end());
      max_error = std::max(max_error, c->max_error());
      last = std::max(last, c->last_response());
    }
    const double span_s = std::max(1e-9, std::chrono::duration<double>(last - run.start).count());
    std::printf("offered %.0f requests/s for %.2f s over %d connections: sent %ld, completed "
                "%ld, errors %ld\n",
                o.rate, o.duration_s, num_connections, run.sent.load(), run.completed.load(),
                run.errors.load());
    std::printf("achieved: %.0f requests/s\n", run.completed / span_s);
    std::printf("latency from intended send time: p50 %.1f us, p99 %.1f us, p999 %.1f us\n",
                Percentile(latencies, 0.5), Percentile(latencies, 0.99),
                Percentile(latencies, 0.999));
    if (o.verify) {
      std::printf("verify: max |out - ref| vs dense FP64 reference: %.2e (tolerance %.0e), "
                  "%ld failures\n",
                  max_error, kTolerance, run.verify_failures.load());
    }
    if (run.errors != 0 || run.verify_failures != 0 || run.completed == 0) ok = false;
  }
  std::printf("loadgen_tcp: counts: sent=%ld received=%ld ok=%ld errors=%ld unanswered=%ld "
              "unavailable=%ld verify_failures=%ld\n",
              run.sent.load(), run.received.load(), run.completed.load(), run.errors.load(),
              run.unanswered.load(), run.unavailable.load(), run.verify_failures.load());

  if (o.shutdown_server) {
    Status st = CallForStatus(*control, attnrt::tcp::EncodeEmpty(MessageType::kShutdown, 2));
    std::printf("shutdown: %s\n", st.ToString().c_str());
    if (!st.ok()) ok = false;
  }
  std::printf("%s\n", ok ? "loadgen_tcp: OK" : "loadgen_tcp: FAILED");
  return ok ? 0 : 1;
}
