#pragma once
// The transformers reference of a model fixture (tests/fixtures/models/<name>/reference.json, written by
// scripts/make_model_fixtures.py), shared by the CPU and CUDA worker tests.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "messages/expert_placement.hpp"

namespace zmoe::testing {

struct ref_prompt {
    std::vector<int32_t> token_ids;
    std::vector<float> last_logits;  ///< transformers' fp32 logits at the prompt's last position
    std::vector<int32_t> greedy;     ///< its greedy continuation
    std::vector<double> margins;     ///< top-2 logit margin at each greedy step
};

/// The fixture directory: ZMOE_FIXTURES_DIR from the environment (for a test binary run away from its source
/// tree), else the build's.
inline std::string fixture_dir(const std::string& name) {
    const char* env = std::getenv("ZMOE_FIXTURES_DIR");
    return std::string(env && *env ? env : ZMOE_FIXTURES_DIR) + "/models/" + name;
}

/// The prompts of DIR/reference.json; a missing file is a test failure (and an empty result).
inline std::vector<ref_prompt> load_reference(const std::string& dir) {
    std::ifstream in(dir + "/reference.json");
    EXPECT_TRUE(in.good()) << dir << "/reference.json is missing";
    std::vector<ref_prompt> out;
    if (!in) return out;
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& p : j.at("prompts")) {
        ref_prompt r;
        r.token_ids = p.at("token_ids").get<std::vector<int32_t>>();
        r.last_logits = p.at("last_logits").get<std::vector<float>>();
        r.greedy = p.at("greedy").get<std::vector<int32_t>>();
        r.margins = p.at("margins").get<std::vector<double>>();
        out.push_back(std::move(r));
    }
    return out;
}

/// A test parameterised by fixture name: SetUp loads the fixture's reference prompts into prompts_ (a missing
/// fixture is a failure, not a skip: the reference is what these suites exist for).
class reference_fixture_test : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        dir_ = fixture_dir(GetParam());
        ASSERT_TRUE(std::ifstream(dir_ + "/config.json").good()) << "fixture " << dir_ << " is missing";
        prompts_ = load_reference(dir_);
        ASSERT_FALSE(prompts_.empty()) << dir_ << "/reference.json has no prompts";
    }
    std::string dir_;
    std::vector<ref_prompt> prompts_;
};

/// Two ranks with replicas and a shuffled slot order, as EPLB produces: rank 0 holds every expert in reverse
/// order, rank 1 the even experts, each twice; the same rows in every MoE layer.
inline expert_placement replicated_two_rank_placement(int32_t num_experts, int64_t num_moe_layers) {
    std::vector<int32_t> row;
    for (int32_t e = num_experts - 1; e >= 0; --e) row.push_back(e);
    for (int32_t e = 0; e < num_experts; ++e) row.push_back(e % 2 == 0 ? e : e - 1);
    return expert_placement{.num_experts = num_experts,
                            .num_ranks = 2,
                            .slots_per_rank = num_experts,
                            .physical_to_logical = std::vector(static_cast<size_t>(num_moe_layers), row)};
}

}  // namespace zmoe::testing
