// The block-scaled FP8 experts on the GPU (launch_fp8_quantize, launch_grouped_gemm_fp8 through launch_moe_experts
// with moe_experts_params::fp8) against the CPU arithmetic of the format in workers/fp8.hpp (the reference of the
// CPU backend's W8A8 path): e4m3 codes and scales of the activation quantization bit for bit, then the whole
// routed-expert block (quantize + permute, gate/up with SiLU * up quantized in the epilogue, down, combine) over
// 1 to 16 384 tokens, ragged dimensions (not multiples of 128: partial scale blocks in N and K), 8 to 128 experts,
// empty experts. Skipped off compute capability 9.x (the kernel is sm_90a).

#include <cstring>

#include "kernels/moe_decode_fp8.hpp"
#include "kernels/moe_decode_one_launch.hpp"
#include "tests/kernels/test_util.hpp"
#include "workers/fp8.hpp"

namespace zmoe::kernels::test {
namespace {

bool device_is_sm90() {
    int dev = 0, major = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&dev));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
}

/// Activations whose 128-channel groups have different magnitudes (so each group's scale matters), with an
/// all-zero group in some rows (scale 1, codes 0), BF16-representable.
std::vector<float> grouped_activations(int32_t rows, int32_t cols, std::mt19937& rng) {
    std::vector<float> x = random_bf16(size_t(rows) * cols, 1.f, rng);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            const int32_t g = c / 128;
            const float mag = (r % 7 == 3 && g == 1) ? 0.f : std::ldexp(1.f, (r + 3 * g) % 9 - 4);
            x[size_t(r) * cols + c] = ref::round_bf16(x[size_t(r) * cols + c] * mag);
        }
    return x;
}

/// A weight [rows, cols] uniform in [-scale, scale) whose 128 x 128 blocks have different magnitudes (wrong block
/// scales show). A xorshift generator: the Qwen3-shaped cases draw 600 M values.
std::vector<float> blocky_weight(int32_t rows, int32_t cols, float scale, std::mt19937& rng) {
    uint64_t s = (uint64_t(rng()) << 32) | rng() | 1u;
    std::vector<float> w(size_t(rows) * cols);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            const float u = float(s >> 40) * (2.f / 16777216.f) - 1.f;  // [-1, 1)
            w[size_t(r) * cols + c] = u * scale * float(1 + (r / 128 + 2 * (c / 128)) % 4);
        }
    return w;
}

TEST(Fp8Quantize, BitIdenticalToTheCpuQuantization) {
    for (const int32_t cols : {2048, 200, 16, 132}) {
        for (const int32_t top_k : {0, 3}) {  // 0: in place (no destinations)
            SCOPED_TRACE(make_name("cols ", cols, " top_k ", top_k));
            std::mt19937 rng(cols + top_k);
            const int32_t T = 37, copies = top_k > 0 ? top_k : 1, rows = T * copies + 5;
            std::vector<float> x = grouped_activations(T, cols, rng);
            x[5] = 1e30f;  // saturates BF16 -> a huge finite value; its group's scale absorbs it
            x[size_t(cols) + 1] = ref::round_bf16(1e-30f);
            // Destinations: a permutation of the rows, leaving 5 unwritten.
            std::vector<int32_t> dest(size_t(T) * copies);
            for (size_t i = 0; i < dest.size(); ++i) dest[i] = int32_t(i);
            std::shuffle(dest.begin(), dest.end(), rng);
            const int32_t groups = (cols + 127) / 128, ld = fp8_scale_ld(rows);
            auto d_x = upload_bf16(x);
            auto d_dest = upload(dest);
            device_buffer<uint8_t> d_q(size_t(rows) * cols);
            device_buffer<float> d_s(size_t(groups) * ld);
            d_q.poison(0x7f);
            d_s.poison();
            launch_fp8_quantize({.x = d_x.get(),
                                 .dest_rows = top_k > 0 ? d_dest.get() : nullptr,
                                 .q = d_q.get(),
                                 .scales = d_s.get(),
                                 .num_tokens = T,
                                 .top_k = copies,
                                 .cols = cols,
                                 .scale_ld = ld},
                                nullptr);
            sync_and_check();
            const std::vector<uint8_t> q = download(d_q);
            const std::vector<float> s = download(d_s);
            std::vector<float> xr(cols), qv(cols), sv(groups);
            for (int32_t t = 0; t < T; ++t) {
                for (int32_t c = 0; c < cols; ++c) xr[c] = ref::round_bf16(x[size_t(t) * cols + c]);
                quantize_fp8_activation_row(xr.data(), cols, qv.data(), sv.data());
                for (int32_t j = 0; j < copies; ++j) {
                    const int32_t row = top_k > 0 ? dest[size_t(t) * copies + j] : t;
                    for (int32_t g = 0; g < groups; ++g) ASSERT_EQ(s[size_t(g) * ld + row], sv[g]) << "t " << t;
                    for (int32_t c = 0; c < cols; ++c) {
                        const uint8_t code = q[size_t(row) * cols + c];
                        // The CPU gives the value; its code is f32_to_e4m3 of it (the value is exact in e4m3).
                        ASSERT_EQ(code, f32_to_e4m3(qv[c])) << "t " << t << " c " << c;
                    }
                }
            }
        }
    }
}

struct fp8_case {
    int32_t num_tokens, num_experts, top_k, hidden, inter;
    bool decode = false;  ///< the few-token kernels (detail::launch_moe_decode_fp8) instead of the grouped path
    /// launch_moe_layer (the router, then the path it chooses: the few-token kernels at one token) instead; the
    /// reference then routes as the GPU's router did (its slots and weights), and only out is compared.
    bool layer = false;
    fp8_gemm_tiles tiles = fp8_gemm_tiles::automatic;  ///< the grouped path's GEMM tiles
    bool bulk = true;           ///< the few-token gate/up kernel stages its weights by bulk copies (same arithmetic)
    bool gather = true;         ///< moe_experts_params::fp8_gather (wide gate/up tiles gather x's rows)
    bool force_decode = false;  ///< with layer: moe_path::decode (the few-token one launch at any supported count)
};

struct blas_handle {
    cublasLtHandle_t handle = nullptr;
    blas_handle() { ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle)); }
    ~blas_handle() { cublasLtDestroy(handle); }
};

/// The CPU reference of one K-blocked FP8 product: sum_kb dot(aq[kb], wq[kb]) * as[kb] * ws[kb], each block's dot
/// in fp32, the blocks added in fp32 in order (workers/cpu_kernels.cpp's linear_rows_fp8).
float fp8_dot(const float* aq, const float* as, const float* wq, const float* ws, int32_t k) {
    float acc = 0.f;
    for (int32_t kb = 0; kb * 128 < k; ++kb) {
        float d = 0.f;
        for (int32_t i = kb * 128; i < std::min(k, kb * 128 + 128); ++i) d += aq[i] * wq[i];
        acc += d * (as[kb] * ws[kb]);
    }
    return acc;
}

class MoeExpertsFp8 : public ::testing::TestWithParam<fp8_case> {};

TEST_P(MoeExpertsFp8, MatchesCpuReference) {
    if (!device_is_sm90()) GTEST_SKIP() << "the FP8 grouped GEMM needs compute capability 9.x";
    const fp8_case c = GetParam();
    const int32_t T = c.num_tokens, E = c.num_experts, K = c.top_k, H = c.hidden, I = c.inter;
    const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128;
    std::mt19937 rng(T * 13 + E * 5 + H + I);

    // Weights: random, quantized per expert and projection by the CPU codec (the checkpoint's format).
    std::vector<uint8_t> gu_q(size_t(E) * 2 * I * H), dn_q(size_t(E) * H * I);
    std::vector<float> gu_s(size_t(E) * 2 * kbI * kbH), dn_s(size_t(E) * kbH * kbI);
    for (int32_t e = 0; e < E; ++e) {
        for (int32_t part = 0; part < 2; ++part) {
            const std::vector<float> w = blocky_weight(I, H, 1.f / std::sqrt(float(H)), rng);
            quantize_fp8_blocks(w.data(), I, H, H, gu_q.data() + (size_t(e) * 2 + part) * I * H,
                                gu_s.data() + (size_t(e) * 2 + part) * kbI * kbH);
        }
        const std::vector<float> w = blocky_weight(H, I, 1.f / std::sqrt(float(I)), rng);
        quantize_fp8_blocks(w.data(), H, I, I, dn_q.data() + size_t(e) * H * I, dn_s.data() + size_t(e) * kbH * kbI);
    }
    const float* table = e4m3_table();
    // Routing: distinct experts per token, every fourth expert never chosen (empty groups).
    std::vector<int32_t> ids(size_t(T) * K);
    std::vector<float> weights(ids.size());
    std::vector<int32_t> pool;
    for (int32_t e = 0; e < E; ++e)
        if (e % 4 != 1 || E - (E + 2) / 4 < K) pool.push_back(e);
    for (int32_t t = 0; t < T; ++t) {
        std::shuffle(pool.begin(), pool.end(), rng);
        for (int32_t j = 0; j < K; ++j) {
            ids[size_t(t) * K + j] = pool[j];
            weights[size_t(t) * K + j] = 0.1f + float(rng() % 1000) / 1000.f;
        }
    }
    const std::vector<float> x = grouped_activations(T, H, rng);

    const int32_t max_rows = moe_experts_rows(T, K, E, 64), ld = fp8_scale_ld(max_rows);
    auto d_x = upload_bf16(x);
    auto d_ids = upload(ids);
    auto d_weights = upload(weights);
    auto d_gu = upload(gu_q), d_dn = upload(dn_q);
    auto d_gu_s = upload(gu_s), d_dn_s = upload(dn_s);
    device_buffer<int32_t> d_offsets(E + 1), d_dest(size_t(T) * K), d_row_token(max_rows);
    device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(T, K, E));
    device_buffer<uint8_t> d_xq(size_t(max_rows) * H), d_aq(size_t(max_rows) * I);
    device_buffer<float> d_xs(size_t(kbH) * ld), d_as(size_t(kbI) * ld);
    device_buffer<bf16> d_y(size_t(max_rows) * H), d_out(size_t(T) * H);
    d_xq.poison(0x7f);  // e4m3 NaN: padding rows stay NaN, which must not reach a real row
    d_aq.poison(0x7f);
    d_xs.poison();
    d_as.poison();
    d_y.poison();
    d_out.poison();
    device_buffer<float> d_act(c.decode ? size_t(T) * K * I : 0);
    const moe_fp8_experts f{.w_gate_up = d_gu.get(),
                            .w_gate_up_scales = d_gu_s.get(),
                            .w_down = d_dn.get(),
                            .w_down_scales = d_dn_s.get(),
                            .x_q = d_xq.get(),
                            .x_scales = d_xs.get(),
                            .act_q = d_aq.get(),
                            .act_scales = d_as.get()};
    // The layer's router: random weights, one slot per expert; its outputs replace ids and weights below.
    const std::vector<float> router_w =
        c.layer ? random_bf16(size_t(E) * H, 2.f / std::sqrt(float(H)), rng) : std::vector<float>{};
    std::vector<int32_t> identity(E + 1);
    for (int32_t e = 0; e <= E; ++e) identity[e] = e;
    auto d_router = upload_bf16(router_w);
    auto d_replica = upload(identity);
    device_buffer<float> d_logits(size_t(T) * E), d_layer_weights(size_t(T) * K);
    device_buffer<int32_t> d_topk_ids(size_t(T) * K), d_slot_ids(size_t(T) * K),
        d_scratch(moe_decode_scratch_ints(kMoeDecodeMaxTokens, K));
    device_buffer<uint8_t> d_blas_ws(4u << 20);
    d_scratch.poison(0);
    if (c.layer) {
        blas_handle blas;
        const moe_layer_params p{.experts = {.x = d_x.get(),
                                             .out = d_out.get(),
                                             .expert_offsets = d_offsets.get(),
                                             .dest_rows = d_dest.get(),
                                             .row_token = d_row_token.get(),
                                             .permute_workspace = d_ws.get(),
                                             .y = d_y.get(),
                                             .max_rows = max_rows,
                                             .num_tokens = T,
                                             .top_k = K,
                                             .num_slots = E,
                                             .hidden = H,
                                             .inter = I,
                                             .fp8 = &f},
                                 .router_w = d_router.get(),
                                 .router_logits = d_logits.get(),
                                 .blas = blas.handle,
                                 .blas_workspace = d_blas_ws.get(),
                                 .blas_workspace_bytes = 4u << 20,
                                 .replica_offsets = d_replica.get(),
                                 .replica_slots = d_replica.get(),
                                 .topk_ids = d_topk_ids.get(),
                                 .topk_weights = d_layer_weights.get(),
                                 .slot_ids = d_slot_ids.get(),
                                 .decode_scratch = d_scratch.get(),
                                 .num_experts = E,
                                 .renormalize = true,
                                 .path = c.force_decode ? moe_path::decode : moe_path::automatic};
        EXPECT_EQ(moe_layer_uses_decode_path(p), T <= 4 || c.force_decode);  // the one launch's automatic range
        launch_moe_layer(p, nullptr);
        sync_and_check();
        ids = download(d_slot_ids);
        weights = download(d_layer_weights);
        // The routing itself: the top-k of the GPU's logits (one slot per expert here), renormalised softmax weights.
        const std::vector<float> logits = download(d_logits);
        for (int32_t t = 0; t < T; ++t) {
            const float* l = logits.data() + size_t(t) * E;
            std::vector<bool> chosen(E, false);
            double wsum = 0;
            for (int32_t j = 0; j < K; ++j) {
                ASSERT_TRUE(ids[size_t(t) * K + j] >= 0 && ids[size_t(t) * K + j] < E);
                chosen[ids[size_t(t) * K + j]] = true;
                wsum += weights[size_t(t) * K + j];
            }
            EXPECT_NEAR(wsum, 1.0, 1e-5) << "token " << t;
            float min_chosen = INFINITY, max_other = -INFINITY;
            for (int32_t e = 0; e < E; ++e) {
                if (chosen[e])
                    min_chosen = std::min(min_chosen, l[e]);
                else
                    max_other = std::max(max_other, l[e]);
            }
            EXPECT_GE(min_chosen, max_other) << "token " << t;
            for (int32_t j = 1; j < K; ++j)  // weights follow the logits: w_j / w_0 = exp(l_j - l_0)
                EXPECT_NEAR(weights[size_t(t) * K + j] / weights[size_t(t) * K],
                            std::exp(l[ids[size_t(t) * K + j]] - l[ids[size_t(t) * K]]), 1e-4)
                    << "token " << t << " choice " << j;
        }
    } else if (c.decode) {
        ASSERT_TRUE(detail::moe_decode_fp8_supported(T, K, H, I));
        d_act.poison();
        detail::launch_moe_decode_fp8({.x = d_x.get(),
                                       .slot_ids = d_ids.get(),
                                       .topk_weights = d_weights.get(),
                                       .fp8 = f,
                                       .act = d_act.get(),
                                       .out = d_out.get(),
                                       .num_tokens = T,
                                       .top_k = K,
                                       .hidden = H,
                                       .inter = I,
                                       .bulk_weights = c.bulk},
                                      nullptr);
    } else {
        launch_moe_experts({.slots = d_ids.get(),
                            .x = d_x.get(),
                            .topk_weights = d_weights.get(),
                            .out = d_out.get(),
                            .expert_offsets = d_offsets.get(),
                            .dest_rows = d_dest.get(),
                            .row_token = d_row_token.get(),
                            .permute_workspace = d_ws.get(),
                            .y = d_y.get(),
                            .max_rows = max_rows,
                            .num_tokens = T,
                            .top_k = K,
                            .num_slots = E,
                            .hidden = H,
                            .inter = I,
                            .row_align = 64,
                            .fp8_tiles = c.tiles,
                            .fp8_gather = c.gather,
                            .fp8 = &f},
                           nullptr);
    }
    sync_and_check();
    // The decode path has no permutation: choice (t, j) is "row" t * K + j of its fp32 act.
    std::vector<int32_t> dest = download(d_dest);
    if (c.decode || c.layer)
        for (size_t i = 0; i < dest.size(); ++i) dest[i] = int32_t(i);
    const std::vector<float> act_f = c.decode ? download(d_act) : std::vector<float>{};
    const std::vector<uint8_t> act_q = download(d_aq);
    const std::vector<float> act_s = download(d_as);
    const std::vector<float> out = download_bf16(d_out);

    // The reference, per token and choice. Sources of difference from the GPU, and the tolerances they justify:
    // (1) summation order, and on the grouped path the FP8 tensor cores' accumulation inside each 128-wide K block
    //     (four wgmma k32 before the fp32 promotion), which keeps fewer bits than fp32 (about 14 per DeepSeek-V3's
    //     report): on H100 the GPU's act differs from the CPU's fp32 act by up to ~1e-3 of the row's largest |act|
    //     (the act scales, amax / 448, differed by up to 9e-4 where a group's amax is the row's); the few-token
    //     kernels sum in fp32 on the CUDA cores (~1e-6). Near zero that is several e4m3 steps of a small element, so
    //     the codes are compared dequantized: |code x scale - act| <= half an e4m3 step of act (|act| / 16, or
    //     2^-10 x scale below e4m3's normal range) + 4e-3 x the row's amax, and the scales within 4e-3 of the row's
    //     scale (amax / 448: a group whose amax is small against the row's carries the row's absolute noise). A
    //     wrong scale, block or row is off by O(amax).
    // (2) those act differences flip e4m3 roundings of act (one step of an element, up to 2^-3 of it), which moves
    //     y by |w_down| x that step: a few 1e-3 of the output's scale for the elements it hits;
    // (3) BF16 roundings of y and out (2^-8 relative), identical on both sides unless (1)/(2) moved y across a
    //     rounding boundary: one BF16 step.
    // So out within 2^-6 of its value + 2e-2 of the output's largest |value| everywhere and the relative RMS error
    // below 1e-2 (H100: max error 0.3-1.1% of the largest |value|, RMS 0.2-0.5%; the share outside 2^-7 + 1e-3,
    // printed, is 0.5-3.4% and is what the flips of (2) make); a wrong scale, block, row or routing weight gives
    // errors of O(1) relative.
    std::vector<float> xq(H), xs(kbH), gate(I), up(I), act(I), aq(I), as(kbI);
    std::vector<float> gu_v(size_t(2) * I * H), dn_v(size_t(H) * I);
    std::vector<float> ref(size_t(T) * H, 0.f);
    std::vector<std::vector<float>> y_of(K, std::vector<float>(H));
    int64_t code_mismatch = 0, code_total = 0;
    double max_scale_rel = 0, max_act_err = 0;             // the latter relative to the row's amax
    std::vector<std::vector<float>> deq_gu(E), deq_dn(E);  // e4m3 values (unscaled), built on first use
    for (int32_t t = 0; t < T; ++t) {
        for (int32_t h = 0; h < H; ++h) xq[h] = x[size_t(t) * H + h];
        quantize_fp8_activation_row(xq.data(), H, xq.data(), xs.data());
        for (int32_t j = 0; j < K; ++j) {
            const int32_t e = ids[size_t(t) * K + j];
            if (deq_gu[e].empty()) {
                deq_gu[e].resize(size_t(2) * I * H);
                for (size_t i = 0; i < deq_gu[e].size(); ++i) deq_gu[e][i] = table[gu_q[size_t(e) * 2 * I * H + i]];
                deq_dn[e].resize(size_t(H) * I);
                for (size_t i = 0; i < deq_dn[e].size(); ++i) deq_dn[e][i] = table[dn_q[size_t(e) * H * I + i]];
            }
            for (int32_t n = 0; n < I; ++n) {
                const float* gs = gu_s.data() + (size_t(e) * 2 * kbI + n / 128) * kbH;
                const float* us = gu_s.data() + ((size_t(e) * 2 + 1) * kbI + n / 128) * kbH;
                gate[n] = fp8_dot(xq.data(), xs.data(), deq_gu[e].data() + size_t(n) * H, gs, H);
                up[n] = fp8_dot(xq.data(), xs.data(), deq_gu[e].data() + (size_t(I) + n) * H, us, H);
                act[n] = gate[n] / (1.f + std::exp(-gate[n])) * up[n];
            }
            quantize_fp8_activation_row(act.data(), I, aq.data(), as.data());
            const int32_t row = dest[size_t(t) * K + j];
            if (c.layer) {
                // act is internal to the path the layer chose: out only.
            } else if (c.decode) {
                // fp32 act before its quantization: (1) only, relative to the row's largest value.
                float amax = 0.f;
                for (int32_t n = 0; n < I; ++n) amax = std::max(amax, std::abs(act[n]));
                for (int32_t n = 0; n < I; ++n)
                    ASSERT_LE(std::abs(act_f[size_t(row) * I + n] - act[n]), 1e-4f * amax + 1e-30f)
                        << "t " << t << " choice " << j << " column " << n;
            } else {
                float amax = 0.f;
                for (int32_t n = 0; n < I; ++n) amax = std::max(amax, std::abs(act[n]));
                for (int32_t g = 0; g < kbI; ++g) {
                    // Relative to the row's scale (amax / 448): a group whose amax is small against the row's
                    // carries the row's absolute noise.
                    const float got = act_s[size_t(g) * ld + row];
                    if (amax > 0.f)
                        max_scale_rel = std::max(max_scale_rel, std::abs(double(got) - as[g]) / (amax / 448.0));
                }
                for (int32_t n = 0; n < I; ++n) {
                    const float code_value = table[act_q[size_t(row) * I + n]];
                    const float got = code_value * act_s[size_t(n / 128) * ld + row];
                    ++code_total;
                    if (code_value != aq[n]) ++code_mismatch;
                    const double err = std::abs(double(got) - act[n]);
                    if (amax > 0.f) max_act_err = std::max(max_act_err, err / amax);
                    ASSERT_LE(err, std::abs(act[n]) / 16.0 + std::ldexp(double(as[n / 128]), -10) + 4e-3 * amax)
                        << "t " << t << " choice " << j << " column " << n << " got " << got << " (code " << code_value
                        << ") want " << act[n] << " (code " << aq[n] << ", row amax " << amax << ")";
                }
            }
            for (int32_t h = 0; h < H; ++h) {
                const float* ws = dn_s.data() + (size_t(e) * kbH + h / 128) * kbI;
                y_of[j][h] = ref::round_bf16(fp8_dot(aq.data(), as.data(), deq_dn[e].data() + size_t(h) * I, ws, I));
            }
        }
        for (int32_t h = 0; h < H; ++h) {
            float s = 0.f;
            for (int32_t j = 0; j < K; ++j) s = std::fma(weights[size_t(t) * K + j], y_of[j][h], s);
            ref[size_t(t) * H + h] = ref::round_bf16(s);
        }
    }
    EXPECT_LE(max_scale_rel, 4e-3);
    double max_ref = 0, max_err = 0, sq_err = 0, sq_ref = 0;
    for (const float v : ref) max_ref = std::max(max_ref, double(std::abs(v)));
    int64_t loose = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_FALSE(std::isnan(out[i])) << "token " << i / H << " column " << i % H;
        const double err = std::abs(double(out[i]) - ref[i]);
        ASSERT_LE(err, std::ldexp(std::abs(ref[i]), -6) + 2e-2 * max_ref)
            << "token " << i / H << " column " << i % H << " got " << out[i] << " want " << ref[i];
        if (err > std::ldexp(std::abs(ref[i]), -7) + 1e-3 * max_ref) ++loose;
        max_err = std::max(max_err, err);
        sq_err += err * err;
        sq_ref += double(ref[i]) * ref[i];
    }
    const double rms_rel = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
    std::printf(
        "  act: max |err| / row amax %.3g, codes differing %lld of %lld, scales max rel %.3g; out: max err / "
        "max |ref| %.3g, rms rel %.3g, outside 2^-7 + 1e-3: %lld of %zu\n",
        max_act_err, static_cast<long long>(code_mismatch), static_cast<long long>(code_total), max_scale_rel,
        max_ref > 0 ? max_err / max_ref : max_err, rms_rel, static_cast<long long>(loose), ref.size());
    EXPECT_LE(rms_rel, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsFp8,
    ::testing::Values(
        // Qwen3-30B-A3B's expert shapes (hidden 2048, FFN 768, 128 experts, top-8).
        fp8_case{1, 128, 8, 2048, 768}, fp8_case{3, 128, 8, 2048, 768}, fp8_case{32, 128, 8, 2048, 768},
        fp8_case{64, 128, 8, 2048, 768},
        // Ragged: hidden and FFN not multiples of 128 (partial scale blocks in N and in K).
        fp8_case{1, 8, 2, 144, 208}, fp8_case{17, 8, 2, 144, 208}, fp8_case{300, 16, 4, 272, 336},
        fp8_case{1024, 8, 2, 400, 144}, fp8_case{4096, 16, 2, 144, 208},
        // Enough rows per expert for the down GEMM's 128-row tiles.
        fp8_case{16384, 16, 2, 144, 208}, fp8_case{512, 8, 4, 2048, 768},
        // Each tile shape forced: wide on small groups (64-row tails leave a warpgroup idle), narrow on large ones.
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::wide},
        fp8_case{64, 128, 8, 2048, 768, false, false, fp8_gemm_tiles::wide},
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::narrow},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::narrow},
        fp8_case{1024, 8, 2, 400, 144, false, false, fp8_gemm_tiles::wide_staggered},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::wide_staggered},
        // Clusters of two CTAs multicasting b: odd tile counts per expert (the rounding's empty tiles), 64-row tails,
        // empty experts, ragged shapes, and a Qwen3-30B-A3B shape.
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::wide_multicast},
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::wide_multicast},
        fp8_case{64, 128, 8, 2048, 768, false, false, fp8_gemm_tiles::wide_multicast},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::wide_multicast},
        // Pair tiles (gate/up in clusters of two CTAs on the two halves of a 128-channel group, the row amax
        // exchanged): ragged groups (the second half partly or wholly past n), 64-row tails, empty experts, many
        // tiles per CTA (the exchange buffers alternating), and Qwen3-30B-A3B shapes; with A multicast too.
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::pair},
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::pair},
        fp8_case{64, 128, 8, 2048, 768, false, false, fp8_gemm_tiles::pair},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::pair},
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::pair_multicast},
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::pair_multicast},
        fp8_case{64, 128, 8, 2048, 768, false, false, fp8_gemm_tiles::pair_multicast},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::pair_multicast},
        // Wide tiles with A's fragments in registers (ldmatrix from the swizzled stage): ragged K tails, 64-row tails,
        // empty experts, Qwen3-30B-A3B shapes.
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::wide_rs},
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::wide_rs},
        fp8_case{64, 128, 8, 2048, 768, false, false, fp8_gemm_tiles::wide_rs},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::wide_rs},
        // Wide tiles reading a permuted copy of x (the gather off).
        fp8_case{4096, 16, 2, 144, 208, false, false, fp8_gemm_tiles::wide, true, false},
        fp8_case{512, 8, 4, 2048, 768, false, false, fp8_gemm_tiles::automatic, true, false},
        fp8_case{300, 16, 4, 272, 336, false, false, fp8_gemm_tiles::wide_multicast, true, false},
        // The few-token kernels.
        fp8_case{1, 128, 8, 2048, 768, true}, fp8_case{4, 128, 8, 2048, 768, true}, fp8_case{1, 8, 2, 144, 208, true},
        fp8_case{3, 16, 4, 272, 336, true},
        fp8_case{1, 128, 8, 2048, 768, true, false, fp8_gemm_tiles::automatic, false},
        fp8_case{3, 16, 4, 272, 336, true, false, fp8_gemm_tiles::automatic, false},
        // Through launch_moe_layer: the router, then the few-token kernels (one token) or the grouped path.
        fp8_case{1, 128, 8, 2048, 768, false, true}, fp8_case{6, 128, 8, 2048, 768, false, true},
        fp8_case{1, 16, 4, 272, 336, false, true},
        fp8_case{3, 128, 8, 2048, 768, false, true},  // the one launch, automatic at 2-4 tokens
        // The few-token one launch forced at 8 and 16 tokens (one block per token in its down phase; 16: the largest
        // instantiation), ragged.
        fp8_case{8, 128, 8, 2048, 768, false, true, fp8_gemm_tiles::automatic, true, true, true},
        fp8_case{16, 128, 8, 2048, 768, false, true, fp8_gemm_tiles::automatic, true, true, true},
        fp8_case{13, 16, 4, 272, 336, false, true, fp8_gemm_tiles::automatic, true, true, true}),
    [](const ::testing::TestParamInfo<fp8_case>& i) {
        const fp8_case& c = i.param;
        const char* prefix = c.layer ? "layer_" : c.decode ? "decode_" : "";
        const char* tiles = c.tiles == fp8_gemm_tiles::narrow           ? "_narrow"
                            : c.tiles == fp8_gemm_tiles::wide           ? "_wide"
                            : c.tiles == fp8_gemm_tiles::wide_staggered ? "_staggered"
                            : c.tiles == fp8_gemm_tiles::wide_multicast ? "_multicast"
                            : c.tiles == fp8_gemm_tiles::pair           ? "_pair"
                            : c.tiles == fp8_gemm_tiles::pair_multicast ? "_pair_multicast"
                            : c.tiles == fp8_gemm_tiles::wide_rs        ? "_wide_rs"
                                                                        : "";
        if (!c.bulk) tiles = "_no_bulk";
        std::string suffix = tiles;
        if (!c.gather) suffix += "_no_gather";
        if (c.force_decode) suffix += "_decode";
        return make_name(prefix, "t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter,
                         suffix);
    });

/// The FP8 few-token layer in one launch (launch_moe_decode_one_launch, launch_moe_layer's decode path with the router
/// fused) against the router launch followed by the two few-token launches (fuse_router = false) on the same inputs:
/// the router GEMV sums as launch_gemv_bf16, the top-k and replica choice as launch_router_topk, the experts as
/// launch_moe_decode_fp8, so logits, slots, weights, load counts and out must be equal bit for bit. (The CPU
/// reference of the arithmetic is MoeExpertsFp8's layer cases, which take this path too.)
struct fp8_one_case {
    int32_t num_tokens, num_experts, top_k, hidden, inter;
    int32_t replicas =
        1;              ///< slots per expert (expert e's replicas at e, e + E, ...): token t takes replica t % replicas
    bool valid = true;  ///< all tokens valid (else the last one is padding and counts nothing)
};

class MoeDecodeFp8One : public ::testing::TestWithParam<fp8_one_case> {};

TEST_P(MoeDecodeFp8One, EqualsRouterAndTwoLaunchesBitForBit) {
    if (!device_is_sm90()) GTEST_SKIP() << "the FP8 kernels need compute capability 9.x";
    const fp8_one_case c = GetParam();
    const int32_t T = c.num_tokens, E = c.num_experts, K = c.top_k, H = c.hidden, I = c.inter, S = E * c.replicas;
    const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128, num_valid = c.valid ? T : T - 1;
    ASSERT_TRUE(detail::moe_decode_one_launch_supported(T, K, E, H, I, true));
    ASSERT_TRUE(detail::moe_decode_fp8_supported(T, K, H, I));
    std::mt19937 rng(T * 11 + E * 7 + K * 3 + H + I + c.replicas);
    std::vector<uint8_t> gu_q(size_t(S) * 2 * I * H), dn_q(size_t(S) * H * I);
    std::vector<float> gu_s(size_t(S) * 2 * kbI * kbH), dn_s(size_t(S) * kbH * kbI);
    for (int32_t e = 0; e < S; ++e) {
        for (int32_t part = 0; part < 2; ++part) {
            const std::vector<float> w = blocky_weight(I, H, 1.f / std::sqrt(float(H)), rng);
            quantize_fp8_blocks(w.data(), I, H, H, gu_q.data() + (size_t(e) * 2 + part) * I * H,
                                gu_s.data() + (size_t(e) * 2 + part) * kbI * kbH);
        }
        const std::vector<float> w = blocky_weight(H, I, 1.f / std::sqrt(float(I)), rng);
        quantize_fp8_blocks(w.data(), H, I, I, dn_q.data() + size_t(e) * H * I, dn_s.data() + size_t(e) * kbH * kbI);
    }
    std::vector<int32_t> offsets(E + 1), slots(S);
    for (int32_t e = 0; e <= E; ++e) offsets[e] = e * c.replicas;
    for (int32_t e = 0; e < E; ++e)
        for (int32_t r = 0; r < c.replicas; ++r) slots[size_t(e) * c.replicas + r] = e + r * E;
    const std::vector<float> x = grouped_activations(T, H, rng);
    const std::vector<float> router_w = random_bf16(size_t(E) * H, 2.f / std::sqrt(float(H)), rng);
    auto d_x = upload_bf16(x);
    auto d_router = upload_bf16(router_w);
    auto d_gu = upload(gu_q), d_dn = upload(dn_q);
    auto d_gu_s = upload(gu_s), d_dn_s = upload(dn_s);
    auto d_offsets_r = upload(offsets), d_slots_r = upload(slots);
    auto d_valid = upload(std::vector<int32_t>{num_valid});
    const int32_t max_rows = std::max(moe_experts_rows(T, K, S, 64), 4 * T * K), ld = fp8_scale_ld(max_rows);
    device_buffer<uint8_t> d_blas_ws(4u << 20);
    blas_handle blas;

    struct outputs {
        std::vector<float> logits, weights, out;
        std::vector<int32_t> slots, counts;
    };
    const auto run = [&](bool fused, int launches) {
        device_buffer<int32_t> d_offsets(S + 1), d_dest(T * K), d_row_token(max_rows), d_topk_ids(T * K),
            d_slot_ids(T * K), d_counts(E), d_scratch(moe_decode_scratch_ints(kMoeDecodeMaxTokens, K));
        device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(T, K, S));
        device_buffer<uint8_t> d_xq(size_t(max_rows) * H), d_aq(size_t(max_rows) * I);
        device_buffer<float> d_xs(size_t(kbH) * ld), d_as(size_t(kbI) * ld), d_logits(size_t(T) * E), d_weights(T * K);
        device_buffer<bf16> d_y(size_t(max_rows) * H), d_out(size_t(T) * H);
        d_scratch.poison(0);
        d_counts.poison(0);
        d_aq.poison();
        d_logits.poison();
        d_out.poison();
        const moe_fp8_experts f{.w_gate_up = d_gu.get(),
                                .w_gate_up_scales = d_gu_s.get(),
                                .w_down = d_dn.get(),
                                .w_down_scales = d_dn_s.get(),
                                .x_q = d_xq.get(),
                                .x_scales = d_xs.get(),
                                .act_q = d_aq.get(),
                                .act_scales = d_as.get()};
        const moe_layer_params p{.experts = {.x = d_x.get(),
                                             .out = d_out.get(),
                                             .expert_offsets = d_offsets.get(),
                                             .dest_rows = d_dest.get(),
                                             .row_token = d_row_token.get(),
                                             .permute_workspace = d_ws.get(),
                                             .y = d_y.get(),
                                             .max_rows = max_rows,
                                             .num_tokens = T,
                                             .top_k = K,
                                             .num_slots = S,
                                             .hidden = H,
                                             .inter = I,
                                             .fp8 = &f},
                                 .router_w = d_router.get(),
                                 .router_logits = d_logits.get(),
                                 .blas = blas.handle,
                                 .blas_workspace = d_blas_ws.get(),
                                 .blas_workspace_bytes = 4u << 20,
                                 .replica_offsets = d_offsets_r.get(),
                                 .replica_slots = d_slots_r.get(),
                                 .num_valid = d_valid.get(),
                                 .expert_counts = d_counts.get(),
                                 .topk_ids = d_topk_ids.get(),
                                 .topk_weights = d_weights.get(),
                                 .slot_ids = d_slot_ids.get(),
                                 .decode_scratch = d_scratch.get(),
                                 .num_experts = E,
                                 .renormalize = true,
                                 .path = moe_path::decode,
                                 .fuse_router = fused};
        EXPECT_TRUE(moe_layer_uses_decode_path(p));
        // Repeated launches: the grid barrier's counters must be left at zero by each (counts accumulate).
        for (int i = 0; i < launches; ++i) launch_moe_layer(p, nullptr);
        sync_and_check();
        outputs o{download(d_logits), download(d_weights), download_bf16(d_out), download(d_slot_ids),
                  download(d_counts)};
        EXPECT_EQ(download(d_scratch), std::vector<int32_t>(d_scratch.size(), 0)) << "scratch not left at zero";
        return o;
    };
    const outputs two = run(false, 3), one = run(true, 3);
    for (size_t i = 0; i < one.logits.size(); ++i)
        ASSERT_EQ(std::memcmp(&one.logits[i], &two.logits[i], 4), 0) << "logit " << i;
    EXPECT_EQ(one.slots, two.slots);
    for (int32_t a = 0; a < T * K; ++a) {
        ASSERT_EQ(std::memcmp(&one.weights[a], &two.weights[a], 4), 0) << "weight " << a;
        ASSERT_TRUE(one.slots[a] >= 0 && one.slots[a] < S);
        const int32_t e = one.slots[a] % E, t = a / K;
        EXPECT_EQ(one.slots[a], slots[size_t(offsets[e] + t % c.replicas)]) << "token t takes replica t % replicas";
    }
    EXPECT_EQ(one.counts, two.counts);
    int64_t counted = 0;
    for (const int32_t n : one.counts) counted += n;
    EXPECT_EQ(counted, 3 * K * num_valid);
    for (size_t i = 0; i < one.out.size(); ++i) {
        ASSERT_FALSE(std::isnan(one.out[i])) << "token " << i / H << " column " << i % H;
        ASSERT_EQ(std::memcmp(&one.out[i], &two.out[i], 4), 0)
            << "token " << i / H << " column " << i % H << ": " << one.out[i] << " vs " << two.out[i];
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDecodeFp8One,
    ::testing::Values(
        // Qwen3-30B-A3B at 1 and 4 tokens; DeepSeek-V2-Lite's routed experts (64, top-6, FFN 1408: chunks past
        // the staged ones); ragged dimensions (partial scale blocks); top-16 (two groups of choices); replicas (two
        // tokens take different ones), 512 experts with replicas in slots past the shared-memory table; padding.
        fp8_one_case{1, 128, 8, 2048, 768}, fp8_one_case{4, 128, 8, 2048, 768}, fp8_one_case{1, 64, 6, 2048, 1408},
        fp8_one_case{1, 8, 2, 144, 208}, fp8_one_case{3, 16, 4, 272, 336}, fp8_one_case{2, 64, 16, 256, 128},
        fp8_one_case{2, 32, 4, 256, 128, 2}, fp8_one_case{3, 512, 8, 256, 128, 3},
        fp8_one_case{1, 16, 4, 272, 336, 1, false}, fp8_one_case{4, 16, 4, 272, 336, 2, false}),
    [](const ::testing::TestParamInfo<fp8_one_case>& i) {
        const fp8_one_case& c = i.param;
        return make_name("t", c.num_tokens, "_e", c.num_experts, "_k", c.top_k, "_h", c.hidden, "_i", c.inter, "_r",
                         c.replicas, c.valid ? "" : "_padding");
    });

}  // namespace
}  // namespace zmoe::kernels::test
