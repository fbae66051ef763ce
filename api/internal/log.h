// The library's one named spdlog logger, "attnrt": every component logs through it, so a serving
// binary can route, silence or raise attnrt's messages on their own (spdlog::get("attnrt")). It
// writes to the sinks of spdlog's default logger as they are at its creation.
// Its level comes from SPDLOG_LEVEL (e.g. SPDLOG_LEVEL=attnrt=debug), else spdlog's default
// level. Internal: not a public header.
#pragma once

#include <spdlog/logger.h>

namespace attnrt {

// Created on first use (thread-safe); an "attnrt" logger the host registered first is used as is.
spdlog::logger& Logger();

}  // namespace attnrt
