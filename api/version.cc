#include <attnrt/version.h>

namespace attnrt {
const char* Version() { return "0.1.0"; }
}  // namespace attnrt
