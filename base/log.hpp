#pragma once
// Minimal leveled logging to stderr, one line per call, prefixed with the actor name and pid so that the
// interleaved output of several processes stays readable. Level from ZMOE_LOG_LEVEL (debug|info|warn|error).

#include <sstream>
#include <string>

namespace zmoe {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

void log_set_name(const std::string& name);
bool log_enabled(log_level level);
void log_write(log_level level, const std::string& line);

}  // namespace zmoe

#define ZMOE_LOG(level, msg)                                                 \
    do {                                                                     \
        if (::zmoe::log_enabled(::zmoe::log_level::level)) {                 \
            std::ostringstream zmoe_log_os_;                                 \
            zmoe_log_os_ << msg;                                             \
            ::zmoe::log_write(::zmoe::log_level::level, zmoe_log_os_.str()); \
        }                                                                    \
    } while (0)
