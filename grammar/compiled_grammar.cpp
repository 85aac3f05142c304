#include "grammar/compiled_grammar.hpp"

#include "grammar/stack_step.hpp"

namespace zmoe::grammar {

compiled_grammar::compiled_grammar(grammar g, std::shared_ptr<const tokenizer_info> tok)
    : g_(std::move(g)), tok_(std::move(tok)) {
    once_ = std::make_unique<std::once_flag[]>(static_cast<size_t>(g_.num_states()));
    masks_.resize(static_cast<size_t>(g_.num_states()));
}

const position_mask& compiled_grammar::mask_at(int32_t state) const {
    std::call_once(once_[static_cast<size_t>(state)],
                   [&] { masks_[static_cast<size_t>(state)] = std::make_unique<position_mask>(compute(state)); });
    return *masks_[static_cast<size_t>(state)];
}

void compiled_grammar::precompute_all() const {
    for (int32_t s = 0; s < g_.num_states(); ++s)
        if (g_.has_bytes[static_cast<size_t>(s)]) mask_at(s);
}

int32_t compiled_grammar::num_scan_positions() const {
    int32_t n = 0;
    for (uint8_t h : g_.has_bytes) n += h;
    return n;
}

position_mask compiled_grammar::compute(int32_t state) const {
    const std::vector<int32_t>& sorted = tok_->sorted_ids();
    const std::vector<int32_t>& lcp = tok_->sorted_lcp();
    const std::bitset<256>& follow = g_.follow[static_cast<size_t>(g_.state_rule[static_cast<size_t>(state)])];
    stack_stepper stepper(g_);
    std::vector<stack_node> pool{{state, kContextBoundary}};
    // Level d: the stacks after the first d bytes of the current token, flat in `nodes`.
    std::vector<int32_t> nodes{0};
    std::vector<size_t> begin{0, 1};  // level d is nodes[begin[d], begin[d+1])
    std::vector<size_t> pool_mark{1};
    std::vector<uint8_t> bnd{0}, unc{0};
    std::vector<uint8_t> verdict(sorted.size(), 0);  // 0 rejected, 1 accepted, 2 uncertain
    size_t valid = 0;                                // levels 0..valid are those of the previous token's prefix
    size_t dead_depth = SIZE_MAX;  // tokens sharing this many bytes with the previous one are rejected
    std::vector<int32_t> out;
    for (size_t i = 0; i < sorted.size(); ++i) {
        const std::string& b = tok_->token_bytes(sorted[i]);
        const size_t l = static_cast<size_t>(lcp[i]);
        if (dead_depth != SIZE_MAX) {
            if (l >= dead_depth) continue;
            dead_depth = SIZE_MAX;
        }
        valid = std::min(valid, l);
        // Drop the levels past `valid`.
        begin.resize(valid + 2);
        nodes.resize(begin[valid + 1]);
        pool.resize(pool_mark[valid]);
        pool_mark.resize(valid + 1);
        bnd.resize(valid + 1);
        unc.resize(valid + 1);
        bool dead = false;
        for (size_t d = valid; d < b.size(); ++d) {
            const auto byte = static_cast<uint8_t>(b[d]);
            step_flags f;
            out.clear();
            stepper.advance(pool, nodes.data() + begin[d], begin[d + 1] - begin[d], byte, out, f);
            nodes.insert(nodes.end(), out.begin(), out.end());
            begin.push_back(nodes.size());
            pool_mark.push_back(pool.size());
            bnd.push_back(f.boundary);
            unc.push_back(unc[d] || (bnd[d] && follow.test(byte)));
            valid = d + 1;
            if (out.empty() && !f.boundary && !unc[d + 1]) {
                dead = true;
                dead_depth = d + 1;
                break;
            }
        }
        if (dead) continue;
        const size_t n = b.size();
        if (begin[n + 1] > begin[n] || bnd[n])
            verdict[i] = 1;
        else if (unc[n])
            verdict[i] = 2;
    }
    position_mask m;
    size_t num_rejected = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
        if (verdict[i] == 1)
            ++m.num_accepted;
        else if (verdict[i] == 0)
            ++num_rejected;
        else {
            size_t prev_l = m.uncertain.empty() ? 0 : SIZE_MAX;
            if (!m.uncertain.empty()) {
                // Common prefix with the previous uncertain token: the minimum lcp over the tokens between.
                for (size_t j = static_cast<size_t>(m.uncertain.back()) + 1; j <= i; ++j)
                    prev_l = std::min(prev_l, static_cast<size_t>(lcp[j]));
            }
            m.uncertain.push_back(static_cast<int32_t>(i));
            m.uncertain_lcp.push_back(static_cast<int32_t>(prev_l));
        }
    }
    const size_t words = tok_->bitmask_words();
    if (static_cast<size_t>(m.num_accepted) <= words || static_cast<size_t>(m.num_accepted) <= num_rejected) {
        if (static_cast<size_t>(m.num_accepted) <= words) {
            m.kind = position_mask::storage::accepted_list;
            for (size_t i = 0; i < sorted.size(); ++i)
                if (verdict[i] == 1) m.ids.push_back(sorted[i]);
            return m;
        }
    }
    if (num_rejected <= words) {
        m.kind = position_mask::storage::rejected_list;
        for (size_t i = 0; i < sorted.size(); ++i)
            if (verdict[i] != 1) m.ids.push_back(sorted[i]);
        return m;
    }
    m.kind = position_mask::storage::bitset;
    m.bits.assign(words, 0);
    for (size_t i = 0; i < sorted.size(); ++i)
        if (verdict[i] == 1) m.bits[static_cast<size_t>(sorted[i]) / 32] |= 1u << (sorted[i] % 32);
    return m;
}

}  // namespace zmoe::grammar
