#include "base/log.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace zmoe {
namespace {

std::string& log_name() {
    static std::string name = "zmoe";
    return name;
}

log_level threshold() {
    static const log_level level = [] {
        const char* env = std::getenv("ZMOE_LOG_LEVEL");
        if (!env) return log_level::info;
        if (!std::strcmp(env, "debug")) return log_level::debug;
        if (!std::strcmp(env, "warn")) return log_level::warn;
        if (!std::strcmp(env, "error")) return log_level::error;
        return log_level::info;
    }();
    return level;
}

}  // namespace

void log_set_name(const std::string& name) { log_name() = name; }

bool log_enabled(log_level level) { return level >= threshold(); }

void log_write(log_level level, const std::string& line) {
    static std::mutex mu;
    static const char* names[] = {"D", "I", "W", "E"};
    const auto now =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    std::lock_guard<std::mutex> lock(mu);
    std::fprintf(stderr, "%s %lld.%03lld %s[%d] %s\n", names[static_cast<int>(level)],
                 static_cast<long long>(now / 1000), static_cast<long long>(now % 1000), log_name().c_str(),
                 static_cast<int>(getpid()), line.c_str());
}

}  // namespace zmoe
