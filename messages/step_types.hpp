#pragma once
// Plain data shared by the engine core's scheduler and the workers' model runner: what one data-parallel
// rank computes in one step, and what it reports back. No ZeroMQ, no msgpack here: the codec for these
// lives in worker_protocol.hpp; the scheduler and the model runner use these structs directly, so both can be
// unit-tested without sockets.

#include <cstdint>
#include <optional>
#include <vector>

#include "messages/structured_output.hpp"

namespace zmoe {

/// Stands in for "the token this worker sampled for this request in its previous step". Async scheduling
/// sends step N+1 before step N's tokens reach the engine core; the worker substitutes the token it kept.
constexpr int32_t kPlaceholderToken = -1;

/// Sampling of one request. temperature 0 means greedy (top_p/top_k ignored). Sampling is always seeded:
/// the frontend draws a seed when the client gives none, and a worker draws the token for the request's
/// n-th generated token from a counter-based RNG keyed on (seed, n), so the same seed gives the same
/// output whatever the batch, the rank or the step timing.
///
/// Logits processing, in this order (docs/sampling.md): logit_bias added, then the penalties, then the stop ids
/// banned while fewer than min_tokens tokens are generated; then temperature, top-k, min-p, top-p and the draw.
/// Every appended field's default turns it off.
struct sampling_params {
    float temperature = 0.f;
    float top_p = 1.f;  ///< (0, 1]
    int32_t top_k = 0;  ///< 0 = off
    uint64_t seed = 0;
    float min_p = 0.f;                           ///< [0, 1]: keep tokens with p >= min_p * max p; 0 = off
    float presence_penalty = 0.f;                ///< subtracted from the logit of every token the output contains
    float frequency_penalty = 0.f;               ///< subtracted once per occurrence in the output
    float repetition_penalty = 1.f;              ///< > 0; tokens of prompt or output: l > 0 ? l / r : l * r; 1 = off
    uint32_t min_tokens = 0;                     ///< min_tokens_stop_ids cannot be sampled before this many tokens
    std::vector<int32_t> min_tokens_stop_ids{};  ///< filled by the engine core: stop ids and EOS (unless ignore_eos)
    std::vector<int32_t> logit_bias_ids{};       ///< unique token ids
    std::vector<float> logit_bias_values{};      ///< added to those logits, one per id
    int32_t logprobs = -1;  ///< -1 = none; k >= 0: the sampled token's logprob and the k most likely (k <= 20)
    bool operator==(const sampling_params&) const = default;
    /// Whether sampling reads the request's fed tokens (the penalties): a worker then keeps every token it is fed,
    /// so the engine core must feed the whole prompt (no prefix-cache hit skips part of it).
    bool reads_token_history() const {
        return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f;
    }
};

/// Log-probabilities of one sampled token: log-softmax of the raw logits (before any processing or temperature,
/// as vLLM reports by default).
struct token_logprobs {
    float logprob = 0.f;                ///< of the sampled token
    std::vector<int32_t> top_ids{};     ///< the k most likely tokens, most likely first (lower id on ties)
    std::vector<float> top_logprobs{};  ///< their logprobs
    bool operator==(const token_logprobs&) const = default;
};

/// One sequence's share of a step on one data-parallel rank.
struct scheduled_seq {
    uint64_t request_id = 0;
    /// Tokens to run this step: a prefill chunk, or one decode token (which may be kPlaceholderToken).
    std::vector<int32_t> token_ids;
    /// Position of token_ids[0]; equals the number of this sequence's tokens already in the KV cache.
    int32_t start_pos = 0;
    /// Physical KV block ids of this sequence on this rank, covering positions [0, start_pos + token_ids.size()).
    std::vector<int32_t> block_table;
    /// Sample a token after the last fed token (true for decodes and for the last chunk of a prompt).
    bool do_sample = false;
    /// Number of tokens this request has generated before this sample (the RNG counter).
    uint32_t sample_index = 0;
    sampling_params sampling;
    /// Appended: the request's structured-output constraint, sent only where the worker must (re)build the sequence's
    /// matcher: on the request's first sample, and on the last chunk of a recompute after preemption (kind none
    /// elsewhere, also for constrained requests: the worker keeps their matcher until finished_ids names them).
    structured_output structured{};
    /// Appended: with `structured` set, the tokens the sequence has generated so far (sample_index of them), which
    /// the worker replays into a fresh matcher when it holds none at that position.
    std::vector<int32_t> output_token_ids{};
};

/// What the engine core sends one rank for one step. Every rank gets one every step, empty or not:
/// the MoE all-to-all is a collective.
struct step_request {
    uint64_t step_id = 0;
    std::vector<scheduled_seq> seqs;
    /// Requests whose per-request worker state (kept sampled token) can be dropped.
    std::vector<uint64_t> finished_ids;
    /// Dual-batch overlap: run this step as two micro-batches, one's expert exchanges in flight while the other
    /// computes. The engine core sets it for every rank of a step alike (dbo_split.hpp), so all ranks make the
    /// same number of exchanges; a rank with no tokens still joins both micro-batches' exchanges.
    bool dual_batch = false;
};

struct sampled_token {
    uint64_t request_id = 0;
    int32_t token_id = 0;
    std::optional<token_logprobs> logprobs{};  ///< when the request asked for logprobs
};

/// What one rank reports for one step.
struct step_result {
    uint64_t step_id = 0;
    int32_t rank = 0;
    std::vector<sampled_token> tokens;  ///< one per scheduled_seq with do_sample, in step order
    /// Tokens routed to each logical expert by this rank's tokens: [num_moe_layers * num_experts], row-major.
    std::vector<uint32_t> expert_counts;
    double compute_ms = 0.0;
    /// Appended: frames this rank has dropped since it started (all-to-all frames without the run's secret, too
    /// short, from an impossible sender or too far ahead; undecodable engine-core messages). A running total.
    uint64_t frames_dropped = 0;
    /// Appended: how long this rank's compute thread waited, idle, between finishing its previous task and
    /// receiving this step (0 when the step was already queued): time the device had no step to run.
    double wait_ms = 0.0;
    /// Appended: steps this rank has redone on the exact expert exchange since it started, because some rank's fixed
    /// window overflowed (CUDA expert parallelism; each costs about a second step). A running total.
    uint64_t exchange_steps_redone = 0;
};

}  // namespace zmoe
