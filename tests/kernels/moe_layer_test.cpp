// launch_moe_layer (the executor's and moe_layer_bench's launch sequence) against ref::moe_decode, the CPU
// definition of a routed-expert block: 1 to 20 000 tokens, both paths (decode and grouped), forced row alignments
// and grouped GEMM kernels, redundant replicas, padding tokens, empty experts. The router logits are checked against
// double sums, then the reference routes by the kernel's fp32 logits (a near tie must not flip the comparison);
// slots and counts exact, the output within BF16 tolerance. launch_moe_experts with more permutation groups than
// weight slots (expert parallelism's unused rows) computes the real rows only.

#include "kernels/reference/bf16.hpp"
#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct layer_case {
    int32_t num_tokens, num_experts, top_k, hidden, inter;
    int32_t extra_replicas = 0;
    int32_t num_valid = -1;  ///< -1: no padding
    moe_path path = moe_path::automatic;
    int32_t row_align = 0;  ///< 0: moe_row_align_for
    grouped_gemm_impl impl = grouped_gemm_impl::automatic;
    bool gather = false;  ///< x permuted into a copy instead of read through row_token
};

struct blas_handle {
    cublasLtHandle_t handle = nullptr;
    blas_handle() { ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle)); }
    ~blas_handle() { cublasLtDestroy(handle); }
};

class MoeLayerLaunch : public ::testing::TestWithParam<layer_case> {};

TEST_P(MoeLayerLaunch, MatchesReference) {
    const layer_case c = GetParam();
    const int32_t T = c.num_tokens, E = c.num_experts, K = c.top_k, H = c.hidden, I = c.inter;
    std::mt19937 rng(T * 7 + E * 3 + H + K);
    // Replicas: expert e's slots, shuffled over the slot numbers.
    const auto [offsets, slots] = random_replicas(E, c.extra_replicas, rng);
    const int32_t S = offsets.back();
    // A router that prefers a few experts, so some experts get no rows at large batches too.
    std::vector<float> router_w = random_bf16(size_t(E) * H, 2.f / std::sqrt(float(H)), rng);
    for (int32_t e = 0; e < E; e += 3)
        for (int32_t h = 0; h < H; ++h) router_w[size_t(e) * H + h] = 0.f;
    const std::vector<float> x = random_bf16(size_t(T) * H, 1.f, rng);
    const std::vector<float> gate_up = random_bf16(size_t(S) * 2 * I * H, 1.f / std::sqrt(float(H)), rng);
    const std::vector<float> down = random_bf16(size_t(S) * H * I, 1.f / std::sqrt(float(I)), rng);
    std::vector<int32_t> counts0(E);
    for (auto& v : counts0) v = int32_t(rng() % 4);  // counts accumulate over a step's layers

    const int32_t align = c.row_align > 0 ? c.row_align : moe_row_align_for(T, K, S);
    const int32_t max_rows = std::max(moe_experts_rows(T, K, S, c.row_align), T * K);
    auto d_x = upload_bf16(x), d_router = upload_bf16(router_w), d_gu = upload_bf16(gate_up),
         d_down = upload_bf16(down);
    auto d_offsets = upload(offsets), d_slots = upload(slots), d_counts = upload(counts0);
    auto d_valid = upload(std::vector<int32_t>{c.num_valid});
    const size_t tk = size_t(T) * K;
    device_buffer<float> d_logits(size_t(T) * E), d_weights(tk);
    device_buffer<int32_t> d_ids(tk), d_slot_ids(tk), d_scratch(moe_decode_scratch_ints(kMoeDecodeMaxTokens, K));
    device_buffer<int32_t> d_perm_offsets(S + 1), d_dest(tk), d_row_token(max_rows);
    device_buffer<uint8_t> d_perm_ws(moe_permute_workspace_bytes(T, K, S));
    device_buffer<bf16> d_xp(c.gather ? size_t(max_rows) * H : 8), d_act(size_t(max_rows) * I);
    device_buffer<bf16> d_y(size_t(max_rows) * H), d_out(size_t(T) * H);
    device_buffer<uint8_t> d_blas_ws(4u << 20);
    d_scratch.poison(0);  // the decode path's scratch starts zeroed (moe_decode_scratch_ints)
    d_logits.poison();
    d_weights.poison();
    d_slot_ids.poison();
    d_act.poison();
    d_y.poison();
    d_out.poison();
    blas_handle blas;
    const moe_layer_params p{.experts = {.x = d_x.get(),
                                         .w_gate_up = d_gu.get(),
                                         .w_down = d_down.get(),
                                         .out = d_out.get(),
                                         .expert_offsets = d_perm_offsets.get(),
                                         .dest_rows = d_dest.get(),
                                         .row_token = d_row_token.get(),
                                         .permute_workspace = d_perm_ws.get(),
                                         .x_permuted = c.gather ? d_xp.get() : nullptr,
                                         .act = d_act.get(),
                                         .y = d_y.get(),
                                         .max_rows = max_rows,
                                         .num_tokens = T,
                                         .top_k = K,
                                         .num_slots = S,
                                         .hidden = H,
                                         .inter = I,
                                         .row_align = c.row_align,
                                         .impl = c.impl},
                             .router_w = d_router.get(),
                             .router_logits = d_logits.get(),
                             .blas = blas.handle,
                             .blas_workspace = d_blas_ws.get(),
                             .blas_workspace_bytes = 4u << 20,
                             .replica_offsets = d_offsets.get(),
                             .replica_slots = d_slots.get(),
                             .num_valid = c.num_valid < 0 ? nullptr : d_valid.get(),
                             .expert_counts = d_counts.get(),
                             .topk_ids = d_ids.get(),
                             .topk_weights = d_weights.get(),
                             .slot_ids = d_slot_ids.get(),
                             .decode_scratch = d_scratch.get(),
                             .num_experts = E,
                             .renormalize = T % 2 == 1,
                             .path = c.path};
    if (c.path == moe_path::decode) {
        ASSERT_TRUE(moe_layer_uses_decode_path(p));
    }
    if (c.path == moe_path::grouped) {
        ASSERT_FALSE(moe_layer_uses_decode_path(p));
    }
    std::vector<moe_stage> stages;
    moe_layer_params marked = p;
    marked.experts.mark = [](void* context, moe_stage s) {
        static_cast<std::vector<moe_stage>*>(context)->push_back(s);
    };
    marked.experts.mark_context = &stages;
    launch_moe_layer(marked, nullptr);
    sync_and_check();
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(stages.back(), moe_stage::end);
    EXPECT_EQ(stages.size(), moe_layer_uses_decode_path(p) ? 2u : 7u) << "align " << align;

    // The logits against double sums; then the reference from the kernel's logits.
    std::vector<float> want_logits(size_t(T) * E);
    for (int32_t t = 0; t < T; ++t)
        for (int32_t e = 0; e < E; ++e) {
            double acc = 0;
            for (int32_t h = 0; h < H; ++h) acc += double(x[size_t(t) * H + h]) * router_w[size_t(e) * H + h];
            want_logits[size_t(t) * E + e] = float(acc);
        }
    const std::vector<float> logits = download(d_logits);
    EXPECT_LT(rel_error(logits, want_logits), 1e-5);
    std::vector<float> want(size_t(T) * H), weights(tk);
    std::vector<int32_t> slot_ids(tk), counts = counts0;
    ref::moe_decode(logits.data(), offsets.data(), slots.data(), c.num_valid, x.data(), gate_up.data(), down.data(),
                    weights.data(), slot_ids.data(), counts.data(), want.data(), T, K, E, H, I, p.renormalize);
    EXPECT_EQ(download(d_slot_ids), slot_ids);
    EXPECT_EQ(download(d_counts), counts);
    const std::vector<float> got_weights = download(d_weights);
    for (size_t i = 0; i < tk; ++i) ASSERT_NEAR(got_weights[i], weights[i], 1e-5f) << "choice " << i;
    const std::vector<float> out = download_bf16(d_out);
    for (float v : out) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(rel_error(out, want), kBf16Tolerance);
}

constexpr auto kDecode = moe_path::decode, kGrouped = moe_path::grouped;
constexpr auto kAutoImpl = grouped_gemm_impl::automatic, kMma = grouped_gemm_impl::mma_sync,
               kWgmma = grouped_gemm_impl::wgmma, kSmall = grouped_gemm_impl::small;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeLayerLaunch,
    ::testing::Values(layer_case{1, 128, 8, 2048, 768},                         // Qwen3-30B-A3B, decode path
                      layer_case{1, 128, 8, 2048, 768, 0, -1, kGrouped},        // one token on the grouped path
                      layer_case{3, 128, 8, 2048, 768},                         // the one launch (automatic)
                      layer_case{8, 128, 8, 2048, 768},                         // T = 8 as the executor runs it
                      layer_case{8, 128, 8, 256, 128, 20, 5, kDecode},          // decode path, replicas, padding
                      layer_case{16, 128, 8, 2048, 768, 0, -1, kDecode},        // the one launch at 16 tokens
                      layer_case{13, 64, 6, 512, 352, 9, 11, kDecode},          // DeepSeek-like top-6, ragged
                      layer_case{3, 60, 4, 64, 88, 7, -1, kGrouped, 16, kMma},  // mma.sync, 16-row groups
                      layer_case{37, 16, 3, 96, 40, 0, 30, kGrouped, 64, kWgmma, true},  // gathered copy, padding
                      layer_case{100, 128, 8, 256, 128, 0, -1, kGrouped, 8, kSmall},     // the small-group kernel
                      layer_case{300, 40, 6, 136, 72, 9},                                // auto, replicas
                      layer_case{2048, 64, 8, 256, 128, 0, 2000, kGrouped, 128, kAutoImpl},
                      layer_case{20000, 16, 2, 64, 64, 0, -1, kGrouped, 64, kWgmma}),  // 20 000 tokens
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter, "_extra",
                         c.extra_replicas, "_path", int(c.path), "_align", c.row_align, "_impl", int(c.impl),
                         c.gather ? "_gather" : "");
    });

TEST(MoeExperts, UnusedPermutationGroupsAreNotComputed) {
    // Expert parallelism's call: 12 weight slots, 16 permutation groups, one choice per row (top_k 1, weight 1).
    // Rows of slots 12..15 are grouped last and never computed; every other row is its slot's expert output.
    const int32_t T = 300, K = 1, S = 12, P = 16, H = 64, I = 48;
    std::mt19937 rng(5);
    std::vector<int32_t> ids(size_t(T) * K);
    for (auto& id : ids) id = int32_t(rng() % P);
    const std::vector<float> ones(ids.size(), 1.f);
    const std::vector<float> x = random_bf16(size_t(T) * H, 1.f, rng);
    const std::vector<float> gate_up = random_bf16(size_t(S) * 2 * I * H, 0.125f, rng);
    const std::vector<float> down = random_bf16(size_t(S) * H * I, 0.15f, rng);
    const int32_t max_rows = moe_experts_rows(T, K, P, 0);
    auto d_ids = upload(ids);
    auto d_weights = upload(ones);
    auto d_x = upload_bf16(x), d_gu = upload_bf16(gate_up), d_down = upload_bf16(down);
    device_buffer<int32_t> d_offsets(P + 1), d_dest(ids.size()), d_row_token(max_rows);
    device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(T, K, P));
    device_buffer<bf16> d_act(size_t(max_rows) * I), d_y(size_t(max_rows) * H), d_out(size_t(T) * H);
    d_out.poison();
    launch_moe_experts({.slots = d_ids.get(),
                        .x = d_x.get(),
                        .topk_weights = d_weights.get(),
                        .w_gate_up = d_gu.get(),
                        .w_down = d_down.get(),
                        .out = d_out.get(),
                        .expert_offsets = d_offsets.get(),
                        .dest_rows = d_dest.get(),
                        .row_token = d_row_token.get(),
                        .permute_workspace = d_ws.get(),
                        .act = d_act.get(),
                        .y = d_y.get(),
                        .max_rows = max_rows,
                        .num_tokens = T,
                        .top_k = K,
                        .num_slots = S,
                        .permute_slots = P,
                        .hidden = H,
                        .inter = I},
                       nullptr);
    sync_and_check();
    // The rows of real slots against the grouped GEMM reference chained by hand: act = bf16(silu(g) * u), then
    // y = bf16(act . down) (one choice of weight 1: the combine is the identity).
    const std::vector<int32_t> offsets = download(d_offsets);
    const std::vector<int32_t> dest = download(d_dest);
    ASSERT_EQ(int32_t(offsets.size()), P + 1);
    std::vector<float> xp(size_t(offsets[S]) * H, 0.f);
    for (int32_t t = 0; t < T; ++t)
        if (ids[t] < S) {
            ASSERT_LT(dest[t], offsets[S]);
            std::copy_n(x.begin() + size_t(t) * H, H, xp.begin() + size_t(dest[t]) * H);
        } else {
            ASSERT_GE(dest[t], offsets[S]) << "a row of an unused group is placed among the computed ones";
        }
    std::vector<float> act(size_t(offsets[S]) * I), y(size_t(offsets[S]) * H);
    ref::grouped_gemm(xp.data(), gate_up.data(), offsets.data(), act.data(), I, H, S, true);
    for (auto& v : act) v = ref::round_bf16(v);
    ref::grouped_gemm(act.data(), down.data(), offsets.data(), y.data(), H, I, S, false);
    const std::vector<float> out = download_bf16(d_out);
    std::vector<float> got, want;
    for (int32_t t = 0; t < T; ++t)
        if (ids[t] < S)
            for (int32_t h = 0; h < H; ++h) {
                got.push_back(out[size_t(t) * H + h]);
                want.push_back(ref::round_bf16(y[size_t(dest[t]) * H + h]));
            }
    ASSERT_FALSE(got.empty());
    EXPECT_LT(rel_error(got, want), kBf16Tolerance);
}

}  // namespace
}  // namespace zmoe::kernels::test
