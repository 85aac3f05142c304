#include "grammar/compiled_grammar.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <thread>

#include "grammar/stack_step.hpp"

namespace zmoe::grammar {

compiled_grammar::compiled_grammar(grammar g, std::shared_ptr<const tokenizer_info> tok)
    : g_(std::move(g)), tok_(std::move(tok)) {
    const size_t n = static_cast<size_t>(g_.num_states());
    plain_.resize(n);
    for (size_t s = 0; s < n; ++s) plain_[s] = !g_.is_final[s] && g_.call_offset[s] == g_.call_offset[s + 1];
    std::bitset<256> all, common;
    all.set();
    for (int b = 0; b < 256; ++b)
        if (!tokenizer_info::is_rare_byte(static_cast<uint8_t>(b))) common.set(static_cast<size_t>(b));
    // Equal masks: the same walk of the common tokens (common_) and of the rare ones, which the classes over all
    // bytes up to the longest rare token decide.
    const state_classes full = compute_state_classes(g_, all, tok_->max_rare_token_bytes());
    common_ = compute_state_classes(g_, common, tok_->max_common_token_bytes(), /*keep_rounds=*/true);
    plan_.assign(static_cast<size_t>(common_.num_classes()), {});
    // Anchors: classes that walk every common token. A class whose states agree with an anchor's up to depth d (a
    // round of the refinement before the last) reuses the anchor's walk for tokens of at most d bytes. Classes in
    // order of their first state, so a bounded repetition's first position (the most left to consume) anchors the
    // others.
    const auto& rounds = common_.by_round;
    const size_t last = rounds.size() - 1;
    // Reuse pays when the longer tokens left to walk are few: a quarter of the common ones at most (Qwen3: 8 bytes).
    size_t min_depth = 1;
    while (min_depth < tok_->max_common_token_bytes() &&
           tok_->common_longer_than(min_depth).size() * 4 > tok_->common_sorted().size())
        ++min_depth;
    std::vector<std::vector<int32_t>> anchor_at(last);
    for (size_t d = 0; d < last; ++d)
        anchor_at[d].assign(static_cast<size_t>(*std::max_element(rounds[d].begin(), rounds[d].end())) + 1, -1);
    for (size_t s = 0; s < n; ++s) {
        const int32_t c = common_.of_state[s];
        if (!g_.has_bytes[s] || common_.representative[static_cast<size_t>(c)] != static_cast<int32_t>(s)) continue;
        common_plan& p = plan_[static_cast<size_t>(c)];
        for (size_t d = last; d-- > min_depth;) {
            const int32_t a = anchor_at[d][static_cast<size_t>(rounds[d][s])];
            if (a >= 0) {
                p = {a, static_cast<int32_t>(d)};
                break;
            }
        }
        if (p.anchor >= 0) continue;
        for (size_t d = 0; d < last; ++d) {
            int32_t& a = anchor_at[d][static_cast<size_t>(rounds[d][s])];
            if (a < 0) a = c;
        }
    }
    common_.by_round.clear();
    mask_slot_.assign(n, -1);
    std::map<std::pair<int32_t, int32_t>, int32_t> slots;
    for (size_t s = 0; s < n; ++s) {
        if (!g_.has_bytes[s]) continue;
        auto [it, added] = slots.emplace(std::make_pair(common_.of_state[s], full.of_state[s]),
                                         static_cast<int32_t>(slot_state_.size()));
        if (added) slot_state_.push_back(static_cast<int32_t>(s));
        mask_slot_[s] = it->second;
    }
    mask_once_ = std::make_unique<std::once_flag[]>(slot_state_.size());
    masks_.resize(slot_state_.size());
    common_once_ = std::make_unique<std::once_flag[]>(static_cast<size_t>(common_.num_classes()));
    commons_.resize(static_cast<size_t>(common_.num_classes()));
}

const position_mask& compiled_grammar::mask_at(int32_t state) const {
    const auto c = static_cast<size_t>(mask_slot_[static_cast<size_t>(state)]);
    std::call_once(mask_once_[c], [&] { masks_[c] = std::make_unique<position_mask>(compute(slot_state_[c])); });
    return *masks_[c];
}

const compiled_grammar::walk_result& compiled_grammar::common_walk(int32_t common_class) const {
    const auto c = static_cast<size_t>(common_class);
    std::call_once(common_once_[c], [&] {
        auto r = std::make_unique<walk_result>();
        const tokenizer_info& tok = *tok_;
        const int32_t state = common_.representative[c];
        const common_plan p = plan_[c];
        if (p.anchor < 0) {
            walk(state, tok.common_sorted(), tok.common_lcp(), false, *r);
            r->accepted_up_to.assign(tok.max_common_token_bytes() + 1, 0);
            for (int32_t i : r->accepted) ++r->accepted_up_to[tok.sorted_token_size(i)];
            for (size_t d = 1; d < r->accepted_up_to.size(); ++d) r->accepted_up_to[d] += r->accepted_up_to[d - 1];
        } else {
            // The anchor's tokens of at most d bytes, and this position's own walk of the longer ones.
            const walk_result& a = common_walk(p.anchor);
            // Agreeing to a depth beyond the longest common token is agreeing on every common token: the lists by
            // length stop there (a small vocabulary's refinement can take more rounds than its longest token).
            const auto d = std::min(static_cast<size_t>(p.depth), tok.max_common_token_bytes());
            walk_result longer;
            walk(state, tok.common_longer_than(d), tok.common_longer_than_lcp(d), true, longer);
            auto merge_short = [&](const std::vector<int32_t>& from_anchor, const std::vector<int32_t>& own) {
                std::vector<int32_t> out;
                out.reserve(from_anchor.size() + own.size());
                auto o = own.begin();
                for (int32_t i : from_anchor) {
                    if (tok.sorted_token_size(i) > d) continue;
                    for (; o != own.end() && *o < i; ++o) out.push_back(*o);
                    out.push_back(i);
                }
                out.insert(out.end(), o, own.end());
                return out;
            };
            r->uncertain = merge_short(a.uncertain, longer.uncertain);
            r->num_accepted = static_cast<size_t>(a.accepted_up_to[d]) + longer.num_accepted;
            const size_t num = tok.common_sorted().size();
            if (r->num_accepted * 2 > num && a.rejected_listed) {
                // Most tokens accepted (a long string's positions): only the rejected ones are listed.
                r->rejected = merge_short(a.rejected, longer.rejected);
                r->rejected_listed = true;
                r->accepted_listed = false;
            } else {
                r->accepted = merge_short(a.accepted, longer.accepted);
                if (r->num_accepted * 2 > num) {
                    r->rejected_listed = true;
                    size_t k = 0;
                    for (int32_t i : tok.common_sorted()) {
                        if (k < r->accepted.size() && r->accepted[k] == i)
                            ++k;
                        else
                            r->rejected.push_back(i);
                    }
                }
            }
        }
        commons_[c] = std::move(r);
    });
    return *commons_[c];
}

void compiled_grammar::precompute_all(int num_threads) const {
    std::atomic<int32_t> next{0};
    auto work = [&] {
        for (int32_t c = next++; c < static_cast<int32_t>(slot_state_.size()); c = next++)
            mask_at(slot_state_[static_cast<size_t>(c)]);
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

int32_t compiled_grammar::num_distinct_masks() const { return static_cast<int32_t>(slot_state_.size()); }

int32_t compiled_grammar::num_common_walks() const {
    int32_t n = 0;
    for (int32_t s : common_.representative) n += g_.has_bytes[static_cast<size_t>(s)];
    return n;
}

void compiled_grammar::walk(int32_t state, const std::vector<int32_t>& list, const std::vector<int32_t>& list_lcp,
                            bool always_complement, walk_result& r) const {
    const tokenizer_info& tok = *tok_;
    const size_t num = list.size();
    const std::bitset<256>& follow = g_.follow[static_cast<size_t>(g_.state_rule[static_cast<size_t>(state)])];
    stack_stepper stepper(g_);
    const size_t max_depth = tok.max_token_bytes();
    // Level d: the stacks after the first d bytes of the current token, flat in `nodes` (unless plain_state[d] >=
    // 0: then the level is that single plain state on the position's own frame, stepped by a table lookup without
    // stack nodes; most bytes of most tokens go this way).
    std::vector<stack_node> pool{{state, kContextBoundary}};
    std::vector<int32_t> nodes{0};
    std::vector<size_t> begin(max_depth + 2), pool_mark(max_depth + 1);
    std::vector<int32_t> plain_state(max_depth + 1);
    std::vector<uint8_t> bnd(max_depth + 1), unc(max_depth + 1);
    begin[0] = 0;
    begin[1] = 1;
    pool_mark[0] = 1;
    plain_state[0] = state;
    bnd[0] = unc[0] = 0;
    size_t valid = 0;      // levels 0..valid are those of the previous token's prefix
    size_t plain_len = 0;  // levels 0..plain_len are plain; valid levels past it are not
    std::vector<int32_t> out;
    // The next byte allowed first, from each byte on: a token whose first byte is not allowed jumps there.
    std::array<int, 257> next_first{};
    next_first[256] = 256;
    for (size_t c = 256; c-- > 0;)
        next_first[c] = g_.step(state, static_cast<uint8_t>(c)) >= 0 ? static_cast<int>(c) : next_first[c + 1];
    auto jump = [&](size_t from, int32_t end) {
        return static_cast<size_t>(std::lower_bound(list.begin() + static_cast<std::ptrdiff_t>(from), list.end(), end) -
                                   list.begin());
    };
    for (size_t k = jump(0, tok.first_starting_at_least(next_first[0])); k < num;) {
        const int32_t i = list[k];
        const std::string_view b = tok.sorted_token(i);
        valid = std::min(valid, static_cast<size_t>(list_lcp[k]));
        size_t start = valid;
        if (valid <= plain_len) {
            // Extend the plain levels by table lookups (most bytes of most tokens).
            size_t d = valid;
            int32_t cur = plain_state[d];
            while (d < b.size()) {
                const int32_t t = g_.step(cur, static_cast<uint8_t>(b[d]));
                if (t < 0 || !plain_[static_cast<size_t>(t)]) break;
                cur = t;
                plain_state[++d] = t;
            }
            plain_len = valid = start = d;
            if (d == b.size()) {
                r.accepted.push_back(i);
                ++k;
                continue;
            }
            nodes.resize(1);
            pool.resize(1);
            begin[d + 1] = 1;
            pool_mark[d] = 1;
            bnd[d] = unc[d] = 0;
        } else {
            nodes.resize(begin[valid + 1]);
            pool.resize(pool_mark[valid]);
        }
        size_t dead_depth = 0;
        for (size_t d = start; d < b.size(); ++d) {
            const auto byte = static_cast<uint8_t>(b[d]);
            if (plain_state[d] >= 0) {
                const int32_t t = g_.step(plain_state[d], byte);
                if (t >= 0 && plain_[static_cast<size_t>(t)]) {
                    begin[d + 2] = begin[d + 1];
                    pool_mark[d + 1] = pool_mark[d];
                    plain_state[d + 1] = t;
                    bnd[d + 1] = 0;
                    unc[d + 1] = unc[d];
                    valid = d + 1;
                    continue;
                }
                step_flags f;
                out.clear();
                if (t >= 0) {
                    pool.push_back({t, kContextBoundary});
                    stepper.expand(pool, static_cast<int32_t>(pool.size() - 1), out, f);
                    nodes.insert(nodes.end(), out.begin(), out.end());
                }
                begin[d + 2] = nodes.size();
                pool_mark[d + 1] = pool.size();
                plain_state[d + 1] = -1;
                bnd[d + 1] = f.boundary;
                unc[d + 1] = unc[d];  // bnd[d] is false on a plain level
            } else {
                step_flags f;
                out.clear();
                stepper.advance(pool, nodes.data() + begin[d], begin[d + 1] - begin[d], byte, out, f);
                nodes.insert(nodes.end(), out.begin(), out.end());
                begin[d + 2] = nodes.size();
                pool_mark[d + 1] = pool.size();
                plain_state[d + 1] = -1;
                bnd[d + 1] = f.boundary;
                unc[d + 1] = unc[d] || (bnd[d] && follow.test(byte));
            }
            valid = d + 1;
            if (begin[d + 2] == begin[d + 1] && !bnd[d + 1] && !unc[d + 1]) {
                dead_depth = d + 1;
                break;
            }
        }
        if (dead_depth > 0) {
            // Every token below this prefix is rejected.
            const int32_t end = dead_depth == 1
                                    ? tok.first_starting_at_least(next_first[static_cast<uint8_t>(b[0]) + 1])
                                    : tok.subtree_end(i, static_cast<int32_t>(dead_depth));
            k = jump(k + 1, end);
            continue;
        }
        const size_t n = b.size();
        if (plain_state[n] >= 0 || begin[n + 1] > begin[n] || bnd[n])
            r.accepted.push_back(i);
        else if (unc[n])
            r.uncertain.push_back(i);
        ++k;
    }
    r.num_accepted = r.accepted.size();
    // The complement, when it is the smaller side (what a rejected list stores).
    if (always_complement || r.accepted.size() * 2 > num) {
        r.rejected_listed = true;
        r.rejected.reserve(num - r.accepted.size());
        size_t a = 0;
        for (int32_t i : list) {
            if (a < r.accepted.size() && r.accepted[a] == i)
                ++a;
            else
                r.rejected.push_back(i);
        }
    }
}

namespace {

std::vector<int32_t> merge_sorted(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    std::vector<int32_t> out(a.size() + b.size());
    std::merge(a.begin(), a.end(), b.begin(), b.end(), out.begin());
    return out;
}

}  // namespace

position_mask compiled_grammar::compute(int32_t state) const {
    const tokenizer_info& tok = *tok_;
    const std::vector<int32_t>& sorted = tok.sorted_ids();
    const walk_result& common = common_walk(common_.of_state[static_cast<size_t>(state)]);
    walk_result rare_walk;
    walk(state, tok.rare_sorted(), tok.rare_lcp(), true, rare_walk);
    const walk_result& rare = rare_walk;

    position_mask m;
    m.num_accepted = static_cast<int32_t>(common.num_accepted + rare.num_accepted);
    m.uncertain = merge_sorted(common.uncertain, rare.uncertain);
    for (size_t u = 0; u < m.uncertain.size(); ++u)
        m.uncertain_lcp.push_back(u == 0 ? 0 : tok.min_lcp(m.uncertain[u - 1] + 1, m.uncertain[u] + 1));
    const size_t words = tok.bitmask_words();
    const size_t num_rejected = tok.sorted_ids().size() - static_cast<size_t>(m.num_accepted);
    if (static_cast<size_t>(m.num_accepted) <= words) {
        m.kind = position_mask::storage::accepted_list;
        m.ids.reserve(static_cast<size_t>(m.num_accepted));
        for (const auto* list : {&common.accepted, &rare.accepted})
            for (int32_t i : *list) m.ids.push_back(sorted[static_cast<size_t>(i)]);
    } else if (num_rejected <= words && common.rejected_listed) {
        m.kind = position_mask::storage::rejected_list;
        m.ids.reserve(num_rejected);
        for (const auto* list : {&common.rejected, &rare.rejected})
            for (int32_t i : *list) m.ids.push_back(sorted[static_cast<size_t>(i)]);
    } else if (common.accepted_listed) {
        m.kind = position_mask::storage::bitset;
        m.bits.assign(words, 0);
        for (const auto* list : {&common.accepted, &rare.accepted})
            for (int32_t i : *list) {
                const int32_t id = sorted[static_cast<size_t>(i)];
                m.bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
            }
    } else {
        m.kind = position_mask::storage::bitset;  // every text token but the rejected ones
        m.bits = tok.text_mask();
        for (const auto* list : {&common.rejected, &rare.rejected})
            for (int32_t i : *list) {
                const int32_t id = sorted[static_cast<size_t>(i)];
                m.bits[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
            }
    }
    return m;
}

}  // namespace zmoe::grammar
