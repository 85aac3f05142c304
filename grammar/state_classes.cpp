#include "grammar/state_classes.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

namespace zmoe::grammar {

namespace {

/// Rules that can end without consuming a byte (directly, or by calling such rules).
std::vector<uint8_t> nullable_rules(const grammar& g) {
    std::vector<uint8_t> nullable(static_cast<size_t>(g.num_rules()), 0);
    bool changed = true;
    while (changed) {
        changed = false;
        for (int32_t r = 0; r < g.num_rules(); ++r) {
            if (nullable[static_cast<size_t>(r)]) continue;
            // Epsilon closure of the start over calls of nullable rules.
            std::vector<int32_t> work{g.rule_start[static_cast<size_t>(r)]}, seen = work;
            bool ends = false;
            while (!work.empty() && !ends) {
                const auto s = static_cast<size_t>(work.back());
                work.pop_back();
                ends = g.is_final[s] != 0;
                for (int32_t i = g.call_offset[s]; i < g.call_offset[s + 1]; ++i) {
                    const call_edge& c = g.calls[static_cast<size_t>(i)];
                    if (!nullable[static_cast<size_t>(c.rule)]) continue;
                    if (std::find(seen.begin(), seen.end(), c.return_state) != seen.end()) continue;
                    seen.push_back(c.return_state);
                    work.push_back(c.return_state);
                }
            }
            if (ends) nullable[static_cast<size_t>(r)] = 1, changed = true;
        }
    }
    return nullable;
}

/// Assigns class ids to the rows of `sig` (n rows of `width` ints): equal rows, equal ids, numbered in order of
/// their first row. Returns the count.
int32_t number_rows(const std::vector<int32_t>& sig, size_t n, size_t width, std::vector<int32_t>& out) {
    auto row = [&](size_t i) { return sig.data() + i * width; };
    std::vector<std::pair<uint64_t, int32_t>> order(n);
    for (size_t i = 0; i < n; ++i) {
        uint64_t h = 1469598103934665603ull;
        const int32_t* r = row(i);
        for (size_t k = 0; k < width; ++k) h = (h ^ static_cast<uint32_t>(r[k])) * 1099511628211ull;
        order[i] = {h, static_cast<int32_t>(i)};
    }
    std::sort(order.begin(), order.end());
    // Within a run of equal hashes, rows equal to an earlier row of the run share its id (collisions compared).
    std::vector<int32_t> first(n, -1);  // the first row of each row's class
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && order[b].first == order[a].first) ++b;
        for (size_t k = a; k < b; ++k) {
            const auto i = static_cast<size_t>(order[k].second);
            for (size_t j = a; j < k && first[i] < 0; ++j) {
                const auto o = static_cast<size_t>(order[j].second);
                if (first[o] == order[j].second && std::memcmp(row(o), row(i), width * sizeof(int32_t)) == 0)
                    first[i] = order[j].second;
            }
            if (first[i] < 0) first[i] = static_cast<int32_t>(i);
        }
        a = b;
    }
    out.assign(n, -1);
    int32_t count = 0;
    for (size_t i = 0; i < n; ++i)
        out[i] = first[i] == static_cast<int32_t>(i) ? count++ : out[static_cast<size_t>(first[i])];
    return count;
}

}  // namespace

state_classes compute_state_classes(const grammar& g, const std::bitset<256>& alphabet, size_t max_len,
                                    bool keep_rounds) {
    const size_t n = static_cast<size_t>(g.num_states());
    // Bytes that every state treats alike need one column.
    std::vector<int32_t> bytes;
    {
        std::map<std::vector<int32_t>, int32_t> columns;
        std::vector<int32_t> col(n);
        for (int b = 0; b < 256; ++b) {
            if (!alphabet.test(static_cast<size_t>(b))) continue;
            for (size_t s = 0; s < n; ++s) col[s] = g.next[s * 256 + static_cast<size_t>(b)];
            if (columns.emplace(col, b).second) bytes.push_back(b);
        }
    }
    const std::vector<uint8_t> nullable = nullable_rules(g);
    bool exact = false;  // a nullable callee: a return may cost no byte, so refine until stable
    for (const call_edge& c : g.calls) exact = exact || nullable[static_cast<size_t>(c.rule)];
    size_t max_calls = 0;
    for (size_t s = 0; s < n; ++s)
        max_calls = std::max(max_calls, static_cast<size_t>(g.call_offset[s + 1] - g.call_offset[s]));

    // Round 0: what a state shows without consuming a byte.
    std::map<std::string, int32_t> follow_ids;
    std::vector<int32_t> follow_of_rule(static_cast<size_t>(g.num_rules()));
    for (int32_t r = 0; r < g.num_rules(); ++r)
        follow_of_rule[static_cast<size_t>(r)] =
            follow_ids.emplace(g.follow[static_cast<size_t>(r)].to_string(), static_cast<int32_t>(follow_ids.size()))
                .first->second;
    size_t width = 4 + max_calls;
    std::vector<int32_t> sig(n * width, -1);
    for (size_t s = 0; s < n; ++s) {
        int32_t* row = sig.data() + s * width;
        row[0] = g.has_bytes[s];
        row[1] = g.is_final[s];
        // The FOLLOW set matters where the walk leaves the position's rule: at its final states.
        row[2] = g.is_final[s] ? follow_of_rule[static_cast<size_t>(g.state_rule[s])] : -1;
        row[3] = g.call_offset[s + 1] - g.call_offset[s];
        for (int32_t i = g.call_offset[s], k = 4; i < g.call_offset[s + 1]; ++i, ++k)
            row[k] = g.calls[static_cast<size_t>(i)].rule;
    }
    std::vector<int32_t> cls;
    int32_t count = number_rows(sig, n, width, cls);
    state_classes out;
    if (keep_rounds) out.by_round.push_back(cls);

    // Round r: a class of round r-1 splits by its states' successors over each byte and call returns, in the
    // classes of round r-1 (a callee consumes at least one byte before returning unless `exact`). Only a class
    // holding a predecessor of a state that changed class in round r-1 can split; the first part keeps the id.
    std::vector<int32_t> pred_offset(n + 1, 0), pred;
    {
        auto for_succ = [&](size_t s, auto&& f) {
            for (int32_t b : bytes) {
                const int32_t t = g.next[s * 256 + static_cast<size_t>(b)];
                if (t >= 0) f(t);
            }
            for (int32_t i = g.call_offset[s]; i < g.call_offset[s + 1]; ++i)
                f(g.calls[static_cast<size_t>(i)].return_state);
        };
        for (size_t s = 0; s < n; ++s) for_succ(s, [&](int32_t t) { ++pred_offset[static_cast<size_t>(t) + 1]; });
        for (size_t s = 0; s < n; ++s) pred_offset[s + 1] += pred_offset[s];
        pred.resize(static_cast<size_t>(pred_offset[n]));
        std::vector<int32_t> fill(pred_offset.begin(), pred_offset.end() - 1);
        for (size_t s = 0; s < n; ++s)
            for_succ(s, [&](int32_t t) {
                pred[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
            });
    }
    std::vector<std::vector<int32_t>> members(static_cast<size_t>(count));
    for (size_t s = 0; s < n; ++s) members[static_cast<size_t>(cls[s])].push_back(static_cast<int32_t>(s));
    width = bytes.size() + max_calls;
    std::vector<int32_t> changed(n), dirty, stamp(static_cast<size_t>(count), -1), rows, ids, part;
    std::vector<int32_t> state_stamp(n, -1);
    std::iota(changed.begin(), changed.end(), 0);
    std::vector<std::pair<int32_t, int32_t>> affected;  // (class, state): a successor changed class last round
    std::vector<std::pair<int32_t, int32_t>> moves;     // (state, new class)
    auto build_row = [&](size_t s, int32_t* row) {
        for (size_t k = 0; k < bytes.size(); ++k) {
            const int32_t t = g.next[s * 256 + static_cast<size_t>(bytes[k])];
            row[k] = t < 0 ? -1 : cls[static_cast<size_t>(t)];
        }
        for (int32_t i = g.call_offset[s], k = 0; i < g.call_offset[s + 1]; ++i, ++k)
            row[bytes.size() + static_cast<size_t>(k)] =
                cls[static_cast<size_t>(g.calls[static_cast<size_t>(i)].return_state)];
    };
    for (int32_t round = 1; exact || static_cast<size_t>(round) <= max_len; ++round) {
        // Members of a class none of whose successors changed class have equal rows (they had last round): only
        // the affected ones are compared, with one unaffected member standing for the rest.
        affected.clear();
        for (int32_t t : changed)
            for (int32_t k = pred_offset[static_cast<size_t>(t)]; k < pred_offset[static_cast<size_t>(t) + 1]; ++k) {
                const int32_t s = pred[static_cast<size_t>(k)];
                const int32_t c = cls[static_cast<size_t>(s)];
                if (state_stamp[static_cast<size_t>(s)] == round || members[static_cast<size_t>(c)].size() < 2)
                    continue;
                state_stamp[static_cast<size_t>(s)] = round;
                affected.push_back({c, s});
            }
        std::sort(affected.begin(), affected.end());
        dirty.clear();
        moves.clear();
        for (size_t lo = 0; lo < affected.size();) {
            const int32_t c = affected[lo].first;
            size_t hi = lo;
            while (hi < affected.size() && affected[hi].first == c) ++hi;
            dirty.push_back(c);
            const std::vector<int32_t>& mem = members[static_cast<size_t>(c)];
            part.clear();
            for (size_t k = lo; k < hi; ++k) part.push_back(affected[k].second);
            int32_t rest = -1;  // an unaffected member
            if (part.size() < mem.size())
                for (int32_t s : mem)
                    if (state_stamp[static_cast<size_t>(s)] != round) {
                        rest = s;
                        break;
                    }
            if (rest >= 0) part.push_back(rest);
            rows.assign(part.size() * width, -1);
            for (size_t m = 0; m < part.size(); ++m) build_row(static_cast<size_t>(part[m]), rows.data() + m * width);
            const int32_t parts = number_rows(rows, part.size(), width, ids);
            lo = hi;
            if (parts == 1) continue;
            // The part of the unaffected members (else of the first affected one) keeps the id; the others get
            // new ones.
            std::vector<int32_t> fresh(static_cast<size_t>(parts), -1);
            fresh[static_cast<size_t>(rest >= 0 ? ids.back() : ids[0])] = c;
            for (size_t m = 0; m < part.size(); ++m) {
                int32_t& f = fresh[static_cast<size_t>(ids[m])];
                if (f < 0) f = count++;
                if (f != c) moves.push_back({part[m], f});
            }
        }
        if (moves.empty()) break;  // stable: no further round splits a class
        changed.clear();
        members.resize(static_cast<size_t>(count));
        for (const auto& [s, c] : moves) {
            cls[static_cast<size_t>(s)] = c;
            changed.push_back(s);
            members[static_cast<size_t>(c)].push_back(s);
        }
        for (int32_t c : dirty) {
            std::vector<int32_t>& mem = members[static_cast<size_t>(c)];
            mem.erase(
                std::remove_if(mem.begin(), mem.end(), [&](int32_t s) { return cls[static_cast<size_t>(s)] != c; }),
                mem.end());
        }
        stamp.resize(static_cast<size_t>(count), -1);
        if (keep_rounds) out.by_round.push_back(cls);
    }
    out.of_state = std::move(cls);
    out.representative.assign(static_cast<size_t>(count), -1);
    for (size_t s = 0; s < n; ++s) {
        int32_t& rep = out.representative[static_cast<size_t>(out.of_state[s])];
        if (rep < 0) rep = static_cast<int32_t>(s);
    }
    return out;
}

}  // namespace zmoe::grammar
