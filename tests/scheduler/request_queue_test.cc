// PendingQueue: strict priority with FIFO inside a level, per-(sequence, layer) exclusion in
// Select, deadlines with lazy deletion, and removal from the middle.
#include "scheduler/request_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

namespace attnrt::scheduler::internal {
namespace {

class PendingQueueTest : public ::testing::Test {
 protected:
  RequestRecord* Make(runtime::SequenceId seq, int layer, int priority, ClockNanos submit,
             ClockNanos deadline = kNever) {
    records_.emplace_back();
    RequestRecord* s = &records_.back();
    s->sequence_id = seq;
    s->layer = layer;
    s->priority = priority;
    s->submit_ns = submit;
    s->deadline_ns = deadline;
    return s;
  }
  std::vector<RequestRecord*> Select(PendingQueue& q, int max) {
    std::vector<RequestRecord*> out;
    q.Select(max, &out);
    return out;
  }
  std::deque<RequestRecord> records_;
};

TEST_F(PendingQueueTest, SelectTakesHigherPriorityFirstThenFifo) {
  PendingQueue q(3);
  RequestRecord* a = Make(1, 0, 2, 10);
  RequestRecord* b = Make(2, 0, 0, 20);
  RequestRecord* c = Make(3, 0, 1, 30);
  RequestRecord* d = Make(4, 0, 0, 40);
  for (RequestRecord* s : {a, b, c, d}) q.Push(s);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.OldestSubmitNs(), 10);
  EXPECT_EQ(Select(q, 10), (std::vector<RequestRecord*>{b, d, c, a}));
  EXPECT_EQ(Select(q, 3), (std::vector<RequestRecord*>{b, d, c}));
  EXPECT_EQ(q.size(), 4u);  // Select removes nothing
}

TEST_F(PendingQueueTest, SelectSkipsASecondRequestOfOneSequenceAndLayer) {
  PendingQueue q(1);
  RequestRecord* a1 = Make(7, 0, 0, 1);
  RequestRecord* a2 = Make(7, 0, 0, 2);  // same (sequence, layer): must wait for the next batch
  RequestRecord* b = Make(7, 1, 0, 3);   // other layer of the same sequence: fine
  RequestRecord* c = Make(8, 0, 0, 4);
  for (RequestRecord* s : {a1, a2, b, c}) q.Push(s);
  EXPECT_EQ(Select(q, 8), (std::vector<RequestRecord*>{a1, b, c}));
  q.Remove(a1);
  EXPECT_EQ(Select(q, 8), (std::vector<RequestRecord*>{a2, b, c}));
}

// A batch selected in parts: a continued Select skips the pairs the earlier parts took (which
// left the queue), a plain one starts afresh, Unselect gives a part's pairs back, and a
// continued selection past the set's room still remembers every earlier pair.
TEST_F(PendingQueueTest, ContinuedSelectionsSkipTheEarlierPartsPairs) {
  PendingQueue q(1);
  RequestRecord* a1 = Make(1, 0, 0, 1);
  RequestRecord* b = Make(2, 0, 0, 2);
  RequestRecord* a2 = Make(1, 0, 0, 3);  // (1, 0) again
  RequestRecord* c = Make(3, 0, 0, 4);
  for (RequestRecord* s : {a1, b, a2, c}) q.Push(s);
  std::vector<RequestRecord*> part;
  q.Select(2, &part, /*continue_batch=*/false, /*room=*/2);
  EXPECT_EQ(part, (std::vector<RequestRecord*>{a1, b}));
  q.Remove(a1);
  q.Remove(b);
  part.clear();
  q.Select(2, &part, /*continue_batch=*/true);
  EXPECT_EQ(part, (std::vector<RequestRecord*>{c}));  // a2's pair is in the batch already
  q.Unselect(part.size());                             // not handed over after all
  part.clear();
  q.Select(1, &part, /*continue_batch=*/true);  // past the room of 2: the set grows
  EXPECT_EQ(part, (std::vector<RequestRecord*>{c}));
  part.clear();
  q.Select(4, &part, /*continue_batch=*/true);
  EXPECT_TRUE(part.empty()) << "(1, 0) and (3, 0) are in the batch";
  part.clear();
  q.Select(4, &part);  // a new batch
  EXPECT_EQ(part, (std::vector<RequestRecord*>{a2, c}));
}

TEST_F(PendingQueueTest, RemoveFromMiddleKeepsOrderAndOldest) {
  PendingQueue q(1);
  RequestRecord* a = Make(1, 0, 0, 5);
  RequestRecord* b = Make(2, 0, 0, 6);
  RequestRecord* c = Make(3, 0, 0, 7);
  for (RequestRecord* s : {a, b, c}) q.Push(s);
  q.Remove(b);
  EXPECT_EQ(Select(q, 8), (std::vector<RequestRecord*>{a, c}));
  q.Remove(a);
  EXPECT_EQ(q.OldestSubmitNs(), 7);
  q.Remove(c);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.OldestSubmitNs(), kNever);
}

TEST_F(PendingQueueTest, ExpiredRequestsLeaveInDeadlineOrderAndStaleEntriesAreSkipped) {
  PendingQueue q(2);
  RequestRecord* a = Make(1, 0, 0, 0, 300);
  RequestRecord* b = Make(2, 0, 1, 0, 100);
  RequestRecord* c = Make(3, 0, 0, 0, 200);
  RequestRecord* d = Make(4, 0, 0, 0);  // no deadline
  for (RequestRecord* s : {a, b, c, d}) q.Push(s);
  EXPECT_EQ(q.NextDeadlineNs(), 100);
  q.Remove(b);  // dispatched: its heap entry is stale now
  EXPECT_EQ(q.NextDeadlineNs(), 200);
  std::vector<RequestRecord*> expired;
  q.TakeExpired(250, &expired);
  EXPECT_EQ(expired, (std::vector<RequestRecord*>{c}));
  EXPECT_EQ(q.size(), 2u);
  expired.clear();
  q.TakeExpired(1000, &expired);
  EXPECT_EQ(expired, (std::vector<RequestRecord*>{a}));
  EXPECT_EQ(q.NextDeadlineNs(), kNever);
  EXPECT_EQ(Select(q, 8), (std::vector<RequestRecord*>{d}));
}

TEST_F(PendingQueueTest, ReusedRecordIsNotExpiredByItsOldHeapEntry) {
  PendingQueue q(1);
  RequestRecord* a = Make(1, 0, 0, 0, 100);
  q.Push(a);
  q.Remove(a);
  a->deadline_ns = 500;  // the record comes back as a new request
  q.Push(a);
  std::vector<RequestRecord*> expired;
  q.TakeExpired(200, &expired);
  EXPECT_TRUE(expired.empty());
  q.TakeExpired(500, &expired);
  EXPECT_EQ(expired, (std::vector<RequestRecord*>{a}));
}

TEST_F(PendingQueueTest, TakeIfRemovesMatching) {
  PendingQueue q(2);
  RequestRecord* a = Make(1, 0, 0, 0);
  RequestRecord* b = Make(2, 0, 1, 0);
  RequestRecord* c = Make(3, 0, 1, 0);
  for (RequestRecord* s : {a, b, c}) q.Push(s);
  std::vector<RequestRecord*> out;
  q.TakeIf([&](RequestRecord* s) { return s != b; }, &out);
  EXPECT_EQ(out, (std::vector<RequestRecord*>{a, c}));
  EXPECT_EQ(Select(q, 8), (std::vector<RequestRecord*>{b}));
}

TEST_F(PendingQueueTest, ManyDispatchedRequestsDoNotGrowTheDeadlineHeapWithoutBound) {
  PendingQueue q(1);
  // 100k requests pass through with far deadlines; the heap is compacted as they leave.
  for (int i = 0; i < 100000; ++i) {
    RequestRecord* s = Make(i, 0, 0, i, 1'000'000'000 + i);
    q.Push(s);
    q.Remove(s);
  }
  RequestRecord* last = Make(1, 0, 0, 0, 5);
  q.Push(last);
  std::vector<RequestRecord*> expired;
  q.TakeExpired(10, &expired);
  EXPECT_EQ(expired, (std::vector<RequestRecord*>{last}));
  EXPECT_TRUE(q.empty());
}

// Against a brute-force model: requests mostly with deadlines in submission order (the FIFO
// path), some earlier (the heap path), some without; random removals (dispatch), record reuse,
// and TakeExpired / NextDeadlineNs as time moves on.
TEST_F(PendingQueueTest, DeadlinesMatchABruteForceModel) {
  std::mt19937_64 rng(17);
  PendingQueue q(2);
  std::vector<RequestRecord*> live;  // the model: what is pending
  std::vector<RequestRecord*> spare;  // records that left, reused as new requests
  ClockNanos now = 0;
  for (int step = 0; step < 20000; ++step) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5) {  // a new request
      RequestRecord* r;
      if (!spare.empty() && rng() % 2 == 0) {
        r = spare.back();
        spare.pop_back();
      } else {
        r = Make(step, 0, static_cast<int>(rng() % 2), now);
      }
      const int kind = static_cast<int>(rng() % 10);
      r->deadline_ns = kind == 0   ? kNever
                       : kind == 1 ? now + static_cast<ClockNanos>(rng() % 500)  // earlier
                                   : now + 1000;                              // in order
      q.Push(r);
      live.push_back(r);
    } else if (action < 7 && !live.empty()) {  // dispatched
      const std::size_t i = rng() % live.size();
      q.Remove(live[i]);
      spare.push_back(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {  // time passes
      now += static_cast<ClockNanos>(rng() % 200);
      std::vector<RequestRecord*> expired;
      q.TakeExpired(now, &expired);
      std::vector<RequestRecord*> want;
      for (RequestRecord* r : live) {
        if (r->deadline_ns <= now) want.push_back(r);
      }
      std::sort(want.begin(), want.end());
      std::vector<RequestRecord*> got = expired;
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, want) << "step " << step;
      for (std::size_t i = 1; i < expired.size(); ++i) {
        ASSERT_LE(expired[i - 1]->deadline_ns, expired[i]->deadline_ns) << "step " << step;
      }
      std::erase_if(live, [&](RequestRecord* r) { return r->deadline_ns <= now; });
      for (RequestRecord* r : expired) spare.push_back(r);
    }
    ClockNanos next = kNever;
    for (RequestRecord* r : live) next = std::min(next, r->deadline_ns);
    ASSERT_EQ(q.NextDeadlineNs(), next) << "step " << step;
    ASSERT_EQ(q.size(), live.size());
  }
}

}  // namespace
}  // namespace attnrt::scheduler::internal
