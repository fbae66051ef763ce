// The library's version: the one from project(VERSION), through the generated <attnrt/version.h>.
#include <attnrt/version.h>

namespace attnrt {
const char* Version() { return ATTNRT_VERSION_STRING; }
}  // namespace attnrt
