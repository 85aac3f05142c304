#pragma once
// What the engine core's scheduler takes in (a new request) and hands back (a request's new tokens and its end).

#include <cstdint>
#include <string>
#include <vector>

#include "messages/finish_reason.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

/// A tokenized request, as the frontend hands it over. The id is assigned by the frontend and must be unique among
/// the requests the scheduler currently holds.
struct new_request {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    sampling_params sampling;
    int32_t max_tokens = 16;
    /// Tokens that end generation (eos and the like); ignored when ignore_eos.
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    /// Prefix caching: only requests with the same salt share cached blocks (empty = the unsalted cache).
    std::string cache_salt{};
    /// Structured outputs: the constraint the worker sampling this request masks it with (kind none: none).
    structured_output structured{};
};

/// One request's share of a step's results: the tokens it gained and whether it ended.
struct request_output {
    uint64_t id = 0;
    std::vector<int32_t> new_tokens;
    bool finished = false;
    finish_reason reason = finish_reason::none;
    std::vector<token_logprobs> new_logprobs{};  ///< one per new token when the request asked for logprobs
    /// Prompt tokens whose KV came from the prefix cache when the request was first scheduled (0 before that).
    int32_t num_cached_tokens = 0;
};

}  // namespace zmoe
