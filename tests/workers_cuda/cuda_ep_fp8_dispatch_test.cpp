// The FP8 expert-parallel dispatch on 2 GPUs (one thread, GPU and NCCL communicator per rank): an FP8 MoE layer's
// experts run over the rows the exchange delivered, then the BF16 combine. Sending FP8 records (quantized on the
// token's rank) must give bit for bit the output of sending BF16 rows and quantizing them on the expert's rank (the
// same per-token quantization), on every path: the fixed window peer to peer and over NCCL send/recv, and the exact
// host-planned path. Both must also match the layer on one GPU (every expert local) to BF16 rounding. Skipped where
// fewer than 2 GPUs are visible or they are not compute capability 9.x (the FP8 grouped GEMM is sm_90a).

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "tests/kernels/test_util.hpp"
#include "workers/cuda/cuda_ep_exchange.hpp"
#include "workers/cuda/nccl_comm.hpp"
#include "workers/fp8.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;
using kernels::test::device_buffer;
using kernels::test::download_bf16;
using kernels::test::upload;
using kernels::test::upload_bf16;

constexpr int kWorld = 2;
constexpr int32_t kTokens = 96, kTopK = 4, kExperts = 16, kHidden = 1024, kInter = 272;
constexpr int32_t kSlots = kExperts / kWorld;

bool usable_gpus(int n) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < n) return false;
    for (int d = 0; d < n; ++d) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess || major != 9)
            return false;
    }
    return true;
}

/// Every expert's FP8 weights (the same on every rank; rank r uploads all and uses slots [r * kSlots, ...)).
struct fp8_weights {
    std::vector<uint8_t> gu_q, dn_q;
    std::vector<float> gu_s, dn_s;
};

fp8_weights make_weights() {
    const int32_t kbH = (kHidden + 127) / 128, kbI = (kInter + 127) / 128;
    fp8_weights w;
    w.gu_q.resize(size_t(kExperts) * 2 * kInter * kHidden);
    w.dn_q.resize(size_t(kExperts) * kHidden * kInter);
    w.gu_s.resize(size_t(kExperts) * 2 * kbI * kbH);
    w.dn_s.resize(size_t(kExperts) * kbH * kbI);
    std::mt19937 rng(7);
    for (int32_t e = 0; e < kExperts; ++e) {
        for (int32_t part = 0; part < 2; ++part) {
            const auto m = kernels::test::random_f32(size_t(kInter) * kHidden, 1.f / std::sqrt(float(kHidden)), rng);
            quantize_fp8_blocks(m.data(), kInter, kHidden, kHidden,
                                w.gu_q.data() + (size_t(e) * 2 + part) * kInter * kHidden,
                                w.gu_s.data() + (size_t(e) * 2 + part) * kbI * kbH);
        }
        const auto m = kernels::test::random_f32(size_t(kHidden) * kInter, 1.f / std::sqrt(float(kInter)), rng);
        quantize_fp8_blocks(m.data(), kHidden, kInter, kInter, w.dn_q.data() + size_t(e) * kHidden * kInter,
                            w.dn_s.data() + size_t(e) * kbH * kbI);
    }
    return w;
}

/// The FP8 experts of `first_slot`.. over `rows` rows (one choice each, weight 1: the receiver's run) or over a
/// batch's tokens with their top-k (the one-GPU reference), into `out`.
struct expert_run {
    const int32_t* slots;
    const bf16* x;           // or nullptr with records
    const uint8_t* records;  // or nullptr
    const float* topk_weights;
    bf16* out;
    int32_t num_tokens, top_k, num_slots, permute_slots, first_slot;
};

void run_fp8_experts(const expert_run& r, const device_buffer<uint8_t>& gu, const device_buffer<float>& gu_s,
                     const device_buffer<uint8_t>& dn, const device_buffer<float>& dn_s, cudaStream_t stream) {
    if (r.num_tokens == 0) return;
    const int32_t kbH = (kHidden + 127) / 128, kbI = (kInter + 127) / 128;
    const int32_t max_rows = kernels::moe_experts_rows(r.num_tokens, r.top_k, r.permute_slots, 64);
    const int32_t ld = kernels::fp8_scale_ld(max_rows);
    device_buffer<int32_t> offsets(r.permute_slots + 1), dest(size_t(r.num_tokens) * r.top_k), row_token(max_rows);
    device_buffer<uint8_t> ws(kernels::moe_permute_workspace_bytes(r.num_tokens, r.top_k, r.permute_slots));
    device_buffer<uint8_t> xq(size_t(max_rows) * kHidden), aq(size_t(max_rows) * kInter);
    device_buffer<float> xs(size_t(kbH) * ld), as(size_t(kbI) * ld);
    device_buffer<bf16> y(size_t(max_rows) * kHidden);
    y.poison(0);
    const size_t e0 = size_t(r.first_slot);
    const kernels::moe_fp8_experts f{.w_gate_up = gu.get() + e0 * 2 * kInter * kHidden,
                                     .w_gate_up_scales = gu_s.get() + e0 * 2 * kbI * kbH,
                                     .w_down = dn.get() + e0 * kHidden * kInter,
                                     .w_down_scales = dn_s.get() + e0 * kbH * kbI,
                                     .x_q = xq.get(),
                                     .x_scales = xs.get(),
                                     .act_q = aq.get(),
                                     .act_scales = as.get(),
                                     .x_records = r.records};
    kernels::launch_moe_experts({.slots = r.slots,
                                 .x = r.x,
                                 .topk_weights = r.topk_weights,
                                 .out = r.out,
                                 .expert_offsets = offsets.get(),
                                 .dest_rows = dest.get(),
                                 .row_token = row_token.get(),
                                 .permute_workspace = ws.get(),
                                 .y = y.get(),
                                 .max_rows = max_rows,
                                 .num_tokens = r.num_tokens,
                                 .top_k = r.top_k,
                                 .num_slots = r.num_slots,
                                 .permute_slots = r.permute_slots,
                                 .hidden = kHidden,
                                 .inter = kInter,
                                 .row_align = 64,
                                 .fp8 = &f},
                                stream);
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));  // the scratch above is freed on return
}

enum class path { p2p, nccl_fixed, exact };

/// One rank's results: the layer's output with the BF16 dispatch, with the FP8 dispatch, and on its GPU alone.
struct rank_out {
    std::vector<float> bf16_dispatch, fp8_dispatch, single;
    bool p2p = false, overflowed = false;
    int64_t row_bytes[2] = {0, 0};
};

rank_out run_rank(int rank, const std::string& id, path how, const fp8_weights& host_w) {
    ZMOE_CUDA_CHECK(cudaSetDevice(rank));
    cudaStream_t stream = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nccl_comm comm(id, rank, kWorld);
    cuda_workspace ws(workspace_shape{.max_tokens = kTokens,
                                      .max_seqs = kTokens,
                                      .max_blocks_per_seq = 1,
                                      .hidden = kHidden,
                                      .num_q_heads = 1,
                                      .num_kv_heads = 1,
                                      .head_dim = 16,
                                      .vocab_size = 16,
                                      .num_experts = kExperts,
                                      .top_k = kTopK,
                                      .num_slots = kSlots,
                                      .moe_inter = 8,
                                      .dense_inter = 0,
                                      .num_moe_layers = 1,
                                      .world_size = kWorld});
    // This rank's tokens: rows whose groups differ in magnitude, top-k distinct experts (global slot = expert).
    std::mt19937 rng(100 + rank);
    std::vector<float> x = kernels::test::random_bf16(size_t(kTokens) * kHidden, 1.f, rng);
    for (size_t i = 0; i < x.size(); ++i) x[i] = kernels::ref::round_bf16(x[i] * std::ldexp(1.f, int(i / 128 % 5) - 2));
    std::vector<int32_t> slots(size_t(kTokens) * kTopK), experts(kExperts);
    std::vector<float> weights(slots.size());
    for (int32_t t = 0; t < kTokens; ++t) {
        for (int32_t e = 0; e < kExperts; ++e) experts[e] = e;
        std::shuffle(experts.begin(), experts.end(), rng);
        for (int32_t k = 0; k < kTopK; ++k) {
            slots[size_t(t) * kTopK + k] = experts[k];
            weights[size_t(t) * kTopK + k] = 0.1f + float(rng() % 1000) / 1000.f;
        }
    }
    auto d_x = upload_bf16(x);
    auto d_slots = upload(slots);
    auto d_weights = upload(weights);
    auto gu = upload(host_w.gu_q), dn = upload(host_w.dn_q);
    auto gu_s = upload(host_w.gu_s), dn_s = upload(host_w.dn_s);
    const std::vector<float> ones(size_t(kWorld) * kTokens * kTopK, 1.f);
    auto d_ones = upload(ones);
    device_buffer<bf16> out(size_t(kTokens) * kHidden);

    rank_out res;
    for (const bool fp8 : {false, true}) {
        ep_exchange_params q{.comm = &comm,
                             .ws = &ws,
                             .hidden = kHidden,
                             .top_k = kTopK,
                             .max_fixed_tokens = how == path::exact ? 0 : kTokens,
                             .peer_to_peer = how == path::p2p,
                             .fp8_dispatch = fp8};
        cuda_ep_exchange ex(q);
        res.p2p = ex.peer_to_peer();
        res.row_bytes[fp8] = ex.dispatch_row_bytes();
        // A window that holds every choice (no overflow): the paths are compared, not the window's size.
        const int32_t capacity = how == path::exact ? 0 : ex.capacity_for(kTokens, double(kWorld));
        out.poison();
        ex.begin_step(stream);
        ex.dispatch({.slot_ids = d_slots.get(),
                     .x = d_x.get(),
                     .num_tokens = kTokens,
                     .slots_per_rank = kSlots,
                     .capacity = capacity,
                     .lane = 0},
                    stream, stream);
        const ep_received r = ex.received(0, stream);
        EXPECT_EQ(r.x == nullptr, fp8);
        EXPECT_EQ(r.x_fp8 != nullptr, fp8);
        run_fp8_experts({.slots = r.slots,
                         .x = r.x,
                         .records = r.x_fp8,
                         .topk_weights = d_ones.get(),
                         .out = r.y,
                         .num_tokens = r.rows,
                         .top_k = 1,
                         .num_slots = kSlots,
                         .permute_slots = r.num_slots,
                         .first_slot = rank * kSlots},
                        gu, gu_s, dn, dn_s, stream);
        const ep_combine_params cp{.topk_weights = d_weights.get(), .out = out.get(), .num_tokens = kTokens, .lane = 0};
        ex.combine(cp, stream, stream);
        ex.finish_combine(cp, stream);
        ex.end_step(stream);
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        res.overflowed = res.overflowed || ex.overflowed();
        (fp8 ? res.fp8_dispatch : res.bf16_dispatch) = download_bf16(out);
    }
    // The same layer on this GPU alone: every expert local.
    out.poison();
    run_fp8_experts({.slots = d_slots.get(),
                     .x = d_x.get(),
                     .records = nullptr,
                     .topk_weights = d_weights.get(),
                     .out = out.get(),
                     .num_tokens = kTokens,
                     .top_k = kTopK,
                     .num_slots = kExperts,
                     .permute_slots = kExperts,
                     .first_slot = 0},
                    gu, gu_s, dn, dn_s, stream);
    res.single = download_bf16(out);
    cudaStreamDestroy(stream);
    return res;
}

std::vector<rank_out> run_world(path how) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off
    const fp8_weights w = make_weights();
    const std::string id = nccl_unique_id_bytes();
    std::vector<rank_out> out(kWorld);
    std::vector<std::string> errors(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r)
        threads.emplace_back([&, r] {
            try {
                out[r] = run_rank(r, id, how, w);
            } catch (const std::exception& e) {
                errors[r] = e.what();  // the other rank hangs in NCCL: the test's timeout reports it
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    return out;
}

class CudaEpFp8Dispatch : public ::testing::TestWithParam<path> {};

TEST_P(CudaEpFp8Dispatch, SameOutputAsQuantizingAfterTheExchange) {
    if (!usable_gpus(kWorld)) GTEST_SKIP() << "needs " << kWorld << " GPUs of compute capability 9.x";
    const std::vector<rank_out> out = run_world(GetParam());
    for (int r = 0; r < kWorld; ++r) {
        SCOPED_TRACE(::testing::Message() << "rank " << r);
        const rank_out& o = out[r];
        if (GetParam() == path::p2p) {
            EXPECT_TRUE(o.p2p) << "the GPUs could not map each other's windows";
        }
        EXPECT_FALSE(o.overflowed);
        // About half the bytes per row: codes plus one fp32 scale per 128 channels.
        EXPECT_EQ(o.row_bytes[0], int64_t(kHidden) * 2);
        EXPECT_EQ(o.row_bytes[1], kHidden + 4 * (kHidden / 128));
        ASSERT_EQ(o.fp8_dispatch.size(), o.bf16_dispatch.size());
        ASSERT_FALSE(o.fp8_dispatch.empty());
        EXPECT_EQ(std::memcmp(o.fp8_dispatch.data(), o.bf16_dispatch.data(), o.fp8_dispatch.size() * sizeof(float)), 0)
            << "the FP8 dispatch changed the layer's output";
        // Both against the one-GPU layer: each token's choices reached the right experts (only the BF16 rounding
        // of the same fp32 sums can differ).
        const double err = kernels::test::rel_error(o.fp8_dispatch, o.single);
        EXPECT_LE(err, 1e-2) << "expert-parallel vs one GPU";
        std::printf("rank %d: expert-parallel vs one GPU, relative error %.3g\n", r, err);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaEpFp8Dispatch, ::testing::Values(path::p2p, path::nccl_fixed, path::exact),
                         [](const ::testing::TestParamInfo<path>& info) {
                             switch (info.param) {
                                 case path::p2p:
                                     return std::string("PeerToPeer");
                                 case path::nccl_fixed:
                                     return std::string("NcclFixed");
                                 case path::exact:
                                     return std::string("Exact");
                             }
                             return std::string();
                         });

}  // namespace
}  // namespace zmoe::cuda
