#include "grammar/compiled_grammar.hpp"

#include <atomic>
#include <thread>

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

void compiled_grammar::precompute_all(int num_threads) const {
    std::atomic<int32_t> next{0};
    auto work = [&] {
        for (int32_t s = next++; s < g_.num_states(); s = next++)
            if (g_.has_bytes[static_cast<size_t>(s)]) mask_at(s);
    };
    std::vector<std::thread> threads;
    for (int i = 1; i < num_threads; ++i) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
}

int32_t compiled_grammar::num_scan_positions() const {
    int32_t n = 0;
    for (uint8_t h : g_.has_bytes) n += h;
    return n;
}

position_mask compiled_grammar::compute(int32_t state) const {
    const std::vector<int32_t>& sorted = tok_->sorted_ids();
    const std::vector<int32_t>& lcp = tok_->sorted_lcp();
    const int32_t num_sorted = static_cast<int32_t>(sorted.size());
    const std::bitset<256>& follow = g_.follow[static_cast<size_t>(g_.state_rule[static_cast<size_t>(state)])];
    stack_stepper stepper(g_);
    // A state is "plain" when entering it pushes and pops nothing: a level that holds one plain state (on the
    // position's own frame) steps by a table lookup, without stack nodes. Most bytes of most tokens go this way.
    auto plain = [&](int32_t t) {
        return !g_.is_final[static_cast<size_t>(t)] &&
               g_.call_offset[static_cast<size_t>(t)] == g_.call_offset[static_cast<size_t>(t) + 1];
    };
    std::vector<stack_node> pool{{state, kContextBoundary}};
    // Level d: the stacks after the first d bytes of the current token, flat in `nodes` (unless plain[d] >= 0:
    // then the level is that single state on the position's frame).
    std::vector<int32_t> nodes{0};
    std::vector<size_t> begin{0, 1};  // level d is nodes[begin[d], begin[d+1])
    std::vector<size_t> pool_mark{1};
    std::vector<int32_t> plain_state{state};
    std::vector<uint8_t> bnd{0}, unc{0};
    std::vector<int32_t> accepted, uncertain;  // indices into sorted, ascending
    size_t valid = 0;                          // levels 0..valid are those of the previous token's prefix
    std::vector<int32_t> out;
    for (int32_t i = 0; i < num_sorted;) {
        const std::string_view b = tok_->sorted_token(i);
        valid = std::min(valid, static_cast<size_t>(lcp[static_cast<size_t>(i)]));
        // Drop the levels past `valid`.
        begin.resize(valid + 2);
        nodes.resize(begin[valid + 1]);
        pool.resize(pool_mark[valid]);
        pool_mark.resize(valid + 1);
        plain_state.resize(valid + 1);
        bnd.resize(valid + 1);
        unc.resize(valid + 1);
        size_t dead_depth = 0;
        for (size_t d = valid; d < b.size(); ++d) {
            const auto byte = static_cast<uint8_t>(b[d]);
            step_flags f;
            int32_t next_plain = -1;
            if (plain_state[d] >= 0) {
                const int32_t t = g_.step(plain_state[d], byte);
                if (t >= 0 && plain(t)) {
                    next_plain = t;
                } else if (t >= 0) {
                    pool.push_back({t, kContextBoundary});
                    out.clear();
                    stepper.expand(pool, static_cast<int32_t>(pool.size() - 1), out, f);
                    nodes.insert(nodes.end(), out.begin(), out.end());
                } else {
                    out.clear();
                }
            } else {
                out.clear();
                stepper.advance(pool, nodes.data() + begin[d], begin[d + 1] - begin[d], byte, out, f);
                nodes.insert(nodes.end(), out.begin(), out.end());
            }
            begin.push_back(nodes.size());
            pool_mark.push_back(pool.size());
            plain_state.push_back(next_plain);
            bnd.push_back(f.boundary);
            unc.push_back(unc[d] || (bnd[d] && follow.test(byte)));
            valid = d + 1;
            if (next_plain < 0 && begin[d + 2] == begin[d + 1] && !f.boundary && !unc[d + 1]) {
                dead_depth = d + 1;
                break;
            }
        }
        if (dead_depth > 0) {
            // Every token below this prefix is rejected.
            i = tok_->subtree_end(i, static_cast<int32_t>(dead_depth));
            continue;
        }
        const size_t n = b.size();
        if (plain_state[n] >= 0 || begin[n + 1] > begin[n] || bnd[n])
            accepted.push_back(i);
        else if (unc[n])
            uncertain.push_back(i);
        ++i;
    }
    position_mask m;
    m.num_accepted = static_cast<int32_t>(accepted.size());
    m.uncertain = std::move(uncertain);
    for (size_t u = 0; u < m.uncertain.size(); ++u)
        m.uncertain_lcp.push_back(u == 0 ? 0 : tok_->min_lcp(m.uncertain[u - 1] + 1, m.uncertain[u] + 1));
    const size_t words = tok_->bitmask_words();
    const size_t num_rejected = static_cast<size_t>(num_sorted) - accepted.size();
    if (accepted.size() <= words) {
        m.kind = position_mask::storage::accepted_list;
        for (int32_t i : accepted) m.ids.push_back(sorted[static_cast<size_t>(i)]);
    } else if (num_rejected <= words) {
        m.kind = position_mask::storage::rejected_list;
        size_t a = 0;
        for (int32_t i = 0; i < num_sorted; ++i) {
            if (a < accepted.size() && accepted[a] == i)
                ++a;
            else
                m.ids.push_back(sorted[static_cast<size_t>(i)]);
        }
    } else {
        m.kind = position_mask::storage::bitset;
        m.bits.assign(words, 0);
        for (int32_t i : accepted) {
            int32_t id = sorted[static_cast<size_t>(i)];
            m.bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        }
    }
    return m;
}

}  // namespace zmoe::grammar
