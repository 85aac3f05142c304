// launch_moe_decode against ref::moe_decode: 1 to 8 tokens, Qwen3-30B-A3B's shape and small ones, top-k from 1 to
// 16, renormalised or not, redundant replicas (several slots per expert), padding tokens (not counted); routing,
// slots and counts exact, the output within BF16 tolerance; a token's output is bitwise the same alone and in a
// batch; the kernel's grid barriers leave the scratch ready for the next launch (launched again on the same scratch,
// the same results); and the shapes whose x, act and logits overflow its shared memory are refused.

#include <cstring>

#include "kernels/moe_decode_one_launch.hpp"
#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct decode_moe_case {
    int32_t num_tokens, num_experts, top_k, hidden, inter;
    int32_t extra_replicas;
    int32_t num_valid;  ///< -1: no padding
    bool renormalize;
    bool fused_router = false;  ///< router_w given: the kernel computes the logits
};

struct moe_inputs {
    int32_t num_slots = 0;
    std::vector<int32_t> offsets, slots;
    std::vector<float> logits, x, gate_up, down, router_w;
};

moe_inputs make_inputs(const decode_moe_case& c, std::mt19937& rng) {
    moe_inputs in;
    replica_tables r = random_replicas(c.num_experts, c.extra_replicas, rng);
    in.offsets = std::move(r.offsets);
    in.slots = std::move(r.slots);
    in.num_slots = in.offsets.back();
    std::normal_distribution<float> n(0.f, 2.f);
    in.logits.resize(size_t(c.num_tokens) * c.num_experts);
    for (auto& v : in.logits) v = n(rng);
    in.x = random_bf16(size_t(c.num_tokens) * c.hidden, 1.f, rng);
    if (c.fused_router) {  // logits from a router matrix instead, in double (the kernel sums in fp32)
        in.router_w = random_bf16(size_t(c.num_experts) * c.hidden, 4.f / std::sqrt(float(c.hidden)), rng);
        for (int32_t t = 0; t < c.num_tokens; ++t)
            for (int32_t e = 0; e < c.num_experts; ++e) {
                double acc = 0;
                for (int32_t h = 0; h < c.hidden; ++h)
                    acc += double(in.x[size_t(t) * c.hidden + h]) * in.router_w[size_t(e) * c.hidden + h];
                in.logits[size_t(t) * c.num_experts + e] = float(acc);
            }
    }
    in.gate_up = random_bf16(size_t(in.num_slots) * 2 * c.inter * c.hidden, 1.f / std::sqrt(float(c.hidden)), rng);
    in.down = random_bf16(size_t(in.num_slots) * c.hidden * c.inter, 1.f / std::sqrt(float(c.inter)), rng);
    return in;
}

struct moe_outputs {
    std::vector<float> out, weights, logits;
    std::vector<int32_t> slot_ids, counts;
};

/// launch_moe_decode, or (one_launch) detail::launch_moe_decode_one_launch with BF16 weights, on the same inputs.
moe_outputs run_decode(const decode_moe_case& c, const moe_inputs& in, const std::vector<int32_t>& counts0,
                       int launches = 1, bool one_launch = false) {
    auto d_logits = upload(in.logits);
    auto d_offsets = upload(in.offsets), d_slots = upload(in.slots);
    auto d_valid = upload(std::vector<int32_t>{c.num_valid});
    auto d_x = upload_bf16(in.x), d_gu = upload_bf16(in.gate_up), d_down = upload_bf16(in.down);
    auto d_router = upload_bf16(c.fused_router ? in.router_w : std::vector<float>(8, 0.f));
    if (c.fused_router) d_logits.poison();
    const size_t tk = size_t(c.num_tokens) * c.top_k;
    device_buffer<float> d_weights(tk);
    device_buffer<int32_t> d_slot_ids(tk), d_scratch(moe_decode_scratch_ints(c.num_tokens, c.top_k));
    device_buffer<bf16> d_act(tk * c.inter), d_out(size_t(c.num_tokens) * c.hidden);
    auto d_counts = upload(counts0);
    d_weights.poison();
    d_slot_ids.poison();
    d_scratch.poison(0);  // zero before the first launch (moe_decode_scratch_ints)
    d_act.poison();
    d_out.poison();
    for (int l = 0; l < launches; ++l) {
        if (l > 0) d_out.poison();
        if (one_launch) {
            detail::launch_moe_decode_one_launch({.router_w = c.fused_router ? d_router.get() : nullptr,
                                                  .router_logits = d_logits.get(),
                                                  .replica_offsets = d_offsets.get(),
                                                  .replica_slots = d_slots.get(),
                                                  .num_valid = c.num_valid < 0 ? nullptr : d_valid.get(),
                                                  .x = d_x.get(),
                                                  .w_gate_up = d_gu.get(),
                                                  .w_down = d_down.get(),
                                                  .topk_weights = d_weights.get(),
                                                  .slot_ids = d_slot_ids.get(),
                                                  .expert_counts = d_counts.get(),
                                                  .scratch = d_scratch.get(),
                                                  .act = d_act.get(),
                                                  .out = d_out.get(),
                                                  .num_tokens = c.num_tokens,
                                                  .top_k = c.top_k,
                                                  .num_experts = c.num_experts,
                                                  .hidden = c.hidden,
                                                  .inter = c.inter,
                                                  .renormalize = c.renormalize},
                                                 nullptr);
            sync_and_check();
            EXPECT_EQ(download(d_scratch), std::vector<int32_t>(d_scratch.size(), 0)) << "scratch not left at zero";
            continue;
        }
        launch_moe_decode({.router_w = c.fused_router ? d_router.get() : nullptr,
                           .router_logits = d_logits.get(),
                           .replica_offsets = d_offsets.get(),
                           .replica_slots = d_slots.get(),
                           .num_valid = c.num_valid < 0 ? nullptr : d_valid.get(),
                           .x = d_x.get(),
                           .w_gate_up = d_gu.get(),
                           .w_down = d_down.get(),
                           .topk_weights = d_weights.get(),
                           .slot_ids = d_slot_ids.get(),
                           .scratch = d_scratch.get(),
                           .act = d_act.get(),
                           .expert_counts = d_counts.get(),
                           .out = d_out.get(),
                           .num_tokens = c.num_tokens,
                           .top_k = c.top_k,
                           .num_experts = c.num_experts,
                           .hidden = c.hidden,
                           .inter = c.inter,
                           .renormalize = c.renormalize},
                          nullptr);
        sync_and_check();
    }
    return {download_bf16(d_out), download(d_weights), download(d_logits), download(d_slot_ids), download(d_counts)};
}

class MoeDecode : public ::testing::TestWithParam<decode_moe_case> {};

TEST_P(MoeDecode, MatchesReference) {
    const auto c = GetParam();
    ASSERT_TRUE(moe_decode_supported(c.num_tokens, c.top_k, c.num_experts, c.hidden, c.inter));
    std::mt19937 rng(c.num_tokens * 13 + c.num_experts + c.hidden + c.top_k);
    const moe_inputs in = make_inputs(c, rng);
    std::vector<int32_t> counts0(c.num_experts);
    for (auto& v : counts0) v = int32_t(rng() % 4);  // counts accumulate over a step's layers
    const moe_outputs got = run_decode(c, in, counts0);

    const size_t tk = size_t(c.num_tokens) * c.top_k;
    std::vector<float> want(size_t(c.num_tokens) * c.hidden), weights(tk);
    std::vector<int32_t> slot_ids(tk), counts = counts0;
    if (c.fused_router) {  // the kernel's fp32 logits against the double ones; the reference then routes by the former
        EXPECT_LT(rel_error(got.logits, in.logits), 1e-5);
    }
    ref::moe_decode(c.fused_router ? got.logits.data() : in.logits.data(), in.offsets.data(), in.slots.data(),
                    c.num_valid, in.x.data(), in.gate_up.data(), in.down.data(), weights.data(), slot_ids.data(),
                    counts.data(), want.data(), c.num_tokens, c.top_k, c.num_experts, c.hidden, c.inter, c.renormalize);
    EXPECT_EQ(got.slot_ids, slot_ids);
    EXPECT_EQ(got.counts, counts);
    for (size_t i = 0; i < tk; ++i) EXPECT_NEAR(got.weights[i], weights[i], 1e-5f) << "choice " << i;
    for (float v : got.out) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got.out, want), kBf16Tolerance);
}

class MoeDecodeAlone : public ::testing::TestWithParam<bool> {};

TEST_P(MoeDecodeAlone, TokenAloneEqualsTokenInBatch) {
    const decode_moe_case batch{8, 128, 8, 256, 128, 16, -1, true, GetParam()};
    std::mt19937 rng(3);
    const moe_inputs in = make_inputs(batch, rng);
    const std::vector<int32_t> zeros(batch.num_experts, 0);
    const moe_outputs all = run_decode(batch, in, zeros);
    // Token 0 alone: it keeps its replica choice (token index 0 in both batches), so its slots and output agree.
    decode_moe_case alone = batch;
    alone.num_tokens = 1;
    moe_inputs one = in;
    one.logits.resize(batch.num_experts);
    one.x.resize(batch.hidden);
    const moe_outputs single = run_decode(alone, one, zeros);
    for (int32_t h = 0; h < batch.hidden; ++h) ASSERT_EQ(single.out[h], all.out[h]) << "element " << h;
}

TEST(MoeDecodeOneToken, RelaunchOnTheSameScratch) {
    // Three launches on one scratch: each must find the barrier counters at zero again (a stale counter would let a
    // block pass a barrier early or hang); the expert counts accumulate once per launch.
    const decode_moe_case c{1, 128, 8, 2048, 768, 0, -1, true, true};
    std::mt19937 rng(11);
    const moe_inputs in = make_inputs(c, rng);
    const std::vector<int32_t> zeros(c.num_experts, 0);
    const moe_outputs once = run_decode(c, in, zeros);
    const moe_outputs thrice = run_decode(c, in, zeros, 3);
    EXPECT_EQ(thrice.out, once.out);
    EXPECT_EQ(thrice.slot_ids, once.slot_ids);
    for (int32_t e = 0; e < c.num_experts; ++e) EXPECT_EQ(thrice.counts[e], 3 * once.counts[e]) << "expert " << e;
}

TEST(MoeDecodeSupported, SharedMemoryBoundsTheShape) {
    // x [T, hidden] bf16 + act [top_k, inter] bf16 (one token) + logits [T, experts] fp32 within 96 KB.
    EXPECT_TRUE(moe_decode_supported(8, 8, 128, 4096, 768));     // 64 KB of x
    EXPECT_FALSE(moe_decode_supported(8, 8, 128, 6144, 768));    // 96 KB of x + 4 KB of logits
    EXPECT_TRUE(moe_decode_supported(1, 16, 128, 2048, 2048));   // 4 + 64 + 0.5 KB
    EXPECT_FALSE(moe_decode_supported(1, 16, 128, 2048, 3072));  // 96 KB of act alone
    EXPECT_FALSE(moe_decode_supported(9, 1, 128, 2048, 768));    // more than kMoeDecodeMaxTokens
    EXPECT_FALSE(moe_decode_supported(1, 17, 128, 2048, 768));   // top-k over 16
}

INSTANTIATE_TEST_SUITE_P(Router, MoeDecodeAlone, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "fused_router" : "given_logits"); });

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDecode,
    ::testing::Values(decode_moe_case{1, 16, 8, 2048, 768, 0, -1, true},   // Qwen3-30B-A3B's expert dims
                      decode_moe_case{4, 128, 8, 256, 96, 0, 3, true},     // padding: token 3 not counted
                      decode_moe_case{8, 128, 8, 256, 128, 24, -1, true},  // eight tokens, redundant replicas
                      decode_moe_case{2, 60, 4, 64, 88, 0, -1, false},     // small, FFN not a multiple of 16
                      decode_moe_case{3, 8, 2, 40, 24, 3, -1, true},       // Mixtral-like top-2
                      decode_moe_case{4, 64, 16, 256, 128, 0, -1, false},  // top-16, 64 choices
                      decode_moe_case{1, 512, 1, 128, 64, 0, 0, false},    // 512 experts, one choice, all padding
                      // The router GEMV fused in (router_w): 1 to 8 tokens, expert counts not a multiple of 8.
                      decode_moe_case{1, 128, 8, 2048, 768, 0, -1, true, true},
                      decode_moe_case{8, 128, 8, 256, 128, 24, -1, true, true},
                      decode_moe_case{3, 60, 4, 64, 88, 0, 2, false, true},
                      decode_moe_case{5, 500, 2, 40, 24, 3, -1, true, true},
                      // One token (the one-token kernel): hidden and FFN widths that are not multiples of its 256- and
                      // 96-vector chunks, 1 to 16 choices, replicas, padding, 8 to 512 experts.
                      decode_moe_case{1, 60, 4, 2056, 88, 0, -1, false, true},
                      decode_moe_case{1, 500, 2, 40, 24, 3, -1, true, true},
                      decode_moe_case{1, 8, 8, 64, 776, 2, -1, true, true},
                      decode_moe_case{1, 64, 16, 256, 1032, 0, -1, false, false},
                      decode_moe_case{1, 128, 8, 4104, 128, 16, 0, true, true},
                      decode_moe_case{1, 256, 3, 136, 40, 0, -1, true, false},
                      decode_moe_case{1, 8, 8, 16384, 64, 0, -1, true, true},  // x of 32 KB
                      // More than the 1024 replica slots the kernel copies to shared memory: read from global memory.
                      decode_moe_case{1, 16, 4, 64, 24, 1100, -1, true, true},
                      decode_moe_case{4, 16, 4, 64, 24, 1100, 3, false, true}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter, "_extra",
                         c.extra_replicas, c.fused_router ? "_fused_router" : "");
    });

/// The BF16 few-token one launch (launch_moe_layer's decode path from two tokens) against launch_moe_decode on the
/// same inputs: the same router sums, top-k, replica choice, gate/up and down sums in the same order, so logits,
/// slots, weights, counts and out are equal bit for bit (launch_moe_decode is checked against ref::moe_decode above;
/// MoeLayerLaunch checks the one launch against it at 16 tokens, past launch_moe_decode's 8).
class MoeDecodeOneLaunch : public ::testing::TestWithParam<decode_moe_case> {};

TEST_P(MoeDecodeOneLaunch, Bf16EqualsMoeDecodeBitForBit) {
    const decode_moe_case c = GetParam();
    ASSERT_TRUE(
        detail::moe_decode_one_launch_supported(c.num_tokens, c.top_k, c.num_experts, c.hidden, c.inter, false));
    std::mt19937 rng(c.num_tokens * 5 + c.num_experts + c.hidden + c.inter);
    const moe_inputs in = make_inputs(c, rng);
    std::vector<int32_t> counts0(c.num_experts);
    for (auto& v : counts0) v = int32_t(rng() % 4);
    const moe_outputs want = run_decode(c, in, counts0);
    const moe_outputs got = run_decode(c, in, counts0, 3, true);  // three launches on one scratch
    EXPECT_EQ(got.slot_ids, want.slot_ids);
    for (size_t i = 0; i < want.weights.size(); ++i)
        ASSERT_EQ(std::memcmp(&got.weights[i], &want.weights[i], 4), 0) << "weight " << i;
    if (c.fused_router) {
        for (size_t i = 0; i < want.logits.size(); ++i)
            ASSERT_EQ(std::memcmp(&got.logits[i], &want.logits[i], 4), 0) << "logit " << i;
    }
    for (int32_t e = 0; e < c.num_experts; ++e)
        EXPECT_EQ(got.counts[e] - counts0[e], 3 * (want.counts[e] - counts0[e])) << "expert " << e;
    for (size_t i = 0; i < want.out.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got.out[i])) << "element " << i;
        ASSERT_EQ(std::memcmp(&got.out[i], &want.out[i], 4), 0)
            << "element " << i << ": " << got.out[i] << " vs " << want.out[i];
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDecodeOneLaunch,
    ::testing::Values(decode_moe_case{1, 128, 8, 2048, 768, 0, -1, true, true},  // Qwen3-30B-A3B
                      decode_moe_case{4, 128, 8, 2048, 768, 0, -1, true, true},
                      decode_moe_case{8, 128, 8, 256, 128, 24, -1, true, true},   // replicas
                      decode_moe_case{4, 128, 8, 256, 96, 0, 3, true, false},     // given logits, padding
                      decode_moe_case{3, 8, 2, 48, 32, 3, -1, true, true},        // Mixtral-like top-2
                      decode_moe_case{4, 64, 16, 256, 128, 0, -1, false, false},  // top-16: two groups of choices
                      decode_moe_case{2, 64, 16, 256, 1040, 0, -1, false, true},  // FFN rows past the staged chunks
                      decode_moe_case{5, 500, 2, 48, 32, 3, -1, true, true},      // 500 experts
                      decode_moe_case{4, 16, 4, 64, 32, 1100, 3, false, true}),   // slots past the shared table
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter, "_extra",
                         c.extra_replicas, c.num_valid >= 0 ? "_padding" : "", c.fused_router ? "_fused_router" : "");
    });

}  // namespace
}  // namespace zmoe::kernels::test
