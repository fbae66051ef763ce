// libFuzzer target for the C interface (attnrt/c_api.h) on a small CPU-executor runtime: each input
// is a sequence of calls (create, fork, free, prefill, sequence_length, blocking decode, async
// submit, drain, NULL-ish arguments, attnrt_create with fuzzed options) with fuzzed ids, layers,
// sizes and FP16 bits (NaN/Inf included), and caller error buffers of fuzzed length.
//
// The runtime is created once per process (creating one per input costs threads); between
// inputs the harness waits for every callback, frees every sequence it created and checks that
// the KV cache is whole again. The C API does not expose kv_cache_usage, so that is checked
// through the C API itself: the cache holds exactly two max_context sequences, so two fresh
// full-length prefills must succeed and one token more must be refused (ResourceExhausted).
// A drained runtime (drain is final) is replaced at the end of its input. A process starts at
// most kMaxRuntimesPerProcess runtimes (see there: LeakSanitizer and reused thread ids).
//
// Every return code is checked against a shadow model (live sequences, per-layer lengths,
// decodes in flight): exact where the outcome is determined, a small allowed set where it
// depends on timing (a call racing an in-flight decode of its sequence may answer
// FailedPrecondition) or on KV blocks (ResourceExhausted). Also checked: an error message is
// copied, NUL-terminated and cut to error_len - 1; an OK call leaves the buffer alone; each
// accepted submit's callback runs exactly once, a refused one's never; OK outputs are finite
// unless non-finite K/V went in through prefill; a decode on an empty (sequence, layer) returns
// its own V exactly (softmax over one token).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include <attnrt/c_api.h>
#include <attnrt/half.h>
#include "api/internal/fp8_e4m3.h"

namespace {

// The runtime under test: H = 4 query heads over Hkv = 2, D = 64, blocks of 8 tokens, 32 tokens
// per sequence (4 blocks), a cache of exactly 8 blocks.
constexpr int kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kBlockSize = 8;
constexpr int kMaxContext = 32;
constexpr int kGroup = kHeads / kKvHeads;
constexpr std::size_t kQElems = kHeads * kHeadDim, kKvElems = kKvHeads * kHeadDim;
constexpr std::size_t kBlockBytes = 2 * sizeof(std::uint16_t) * kLayers * kKvHeads * kBlockSize *
                                    kHeadDim;  // K + V, all layers
constexpr int kCacheBlocks = 2 * kMaxContext / kBlockSize;
constexpr int kPriorityLevels = 2;  // the runtime default
constexpr auto kCompletionDeadline = std::chrono::seconds(30);
constexpr int kMaxOps = 48;
// Runtimes a process may start (the harness's own, its replacements after a drain, and those of
// attnrt_create with fuzzed valid options; 4 threads each). Past it, drain and the creation of
// a valid runtime are skipped. Why: LeakSanitizer (clang 14) finds a thread by its OS id; once
// the kernel reuses the id of one of this process's dead threads (pid_max is 32768 here, and a
// long run starts tens of thousands of threads), a live thread goes unscanned and what only its
// stack holds is reported as leaked (seen: the batching thread's intake buffer and the
// completion pool's recycled handlers, "Thread N not found in registry").
constexpr int kMaxRuntimesPerProcess = 256;

// ATTNRT_FUZZ_TRACE=1 prints each call and its code (for reading a crash input).
const bool g_trace = std::getenv("ATTNRT_FUZZ_TRACE") != nullptr;
void Trace(const std::string& line) {
  if (g_trace) std::fprintf(stderr, "  %s\n", line.c_str());
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "c_api_fuzz: %s\n", what.c_str());
  std::abort();
}

const char* CodeName(attnrt_code c) {
  static const char* names[] = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS",
                                "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "UNAVAILABLE",
                                "DEADLINE_EXCEEDED", "CANCELLED", "INTERNAL", "UNIMPLEMENTED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i <= 10 ? names[i] : "(not a code)";
}

void Expect(attnrt_code got, std::initializer_list<attnrt_code> allowed, const std::string& call,
            const char* message = "") {
  Trace(call + " -> " + CodeName(got) + (got == ATTNRT_OK ? "" : std::string(" ") + message));
  for (attnrt_code a : allowed) {
    if (got == a) return;
  }
  std::string want;
  for (attnrt_code a : allowed) want += std::string(want.empty() ? "" : " or ") + CodeName(a);
  Fail(call + " returned " + CodeName(got) + " (" + message + "), expected " + want);
}

bool Finite(std::uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }
bool AllFinite(const std::vector<std::uint16_t>& v) {
  for (std::uint16_t h : v) {
    if (!Finite(h)) return false;
  }
  return true;
}

// The caller's error buffer: NULL or exactly error_len bytes (ASan sees any write past it),
// filled with a canary so that untouched bytes can be told from written ones.
class ErrorBuffer {
 public:
  explicit ErrorBuffer(FuzzedDataProvider& in) {
    const std::uint8_t mode = in.ConsumeIntegral<std::uint8_t>();
    if (mode < 8) {  // NULL, with some length
      len_ = mode;
      return;
    }
    static constexpr std::size_t kLens[] = {0, 1, 2, 5, 16, 64, 256};
    len_ = kLens[mode % 7];
    if (len_ == 0 && (mode & 8)) return;  // NULL with length 0
    buf_ = std::make_unique<char[]>(len_ == 0 ? 1 : len_);
    alloc_ = len_ == 0 ? 1 : len_;
    std::memset(buf_.get(), kCanary, alloc_);
  }
  char* data() { return buf_.get(); }
  std::size_t size() const { return len_; }
  const char* text() const { return buf_ && len_ > 0 && Terminated() ? buf_.get() : ""; }

  void Check(attnrt_code code, const std::string& call) const {
    if (buf_ == nullptr) return;
    if (code == ATTNRT_OK || len_ == 0) {
      for (std::size_t i = 0; i < alloc_; ++i) {
        if (buf_[i] != kCanary) Fail(call + " wrote the error buffer (OK or error_len 0)");
      }
      return;
    }
    if (!Terminated()) Fail(call + ": error message not NUL-terminated within error_len");
    const std::size_t n = std::strlen(buf_.get());
    if (len_ > 1 && n == 0) Fail(call + ": empty error message");
    for (std::size_t i = n + 1; i < len_; ++i) {
      if (buf_[i] != kCanary) Fail(call + ": wrote past the message's NUL");
    }
  }

 private:
  static constexpr char kCanary = 0x5a;
  bool Terminated() const { return std::memchr(buf_.get(), '\0', len_) != nullptr; }
  std::unique_ptr<char[]> buf_;
  std::size_t len_ = 0, alloc_ = 0;
};

// FP16 arrays from the input: pseudo-random finite values, raw input bits (NaN/Inf included),
// finite values with one special value planted, or one repeated value.
std::vector<std::uint16_t> Halves(FuzzedDataProvider& in, std::size_t n) {
  std::vector<std::uint16_t> out(n);
  const std::uint8_t mode = in.ConsumeIntegral<std::uint8_t>();
  std::uint32_t state = in.ConsumeIntegral<std::uint16_t>() * 2654435761u + 1;
  auto random_finite = [&] {
    for (auto& h : out) {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      h = attnrt::FloatToHalf(static_cast<float>(static_cast<std::int32_t>(state >> 8)) /
                              (1 << 22))
              .bits;  // in [-2, 2)
    }
  };
  switch (mode % 8) {
    case 0:
    case 1:
    case 2:
      random_finite();
      break;
    case 3: {  // raw bits
      const std::vector<std::uint8_t> raw = in.ConsumeBytes<std::uint8_t>(n * 2);
      if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
      break;
    }
    case 4: {  // one special value
      random_finite();
      static constexpr std::uint16_t kSpecial[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00,
                                                   0x7bff, 0xfbff, 0x0001, 0x8000, 0x0400};
      out[in.ConsumeIntegralInRange<std::size_t>(0, n - 1)] =
          kSpecial[in.ConsumeIntegralInRange(0, 9)];
      break;
    }
    case 5: {  // one value everywhere
      const std::uint16_t h = in.ConsumeIntegral<std::uint16_t>();
      for (auto& x : out) x = h;
      break;
    }
    default:  // large finite magnitudes
      for (auto& h : out) h = (in.ConsumeBool() ? 0xfbffu : 0x7bffu);
      break;
  }
  return out;
}

// One accepted async submit. `targets` are the (sequence, incarnation) whose length its token
// adds to: its own, plus children forked while it was in flight (a fork succeeds only once the
// decode completed, so the child inherits the token).
struct Pending {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> targets;
  int layer = 0;
  bool expect_finite = false;
  bool expect_v = false;  // the (sequence, layer) was empty: out must equal V
  std::vector<std::uint16_t> v;
  std::atomic<int> calls{0};
  std::atomic<bool> done{false};
  attnrt_code code = ATTNRT_OK;
  std::string message;
  bool got_out = false;
  std::vector<std::uint16_t> out;
};

// Callback of submits that were refused: must never run.
std::atomic<int> g_refused_calls{0};

extern "C" void OnDone(void* user, attnrt_code code, const char* message, const uint16_t* out) {
  auto* p = static_cast<Pending*>(user);
  if (p == nullptr) {
    g_refused_calls.fetch_add(1);
    return;
  }
  if (p->calls.fetch_add(1) != 0) Fail("a submit's callback ran twice");
  p->code = code;
  p->message = message != nullptr ? message : "(null message)";
  p->got_out = out != nullptr;
  if (out != nullptr) p->out.assign(out, out + kQElems);
  p->done.store(true, std::memory_order_release);
}

void CheckOutput(const std::vector<std::uint16_t>& out, bool expect_finite, bool expect_v,
                 const std::vector<std::uint16_t>& v, const std::string& call) {
  if (expect_finite && !AllFinite(out)) Fail(call + ": non-finite output from finite K/V");
  if (!expect_v) return;
  // One token: softmax weight 1, out[h] = v[h / G] exactly (as values: -0 and +0 are equal).
  for (int h = 0; h < kHeads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) {
      const float got = attnrt::HalfToFloat(attnrt::Half{out[h * kHeadDim + d]});
      const float want = attnrt::HalfToFloat(attnrt::Half{v[(h / kGroup) * kHeadDim + d]});
      if (!(got == want)) {
        Fail(call + ": decode of an empty sequence: out[" + std::to_string(h) + "][" +
             std::to_string(d) + "] = " + std::to_string(got) + ", expected v = " +
             std::to_string(want));
      }
    }
  }
}

struct Sequence {
  std::uint64_t incarnation = 0;
  int length[kLayers] = {};
  bool poisoned[kLayers] = {};  // non-finite K/V prefilled: outputs may be anything
  int pending = 0;              // in-flight submits whose token counts toward it
};

class Harness {
 public:
  Harness() { Open(); }

  void RunInput(FuzzedDataProvider& in) {
    for (int op = 0; op < kMaxOps && in.remaining_bytes() > 0; ++op) {
      switch (in.ConsumeIntegralInRange(0, 11)) {
        case 0: Create(in); break;
        case 1: Fork(in); break;
        case 2: Free(in); break;
        case 3: Prefill(in); break;
        case 4: Length(in); break;
        case 5: Decode(in); break;
        case 6: Submit(in); break;
        case 7: Reap(/*wait=*/true); break;
        case 8: NullCases(in); break;
        case 9: Drain(); break;
        case 10: CreateWithOptions(in); break;
        default: {  // a burst of submits, so that batches hold several requests
          const int n = in.ConsumeIntegralInRange(2, 8);
          for (int i = 0; i < n && in.remaining_bytes() > 0; ++i) Submit(in);
          break;
        }
      }
    }
    Reset();
  }

 private:
  void Open() {
    attnrt_options o;
    attnrt_options_init(&o);
    o.num_layers = kLayers;
    o.num_q_heads = kHeads;
    o.num_kv_heads = kKvHeads;
    o.head_dim = kHeadDim;
    o.block_size = kBlockSize;
    o.max_context = kMaxContext;
    o.device = ATTNRT_DEVICE_CPU;
    o.kv_cache_bytes = kCacheBlocks * kBlockBytes;
    o.max_batch_size = 8;
    o.max_queue_delay_us = 0;
    o.default_timeout_us = 0;  // no deadline: outcomes must not depend on the machine's speed
    char error[256] = "";
    ++runtimes_started_;
    if (attnrt_create(&o, &rt_, error, sizeof(error)) != ATTNRT_OK) {
      Fail(std::string("attnrt_create of the harness runtime: ") + error);
    }
    drained_ = false;
  }

  // Ids: mostly a few small ones (so that calls meet live sequences), sometimes any 64 bits.
  static std::uint64_t Id(FuzzedDataProvider& in) {
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (b < 0xf0) return b % 6;
    return in.ConsumeIntegral<std::uint64_t>();
  }
  static int Layer(FuzzedDataProvider& in) {
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (b < 0xf0) return b % kLayers;
    static constexpr int kBad[] = {-1, kLayers, kLayers + 1, std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max(), -2};
    return kBad[b % 6];
  }
  static bool LayerOk(int layer) { return layer >= 0 && layer < kLayers; }

  Sequence* Find(std::uint64_t id) {
    auto it = live_.find(id);
    return it == live_.end() ? nullptr : &it->second;
  }

  // --- calls ---------------------------------------------------------------------------------

  void Create(FuzzedDataProvider& in) {
    const std::uint64_t id = Id(in);
    ErrorBuffer e(in);
    const attnrt_code c = attnrt_create_sequence(rt_, id, e.data(), e.size());
    Trace("create_sequence(" + std::to_string(id) + ")");
    e.Check(c, "create_sequence");
    const bool exists = Find(id) != nullptr;
    Expect(c, {exists ? ATTNRT_ALREADY_EXISTS : ATTNRT_OK}, "create_sequence", e.text());
    if (c == ATTNRT_OK) live_[id] = Sequence{.incarnation = ++incarnations_};
  }

  void Fork(FuzzedDataProvider& in) {
    Reap(false);
    const std::uint64_t parent = Id(in), child = Id(in);
    ErrorBuffer e(in);
    const attnrt_code c = attnrt_fork_sequence(rt_, parent, child, e.data(), e.size());
    Trace("fork_sequence(" + std::to_string(parent) + ", " + std::to_string(child) + ")");
    e.Check(c, "fork_sequence");
    Sequence* p = Find(parent);
    if (p == nullptr) return Expect(c, {ATTNRT_NOT_FOUND}, "fork_sequence", e.text());
    const attnrt_code settled = Find(child) != nullptr ? ATTNRT_ALREADY_EXISTS : ATTNRT_OK;
    if (p->pending > 0) {
      Expect(c, {settled, ATTNRT_FAILED_PRECONDITION}, "fork_sequence (parent busy)", e.text());
    } else {
      Expect(c, {settled}, "fork_sequence", e.text());
    }
    if (c != ATTNRT_OK) return;
    Sequence s = *p;
    s.incarnation = ++incarnations_;
    s.pending = 0;
    for (auto& rec : pending_) {
      for (std::size_t i = 0, n = rec->targets.size(); i < n; ++i) {
        if (rec->targets[i] == std::pair{parent, p->incarnation}) {
          rec->targets.emplace_back(child, s.incarnation);
          ++s.pending;
        }
      }
    }
    live_[child] = s;
  }

  void Free(FuzzedDataProvider& in) {
    Reap(false);
    const std::uint64_t id = Id(in);
    ErrorBuffer e(in);
    const attnrt_code c = attnrt_free_sequence(rt_, id, e.data(), e.size());
    Trace("free_sequence(" + std::to_string(id) + ")");
    e.Check(c, "free_sequence");
    Sequence* s = Find(id);
    if (s == nullptr) return Expect(c, {ATTNRT_NOT_FOUND}, "free_sequence", e.text());
    if (s->pending > 0) {
      Expect(c, {ATTNRT_OK, ATTNRT_FAILED_PRECONDITION}, "free_sequence (busy)", e.text());
    } else {
      Expect(c, {ATTNRT_OK}, "free_sequence", e.text());
    }
    if (c == ATTNRT_OK) live_.erase(id);
  }

  void Prefill(FuzzedDataProvider& in) {
    Reap(false);
    const std::uint64_t id = Id(in);
    const int layer = Layer(in);
    int n;
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (b < 0xe0) {
      n = 1 + b % (kMaxContext + 1);
    } else {
      static constexpr int kOdd[] = {0, -1, std::numeric_limits<int>::min(),
                                     std::numeric_limits<int>::max(), kMaxContext + 1,
                                     kMaxContext, 1 << 24, -kMaxContext};
      n = kOdd[b % 8];
    }
    // The buffers hold min(n, max_context) tokens: a count past max_context is refused (the
    // length check) before any K/V is read, which this relies on.
    const std::size_t tokens = static_cast<std::size_t>(std::clamp(n, 0, kMaxContext));
    std::vector<std::uint16_t> k = Halves(in, std::max<std::size_t>(tokens, 1) * kKvElems);
    std::vector<std::uint16_t> v = Halves(in, std::max<std::size_t>(tokens, 1) * kKvElems);
    ErrorBuffer e(in);
    const attnrt_code c = attnrt_prefill(rt_, id, layer, n, k.data(), v.data(), e.data(), e.size());
    Trace("prefill(" + std::to_string(id) + ", layer " + std::to_string(layer) + ", n " +
          std::to_string(n) + ")");
    e.Check(c, "prefill");
    const std::string call = "prefill(n = " + std::to_string(n) + ", layer " +
                             std::to_string(layer) + ")";
    Sequence* s = Find(id);
    if (n < 1 || !LayerOk(layer)) return Expect(c, {ATTNRT_INVALID_ARGUMENT}, call, e.text());
    // check_finite (the default) refuses non-finite K/V before the sequence is looked up; a
    // count past max_context is left to the executor, unread.
    if (n <= kMaxContext && (!AllFinite(k) || !AllFinite(v))) {
      return Expect(c, {ATTNRT_INVALID_ARGUMENT}, call + " (non-finite K/V)", e.text());
    }
    if (s == nullptr) return Expect(c, {ATTNRT_NOT_FOUND}, call, e.text());
    if (s->pending > 0) {
      Expect(c,
             {ATTNRT_OK, ATTNRT_FAILED_PRECONDITION, ATTNRT_INVALID_ARGUMENT,
              ATTNRT_RESOURCE_EXHAUSTED},
             call + " (busy)", e.text());
    } else if (static_cast<std::int64_t>(s->length[layer]) + n > kMaxContext) {
      Expect(c, {ATTNRT_INVALID_ARGUMENT}, call + " past max_context", e.text());
    } else {
      Expect(c, {ATTNRT_OK, ATTNRT_RESOURCE_EXHAUSTED}, call, e.text());
    }
    if (c != ATTNRT_OK) return;
    s->length[layer] += n;
    if (!AllFinite(k) || !AllFinite(v)) s->poisoned[layer] = true;
  }

  void Length(FuzzedDataProvider& in) {
    Reap(false);
    const std::uint64_t id = Id(in);
    const int layer = Layer(in);
    const bool null_length = in.ConsumeIntegral<std::uint8_t>() < 8;
    ErrorBuffer e(in);
    int length = -12345;
    const attnrt_code c = attnrt_sequence_length(rt_, id, layer, null_length ? nullptr : &length,
                                                 e.data(), e.size());
    e.Check(c, "sequence_length");
    Sequence* s = Find(id);
    if (null_length || !LayerOk(layer)) {
      return Expect(c, {ATTNRT_INVALID_ARGUMENT}, "sequence_length", e.text());
    }
    if (s == nullptr) return Expect(c, {ATTNRT_NOT_FOUND}, "sequence_length", e.text());
    Expect(c, {ATTNRT_OK}, "sequence_length", e.text());
    const int lo = s->length[layer], hi = s->length[layer] + s->pending;
    if (length < lo || length > hi) {
      Fail("sequence_length = " + std::to_string(length) + ", expected in [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
  }

  // What a decode of (id, layer) must answer at Submit; OK means accepted.
  attnrt_code AdmissionCode(std::uint64_t id, int layer, int priority,
                            const std::vector<std::uint16_t>& q,
                            const std::vector<std::uint16_t>& k,
                            const std::vector<std::uint16_t>& v) {
    if (!LayerOk(layer)) return ATTNRT_INVALID_ARGUMENT;
    if (priority < 0 || priority >= kPriorityLevels) return ATTNRT_INVALID_ARGUMENT;
    if (!AllFinite(q) || !AllFinite(k) || !AllFinite(v)) return ATTNRT_INVALID_ARGUMENT;
    if (Find(id) == nullptr) return ATTNRT_NOT_FOUND;
    if (drained_) return ATTNRT_UNAVAILABLE;
    return ATTNRT_OK;
  }

  // A decode of (id, layer) submitted now may run before those in flight (another priority):
  // they can no longer count on finding the (sequence, layer) empty.
  void MayOvertake(std::uint64_t id, int layer) {
    Sequence* s = Find(id);
    if (s == nullptr) return;
    for (auto& rec : pending_) {
      if (rec->targets[0] == std::pair{id, s->incarnation} && rec->layer == layer) {
        rec->expect_v = false;
      }
    }
  }

  void Decode(FuzzedDataProvider& in) {
    Reap(false);
    const std::uint64_t id = Id(in);
    const int layer = Layer(in);
    const std::vector<std::uint16_t> q = Halves(in, kQElems), k = Halves(in, kKvElems),
                                     v = Halves(in, kKvElems);
    ErrorBuffer e(in);
    std::vector<std::uint16_t> out(kQElems, 0xffff);
    const attnrt_code c =
        attnrt_decode(rt_, id, layer, q.data(), k.data(), v.data(), out.data(), e.data(), e.size());
    Trace("decode(" + std::to_string(id) + ", layer " + std::to_string(layer) + ")");
    e.Check(c, "decode");
    const attnrt_code admission = AdmissionCode(id, layer, 0, q, k, v);
    if (admission != ATTNRT_OK) return Expect(c, {admission}, "decode", e.text());
    MayOvertake(id, layer);
    Sequence* s = Find(id);
    if (s->pending > 0) {
      Expect(c, {ATTNRT_OK, ATTNRT_INVALID_ARGUMENT, ATTNRT_RESOURCE_EXHAUSTED}, "decode (busy)",
             e.text());
    } else if (s->length[layer] >= kMaxContext) {
      Expect(c, {ATTNRT_INVALID_ARGUMENT}, "decode at max_context", e.text());
    } else {
      Expect(c, {ATTNRT_OK, ATTNRT_RESOURCE_EXHAUSTED}, "decode", e.text());
    }
    if (c != ATTNRT_OK) return;
    CheckOutput(out, !s->poisoned[layer], s->pending == 0 && s->length[layer] == 0, v, "decode");
    ++s->length[layer];
  }

  void Submit(FuzzedDataProvider& in) {
    const std::uint64_t id = Id(in);
    const int layer = Layer(in);
    const std::uint8_t pb = in.ConsumeIntegral<std::uint8_t>();
    const int priority = pb < 0xf0 ? pb % kPriorityLevels
                                   : (pb & 1 ? -1 : kPriorityLevels + (pb & 0x7));
    const std::vector<std::uint16_t> q = Halves(in, kQElems), k = Halves(in, kKvElems),
                                     v = Halves(in, kKvElems);
    ErrorBuffer e(in);
    auto rec = std::make_unique<Pending>();
    const attnrt_code admission = AdmissionCode(id, layer, priority, q, k, v);
    // A refused submit gets the callback that must never run.
    Pending* user = admission == ATTNRT_OK ? rec.get() : nullptr;
    const attnrt_code c = attnrt_submit(rt_, id, layer, priority, q.data(), k.data(), v.data(),
                                        OnDone, user, e.data(), e.size());
    Trace("submit(" + std::to_string(id) + ", layer " + std::to_string(layer) + ", priority " +
          std::to_string(priority) + ")");
    e.Check(c, "submit");
    Expect(c, {admission}, "submit", e.text());
    if (c != ATTNRT_OK) return;
    MayOvertake(id, layer);
    Sequence* s = Find(id);
    rec->targets.emplace_back(id, s->incarnation);
    rec->layer = layer;
    rec->expect_finite = !s->poisoned[layer];
    rec->expect_v = s->pending == 0 && s->length[layer] == 0;
    rec->v = v;
    ++s->pending;
    pending_.push_back(std::move(rec));
  }

  void NullCases(FuzzedDataProvider& in) {
    ErrorBuffer e(in);
    const std::uint64_t id = Id(in);
    const int layer = Layer(in);
    std::vector<std::uint16_t> buf(kQElems, 0);
    std::uint16_t* p = buf.data();
    int length = 0;
    attnrt_code c;
    const int which = in.ConsumeIntegralInRange(0, 17);
    switch (which) {
      case 0: c = attnrt_create_sequence(nullptr, id, e.data(), e.size()); break;
      case 1: c = attnrt_fork_sequence(nullptr, id, id + 1, e.data(), e.size()); break;
      case 2: c = attnrt_free_sequence(nullptr, id, e.data(), e.size()); break;
      case 3: c = attnrt_prefill(nullptr, id, layer, 1, p, p, e.data(), e.size()); break;
      case 4: c = attnrt_prefill(rt_, id, layer, 1, nullptr, p, e.data(), e.size()); break;
      case 5: c = attnrt_prefill(rt_, id, layer, 1, p, nullptr, e.data(), e.size()); break;
      case 6: c = attnrt_sequence_length(nullptr, id, layer, &length, e.data(), e.size()); break;
      case 7: c = attnrt_decode(nullptr, id, layer, p, p, p, p, e.data(), e.size()); break;
      case 8: c = attnrt_decode(rt_, id, layer, nullptr, p, p, p, e.data(), e.size()); break;
      case 9: c = attnrt_decode(rt_, id, layer, p, nullptr, p, p, e.data(), e.size()); break;
      case 10: c = attnrt_decode(rt_, id, layer, p, p, nullptr, p, e.data(), e.size()); break;
      case 11: c = attnrt_decode(rt_, id, layer, p, p, p, nullptr, e.data(), e.size()); break;
      case 12:
        c = attnrt_submit(nullptr, id, layer, 0, p, p, p, OnDone, nullptr, e.data(), e.size());
        break;
      case 13:
        c = attnrt_submit(rt_, id, layer, 0, nullptr, p, p, OnDone, nullptr, e.data(), e.size());
        break;
      case 14:
        c = attnrt_submit(rt_, id, layer, 0, p, p, nullptr, OnDone, nullptr, e.data(), e.size());
        break;
      case 15:
        c = attnrt_submit(rt_, id, layer, 0, p, p, p, nullptr, nullptr, e.data(), e.size());
        break;
      case 16: {
        attnrt_runtime* r = reinterpret_cast<attnrt_runtime*>(0x1);  // must be overwritten
        c = attnrt_create(nullptr, &r, e.data(), e.size());
        if (r != reinterpret_cast<attnrt_runtime*>(0x1)) Fail("create(NULL options) wrote *runtime");
        if (c == ATTNRT_INVALID_ARGUMENT) {
          attnrt_options o;
          attnrt_options_init(&o);
          c = attnrt_create(&o, nullptr, e.data(), e.size());
        }
        break;
      }
      default:
        attnrt_options_init(nullptr);
        attnrt_destroy(nullptr);
        attnrt_drain(nullptr);
        return;
    }
    e.Check(c, "NULL case " + std::to_string(which));
    Expect(c, {ATTNRT_INVALID_ARGUMENT}, "NULL case " + std::to_string(which), e.text());
  }

  void Drain() {
    if (runtimes_started_ >= kMaxRuntimesPerProcess) return Trace("drain skipped (runtime budget)");
    Trace("drain");
    attnrt_drain(rt_);
    drained_ = true;
  }

  // attnrt_create with fuzzed options (CPU, or an invalid device: never one that would pick a
  // GPU). Sizes stay small enough that a valid runtime allocates little; a valid one also runs
  // one decode, then is destroyed.
  void CreateWithOptions(FuzzedDataProvider& in) {
    attnrt_options o;
    attnrt_options_init(&o);
    auto small = [&](int lo, int hi) {
      const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
      if (b < 0xf0) return lo + b % (hi - lo + 1);
      static constexpr int kOdd[] = {0, -1, std::numeric_limits<int>::min(), 3, 5, 17};
      return kOdd[b % 6];
    };
    o.num_layers = small(1, 3);
    o.num_kv_heads = small(1, 2);
    o.num_q_heads = small(1, 4);
    static constexpr int kDims[] = {64, 128, 256, 32, 0, 65};
    o.head_dim = kDims[in.ConsumeIntegralInRange(0, 5)];
    static constexpr int kBlocks[] = {8, 16, 32, 64, 4, 12, 128};
    o.block_size = kBlocks[in.ConsumeIntegralInRange(0, 6)];
    o.max_context = small(1, 128);
    static constexpr float kScales[] = {0.0f, 0.125f, 1.0f, -1.0f, INFINITY, NAN, 1e30f};
    o.softmax_scale = kScales[in.ConsumeIntegralInRange(0, 6)];
    // Stored as a C caller would: any int (a C++ enum cast of one outside its range is UB).
    static constexpr int kDevices[] = {ATTNRT_DEVICE_CPU, 3, -1, 1000};
    const int device = kDevices[in.ConsumeIntegralInRange(0, 3)];
    static_assert(sizeof(device) == sizeof(o.device));
    std::memcpy(&o.device, &device, sizeof(device));
    const std::uint8_t kb = in.ConsumeIntegral<std::uint8_t>();
    o.kv_cache_bytes = kb == 0xff ? 0 /* the 256 MiB default */ : (std::size_t{kb} << 12) | (kb == 0);
    o.max_batch_size = small(1, 16);
    o.max_queue_delay_us = small(0, 200);
    // Not past 2^40 us: the scheduler turns the timeout into int64 nanoseconds and adds it to
    // the clock without a range check, which overflows (UB) from about 9.2e15 us on (a finding
    // of this target, reported; scheduler/scheduler.cc is not this harness's to change).
    static constexpr std::int64_t kTimeouts[] = {0, 1, 1000, -1, std::numeric_limits<int64_t>::min(),
                                                 std::int64_t{1} << 40, 10'000'000, -1000};
    o.default_timeout_us = kTimeouts[in.ConsumeIntegralInRange(0, 7)];
    // The KV cache type (any int, as device) and its optional scales: none, the right count or
    // one off, NULL with a count, a huge count (refused before any read); values good or not.
    static constexpr int kKvTypes[] = {ATTNRT_KV_CACHE_FP16, ATTNRT_KV_CACHE_FP8_E4M3, 2, -1};
    const int kv_type = kKvTypes[in.ConsumeIntegralInRange(0, 3)];
    static_assert(sizeof(kv_type) == sizeof(o.kv_cache_type));
    std::memcpy(&o.kv_cache_type, &kv_type, sizeof(kv_type));
    const std::size_t want_scales =
        o.num_layers > 0 && o.num_kv_heads > 0
            ? 2 * static_cast<std::size_t>(o.num_layers) * static_cast<std::size_t>(o.num_kv_heads)
            : 0;
    static constexpr float kKvScales[] = {1.0f, 0.5f, 3.0f, 1e-30f, 0.0f, -1.0f, NAN, INFINITY,
                                          1e38f};
    std::size_t count = 0;
    bool pass_null = false;
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: break;  // none: 1.0 everywhere
      case 1: count = want_scales; break;
      case 2: count = want_scales + 1; break;
      case 3: count = want_scales > 0 ? want_scales - 1 : 0; break;
      case 4: count = std::size_t{1} << 40; break;  // refused before any read
      default: count = want_scales; pass_null = true; break;
    }
    // The floats the count promises, where the runtime may read them (a count past the shape's
    // is refused unread); one of them fuzzed.
    std::vector<float> scales(count <= want_scales ? count : 0, 1.0f);
    bool scales_ok = true;
    if (!scales.empty()) {
      const std::size_t at = in.ConsumeIntegral<std::uint8_t>() % scales.size();
      scales[at] = kKvScales[in.ConsumeIntegralInRange(0, 8)];
      scales_ok = scales[at] > 0.0f && std::isfinite(scales[at]) &&
                  scales[at] <= std::numeric_limits<float>::max() / 448.0f;
    }
    static const float kUnread = 1.0f;
    o.kv_scales = pass_null ? nullptr : scales.empty() ? &kUnread : scales.data();
    o.num_kv_scales = count;
    if (count > 0) {
      scales_ok = scales_ok && !pass_null && count == want_scales &&
                  kv_type == ATTNRT_KV_CACHE_FP8_E4M3;
    }
    const bool fp8 = kv_type == ATTNRT_KV_CACHE_FP8_E4M3;
    ErrorBuffer e(in);
    const bool valid =
        o.num_layers >= 1 && o.num_q_heads >= 1 && o.num_kv_heads >= 1 &&
        o.num_q_heads % o.num_kv_heads == 0 &&
        (o.head_dim == 64 || o.head_dim == 128 || o.head_dim == 256) &&
        (o.block_size == 8 || o.block_size == 16 || o.block_size == 32 || o.block_size == 64) &&
        o.max_context >= 1 && std::isfinite(o.softmax_scale) && o.softmax_scale >= 0 &&
        device == ATTNRT_DEVICE_CPU && o.max_batch_size >= 1 && o.max_queue_delay_us >= 0 &&
        o.default_timeout_us >= 0 && (kv_type == ATTNRT_KV_CACHE_FP16 || fp8) && scales_ok &&
        (o.kv_cache_bytes == 0 ||
         o.kv_cache_bytes >= std::size_t{fp8 ? 2u : 4u} * o.num_layers * o.num_kv_heads *
                                 o.block_size * o.head_dim);  // at least one block
    if (valid && runtimes_started_ >= kMaxRuntimesPerProcess) {
      return Trace("create skipped (runtime budget)");
    }
    if (valid) ++runtimes_started_;
    attnrt_runtime* r = nullptr;
    const attnrt_code c = attnrt_create(&o, &r, e.data(), e.size());
    e.Check(c, "create");
    Expect(c, {valid ? ATTNRT_OK : ATTNRT_INVALID_ARGUMENT}, "create", e.text());
    if (c != ATTNRT_OK) {
      if (r != nullptr) Fail("create failed but set *runtime");
      return;
    }
    if (r == nullptr) Fail("create returned OK and no runtime");
    const std::size_t q_elems = static_cast<std::size_t>(o.num_q_heads) * o.head_dim;
    const std::size_t kv_elems = static_cast<std::size_t>(o.num_kv_heads) * o.head_dim;
    std::vector<std::uint16_t> q(q_elems, 0x3c00), kv(kv_elems, 0x3800), out(q_elems, 0);
    Expect(attnrt_create_sequence(r, 7, nullptr, 0), {ATTNRT_OK}, "create_sequence (new runtime)");
    // A 1 us default timeout may expire before the batch forms: DeadlineExceeded.
    const attnrt_code d =
        attnrt_decode(r, 7, 0, q.data(), kv.data(), kv.data(), out.data(), nullptr, 0);
    Expect(d, {ATTNRT_OK, ATTNRT_RESOURCE_EXHAUSTED, ATTNRT_DEADLINE_EXCEEDED},
           "decode (new runtime)");
    if (d == ATTNRT_OK) {
      // One token: out is its V as the cache holds it (0.5 exactly in FP16; in FP8 0.5 / scale
      // quantised, times the scale of the head's V).
      const int group = o.num_q_heads / o.num_kv_heads;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const int kv_head = static_cast<int>(i / o.head_dim) / group;
        std::uint16_t want = 0x3800;
        if (fp8) {
          // V's scale of (layer 0, kv_head): index (1 * num_layers + 0) * num_kv_heads + kv_head.
          const float s = scales.empty()
                              ? 1.0f
                              : scales[static_cast<std::size_t>(o.num_layers) * o.num_kv_heads +
                                       kv_head];
          want = attnrt::FloatToHalf(attnrt::DequantizeE4M3(attnrt::QuantizeE4M3(0.5f, s), s)).bits;
        }
        if (out[i] != want) Fail("decode (new runtime): out != v for one token");
      }
    }
    attnrt_destroy(r);
  }

  // --- between calls and inputs --------------------------------------------------------------

  // Applies the outcome of every completed submit; with `wait`, first waits for all of them.
  void Reap(bool wait) {
    if (wait) {
      const auto deadline = std::chrono::steady_clock::now() + kCompletionDeadline;
      for (const auto& rec : pending_) {
        while (!rec->done.load(std::memory_order_acquire)) {
          if (std::chrono::steady_clock::now() > deadline) {
            Fail("a submit's callback did not run within 30 s");
          }
          std::this_thread::yield();
        }
      }
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = *pending_[i];
      if (!p.done.load(std::memory_order_acquire)) {
        pending_[kept++] = std::move(pending_[i]);
        continue;
      }
      Trace("callback of submit(" + std::to_string(p.targets[0].first) + ", layer " +
            std::to_string(p.layer) + ")");
      Expect(p.code, {ATTNRT_OK, ATTNRT_INVALID_ARGUMENT, ATTNRT_RESOURCE_EXHAUSTED},
             "submit's callback", p.message.c_str());
      if (p.code == ATTNRT_OK) {
        if (!p.got_out) Fail("submit's callback: OK without an output");
        CheckOutput(p.out, p.expect_finite, p.expect_v, p.v, "submit's callback");
      } else if (p.got_out) {
        Fail("submit's callback: an output with an error");
      }
      for (const auto& [id, incarnation] : p.targets) {
        Sequence* s = Find(id);
        if (s == nullptr || s->incarnation != incarnation) continue;
        --s->pending;
        if (p.code == ATTNRT_OK) ++s->length[p.layer];
      }
    }
    pending_.resize(kept);
  }

  void Reset() {
    Reap(/*wait=*/true);
    for (const auto& [id, s] : live_) {
      if (s.pending != 0) Fail("pending count not back to 0 after every callback ran");
      for (int layer = 0; layer < kLayers; ++layer) {
        int length = -1;
        Expect(attnrt_sequence_length(rt_, id, layer, &length, nullptr, 0), {ATTNRT_OK},
               "sequence_length at reset");
        if (length != s.length[layer]) {
          Fail("sequence " + std::to_string(id) + " layer " + std::to_string(layer) +
               " has length " + std::to_string(length) + ", the calls made it " +
               std::to_string(s.length[layer]));
        }
      }
      char error[256] = "";
      Expect(attnrt_free_sequence(rt_, id, error, sizeof(error)), {ATTNRT_OK},
             "free_sequence at reset", error);
    }
    live_.clear();
    if (g_refused_calls.load() != 0) Fail("the callback of a refused submit ran");
    CheckCacheIsWhole();
    if (drained_) {
      attnrt_destroy(rt_);
      Open();
    }
  }

  // Every block is free again: two full-length sequences fit, one more token does not.
  void CheckCacheIsWhole() {
    static const std::vector<std::uint16_t> zeros(kMaxContext * kKvElems, 0);
    constexpr std::uint64_t kProbe = ~std::uint64_t{0} - 2;
    char error[256] = "";
    for (std::uint64_t id = kProbe; id != 0; ++id) {
      Expect(attnrt_create_sequence(rt_, id, error, sizeof(error)), {ATTNRT_OK},
             "probe create_sequence", error);
    }
    for (std::uint64_t id : {kProbe, kProbe + 1}) {
      Expect(attnrt_prefill(rt_, id, 0, kMaxContext, zeros.data(), zeros.data(), error,
                            sizeof(error)),
             {ATTNRT_OK}, "probe: full-length prefill into an empty cache (a block leaked?)",
             error);
    }
    Expect(attnrt_prefill(rt_, kProbe + 2, 1, 1, zeros.data(), zeros.data(), error,
                          sizeof(error)),
           {ATTNRT_RESOURCE_EXHAUSTED}, "probe: one token past the cache's capacity", error);
    for (std::uint64_t id = kProbe; id != 0; ++id) {
      Expect(attnrt_free_sequence(rt_, id, error, sizeof(error)), {ATTNRT_OK},
             "probe free_sequence", error);
    }
  }

  attnrt_runtime* rt_ = nullptr;
  bool drained_ = false;
  int runtimes_started_ = 0;
  std::unordered_map<std::uint64_t, Sequence> live_;
  std::uint64_t incarnations_ = 0;
  std::vector<std::unique_ptr<Pending>> pending_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Harness* harness = new Harness();  // once per process; never destroyed (threads)
  FuzzedDataProvider in(data, size);
  harness->RunInput(in);
  return 0;
}
