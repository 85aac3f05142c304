#pragma once
// Drives a scheduler against fake workers the way the engine core's loop does (schedule -> run -> update, with up
// to two steps in flight when async), recording every request's tokens and how it ended.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "engine_core/scheduler.hpp"
#include "fake_worker.hpp"

namespace zmoe::testing {

constexpr int32_t kVocab = 64;

struct run_outcome {
    std::map<uint64_t, std::vector<int32_t>> tokens;
    std::map<uint64_t, finish_reason> reasons;
    std::map<uint64_t, int32_t> cached_tokens;  ///< num_cached_tokens of each request's outputs
    scheduler_stats stats;
    int64_t num_placeholders = 0;
    int32_t max_in_flight = 0;
    int64_t num_steps = 0;
};

/// What a request must generate: the fake worker's token function applied step by step, with the stop rules.
inline std::vector<int32_t> reference_output(const new_request& req) {
    std::vector<int32_t> seq = req.prompt;
    std::vector<int32_t> out;
    while (static_cast<int32_t>(out.size()) < req.max_tokens) {
        const int32_t t = fake_worker::expected_token(req.id, seq, kVocab);
        seq.push_back(t);
        out.push_back(t);
        if (!req.ignore_eos &&
            std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), t) != req.stop_token_ids.end()) {
            break;
        }
    }
    return out;
}

class harness {
  public:
    explicit harness(scheduler_config config) : sched(config) {
        for (int32_t r = 0; r < static_cast<int32_t>(config.num_blocks_per_rank.size()); ++r) {
            workers.emplace_back(r, config.num_blocks_per_rank[static_cast<size_t>(r)], config.block_size, kVocab,
                                 &prompt_lens);
        }
    }

    int32_t add(const new_request& req) {
        prompt_lens[req.id] = static_cast<int32_t>(req.prompt.size());
        return sched.add_request(req);
    }

    /// Sends one step to the fake workers (they run it at once, as a worker runs steps in order).
    void send() {
        std::vector<step_request> steps = sched.schedule();
        EXPECT_EQ(steps.size(), workers.size());
        for (const step_request& s : steps) EXPECT_EQ(s.step_id, steps.front().step_id);
        if (on_step) on_step(steps);
        std::vector<step_result> results;
        for (size_t r = 0; r < steps.size(); ++r) results.push_back(workers[r].run(steps[r]));
        // Reverse rank order: update() must not depend on the order results are collected in.
        std::reverse(results.begin(), results.end());
        pending.push_back(std::move(results));
        outcome.max_in_flight = std::max(outcome.max_in_flight, sched.num_in_flight());
        ++outcome.num_steps;
    }

    /// Applies the oldest step's results.
    void collect() {
        ASSERT_FALSE(pending.empty());
        const std::vector<request_output> outs = sched.update(pending.front());
        pending.pop_front();
        record(outs);
    }

    void record(const std::vector<request_output>& outs) {
        for (const request_output& o : outs) {
            EXPECT_FALSE(outcome.reasons.contains(o.id)) << "output for request " << o.id << " after it finished";
            auto& toks = outcome.tokens[o.id];
            toks.insert(toks.end(), o.new_tokens.begin(), o.new_tokens.end());
            if (o.finished) outcome.reasons[o.id] = o.reason;
            outcome.cached_tokens[o.id] = o.num_cached_tokens;
        }
    }

    /// Runs until every request has finished. `arrivals[k]` are added before loop iteration k.
    run_outcome run(std::map<int64_t, std::vector<new_request>> arrivals = {}) {
        for (int64_t iter = 0; iter < 200000; ++iter) {
            for (auto it = arrivals.begin(); it != arrivals.end() && it->first <= iter;) {
                for (const new_request& r : it->second) add(r);
                it = arrivals.erase(it);
            }
            if (sched.num_unfinished() == 0 && pending.empty() && arrivals.empty()) break;
            if (sched.can_schedule() && sched.has_pending_work()) {
                send();
            } else if (!pending.empty()) {
                collect();
            } else if (arrivals.empty()) {
                ADD_FAILURE() << "scheduler stuck: " << sched.num_unfinished() << " unfinished, nothing to do";
                break;
            }
        }
        EXPECT_EQ(sched.num_unfinished(), 0);
        outcome.stats = sched.stats();
        for (const fake_worker& w : workers) outcome.num_placeholders += w.num_placeholders;
        return outcome;
    }

    scheduler sched;
    std::vector<fake_worker> workers;
    std::unordered_map<uint64_t, int32_t> prompt_lens;
    std::deque<std::vector<step_result>> pending;
    std::function<void(const std::vector<step_request>&)> on_step;
    run_outcome outcome;
};

/// A mixed workload: prompt lengths 1..max_prompt, max_tokens 1..max_new, stop token 3 (with ignore_eos on some).
inline std::vector<new_request> random_workload(uint32_t seed, int32_t num_requests, int32_t max_prompt,
                                                int32_t max_new) {
    std::mt19937 rng(seed);
    std::vector<new_request> reqs;
    for (int32_t i = 0; i < num_requests; ++i) {
        new_request r;
        r.id = 1000 + static_cast<uint64_t>(i);
        const int32_t len = std::uniform_int_distribution<int32_t>(1, max_prompt)(rng);
        for (int32_t k = 0; k < len; ++k)
            r.prompt.push_back(std::uniform_int_distribution<int32_t>(0, kVocab - 1)(rng));
        r.max_tokens = std::uniform_int_distribution<int32_t>(1, max_new)(rng);
        r.stop_token_ids = {3};
        r.ignore_eos = (i % 5) == 0;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

}  // namespace zmoe::testing
