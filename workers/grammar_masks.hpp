#pragma once
// Structured outputs on the worker: one grammar matcher per constrained sequence, and each step's token bitmasks.
// The worker is where the sampled token is first known (async scheduling: the engine core learns it a step later),
// so the matcher lives here. A step's masks are computed on a thread of their own while the step's forward pass
// runs: begin_step() starts them (advancing each matcher over the token sampled for its sequence in the previous
// step, then filling the mask), finish_masks() waits for them just before sampling, end_step() records the tokens
// the step sampled. docs/structured_outputs.md ("Where the matcher runs").

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_compiler.hpp"
#include "grammar/grammar_matcher.hpp"
#include "messages/step_types.hpp"
#include "workers/sampler.hpp"
#include "workers/thread_pool.hpp"

namespace zmoe {

/// The distribution of the time one constrained row's mask took (advance over the previous token + fill), in µs.
struct mask_time_stats {
    uint64_t num_masks = 0;
    double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
    uint64_t num_refused = 0;  ///< sampled tokens a matcher refused (the sequence then may only stop)
    /// Stop tokens sampled after the grammar had ended (a request with ignore_eos keeps sampling its only allowed
    /// token, EOS, once its output is complete): not refusals.
    uint64_t num_past_end = 0;
};

/// The vocabulary of a tokenizer as the grammar engine needs it: each id's bytes, `stop_ids` (the model's EOS ids:
/// allowed only where a grammar may end), special ids never, and ids from the tokenizer's size up to `vocab_size`
/// (the logits' width; Qwen3 pads 151 669 tokens to 151 936 rows) never. Throws like tokenizer::from_file.
std::shared_ptr<const grammar::tokenizer_info> load_grammar_vocabulary(const std::string& tokenizer_path,
                                                                       const std::vector<int32_t>& stop_ids,
                                                                       int32_t vocab_size);

class grammar_masks {
  public:
    /// The vocabulary (load_grammar_vocabulary) loads on a thread of its own when the first constrained sequence
    /// comes, which waits for it. `num_threads`: threads filling one step's masks (the mask thread included).
    grammar_masks(std::string tokenizer_path, std::vector<int32_t> stop_ids, int32_t vocab_size, int num_threads = 1);
    /// The same over an already built vocabulary (tests).
    grammar_masks(std::shared_ptr<const grammar::tokenizer_info> vocab, int num_threads = 1);
    ~grammar_masks();
    grammar_masks(const grammar_masks&) = delete;
    grammar_masks& operator=(const grammar_masks&) = delete;

    /// Starts a step whose rows `batch` holds (gather_samples: one per do_sample sequence of `request`, in step
    /// order): drops the matchers of request.finished_ids, sets batch.seqs[r].mask_row for every constrained row,
    /// and starts computing their masks. A row carrying a constraint (scheduled_seq::structured) gets a fresh
    /// matcher that replays its output_token_ids; any other row of a request with a matcher is constrained by it.
    /// `request` must stay alive until finish_masks. No constrained row: nothing starts.
    void begin_step(const step_request& request, sample_batch& batch);
    /// Waits for the masks begin_step started and points batch.masks at them (nothing when none started).
    void finish_masks(sample_batch& batch);
    /// The tokens the step sampled (any order; those of unconstrained requests are ignored): each matcher advances
    /// over its sequence's token at the start of its next mask.
    void end_step(std::span<const sampled_token> tokens);

    /// uint32 words of one mask row.
    int32_t mask_words() const { return mask_words_; }
    /// Requests with a matcher.
    size_t num_sequences() const { return seqs_.size(); }
    /// The masks' timings so far.
    mask_time_stats stats() const;

  private:
    struct seq_state {
        std::unique_ptr<grammar::grammar_matcher> matcher;
        std::vector<int32_t> pending;  // sampled tokens not yet accepted
        bool refused = false;          // a token did not fit: only stop tokens from now on
        int32_t past_end = 0;          // stop tokens sampled after the matcher terminated (ignore_eos)
    };
    struct row_job {
        seq_state* seq;
        const scheduled_seq* sched;
        int32_t mask_row;
    };
    const grammar::tokenizer_info& vocab();
    grammar::grammar_compiler& compiler();
    void compute_row(const row_job& job);
    /// Builds (from the constraint and its replayed tokens) or advances (over the pending tokens) the matcher of
    /// one row; `refused` is set when a token does not fit. Throws zmoe::error when no matcher can be had.
    void advance(seq_state& st, const scheduled_seq& s, bool& refused);
    /// The matcher of `st` takes sampled token t: accepted, or a stop token after the grammar ended (counted in
    /// st.past_end), or refused.
    void take(seq_state& st, int32_t t, bool& refused);
    void stop_only(uint32_t* mask);

    std::string tokenizer_path_;
    std::vector<int32_t> stop_ids_;
    int32_t vocab_size_ = 0;
    std::shared_future<std::shared_ptr<const grammar::tokenizer_info>> vocab_;
    std::once_flag compiler_once_;
    std::unique_ptr<grammar::grammar_compiler> compiler_;
    int32_t mask_words_ = 0;
    thread_pool pool_;
    std::unordered_map<uint64_t, seq_state> seqs_;
    std::vector<row_job> jobs_;
    std::vector<uint32_t> masks_;  // [jobs_.size(), mask_words_]
    std::future<void> running_;

    mutable std::mutex stats_mu_;
    std::vector<float> times_us_;  // every row's mask time
    uint64_t num_refused_ = 0;
    uint64_t num_past_end_ = 0;
};

}  // namespace zmoe
