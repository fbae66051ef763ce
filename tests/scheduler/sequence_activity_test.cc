// SequenceActivity: requests outstanding per sequence, the gate of the calls that change a
// sequence's cache (scheduler/sequence_activity.h), and its memory: zero entries are kept for
// reuse but do not accumulate.
#include "scheduler/sequence_activity.h"

#include <gtest/gtest.h>

#include <string>

namespace attnrt::scheduler::internal {
namespace {

Status Idle() { return Status::Ok(); }

TEST(SequenceActivityTest, RefusesWhileOutstandingAndRunsOnceIdle) {
  SequenceActivity a;
  a.Add(7);
  a.Add(7);
  int ran = 0;
  const Status busy = a.RunIfIdle(7, "FreeSequence", [&] { ++ran; return Idle(); });
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("FreeSequence: sequence_id 7 has 2 decode request(s)"),
            std::string::npos)
      << busy.ToString();
  EXPECT_EQ(ran, 0);
  a.Remove(7);
  EXPECT_FALSE(a.RunIfIdle(7, "FreeSequence", [&] { ++ran; return Idle(); }).ok());
  a.Remove(7);
  EXPECT_TRUE(a.RunIfIdle(7, "FreeSequence", [&] { ++ran; return Idle(); }).ok());
  EXPECT_EQ(ran, 1);
  // Another sequence was never gated by 7's requests.
  a.Add(7);
  EXPECT_TRUE(a.RunIfIdle(8, "ForkSequence", [&] { ++ran; return Idle(); }).ok());
  EXPECT_EQ(ran, 2);
}

TEST(SequenceActivityTest, AnExtraRemoveDoesNotGoNegative) {
  SequenceActivity a;
  a.Remove(3);  // nothing outstanding: ignored
  a.Add(3);
  a.Remove(3);
  a.Remove(3);
  a.Add(3);  // one outstanding again, not zero
  EXPECT_FALSE(a.RunIfIdle(3, "Prefill", Idle).ok());
}

TEST(SequenceActivityTest, ZeroEntriesDoNotAccumulate) {
  SequenceActivity a;
  // 100k sequences, each with one request that completes: the map keeps what was active lately,
  // not every id ever seen.
  for (SequenceId id = 0; id < 100000; ++id) {
    a.Add(id);
    a.Remove(id);
  }
  EXPECT_LT(a.EntriesForTesting(), 64u * 2 * 64);  // each shard below twice its sweep floor
  // RunIfIdle drops its sequence's zero entry.
  a.Add(SequenceId{1} << 40);
  a.Remove(SequenceId{1} << 40);
  const std::size_t before = a.EntriesForTesting();
  EXPECT_TRUE(a.RunIfIdle(SequenceId{1} << 40, "FreeSequence", Idle).ok());
  EXPECT_EQ(a.EntriesForTesting(), before - 1);
  // Outstanding entries are never swept.
  a.Add(5);
  for (SequenceId id = 1000000; id < 1100000; ++id) {
    a.Add(id);
    a.Remove(id);
  }
  EXPECT_FALSE(a.RunIfIdle(5, "FreeSequence", Idle).ok());
}

}  // namespace
}  // namespace attnrt::scheduler::internal
