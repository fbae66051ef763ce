// ATTNRT_TSAN_ACTIVE: defined when this translation unit is built with ThreadSanitizer (GCC or
// clang), for tests that shorten their runs under it. The suppression for moodycamel's queue
// internals (false positives: TSan does not model the queue's fences) lives with its reason in
// tests/sanitizers/tsan.supp, which every ctest run of a TSan build reads, tools included.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define ATTNRT_TSAN_ACTIVE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNRT_TSAN_ACTIVE 1
#endif
#endif
