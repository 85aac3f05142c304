// launch_moe_decode with shared experts (one token, moe_decode_params::shared_inter): against the CPU reference (the
// routed layer, ref::moe_decode, plus the shared MLP with its dots in double and BF16 roundings where the engine
// rounds) at DeepSeek-V2-Lite's dims and ragged small ones; against the separate launches the CUDA executor runs
// otherwise (launch_moe_decode, then launch_gemv_bf16 gate|up, launch_silu_mul, launch_gemv_bf16 down with the routed
// out as its bias) bit for bit (the same sums in the same order); the scratch left at zero; the shared-memory bound
// at DeepSeek-V2-Lite's and V3's dims; and launch_moe_layer's choice (moe_layer_takes_shared).

#include <cstring>

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct shared_case {
    int32_t num_experts, top_k, hidden, inter, shared_inter;
    int32_t extra_replicas;
    bool renormalize;
    bool fused_router;
};

struct shared_inputs {
    int32_t num_slots = 0;
    std::vector<int32_t> offsets, slots;
    std::vector<float> logits, x, router_w, gate_up, down, shared_gate_up, shared_down;
};

shared_inputs make_inputs(const shared_case& c, std::mt19937& rng) {
    shared_inputs in;
    replica_tables r = random_replicas(c.num_experts, c.extra_replicas, rng);
    in.offsets = std::move(r.offsets);
    in.slots = std::move(r.slots);
    in.num_slots = in.offsets.back();
    in.x = random_bf16(c.hidden, 1.f, rng);
    in.logits.resize(c.num_experts);
    if (c.fused_router) {  // logits from a router matrix, in double (the kernel sums in fp32)
        in.router_w = random_bf16(size_t(c.num_experts) * c.hidden, 4.f / std::sqrt(float(c.hidden)), rng);
        for (int32_t e = 0; e < c.num_experts; ++e) {
            double acc = 0;
            for (int32_t h = 0; h < c.hidden; ++h) acc += double(in.x[h]) * in.router_w[size_t(e) * c.hidden + h];
            in.logits[e] = float(acc);
        }
    } else {
        std::normal_distribution<float> n(0.f, 2.f);
        for (auto& v : in.logits) v = n(rng);
    }
    in.gate_up = random_bf16(size_t(in.num_slots) * 2 * c.inter * c.hidden, 1.f / std::sqrt(float(c.hidden)), rng);
    in.down = random_bf16(size_t(in.num_slots) * c.hidden * c.inter, 1.f / std::sqrt(float(c.inter)), rng);
    in.shared_gate_up = random_bf16(size_t(2) * c.shared_inter * c.hidden, 1.f / std::sqrt(float(c.hidden)), rng);
    in.shared_down = random_bf16(size_t(c.hidden) * c.shared_inter, 1.f / std::sqrt(float(c.shared_inter)), rng);
    return in;
}

struct shared_outputs {
    std::vector<float> out, weights, logits, act;  // act: [top_k * inter + shared_inter]
    std::vector<int32_t> slot_ids, counts, scratch;
};

/// The device copies of the inputs and the outputs of one launch_moe_decode.
struct shared_run {
    device_buffer<float> logits;
    device_buffer<int32_t> offsets, slots;
    device_buffer<bf16> x, router, gate_up, down, shared_gate_up, shared_down;
    device_buffer<float> weights;
    device_buffer<int32_t> slot_ids, scratch, counts;
    device_buffer<bf16> act, out;

    shared_run(const shared_case& c, const shared_inputs& in, const std::vector<int32_t>& counts0)
        : logits(upload(in.logits)),
          offsets(upload(in.offsets)),
          slots(upload(in.slots)),
          x(upload_bf16(in.x)),
          router(upload_bf16(c.fused_router ? in.router_w : std::vector<float>(8, 0.f))),
          gate_up(upload_bf16(in.gate_up)),
          down(upload_bf16(in.down)),
          shared_gate_up(upload_bf16(in.shared_gate_up)),
          shared_down(upload_bf16(in.shared_down)),
          weights(size_t(c.top_k)),
          slot_ids(size_t(c.top_k)),
          scratch(moe_decode_scratch_ints(1, c.top_k)),
          counts(upload(counts0)),
          act(size_t(c.top_k) * c.inter + c.shared_inter),
          out(size_t(c.hidden)) {
        if (c.fused_router) logits.poison();
        weights.poison();
        slot_ids.poison();
        scratch.poison(0);  // zero before the first launch (moe_decode_scratch_ints)
        act.poison();
        out.poison();
    }

    /// launch_moe_decode, with the shared experts when `shared` (else the routed experts only).
    void launch(const shared_case& c, bool shared) {
        launch_moe_decode({.router_w = c.fused_router ? router.get() : nullptr,
                           .router_logits = logits.get(),
                           .replica_offsets = offsets.get(),
                           .replica_slots = slots.get(),
                           .num_valid = nullptr,
                           .x = x.get(),
                           .w_gate_up = gate_up.get(),
                           .w_down = down.get(),
                           .topk_weights = weights.get(),
                           .slot_ids = slot_ids.get(),
                           .scratch = scratch.get(),
                           .act = act.get(),
                           .expert_counts = counts.get(),
                           .out = out.get(),
                           .num_tokens = 1,
                           .top_k = c.top_k,
                           .num_experts = c.num_experts,
                           .hidden = c.hidden,
                           .inter = c.inter,
                           .renormalize = c.renormalize,
                           .shared_gate_up = shared ? shared_gate_up.get() : nullptr,
                           .shared_down = shared ? shared_down.get() : nullptr,
                           .shared_inter = shared ? c.shared_inter : 0},
                          nullptr);
        sync_and_check();
    }

    shared_outputs results() const {
        return {download_bf16(out), download(weights), download(logits), download_bf16(act),
                download(slot_ids), download(counts),  download(scratch)};
    }
};

/// The shared MLP of the CPU reference on top of the routed out: gate and up dots in double rounded to BF16 (the
/// GEMV's BF16 output), act = ref::silu_mul, y = bf16(act . down) in double, out = bf16(routed + y).
std::vector<float> reference_with_shared(const shared_case& c, const shared_inputs& in,
                                         const std::vector<float>& routed, std::vector<float>* shared_act) {
    std::vector<float> gu(size_t(2) * c.shared_inter);
    for (int32_t j = 0; j < 2 * c.shared_inter; ++j) {
        double acc = 0;
        for (int32_t h = 0; h < c.hidden; ++h) acc += double(in.x[h]) * in.shared_gate_up[size_t(j) * c.hidden + h];
        gu[j] = ref::round_bf16(float(acc));
    }
    shared_act->assign(c.shared_inter, 0.f);
    ref::silu_mul(gu.data(), shared_act->data(), 1, c.shared_inter);
    std::vector<float> out(c.hidden);
    for (int32_t h = 0; h < c.hidden; ++h) {
        double acc = 0;
        for (int32_t j = 0; j < c.shared_inter; ++j)
            acc += double((*shared_act)[j]) * in.shared_down[size_t(h) * c.shared_inter + j];
        out[h] = ref::round_bf16(routed[h] + ref::round_bf16(float(acc)));
    }
    return out;
}

class MoeDecodeShared : public ::testing::TestWithParam<shared_case> {};

TEST_P(MoeDecodeShared, MatchesReference) {
    const shared_case c = GetParam();
    ASSERT_TRUE(moe_decode_shared_supported(c.top_k, c.num_experts, c.hidden, c.inter, c.shared_inter));
    std::mt19937 rng(c.num_experts * 7 + c.hidden + c.inter + c.shared_inter);
    const shared_inputs in = make_inputs(c, rng);
    std::vector<int32_t> counts0(c.num_experts);
    for (auto& v : counts0) v = int32_t(rng() % 4);
    shared_run run(c, in, counts0);
    run.launch(c, true);
    const shared_outputs got = run.results();

    std::vector<float> routed(c.hidden), weights(c.top_k);
    std::vector<int32_t> slot_ids(c.top_k), counts = counts0;
    if (c.fused_router) {  // the kernel's fp32 logits against the double ones; the reference routes by the former
        EXPECT_LT(rel_error(got.logits, in.logits), 1e-5);
    }
    ref::moe_decode(c.fused_router ? got.logits.data() : in.logits.data(), in.offsets.data(), in.slots.data(), -1,
                    in.x.data(), in.gate_up.data(), in.down.data(), weights.data(), slot_ids.data(), counts.data(),
                    routed.data(), 1, c.top_k, c.num_experts, c.hidden, c.inter, c.renormalize);
    std::vector<float> shared_act;
    const std::vector<float> want = reference_with_shared(c, in, routed, &shared_act);
    EXPECT_EQ(got.slot_ids, slot_ids);
    EXPECT_EQ(got.counts, counts);
    for (int32_t j = 0; j < c.top_k; ++j) EXPECT_NEAR(got.weights[j], weights[j], 1e-5f) << "choice " << j;
    EXPECT_EQ(got.scratch, std::vector<int32_t>(got.scratch.size(), 0)) << "scratch not left at zero";
    const std::vector<float> got_shared_act(got.act.end() - c.shared_inter, got.act.end());
    EXPECT_LT(rel_error(got_shared_act, shared_act), kBf16Tolerance);
    for (float v : got.out) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(got.out, want), kBf16Tolerance);
    // The shared experts matter at these scales: the routed out alone is far from the sum.
    EXPECT_GT(rel_error(routed, want), 10 * kBf16Tolerance);
}

TEST_P(MoeDecodeShared, EqualsSeparateLaunchesBitForBit) {
    // The executor's path without the option: the routed out first, then the shared MLP's GEMV, SiLU * up and GEMV
    // with that out as the bias. Every dot is summed in the same order (a lane's 16-byte vectors lane, lane + 32, ...,
    // then the warp reduction) and rounded at the same points, so the outputs are equal bit for bit.
    const shared_case c = GetParam();
    std::mt19937 rng(c.num_experts * 11 + c.hidden + c.inter + c.shared_inter);
    const shared_inputs in = make_inputs(c, rng);
    const std::vector<int32_t> zeros(c.num_experts, 0);

    shared_run separate(c, in, zeros);
    separate.launch(c, false);
    device_buffer<bf16> gu(size_t(2) * c.shared_inter), act(size_t(c.shared_inter)), out(size_t(c.hidden));
    gu.poison();
    act.poison();
    out.poison();
    ASSERT_TRUE(gemv_bf16_supported(1, 2 * c.shared_inter, c.hidden));
    ASSERT_TRUE(gemv_bf16_supported(1, c.hidden, c.shared_inter));
    launch_gemv_bf16({.x = separate.x.get(),
                      .w = separate.shared_gate_up.get(),
                      .y = gu.get(),
                      .m = 1,
                      .n = 2 * c.shared_inter,
                      .k = c.hidden},
                     nullptr);
    launch_silu_mul({.gate_up = gu.get(), .out = act.get(), .num_tokens = 1, .n = c.shared_inter}, nullptr);
    launch_gemv_bf16({.x = act.get(),
                      .w = separate.shared_down.get(),
                      .bias = separate.out.get(),
                      .y = out.get(),
                      .m = 1,
                      .n = c.hidden,
                      .k = c.shared_inter},
                     nullptr);
    sync_and_check();
    const shared_outputs want = separate.results();
    const std::vector<float> want_out = download_bf16(out), want_act = download_bf16(act);

    shared_run fused(c, in, zeros);
    for (int l = 0; l < 3; ++l) {  // three launches on one scratch: the same bits each time
        fused.out.poison();
        fused.launch(c, true);
        const shared_outputs got = fused.results();
        ASSERT_EQ(got.scratch, std::vector<int32_t>(got.scratch.size(), 0)) << "scratch not left at zero";
        ASSERT_EQ(got.slot_ids, want.slot_ids);
        for (int32_t j = 0; j < c.top_k; ++j)
            ASSERT_EQ(std::memcmp(&got.weights[j], &want.weights[j], 4), 0) << "weight " << j;
        for (size_t i = 0; i < size_t(c.top_k) * c.inter; ++i)
            ASSERT_EQ(std::memcmp(&got.act[i], &want.act[i], 4), 0) << "routed act " << i;
        for (int32_t j = 0; j < c.shared_inter; ++j)
            ASSERT_EQ(std::memcmp(&got.act[size_t(c.top_k) * c.inter + j], &want_act[j], 4), 0)
                << "shared act " << j << ": " << got.act[size_t(c.top_k) * c.inter + j] << " vs " << want_act[j];
        for (int32_t h = 0; h < c.hidden; ++h) {
            ASSERT_TRUE(std::isfinite(got.out[h])) << "element " << h;
            ASSERT_EQ(std::memcmp(&got.out[h], &want_out[h], 4), 0)
                << "element " << h << ": " << got.out[h] << " vs " << want_out[h];
        }
    }
    const std::vector<int32_t> routed_counts = download(separate.counts), fused_counts = download(fused.counts);
    for (int32_t e = 0; e < c.num_experts; ++e) EXPECT_EQ(fused_counts[e], 3 * routed_counts[e]) << "expert " << e;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDecodeShared,
    ::testing::Values(
        // DeepSeek-V2-Lite; then its expert dims with logits given (16 experts: a quarter of the weights to generate)
        shared_case{64, 6, 2048, 1408, 2816, 0, false, true}, shared_case{16, 6, 2048, 1408, 2816, 0, false, false},
        // down in one pass (inter <= 768, a row per warp at most), the shared row after it
        shared_case{32, 8, 2048, 768, 1536, 8, true, true},
        // ragged: hidden, inter and shared_inter not multiples of the kernel's vector chunks
        shared_case{20, 3, 136, 40, 24, 2, true, true}, shared_case{60, 4, 2056, 88, 776, 0, false, true},
        // a shared row past one round of the lanes' vectors (3 080 columns: 385 vectors)
        shared_case{16, 2, 264, 64, 3080, 1, true, true},
        // more than the 1 024 replica slots the kernel copies to shared memory
        shared_case{16, 4, 64, 24, 16, 1100, true, true}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter, "_s", c.shared_inter,
                         "_extra", c.extra_replicas, c.fused_router ? "_fused_router" : "_given_logits");
    });

TEST(MoeDecodeSharedSupported, SharedMemoryBoundsTheShape) {
    // x [hidden] + act [top_k * inter + shared_inter] bf16 + logits [experts] fp32 within 96 KB.
    EXPECT_TRUE(moe_decode_shared_supported(6, 64, 2048, 1408, 2816));      // DeepSeek-V2-Lite: 4 + 22 + 0.25 KB
    EXPECT_TRUE(moe_decode_shared_supported(8, 256, 7168, 2048, 2048));     // DeepSeek-V3: 14 + 36 + 1 KB
    EXPECT_FALSE(moe_decode_shared_supported(16, 128, 2048, 2048, 16384));  // 4 + 96 + 0.5 KB
    EXPECT_FALSE(moe_decode_shared_supported(6, 64, 2048, 1408, 0));        // no shared columns
    EXPECT_FALSE(moe_decode_shared_supported(6, 64, 2048, 1408, 2820));     // not a multiple of 8
    EXPECT_FALSE(moe_decode_shared_supported(17, 64, 2048, 1408, 2816));    // top-k over 16
}

TEST(MoeDecodeSharedSupported, MoeLayerTakesSharedOnTheOneTokenBf16Path) {
    // Host-side choice only: launch_moe_layer's BF16 one-token decode path (launch_moe_decode) with room for the
    // shared act; two tokens (the few-token one launch), FP8 experts, the grouped path or a small act refuse.
    moe_layer_params p{
        .experts = {.max_rows = 64, .num_tokens = 1, .top_k = 6, .num_slots = 64, .hidden = 2048, .inter = 1408},
        .num_experts = 64};
    EXPECT_TRUE(moe_layer_takes_shared(p, 2816));
    EXPECT_FALSE(moe_layer_takes_shared(p, 2820));
    moe_layer_params q = p;
    q.experts.num_tokens = 2;
    EXPECT_FALSE(moe_layer_takes_shared(q, 2816));
    q = p;
    q.path = moe_path::grouped;
    EXPECT_FALSE(moe_layer_takes_shared(q, 2816));
    q = p;
    q.experts.max_rows = 7;  // 7 x 1 408 < 6 x 1 408 + 2 816
    EXPECT_FALSE(moe_layer_takes_shared(q, 2816));
    q.experts.max_rows = 8;  // 8 x 1 408 = 6 x 1 408 + 2 816
    EXPECT_TRUE(moe_layer_takes_shared(q, 2816));
    const moe_fp8_experts fp8{};
    q = p;
    q.experts.fp8 = &fp8;
    EXPECT_FALSE(moe_layer_takes_shared(q, 2816));
}

}  // namespace
}  // namespace zmoe::kernels::test
