#include "frontend/onig_regex.hpp"

#include <oniguruma.h>

#include <mutex>

#include "base/error.hpp"
#include "frontend/utf8.hpp"

namespace zmoe {
namespace {

void initialize_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
        onig_initialize(encodings, 1);
    });
}

// One match region per thread, reused across calls: onig_search only reads the compiled regex, so concurrent
// searches are safe as long as each thread has its own region.
struct thread_region {
    OnigRegion* region = onig_region_new();
    ~thread_region() { onig_region_free(region, 1); }
};

}  // namespace

onig_regex::onig_regex(std::string_view pattern) : pattern_(pattern) {
    initialize_once();
    regex_t* reg = nullptr;
    OnigErrorInfo einfo;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern_.data());
    const int rc =
        onig_new(&reg, p, p + pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    if (rc != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo);
        throw error(errc::invalid_checkpoint,
                    "tokenizer regex '" + pattern_ + "' does not compile: " + reinterpret_cast<const char*>(msg));
    }
    reg_ = reg;
}

onig_regex::~onig_regex() {
    if (reg_) onig_free(static_cast<regex_t*>(reg_));
}

onig_regex& onig_regex::operator=(onig_regex&& other) noexcept {
    if (this != &other) {
        if (reg_) onig_free(static_cast<regex_t*>(reg_));
        reg_ = std::exchange(other.reg_, nullptr);
        pattern_ = std::move(other.pattern_);
    }
    return *this;
}

void onig_regex::find_all(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& matches) const {
    thread_local thread_region tr;
    auto* reg = static_cast<regex_t*>(reg_);
    const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = begin + text.size();
    size_t pos = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (pos <= text.size()) {
        const int r = onig_search(reg, begin, end, begin + pos, end, tr.region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            // Only a backtracking limit can get here; HF would panic. Refuse the input rather than crash.
            OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
            onig_error_code_to_str(msg, r);
            throw error(errc::invalid_argument, "tokenizer regex '" + pattern_ + "' failed on the input at byte " +
                                                    std::to_string(pos) + ": " + reinterpret_cast<const char*>(msg));
        }
        const auto s = static_cast<size_t>(tr.region->beg[0]);
        const auto e = static_cast<size_t>(tr.region->end[0]);
        if (s == e && have_last && last_end == e) {
            // Step over one whole character so that the next search cannot return the same empty match.
            pos += pos < text.size() ? utf8::sequence_length(static_cast<uint8_t>(text[pos])) : 1;
            continue;
        }
        pos = e;
        have_last = true;
        last_end = e;
        matches.emplace_back(static_cast<uint32_t>(s), static_cast<uint32_t>(e));
    }
}

}  // namespace zmoe
