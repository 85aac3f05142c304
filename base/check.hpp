#pragma once
// Invariant checks. ZMOE_CHECK is for conditions that can only be false through a bug in zmoe itself:
// it reports file:line and aborts. Expected failures (bad input, bad checkpoint, dead peer) use
// zmoe::error (see error.hpp) and never abort.

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace zmoe::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
    std::fprintf(stderr, "zmoe: check failed at %s:%d: %s: %s\n", file, line, cond, msg.c_str());
    std::fflush(stderr);
    std::abort();
}
}  // namespace zmoe::detail

#define ZMOE_CHECK(cond, msg)                                                              \
    do {                                                                                   \
        if (!(cond)) [[unlikely]] {                                                        \
            std::ostringstream zmoe_check_os_;                                             \
            zmoe_check_os_ << msg;                                                         \
            ::zmoe::detail::check_failed(__FILE__, __LINE__, #cond, zmoe_check_os_.str()); \
        }                                                                                  \
    } while (0)
