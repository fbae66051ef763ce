// PendingQueue: strict priority with FIFO inside a level, per-(sequence, layer) exclusion in
// Select, deadlines with lazy deletion, and removal from the middle.
#include "scheduler/request_queue.h"

#include <gtest/gtest.h>

#include <deque>

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

}  // namespace
}  // namespace attnrt::scheduler::internal
