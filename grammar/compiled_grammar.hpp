#pragma once
// A grammar bound to a vocabulary, with its adaptive token mask cache (the idea xgrammar published): for each scan
// position of the automaton, the text tokens split into those accepted whatever the stack below holds, those
// rejected whatever it holds, and the few "uncertain" ones whose bytes may run past the end of the position's
// rule. Only the uncertain ones are matched against the real stack at run time. A token that can leave the rule
// is uncertain only when the byte after the rule's end is in the rule's FOLLOW set; otherwise it is rejected here.
// Positions whose automata agree up to the longest token share one entry; positions that differ only past a '"' or
// '\\' share the walk of the tokens without those bytes (state_classes.hpp); a position that agrees with an earlier
// walked one up to d bytes (a bounded repetition) reuses its walk for the tokens of at most d bytes. So a grammar
// needs a few dozen full vocabulary walks, not one per position. Each entry is computed on first use (thread-safe,
// once) or all at once by precompute_all(), which grammar_compiler runs when it compiles.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/state_classes.hpp"
#include "grammar/tokenizer_info.hpp"

namespace zmoe::grammar {

/// The split of the text tokens at one scan position.
struct position_mask {
    enum class storage : uint8_t { accepted_list, rejected_list, bitset };
    storage kind = storage::accepted_list;
    std::vector<int32_t> ids;            ///< accepted_list: accepted ids; rejected_list: rejected text ids
    std::vector<uint32_t> bits;          ///< bitset: accepted ids
    std::vector<int32_t> uncertain;      ///< indices into tokenizer_info::sorted_ids(), ascending
    std::vector<int32_t> uncertain_lcp;  ///< common prefix length of each uncertain token with the one before it
    int32_t num_accepted = 0;
};

class compiled_grammar {
  public:
    compiled_grammar(grammar g, std::shared_ptr<const tokenizer_info> tok);

    const grammar& rules() const { return g_; }
    const tokenizer_info& tokenizer() const { return *tok_; }
    const std::shared_ptr<const tokenizer_info>& tokenizer_ptr() const { return tok_; }

    /// The mask entry of scan position `state` (computed on first call; thread-safe). Positions of one class
    /// return the same entry.
    const position_mask& mask_at(int32_t state) const;
    /// Computes every scan position's entry now, on `num_threads` threads (classes are independent).
    void precompute_all(int num_threads = 1) const;
    int32_t num_scan_positions() const;
    /// Distinct entries among the scan positions (positions equal in both kinds of class share one).
    int32_t num_distinct_masks() const;
    /// Walks of the common tokens (one per class over the bytes other than '"' and '\\'; some walk only the
    /// tokens longer than what they reuse).
    int32_t num_common_walks() const;

  private:
    /// Tokens of a walk, as indices into tokenizer_info::sorted_ids(), ascending.
    struct walk_result {
        size_t num_accepted = 0;
        bool accepted_listed = true;   ///< `accepted` holds them (else only `rejected` is filled)
        bool rejected_listed = false;  ///< `rejected` holds the rest of the walked list (uncertain included)
        std::vector<int32_t> accepted, uncertain, rejected;
        std::vector<int32_t> accepted_up_to;  ///< of a full walk: [d] accepted tokens of at most d bytes
    };
    /// Walks the tokens `list` (indices into sorted_ids(), ascending; `list_lcp` their common prefixes) from
    /// position `state`; `rejected` is filled when `always_complement` or when it is the smaller side.
    void walk(int32_t state, const std::vector<int32_t>& list, const std::vector<int32_t>& list_lcp,
              bool always_complement, walk_result& out) const;
    const walk_result& common_walk(int32_t common_class) const;
    position_mask compute(int32_t state) const;

    grammar g_;
    std::shared_ptr<const tokenizer_info> tok_;
    std::vector<uint8_t> plain_;  ///< [num_states] entering the state pushes and pops nothing
    state_classes common_;        ///< equal walks of the common tokens
    /// Per class of common_: the class whose walk it reuses for the tokens of at most `depth` bytes (its states
    /// agree with this one's on every such string: a bounded repetition's positions), walking only the longer ones
    /// itself; anchor -1 when it walks every common token.
    struct common_plan {
        int32_t anchor = -1;
        int32_t depth = 0;
    };
    std::vector<common_plan> plan_;
    mutable std::unique_ptr<std::once_flag[]> mask_once_, common_once_;
    std::vector<int32_t> mask_slot_;   ///< [num_states] the entry of each scan position (-1 elsewhere)
    std::vector<int32_t> slot_state_;  ///< [entries] the position each entry is computed from
    mutable std::vector<std::unique_ptr<position_mask>> masks_;  ///< [entries]
    mutable std::vector<std::unique_ptr<walk_result>> commons_;  ///< [common_.num_classes()]
};

}  // namespace zmoe::grammar
