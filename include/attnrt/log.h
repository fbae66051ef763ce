// The library's log level. attnrt logs through one named spdlog logger, "attnrt", writing where
// spdlog's default logger writes; its level comes from SPDLOG_LEVEL (e.g.
// SPDLOG_LEVEL=attnrt=debug), else spdlog's default level, until SetLogLevel sets it.
#pragma once

#include <string_view>

#include <attnrt/export.h>
#include <attnrt/status.h>

namespace attnrt {

// The level names SetLogLevel takes, least to most severe, for tools' help texts.
inline constexpr std::string_view kLogLevelNames = "trace|debug|info|warn|error|critical|off";

// Sets the "attnrt" logger's level: one of kLogLevelNames ("warning" too); InvalidArgument naming
// the level otherwise. Thread-safe.
ATTNRT_EXPORT Status SetLogLevel(std::string_view level);

}  // namespace attnrt
