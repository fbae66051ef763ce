// PendingQueue: the batching thread's admitted-but-not-dispatched requests: one intrusive FIFO per
// priority level (strict priority, FIFO inside a level), a deadline min-heap with lazy deletion,
// and batch selection that never picks two requests of one (sequence, layer).
// Internal to scheduler/. Thread safety: none; only the batching thread touches it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "api/internal/sequence_layer_set.h"
#include "scheduler/clock.h"
#include "scheduler/request_record.h"

namespace attnrt::scheduler::internal {

class PendingQueue {
 public:
  explicit PendingQueue(int num_levels);

  // Appends to the FIFO of record->priority (which must be a valid level).
  void Push(RequestRecord* record);
  void Remove(RequestRecord* record);
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // Submit time of the oldest pending request; kNever when empty.
  ClockNanos OldestSubmitNs() const;
  // The earliest deadline among pending requests; kNever when none has one.
  ClockNanos NextDeadlineNs();
  // Removes every request whose deadline is <= now, appending it to *out.
  void TakeExpired(ClockNanos now, std::vector<RequestRecord*>* out);
  // Removes every request for which pred(record) holds, appending it to *out.
  template <class Pred>
  void TakeIf(Pred pred, std::vector<RequestRecord*>* out) {
    for (Level& level : levels_) {
      for (RequestRecord* s = level.head; s != nullptr;) {
        RequestRecord* next = s->next;
        if (pred(s)) {
          Remove(s);
          out->push_back(s);
        }
        s = next;
      }
    }
  }
  // Appends up to `max` requests to *out in priority, then FIFO, order, skipping any whose
  // (sequence, layer) is already among them (the later one waits for a later batch). Removes
  // nothing. `continue_batch`: the pairs of the Select calls since the last plain one count as
  // taken too (a batch selected in parts); `room`: the most pairs the batch will hold.
  void Select(int max, std::vector<RequestRecord*>* out, bool continue_batch = false,
              int room = 0);
  // Takes back the last `n` requests Select picked (a part not handed over after all), so that a
  // continued selection may pick their pairs again.
  void Unselect(std::size_t n);

 private:
  struct Level {
    RequestRecord* head = nullptr;
    RequestRecord* tail = nullptr;
  };
  struct DeadlineEntry {
    ClockNanos deadline;
    RequestRecord* record;
    std::uint64_t token;
  };
  bool Live(const DeadlineEntry& e) const {
    return e.record->in_pending && e.record->pending_token == e.token;
  }
  void PopDeadline();
  void CompactDeadlines();
  // The live entry with the earliest deadline, after dropping stale ones at both fronts; null
  // when none is left.
  const DeadlineEntry* EarliestDeadline();

  std::vector<Level> levels_;
  std::size_t size_ = 0;
  std::uint64_t next_token_ = 0;
  // Deadlines arrive in order when every request has the same timeout (the default): those not
  // earlier than the last one in `ordered_` go there (a FIFO: O(1) in and out), the others to
  // the heap `deadlines_`. Both drop entries lazily (a request that left by dispatch or cancel
  // stays until it reaches a front, or until stale entries outnumber live ones).
  std::deque<DeadlineEntry> ordered_;
  std::vector<DeadlineEntry> deadlines_;  // min-heap on deadline
  std::size_t live_deadlines_ = 0;
  attnrt::internal::SequenceLayerSet keys_;  // Select's pairs
  std::vector<std::pair<SequenceId, int>> kept_;  // ... in a list, for a set that must grow
  int keys_room_ = 0;                             // the pairs keys_ was sized for
};

}  // namespace attnrt::scheduler::internal
