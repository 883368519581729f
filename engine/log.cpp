#include "engine/log.h"

#include <cstdlib>
#include <mutex>
#include <string>

namespace lt {
void log_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    spdlog::set_pattern("[lintrain] [%l] %v");
    if (const char* lvl = std::getenv("LINTRAIN_LOG_LEVEL")) { spdlog::set_level(spdlog::level::from_str(lvl)); }
  });
}
}  // namespace lt
