#pragma once
// The workers of an engine_core under test: an engine_core_sink that keeps every step it is sent, per rank, and
// runs them on fake workers (fake_worker.hpp) when the test says so, oldest first, as real workers run their steps
// in order. Each result also reports expert counts (every token of a step routed to experts 0 and 1 of every
// layer: a load EPLB wants to spread), so the EPLB path runs on them.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine_core/engine_core.hpp"
#include "model/model_config.hpp"
#include "scheduler_harness.hpp"

namespace zmoe::testing {

/// A two-layer, four-expert qwen3_moe shape with EOS 5 (the fake workers sample from kVocab = 64 tokens).
inline model_config tiny_moe_model() {
    model_config m;
    m.arch = model_arch::qwen3_moe;
    m.vocab_size = 64;
    m.hidden_size = 8;
    m.num_layers = 2;
    m.num_heads = 2;
    m.num_kv_heads = 1;
    m.head_dim = 4;
    m.num_experts = 4;
    m.num_experts_per_tok = 2;
    m.moe_intermediate_size = 16;
    m.max_position_embeddings = 256;
    m.eos_token_ids = {5};
    return m;
}

class fake_cluster : public engine_core_sink {
  public:
    struct sent_move {
        worker_expert_move move;
        uint64_t steps_sent_before = 0;  ///< steps (all ranks) sent before the move went out
    };

    fake_cluster(int32_t num_ranks, int32_t num_blocks, int32_t block_size, int32_t num_moe_layers, int32_t num_experts)
        : num_moe_layers_(num_moe_layers), num_experts_(num_experts) {
        for (int32_t r = 0; r < num_ranks; ++r) workers_.emplace_back(r, num_blocks, block_size, kVocab, &prompt_lens);
    }

    size_t send_step(int32_t rank, const step_request& step) override {
        EXPECT_GE(rank, 0);
        EXPECT_LT(rank, static_cast<int32_t>(workers_.size()));
        if (rank == 0) {
            EXPECT_EQ(step.step_id, num_steps_sent) << "steps go out in id order, every id once";
            unrun_.emplace_back();
            ++num_steps_sent;
        }
        EXPECT_FALSE(unrun_.empty());
        if (unrun_.empty()) return 0;
        if (!unrun_.back().empty()) {
            EXPECT_EQ(step.step_id, unrun_.back().front().step_id);
        }
        EXPECT_EQ(static_cast<int32_t>(unrun_.back().size()), rank) << "every rank's share, in rank order";
        unrun_.back().push_back(step);
        return 100;
    }

    void send_expert_move(const worker_expert_move& move) override { moves.push_back({move, num_steps_sent}); }

    void send_outputs(const engine_outputs& o) override {
        outputs.push_back(o);
        for (const auto& out : o.outputs) {
            EXPECT_FALSE(finished.contains(out.request_id))
                << "output for request " << out.request_id << " after it ended";
            auto& t = tokens[out.request_id];
            t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
            if (out.finished) finished[out.request_id] = out;
        }
    }

    /// Steps sent whose results the workers have not produced yet.
    size_t num_unrun() const { return unrun_.size(); }

    /// Runs the oldest step not yet run on every rank; its results, last rank first (the engine must not depend on
    /// the order they arrive in).
    std::vector<step_result> run_oldest() {
        EXPECT_FALSE(unrun_.empty());
        if (unrun_.empty()) return {};
        std::vector<step_request> step = std::move(unrun_.front());
        unrun_.pop_front();
        EXPECT_EQ(step.size(), workers_.size());
        std::vector<step_result> results;
        for (size_t r = 0; r < step.size(); ++r) {
            step_result res = workers_[r].run(step[r]);
            int64_t num_tokens = 0;
            for (const auto& s : step[r].seqs) num_tokens += static_cast<int64_t>(s.token_ids.size());
            if (num_moe_layers_ > 0) {
                res.expert_counts.assign(static_cast<size_t>(num_moe_layers_ * num_experts_), 0);
                for (int32_t l = 0; l < num_moe_layers_; ++l)
                    for (int32_t e = 0; e < 2; ++e)
                        res.expert_counts[static_cast<size_t>(l * num_experts_ + e)] =
                            static_cast<uint32_t>(num_tokens);
            }
            results.push_back(std::move(res));
        }
        std::reverse(results.begin(), results.end());
        return results;
    }

    std::unordered_map<uint64_t, int32_t> prompt_lens;  ///< for the fake workers' sample_index check
    uint64_t num_steps_sent = 0;
    std::vector<sent_move> moves;
    std::vector<engine_outputs> outputs;
    std::unordered_map<uint64_t, std::vector<int32_t>> tokens;
    std::unordered_map<uint64_t, engine_request_output> finished;

  private:
    int32_t num_moe_layers_;
    int32_t num_experts_;
    std::vector<fake_worker> workers_;
    std::deque<std::vector<step_request>> unrun_;
};

}  // namespace zmoe::testing
