// Library version, for logs and bench records.
#pragma once

namespace attnrt {
const char* Version();
}  // namespace attnrt
