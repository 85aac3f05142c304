#pragma once
// The one internal representation every structured-output kind compiles to: a set of rules, each a deterministic
// automaton over bytes whose edges also include calls of other rules (a pushdown automaton over bytes). States of
// all rules are numbered globally, so a position in the grammar is one int32 and a stack frame is
// (state, parent frame). Builders write each rule as a Thompson NFA (byte ranges, rule calls, epsilon edges);
// build() determinizes every rule (subset construction over bytes and callees), drops states that cannot reach the
// rule's end, refuses left recursion (a rule that can call itself before consuming a byte) and computes each
// rule's FOLLOW set (the bytes that can come right after it ends), which the token mask cache uses.

#include <array>
#include <bitset>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace zmoe::grammar {

/// A rule call on a DFA state: enter `rule` at its start; when it ends, continue at `return_state`.
struct call_edge {
    int32_t rule;
    int32_t return_state;
};

/// A compiled grammar: immutable after build(), shared between threads.
struct grammar {
    std::vector<std::string> rule_names;
    std::vector<int32_t> rule_start;  ///< [num_rules] global state id where each rule starts
    int32_t root_rule = 0;

    // Per global state.
    std::vector<int32_t> state_rule;  ///< [num_states] the rule a state belongs to
    std::vector<int32_t> next;        ///< [num_states * 256] state after a byte, -1 when the byte is not allowed
    std::vector<uint8_t> is_final;    ///< [num_states] the rule may end here
    std::vector<uint8_t> has_bytes;   ///< [num_states] some byte is allowed here (a "scan" position)
    std::vector<int32_t>
        call_offset;  ///< [num_states + 1] calls of state s are calls[call_offset[s], call_offset[s+1])
    std::vector<call_edge> calls;

    std::vector<std::bitset<256>> follow;  ///< [num_rules] bytes that may come right after the rule ends

    int32_t num_states() const { return static_cast<int32_t>(state_rule.size()); }
    int32_t num_rules() const { return static_cast<int32_t>(rule_start.size()); }
    int32_t step(int32_t state, uint8_t byte) const { return next[static_cast<size_t>(state) * 256 + byte]; }
    /// A readable dump of every rule's automaton (for tests and debugging).
    std::string to_string() const;
};

/// A piece of NFA with one entry and one exit state (Thompson construction).
struct fragment {
    int32_t start;
    int32_t end;
};

/// One rule under construction, as an NFA.
class nfa {
  public:
    nfa();
    int32_t add_state();
    void add_bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to);
    void add_call(int32_t from, int32_t rule, int32_t to);
    void add_epsilon(int32_t from, int32_t to);

    // Fragment combinators. Each returns a new fragment; its arguments must not be used again.
    fragment empty();
    fragment bytes(uint8_t lo, uint8_t hi);
    fragment literal(const std::string& text);
    fragment call(int32_t rule);
    fragment concat(const std::vector<fragment>& parts);
    fragment alternate(const std::vector<fragment>& parts);
    fragment optional(fragment f);
    fragment star(fragment f);
    fragment plus(fragment f);

    /// The rule's body: its NFA start is body.start and it ends at body.end.
    void set_body(fragment body) { body_ = body; }

  private:
    friend class grammar_builder;
    struct state {
        std::vector<std::array<int32_t, 3>> bytes;  // lo, hi, target
        std::vector<std::array<int32_t, 2>> calls;  // rule, target
        std::vector<int32_t> eps;
    };
    std::vector<state> states_;
    fragment body_{-1, -1};
};

/// Collects rules, then builds the grammar. Throws zmoe::error(invalid_argument) naming the problem: a rule
/// without a body, an empty language, left recursion, or a grammar too large.
class grammar_builder {
  public:
    /// A new rule named `name` (names are for messages; they need not be unique). Returns its id.
    int32_t add_rule(const std::string& name);
    nfa& rule(int32_t id) { return rules_[static_cast<size_t>(id)]; }
    const std::string& rule_name(int32_t id) const { return names_[static_cast<size_t>(id)]; }
    int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
    grammar build(int32_t root_rule);

  private:
    std::deque<nfa> rules_;  // a deque: adding a rule keeps references to the others valid
    std::vector<std::string> names_;
};

/// Appends to `f`'s NFA the UTF-8 encodings of the code points [lo, hi] (surrogates excluded) as alternatives
/// between `from` and `to`.
void add_code_point_range(nfa& f, int32_t from, int32_t to, uint32_t lo, uint32_t hi);

}  // namespace zmoe::grammar
