// launch_moe_router (the router GEMM + softmax top-k + replica choice of every softmax MoE layer) over shapes: 1 to
// 20 000 tokens, 8 to 512 experts, top-k 1 to 16, each router GEMM kernel (moe_router_impl). The logits are checked
// against double sums; then the top-k, slots and load counts exactly against ref::router_topk + ref::moe_route run on
// the kernel's own logits (a near tie must not flip the comparison). With integer-valued inputs the logits are exact
// whatever the summation order, so there the logits are compared exactly and duplicated router rows test the
// lower-index-first rule on true ties.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct router_case {
    int32_t num_tokens, num_experts, top_k, hidden;
    bool ties = false;  ///< small integers in x and the router, with duplicated router rows: exact logits, true ties
    int32_t num_valid = -1;  ///< -1: no padding
    bool logits_only = false;
    moe_router_impl impl = moe_router_impl::automatic;
};

struct blas_handle {
    cublasLtHandle_t handle = nullptr;
    blas_handle() { ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle)); }
    ~blas_handle() { cublasLtDestroy(handle); }
};

class MoeRouter : public ::testing::TestWithParam<router_case> {};

std::vector<float> small_ints(size_t n, int32_t range, std::mt19937& rng) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(int32_t(rng() % (2 * range + 1)) - range);
    return v;
}

TEST_P(MoeRouter, MatchesReference) {
    const router_case c = GetParam();
    const int32_t T = c.num_tokens, E = c.num_experts, K = c.top_k, H = c.hidden;
    std::mt19937 rng(T * 11 + E * 5 + K * 3 + H);
    std::vector<float> x, w;
    if (c.ties) {  // |logit| <= H * 4 < 2^24: every partial sum exact in fp32
        x = small_ints(size_t(T) * H, 2, rng);
        w = small_ints(size_t(E) * H, 2, rng);
        for (int32_t e = 1; e < E; e += 2)  // odd experts copy the one before: equal logits
            std::copy_n(w.begin() + size_t(e - 1) * H, H, w.begin() + size_t(e) * H);
    } else {
        x = random_bf16(size_t(T) * H, 1.f, rng);
        w = random_bf16(size_t(E) * H, 2.f / std::sqrt(float(H)), rng);
    }
    // Expert e has 1 + e % 3 replicas over 2 ranks' slots.
    std::vector<int32_t> offsets{0}, slots;
    for (int32_t e = 0; e < E; ++e) {
        for (int32_t r = 0; r <= e % 3; ++r) slots.push_back((e * 7 + r * 13) % (2 * E));
        offsets.push_back(int32_t(slots.size()));
    }
    std::vector<int32_t> counts0(E);
    for (auto& v : counts0) v = int32_t(rng() % 5);  // counts are added to, not zeroed

    const size_t tk = size_t(T) * K;
    auto d_x = upload_bf16(x), d_w = upload_bf16(w);
    auto d_offsets = upload(offsets), d_slots = upload(slots), d_counts = upload(counts0);
    auto d_valid = upload(std::vector<int32_t>{c.num_valid});
    device_buffer<float> d_logits(size_t(T) * E), d_weights(tk);
    device_buffer<int32_t> d_ids(tk), d_slot_ids(tk);
    device_buffer<uint8_t> d_blas_ws(4u << 20);
    d_logits.poison();
    d_weights.poison();
    d_ids.poison();
    d_slot_ids.poison();
    blas_handle blas;
    std::vector<moe_stage> stages;
    launch_moe_router(
        {.x = d_x.get(),
         .router_w = d_w.get(),
         .router_logits = d_logits.get(),
         .blas = blas.handle,
         .blas_workspace = d_blas_ws.get(),
         .blas_workspace_bytes = 4u << 20,
         .topk_ids = d_ids.get(),
         .topk_weights = c.logits_only ? nullptr : d_weights.get(),
         .replica_offsets = d_offsets.get(),
         .replica_slots = d_slots.get(),
         .num_valid = c.num_valid < 0 ? nullptr : d_valid.get(),
         .slot_ids = d_slot_ids.get(),
         .load_counts = d_counts.get(),
         .num_tokens = T,
         .num_experts = E,
         .hidden = H,
         .top_k = K,
         .renormalize = T % 2 == 1,
         .mark = [](void* context, moe_stage s) { static_cast<std::vector<moe_stage>*>(context)->push_back(s); },
         .mark_context = &stages},
        nullptr);
    sync_and_check();
    if (T == 0) {
        EXPECT_TRUE(stages.empty());
        EXPECT_EQ(download(d_counts), counts0);
        return;
    }
    const std::vector<moe_stage> want_stages =
        c.logits_only ? std::vector<moe_stage>{moe_stage::router_gemm}
                      : std::vector<moe_stage>{moe_stage::router_gemm, moe_stage::router_topk};
    EXPECT_EQ(stages, want_stages);

    std::vector<float> want_logits(size_t(T) * E);
    for (int32_t t = 0; t < T; ++t)
        for (int32_t e = 0; e < E; ++e) {
            double acc = 0;
            for (int32_t h = 0; h < H; ++h) acc += double(x[size_t(t) * H + h]) * w[size_t(e) * H + h];
            want_logits[size_t(t) * E + e] = float(acc);
        }
    const std::vector<float> logits = download(d_logits);
    if (c.ties)
        ASSERT_EQ(logits, want_logits);
    else
        ASSERT_LT(rel_error(logits, want_logits), 1e-5);
    if (c.logits_only) {  // the top-k outputs untouched
        const std::vector<int32_t> ids = download(d_ids);
        for (int32_t v : ids) ASSERT_EQ(uint32_t(v), 0xffffffffu);
        EXPECT_EQ(download(d_counts), counts0);
        return;
    }
    std::vector<int32_t> ids(tk), counts(E), slot_ids(tk), load = counts0;
    std::vector<float> weights(tk);
    ref::router_topk(logits.data(), ids.data(), weights.data(), counts.data(), T, E, K, T % 2 == 1);
    ref::moe_route(ids.data(), offsets.data(), slots.data(), c.num_valid, slot_ids.data(), load.data(), T, K);
    EXPECT_EQ(download(d_ids), ids);
    EXPECT_EQ(download(d_slot_ids), slot_ids);
    EXPECT_EQ(download(d_counts), load);
    EXPECT_LT(rel_error(download(d_weights), weights), 1e-5);
}

constexpr auto kGemv = moe_router_impl::gemv, kMma = moe_router_impl::mma, kBlas = moe_router_impl::cublaslt;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeRouter,
    ::testing::Values(router_case{1, 128, 8, 2048},                            // decode: the GEMV
                      router_case{1, 128, 8, 2048, false, -1, false, kMma},    // one token, GEMM + top-k in one launch
                      router_case{8, 128, 8, 2048, false, 6},                  // padding, the GEMV
                      router_case{8, 128, 8, 2048, true, 6, false, kMma},      // ties, fused
                      router_case{5, 40, 3, 64, false, -1, false, kGemv},      // the GEMV asked for
                      router_case{9, 8, 1, 64},                                // past the GEMV: fused, a cluster of 1
                      router_case{64, 128, 8, 2048},                           // Qwen3-30B-A3B at 64: fused
                      router_case{64, 128, 8, 2048, false, 60, false, kBlas},  // cuBLASLt asked for
                      router_case{77, 128, 8, 2048, true},                     // true ties, fused
                      router_case{77, 128, 8, 2048, true, -1, false, kBlas},   // true ties, cuBLASLt
                      router_case{130, 60, 4, 200, false, 100, false, kMma},   // a cluster of 4, ragged tiles
                      router_case{512, 128, 8, 2048},                          // fused
                      router_case{333, 512, 16, 96, true, -1, false, kMma},    // 512 experts: mma, then the top-k
                      router_case{100, 256, 8, 512, false, 90, false, kMma},   // 256 experts, 16-token tiles
                      router_case{1000, 16, 2, 40, false, -1, false, kMma},    // hidden not a multiple of 32
                      router_case{3000, 128, 8, 256, true},                    // cuBLASLt
                      router_case{3000, 128, 8, 256, true, -1, false, kMma},   // fused at 3 000 tokens
                      router_case{20000, 64, 6, 64, false, 19000, false, kMma},  // 20 000 tokens, fused
                      router_case{20000, 8, 2, 64, false, 19000},                // cuBLASLt
                      router_case{50, 128, 8, 256, false, -1, true},             // logits only, cuBLASLt
                      router_case{50, 128, 8, 256, false, -1, true, kMma},       // logits only, mma
                      router_case{0, 128, 8, 2048}),
    [](const auto& info) {
        const auto& c = info.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, c.ties ? "_ties" : "",
                         c.num_valid >= 0 ? "_padded" : "", c.logits_only ? "_logits" : "", "_impl", int(c.impl));
    });

}  // namespace
}  // namespace zmoe::kernels::test
