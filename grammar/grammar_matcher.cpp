#include "grammar/grammar_matcher.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"

namespace zmoe::grammar {

grammar_matcher::grammar_matcher(std::shared_ptr<const compiled_grammar> g) : g_(std::move(g)), stepper_(g_->rules()) {
    reset();
}

void grammar_matcher::reset() {
    pool_.clear();
    interned_.clear();
    history_.clear();
    const grammar& gr = g_->rules();
    pool_.push_back({gr.rule_start[static_cast<size_t>(gr.root_rule)], kStackBottom});
    step_flags f;
    std::vector<int32_t> out;
    stepper_.expand(pool_, 0, out, f);
    // Intern the initial stacks.
    std::vector<std::vector<int32_t>> chains;
    for (int32_t n : out) {
        std::vector<int32_t> states;
        for (int32_t x = n; x >= 0; x = pool_[static_cast<size_t>(x)].parent)
            states.push_back(pool_[static_cast<size_t>(x)].state);
        chains.push_back(std::move(states));
    }
    pool_.clear();
    persistent_ = 0;
    snapshot s;
    s.accepting = f.accepting;
    for (const auto& chain : chains) {
        int32_t p = kStackBottom;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) p = intern(*it, p);
        if (std::find(s.tops.begin(), s.tops.end(), p) == s.tops.end()) s.tops.push_back(p);
    }
    history_.push_back(std::move(s));
}

int32_t grammar_matcher::intern(int32_t state, int32_t parent) {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
    auto [it, inserted] = interned_.emplace(key, static_cast<int32_t>(pool_.size()));
    if (inserted) {
        pool_.push_back({state, parent});
        persistent_ = pool_.size();
    }
    return it->second;
}

bool grammar_matcher::advance(std::string_view bytes) {
    const snapshot& s = history_.back();
    if (s.terminated || bytes.empty()) return false;
    cur_ = s.tops;
    step_flags f;
    bool ok = true;
    for (size_t i = 0; i < bytes.size(); ++i) {
        f = {};
        next_.clear();
        stepper_.advance(pool_, cur_.data(), cur_.size(), static_cast<uint8_t>(bytes[i]), next_, f);
        cur_.swap(next_);
        if (cur_.empty()) {
            ok = i + 1 == bytes.size() && f.accepting;  // the grammar ended exactly at the last byte
            break;
        }
    }
    if (!ok) {
        pool_.resize(persistent_);
        return false;
    }
    // Move the surviving stacks out of the scratch area into interned nodes.
    std::vector<std::vector<int32_t>> chains;
    std::vector<int32_t> bases;
    for (int32_t n : cur_) {
        std::vector<int32_t> states;
        int32_t x = n;
        while (x >= 0 && static_cast<size_t>(x) >= persistent_) {
            states.push_back(pool_[static_cast<size_t>(x)].state);
            x = pool_[static_cast<size_t>(x)].parent;
        }
        chains.push_back(std::move(states));
        bases.push_back(x);
    }
    pool_.resize(persistent_);
    snapshot ns;
    ns.accepting = f.accepting;
    for (size_t i = 0; i < chains.size(); ++i) {
        int32_t p = bases[i];
        for (auto it = chains[i].rbegin(); it != chains[i].rend(); ++it) p = intern(*it, p);
        if (std::find(ns.tops.begin(), ns.tops.end(), p) == ns.tops.end()) ns.tops.push_back(p);
    }
    history_.push_back(std::move(ns));
    return true;
}

bool grammar_matcher::accept_token(int32_t id) {
    const tokenizer_info& tok = g_->tokenizer();
    if (id < 0 || id >= tok.vocab_size() || is_terminated()) return false;
    if (tok.is_stop(id)) {
        if (!can_terminate()) return false;
        snapshot s;
        s.terminated = true;
        history_.push_back(std::move(s));
        return true;
    }
    if (!tok.is_text(id)) return false;
    return advance(tok.token_bytes(id));
}

bool grammar_matcher::accept_bytes(std::string_view bytes) { return advance(bytes); }

std::vector<int32_t> grammar_matcher::top_states() const {
    std::vector<int32_t> out;
    for (int32_t t : history_.back().tops) out.push_back(pool_[static_cast<size_t>(t)].state);
    return out;
}

void grammar_matcher::rollback(int32_t n) {
    if (n < 0 || n > num_accepted())
        throw zmoe::error(errc::invalid_argument, "grammar_matcher: cannot roll back " + std::to_string(n) +
                                                      " tokens, " + std::to_string(num_accepted()) + " accepted");
    history_.resize(history_.size() - static_cast<size_t>(n));
}

void grammar_matcher::check_uncertain(int32_t top, const position_mask& pm, uint32_t* mask) {
    const tokenizer_info& tok = g_->tokenizer();
    const std::vector<int32_t>& sorted = tok.sorted_ids();
    const size_t base_mark = pool_.size();
    nodes_.assign(1, top);
    begin_.assign({0, 1});
    pool_mark_.assign(1, base_mark);
    acc_.assign(1, 0);
    size_t valid = 0;
    size_t dead_depth = SIZE_MAX;
    for (size_t u = 0; u < pm.uncertain.size(); ++u) {
        const int32_t id = sorted[static_cast<size_t>(pm.uncertain[u])];
        const size_t l = static_cast<size_t>(pm.uncertain_lcp[u]);
        if (dead_depth != SIZE_MAX) {
            if (l >= dead_depth) continue;
            dead_depth = SIZE_MAX;
        }
        if (mask[id / 32] >> (id % 32) & 1u) {
            valid = std::min(valid, l);  // skipped: its levels are not computed
            continue;
        }
        const std::string_view b = tok.sorted_token(pm.uncertain[u]);
        valid = std::min(valid, l);
        begin_.resize(valid + 2);
        nodes_.resize(begin_[valid + 1]);
        pool_.resize(pool_mark_[valid]);
        pool_mark_.resize(valid + 1);
        acc_.resize(valid + 1);
        bool dead = false;
        for (size_t d = valid; d < b.size(); ++d) {
            step_flags f;
            next_.clear();
            stepper_.advance(pool_, nodes_.data() + begin_[d], begin_[d + 1] - begin_[d], static_cast<uint8_t>(b[d]),
                             next_, f);
            nodes_.insert(nodes_.end(), next_.begin(), next_.end());
            begin_.push_back(nodes_.size());
            pool_mark_.push_back(pool_.size());
            acc_.push_back(f.accepting);
            valid = d + 1;
            if (next_.empty() && !(f.accepting && d + 1 == b.size())) {
                dead = true;
                dead_depth = d + 1;
                break;
            }
        }
        if (dead) continue;
        const size_t n = b.size();
        if (begin_[n + 1] > begin_[n] || acc_[n]) mask[id / 32] |= 1u << (id % 32);
    }
    pool_.resize(base_mark);
}

void grammar_matcher::fill_next_token_bitmask(uint32_t* mask) {
    const tokenizer_info& tok = g_->tokenizer();
    const size_t words = tok.bitmask_words();
    std::memset(mask, 0, words * sizeof(uint32_t));
    const snapshot& s = history_.back();
    if (!s.terminated) {
        bool empty = true;
        for (int32_t top : s.tops) {
            const position_mask& pm = g_->mask_at(pool_[static_cast<size_t>(top)].state);
            switch (pm.kind) {
                case position_mask::storage::accepted_list:
                    for (int32_t id : pm.ids) mask[id / 32] |= 1u << (id % 32);
                    break;
                case position_mask::storage::bitset:
                    for (size_t w = 0; w < words; ++w) mask[w] |= pm.bits[w];
                    break;
                case position_mask::storage::rejected_list: {
                    const std::vector<uint32_t>& text = tok.text_mask();
                    if (empty) {
                        std::memcpy(mask, text.data(), words * sizeof(uint32_t));
                        for (int32_t id : pm.ids) mask[id / 32] &= ~(1u << (id % 32));
                    } else {
                        tmp_mask_.assign(text.begin(), text.end());
                        for (int32_t id : pm.ids) tmp_mask_[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
                        for (size_t w = 0; w < words; ++w) mask[w] |= tmp_mask_[w];
                    }
                    break;
                }
            }
            empty = false;
        }
        for (int32_t top : s.tops) {
            const position_mask& pm = g_->mask_at(pool_[static_cast<size_t>(top)].state);
            if (!pm.uncertain.empty()) check_uncertain(top, pm, mask);
        }
    }
    if (s.accepting || s.terminated)
        for (int32_t id : tok.stop_ids()) mask[id / 32] |= 1u << (id % 32);
}

}  // namespace zmoe::grammar
