#include "workers/model_runner.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.hpp"
#include "step_driver.hpp"
#include "synthetic_model.hpp"
#include "workers/inproc_expert_comm.hpp"
#include "workers/kv_cache.hpp"

namespace zmoe {
namespace {

using testing::synthetic_model;
using testing::temp_dir;

class ModelRunner : public ::testing::Test {
  protected:
    void SetUp() override { synthetic_model::qwen3_moe().write(dir_.str()); }
    runner_options opts() const {
        runner_options o;
        o.num_kv_blocks = 8;
        o.block_size = 4;
        o.num_threads = 2;
        return o;
    }
    static scheduled_seq seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> blocks) {
        scheduled_seq s;
        s.request_id = id;
        s.token_ids = std::move(tokens);
        s.start_pos = start;
        s.block_table = std::move(blocks);
        s.do_sample = true;
        return s;
    }
    static std::string error_of(model_runner& r, const step_request& q) {
        try {
            r.execute(q);
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
            return e.what();
        }
        ADD_FAILURE() << "no error";
        return "";
    }
    temp_dir dir_;
};

TEST_F(ModelRunner, RejectsMalformedRequests) {
    model_runner r(dir_.str(), opts());
    step_request q;
    q.seqs = {seq(1, {3, 200}, 0, {0})};
    EXPECT_NE(error_of(r, q).find("token 200 outside the vocabulary"), std::string::npos);
    q.seqs = {seq(1, {1, 2, 3, 4, 5}, 0, {0})};
    EXPECT_NE(error_of(r, q).find("does not cover position 4"), std::string::npos);
    q.seqs = {seq(1, {1}, 0, {8})};
    EXPECT_NE(error_of(r, q).find("KV block 8"), std::string::npos);
    q.seqs = {seq(1, {kPlaceholderToken}, 0, {0})};
    EXPECT_NE(error_of(r, q).find("placeholder"), std::string::npos);
    q.seqs = {seq(1, {1}, 0, {0}), seq(1, {2}, 0, {1})};
    EXPECT_NE(error_of(r, q).find("scheduled twice"), std::string::npos);
    q.seqs = {seq(1, {1}, 0, {0})};
    q.seqs[0].sampling.top_p = 0.f;
    q.seqs[0].sampling.temperature = 1.f;
    EXPECT_NE(error_of(r, q).find("top_p"), std::string::npos);
    // Still serviceable after the errors.
    q.seqs = {seq(1, {1, 2}, 0, {0})};
    EXPECT_EQ(r.execute(q).tokens.size(), 1u);
}

TEST_F(ModelRunner, PlaceholderIsTheLastSampledTokenUntilFinished) {
    model_runner r(dir_.str(), opts());
    step_request prefill;
    prefill.seqs = {seq(5, {3, 4, 5}, 0, {2})};
    const step_result first = r.execute(prefill);
    ASSERT_EQ(first.tokens.size(), 1u);

    // Decode with the placeholder, and the same decode spelled out with the real token on a second runner.
    step_request decode;
    decode.seqs = {seq(5, {kPlaceholderToken}, 3, {2})};
    std::vector<std::vector<float>> with_placeholder, explicit_token;
    r.execute(decode, &with_placeholder);
    model_runner r2(dir_.str(), opts());
    r2.execute(prefill);
    decode.seqs[0].token_ids = {first.tokens[0].token_id};
    r2.execute(decode, &explicit_token);
    EXPECT_EQ(with_placeholder, explicit_token);

    // Once finished, the request's kept token is gone.
    step_request done;
    done.finished_ids = {5};
    EXPECT_TRUE(r.execute(done).tokens.empty());
    step_request again;
    again.seqs = {seq(5, {kPlaceholderToken}, 4, {2, 3})};
    try {
        r.execute(again);
        ADD_FAILURE() << "placeholder of a finished request accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
    }
}

TEST_F(ModelRunner, ReportsExpertCountsPerMoeLayer) {
    model_runner r(dir_.str(), opts());
    step_request q;
    q.step_id = 17;
    q.seqs = {seq(1, {3, 4, 5, 6, 7}, 0, {0, 1}), seq(2, {9}, 0, {2})};
    q.seqs[0].do_sample = false;  // a prefill chunk that is not the prompt's last
    const step_result res = r.execute(q);
    EXPECT_EQ(res.step_id, 17u);
    ASSERT_EQ(res.tokens.size(), 1u);
    EXPECT_EQ(res.tokens[0].request_id, 2u);
    const model_config& c = r.config();
    ASSERT_EQ(res.expert_counts.size(), static_cast<size_t>(c.num_moe_layers() * c.num_experts));
    uint32_t total = 0;
    for (uint32_t n : res.expert_counts) total += n;
    EXPECT_EQ(total, 6u * c.num_experts_per_tok);  // 6 tokens, one MoE layer, top-2
    EXPECT_GT(res.compute_ms, 0.0);
    // An empty step is valid and routes nothing.
    const step_result empty = r.execute(step_request{});
    EXPECT_TRUE(empty.tokens.empty());
    for (uint32_t n : empty.expert_counts) EXPECT_EQ(n, 0u);
}

TEST_F(ModelRunner, KvBlocksForBudget) {
    const model_config c = model_config::load(dir_.str());
    const int64_t per_block = kv_cache::bytes_per_block(c, 16);
    EXPECT_EQ(per_block, 2 * c.num_layers * 16 * c.num_kv_heads * c.head_dim * 4);
    EXPECT_EQ(kv_blocks_for_budget(c, 16, per_block * 10 + per_block / 2), 10);
    EXPECT_EQ(kv_blocks_for_budget(c, 16, per_block - 1), 0);
}

// A rank handed a bad request still joins the step's exchanges, so its peers finish their step.
TEST_F(ModelRunner, BadRequestOnOneRankDoesNotHangThePeers) {
    inproc_expert_hub hub(2);
    std::string errors[2];
    size_t tokens[2] = {0, 0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            inproc_expert_comm comm(hub, r);
            runner_options o = opts();
            o.rank = r;
            o.world_size = 2;
            o.comm = &comm;
            o.num_threads = 1;
            model_runner runner(dir_.str(), o);
            step_request q;
            q.seqs = {seq(1, {r == 0 ? 999 : 3}, 0, {0})};
            try {
                tokens[r] = runner.execute(q).tokens.size();
            } catch (const error& e) {
                errors[r] = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_NE(errors[0].find("token 999"), std::string::npos) << errors[0];
    EXPECT_EQ(errors[1], "");
    EXPECT_EQ(tokens[1], 1u);
}

// Dual-batch overlap over 4 in-process ranks: every step split in two micro-batches gives the same tokens and the
// same logits, bitwise, as unsplit steps, through chunked prefill and decode; rank 3 has no work and still joins
// both micro-batches' exchanges (else the others would hang).
TEST_F(ModelRunner, DualBatchStepsGiveTheUnsplitLogits) {
    constexpr int kWorld = 4, kSteps = 9;
    auto run = [&](bool dual) {
        std::vector<std::vector<std::vector<float>>> logits(kWorld);
        std::vector<std::vector<int32_t>> tokens(kWorld);
        inproc_expert_hub hub(kWorld);
        std::vector<std::thread> threads;
        for (int r = 0; r < kWorld; ++r) {
            threads.emplace_back([&, r] {
                inproc_expert_comm comm(hub, r);
                runner_options o = opts();
                o.num_kv_blocks = 32;
                o.rank = r;
                o.world_size = kWorld;
                o.comm = &comm;
                o.num_threads = 1;
                model_runner runner(dir_.str(), o);
                testing::step_driver driver(o.block_size, 5);  // chunks of 5 prompt tokens
                if (r < 3) {
                    driver.add(1, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, 4);
                    driver.add(2, {2, 7, static_cast<int32_t>(r)}, 5);
                    if (r == 1) driver.add(3, {8, 8}, 6);
                }
                for (int step = 0; step < kSteps; ++step) {
                    step_request q = driver.next();
                    q.dual_batch = dual;
                    std::vector<std::vector<float>> lg;
                    const step_result res = runner.execute(q, &lg);
                    driver.record(q, res, lg);
                    for (const auto& t : res.tokens) tokens[r].push_back(t.token_id);
                    for (auto& l : lg) logits[r].push_back(std::move(l));
                }
            });
        }
        for (auto& t : threads) t.join();
        return std::make_pair(tokens, logits);
    };
    const auto plain = run(false);
    const auto dual = run(true);
    for (int r = 0; r < kWorld; ++r) {
        EXPECT_EQ(dual.first[r], plain.first[r]) << "rank " << r;
        EXPECT_TRUE(dual.second[r] == plain.second[r]) << "rank " << r << ": logits differ";
    }
    EXPECT_GT(plain.first[1].size(), 10u);  // prefill chunks and decodes did run
    EXPECT_TRUE(plain.first[3].empty());
}

TEST_F(ModelRunner, RejectsMismatchedCommunicator) {
    runner_options o = opts();
    o.world_size = 2;  // but no comm: the local one is a world of 1
    try {
        model_runner r(dir_.str(), o);
        ADD_FAILURE() << "accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
    }
}

}  // namespace
}  // namespace zmoe
