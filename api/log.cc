// The library's logger (api/internal/log.h).
#include "api/internal/log.h"

#include <memory>

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

}  // namespace attnrt
