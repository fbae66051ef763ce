// The scoped FaultInjection new executors pick up (tests that go through the Runtime).
#include "runtime/fault_injection.h"

#include "api/check.h"

namespace attnrt::runtime {
namespace {

std::mutex& ScopedMutex() {
  static std::mutex mu;
  return mu;
}

std::shared_ptr<FaultInjection>& Scoped() {  // GUARDED_BY(ScopedMutex())
  static std::shared_ptr<FaultInjection> scoped;
  return scoped;
}

}  // namespace

ScopedFaultInjectionForTesting::ScopedFaultInjectionForTesting()
    : faults_(std::make_shared<FaultInjection>()) {
  std::lock_guard<std::mutex> lock(ScopedMutex());
  ATTNRT_DCHECK(Scoped() == nullptr);
  Scoped() = faults_;
}

ScopedFaultInjectionForTesting::~ScopedFaultInjectionForTesting() {
  std::lock_guard<std::mutex> lock(ScopedMutex());
  if (Scoped() == faults_) Scoped().reset();
}

std::shared_ptr<FaultInjection> FaultInjectionForNewExecutor() {
  std::lock_guard<std::mutex> lock(ScopedMutex());
  return Scoped() != nullptr ? Scoped() : std::make_shared<FaultInjection>();
}

}  // namespace attnrt::runtime
