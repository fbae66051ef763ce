// PendingQueue: O(1) push/remove on intrusive lists; deadlines kept in a FIFO while they arrive
// in order (one timeout for every request) and in a heap otherwise, whose stale entries
// (requests that left by dispatch or cancel) are dropped at the fronts or by compaction once
// they outnumber the live ones. The heap alone cost the batching thread a push and a pop of
// O(log n) per request (scheduler_intake_bench: ~11% of the process's samples).
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
    const DeadlineEntry e{record->deadline_ns, record, record->pending_token};
    if (ordered_.empty() || e.deadline >= ordered_.back().deadline) {
      ordered_.push_back(e);
    } else {
      deadlines_.push_back(e);
      std::push_heap(deadlines_.begin(), deadlines_.end(), Later<DeadlineEntry, DeadlineEntry>);
    }
    ++live_deadlines_;
    if (ordered_.size() + deadlines_.size() > 2 * live_deadlines_ + 1024) CompactDeadlines();
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
  const auto stale = [this](const DeadlineEntry& e) { return !Live(e); };
  std::erase_if(ordered_, stale);  // keeps the order
  std::erase_if(deadlines_, stale);
  std::make_heap(deadlines_.begin(), deadlines_.end(), Later<DeadlineEntry, DeadlineEntry>);
}

const PendingQueue::DeadlineEntry* PendingQueue::EarliestDeadline() {
  while (!ordered_.empty() && !Live(ordered_.front())) ordered_.pop_front();
  while (!deadlines_.empty() && !Live(deadlines_.front())) PopDeadline();
  if (ordered_.empty()) return deadlines_.empty() ? nullptr : &deadlines_.front();
  if (deadlines_.empty() || ordered_.front().deadline <= deadlines_.front().deadline) {
    return &ordered_.front();
  }
  return &deadlines_.front();
}

ClockNanos PendingQueue::NextDeadlineNs() {
  const DeadlineEntry* e = EarliestDeadline();
  return e == nullptr ? kNever : e->deadline;
}

void PendingQueue::TakeExpired(ClockNanos now, std::vector<RequestRecord*>* out) {
  for (const DeadlineEntry* e; (e = EarliestDeadline()) != nullptr && e->deadline <= now;) {
    RequestRecord* record = e->record;
    Remove(record);  // the entry is stale now: the next EarliestDeadline drops it
    out->push_back(record);
  }
}

void PendingQueue::Select(int max, std::vector<RequestRecord*>* out, bool continue_batch,
                          int room) {
  max = std::max(max, 0);
  if (!continue_batch) {
    kept_.clear();
    keys_room_ = std::max({max, room, 1});
    keys_.Reset(static_cast<std::size_t>(keys_room_));
  } else if (kept_.size() + static_cast<std::size_t>(max) > static_cast<std::size_t>(keys_room_)) {
    // The batch outgrows the set: a larger one, refilled with the batch's pairs so far.
    keys_room_ = static_cast<int>(kept_.size()) + max;
    keys_.Reset(static_cast<std::size_t>(keys_room_));
    for (const auto& [sequence, layer] : kept_) keys_.Insert(sequence, layer);
  }
  int taken = 0;
  for (const Level& level : levels_) {
    for (RequestRecord* s = level.head; s != nullptr && taken < max; s = s->next) {
      if (keys_.Insert(s->sequence_id, s->layer)) {
        out->push_back(s);
        kept_.emplace_back(s->sequence_id, s->layer);
        ++taken;
      }
    }
    if (taken == max) break;
  }
}

void PendingQueue::Unselect(std::size_t n) {
  kept_.resize(kept_.size() - std::min(n, kept_.size()));
  keys_.Reset(static_cast<std::size_t>(keys_room_));
  for (const auto& [sequence, layer] : kept_) keys_.Insert(sequence, layer);
}

}  // namespace attnrt::scheduler::internal
