#pragma once
// The transformers reference of a model fixture (tests/fixtures/models/<name>/reference.json, written by
// scripts/make_model_fixtures.py), shared by the CPU and CUDA worker tests.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace zmoe::testing
