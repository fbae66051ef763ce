// libFuzzer target for the tools' command-line parsing (tools/flags.h, over CLI11, whose exceptions
// Parse must turn into exit codes, never let out): a FlagSet declared as
// tune_window, serve_tcp, loadgen_tcp, demo or attnrt-check declare theirs (names, types, ranges, defaults;
// copied from their ParseArgs, help texts shortened), parsing an argv built from the input.
// Checks: nothing crashes; Parse returns kContinue, 0 (only for --help/-h) or 2; a 2 comes with
// an error line naming the tool on stderr and nothing else does; after kContinue every value is
// its default or within its declared range (choices, lists of numbers >= 0).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include <attnrt/version.h>

#include "tools/flags.h"

namespace {

using attnrt::tools::FlagSet;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "flags_fuzz: %s\n", what.c_str());  // the real stderr: see Capture
  std::abort();
}

// A FlagSet plus, for each declaration, the check its destination must pass after kContinue.
class CheckedFlags {
 public:
  CheckedFlags(std::string tool, std::string summary) : flags_(tool, std::move(summary)) {
    tool_ = std::move(tool);
  }
  template <typename T>
  void Int(const char* name, T* dst, const char* help, double lo = 0, double hi = 1 << 30) {
    flags_.Int(name, dst, help, lo, hi);
    const T def = *dst;
    checks_.push_back([=] {
      const double x = static_cast<double>(*dst);
      if (*dst != def && !(x >= lo && x <= hi)) Fail(std::string(name) + " out of its range");
    });
  }
  void Double(const char* name, double* dst, const char* help, double lo = 0, double hi = 1e15) {
    flags_.Double(name, dst, help, lo, hi);
    const double def = *dst;
    checks_.push_back([=] {
      if (*dst != def && !(std::isfinite(*dst) && *dst >= lo && *dst <= hi)) {
        Fail(std::string(name) + " out of its range");
      }
    });
  }
  void String(const char* name, std::string* dst, const char* help) {
    flags_.String(name, dst, help);
  }
  void Choice(const char* name, std::string* dst, std::vector<std::string> choices,
              const char* help) {
    flags_.Choice(name, dst, choices, help);
    const std::string def = *dst;
    checks_.push_back([=] {
      if (*dst == def) return;
      for (const std::string& c : choices) {
        if (*dst == c) return;
      }
      Fail(std::string(name) + " holds '" + *dst + "', not one of its choices");
    });
  }
  void Bool(const char* name, bool* dst, const char* help) { flags_.Bool(name, dst, help); }
  template <typename T>
  void List(const char* name, std::vector<T>* dst, const char* help) {
    flags_.List(name, dst, help);
    checks_.push_back([=] {
      if (dst->empty()) Fail(std::string(name) + " is an empty list");
      for (const T& x : *dst) {
        if (!(x >= 0) || !std::isfinite(static_cast<double>(x))) {
          Fail(std::string(name) + " holds a value that is not a number >= 0");
        }
      }
    });
  }
  void Footer(std::string text) { flags_.Footer(std::move(text)); }

  int Parse(int argc, char** argv) const { return flags_.Parse(argc, argv); }
  void CheckValues() const {
    for (const auto& c : checks_) c();
  }
  const std::string& tool() const { return tool_; }

 private:
  FlagSet flags_;
  std::string tool_;
  std::vector<std::function<void()>> checks_;
};

// --- the tools' declarations ---------------------------------------------------------------

struct TuneWindowOptions {  // examples/tune_window.cc
  std::string device = "auto";
  std::vector<double> rates = {2000, 10000, 50000};
  std::vector<int> windows_us = {0, 50, 200, 1000};
  std::vector<int> max_batches = {8, 32, 128};
  double duration_s = 0.5, p99_slo_us = 2000;
  int max_queue_size = 1 << 16;
  int heads = 32, kv_heads = 8, head_dim = 128, block_size = 16, context = 512, sequences = 1024;
  std::string json, csv;
  int repeats = 3;
  int criteria_batch = 0, criteria_window_us = 200, producers = 1, buffers = 3;
  double criteria_saturation = 0.97;
  bool copy_path = false, no_sweep = false, full_overload = false;
  int inject_failures_every = 0;
  std::string inject_failure_kind = "error";

  void Declare(CheckedFlags& f) {
    f.Choice("--device", &device, attnrt::tools::DeviceChoices(), "executor");
    f.List("--rates", &rates, "offered loads in requests/s");
    f.List("--windows-us", &windows_us, "max_queue_delay values in us");
    f.List("--max-batches", &max_batches, "max_batch_size values");
    f.Double("--duration", &duration_s, "seconds of arrivals per point", 0.001, 3600);
    f.Double("--p99-slo-us", &p99_slo_us, "latency objective");
    f.Int("--max-queue-size", &max_queue_size, "max_queue_size", 1, 1 << 30);
    f.Int("--heads", &heads, "query heads H", 1, 1024);
    f.Int("--kv-heads", &kv_heads, "KV heads Hkv", 1, 1024);
    f.Int("--head-dim", &head_dim, "head dim");
    f.Int("--block-size", &block_size, "KV block size");
    f.Int("--context", &context, "prompt tokens", 1, 1 << 20);
    f.Int("--sequences", &sequences, "sequences", 1, 1 << 20);
    f.Int("--repeats", &repeats, "runs per point", 1, 100);
    f.String("--json", &json, "JSON file");
    f.String("--csv", &csv, "CSV file");
    f.Bool("--full-overload", &full_overload, "overloaded points in full");
    f.Int("--criteria", &criteria_batch, "criteria batch", 0, 1 << 16);
    f.Int("--criteria-window-us", &criteria_window_us, "criteria window");
    f.Double("--criteria-saturation", &criteria_saturation, "saturation criterion", 0, 2);
    f.Int("--producers", &producers, "producer threads", 1, 64);
    f.Bool("--copy-path", &copy_path, "copy path");
    f.Int("--buffers", &buffers, "pipeline buffers", 2, 16);
    f.Bool("--no-sweep", &no_sweep, "skip the sweep");
    f.Int("--inject-failures-every", &inject_failures_every, "testing only", 0, 1 << 30);
    f.Choice("--inject-failure-kind", &inject_failure_kind, {"error", "output"}, "testing only");
  }
};

struct ServeTcpOptions {  // examples/serve_tcp.cc
  std::string device = "auto", bind = "127.0.0.1";
  int port = 0;
  bool allow_remote = false;
  int threads = 2, layers = 2, heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  int max_context = 4096, window_us = 100, max_batch = 64, kv_cache_mb = 0, max_seconds = 0;
  int max_connections = 256, max_pending_mb = 128, max_reply_backlog_kb = 1024;
  int frame_timeout_ms = 30000, close_linger_ms = 2000, drain_timeout_s = 10;
  int metrics_port = -1;

  void Declare(CheckedFlags& f) {
    f.Choice("--device", &device, attnrt::tools::DeviceChoices(), "executor");
    f.String("--bind", &bind, "address to listen on");
    f.Int("--port", &port, "port", 0, 65535);
    f.Bool("--allow-remote", &allow_remote, "allow a non-loopback --bind");
    f.Int("--threads", &threads, "io threads", 1, 256);
    f.Int("--layers", &layers, "layers", 1, 1024);
    f.Int("--heads", &heads, "query heads H", 1, 1024);
    f.Int("--kv-heads", &kv_heads, "KV heads Hkv", 1, 1024);
    f.Int("--head-dim", &head_dim, "64, 128 or 256");
    f.Int("--block-size", &block_size, "8, 16, 32 or 64");
    f.Int("--max-context", &max_context, "longest sequence", 1, 1 << 24);
    f.Int("--window-us", &window_us, "batching window");
    f.Int("--max-batch", &max_batch, "max batch size", 1, 1 << 16);
    f.Int("--kv-cache-mb", &kv_cache_mb, "KV cache MiB", 0, 1 << 24);
    f.Int("--max-seconds", &max_seconds, "exit after N seconds");
    f.Int("--max-connections", &max_connections, "connections", 1, 1 << 20);
    f.Int("--max-pending-mb", &max_pending_mb, "pending MiB", 1, 1 << 20);
    f.Int("--max-reply-backlog-kb", &max_reply_backlog_kb, "reply backlog KiB", 1, 1 << 22);
    f.Int("--frame-timeout-ms", &frame_timeout_ms, "frame timeout");
    f.Int("--close-linger-ms", &close_linger_ms, "close linger");
    f.Int("--drain-timeout-s", &drain_timeout_s, "drain timeout", 1, 3600);
    f.Int("--metrics-port", &metrics_port, "metrics port", -1, 65535);
  }
};

struct LoadgenTcpOptions {  // examples/loadgen_tcp.cc
  std::string host = "127.0.0.1";
  int port = 0;
  bool allow_remote = false;
  int connections = 2, threads = 2, sequences = 8, context = 64;
  double rate = 1000, duration_s = 1.0;
  long max_requests = 1000000;
  int priority = 0;
  double drain_timeout_s = 10;
  std::uint64_t first_sequence = 0, seed = 1;
  bool verify = false, check_malformed = false, shutdown_server = false,
       tolerate_server_stop = false;

  void Declare(CheckedFlags& f) {
    f.String("--host", &host, "server address");
    f.Int("--port", &port, "server port", 1, 65535);
    f.Bool("--allow-remote", &allow_remote, "allow a non-loopback --host");
    f.Int("--connections", &connections, "TCP connections", 1, 4096);
    f.Int("--threads", &threads, "io threads", 1, 256);
    f.Int("--sequences", &sequences, "sequences", 0, 1 << 24);
    f.Int("--context", &context, "prompt tokens", 0, 1 << 24);
    f.Double("--rate", &rate, "offered decode requests/s");
    f.Double("--duration", &duration_s, "seconds of arrivals", 0, 86400);
    f.Int("--max-requests", &max_requests, "stop after N requests", 0, 1e15);
    f.Int("--priority", &priority, "priority level");
    f.Double("--drain-timeout", &drain_timeout_s, "drain seconds", 0, 3600);
    f.Int("--first-sequence", &first_sequence, "first sequence id", 0, 1e18);
    f.Int("--seed", &seed, "random seed", 0, 1e18);
    f.Bool("--verify", &verify, "verify outputs");
    f.Bool("--check-malformed", &check_malformed, "malformed frames first");
    f.Bool("--shutdown-server", &shutdown_server, "send Shutdown");
    f.Bool("--tolerate-server-stop", &tolerate_server_stop, "tolerate a server stop");
    f.Footer("With --sequences 0 or --duration 0 no load runs.");
  }
};

struct DemoOptions {  // examples/demo.cc
  std::string device = "auto";
  int threads = 4, sequences = 32, layers = 2, steps = 8, context = 512, heads = 32;
  int kv_heads = 8, head_dim = 128, block_size = 16, window_us = 200, max_batch = 32;

  void Declare(CheckedFlags& f) {
    f.Choice("--device", &device, attnrt::tools::DeviceChoices(), "executor");
    f.Int("--threads", &threads, "submitting threads", 1, 1024);
    f.Int("--sequences", &sequences, "sequences", 1, 1 << 20);
    f.Int("--layers", &layers, "layers", 1, 1024);
    f.Int("--steps", &steps, "decode steps", 1, 1 << 20);
    f.Int("--context", &context, "prompt tokens", 1, 1 << 20);
    f.Int("--heads", &heads, "query heads H", 1, 1024);
    f.Int("--kv-heads", &kv_heads, "KV heads Hkv", 1, 1024);
    f.Int("--head-dim", &head_dim, "head dim");
    f.Int("--block-size", &block_size, "KV block size");
    f.Int("--window-us", &window_us, "batching window");
    f.Int("--max-batch", &max_batch, "max batch size", 1, 1 << 16);
  }
};

struct CheckOptions {  // examples/check.cc
  std::string device = "auto", paths, json, kv_cache_type = "fp16";
  std::vector<int> head_dims = {64, 128, 256}, block_sizes = {8, 16, 32, 64}, groups = {1, 4, 8};
  int kv_heads = 2, sequences = 6, context = 200, steps = 3;
  double tolerance = 2e-3;
  std::uint64_t seed = 0;
  bool no_speed = false;
  int speed_batch = 32, speed_context = 4096;

  void Declare(CheckedFlags& f) {
    f.Choice("--device", &device, attnrt::tools::DeviceChoices(), "executor");
    f.String("--paths", &paths, "decode paths");
    f.Choice("--kv-cache-type", &kv_cache_type, {"fp16", "fp8_e4m3", "all"}, "KV cache type");
    f.List("--head-dims", &head_dims, "head dims");
    f.List("--block-sizes", &block_sizes, "block sizes");
    f.List("--groups", &groups, "group sizes");
    f.Int("--kv-heads", &kv_heads, "KV heads", 1, 64);
    f.Int("--sequences", &sequences, "sequences", 1, 1024);
    f.Int("--context", &context, "prompt tokens", 1, 1 << 16);
    f.Int("--steps", &steps, "decode steps", 1, 1024);
    f.Double("--tolerance", &tolerance, "max error", 0, 1);
    f.Int("--seed", &seed, "seed", 0, 1e18);
    f.String("--json", &json, "JSON file");
    f.Bool("--no-speed", &no_speed, "skip the speed table");
    f.Int("--speed-batch", &speed_batch, "speed batch", 1, 1024);
    f.Int("--speed-context", &speed_context, "speed context", 1, 1 << 20);
  }
};

// Every flag name of the five tools, and values worth trying, so that argv reaches them often.
const std::vector<std::string>& Names() {
  static const std::vector<std::string> names = {
      "--help", "-h", "--device", "--rates", "--windows-us", "--max-batches", "--duration",
      "--p99-slo-us", "--max-queue-size", "--heads", "--kv-heads", "--head-dim", "--block-size",
      "--context", "--sequences", "--json", "--criteria", "--criteria-window-us",
      "--criteria-saturation", "--producers",
      "--copy-path", "--buffers", "--no-sweep", "--inject-failures-every",
      "--inject-failure-kind", "--bind", "--port", "--allow-remote", "--threads", "--layers",
      "--max-context", "--window-us", "--max-batch", "--kv-cache-mb", "--max-seconds",
      "--max-connections", "--max-pending-mb", "--max-reply-backlog-kb", "--frame-timeout-ms",
      "--close-linger-ms", "--drain-timeout-s", "--host", "--rate", "--max-requests",
      "--priority", "--drain-timeout", "--first-sequence", "--seed", "--verify",
      "--check-malformed", "--shutdown-server", "--tolerate-server-stop", "--steps",
      "--repeats", "--csv", "--full-overload", "--metrics-port", "--paths", "--head-dims",
      "--block-sizes", "--groups", "--tolerance", "--kv-cache-type", "--no-speed",
      "--speed-batch", "--speed-context", "--log-level", "--version"};
  return names;
}
const std::vector<std::string>& Values() {
  static const std::vector<std::string> values = {
      "0", "1", "-1", "64", "65535", "65536", "1073741824", "1073741825", "2147483647",
      "2147483648", "4294967296", "1e15", "1e18", "1e19", "1e300", "-1e300", "1e-300", "0.5",
      "-0", "nan", "inf", "-inf", "0x10", "1,2,3", "1,,2", ",", "0,1e10", "1,-1", "", " ",
      "auto", "cuda", "cpu", "error", "output", "9007199254740993", "1.5", "1e", "--", "fp16",
      "fp8_e4m3", "all"};
  return values;
}

// Points stdout and stderr at memory streams while the parser runs (glibc: they are variables).
class Capture {
 public:
  Capture() {
    saved_out_ = stdout;
    saved_err_ = stderr;
    out_ = open_memstream(&out_buf_, &out_len_);
    err_ = open_memstream(&err_buf_, &err_len_);
    if (out_ == nullptr || err_ == nullptr) Fail("open_memstream failed");
    stdout = out_;
    stderr = err_;
  }
  ~Capture() {
    Restore();
    std::free(out_buf_);
    std::free(err_buf_);
  }
  void Restore() {
    if (out_ == nullptr) return;
    stdout = saved_out_;
    stderr = saved_err_;
    std::fclose(out_);
    std::fclose(err_);
    out_ = err_ = nullptr;
  }
  std::string out() const { return out_buf_ ? std::string(out_buf_, out_len_) : ""; }
  std::string err() const { return err_buf_ ? std::string(err_buf_, err_len_) : ""; }

 private:
  FILE *saved_out_, *saved_err_, *out_ = nullptr, *err_ = nullptr;
  char *out_buf_ = nullptr, *err_buf_ = nullptr;
  std::size_t out_len_ = 0, err_len_ = 0;
};

void Run(CheckedFlags& flags, const std::vector<std::string>& args) {
  std::vector<std::string> owned;  // as the kernel hands them over: each ends at its first NUL
  for (const std::string& a : args) owned.push_back(a.c_str());
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(owned.size());

  Capture capture;
  const int rc = flags.Parse(argc, argv.data());
  capture.Restore();
  const std::string err = capture.err();
  bool has_help = false, has_version = false;
  for (int i = 1; i < argc; ++i) {
    has_help |= owned[i] == "--help" || owned[i] == "-h";
    has_version |= owned[i] == "--version";
  }

  if (rc == FlagSet::kContinue) {
    if (!err.empty()) Fail("kContinue with an error printed: " + err);
    flags.CheckValues();
  } else if (rc == 0) {  // --help (the flag list) or --version (one line), whichever came first
    if (!has_help && !has_version) Fail("exit 0 without --help or --version");
    const std::string out = capture.out();
    const std::string version_line = flags.tool() + " (attnrt " + attnrt::Version() + ", ";
    const bool printed_help = out.find("--help") != std::string::npos;
    const bool printed_version = out.rfind(version_line, 0) == 0 && out.back() == '\n';
    if (!printed_help && !printed_version) {
      Fail("exit 0 printed neither the flag list nor the version line: '" + out + "'");
    }
    if (printed_help ? !has_help : !has_version) Fail("exit 0 printed what was not asked for");
  } else if (rc == 2) {
    if (err.rfind(flags.tool() + ": ", 0) != 0 || err.back() != '\n') {
      Fail("exit 2 without an error line naming the tool: '" + err + "'");
    }
  } else {
    Fail("Parse returned " + std::to_string(rc));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int tool = in.ConsumeIntegralInRange(0, 4);
  std::vector<std::string> args;
  static const char* kTools[] = {"tune_window", "serve_tcp", "loadgen_tcp", "demo",
                                 "attnrt-check"};
  args.push_back(kTools[tool]);
  while (in.remaining_bytes() > 0 && args.size() < 24) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    if (pick < 112) {
      args.push_back(Names()[pick % Names().size()]);
    } else if (pick < 176) {
      args.push_back(Values()[pick % Values().size()]);
    } else {
      args.push_back(in.ConsumeRandomLengthString(48));
    }
  }
  // Each run declares a fresh FlagSet over fresh options, as a tool's main does.
  CheckedFlags flags(kTools[tool], "fuzzed");
  TuneWindowOptions tw;
  ServeTcpOptions st;
  LoadgenTcpOptions lg;
  DemoOptions dm;
  CheckOptions ck;
  switch (tool) {
    case 0: tw.Declare(flags); break;
    case 1: st.Declare(flags); break;
    case 2: lg.Declare(flags); break;
    case 3: dm.Declare(flags); break;
    default: ck.Declare(flags); break;
  }
  Run(flags, args);
  return 0;
}
