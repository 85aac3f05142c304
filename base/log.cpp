#include "base/log.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace zmoe {
namespace {

std::string& log_name() {
    static std::string name = "zmoe";
    return name;
}

std::atomic<int>& threshold() {
    static std::atomic<int> level{static_cast<int>(log_level::info)};
    return level;
}

}  // namespace

void log_set_name(const std::string& name) { log_name() = name; }

void log_set_level(log_level level) { threshold().store(static_cast<int>(level), std::memory_order_relaxed); }

log_level log_get_level() { return static_cast<log_level>(threshold().load(std::memory_order_relaxed)); }

bool log_enabled(log_level level) { return static_cast<int>(level) >= threshold().load(std::memory_order_relaxed); }

std::optional<log_level> log_level_from_name(std::string_view name) {
    if (name == "debug") return log_level::debug;
    if (name == "info") return log_level::info;
    if (name == "warn" || name == "warning") return log_level::warn;
    if (name == "error") return log_level::error;
    return std::nullopt;
}

const char* log_level_name(log_level level) {
    switch (level) {
        case log_level::debug:
            return "debug";
        case log_level::info:
            return "info";
        case log_level::warn:
            return "warn";
        case log_level::error:
            return "error";
    }
    return "info";
}

void log_write(log_level level, const std::string& line) {
    static std::mutex mu;
    static const char* names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    const auto now = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    std::tm utc{};
    gmtime_r(&secs, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
    std::lock_guard<std::mutex> lock(mu);
    std::fprintf(stderr, "%s.%03dZ %s %s[%d] %s\n", stamp, static_cast<int>(ms), names[static_cast<int>(level)],
                 log_name().c_str(), static_cast<int>(getpid()), line.c_str());
}

}  // namespace zmoe
