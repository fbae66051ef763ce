// The scoped FaultInjection new executors pick up (tests that go through the Runtime).
#include "runtime/fault_injection.h"

#include "api/check.h"

namespace attnrt::runtime {
namespace {

// Both constant-initialised (constinit): usable from any static initialiser.
constinit Mutex scoped_mu;
constinit std::shared_ptr<FaultInjection> scoped GUARDED_BY(scoped_mu);

}  // namespace

ScopedFaultInjectionForTesting::ScopedFaultInjectionForTesting()
    : faults_(std::make_shared<FaultInjection>()) {
  MutexLock lock(&scoped_mu);
  ATTNRT_DCHECK(scoped == nullptr);
  scoped = faults_;
}

ScopedFaultInjectionForTesting::~ScopedFaultInjectionForTesting() {
  MutexLock lock(&scoped_mu);
  if (scoped == faults_) scoped.reset();
}

std::shared_ptr<FaultInjection> FaultInjectionForNewExecutor() {
  MutexLock lock(&scoped_mu);
  return scoped != nullptr ? scoped : std::make_shared<FaultInjection>();
}

}  // namespace attnrt::runtime
