/* ATTNRT_EXPORT marks the public API. The library is compiled with hidden symbol visibility, so
 * a shared libattnrt exports exactly what carries this mark. C and C++. */
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define ATTNRT_EXPORT __attribute__((visibility("default")))
#else
#define ATTNRT_EXPORT
#endif
