#pragma once
// Leveled logging to stderr, one line per call:
//   2026-11-22T19:37:20.123Z INFO  frontend[4242] message
// (UTC timestamp to the millisecond, level, the process's actor name and pid), so that the interleaved output of
// several processes stays readable. The level is set with `--log-level` on every zmoe command (docs/operations.md),
// which passes it on to the actor processes it starts.

#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace zmoe {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

void log_set_name(const std::string& name);
/// Lines below `level` are dropped (default: info). Thread-safe.
void log_set_level(log_level level);
log_level log_get_level();
bool log_enabled(log_level level);
void log_write(log_level level, const std::string& line);

/// "debug", "info", "warn" (or "warning"), "error" -> the level; nullopt for anything else.
std::optional<log_level> log_level_from_name(std::string_view name);
/// The inverse: "debug", "info", "warn", "error".
const char* log_level_name(log_level level);

}  // namespace zmoe

#define ZMOE_LOG(level, msg)                                                 \
    do {                                                                     \
        if (::zmoe::log_enabled(::zmoe::log_level::level)) {                 \
            std::ostringstream zmoe_log_os_;                                 \
            zmoe_log_os_ << msg;                                             \
            ::zmoe::log_write(::zmoe::log_level::level, zmoe_log_os_.str()); \
        }                                                                    \
    } while (0)
