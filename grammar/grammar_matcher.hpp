#pragma once
// One sequence's position in a compiled grammar: a set of stacks over the pushdown automaton, advanced token by
// token. fill_next_token_bitmask() writes which tokens may come next (the cached context-independent split of each
// stack top's position, plus the uncertain tokens checked against the real stack); stop tokens are allowed only
// where the grammar may end. Every accepted token pushes a snapshot, so rollback(n) undoes the last n tokens.
// Not thread-safe: one matcher per sequence; matchers of one compiled_grammar may run on different threads.

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.hpp"
#include "grammar/stack_step.hpp"

namespace zmoe::grammar {

class grammar_matcher {
  public:
    explicit grammar_matcher(std::shared_ptr<const compiled_grammar> g);

    /// Advances over token `id`; false (state unchanged) when the grammar does not allow it here. A stop token is
    /// allowed where the grammar may end, and terminates the matcher.
    bool accept_token(int32_t id);
    /// Advances over raw bytes (as one step for rollback); false and unchanged when they do not fit.
    bool accept_bytes(std::string_view bytes);
    /// Writes the allowed tokens into `mask` (tokenizer_info::bitmask_words() words, bit i of word i/32 = token i).
    /// After termination only the stop tokens are set.
    void fill_next_token_bitmask(uint32_t* mask);
    /// Whether a stop token is allowed now (the text so far is a complete sentence of the grammar).
    bool can_terminate() const { return history_.back().accepting; }
    /// Whether a stop token has been accepted.
    bool is_terminated() const { return history_.back().terminated; }
    /// Undoes the last `n` accepted tokens (or accept_bytes calls). Throws zmoe::error(invalid_argument) when
    /// fewer than `n` were accepted.
    void rollback(int32_t n);
    /// Back to the start.
    void reset();
    int32_t num_accepted() const { return static_cast<int32_t>(history_.size()) - 1; }
    /// Number of stacks in the current state (for tests and benchmarks).
    size_t num_stacks() const { return history_.back().tops.size(); }
    /// The automaton states on top of the current stacks (for tests and benchmarks).
    std::vector<int32_t> top_states() const;
    const compiled_grammar& compiled() const { return *g_; }

  private:
    struct snapshot {
        std::vector<int32_t> tops;  // persistent node ids whose states are scan positions
        bool accepting = false;
        bool terminated = false;
    };
    bool advance(std::string_view bytes);
    int32_t intern(int32_t state, int32_t parent);
    /// Whether the uncertain tokens of `pm` fit on the stack `top`; sets their bits.
    void check_uncertain(int32_t top, const position_mask& pm, uint32_t* mask);

    std::shared_ptr<const compiled_grammar> g_;
    stack_stepper stepper_;
    std::vector<stack_node> pool_;  // [0, persistent_) interned; the rest scratch of the step in progress
    size_t persistent_ = 0;
    std::unordered_map<uint64_t, int32_t> interned_;
    std::vector<snapshot> history_;
    // Scratch buffers reused between calls.
    std::vector<int32_t> cur_, next_, nodes_;
    std::vector<size_t> begin_, pool_mark_;
    std::vector<uint8_t> acc_;
    std::vector<uint32_t> tmp_mask_;
};

}  // namespace zmoe::grammar
