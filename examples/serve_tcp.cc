// serve_tcp: attnrt behind a Boost.Asio TCP server. One connection is one session; decode
// requests are pipelined and completed through the Runtime's callback Submit, so no thread blocks
// per request. Built on the public attnrt::Runtime (api/runtime.h) only.
//
// Protocol (full definition and codec in examples/tcp_protocol.h): little-endian frames, a
// 24-byte header {u32 magic "ANRT", u16 version 1, u16 type, u64 request_id, u32 payload_bytes
// (<= 64 MiB), u32 reserved 0} and a payload:
//   CreateSequence(u64 seq)                                             -> StatusResult
//   Prefill(u64 seq, u32 layer, u32 n, k[n][Hkv][D], v[n][Hkv][D])     -> StatusResult
//   Decode(u64 seq, u32 layer, u32 priority, q[H][D], k[Hkv][D], v[Hkv][D])
//                                                 -> DecodeResult(code, message, out[H][D])
//   Info                                          -> InfoResult(shape, max payload, device)
//   Shutdown                                      -> StatusResult; the server drains and exits
// A client may send many frames without waiting; responses carry the request id and may come back
// out of order. A frame with an intact header but a bad payload gets an error response naming the
// field; a bad header gets one too, and then the connection is closed (it cannot be re-framed).
//
// Threads: each of --threads runs its own io_context, and a session stays on one of them for its
// whole life (reads, parsing, Submit, CreateSequence, Prefill, writes). That is what keeps a
// connection's Decode frames in order: the runtime's intake queue is FIFO per submitting thread
// only, so two frames of one (sequence, layer) submitted from two threads could swap. The
// runtime's completion threads encode DecodeResults and post them to the session's io_context,
// which owns the socket and its write queue. Exit: --max-seconds, a Shutdown message, SIGINT or SIGTERM
// stop accepting, drain the runtime (every admitted decode completes and is answered), flush and
// close every session, then print a summary.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded
#include <vector>

#include <boost/asio.hpp>

#include "api/runtime.h"
#include "examples/flags.h"
#include "examples/tcp_protocol.h"

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using attnrt::Half;
using attnrt::Status;
using attnrt::tcp::MessageType;
using Clock = std::chrono::steady_clock;

// A session closes when the responses it has not yet written exceed this: a peer that sends
// without ever reading cannot grow the server's memory without bound.
constexpr std::size_t kMaxQueuedResponseBytes = 256u << 20;
// After the drain, how long sessions get to flush their last responses before they are closed.
constexpr auto kFlushGrace = std::chrono::seconds(2);

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
  int max_seconds = 0;
};

// Parses the flags into *o; returns FlagSet::kContinue or the exit code.
int ParseArgs(int argc, char** argv, ServerOptions* o) {
  std::string device = "auto";
  attnrt::examples::FlagSet flags(
      "serve_tcp",
      "serve_tcp: the attnrt runtime behind a TCP server (Boost.Asio). Protocol: little-endian\n"
      "frames {magic, version, type, request id, payload length} carrying CreateSequence,\n"
      "Prefill, Decode (pipelined; responses by request id, any order), Info and Shutdown;\n"
      "see examples/tcp_protocol.h. Prints 'serve_tcp: listening on ADDRESS:PORT (DEVICE)'.");
  flags.Choice("--device", &device, attnrt::examples::DeviceChoices(),
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
  flags.Int("--max-seconds", &o->max_seconds,
            "exit after N seconds (0: run until Shutdown, SIGINT, SIGTERM)");
  const int rc = flags.Parse(argc, argv);
  o->device = attnrt::examples::ToDeviceKind(device);
  return rc;
}

class Session;

// Counters and the stop request, shared by every session.
// Thread safety: all members may be used from any thread.
class Server {
 public:
  explicit Server(attnrt::Runtime* runtime) : runtime_(runtime) {}

  attnrt::Runtime& runtime() { return *runtime_; }

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

  // Waits until `counter` is 0 or the deadline passes; true when it reached 0.
  static bool WaitForZero(const std::atomic<long>& counter, Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    while (counter.load() != 0) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  std::atomic<long> connections{0};
  std::atomic<long> live_sessions{0};
  std::atomic<long> frames{0};
  std::atomic<long> decodes_ok{0};
  std::atomic<long> decode_errors{0};   // rejected at Submit or completed with an error
  std::atomic<long> request_errors{0};  // CreateSequence / Prefill / bad payload answered non-OK
  std::atomic<long> protocol_errors{0}; // bad headers: connection closed
  std::atomic<long> in_flight{0};       // decodes submitted whose callback has not finished

 private:
  attnrt::Runtime* runtime_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;                   // GUARDED_BY(mu_)
  std::string stop_reason_;                       // GUARDED_BY(mu_)
  std::vector<std::weak_ptr<Session>> sessions_;  // GUARDED_BY(mu_)
};

// One TCP connection. Reads frames one after another and handles each as it arrives (so Decode
// frames reach Submit in the peer's order, from one thread); responses go through a write queue.
// Thread safety: the socket, the read state and the write queue belong to the socket's
// io_context, which one thread runs; Send, CloseWhenFlushed and CloseNowFromAnyThread may be
// called from any thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server* server) : socket_(std::move(socket)), server_(server) {
    boost::system::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : ep.address().to_string() + ":" + std::to_string(ep.port());
    ++server_->live_sessions;
  }
  ~Session() { --server_->live_sessions; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void Start() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }

  void Send(std::vector<std::uint8_t> frame) {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), frame = std::move(frame)]() mutable {
                 self->Enqueue(std::move(frame));
               });
  }

  // Stops reading; closes once every queued response is written.
  void CloseWhenFlushed() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->close_after_flush_ = true;
      boost::system::error_code ec;
      self->socket_.shutdown(tcp::socket::shutdown_receive, ec);
      if (!self->writing_) self->CloseNow("");
    });
  }

  void CloseNowFromAnyThread() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->CloseNow(""); });
  }

 private:
  void ReadHeader() {
    if (closed_ || close_after_flush_) return;
    asio::async_read(socket_, asio::buffer(header_bytes_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       self->OnHeader(ec);
                     });
  }

  void OnHeader(boost::system::error_code ec) {
    if (ec == asio::error::eof || (ec && close_after_flush_)) {
      // The peer finished sending (or we stopped reading): answer what it sent, then close.
      close_after_flush_ = true;
      if (!writing_) CloseNow("");
      return;
    }
    if (ec) {
      CloseNow(closed_ || ec == asio::error::operation_aborted ? "" : "read: " + ec.message());
      return;
    }
    if (Status st = attnrt::tcp::ParseHeader(header_bytes_, &header_); !st.ok()) {
      ++server_->protocol_errors;
      std::fprintf(stderr, "serve_tcp: %s: bad frame header (%s); closing the connection\n",
                   peer_.c_str(), st.ToString().c_str());
      Enqueue(attnrt::tcp::EncodeStatusResult(header_.request_id, st));
      close_after_flush_ = true;
      if (!writing_) CloseNow("");
      return;
    }
    payload_.resize(header_.payload_bytes);
    if (payload_.empty()) {
      Handle();
      return;
    }
    asio::async_read(socket_, asio::buffer(payload_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       if (ec) {
                         self->CloseNow(self->closed_ ? "" : "read payload: " + ec.message());
                         return;
                       }
                       self->Handle();
                     });
  }

  void Handle() {
    ++server_->frames;
    const std::uint64_t id = header_.request_id;
    attnrt::Runtime& rt = server_->runtime();
    const attnrt::ModelShape& shape = rt.shape();
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
        Status st = attnrt::tcp::ParsePrefill(payload_, shape, &m);
        if (st.ok()) st = CheckedLayer(m.layer);
        if (st.ok()) {
          st = rt.Prefill(m.sequence_id, static_cast<int>(m.layer),
                          static_cast<int>(m.num_tokens), m.k, m.v);
        }
        Reply(id, st);
        break;
      }
      case MessageType::kInfo: {
        attnrt::tcp::InfoMessage info;
        info.shape = shape;
        info.device = rt.device_description();
        Status st = payload_.empty() ? Status::Ok()
                                     : attnrt::tcp::PayloadSizeError("Info", payload_.size(),
                                                                     "0", 0);
        if (st.ok()) {
          Enqueue(attnrt::tcp::EncodeInfoResult(id, info));
        } else {
          Reply(id, st);
        }
        break;
      }
      case MessageType::kShutdown:
        Reply(id, Status::Ok());
        server_->RequestStop("Shutdown message from " + peer_);
        break;
      default:
        Reply(id, attnrt::InvalidArgumentError(
                      "type = " + std::to_string(header_.type) +
                      " is not a request type (1 CreateSequence .. 5 Shutdown)"));
        break;
    }
    if (payload_.capacity() > (1u << 20)) std::vector<std::uint8_t>().swap(payload_);
    ReadHeader();
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
    Status st = attnrt::tcp::ParseDecode(payload_, server_->runtime().shape(), &m);
    if (st.ok()) st = CheckedLayer(m.layer);
    if (st.ok() && m.priority > (1u << 30)) {
      st = attnrt::InvalidArgumentError("priority = " + std::to_string(m.priority) +
                                        " is out of range");
    }
    if (!st.ok()) {
      ++server_->decode_errors;
      Enqueue(attnrt::tcp::EncodeDecodeResult(id, st, {}));
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
    Server* server = server_;
    // Runs on a runtime completion thread. The session reference is dropped before in_flight
    // falls, so once in_flight is 0 no completion thread holds a session.
    auto done = [self = shared_from_this(), server, id](attnrt::DecodeResult r) mutable {
      ++(r.status.ok() ? server->decodes_ok : server->decode_errors);
      self->Send(attnrt::tcp::EncodeDecodeResult(id, r.status, r.output));
      self.reset();
      --server->in_flight;
    };
    auto submitted = server_->runtime().Submit(req, std::move(done));
    if (!submitted.ok()) {  // rejected: the callback will never run
      --server_->in_flight;
      ++server_->decode_errors;
      Enqueue(attnrt::tcp::EncodeDecodeResult(id, submitted.status(), {}));
    }
  }

  void Reply(std::uint64_t id, const Status& st) {
    if (!st.ok()) ++server_->request_errors;
    Enqueue(attnrt::tcp::EncodeStatusResult(id, st));
  }

  void Enqueue(std::vector<std::uint8_t> frame) {
    if (closed_) return;
    queued_bytes_ += frame.size();
    if (queued_bytes_ > kMaxQueuedResponseBytes) {
      CloseNow("more than " + std::to_string(kMaxQueuedResponseBytes >> 20) +
               " MiB of responses unread by the peer");
      return;
    }
    write_queue_.push_back(std::move(frame));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (closed_) return;
    if (write_queue_.empty()) {
      writing_ = false;
      if (close_after_flush_) CloseNow("");
      return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(write_queue_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (ec) {
                          self->CloseNow(self->closed_ ? "" : "write: " + ec.message());
                          return;
                        }
                        self->queued_bytes_ -= self->write_queue_.front().size();
                        self->write_queue_.pop_front();
                        self->WriteNext();
                      });
  }

  void CloseNow(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    if (!why.empty()) {
      std::fprintf(stderr, "serve_tcp: %s: closing the connection: %s\n", peer_.c_str(),
                   why.c_str());
    }
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    write_queue_.clear();
    queued_bytes_ = 0;
    writing_ = false;
  }

  tcp::socket socket_;  // on one single-threaded io_context for the session's life
  Server* server_;
  std::string peer_;
  std::array<std::uint8_t, attnrt::tcp::kHeaderBytes> header_bytes_{};
  attnrt::tcp::FrameHeader header_;
  std::vector<std::uint8_t> payload_;
  std::deque<std::vector<std::uint8_t>> write_queue_;
  std::size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool close_after_flush_ = false;
  bool closed_ = false;
};

// Accepts connections and spreads them over the io_contexts, round robin.
void Accept(tcp::acceptor* acceptor, std::vector<std::unique_ptr<asio::io_context>>* contexts,
            std::size_t next, Server* server) {
  asio::io_context& io = *(*contexts)[next % contexts->size()];
  acceptor->async_accept(io, [=](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      ++server->connections;
      boost::system::error_code opt_ec;
      socket.set_option(tcp::no_delay(true), opt_ec);  // small frames: no Nagle delay
      auto session = std::make_shared<Session>(std::move(socket), server);
      server->Register(session);
      session->Start();
    } else {
      std::fprintf(stderr, "serve_tcp: accept: %s\n", ec.message().c_str());
    }
    Accept(acceptor, contexts, next + 1, server);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the banner must reach a pipe or file at once
  ServerOptions o;
  if (const int rc = ParseArgs(argc, argv, &o); rc != attnrt::examples::FlagSet::kContinue) {
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

  attnrt::RuntimeOptions ro;
  ro.shape.num_layers = o.layers;
  ro.shape.num_q_heads = o.heads;
  ro.shape.num_kv_heads = o.kv_heads;
  ro.shape.head_dim = o.head_dim;
  ro.shape.block_size = o.block_size;
  ro.shape.max_context = o.max_context;
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

  int exit_code = 0;
  {
    Server server(runtime.get());
    std::vector<std::unique_ptr<asio::io_context>> contexts;
    std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
    for (int t = 0; t < o.threads; ++t) {
      contexts.push_back(std::make_unique<asio::io_context>(1));
      guards.push_back(asio::make_work_guard(*contexts.back()));
    }
    asio::io_context& io = *contexts[0];  // also runs the acceptor, signals and timer
    tcp::acceptor acceptor(io);
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      std::fprintf(stderr, "serve_tcp: cannot listen on %s:%d: %s\n", o.bind.c_str(), o.port,
                   ec.message().c_str());
      return 1;
    }
    const tcp::endpoint local = acceptor.local_endpoint(ec);
    const attnrt::ModelShape& s = runtime->shape();
    std::printf("serve_tcp: listening on %s:%u (%s); shape %d layers, H=%d, Hkv=%d, D=%d, "
                "block %d, max context %d\n",
                local.address().to_string().c_str(), static_cast<unsigned>(local.port()),
                runtime->device_description().c_str(), s.num_layers, s.num_q_heads,
                s.num_kv_heads, s.head_dim, s.block_size, s.max_context);

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code e, int signo) {
      if (!e) server.RequestStop(signo == SIGINT ? "SIGINT" : "SIGTERM");
    });
    asio::steady_timer max_timer(io);
    if (o.max_seconds > 0) {
      max_timer.expires_after(std::chrono::seconds(o.max_seconds));
      max_timer.async_wait([&](boost::system::error_code e) {
        if (!e) server.RequestStop("--max-seconds " + std::to_string(o.max_seconds) + " reached");
      });
    }
    Accept(&acceptor, &contexts, 0, &server);

    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (auto& c : contexts) threads.emplace_back([&c] { c->run(); });

    const std::string reason = server.WaitForStop();
    std::printf("serve_tcp: stopping (%s)\n", reason.c_str());
    // 1. No new connections, no more timers or signals: only sessions keep the io_context busy.
    std::promise<void> intake_closed;
    asio::post(io, [&] {
      boost::system::error_code e;
      acceptor.close(e);
      signals.cancel(e);
      max_timer.cancel();
      intake_closed.set_value();
    });
    intake_closed.get_future().wait();
    // 2. Every admitted decode completes and queues its response; later Submits are rejected at
    //    once (answered Unavailable), so afterwards no completion thread touches a session.
    runtime->Drain();
    if (!Server::WaitForZero(server.in_flight, std::chrono::seconds(10))) {
      std::fprintf(stderr, "serve_tcp: %ld decode callbacks still running after the drain\n",
                   server.in_flight.load());
      exit_code = 1;
    }
    // 3. Flush and close every session; close what has not flushed within the grace period.
    guards.clear();
    for (auto& s : server.LiveSessions()) s->CloseWhenFlushed();
    if (!Server::WaitForZero(server.live_sessions, kFlushGrace)) {
      for (auto& s : server.LiveSessions()) s->CloseNowFromAnyThread();
    }
    for (auto& t : threads) t.join();  // run() returns once every socket is closed
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    const long errors = server.decode_errors + server.request_errors + server.protocol_errors;
    std::printf("serve_tcp: summary: %.1f s, %ld connections, %ld requests (%ld decodes OK), "
                "%ld errors (%ld decode, %ld other requests, %ld bad frames)\n",
                seconds, server.connections.load(), server.frames.load(),
                server.decodes_ok.load(), errors, server.decode_errors.load(),
                server.request_errors.load(), server.protocol_errors.load());
  }
  runtime.reset();
  return exit_code;
}
