// HandleAccess: the scheduler's one way into the public handle types (RequestHandle,
// ResultFuture: attnrt/request.h), which befriend it. Internal to scheduler/ and its tests.
#pragma once

#include <cstdint>

#include <attnrt/request.h>

#include "scheduler/completion.h"
#include "scheduler/request_record.h"

namespace attnrt::scheduler::internal {

struct HandleAccess {
  static RequestHandle Make(RequestRecord* record, std::uint64_t generation) {
    return RequestHandle(record, generation);
  }
  static RequestRecord* RecordOf(const RequestHandle& h) {
    return static_cast<RequestRecord*>(h.record_);
  }
  static std::uint64_t GenerationOf(const RequestHandle& h) { return h.generation_; }
  static ResultFuture MakeFuture(Completion* c) { return ResultFuture(c); }
};

}  // namespace attnrt::scheduler::internal
