// The load harness of tune_window and api_host_path_bench (tools/open_loop.h) over the fake
// executor: requests in device-visible memory, the rate the producers submitted at, and the
// capacity's closed loop with requests staged in the executor's staging memory.
#include "tools/open_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/support/fake_executor.h"

namespace attnrt::tools {
namespace {

using testing::FakeExecutor;
using testing::FakeExecutorOptions;

FakeExecutorOptions Staging(bool offer) {
  FakeExecutorOptions o;
  o.offer_staging_memory = offer;
  o.accept_device_memory = offer;
  o.max_sequences = 256;
  return o;
}

OpenLoopConfig SmallLoad() {
  OpenLoopConfig c;
  c.rate_per_s = 20'000;
  c.duration_s = 0.05;
  c.max_batch = 8;
  c.num_sequences = 64;
  c.producers = 2;
  c.check_outputs = true;  // the fake writes out = q: values in [-1, 1]
  return c;
}

TEST(OpenLoopTest, DeviceMemoryRequestsNeedStagingMemory) {
  FakeExecutor executor(Staging(false));
  OpenLoopConfig c = SmallLoad();
  c.device_memory_requests = true;
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("device_memory_requests"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(executor.submitted_batches(), 0);
}

// Every request reaches the executor as kDevice with q/k/v/out in its staging memory, completes
// once with a plausible output, and the producers report the rate they submitted at.
TEST(OpenLoopTest, DeviceMemoryRequestsRunInPlace) {
  FakeExecutor executor(Staging(true));
  OpenLoopConfig c = SmallLoad();
  c.device_memory_requests = true;
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  EXPECT_GT(r->completed, 0);
  EXPECT_EQ(r->completed + r->rejected, r->offered);
  EXPECT_GT(r->submitted_per_s, 0.0);
  EXPECT_LT(r->submitted_per_s, 2 * c.rate_per_s) << "arrivals are paced by the schedule";
  std::int64_t requests = 0;
  for (const testing::RecordedBatch& b : executor.batches()) {
    for (const testing::RecordedRequest& q : b.requests) {
      ++requests;
      EXPECT_EQ(q.memory, runtime::MemoryKind::kDevice);
      EXPECT_TRUE(q.in_staging);
    }
  }
  EXPECT_EQ(requests, r->completed);
}

// The warm-up's arrivals complete like the others but stay out of the percentiles; the whole
// run's p99 is reported beside them, and the late clusters cover every request.
TEST(OpenLoopTest, WarmupArrivalsAreCountedApart) {
  FakeExecutor executor(Staging(false));
  OpenLoopConfig c = SmallLoad();
  c.warmup = std::chrono::milliseconds(10);  // ~200 of the ~1000 arrivals at 20 k/s
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  EXPECT_EQ(r->completed + r->rejected, r->offered);
  EXPECT_GT(r->warmup_requests, 100);
  EXPECT_LT(r->warmup_requests, 300);
  EXPECT_GT(r->p99_us, 0.0);
  EXPECT_GT(r->p99_with_warmup_us, 0.0);
  EXPECT_GT(r->warmup_max_us, 0.0);
  EXPECT_LE(r->late.late, r->offered / 100 + 1) << "late: over the whole run's p99";
  EXPECT_TRUE(r->latencies_ns.empty()) << "kept only with keep_latencies";
  c.keep_latencies = true;
  const StatusOr<OpenLoopResult> kept = RunOpenLoop(c, &executor);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(static_cast<std::int64_t>(kept->latencies_with_warmup_ns.size()), kept->completed);
  EXPECT_EQ(static_cast<std::int64_t>(kept->latencies_ns.size()),
            kept->completed - kept->warmup_requests);
  EXPECT_TRUE(std::is_sorted(kept->latencies_ns.begin(), kept->latencies_ns.end()));
}

// With pass_trace the result describes the batching thread at the largest late cluster.
TEST(OpenLoopTest, PassTraceDescribesTheBatchingThread) {
  FakeExecutor executor(Staging(false));
  OpenLoopConfig c = SmallLoad();
  c.pass_trace = 1 << 16;  // every pass of the run
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  ASSERT_GT(r->late.late, 0);  // over the run's own p99: some request always is
  EXPECT_NE(r->passes.find("passes from 1 ms before the largest cluster"), std::string::npos)
      << r->passes;
  c.pass_trace = 0;
  const StatusOr<OpenLoopResult> off = RunOpenLoop(c, &executor);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->passes.empty());
}

// With host_canary_period a canary thread runs beside the load and the result reports it; the
// run's duration bounds its wake-ups (one a period at most, from kStartLead before the start).
TEST(OpenLoopTest, HostCanaryReportsItsWakeUps) {
  FakeExecutor executor(Staging(false));
  OpenLoopConfig c = SmallLoad();
  c.host_canary_period = std::chrono::microseconds(500);
  c.host_canary_threshold = std::chrono::microseconds(200);
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  EXPECT_GE(r->canary_stalls, 0);
  EXPECT_NE(r->canary.find("wake-ups late by over 200 us"), std::string::npos) << r->canary;
  EXPECT_GE(r->canary_in_largest_cluster_us, 0.0);
  EXPECT_LE(r->canary_in_largest_cluster_us, r->canary_late_ms * 1e3);
  c.host_canary_period = std::chrono::microseconds(0);
  const StatusOr<OpenLoopResult> off = RunOpenLoop(c, &executor);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->canary_stalls, -1);
  EXPECT_TRUE(off->canary.empty());
}

// A run is the host's when its canary was late a millisecond in all, or the hypervisor stole a
// tenth of its duration of CPU time; a run without a canary or a steal counter is judged on what
// it has.
TEST(OpenLoopTest, HostDisturbedByTheCanaryOrTheSteal) {
  EXPECT_FALSE(HostDisturbed(0.0, 0.0, 0.5));
  EXPECT_FALSE(HostDisturbed(0.99, 49.0, 0.5));
  EXPECT_TRUE(HostDisturbed(1.0, 0.0, 0.5));
  EXPECT_TRUE(HostDisturbed(0.0, 50.0, 0.5));
  EXPECT_TRUE(HostDisturbed(0.0, 120.0, 0.5));
  EXPECT_FALSE(HostDisturbed(0.0, 120.0, 2.0));  // a tenth of 2 s is 200 ms
  EXPECT_FALSE(HostDisturbed(0.0, -1.0, 0.5));   // steal unknown
}

// Each run reports its threads' waits for a CPU (where the kernel keeps them): the scheduler's
// batching thread among them, ran for some time, the longest wait first.
TEST(OpenLoopTest, ReportsTheThreadsWaitsForACpu) {
  if (SampleThreads().empty()) GTEST_SKIP() << "this kernel keeps no per-thread schedstat";
  FakeExecutor executor(Staging(false));
  const StatusOr<OpenLoopResult> r = RunOpenLoop(SmallLoad(), &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->thread_waits.empty());
  EXPECT_DOUBLE_EQ(r->longest_thread_wait_ms, r->thread_waits.front().waited_ns * 1e-6);
  for (std::size_t i = 1; i < r->thread_waits.size(); ++i) {
    EXPECT_GE(r->thread_waits[i - 1].waited_ns, r->thread_waits[i].waited_ns);
  }
  bool batcher_ran = false;
  for (const ThreadSample& t : r->thread_waits) {
    batcher_ran |= t.name.rfind("attnrt-batch", 0) == 0 && t.ran_ns > 0;
  }
  EXPECT_TRUE(batcher_ran) << r->thread_waits_text;
  EXPECT_NE(r->thread_waits_text.find("page faults in all"), std::string::npos) << r->thread_waits_text;
  EXPECT_NE(r->vm_counters_text.find("pgfault +"), std::string::npos) << r->vm_counters_text;
  EXPECT_EQ(r->host_disturbed,
            HostDisturbed(r->canary_late_ms, r->stolen_cpu_ms, SmallLoad().duration_s));
}

// Request i (round r = i / parents) decodes a fork of parent j = i % parents, generation
// (r + j % G) / G: the parents start generations in turn. G = 0: the parent itself.
TEST(SequenceGenerationsTest, MapsRequestsToGenerationsOfForks) {
  FakeExecutorOptions o = Staging(false);
  o.max_sequences = 64;
  FakeExecutor executor(o);
  ASSERT_TRUE(EnsureSequences(&executor, 4).ok());
  ASSERT_TRUE(executor.Prefill(2, 0, 5, nullptr, nullptr).ok());
  SequenceGenerations g(&executor, 4, 2);
  EXPECT_EQ(g.IdFor(0), 4u);
  EXPECT_EQ(g.IdFor(3), 7u);
  EXPECT_EQ(g.IdFor(4), 4u);    // round 1: parent 0 still in generation 0 ...
  EXPECT_EQ(g.IdFor(5), 9u);    // ... parent 1 in generation 1
  EXPECT_EQ(g.IdFor(7), 11u);
  EXPECT_EQ(g.IdFor(8), 8u);    // round 2: parent 0 in generation 1
  EXPECT_EQ(g.IdFor(18), 14u);  // round 4, parent 2: generation 2
  ASSERT_TRUE(g.ForkThrough(8).ok());
  EXPECT_EQ(g.generations(), 2);
  EXPECT_EQ(*executor.SequenceLength(6, 0), 5);  // generation 0's fork of parent 2
  EXPECT_EQ(*executor.SequenceLength(10, 0), 5);
  EXPECT_FALSE(executor.HasSequence(12));
  ASSERT_TRUE(g.ForkThrough(3).ok());  // forked already: nothing more
  EXPECT_EQ(g.generations(), 2);
  ASSERT_TRUE(g.FreeForks().ok());
  for (runtime::SequenceId id = 4; id < 12; ++id) EXPECT_FALSE(executor.HasSequence(id)) << id;
  EXPECT_EQ(*executor.SequenceLength(2, 0), 5);  // the parents stay

  SequenceGenerations same(&executor, 4, 0);
  EXPECT_EQ(same.IdFor(9), 1u);
  ASSERT_TRUE(same.ForkThrough(1000).ok());
  EXPECT_EQ(same.generations(), 0);
}

// With tokens_per_sequence the parents keep their lengths through a run and the forks are gone
// after it; without, the parents take the tokens.
TEST(OpenLoopTest, TokensPerSequenceKeepsTheParentsLengths) {
  FakeExecutorOptions o = Staging(false);
  // Room for the forks of the capacity run below, which runs as many batches as the fake
  // executor takes in its 50 ms (a fast host ran past 4,096 ids in 10 ms, 2026-11-29).
  o.max_sequences = 1 << 20;
  FakeExecutor executor(o);
  OpenLoopConfig c = SmallLoad();
  c.tokens_per_sequence = 4;
  const StatusOr<OpenLoopResult> r = RunOpenLoop(c, &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  ASSERT_GT(r->completed, c.num_sequences * c.tokens_per_sequence);  // past generation 0
  for (int j = 0; j < c.num_sequences; ++j) EXPECT_EQ(*executor.SequenceLength(j, 0), 0) << j;
  EXPECT_FALSE(executor.HasSequence(c.num_sequences));
  runtime::SequenceId highest = 0;
  for (const testing::RecordedBatch& b : executor.batches()) {
    for (const testing::RecordedRequest& q : b.requests) {
      EXPECT_GE(q.sequence_id, static_cast<runtime::SequenceId>(c.num_sequences));
      highest = std::max(highest, q.sequence_id);
    }
  }
  EXPECT_GE(highest, static_cast<runtime::SequenceId>(2 * c.num_sequences));

  // 50 ms: under ASan on the loaded 2-core CI machine 10 ms ran only a few batches past the
  // forked generation, none of them forking (2026-11-29).
  const StatusOr<CapacityResult> cap = MeasureExecutorCapacity(
      &executor, 8, c.num_sequences, 0.05, /*staged=*/false, /*tokens_per_sequence=*/4,
      /*prefork_requests=*/64 * 4);
  ASSERT_TRUE(cap.ok()) << cap.status().ToString();
  EXPECT_GT(cap->batches * 8, 64 * 4);  // it ran past the forked generation ...
  EXPECT_GT(cap->timed_forks, 0);       // ... and forked more inside the loop
  for (int j = 0; j < c.num_sequences; ++j) EXPECT_EQ(*executor.SequenceLength(j, 0), 0) << j;
  EXPECT_FALSE(executor.HasSequence(c.num_sequences));

  c.tokens_per_sequence = 0;
  const StatusOr<OpenLoopResult> grown = RunOpenLoop(c, &executor);
  ASSERT_TRUE(grown.ok());
  int total = 0;
  for (int j = 0; j < c.num_sequences; ++j) total += *executor.SequenceLength(j, 0);
  EXPECT_EQ(total, grown->completed);
}

TEST(OpenLoopTest, HostRequestsAreStagedByTheScheduler) {
  FakeExecutor executor(Staging(false));
  const StatusOr<OpenLoopResult> r = RunOpenLoop(SmallLoad(), &executor);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failures(), 0) << r->first_error;
  for (const testing::RecordedBatch& b : executor.batches()) {
    for (const testing::RecordedRequest& q : b.requests) {
      EXPECT_EQ(q.memory, runtime::MemoryKind::kHost);
    }
  }
}

// The staged capacity run submits full batches whose requests lie in the staging memory; without
// staging memory it is refused and runs nothing.
TEST(OpenLoopTest, StagedCapacityRunsInPlace) {
  FakeExecutor executor(Staging(true));
  const StatusOr<CapacityResult> staged =
      MeasureExecutorCapacity(&executor, 8, 64, 0.02, /*staged=*/true);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_GT(staged->batches, 0);
  EXPECT_GT(staged->throughput_per_s, 0.0);
  ASSERT_FALSE(executor.batches().empty());
  for (const testing::RecordedBatch& b : executor.batches()) {
    EXPECT_EQ(b.requests.size(), 8u);
    for (const testing::RecordedRequest& q : b.requests) {
      EXPECT_EQ(q.memory, runtime::MemoryKind::kDevice);
      EXPECT_TRUE(q.in_staging);
    }
  }

  FakeExecutor plain(Staging(false));
  const StatusOr<CapacityResult> refused =
      MeasureExecutorCapacity(&plain, 8, 64, 0.02, /*staged=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(plain.submitted_batches(), 0);
}

}  // namespace
}  // namespace attnrt::tools
