// ThreadSanitizer suppressions for moodycamel::ConcurrentQueue internals. TSan reports races
// inside the queue's implicit-producer block index and recycled blocks; upstream considers them
// benign (cameron314/concurrentqueue issues #196, #254: the index is written only by its producer
// and published by a release on the tail index, which TSan does not connect through the block
// recycling) and silences them itself only under clang (MOODYCAMEL_NO_TSAN). The suppression
// matches reports with a frame in concurrentqueue.h; the queue only copies Slot pointers, so a
// race on the scheduler's own data (always accessed outside the queue) is still reported.
// Include from exactly one translation unit of a test binary.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define ATTNRT_TSAN_ACTIVE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNRT_TSAN_ACTIVE 1
#endif
#endif

#if defined(ATTNRT_TSAN_ACTIVE)
extern "C" const char* __tsan_default_suppressions() {
  // Matched against every frame's file: inlined queue frames lose their qualified names.
  return "race:concurrentqueue.h\n";
}
#endif
