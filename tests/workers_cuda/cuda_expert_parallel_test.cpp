// Expert parallelism over NCCL: 2 and 4 GPUs (one thread per rank, each with its own GPU and communicator) must
// generate the 1-GPU tokens, with every rank's own (data-parallel) sequences, a rank with no sequences at all,
// redundant replicas, and EPLB moves that carry expert weights between GPUs. Skipped where too few GPUs are visible.
//
// Ranks batch different sequences, so their GEMMs may pick other cuBLASLt algorithms than the 1-GPU run: tokens
// are compared up to the first step whose 1-GPU top-2 margin is below kSelfMargin, logits within kSelfTolerance.

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "cuda_test_util.hpp"
#include "workers/cuda/cuda_step_executor.hpp"
#include "messages/expert_placement.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::step_driver;

constexpr int64_t kNewTokens = 4;

int visible_gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

struct ep_run {
    int world = 1;
    int active = 1;                               ///< ranks given sequences (prompt i on rank i % active)
    const expert_placement* placement = nullptr;  ///< null: the default placement
    std::vector<expert_slot_move> moves;          ///< applied on every rank before the first step
};

std::vector<step_driver> run_expert_parallel(const std::string& dir, const std::vector<ref_prompt>& prompts,
                                             const ep_run& run) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off
    const model_config c = model_config::load(dir);
    const expert_placement placement =
        run.placement ? *run.placement : expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, run.world);
    std::vector<step_driver> drivers;
    for (int r = 0; r < run.world; ++r) drivers.emplace_back(kBlockSize, 7);
    for (size_t i = 0; i < prompts.size(); ++i) drivers[i % run.active].add(i, prompts[i].token_ids, kNewTokens);
    int steps = 0;
    for (const step_driver& d : drivers) steps = std::max(steps, steps_needed(d));
    const std::string id = make_collective_id("cuda");
    std::vector<std::string> errors(run.world);
    std::vector<std::thread> threads;
    for (int r = 0; r < run.world; ++r) {
        threads.emplace_back([&, r] {
            try {
                cuda_step_executor ex(cuda_options(dir, r, run.world, id), placement);
                EXPECT_EQ(ex.device(), r);
                if (!run.moves.empty()) ex.apply_expert_moves(run.moves);
                for (int s = 0; s < steps; ++s) {
                    const step_request q = drivers[r].next();  // empty once this rank's sequences are done
                    std::vector<std::vector<float>> logits;
                    const step_result res = ex.execute(q, &logits);
                    drivers[r].record(q, res, logits);
                }
            } catch (const std::exception& e) {
                errors[r] = e.what();  // the other ranks hang in NCCL: the test's timeout reports it
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < run.world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    return drivers;
}

class CudaExpertParallel : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        dir_ = fixture_dir(GetParam());
        prompts_ = load_reference(dir_);
        ASSERT_FALSE(prompts_.empty());
        const model_config c = model_config::load(dir_);
        auto ex = std::make_unique<cuda_step_executor>(
            cuda_options(dir_), expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, 1));
        single_ = std::make_unique<step_driver>(kBlockSize, 7);
        for (size_t i = 0; i < prompts_.size(); ++i) single_->add(i, prompts_[i].token_ids, kNewTokens);
        run_all(*ex, *single_);
    }
    void expect_matches_single(std::vector<step_driver>& drivers, int active, const std::string& what) {
        for (size_t i = 0; i < prompts_.size(); ++i)
            expect_same_run(drivers[i % active].find(i), single_->seqs()[i], kSelfMargin, kSelfTolerance,
                            GetParam() + " " + what + " prompt " + std::to_string(i));
    }
    std::string dir_;
    std::vector<ref_prompt> prompts_;
    std::unique_ptr<step_driver> single_;
};

TEST_P(CudaExpertParallel, TwoAndFourGpusMatchOne) {
    for (int world : {2, 4}) {
        if (visible_gpus() < world) {
            std::printf("[cuda] %d GPUs visible: world %d skipped\n", visible_gpus(), world);
            continue;
        }
        const int active = world == 4 ? 3 : world;  // world 4: rank 3 runs empty steps only
        std::vector<step_driver> drivers = run_expert_parallel(dir_, prompts_, {world, active, nullptr, {}});
        expect_matches_single(drivers, active, "world " + std::to_string(world));
    }
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
}

// Rank 0 holds every expert in reverse order, rank 1 replicas of the even ones; then EPLB moves swap the first
// slot of rank 0 with the last slot of rank 1 in every layer, so weights cross between the GPUs by NCCL.
TEST_P(CudaExpertParallel, ReplicasAndMovesAcrossGpusMatchOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    const model_config c = model_config::load(dir_);
    const expert_placement placement =
        zmoe::testing::replicated_two_rank_placement(static_cast<int32_t>(c.num_experts), c.num_moe_layers());
    const std::vector<int32_t>& row = placement.physical_to_logical[0];
    const auto E = static_cast<int32_t>(c.num_experts);
    std::vector<step_driver> replicas = run_expert_parallel(dir_, prompts_, {2, 2, &placement, {}});
    expect_matches_single(replicas, 2, "replicas");

    std::vector<expert_slot_move> moves;
    const auto last = static_cast<uint32_t>(2 * E - 1);
    for (uint32_t l = 0; l < c.num_moe_layers(); ++l) {
        moves.push_back({l, 0, row.back(), 1, last});   // rank 1's last slot -> rank 0's first
        moves.push_back({l, last, row.front(), 0, 0});  // and back
    }
    std::vector<step_driver> moved = run_expert_parallel(dir_, prompts_, {2, 2, &placement, moves});
    expect_matches_single(moved, 2, "after moves");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExpertParallel,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3", "deepseek_v2"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zmoe::cuda
