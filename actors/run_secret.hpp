#pragma once
// The per-run secret that authenticates the actors of one run to each other (docs/reliability.md). `zmoe serve`
// makes a random one and hands it to its actors in ZMOE_RUN_SECRET; scripts/launch.sh takes it from the
// environment (the same value on every node) or makes one for a single node. Every hello carries it, and the CPU
// all-to-all stamps it on every frame; what comes without it is refused or dropped. Empty (unset): no checks, for
// actors started by hand on a trusted machine.

#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

namespace zmoe {

inline std::string run_secret() {
    const char* s = std::getenv("ZMOE_RUN_SECRET");
    return s ? std::string(s) : std::string();
}

/// Compares in time independent of where the strings differ (no early exit on the first mismatch).
inline bool secrets_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

}  // namespace zmoe
