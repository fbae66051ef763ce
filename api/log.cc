// The library's logger (api/internal/log.h) and its public level control (<attnrt/log.h>).
#include "api/internal/log.h"

#include <attnrt/log.h>

#include <array>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

namespace attnrt {

spdlog::logger& Logger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    if (std::shared_ptr<spdlog::logger> existing = spdlog::get("attnrt")) return existing;
    // The default logger's sinks: attnrt's lines go where the host's default logger writes.
    const std::shared_ptr<spdlog::logger> host = spdlog::default_logger();
    auto created = std::make_shared<spdlog::logger>("attnrt", host->sinks().begin(),
                                                    host->sinks().end());
    created->set_level(host->level());
    spdlog::register_logger(created);  // throws only on a name taken meanwhile
    spdlog::cfg::load_env_levels();   // SPDLOG_LEVEL applies to registered loggers
    return created;
  }();
  return *logger;
}

Status SetLogLevel(std::string_view level) {
  using Level = spdlog::level::level_enum;
  static constexpr std::array<std::pair<std::string_view, Level>, 8> kLevels = {{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  }};
  for (const auto& [name, value] : kLevels) {
    if (name == level) {
      Logger().set_level(value);
      return Status::Ok();
    }
  }
  return InvalidArgumentError("log level '" + std::string(level) + "' is not one of " +
                              std::string(kLogLevelNames));
}

}  // namespace attnrt
