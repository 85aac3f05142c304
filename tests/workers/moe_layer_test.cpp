// The MoE layer's expert-parallel dispatch on the CPU backend (workers/moe_layer.hpp) with the FP8 fixtures' weights
// (tests/fixtures/models/*_fp8: ragged 128-blocks, hidden 144; also the BF16 source quantized at load): sending
// FP8 records (each row quantized per 128-channel group on the token's rank) gives bit for bit the output of sending
// fp32 rows that the expert's rank quantizes, over two in-process ranks with replicas and one rank, with and without
// dual-batch overlap; and the FP8 dispatch moves the words its record layout says (about a quarter of fp32's).

#include "workers/moe_layer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "base/check.hpp"
#include "reference_fixture.hpp"
#include "workers/fp8.hpp"
#include "workers/inproc_expert_comm.hpp"
#include "workers/model_weights.hpp"

namespace zmoe {
namespace {

using testing::fixture_dir;

/// An expert_comm that counts the 32-bit words each all_to_all sends to other ranks, then passes it on.
class counting_comm final : public expert_comm {
  public:
    explicit counting_comm(expert_comm& inner) : inner_(inner) {}
    int rank() const override { return inner_.rank(); }
    int world_size() const override { return inner_.world_size(); }
    std::vector<std::vector<float>> all_to_all(std::vector<std::vector<float>> send) override {
        int64_t words = 0;
        for (int r = 0; r < world_size(); ++r)
            if (r != rank()) words += static_cast<int64_t>(send[r].size());
        sent_.push_back(words);
        return inner_.all_to_all(std::move(send));
    }
    const std::vector<int64_t>& sent() const { return sent_; }

  private:
    expert_comm& inner_;
    std::vector<int64_t> sent_;  // per call: dispatch, combine, dispatch, ...
};

/// Normed-looking rows for rank `rank`: random, each 128-channel group at its own magnitude, one row with an
/// all-zero group (scale 1) and one with a large value (its group's scale absorbs it).
std::vector<float> rows_of(int rank, int64_t n, int64_t H) {
    std::mt19937 rng(17 + rank);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(n * H));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < H; ++i)
            x[t * H + i] = d(rng) * std::ldexp(1.f, static_cast<int>((t + 3 * (i / kFp8Block)) % 7) - 3);
    for (int64_t i = 0; i < std::min<int64_t>(H, kFp8Block); ++i) x[1 * H + i] = 0.f;
    x[2 * H + 5] = 300.f;
    return x;
}

struct layer_run {
    std::vector<std::vector<float>> out;  // [rank][n * H]
    std::vector<int64_t> dispatch_words;  // [rank]: words the first MoE call sent to other ranks
};

/// One MoE layer of `dir` (its first) on `world` in-process ranks, rank r with n[r] rows.
layer_run run_layer(const std::string& dir, const model_config& cfg, const expert_placement& placement, int world,
                    const std::vector<int64_t>& n, ep_dispatch_format format, bool dual) {
    const int64_t H = cfg.hidden_size;
    inproc_expert_hub hub(world);
    layer_run run;
    run.out.resize(static_cast<size_t>(world));
    run.dispatch_words.resize(static_cast<size_t>(world));
    std::vector<std::string> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            try {
                const model_weights w(dir, cfg, placement, r);
                const layer_weights* moe = nullptr;
                for (const layer_weights& l : w.layers())
                    if (l.moe_index >= 0 && moe == nullptr) moe = &l;
                ZMOE_CHECK(moe != nullptr, "no MoE layer");
                thread_pool pool(2);
                inproc_expert_comm inner(hub, r);
                counting_comm comm(inner);
                const std::vector<float> x = rows_of(r, n[r], H);
                std::vector<float>& out = run.out[r];
                out.assign(x.size(), 0.f);
                std::vector<uint32_t> counts(static_cast<size_t>(cfg.num_experts), 0);
                if (dual) {
                    comm_stream stream(comm);
                    moe_forward_dual(pool, cfg, moe->moe, placement, moe->moe_index, stream, r, world, x.data(), n[r],
                                     n[r] / 2, out.data(), counts.data(), format);
                } else {
                    moe_forward(pool, cfg, moe->moe, placement, moe->moe_index, comm, x.data(), n[r], out.data(),
                                counts.data(), format);
                }
                run.dispatch_words[r] = comm.sent().at(0);
                if (dual) run.dispatch_words[r] += comm.sent().at(1);  // A's and B's dispatches come first
            } catch (const std::exception& e) {
                errors[r] = e.what();
                hub.abort();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    return run;
}

class MoeDispatchFp8 : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeDispatchFp8, QuantizingBeforeTheDispatchIsBitIdenticalToAfter) {
    const std::string param = GetParam();
    const bool at_load = param.ends_with("_source");
    const std::string dir = fixture_dir(param);
    model_config cfg = model_config::load(dir);
    if (at_load) cfg.apply_quantization_flag("fp8");
    ASSERT_TRUE(cfg.quantization.fp8());
    EXPECT_EQ(ep_dispatch_format_of(cfg), ep_dispatch_format::fp8);
    const int64_t H = cfg.hidden_size;
    ASSERT_NE(H % kFp8Block, 0) << "the fixture should have a ragged last group";
    const expert_placement two =
        testing::replicated_two_rank_placement(static_cast<int32_t>(cfg.num_experts), cfg.num_moe_layers());
    const expert_placement one = expert_placement::initial(static_cast<int32_t>(cfg.num_moe_layers()),
                                                           static_cast<int32_t>(cfg.num_experts), 0, 1);
    const std::vector<int64_t> n = {13, 6};
    for (const bool dual : {false, true}) {
        SCOPED_TRACE(dual ? "dual-batch overlap" : "one batch");
        const layer_run after = run_layer(dir, cfg, two, 2, n, ep_dispatch_format::f32, dual);
        const layer_run before = run_layer(dir, cfg, two, 2, n, ep_dispatch_format::fp8, dual);
        for (int r = 0; r < 2; ++r) {
            ASSERT_EQ(before.out[r].size(), after.out[r].size());
            float amax = 0.f;
            for (float v : after.out[r]) amax = std::max(amax, std::abs(v));
            EXPECT_GT(amax, 0.f) << "rank " << r << ": the layer computed nothing";
            EXPECT_EQ(std::memcmp(before.out[r].data(), after.out[r].data(), before.out[r].size() * sizeof(float)), 0)
                << "rank " << r << ": the FP8 dispatch changed the output";
            // What crossed to the other rank: records of ep_dispatch_record_words each, the same records count.
            const int64_t f32_words = ep_dispatch_record_words(ep_dispatch_format::f32, H);
            const int64_t fp8_words = ep_dispatch_record_words(ep_dispatch_format::fp8, H);
            EXPECT_EQ(fp8_words, 1 + fp8_blocks(H) + (H + 3) / 4);
            ASSERT_GT(after.dispatch_words[r], 0) << "rank " << r << " sent nothing to the other rank";
            ASSERT_EQ(after.dispatch_words[r] % f32_words, 0);
            EXPECT_EQ(before.dispatch_words[r], after.dispatch_words[r] / f32_words * fp8_words) << "rank " << r;
        }
        // One rank (everything local) gives the same rows too, either way.
        for (const ep_dispatch_format f : {ep_dispatch_format::f32, ep_dispatch_format::fp8}) {
            const layer_run single = run_layer(dir, cfg, one, 1, {n[0]}, f, dual);
            EXPECT_EQ(single.out[0], before.out[0]) << "one rank, format " << static_cast<int>(f);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeDispatchFp8,
                         ::testing::Values("qwen3_moe_fp8", "deepseek_v3_fp8", "qwen3_moe_fp8_source"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(MoeDispatch, FormatFollowsTheModelsQuantization) {
    model_config cfg = model_config::load(fixture_dir("qwen3_moe_fp8_source"));
    EXPECT_EQ(ep_dispatch_format_of(cfg), ep_dispatch_format::f32);
    cfg.apply_quantization_flag("fp8");
    EXPECT_EQ(ep_dispatch_format_of(cfg), ep_dispatch_format::fp8);
    EXPECT_EQ(ep_dispatch_record_words(ep_dispatch_format::f32, 144), 145);
    EXPECT_EQ(ep_dispatch_record_words(ep_dispatch_format::fp8, 144), 1 + 2 + 36);
    EXPECT_EQ(ep_dispatch_record_words(ep_dispatch_format::fp8, 7168), 1 + 56 + 1792);
}

}  // namespace
}  // namespace zmoe
