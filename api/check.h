// Host invariant checks. ATTNRT_DCHECK is on where CMake's ATTNRT_DCHECKS is (default: Debug
// builds; scripts/test.sh and the sanitizer, fuzz and GPU-check builds turn it on), which defines
// ATTNRT_ENABLE_DCHECK; it aborts with file:line, and compiles to nothing otherwise. Only for
// internal invariants: nothing a caller passes may reach one (callers get a Status).
#pragma once

#include <cstdio>
#include <cstdlib>

#if defined(ATTNRT_ENABLE_DCHECK) && ATTNRT_ENABLE_DCHECK
#define ATTNRT_DCHECK(cond)                                                      \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: DCHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
#else
#define ATTNRT_DCHECK(cond) \
  do {                      \
  } while (0)
#endif
