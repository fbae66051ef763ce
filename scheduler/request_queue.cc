// PendingQueue: O(1) push/remove on intrusive lists; deadlines kept in a heap whose stale entries
// (requests that left by dispatch or cancel) are dropped at the top or by compaction once they
// outnumber the live ones.
#include "scheduler/request_queue.h"

#include <algorithm>
#include <functional>

namespace attnrt::scheduler::internal {

namespace {
bool Later(const auto& a, const auto& b) { return a.deadline > b.deadline; }
}  // namespace

PendingQueue::PendingQueue(int num_levels) : levels_(num_levels) {}

void PendingQueue::Push(RequestRecord* record) {
  Level& level = levels_[record->priority];
  record->prev = level.tail;
  record->next = nullptr;
  if (level.tail != nullptr) {
    level.tail->next = record;
  } else {
    level.head = record;
  }
  level.tail = record;
  record->in_pending = true;
  record->pending_token = ++next_token_;
  ++size_;
  if (record->deadline_ns != kNever) {
    deadlines_.push_back({record->deadline_ns, record, record->pending_token});
    std::push_heap(deadlines_.begin(), deadlines_.end(), Later<DeadlineEntry, DeadlineEntry>);
    ++live_deadlines_;
    if (deadlines_.size() > 2 * live_deadlines_ + 1024) CompactDeadlines();
  }
}

void PendingQueue::Remove(RequestRecord* record) {
  Level& level = levels_[record->priority];
  if (record->prev != nullptr) {
    record->prev->next = record->next;
  } else {
    level.head = record->next;
  }
  if (record->next != nullptr) {
    record->next->prev = record->prev;
  } else {
    level.tail = record->prev;
  }
  record->prev = record->next = nullptr;
  record->in_pending = false;
  --size_;
  if (record->deadline_ns != kNever) --live_deadlines_;
}

ClockNanos PendingQueue::OldestSubmitNs() const {
  ClockNanos oldest = kNever;
  for (const Level& level : levels_) {
    if (level.head != nullptr) oldest = std::min(oldest, level.head->submit_ns);
  }
  return oldest;
}

void PendingQueue::PopDeadline() {
  std::pop_heap(deadlines_.begin(), deadlines_.end(), Later<DeadlineEntry, DeadlineEntry>);
  deadlines_.pop_back();
}

void PendingQueue::CompactDeadlines() {
  std::erase_if(deadlines_, [this](const DeadlineEntry& e) { return !Live(e); });
  std::make_heap(deadlines_.begin(), deadlines_.end(), Later<DeadlineEntry, DeadlineEntry>);
}

ClockNanos PendingQueue::NextDeadlineNs() {
  while (!deadlines_.empty() && !Live(deadlines_.front())) PopDeadline();
  return deadlines_.empty() ? kNever : deadlines_.front().deadline;
}

void PendingQueue::TakeExpired(ClockNanos now, std::vector<RequestRecord*>* out) {
  while (!deadlines_.empty() && deadlines_.front().deadline <= now) {
    const DeadlineEntry e = deadlines_.front();
    PopDeadline();
    if (!Live(e)) continue;
    Remove(e.record);
    out->push_back(e.record);
  }
}

void PendingQueue::Select(int max, std::vector<RequestRecord*>* out) {
  keys_.Reset(static_cast<std::size_t>(std::max(max, 0)));
  int taken = 0;
  for (const Level& level : levels_) {
    for (RequestRecord* s = level.head; s != nullptr && taken < max; s = s->next) {
      if (keys_.Insert(s->sequence_id, s->layer)) {
        out->push_back(s);
        ++taken;
      }
    }
    if (taken == max) break;
  }
}

}  // namespace attnrt::scheduler::internal
