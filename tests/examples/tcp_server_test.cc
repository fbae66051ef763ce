// examples/serve_tcp under abuse, over loopback: each test starts the server (CPU executor) as a
// child process, then floods, starves, churns or SIGTERMs it, and checks that its memory (VmRSS)
// stays bounded, that a well-behaved client on another connection still gets correct answers, and
// that every request the server read is answered. The binaries' paths come from the build
// (examples/CMakeLists.txt); ATTNRT_SERVE_TCP / ATTNRT_LOADGEN_TCP override them.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "examples/tcp_protocol.h"
#include "tests/support/random_fp16.h"

extern char** environ;

namespace attnrt::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// The served shape (small: the CPU executor runs everything).
constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 64, kLayers = 2;
constexpr std::size_t kQElems = kHeads * kHeadDim, kKvElems = kKvHeads * kHeadDim;
// RSS growth allowed on top of what a bound (budget, backlog) admits: allocator slack, thread
// stacks touched, the runtime's own buffers.
constexpr long kRssSlackKb = 24 << 10;

std::string BinaryPath(const char* env, const char* built) {
  if (const char* p = std::getenv(env); p != nullptr && *p != '\0') return p;
  return built;
}
#ifdef ATTNRT_SERVE_TCP_PATH
const std::string kServeTcp = BinaryPath("ATTNRT_SERVE_TCP", ATTNRT_SERVE_TCP_PATH);
const std::string kLoadgenTcp = BinaryPath("ATTNRT_LOADGEN_TCP", ATTNRT_LOADGEN_TCP_PATH);
#else
const std::string kServeTcp = BinaryPath("ATTNRT_SERVE_TCP", "");
const std::string kLoadgenTcp = BinaryPath("ATTNRT_LOADGEN_TCP", "");
#endif

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// A child process whose stdout and stderr go to a temporary file. Killed if still running when
// destroyed.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!log_path_.empty()) unlink(log_path_.c_str());
  }

  // Starts `binary` with `args`; false with *error set on failure.
  bool Start(const std::string& binary, const std::vector<std::string>& args, std::string* error) {
    char path[] = "/tmp/tcp_server_test_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
      *error = "mkstemp: " + std::string(std::strerror(errno));
      return false;
    }
    close(fd);
    log_path_ = path;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, path, O_WRONLY | O_APPEND, 0);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      *error = "posix_spawn " + binary + ": " + std::strerror(rc);
      return false;
    }
    return true;
  }

  pid_t pid() const { return pid_; }

  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Waits for a line starting with `prefix`; returns it, or "" at the timeout or exit.
  std::string WaitForLine(const std::string& prefix, double timeout_s) {
    const auto deadline = After(timeout_s);
    while (Clock::now() < deadline) {
      std::istringstream lines(Log());
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind(prefix, 0) == 0) return line;
      }
      if (!Running()) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }

  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    return true;
  }

  void Signal(int signo) {
    if (pid_ > 0) kill(pid_, signo);
  }

  // The exit code (128 + signal when killed); -1 if still running after the timeout (then it is
  // killed).
  int Wait(double timeout_s) {
    const auto deadline = After(timeout_s);
    while (Running()) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }

  // VmRSS in KiB, or -1.
  long RssKb() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

// serve_tcp on a free loopback port, with the small shape and `extra` flags.
class Server {
 public:
  bool Start(const std::vector<std::string>& extra, std::string* error) {
    std::vector<std::string> args = {
        "--device", "cpu", "--bind", "127.0.0.1", "--port", "0", "--threads", "2",
        "--layers", std::to_string(kLayers), "--heads", std::to_string(kHeads),
        "--kv-heads", std::to_string(kKvHeads), "--head-dim", std::to_string(kHeadDim),
        "--block-size", "16", "--kv-cache-mb", "32", "--window-us", "200",
        "--max-seconds", "120"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!process_.Start(kServeTcp, args, error)) return false;
    const std::string banner = process_.WaitForLine("serve_tcp: listening on 127.0.0.1:", 20);
    if (banner.empty() ||
        std::sscanf(banner.c_str(), "serve_tcp: listening on 127.0.0.1:%d", &port_) != 1) {
      *error = "no banner from serve_tcp; its log:\n" + process_.Log();
      return false;
    }
    return true;
  }

  int port() const { return port_; }
  ChildProcess& process() { return process_; }
  long RssKb() const { return process_.RssKb(); }

  // SIGTERM, then the exit code and the 'serve_tcp: counts:' line as a map.
  int Terminate(std::map<std::string, long>* counts, double timeout_s = 30) {
    process_.Signal(SIGTERM);
    const int rc = process_.Wait(timeout_s);
    *counts = ParseCounts(process_.Log(), "serve_tcp: counts:");
    return rc;
  }

  // key=value pairs of the line starting with `prefix`.
  static std::map<std::string, long> ParseCounts(const std::string& log,
                                                 const std::string& prefix) {
    std::map<std::string, long> out;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(prefix, 0) != 0) continue;
      std::istringstream words(line.substr(prefix.size()));
      for (std::string w; words >> w;) {
        const auto eq = w.find('=');
        if (eq != std::string::npos) out[w.substr(0, eq)] = std::strtol(w.c_str() + eq + 1, nullptr, 10);
      }
    }
    return out;
  }

 private:
  ChildProcess process_;
  int port_ = 0;
};

// A non-blocking loopback TCP client with deadlines on every call.
class Conn {
 public:
  Conn() = default;
  Conn(Conn&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Conn& operator=(Conn&& o) noexcept {
    Close();
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Conn() { Close(); }

  static Conn Open(int port) {
    Conn c;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return c;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return c;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c.fd_ = fd;
    return c;
  }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Writes all of `bytes` before the timeout.
  bool Send(std::span<const std::uint8_t> bytes, double timeout_s = 10) {
    const auto deadline = After(timeout_s);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::size_t n = SendSome(bytes.subspan(done));
      done += n;
      if (done == bytes.size()) break;
      if (broken_ || !Poll(POLLOUT, deadline)) return false;
    }
    return true;
  }

  // Writes what the socket takes now.
  std::size_t SendSome(std::span<const std::uint8_t> bytes) {
    if (fd_ < 0 || bytes.empty()) return 0;
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EINTR) broken_ = true;
    return 0;
  }

  bool ReadFrame(FrameHeader* h, std::vector<std::uint8_t>* payload, double timeout_s = 5) {
    const auto deadline = After(timeout_s);
    std::array<std::uint8_t, kHeaderBytes> bytes;
    if (!ReadExactly(bytes.data(), bytes.size(), deadline)) return false;
    if (!ParseHeader(bytes, h).ok()) return false;
    payload->resize(h->payload_bytes);
    return ReadExactly(payload->data(), payload->size(), deadline);
  }

  // Reads one StatusResult; false if none came (or another type did).
  bool ReadStatus(Status* status, std::uint64_t* request_id = nullptr, double timeout_s = 5) {
    FrameHeader h;
    std::vector<std::uint8_t> payload;
    if (!ReadFrame(&h, &payload, timeout_s)) return false;
    if (h.type != static_cast<std::uint16_t>(MessageType::kStatusResult)) return false;
    if (request_id != nullptr) *request_id = h.request_id;
    return ParseStatusResult(payload, status).ok();
  }

  // Sends a frame answered by a StatusResult and returns the server's status (Unavailable with
  // "transport" when nothing came back).
  Status CallForStatus(const std::vector<std::uint8_t>& frame, double timeout_s = 10) {
    Status st;
    if (!Send(frame, timeout_s) || !ReadStatus(&st, nullptr, timeout_s)) {
      return UnavailableError("transport: no StatusResult");
    }
    return st;
  }

  // True when the server ends the stream (end of stream or reset) before the timeout; bytes that
  // arrive first are discarded.
  bool WaitForClose(double timeout_s) {
    const auto deadline = After(timeout_s);
    std::array<std::uint8_t, 4096> buf;
    while (true) {
      const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return errno == ECONNRESET;
      if (n < 0 && !Poll(POLLIN, deadline)) return false;
    }
  }

  // Everything the peer sends until it closes; false on a timeout or an error.
  bool ReadUntilClose(std::string* out, double timeout_s) {
    const auto deadline = After(timeout_s);
    std::array<char, 4096> buf;
    while (true) {
      const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n == 0) return true;
      if (n > 0) {
        out->append(buf.data(), static_cast<std::size_t>(n));
        continue;
      }
      if (errno != EAGAIN && errno != EINTR) return false;
      if (!Poll(POLLIN, deadline)) return false;
    }
  }

  // An abortive close (reset) instead of an orderly one.
  void Reset() {
    if (fd_ < 0) return;
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    Close();
  }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool ReadExactly(void* out, std::size_t n, Clock::time_point deadline) {
    auto* p = static_cast<std::uint8_t*>(out);
    std::size_t done = 0;
    while (done < n) {
      const ssize_t r = ::recv(fd_, p + done, n - done, 0);
      if (r > 0) {
        done += static_cast<std::size_t>(r);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR) || !Poll(POLLIN, deadline)) {
        return false;
      }
    }
    return true;
  }

  // Waits until the socket is ready for `events` or the deadline passes.
  bool Poll(short events, Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, events, 0};
    return ::poll(&p, 1, static_cast<int>(left.count())) > 0;
  }

 private:
  int fd_ = -1;
  bool broken_ = false;
};

// A frame header alone, announcing `payload_bytes`.
std::vector<std::uint8_t> Header(MessageType type, std::uint64_t id, std::uint32_t payload_bytes) {
  auto frame = BeginFrame(type, id);
  std::memcpy(frame.data() + 16, &payload_bytes, sizeof(payload_bytes));
  return frame;
}

// The start of a Prefill frame announcing num_tokens tokens: header and the 16-byte prefix.
std::vector<std::uint8_t> PrefillPrefix(std::uint64_t id, std::uint64_t sequence_id,
                                        std::uint32_t num_tokens) {
  const std::uint64_t payload = kPrefillPrefixBytes + 4ull * num_tokens * kKvElems;
  auto frame = Header(MessageType::kPrefill, id, static_cast<std::uint32_t>(payload));
  ByteWriter w(&frame);
  w.U64(sequence_id);
  w.U32(0);
  w.U32(num_tokens);
  return frame;
}

// The value every V row of KV head h holds in ServesCorrectly: attention over identical rows
// returns that row whatever the scores, exactly (0.25 steps are exact in FP16).
float ConstantV(int kv_head) { return 0.25f * static_cast<float>(kv_head + 1); }

std::vector<Half> ConstantVRows(int tokens) {
  std::vector<Half> v(static_cast<std::size_t>(tokens) * kKvElems);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = FloatToHalf(ConstantV(static_cast<int>((i / kHeadDim) % kKvHeads)));
  }
  return v;
}

// A well-behaved client's round trip on a fresh connection: Info, CreateSequence, Prefill and
// Decode with fresh random q and k; the output must equal the constant V rows.
::testing::AssertionResult ServesCorrectly(int port, double timeout_s = 10) {
  testing::NormalRng rng(std::random_device{}());
  const auto start = Clock::now();
  Conn c = Conn::Open(port);
  if (!c.ok()) return ::testing::AssertionFailure() << "connect failed";
  FrameHeader h;
  std::vector<std::uint8_t> payload;
  InfoMessage info;
  if (!c.Send(EncodeEmpty(MessageType::kInfo, 1)) || !c.ReadFrame(&h, &payload, timeout_s) ||
      !ParseInfoResult(payload, &info).ok() || info.shape.num_q_heads != kHeads) {
    return ::testing::AssertionFailure() << "no valid InfoResult";
  }
  const std::uint64_t seq = (rng.NextU64() >> 8) | 1;
  if (Status st = c.CallForStatus(EncodeCreateSequence(2, seq), timeout_s); !st.ok()) {
    return ::testing::AssertionFailure() << "CreateSequence: " << st.ToString();
  }
  constexpr int kTokens = 4;
  std::vector<Half> k(kTokens * kKvElems), q(kQElems), k1(kKvElems);
  testing::FillNormal(k, rng);
  testing::FillNormal(q, rng);
  testing::FillNormal(k1, rng);
  const std::vector<Half> v = ConstantVRows(kTokens), v1 = ConstantVRows(1);
  if (Status st = c.CallForStatus(EncodePrefill(3, seq, 1, kTokens, k, v), timeout_s); !st.ok()) {
    return ::testing::AssertionFailure() << "Prefill: " << st.ToString();
  }
  Status result;
  std::vector<Half> out;
  if (!c.Send(EncodeDecode(4, seq, 1, 0, q, k1, v1)) || !c.ReadFrame(&h, &payload, timeout_s) ||
      h.request_id != 4 || !ParseDecodeResult(payload, &result, &out).ok()) {
    return ::testing::AssertionFailure() << "no valid DecodeResult";
  }
  if (!result.ok()) return ::testing::AssertionFailure() << "Decode: " << result.ToString();
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float want = ConstantV(static_cast<int>(i / kHeadDim) / (kHeads / kKvHeads));
    if (std::abs(HalfToFloat(out[i]) - want) > 1e-3f) {
      return ::testing::AssertionFailure() << "output[" << i << "] = " << HalfToFloat(out[i])
                                           << ", expected " << want;
    }
  }
  if (Seconds(Clock::now() - start) > timeout_s) {
    return ::testing::AssertionFailure() << "round trip took " << Seconds(Clock::now() - start)
                                         << " s";
  }
  return ::testing::AssertionSuccess();
}

#define START_SERVER(server, ...)                                             \
  do {                                                                        \
    if (kServeTcp.empty()) GTEST_SKIP() << "serve_tcp was not built (examples off)"; \
    std::string error_;                                                       \
    ASSERT_TRUE((server).Start({__VA_ARGS__}, &error_)) << error_;            \
  } while (0)

// The largest legal Prefill payload for --max-context 65536: 32 MiB + 16.
constexpr int kLongContext = 65536;
constexpr std::uint32_t kLargestPrefill = kPrefillPrefixBytes + 4u * kLongContext * kKvElems;

// --metrics-port: GET /metrics answers the runtime's Prometheus text over HTTP on its own port
// (counting the decodes the TCP side served); other paths and methods are refused; the decode
// port is unaffected.
TEST(TcpServerTest, MetricsEndpointServesPrometheusText) {
  Server server;
  std::string error;
  ASSERT_TRUE(server.Start({"--metrics-port", "0"}, &error)) << error;
  const std::string line =
      server.process().WaitForLine("serve_tcp: metrics on http://127.0.0.1:", 20);
  int metrics_port = 0;
  ASSERT_EQ(std::sscanf(line.c_str(), "serve_tcp: metrics on http://127.0.0.1:%d/metrics",
                        &metrics_port), 1)
      << server.process().Log();
  auto get = [&](const std::string& request) {
    Conn c = Conn::Open(metrics_port);
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(c.Send({reinterpret_cast<const std::uint8_t*>(request.data()), request.size()}));
    std::string reply;
    EXPECT_TRUE(c.ReadUntilClose(&reply, 10)) << "the endpoint did not close after its reply";
    return reply;
  };
  const std::string ok = get("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << ok.substr(0, 200);
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(ok.find("\nattnrt_scheduler_requests_submitted_total "), std::string::npos);
  EXPECT_NE(ok.find("\nattnrt_kv_blocks{"), std::string::npos);
  const std::size_t body = ok.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const std::size_t length_at = ok.find("Content-Length: ");
  ASSERT_NE(length_at, std::string::npos);
  EXPECT_EQ(std::strtoul(ok.c_str() + length_at + 16, nullptr, 10), ok.size() - body - 4);
  EXPECT_EQ(get("GET /other HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 404", 0), 0u);
  EXPECT_EQ(get("POST /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 405", 0), 0u);
  Conn decode = Conn::Open(server.port());
  EXPECT_TRUE(decode.ok()) << "the decode port stopped accepting";
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0) << server.process().Log();
}

TEST(TcpServerTest, HeaderOnlyFloodCommitsNoMemory) {
  Server server;
  START_SERVER(server, "--max-context", std::to_string(kLongContext));
  ASSERT_TRUE(ServesCorrectly(server.port()));
  const long rss_before = server.RssKb();

  // 16 connections announce 64 MiB Prefills (over the largest legal one) and send nothing more;
  // 16 announce the largest legal Prefill and send 1 KiB of it.
  constexpr int kConnections = 16;
  std::vector<Conn> over, legal;
  for (int i = 0; i < kConnections; ++i) {
    over.push_back(Conn::Open(server.port()));
    ASSERT_TRUE(over.back().Send(Header(MessageType::kPrefill, 100 + i, kMaxPayloadBytes)));
    legal.push_back(Conn::Open(server.port()));
    auto frame = PrefillPrefix(200 + i, 1, kLongContext);
    frame.resize(frame.size() + 1024);
    ASSERT_TRUE(legal.back().Send(frame));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long rss_during = server.RssKb();
  EXPECT_TRUE(ServesCorrectly(server.port()));
  std::printf("VmRSS: %ld KiB before, %ld KiB with %d x 64 MiB and %d x 32 MiB announced\n",
              rss_before, rss_during, kConnections, kConnections);
  EXPECT_LT(rss_during - rss_before, kRssSlackKb);

  for (Conn& c : over) {  // answered with the field named, then closed
    Status st;
    ASSERT_TRUE(c.ReadStatus(&st));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("payload_bytes"), std::string::npos) << st.ToString();
    EXPECT_TRUE(c.WaitForClose(5));
  }
  over.clear();
  // The drain drops the half-sent frames and ends each stream in order.
  server.process().Signal(SIGTERM);
  for (Conn& c : legal) EXPECT_TRUE(c.WaitForClose(5));
  legal.clear();
  EXPECT_EQ(server.process().Wait(10), 0);
  auto counts = Server::ParseCounts(server.process().Log(), "serve_tcp: counts:");
  EXPECT_EQ(counts["bad_frames"], kConnections);
  EXPECT_EQ(counts["incomplete_frames"], kConnections);
}

TEST(TcpServerTest, PartialPayloadsStayWithinTheBudget) {
  Server server;
  constexpr int kBudgetMb = 32;
  START_SERVER(server, "--max-context", std::to_string(kLongContext), "--max-pending-mb",
               std::to_string(kBudgetMb));
  ASSERT_TRUE(ServesCorrectly(server.port()));
  const long rss_before = server.RssKb();

  // 8 connections send 12 MiB of a 32 MiB Prefill each: 96 MiB, three times the budget.
  constexpr int kConnections = 8;
  constexpr std::size_t kSent = 12u << 20;
  std::vector<Conn> conns;
  std::vector<std::uint8_t> frame = PrefillPrefix(7, 0xabcdef, kLongContext);
  frame.resize(kHeaderBytes + kLargestPrefill);
  for (int i = 0; i < kConnections; ++i) {
    conns.push_back(Conn::Open(server.port()));
    ASSERT_TRUE(conns.back().Send(std::span(frame).first(kSent)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long rss_during = server.RssKb();
  EXPECT_TRUE(ServesCorrectly(server.port()));
  std::printf("VmRSS: %ld KiB before, %ld KiB with %d x 12 MiB partial payloads (budget %d MiB)\n",
              rss_before, rss_during, kConnections, kBudgetMb);
  EXPECT_LT(rss_during - rss_before, (kBudgetMb << 10) + kRssSlackKb);

  // Each frame completes and gets exactly one answer: NotFound (no such sequence) when it was
  // admitted, ResourceExhausted naming the budget when it was dropped; each connection stays
  // usable.
  int exhausted = 0;
  for (Conn& c : conns) {
    ASSERT_TRUE(c.Send(std::span(frame).subspan(kSent)));
    Status st;
    std::uint64_t id = 0;
    ASSERT_TRUE(c.ReadStatus(&st, &id, 10));
    EXPECT_EQ(id, 7u);
    if (st.code() == StatusCode::kResourceExhausted) {
      ++exhausted;
      EXPECT_NE(st.message().find("--max-pending-mb"), std::string::npos) << st.ToString();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
    }
    FrameHeader h;
    std::vector<std::uint8_t> payload;
    ASSERT_TRUE(c.Send(EncodeEmpty(MessageType::kInfo, 8)) && c.ReadFrame(&h, &payload));
    EXPECT_EQ(h.type, static_cast<std::uint16_t>(MessageType::kInfoResult));
  }
  EXPECT_GE(exhausted, kConnections - kBudgetMb / 12);
  conns.clear();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  EXPECT_EQ(counts["budget_rejections"], exhausted);
  // The budget binds frames over 64 KiB; the small frames of ServesCorrectly may add a little.
  EXPECT_LE(counts["peak_pending_payload_bytes"], (kBudgetMb << 20) + (1 << 20));
}

TEST(TcpServerTest, ConnectionsOverTheCapAreRefusedPromptly) {
  Server server;
  constexpr int kCap = 8, kExcess = 4;
  START_SERVER(server, "--max-connections", std::to_string(kCap));
  std::vector<Conn> held;
  for (int i = 0; i < kCap; ++i) {
    held.push_back(Conn::Open(server.port()));
    FrameHeader h;
    std::vector<std::uint8_t> payload;
    ASSERT_TRUE(held.back().Send(EncodeEmpty(MessageType::kInfo, 1)) &&
                held.back().ReadFrame(&h, &payload));
  }
  for (int i = 0; i < kExcess; ++i) {
    const auto start = Clock::now();
    Conn c = Conn::Open(server.port());
    ASSERT_TRUE(c.ok());
    Status st;
    ASSERT_TRUE(c.ReadStatus(&st, nullptr, 2));
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("--max-connections"), std::string::npos) << st.ToString();
    EXPECT_TRUE(c.WaitForClose(2));
    EXPECT_LT(Seconds(Clock::now() - start), 1.0);
  }
  // Closing held connections frees their places.
  held.resize(kCap - 2);
  const auto deadline = After(5);
  bool served = false;
  while (!served && Clock::now() < deadline) {
    served = ServesCorrectly(server.port(), 2);
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
  held.clear();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  EXPECT_GE(counts["refused"], kExcess);
}

TEST(TcpServerTest, TenThousandConnectionsOpenedAndClosed) {
  Server server;
  START_SERVER(server);
  ASSERT_TRUE(ServesCorrectly(server.port()));
  const long rss_before = server.RssKb();
  testing::NormalRng rng(std::random_device{}());
  const std::vector<Half> q(kQElems), kv(kKvElems);
  const auto decode = EncodeDecode(1, 1, 0, 0, q, kv, kv);
  const auto info = EncodeEmpty(MessageType::kInfo, 1);
  const auto start = Clock::now();
  constexpr int kConnections = 10000;
  int connected = 0;
  for (int i = 0; i < kConnections; ++i) {
    Conn c = Conn::Open(server.port());
    if (!c.ok()) continue;
    ++connected;
    switch (i % 4) {
      case 0:  // nothing sent; reset
        c.Reset();
        break;
      case 1:  // part of a header
        c.SendSome(std::span(info).first(1 + rng.NextInt(0, 22)));
        break;
      case 2:  // a header and part of a Decode payload; reset
        c.SendSome(std::span(decode).first(kHeaderBytes + rng.NextInt(0, 1000)));
        c.Reset();
        break;
      default:  // a whole request, its reply left unread
        c.SendSome(info);
        break;
    }
  }
  const double churn_s = Seconds(Clock::now() - start);
  EXPECT_EQ(connected, kConnections);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(ServesCorrectly(server.port()));
  const long rss_after = server.RssKb();
  std::printf("%d connections opened and closed in %.2f s; VmRSS %ld -> %ld KiB\n", kConnections,
              churn_s, rss_before, rss_after);
  EXPECT_LT(rss_after - rss_before, kRssSlackKb);
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  EXPECT_EQ(counts["connections"] + counts["refused"], kConnections + 2);
}

TEST(TcpServerTest, RandomBytesAreAnsweredAndTheConnectionClosed) {
  Server server;
  START_SERVER(server);
  testing::NormalRng rng(std::random_device{}());
  constexpr int kConnections = 32;
  std::vector<Conn> conns;
  for (int i = 0; i < kConnections; ++i) {
    std::vector<std::uint8_t> noise(4096);
    for (std::uint8_t& b : noise) b = static_cast<std::uint8_t>(rng.NextU64());
    conns.push_back(Conn::Open(server.port()));
    ASSERT_TRUE(conns.back().Send(noise));
  }
  EXPECT_TRUE(ServesCorrectly(server.port()));
  for (Conn& c : conns) {
    Status st;
    ASSERT_TRUE(c.ReadStatus(&st));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_TRUE(c.WaitForClose(5));
  }
  conns.clear();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  EXPECT_EQ(counts["bad_frames"], kConnections);
}

TEST(TcpServerTest, OversizedLengthFieldsAreRejected) {
  Server server;
  START_SERVER(server, "--max-context", "512");
  const std::uint32_t decode = kDecodePrefixBytes + 2 * (kQElems + 2 * kKvElems);
  const std::uint32_t prefill = kPrefillPrefixBytes + 4 * 512 * kKvElems;
  const struct {
    MessageType type;
    std::uint32_t payload_bytes;
  } cases[] = {
      {MessageType::kDecode, decode + 1},      {MessageType::kPrefill, prefill + 1},
      {MessageType::kPrefill, 0xffffffffu},    {MessageType::kCreateSequence, 9},
      {MessageType::kInfo, 1},                 {MessageType::kShutdown, 1},
      {static_cast<MessageType>(77), 0xffffffffu},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("type " + std::to_string(static_cast<int>(c.type)) + ", payload_bytes " +
                 std::to_string(c.payload_bytes));
    Conn conn = Conn::Open(server.port());
    ASSERT_TRUE(conn.Send(Header(c.type, 5, c.payload_bytes)));
    Status st;
    std::uint64_t id = 0;
    ASSERT_TRUE(conn.ReadStatus(&st, &id));
    EXPECT_EQ(id, 5u);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("payload_bytes"), std::string::npos) << st.ToString();
    EXPECT_TRUE(conn.WaitForClose(5));
  }
  // A short Decode payload is a bad request, not a bad stream: the connection stays usable.
  Conn conn = Conn::Open(server.port());
  const std::vector<Half> q(kQElems), kv(kKvElems);
  auto short_decode = EncodeDecode(6, 1, 0, 0, q, kv, kv);
  short_decode.resize(short_decode.size() - 2);
  FinishFrame(&short_decode);
  FrameHeader h;
  std::vector<std::uint8_t> payload;
  ASSERT_TRUE(conn.Send(short_decode) && conn.ReadFrame(&h, &payload));
  Status result;
  std::vector<Half> out;
  ASSERT_TRUE(ParseDecodeResult(payload, &result, &out).ok());
  EXPECT_EQ(result.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(conn.Send(EncodeEmpty(MessageType::kInfo, 7)) && conn.ReadFrame(&h, &payload));
  EXPECT_TRUE(ServesCorrectly(server.port()));  // and the Shutdown with a payload stopped nothing
  conn.Close();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
}

TEST(TcpServerTest, DisconnectsMidFrameReturnTheirBytesToTheBudget) {
  Server server;
  START_SERVER(server, "--max-context", std::to_string(kLongContext), "--max-pending-mb", "8",
               "--frame-timeout-ms", "500");
  // 20 connections each leave 6 MiB of a 32 MiB Prefill behind (committing 8 MiB: buffers grow
  // by doubling). Back to back they may overlap and be refused; a leak would refuse what follows.
  std::vector<std::uint8_t> frame = PrefillPrefix(1, 1, kLongContext);
  frame.resize(kHeaderBytes + (6u << 20));
  for (int i = 0; i < 20; ++i) {
    Conn c = Conn::Open(server.port());
    ASSERT_TRUE(c.Send(frame));
    if (i % 2 == 0) {
      c.Reset();
    } else {
      c.Close();
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A 4 MiB Prefill (over the always-admitted 64 KiB) must be admitted and succeed.
  constexpr int kTokens = 8192;
  Conn c = Conn::Open(server.port());
  ASSERT_TRUE(c.CallForStatus(EncodeCreateSequence(2, 42)).ok());
  const std::vector<Half> k(kTokens * kKvElems), v = ConstantVRows(kTokens);
  Status st = c.CallForStatus(EncodePrefill(3, 42, 0, kTokens, k, v));
  EXPECT_TRUE(st.ok()) << st.ToString();

  // A frame that stops arriving: answered DeadlineExceeded naming payload_bytes, then closed.
  const auto start = Clock::now();
  Conn stalled = Conn::Open(server.port());
  ASSERT_TRUE(stalled.Send(std::span(frame).first(kHeaderBytes + 1024)));
  Conn stalled_header = Conn::Open(server.port());
  ASSERT_TRUE(stalled_header.Send(std::span(frame).first(10)));
  std::uint64_t id = 0;
  ASSERT_TRUE(stalled.ReadStatus(&st, &id, 5));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("payload_bytes"), std::string::npos) << st.ToString();
  EXPECT_TRUE(stalled.WaitForClose(5));
  EXPECT_TRUE(stalled_header.WaitForClose(5));
  EXPECT_LT(Seconds(Clock::now() - start), 3.0);
  stalled.Close();
  stalled_header.Close();
  EXPECT_TRUE(ServesCorrectly(server.port()));
  c.Close();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  // The orderly closes surely cut a frame; a reset may come before the server read a byte.
  EXPECT_GE(counts["incomplete_frames"], 10 + 2);
  EXPECT_EQ(counts["timed_out_frames"], 2);
}

// A client that pipelines Decodes (round robin over its sequences) without reading its replies
// until told to, so that the server's reply backlog and the socket buffers fill up.
struct Pipeliner {
  Conn conn;
  std::vector<std::uint64_t> sequences;
  std::vector<Half> q = std::vector<Half>(kQElems), kv = std::vector<Half>(kKvElems);
  std::uint64_t next_id = 1000;
  std::vector<std::uint8_t> pending;  // the frame being written
  std::size_t pending_offset = 0;
  long frames_sent = 0;               // whole frames written

  bool Setup(int port, int num_sequences, std::uint64_t first) {
    conn = Conn::Open(port);
    testing::NormalRng rng(first);
    testing::FillNormal(q, rng);
    testing::FillNormal(kv, rng);
    for (int i = 0; i < num_sequences; ++i) {
      sequences.push_back(first + i);
      if (!conn.CallForStatus(EncodeCreateSequence(i + 1, first + i)).ok()) return false;
    }
    return true;
  }

  // Writes frames until the socket refuses bytes for `stall_s`, or `max_frames` were written.
  void FillUntilStalled(double stall_s, long max_frames) {
    while (frames_sent < max_frames) {
      if (pending.empty()) {
        const std::uint64_t seq = sequences[next_id % sequences.size()];
        pending = EncodeDecode(next_id++, seq, 0, 0, q, kv, kv);
        pending_offset = 0;
      }
      pending_offset += conn.SendSome(std::span(pending).subspan(pending_offset));
      if (pending_offset == pending.size()) {
        pending.clear();
        ++frames_sent;
        continue;
      }
      if (!conn.Poll(POLLOUT, After(stall_s))) return;
    }
  }

  // Finishes the frame in progress and reads replies until `expected` arrived (or the stream
  // ends); returns the number of OK DecodeResults with distinct ids, *all the replies read.
  long ReadReplies(long expected, double timeout_s, long* all) {
    const auto deadline = After(timeout_s);
    std::set<std::uint64_t> ids;
    *all = 0;
    std::vector<std::uint8_t> buffer;
    std::array<std::uint8_t, 65536> chunk;
    while (*all < expected && Clock::now() < deadline) {
      if (!pending.empty()) {
        pending_offset += conn.SendSome(std::span(pending).subspan(pending_offset));
        if (pending_offset == pending.size()) {
          pending.clear();
          ++frames_sent;
          ++expected;
        }
      }
      if (!conn.Poll(POLLIN, After(0.05))) continue;
      const ssize_t n = ::recv(conn.fd(), chunk.data(), chunk.size(), 0);
      if (n == 0) break;
      if (n < 0) continue;
      buffer.insert(buffer.end(), chunk.begin(), chunk.begin() + n);
      std::size_t used = 0;
      while (buffer.size() - used >= kHeaderBytes) {
        FrameHeader h;
        if (!ParseHeader(std::span(buffer).subspan(used, kHeaderBytes), &h).ok()) return -1;
        if (buffer.size() - used < kHeaderBytes + h.payload_bytes) break;
        Status result;
        std::vector<Half> out;
        const auto payload = std::span(buffer).subspan(used + kHeaderBytes, h.payload_bytes);
        if (ParseDecodeResult(payload, &result, &out).ok() && result.ok()) ids.insert(h.request_id);
        ++*all;
        used += kHeaderBytes + h.payload_bytes;
      }
      buffer.erase(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(used));
    }
    return static_cast<long>(ids.size());
  }

};

TEST(TcpServerTest, SlowReaderIsThrottledAndLosesNothing) {
  Server server;
  constexpr int kBacklogKb = 256;
  START_SERVER(server, "--max-context", "8192", "--max-reply-backlog-kb",
               std::to_string(kBacklogKb));
  ASSERT_TRUE(ServesCorrectly(server.port()));
  const long rss_before = server.RssKb();
  Pipeliner slow;
  ASSERT_TRUE(slow.Setup(server.port(), 16, 0x100000));
  slow.FillUntilStalled(0.5, 30000);
  ASSERT_GT(slow.frames_sent, 0);
  const long rss_during = server.RssKb();
  // Other clients are unaffected while the slow one is stalled.
  EXPECT_TRUE(ServesCorrectly(server.port(), 2));
  std::printf("slow reader: %ld Decodes pipelined unread; VmRSS %ld -> %ld KiB (backlog cap %d "
              "KiB)\n",
              slow.frames_sent, rss_before, rss_during, kBacklogKb);
  EXPECT_LT(rss_during - rss_before, kRssSlackKb);
  // Once it reads, every request it sent is answered, OK.
  long all = 0;
  const long ok = slow.ReadReplies(slow.frames_sent, 30, &all);
  EXPECT_EQ(all, slow.frames_sent);
  EXPECT_EQ(ok, slow.frames_sent);
  slow.conn.Close();
  std::map<std::string, long> counts;
  EXPECT_EQ(server.Terminate(&counts), 0);
  EXPECT_EQ(counts["replies_dropped"], 0);
}

TEST(TcpServerTest, SigtermWhileAReaderLagsDeliversEveryAcceptedReply) {
  Server server;
  START_SERVER(server, "--max-context", "8192", "--max-reply-backlog-kb", "256");
  Pipeliner slow;
  ASSERT_TRUE(slow.Setup(server.port(), 16, 0x200000));
  slow.FillUntilStalled(0.5, 30000);
  server.process().Signal(SIGTERM);
  // Read everything until the server ends the stream: every reply it wrote must arrive.
  long all = 0;
  const long ok = slow.ReadReplies(1L << 40, 30, &all);
  slow.conn.Close();
  std::map<std::string, long> counts;
  const int rc = server.process().Wait(30);
  counts = Server::ParseCounts(server.process().Log(), "serve_tcp: counts:");
  EXPECT_EQ(rc, 0);
  std::printf("SIGTERM with %ld Decodes pipelined unread: server wrote %ld Decode replies, the "
              "client received %ld (%ld OK)\n",
              slow.frames_sent, counts["decode_replies_written"], all, ok);
  EXPECT_GT(all, 0);
  EXPECT_EQ(all, counts["decode_replies_written"]);
  EXPECT_EQ(ok, counts["decode_ok_written"]);
  EXPECT_EQ(counts["replies_dropped"], 0);
}

TEST(TcpServerTest, SigtermUnderPipelinedLoadAnswersEveryAcceptedRequest) {
  Server server;
  START_SERVER(server, "--max-context", "4096");
  ChildProcess loadgen;
  std::string error;
  ASSERT_TRUE(loadgen.Start(kLoadgenTcp,
                            {"--host", "127.0.0.1", "--port", std::to_string(server.port()),
                             "--tolerate-server-stop", "--rate", "4000", "--duration", "20",
                             "--sequences", "16", "--context", "32", "--connections", "4",
                             "--drain-timeout", "10"},
                            &error))
      << error;
  ASSERT_FALSE(loadgen.WaitForLine("setup:", 20).empty()) << loadgen.Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  server.process().Signal(SIGTERM);
  const int server_rc = server.process().Wait(30);
  const int loadgen_rc = loadgen.Wait(30);
  auto served = Server::ParseCounts(server.process().Log(), "serve_tcp: counts:");
  auto got = Server::ParseCounts(loadgen.Log(), "loadgen_tcp: counts:");
  std::printf("SIGTERM under load: server wrote %ld Decode replies (%ld OK); loadgen sent %ld, "
              "received %ld (%ld OK), %ld unanswered\n",
              served["decode_replies_written"], served["decode_ok_written"], got["sent"],
              got["received"], got["ok"], got["unanswered"]);
  EXPECT_EQ(server_rc, 0) << server.process().Log();
  EXPECT_EQ(loadgen_rc, 0) << loadgen.Log();
  EXPECT_GT(got["received"], 0);
  EXPECT_EQ(got["received"], served["decode_replies_written"]);
  EXPECT_EQ(got["ok"], served["decode_ok_written"]);
  EXPECT_EQ(got["errors"], 0);
  EXPECT_EQ(got["sent"], got["received"] + got["unanswered"]);
  EXPECT_EQ(served["replies_dropped"], 0);
}

}  // namespace
}  // namespace attnrt::tcp
