#include "frontend/grammar_check.hpp"

#include "base/error.hpp"
#include "grammar/structured_kind.hpp"

namespace zmoe {

void grammar_check::check(const structured_output& s) {
    if (!s.active()) return;
    const std::string what = "structured output (" + std::string(structured_kind_name(s.kind)) + "): ";
    std::string key;
    try {
        const grammar::grammar_kind kind = grammar::grammar_kind_of(s.kind);
        key = grammar::grammar_compiler::cache_key(kind, s.text);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (auto it = known_.find(key); it != known_.end()) {
                lru_.splice(lru_.begin(), lru_, it->second);
                return;
            }
        }
        (void)grammar::compile_grammar(kind, s.text);
    } catch (const error& e) {
        throw error(errc::invalid_argument, what + e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (known_.contains(key)) return;
    lru_.push_front(key);
    known_.emplace(std::move(key), lru_.begin());
    if (known_.size() > max_) {
        known_.erase(lru_.back());
        lru_.pop_back();
    }
}

size_t grammar_check::num_remembered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return known_.size();
}

}  // namespace zmoe
