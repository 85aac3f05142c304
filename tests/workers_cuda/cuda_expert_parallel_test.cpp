// Expert parallelism (peer-to-peer windows by default, NCCL send/recv too): 2 and 4 GPUs (one thread per rank, each
// with its own GPU and communicator) must generate the 1-GPU tokens, with every rank's own (data-parallel) sequences, a
// rank with no sequences at all, redundant replicas, and EPLB moves that carry expert weights between GPUs; with decode
// graphs (the fixed-capacity exchange, counts on the device), eagerly with the exact host-planned exchange, with
// dual-batch overlap forced on every step, and with a fixed window too small for the routing (every overflowing step
// redone on the exact path). Skipped where too few GPUs are visible.
//
// Ranks batch different sequences, so their GEMMs may pick other cuBLASLt algorithms than the 1-GPU run: tokens
// are compared up to the first step whose 1-GPU top-2 margin is below kSelfMargin, logits within kSelfTolerance.

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "cuda_test_util.hpp"
#include "messages/expert_placement.hpp"
#include "workers/cuda/cuda_step_executor.hpp"

namespace zmoe::cuda {
namespace {

using namespace zmoe::cuda::testing;
using zmoe::testing::step_driver;

constexpr int64_t kNewTokens = 6;

int visible_gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

bool all_peers_accessible(int world) {
    for (int a = 0; a < world; ++a)
        for (int b = 0; b < world; ++b) {
            int can = 0;
            if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can)) return false;
        }
    return true;
}

struct ep_run {
    int world = 1;
    int active = 1;                               ///< ranks given sequences (prompt i on rank i % active)
    const expert_placement* placement = nullptr;  ///< null: the default placement
    std::vector<expert_slot_move> moves{};        ///< applied on every rank before the first step
    int stage_at = -1;   ///< >= 0: `moves` are staged before this step instead, and switched to before switch_at
    int switch_at = -1;  ///< (steps in between run on the old placement while the weights travel)
    bool dual = false;   ///< dual-batch overlap on every step
    double capacity_factor = 0;  ///< executor_options::ep_capacity_factor
    bool eager = false;          ///< --enforce-eager
    int32_t max_num_seqs = 8;    ///< few graph buckets: quick captures
    bool nccl = false;           ///< the fixed exchange over NCCL send/recv, not peer to peer
    bool enable_dbo = false;     ///< --enable-dbo: the fixed windows hold a whole prefill, so prefills overlap too
};

/// What each rank's executor reports after a run.
struct ep_stats {
    int64_t graph_replays = 0, dual_batch_steps = 0, overflow_steps = 0;
    bool peer_to_peer = false;
};

std::vector<step_driver> run_expert_parallel(const std::string& dir, const std::vector<ref_prompt>& prompts,
                                             const ep_run& run, std::vector<ep_stats>* stats = nullptr) {
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
    if (stats) stats->assign(run.world, {});
    std::vector<std::thread> threads;
    for (int r = 0; r < run.world; ++r) {
        threads.emplace_back([&, r] {
            try {
                executor_options o = cuda_options(dir, r, run.world, id);
                o.ep_capacity_factor = run.capacity_factor;
                o.config.enforce_eager = run.eager;
                o.config.max_num_seqs = run.max_num_seqs;
                o.ep_peer_to_peer = !run.nccl;
                o.config.enable_dbo = run.enable_dbo;
                cuda_step_executor ex(o, placement);
                EXPECT_EQ(ex.device(), r);
                if (!run.moves.empty() && run.stage_at < 0) ex.apply_expert_moves(run.moves);
                for (int s = 0; s < steps; ++s) {
                    if (s == run.stage_at) ex.stage_expert_moves(run.moves);
                    if (s == run.switch_at) {
                        const expert_move_stats m = ex.switch_expert_moves();
                        EXPECT_GT(m.bytes, 0u) << "rank " << r << ": every rank receives an expert";
                        EXPECT_GT(m.transfer_ms, 0) << "rank " << r;
                        EXPECT_EQ(ex.placement().physical_to_logical[0][0], run.moves[0].logical_expert);
                    } else if (run.stage_at >= 0 && s > run.stage_at && s < run.switch_at) {
                        // Staged, not switched: the placement is still the old one.
                        EXPECT_NE(ex.placement().physical_to_logical[0][0], run.moves[0].logical_expert);
                    }
                    step_request q = drivers[r].next();  // empty once this rank's sequences are done
                    q.dual_batch = run.dual;             // the engine core sets it for every rank alike
                    std::vector<std::vector<float>> logits;
                    const step_result res = ex.execute(q, &logits);
                    // What the engine core's exchange_steps_redone counter follows: the running total, every step.
                    EXPECT_EQ(res.exchange_steps_redone, static_cast<uint64_t>(ex.ep_overflow_steps())) << "rank " << r;
                    drivers[r].record(q, res, logits);
                }
                if (stats)
                    (*stats)[r] = {.graph_replays = ex.graph_replays(),
                                   .dual_batch_steps = ex.dual_batch_steps(),
                                   .overflow_steps = ex.ep_overflow_steps(),
                                   .peer_to_peer = ex.ep_peer_to_peer()};
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
        std::vector<ep_stats> stats;
        std::vector<step_driver> drivers =
            run_expert_parallel(dir_, prompts_, {.world = world, .active = active}, &stats);
        expect_matches_single(drivers, active, "world " + std::to_string(world));
        for (int r = 0; r < world; ++r) {
            EXPECT_GT(stats[r].graph_replays, 0) << "world " << world << " rank " << r << ": no decode graph replayed";
            EXPECT_EQ(stats[r].graph_replays, stats[0].graph_replays) << "ranks must replay together";
            // Peer to peer wherever the GPUs can map each other's memory (NVLink or PCIe P2P), else NCCL.
            EXPECT_EQ(stats[r].peer_to_peer, all_peers_accessible(world)) << "world " << world << " rank " << r;
        }
    }
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
}

// The fixed exchange over NCCL send/recv (the path across hosts, and where GPUs cannot map each other's memory),
// with graphs and with dual-batch overlap; the other tests take the peer-to-peer default.
TEST_P(CudaExpertParallel, NcclTransportMatchesOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    for (const bool dual : {false, true}) {
        std::vector<ep_stats> stats;
        std::vector<step_driver> drivers =
            run_expert_parallel(dir_, prompts_, {.world = 2, .active = 2, .dual = dual, .nccl = true}, &stats);
        expect_matches_single(drivers, 2, dual ? "nccl, dual batch" : "nccl");
        EXPECT_GT(stats[0].graph_replays, 0);
        EXPECT_FALSE(stats[0].peer_to_peer);
    }
}

// Eager steps: prefills longer than --max-num-seqs take the exact (host-planned) exchange, the rest the fixed one.
TEST_P(CudaExpertParallel, EagerExactAndFixedPathsMatchOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    std::vector<ep_stats> stats;
    std::vector<step_driver> drivers =
        run_expert_parallel(dir_, prompts_, {.world = 2, .active = 2, .eager = true, .max_num_seqs = 4}, &stats);
    expect_matches_single(drivers, 2, "eager");
    EXPECT_EQ(stats[0].graph_replays, 0);
}

// Dual-batch overlap forced on every step (as --enable-dbo with thresholds 1): graphs and eager steps both split.
TEST_P(CudaExpertParallel, DualBatchOverlapMatchesOne) {
    for (int world : {2, 4}) {
        if (visible_gpus() < world) continue;
        std::vector<ep_stats> stats;
        std::vector<step_driver> drivers =
            run_expert_parallel(dir_, prompts_, {.world = world, .active = world, .dual = true}, &stats);
        expect_matches_single(drivers, world, "dual batch, world " + std::to_string(world));
        EXPECT_GT(stats[0].dual_batch_steps, 0);
        EXPECT_GT(stats[0].graph_replays, 0);
    }
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
}

// Dual-batch overlap with --enable-dbo, eager: the prefills take the fixed exchange too, so whole layers run as two
// interleaved micro-batches whose split cuts a prompt (B attends to the KV that A wrote in the same layer), on ranks
// with different numbers of sequences.
TEST_P(CudaExpertParallel, DualBatchOverlapOfPrefillsMatchesOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    std::vector<ep_stats> stats;
    std::vector<step_driver> drivers = run_expert_parallel(
        dir_, prompts_,
        {.world = 2, .active = 2, .dual = true, .capacity_factor = 2, .eager = true, .enable_dbo = true}, &stats);
    expect_matches_single(drivers, 2, "dual batch prefills");
    EXPECT_GT(stats[0].dual_batch_steps, 0);
    EXPECT_EQ(stats[0].overflow_steps, 0) << "the prefills must overlap on the fixed exchange, not the exact one";
}

// A fixed window far below the routing's needs: every overflowing step is redone on the exact path by all ranks, and
// no token is lost.
TEST_P(CudaExpertParallel, OverflowingFixedWindowStillMatchesOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    for (const bool dual : {false, true}) {
        std::vector<ep_stats> stats;
        std::vector<step_driver> drivers = run_expert_parallel(
            dir_, prompts_, {.world = 2, .active = 2, .dual = dual, .capacity_factor = 0.01}, &stats);
        expect_matches_single(drivers, 2, dual ? "overflow, dual batch" : "overflow");
        EXPECT_GT(stats[0].overflow_steps, 0) << "the window never overflowed: the test proves nothing";
        EXPECT_EQ(stats[0].overflow_steps, stats[1].overflow_steps) << "ranks must redo the same steps";
    }
}

/// On replicated_two_rank_placement (rank 0 holds every expert in reverse order, rank 1 replicas of the even ones):
/// moves that swap the first slot of rank 0 with the last slot of rank 1 in every layer, so weights cross GPUs.
std::vector<expert_slot_move> swap_across_gpus(const model_config& c, const expert_placement& placement) {
    const std::vector<int32_t>& row = placement.physical_to_logical[0];
    const auto last = static_cast<uint32_t>(2 * c.num_experts - 1);
    std::vector<expert_slot_move> moves;
    for (uint32_t l = 0; l < c.num_moe_layers(); ++l) {
        moves.push_back({l, 0, row.back(), 1, last});   // rank 1's last slot -> rank 0's first
        moves.push_back({l, last, row.front(), 0, 0});  // and back
    }
    return moves;
}

// Replicas, then the swap across the GPUs applied before the first step.
TEST_P(CudaExpertParallel, ReplicasAndMovesAcrossGpusMatchOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    const model_config c = model_config::load(dir_);
    const expert_placement placement =
        zmoe::testing::replicated_two_rank_placement(static_cast<int32_t>(c.num_experts), c.num_moe_layers());
    std::vector<step_driver> replicas =
        run_expert_parallel(dir_, prompts_, {.world = 2, .active = 2, .placement = &placement});
    expect_matches_single(replicas, 2, "replicas");

    const std::vector<expert_slot_move> moves = swap_across_gpus(c, placement);
    // After the moves, with graphs and dual-batch overlap on: the graphs keep the slots' addresses.
    std::vector<ep_stats> stats;
    std::vector<step_driver> moved = run_expert_parallel(
        dir_, prompts_, {.world = 2, .active = 2, .placement = &placement, .moves = moves, .dual = true}, &stats);
    expect_matches_single(moved, 2, "after moves");
    EXPECT_GT(stats[0].graph_replays, 0);
}

// The same moves staged mid-run (the weights travel on the mover's stream and communicator while two decode steps
// run on the old placement), then switched to at a step boundary: every step's tokens stay the 1-GPU ones.
TEST_P(CudaExpertParallel, StagedMovesSwitchMidRunAndMatchOne) {
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
    const model_config c = model_config::load(dir_);
    const expert_placement placement =
        zmoe::testing::replicated_two_rank_placement(static_cast<int32_t>(c.num_experts), c.num_moe_layers());
    const std::vector<int32_t>& row = placement.physical_to_logical[0];
    ASSERT_NE(row.front(), row.back()) << "the swap must change slot 0";
    const std::vector<expert_slot_move> moves = swap_across_gpus(c, placement);
    static_assert(kNewTokens > 4, "the switch must fall inside the decode");
    std::vector<step_driver> moved = run_expert_parallel(
        dir_, prompts_,
        {.world = 2, .active = 2, .placement = &placement, .moves = moves, .stage_at = 2, .switch_at = 4});
    expect_matches_single(moved, 2, "staged moves");
}

// The FP8 fixture too (docs/fp8.md): the BF16 rows travel, each rank quantizes what it receives for its FP8
// experts; EPLB moves carry the block scales between GPUs. (qwen3_moe_fp8's head_dim 40 is outside the CUDA
// attention kernels.)
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExpertParallel,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3", "deepseek_v2",
                                           "deepseek_v3_fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zmoe::cuda
