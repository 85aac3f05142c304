#include "grammar/grammar.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "base/error.hpp"

namespace zmoe::grammar {

namespace {

constexpr size_t kMaxStates = 1 << 17;  // a grammar past this many DFA states is refused (128 MiB of tables)

constexpr size_t kMaxNfaStates = 1 << 19;  // one rule's NFA past this is refused (bounded repetitions multiply)

[[noreturn]] void fail(const std::string& what) { throw zmoe::error(errc::invalid_argument, what); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// nfa

nfa::nfa() = default;

int32_t nfa::add_state() {
    if (states_.size() >= kMaxNfaStates) fail("grammar: too large (a rule past 2^19 automaton states)");
    states_.emplace_back();
    return static_cast<int32_t>(states_.size() - 1);
}

void nfa::add_bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
    states_[static_cast<size_t>(from)].bytes.push_back({lo, hi, to});
}
void nfa::add_call(int32_t from, int32_t rule, int32_t to) {
    states_[static_cast<size_t>(from)].calls.push_back({rule, to});
}
void nfa::add_epsilon(int32_t from, int32_t to) { states_[static_cast<size_t>(from)].eps.push_back(to); }

fragment nfa::empty() {
    int32_t s = add_state();
    return {s, s};
}

fragment nfa::bytes(uint8_t lo, uint8_t hi) {
    fragment f{add_state(), add_state()};
    add_bytes(f.start, lo, hi, f.end);
    return f;
}

fragment nfa::literal(const std::string& text) {
    int32_t start = add_state(), cur = start;
    for (char c : text) {
        int32_t n = add_state();
        add_bytes(cur, static_cast<uint8_t>(c), static_cast<uint8_t>(c), n);
        cur = n;
    }
    return {start, cur};
}

fragment nfa::call(int32_t rule) {
    fragment f{add_state(), add_state()};
    add_call(f.start, rule, f.end);
    return f;
}

fragment nfa::concat(const std::vector<fragment>& parts) {
    if (parts.empty()) return empty();
    for (size_t i = 0; i + 1 < parts.size(); ++i) add_epsilon(parts[i].end, parts[i + 1].start);
    return {parts.front().start, parts.back().end};
}

fragment nfa::alternate(const std::vector<fragment>& parts) {
    if (parts.size() == 1) return parts[0];
    fragment f{add_state(), add_state()};
    for (const fragment& p : parts) {
        add_epsilon(f.start, p.start);
        add_epsilon(p.end, f.end);
    }
    return f;
}

fragment nfa::optional(fragment f) {
    fragment o{add_state(), add_state()};
    add_epsilon(o.start, f.start);
    add_epsilon(f.end, o.end);
    add_epsilon(o.start, o.end);
    return o;
}

fragment nfa::star(fragment f) {
    fragment o{add_state(), add_state()};
    add_epsilon(o.start, f.start);
    add_epsilon(f.end, f.start);
    add_epsilon(f.end, o.end);
    add_epsilon(o.start, o.end);
    return o;
}

fragment nfa::plus(fragment f) {
    fragment o{add_state(), add_state()};
    add_epsilon(o.start, f.start);
    add_epsilon(f.end, f.start);
    add_epsilon(f.end, o.end);
    return o;
}

// ---------------------------------------------------------------------------------------------------------------
// UTF-8 ranges

void add_code_point_range(nfa& f, int32_t from, int32_t to, uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    // Surrogates are not scalar values: split around them.
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) add_code_point_range(f, from, to, lo, 0xD7FF);
        if (hi > 0xDFFF) add_code_point_range(f, from, to, 0xE000, hi);
        return;
    }
    // Split at encoding-length boundaries.
    static const uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int i = 0; i < 3; ++i) {
        if (lo <= kMax[i] && hi > kMax[i]) {
            add_code_point_range(f, from, to, lo, kMax[i]);
            add_code_point_range(f, from, to, kMax[i] + 1, hi);
            return;
        }
    }
    if (hi <= 0x7F) {
        f.add_bytes(from, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), to);
        return;
    }
    int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
    // Split so that every continuation position spans a full or single sub-range: for each trailing position i,
    // if lo and hi differ above it, the lower 6*i bits must be all-0 at lo and all-1 at hi.
    for (int i = 1; i < n; ++i) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                add_code_point_range(f, from, to, lo, lo | m);
                add_code_point_range(f, from, to, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                add_code_point_range(f, from, to, lo, (hi & ~m) - 1);
                add_code_point_range(f, from, to, hi & ~m, hi);
                return;
            }
        }
    }
    auto byte_at = [n](uint32_t cp, int i) -> uint8_t {  // i-th byte of the encoding
        static const uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
        if (i == 0) return static_cast<uint8_t>(kLead[n] | (cp >> (6 * (n - 1))));
        return static_cast<uint8_t>(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
    };
    int32_t cur = from;
    for (int i = 0; i < n; ++i) {
        int32_t nxt = i + 1 == n ? to : f.add_state();
        f.add_bytes(cur, byte_at(lo, i), byte_at(hi, i), nxt);
        cur = nxt;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// grammar_builder

int32_t grammar_builder::add_rule(const std::string& name) {
    rules_.emplace_back();
    names_.push_back(name);
    return static_cast<int32_t>(rules_.size() - 1);
}

grammar grammar_builder::build(int32_t root_rule) {
    const int32_t num_rules = static_cast<int32_t>(rules_.size());
    if (root_rule < 0 || root_rule >= num_rules) fail("grammar: no root rule");
    struct local_dfa {
        std::vector<std::array<int32_t, 256>> next;
        std::vector<std::vector<std::array<int32_t, 2>>> calls;  // callee, target
        std::vector<uint8_t> final;
    };
    std::vector<local_dfa> dfas(static_cast<size_t>(num_rules));
    size_t total_states = 0;

    for (int32_t r = 0; r < num_rules; ++r) {
        const nfa& a = rules_[static_cast<size_t>(r)];
        if (a.body_.start < 0) fail("grammar: rule '" + names_[static_cast<size_t>(r)] + "' has no body");
        const auto& st = a.states_;
        std::vector<uint32_t> mark(st.size(), 0);
        uint32_t epoch = 0;
        auto closure = [&](std::vector<int32_t> set) {
            ++epoch;
            std::vector<int32_t> out, work = std::move(set);
            while (!work.empty()) {
                int32_t s = work.back();
                work.pop_back();
                if (mark[static_cast<size_t>(s)] == epoch) continue;
                mark[static_cast<size_t>(s)] = epoch;
                out.push_back(s);
                for (int32_t e : st[static_cast<size_t>(s)].eps) work.push_back(e);
            }
            std::sort(out.begin(), out.end());
            return out;
        };
        local_dfa& d = dfas[static_cast<size_t>(r)];
        std::map<std::vector<int32_t>, int32_t> ids;
        std::vector<std::vector<int32_t>> sets;
        auto intern = [&](std::vector<int32_t> set) {
            auto [it, inserted] = ids.emplace(set, static_cast<int32_t>(sets.size()));
            if (inserted) {
                sets.push_back(std::move(set));
                d.next.emplace_back();
                d.next.back().fill(-1);
                d.calls.emplace_back();
                d.final.push_back(0);
                if (total_states + sets.size() > kMaxStates)
                    fail("grammar: too large (more than 131072 automaton states)");
            }
            return it->second;
        };
        intern(closure({a.body_.start}));
        std::array<std::vector<int32_t>, 256> targets;
        for (size_t i = 0; i < sets.size(); ++i) {
            const std::vector<int32_t> set = sets[i];
            for (auto& t : targets) t.clear();
            std::map<int32_t, std::vector<int32_t>> call_targets;
            bool final = false;
            for (int32_t s : set) {
                if (s == a.body_.end) final = true;
                for (const auto& e : st[static_cast<size_t>(s)].bytes)
                    for (int32_t b = e[0]; b <= e[1]; ++b) targets[static_cast<size_t>(b)].push_back(e[2]);
                for (const auto& c : st[static_cast<size_t>(s)].calls) call_targets[c[0]].push_back(c[1]);
            }
            d.final[i] = final;
            int32_t prev_id = -1;
            for (int b = 0; b < 256; ++b) {
                auto& t = targets[static_cast<size_t>(b)];
                if (t.empty()) continue;
                std::sort(t.begin(), t.end());
                t.erase(std::unique(t.begin(), t.end()), t.end());
                int32_t id =
                    (b > 0 && prev_id >= 0 && t == targets[static_cast<size_t>(b - 1)]) ? prev_id : intern(closure(t));
                d.next[i][static_cast<size_t>(b)] = id;
                prev_id = id;
            }
            for (auto& [callee, t] : call_targets) {
                int32_t id = intern(closure(t));  // may grow d.calls: index it afterwards
                d.calls[i].push_back({callee, id});
            }
        }
        total_states += sets.size();
    }

    // Productive rules: the start can reach the end through bytes and calls of productive rules.
    std::vector<uint8_t> productive(static_cast<size_t>(num_rules), 0);
    std::vector<std::vector<uint8_t>> live(static_cast<size_t>(num_rules));
    // Reverse edges per rule: byte predecessors, and call predecessors with their callee.
    std::vector<std::vector<std::vector<int32_t>>> byte_pred(static_cast<size_t>(num_rules));
    std::vector<std::vector<std::vector<std::array<int32_t, 2>>>> call_pred(static_cast<size_t>(num_rules));
    for (int32_t r = 0; r < num_rules; ++r) {
        const local_dfa& d = dfas[static_cast<size_t>(r)];
        auto& bp = byte_pred[static_cast<size_t>(r)];
        auto& cp = call_pred[static_cast<size_t>(r)];
        bp.assign(d.final.size(), {});
        cp.assign(d.final.size(), {});
        for (size_t s = 0; s < d.final.size(); ++s) {
            int32_t last = -1;
            for (int b = 0; b < 256; ++b) {
                int32_t t = d.next[s][static_cast<size_t>(b)];
                if (t >= 0 && t != last) bp[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s)), last = t;
            }
            for (const auto& c : d.calls[s]) cp[static_cast<size_t>(c[1])].push_back({static_cast<int32_t>(s), c[0]});
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < num_rules; ++r) {
            const local_dfa& d = dfas[static_cast<size_t>(r)];
            auto& lv = live[static_cast<size_t>(r)];
            lv.assign(d.final.size(), 0);
            std::vector<int32_t> work;
            for (size_t s = 0; s < d.final.size(); ++s)
                if (d.final[s]) lv[s] = 1, work.push_back(static_cast<int32_t>(s));
            while (!work.empty()) {
                int32_t t = work.back();
                work.pop_back();
                for (int32_t s : byte_pred[static_cast<size_t>(r)][static_cast<size_t>(t)])
                    if (!lv[static_cast<size_t>(s)]) lv[static_cast<size_t>(s)] = 1, work.push_back(s);
                for (const auto& c : call_pred[static_cast<size_t>(r)][static_cast<size_t>(t)])
                    if (productive[static_cast<size_t>(c[1])] && !lv[static_cast<size_t>(c[0])])
                        lv[static_cast<size_t>(c[0])] = 1, work.push_back(c[0]);
            }
            if (lv[0] && !productive[static_cast<size_t>(r)]) productive[static_cast<size_t>(r)] = 1, changed = true;
        }
    }
    if (!productive[static_cast<size_t>(root_rule)]) fail("grammar: the grammar accepts no string at all");

    // Global numbering of the live states reachable from each rule's start.
    grammar g;
    g.rule_names = names_;
    g.root_rule = root_rule;
    g.rule_start.assign(static_cast<size_t>(num_rules), -1);
    std::vector<std::vector<int32_t>> global(static_cast<size_t>(num_rules));
    for (int32_t r = 0; r < num_rules; ++r) {
        const local_dfa& d = dfas[static_cast<size_t>(r)];
        const auto& lv = live[static_cast<size_t>(r)];
        auto& gl = global[static_cast<size_t>(r)];
        gl.assign(d.final.size(), -1);
        if (!lv[0]) continue;
        std::vector<int32_t> work{0};
        gl[0] = g.num_states();
        g.state_rule.push_back(r);
        while (!work.empty()) {
            int32_t s = work.back();
            work.pop_back();
            auto visit = [&](int32_t t) {
                if (t < 0 || !lv[static_cast<size_t>(t)] || gl[static_cast<size_t>(t)] >= 0) return;
                gl[static_cast<size_t>(t)] = g.num_states();
                g.state_rule.push_back(r);
                work.push_back(t);
            };
            for (int b = 0; b < 256; ++b) visit(d.next[static_cast<size_t>(s)][static_cast<size_t>(b)]);
            for (const auto& c : d.calls[static_cast<size_t>(s)])
                if (productive[static_cast<size_t>(c[0])]) visit(c[1]);
        }
        g.rule_start[static_cast<size_t>(r)] = gl[0];
    }
    const size_t n = g.state_rule.size();
    g.next.assign(n * 256, -1);
    g.is_final.assign(n, 0);
    g.has_bytes.assign(n, 0);
    g.call_offset.assign(n + 1, 0);
    std::vector<std::vector<call_edge>> calls(n);
    for (int32_t r = 0; r < num_rules; ++r) {
        const local_dfa& d = dfas[static_cast<size_t>(r)];
        const auto& gl = global[static_cast<size_t>(r)];
        for (size_t s = 0; s < gl.size(); ++s) {
            int32_t gs = gl[s];
            if (gs < 0) continue;
            g.is_final[static_cast<size_t>(gs)] = d.final[s];
            for (int b = 0; b < 256; ++b) {
                int32_t t = d.next[s][static_cast<size_t>(b)];
                if (t >= 0 && gl[static_cast<size_t>(t)] >= 0) {
                    g.next[static_cast<size_t>(gs) * 256 + static_cast<size_t>(b)] = gl[static_cast<size_t>(t)];
                    g.has_bytes[static_cast<size_t>(gs)] = 1;
                }
            }
            for (const auto& c : d.calls[s])
                if (productive[static_cast<size_t>(c[0])] && gl[static_cast<size_t>(c[1])] >= 0)
                    calls[static_cast<size_t>(gs)].push_back({c[0], gl[static_cast<size_t>(c[1])]});
        }
    }
    for (size_t s = 0; s < n; ++s) {
        g.call_offset[s + 1] = g.call_offset[s] + static_cast<int32_t>(calls[s].size());
        g.calls.insert(g.calls.end(), calls[s].begin(), calls[s].end());
    }

    // Nullable states (can end the rule without a byte) and left recursion.
    std::vector<uint8_t> null_state(n, 0), null_rule(static_cast<size_t>(num_rules), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < n; ++s) {
            if (null_state[s]) continue;
            bool ok = g.is_final[s];
            for (int32_t i = g.call_offset[s]; i < g.call_offset[s + 1] && !ok; ++i)
                ok = null_rule[static_cast<size_t>(g.calls[static_cast<size_t>(i)].rule)] &&
                     null_state[static_cast<size_t>(g.calls[static_cast<size_t>(i)].return_state)];
            if (ok) null_state[s] = 1, changed = true;
        }
        for (int32_t r = 0; r < num_rules; ++r) {
            int32_t st = g.rule_start[static_cast<size_t>(r)];
            if (st >= 0 && null_state[static_cast<size_t>(st)] && !null_rule[static_cast<size_t>(r)])
                null_rule[static_cast<size_t>(r)] = 1, changed = true;
        }
    }
    // left_calls[r]: rules r may call before consuming a byte.
    std::vector<std::vector<int32_t>> left_calls(static_cast<size_t>(num_rules));
    for (int32_t r = 0; r < num_rules; ++r) {
        int32_t st = g.rule_start[static_cast<size_t>(r)];
        if (st < 0) continue;
        std::vector<int32_t> work{st};
        std::vector<int32_t> seen{st};
        while (!work.empty()) {
            int32_t s = work.back();
            work.pop_back();
            for (int32_t i = g.call_offset[static_cast<size_t>(s)]; i < g.call_offset[static_cast<size_t>(s) + 1];
                 ++i) {
                const call_edge& c = g.calls[static_cast<size_t>(i)];
                left_calls[static_cast<size_t>(r)].push_back(c.rule);
                if (null_rule[static_cast<size_t>(c.rule)] &&
                    std::find(seen.begin(), seen.end(), c.return_state) == seen.end()) {
                    seen.push_back(c.return_state);
                    work.push_back(c.return_state);
                }
            }
        }
    }
    {
        std::vector<uint8_t> color(static_cast<size_t>(num_rules), 0);  // 0 new, 1 on path, 2 done
        std::function<void(int32_t)> dfs = [&](int32_t r) {
            color[static_cast<size_t>(r)] = 1;
            for (int32_t c : left_calls[static_cast<size_t>(r)]) {
                if (color[static_cast<size_t>(c)] == 1)
                    fail("grammar: rule '" + names_[static_cast<size_t>(c)] +
                         "' is left-recursive (it can call itself before consuming a byte)");
                if (color[static_cast<size_t>(c)] == 0) dfs(c);
            }
            color[static_cast<size_t>(r)] = 2;
        };
        for (int32_t r = 0; r < num_rules; ++r)
            if (color[static_cast<size_t>(r)] == 0) dfs(r);
    }

    // FIRST of each state, then FOLLOW of each rule.
    std::vector<std::bitset<256>> first(n);
    for (size_t s = 0; s < n; ++s)
        for (int b = 0; b < 256; ++b)
            if (g.next[s * 256 + static_cast<size_t>(b)] >= 0) first[s].set(static_cast<size_t>(b));
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < n; ++s) {
            std::bitset<256> f = first[s];
            for (int32_t i = g.call_offset[s]; i < g.call_offset[s + 1]; ++i) {
                const call_edge& c = g.calls[static_cast<size_t>(i)];
                f |= first[static_cast<size_t>(g.rule_start[static_cast<size_t>(c.rule)])];
                if (null_rule[static_cast<size_t>(c.rule)]) f |= first[static_cast<size_t>(c.return_state)];
            }
            if (f != first[s]) first[s] = f, changed = true;
        }
    }
    g.follow.assign(static_cast<size_t>(num_rules), {});
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < n; ++s) {
            for (int32_t i = g.call_offset[s]; i < g.call_offset[s + 1]; ++i) {
                const call_edge& c = g.calls[static_cast<size_t>(i)];
                std::bitset<256> f = g.follow[static_cast<size_t>(c.rule)] | first[static_cast<size_t>(c.return_state)];
                if (null_state[static_cast<size_t>(c.return_state)])
                    f |= g.follow[static_cast<size_t>(g.state_rule[s])];
                if (f != g.follow[static_cast<size_t>(c.rule)])
                    g.follow[static_cast<size_t>(c.rule)] = f, changed = true;
            }
        }
    }
    return g;
}

std::string grammar::to_string() const {
    std::ostringstream os;
    for (int32_t r = 0; r < num_rules(); ++r) {
        os << "rule " << r << " '" << rule_names[static_cast<size_t>(r)] << "' start "
           << rule_start[static_cast<size_t>(r)] << "\n";
    }
    for (int32_t s = 0; s < num_states(); ++s) {
        os << "  state " << s << " (rule " << state_rule[static_cast<size_t>(s)] << ")"
           << (is_final[static_cast<size_t>(s)] ? " final" : "") << ":";
        for (int b = 0; b < 256;) {
            int32_t t = step(s, static_cast<uint8_t>(b));
            int e = b;
            while (e + 1 < 256 && step(s, static_cast<uint8_t>(e + 1)) == t) ++e;
            if (t >= 0) os << " [" << b << "-" << e << "]->" << t;
            b = e + 1;
        }
        for (int32_t i = call_offset[static_cast<size_t>(s)]; i < call_offset[static_cast<size_t>(s) + 1]; ++i)
            os << " call " << calls[static_cast<size_t>(i)].rule << "->" << calls[static_cast<size_t>(i)].return_state;
        os << "\n";
    }
    return os.str();
}

}  // namespace zmoe::grammar
