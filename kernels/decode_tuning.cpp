#include "kernels/decode_tuning.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace zmoe::kernels {
namespace {

struct named_switch {
    const char* name;
    bool decode_tuning::*field;
};
constexpr named_switch kSwitches[] = {{"gemv_wave", &decode_tuning::gemv_wave},
                                      {"combine_early", &decode_tuning::combine_early},
                                      {"norm_early", &decode_tuning::norm_early}};

std::string known_names() {
    std::string names = "all, none";
    for (const named_switch& s : kSwitches) names += std::string(", ") + s.name;
    return names;
}

std::mutex g_mutex;
bool g_loaded = false;
decode_tuning g_tuning;

}  // namespace

bool parse_decode_tuning(std::string_view value, decode_tuning* out, std::string* error) {
    if (value.empty()) {  // as unset
        *out = kDefaultDecodeTuning;
        return true;
    }
    if (value == "none") {
        *out = decode_tuning{};
        return true;
    }
    decode_tuning t;
    // Every comma-separated entry, empty ones included (a stray comma is refused, not skipped).
    for (size_t start = 0;;) {
        const size_t comma = value.find(',', start);
        const std::string_view name =
            value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        const bool last = comma == std::string_view::npos;
        start = last ? value.size() : comma + 1;
        if (name == "all") {
            for (const named_switch& s : kSwitches) t.*s.field = true;
            if (last) break;
            continue;
        }
        if (name == "none") {
            *error = "ZMOE_DECODE_TUNING: 'none' stands alone, got '" + std::string(value) +
                     "' (known: " + known_names() + ")";
            return false;
        }
        bool known = false;
        for (const named_switch& s : kSwitches)
            if (name == s.name) t.*s.field = known = true;
        if (!known) {
            *error = "ZMOE_DECODE_TUNING: unknown variant '" + std::string(name) + "' (known: " + known_names() + ")";
            return false;
        }
        if (last) break;
    }
    *out = t;
    return true;
}

decode_tuning current_decode_tuning() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_loaded) {
        const char* env = std::getenv("ZMOE_DECODE_TUNING");
        std::string error;
        if (!parse_decode_tuning(env == nullptr ? "" : env, &g_tuning, &error)) {
            std::fprintf(stderr, "zmoe: %s\n", error.c_str());
            std::fflush(stderr);
            std::abort();
        }
        g_loaded = true;
    }
    return g_tuning;
}

void set_decode_tuning(const decode_tuning& t) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_tuning = t;
    g_loaded = true;
}

}  // namespace zmoe::kernels
