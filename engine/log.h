// Logging: spdlog's default logger, one line per event, "[lintrain] [level] message".
// LINTRAIN_LOG_LEVEL=trace|debug|info|warn|error|off overrides the level (default info).
#pragma once
#include <spdlog/spdlog.h>

namespace lt {
void log_init();  // idempotent; call at program start
}
