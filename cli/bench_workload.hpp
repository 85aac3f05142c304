#pragma once
// The requests of a `zmoe bench serve` run and the order in which they may go: the random and prefix-repetition
// datasets (every prompt known before the first is sent, arrivals at the request rate) and the multi-turn dataset
// (a conversation's next turn is built from its history and the model's actual answer, and may go only once that
// answer has ended). The ZeroMQ and HTTP load generators drive one of these each; it owns no socket and no clock.

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cli/bench_serve.hpp"

namespace zmoe::cli {

class bench_workload {
  public:
    /// The run's requests from params (dataset, lengths, seed, request rate). Throws errc::invalid_argument where
    /// the dataset cannot be built (no vocabulary, fewer prompts than prefixes).
    explicit bench_workload(const serve_bench_params& params);

    /// Every request of the run, sent or not: records are indexed the same way. Multi-turn: conversation c's turn t
    /// is request c * num_turns + t.
    size_t size() const { return requests_.size(); }

    /// The prompt and output length of request i. For a multi-turn turn after the first, valid once pop_ready has
    /// returned i (its prompt holds the answer before it).
    const bench_prompt& prompt(size_t i) const { return requests_[i].prompt; }
    /// The conversation and turn (from 0) of request i; -1 for both outside the multi-turn dataset.
    int32_t conversation(size_t i) const { return requests_[i].conversation; }
    int32_t turn(size_t i) const { return requests_[i].turn; }

    /// The next request that may be sent elapsed_s seconds after the start, now marked sent: a conversation's next
    /// turn first (its previous answer has ended: it goes at once and keeps the conversation's place under the
    /// concurrency cap), else the next new request (a prompt of the random or prefix-repetition dataset, a
    /// conversation's first turn) whose arrival time has come. nullopt when none may go now.
    std::optional<size_t> pop_ready(double elapsed_s);

    /// Seconds from the start at which the next new request arrives; +infinity when no new request is left (follow-up
    /// turns have no arrival time: they are ready or not).
    double next_arrival_s() const;

    /// True while some request is neither sent nor given up.
    bool has_unsent() const { return num_unsent_ > 0; }

    /// Request i (sent) has ended; answer: the ids the model generated for it, in order. Multi-turn: on success the
    /// conversation's next turn is built (its history, this answer, new user tokens) and queued; on failure the
    /// conversation stops, and its later turns are given up and returned (never sent). Empty otherwise.
    std::vector<size_t> finish(size_t i, bool success, const std::vector<int32_t>& answer);

    /// Gives up every request not sent yet (the server stalled) and returns them.
    std::vector<size_t> give_up_unsent();

  private:
    enum class state : uint8_t { unsent, sent, ended };
    struct request {
        bench_prompt prompt;
        int32_t conversation = -1;
        int32_t turn = -1;
        state st = state::unsent;
    };
    void build_multi_turn(const serve_bench_params& params);

    std::vector<request> requests_;
    std::vector<size_t> fresh_;     ///< new requests, in arrival order
    std::vector<double> arrival_;   ///< the arrival time of each entry of fresh_
    size_t fresh_next_ = 0;         ///< fresh_[fresh_next_] is the next new request (earlier ones are taken)
    std::deque<size_t> follow_up_;  ///< multi-turn turns whose previous answer has ended
    size_t num_unsent_ = 0;
    uint32_t num_turns_ = 0;
    /// Multi-turn: the new user tokens of every turn, drawn up front from the seed (the same in every run with the
    /// same seed, whatever the answers), conversation-major.
    std::vector<std::vector<int32_t>> user_tokens_;
};

}  // namespace zmoe::cli
