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
constexpr named_switch kSwitches[] = {
    {"gemv_wave", &decode_tuning::gemv_wave},         {"skinny_smem", &decode_tuning::skinny_smem},
    {"combine_early", &decode_tuning::combine_early}, {"moe_down_stage", &decode_tuning::moe_down_stage},
    {"norm_early", &decode_tuning::norm_early},       {"qkv_skinny", &decode_tuning::qkv_skinny}};

std::mutex g_mutex;
bool g_loaded = false;
decode_tuning g_tuning;

}  // namespace

bool parse_decode_tuning(std::string_view value, decode_tuning* out, std::string* error) {
    decode_tuning t;
    // Every comma-separated entry, empty ones included (a stray comma is refused, not skipped); "" alone is none.
    for (size_t start = 0; !value.empty();) {
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
        bool known = false;
        for (const named_switch& s : kSwitches)
            if (name == s.name) t.*s.field = known = true;
        if (!known) {
            std::string names = "all";
            for (const named_switch& s : kSwitches) names += std::string(", ") + s.name;
            *error = "ZMOE_DECODE_TUNING: unknown variant '" + std::string(name) + "' (known: " + names + ")";
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
        if (env != nullptr && !parse_decode_tuning(env, &g_tuning, &error)) {
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
