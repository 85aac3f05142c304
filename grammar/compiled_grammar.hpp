#pragma once
// A grammar bound to a vocabulary, with its adaptive token mask cache (the idea xgrammar published): for each scan
// position of the automaton, the text tokens split into those accepted whatever the stack below holds, those
// rejected whatever it holds, and the few "uncertain" ones whose bytes may run past the end of the position's
// rule. Only the uncertain ones are matched against the real stack at run time. A token that can leave the rule
// is uncertain only when the byte after the rule's end is in the rule's FOLLOW set; otherwise it is rejected here.
// Each position's entry is computed on first use (thread-safe, once) or all at once by precompute_all().

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/grammar.hpp"
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

    /// The mask entry of scan position `state` (computed on first call; thread-safe).
    const position_mask& mask_at(int32_t state) const;
    /// Computes every scan position's entry now, on `num_threads` threads (positions are independent).
    void precompute_all(int num_threads = 1) const;
    int32_t num_scan_positions() const;

  private:
    position_mask compute(int32_t state) const;

    grammar g_;
    std::shared_ptr<const tokenizer_info> tok_;
    mutable std::unique_ptr<std::once_flag[]> once_;
    mutable std::vector<std::unique_ptr<position_mask>> masks_;
};

}  // namespace zmoe::grammar
