// Names the calling thread (Linux: pthread_setname_np, at most 15 characters; elsewhere a no-op),
// so that top -H, /proc/<pid>/task/*/comm and debuggers tell the runtime's threads apart.
#pragma once

#if defined(__linux__)
#include <pthread.h>
#endif

namespace attnrt::internal {

inline void NameThisThread(const char* name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace attnrt::internal
