// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html): under
// clang they expand to the analysis attributes that -Wthread-safety checks (scripts/thread-safety.sh
// builds the host libraries that way in CI); under any other compiler, to nothing. Use them with
// attnrt::Mutex (api/internal/mutex.h): std::mutex carries no capability in libstdc++.
// Internal: not a public header.
#pragma once

#if defined(__clang__)
#define ATTNRT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ATTNRT_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (a capability named `x`, e.g. "mutex").
#define CAPABILITY(x) ATTNRT_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a capability for its lifetime.
#define SCOPED_CAPABILITY ATTNRT_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only while the named capability is held.
#define GUARDED_BY(x) ATTNRT_THREAD_ANNOTATION(guarded_by(x))
// A pointer member whose pointee is read or written only while the capability is held.
#define PT_GUARDED_BY(x) ATTNRT_THREAD_ANNOTATION(pt_guarded_by(x))
// A function the caller must call holding (REQUIRES) or not holding (EXCLUDES) the capabilities.
#define REQUIRES(...) ATTNRT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) ATTNRT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that takes (ACQUIRE) or gives back (RELEASE) the capabilities; with no argument,
// the object's own (a mutex's Lock, a scoped lock's constructor).
#define ACQUIRE(...) ATTNRT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) ATTNRT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) ATTNRT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// A function that returns only when the capability is held (the analysis assumes it from then).
#define ASSERT_CAPABILITY(x) ATTNRT_THREAD_ANNOTATION(assert_capability(x))
// A function that returns a reference to the capability.
#define RETURN_CAPABILITY(x) ATTNRT_THREAD_ANNOTATION(lock_returned(x))
// Opts one function out of the analysis; say why beside each use.
#define NO_THREAD_SAFETY_ANALYSIS ATTNRT_THREAD_ANNOTATION(no_thread_safety_analysis)
