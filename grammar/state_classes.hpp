#pragma once
// Positions of a grammar whose token masks are equal without computing them: a bounded bisimulation of the
// pushdown automaton over a subset of the byte alphabet. Two states are in one class when, for every byte string of
// at most `max_len` bytes drawn from the alphabet, walking it from either state (rule calls and returns included)
// gives the same outcome at every step: the same choice of allowed bytes, rule ends, calls and FOLLOW sets. The
// token mask cache walks the vocabulary from one state per class and shares the result with the others.

#include <bitset>
#include <cstdint>
#include <vector>

#include "grammar/grammar.hpp"

namespace zmoe::grammar {

struct state_classes {
    std::vector<int32_t> of_state;        ///< [num_states] the class of each state
    std::vector<int32_t> representative;  ///< [num_classes] one state of each class (the smallest id)
    /// by_round[d][s]: the class of state s among those that agree on byte strings of at most d bytes (the last
    /// round is of_state; kept only when asked for).
    std::vector<std::vector<int32_t>> by_round;
    int32_t num_classes() const { return static_cast<int32_t>(representative.size()); }
};

/// Classes of states that agree on every byte string of at most `max_len` bytes over `alphabet` (Moore's partition
/// refinement, `max_len` rounds or until stable; until stable when a rule that can end without consuming a byte is
/// called, since a return then costs no byte).
state_classes compute_state_classes(const grammar& g, const std::bitset<256>& alphabet, size_t max_len,
                                    bool keep_rounds = false);

}  // namespace zmoe::grammar
