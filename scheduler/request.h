// The scheduler's request and result types: the public ones of attnrt/request.h.
#pragma once

#include <attnrt/request.h>
#include "runtime/executor.h"  // runtime::SequenceId, used across scheduler/

namespace attnrt::scheduler {

using ::attnrt::DecodeRequest;
using ::attnrt::DecodeResult;
using ::attnrt::DoneCallback;
using ::attnrt::RequestHandle;
using ::attnrt::Submission;

}  // namespace attnrt::scheduler
