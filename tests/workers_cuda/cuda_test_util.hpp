#pragma once
// Shared by the CUDA worker tests: the transformers reference of a fixture, error measures, and driving an
// executor with the test step driver (tests/workers/step_driver.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference_fixture.hpp"
#include "step_driver.hpp"
#include "workers/step_executor.hpp"

namespace zmoe::cuda::testing {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kNumBlocks = 256;
/// Two CUDA runs that should agree (batched vs alone, chunked vs whole, graphs vs eager, moved experts, several GPUs):
/// logits within kSelfTolerance (relative), tokens equal up to the first step whose top-2 margin is below kSelfMargin.
constexpr double kSelfTolerance = 0.01;
constexpr double kSelfMargin = 0.02;

using zmoe::testing::fixture_dir;
using zmoe::testing::load_reference;
using zmoe::testing::ref_prompt;

/// max |got - ref| / max |ref|.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
        max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - ref[i]));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
    }
    if (got.size() != ref.size()) return INFINITY;
    return max_err / std::max(max_ref, 1e-30);
}

/// Top-1 minus top-2 logit.
inline double margin(const std::vector<float>& logits) {
    float a = -INFINITY, b = -INFINITY;
    for (float x : logits) {
        if (x > a) {
            b = a;
            a = x;
        } else if (x > b) {
            b = x;
        }
    }
    return static_cast<double>(a) - b;
}

/// The options a CUDA worker of rank `rank` out of `world` builds its executor from, for the checkpoint `dir`.
inline executor_options cuda_options(const std::string& dir, int rank = 0, int world = 1,
                                     std::string collective_id = {}) {
    executor_options o;
    o.config.model = dir;
    o.config.device = "cuda";
    o.config.workers = world;
    o.config.num_kv_blocks = kNumBlocks;
    o.config.block_size = kBlockSize;
    o.model = model_config::load(dir);
    o.rank = rank;
    o.collective_id = std::move(collective_id);
    return o;
}

/// The engine core's initial placement for o's model over o's workers (no redundant experts).
inline expert_placement initial_placement(const executor_options& o) {
    return expert_placement::initial(o.model.num_moe_layers(), o.model.num_experts, 0, o.world_size());
}

inline void run_all(step_executor& ex, zmoe::testing::step_driver& driver) {
    while (!driver.all_done()) {
        const step_request r = driver.next();
        std::vector<std::vector<float>> logits;
        const step_result res = ex.execute(r, &logits);
        driver.record(r, res, logits);
    }
}

/// Steps `driver` needs to finish (its schedule does not depend on the tokens).
inline int steps_needed(zmoe::testing::step_driver driver) {
    int n = 0;
    while (!driver.all_done()) {
        const step_request q = driver.next();
        step_result fake;
        for (const scheduled_seq& x : q.seqs)
            if (x.do_sample) fake.tokens.push_back({x.request_id, 0});
        driver.record(q, fake, std::vector<std::vector<float>>(fake.tokens.size()));
        ++n;
    }
    return n;
}

/// Expects `got` to generate `want`'s tokens up to the first step where `want`'s own top-2 margin is below
/// `min_margin` (a near-tie BF16 rounding may flip), and the logits before it within `tolerance`.
inline void expect_same_run(const zmoe::testing::driven_seq& got, const zmoe::testing::driven_seq& want,
                            double min_margin, double tolerance, const std::string& what) {
    ASSERT_EQ(got.generated.size(), want.generated.size()) << what;
    for (size_t t = 0; t < want.generated.size(); ++t) {
        EXPECT_LE(relative_error(got.logits[t], want.logits[t]), tolerance) << what << " step " << t;
        if (margin(want.logits[t]) < min_margin) return;
        ASSERT_EQ(got.generated[t], want.generated[t]) << what << " step " << t;
    }
}

}  // namespace zmoe::cuda::testing
