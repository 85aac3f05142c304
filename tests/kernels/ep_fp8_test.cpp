// The expert-parallel FP8 dispatch's kernels: launch_ep_fp8_pack's records hold the CPU quantization of the format
// (workers/fp8.hpp) bit for bit; launch_ep_fp8_unpack puts them where launch_fp8_quantize puts a BF16 row's
// quantization (so quantizing before the exchange or after it gives the FP8 GEMM the same bytes); the peer-to-peer
// dispatch with fp8 writes the same records into the receivers' windows (every rank's window on one GPU, as
// ep_p2p_test); and launch_moe_experts over records gives bit for bit the output it gives over the BF16 rows.

#include <cstring>

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

/// Rows whose 128-channel groups have different magnitudes (each group's scale matters), an all-zero group in some
/// rows (scale 1), BF16-representable.
std::vector<float> grouped_rows(int32_t rows, int32_t cols, std::mt19937& rng) {
    std::vector<float> x = random_bf16(size_t(rows) * cols, 1.f, rng);
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < cols; ++c) {
            const int32_t g = c / 128;
            const float mag = (r % 5 == 2 && g == 0) ? 0.f : std::ldexp(1.f, (r + 3 * g) % 9 - 4);
            x[size_t(r) * cols + c] = ref::round_bf16(x[size_t(r) * cols + c] * mag);
        }
    return x;
}

/// The record the format defines for row `x` [cols] (BF16 values): codes, scales, zero padding.
std::vector<uint8_t> cpu_record(const float* x, int32_t cols) {
    const int32_t groups = (cols + 127) / 128;
    std::vector<float> q(cols), s(groups);
    quantize_fp8_activation_row(x, cols, q.data(), s.data());
    std::vector<uint8_t> rec(size_t(ep_fp8_record_bytes(cols)), 0);
    for (int32_t c = 0; c < cols; ++c) rec[c] = f32_to_e4m3(q[c]);  // q is exact in e4m3: its own code
    std::memcpy(rec.data() + cols, s.data(), s.size() * sizeof(float));
    return rec;
}

class EpFp8Records : public ::testing::TestWithParam<int32_t> {};

TEST_P(EpFp8Records, PackHoldsTheCpuQuantizationAndSkipsUnusedRows) {
    const int32_t H = GetParam(), T = 23, N = 2 * T + 5, skip = 7;
    const int64_t RB = ep_fp8_record_bytes(H);
    std::mt19937 rng(H);
    std::vector<float> x = grouped_rows(T, H, rng);
    x[3] = 1e30f;  // saturates BF16 to a huge finite value: its group's scale absorbs it
    std::vector<int32_t> rows(N), slots(N);
    for (int32_t i = 0; i < N; ++i) {
        rows[i] = int32_t(rng() % T);
        slots[i] = int32_t(rng() % (skip + 2));  // about one in five unused (>= skip)
    }
    auto d_x = upload_bf16(x);
    auto d_rows = upload(rows), d_slots = upload(slots);
    device_buffer<uint8_t> d_rec(size_t(N) * RB);
    d_rec.poison(0xa5);
    launch_ep_fp8_pack({.x = d_x.get(),
                        .rows = d_rows.get(),
                        .slots = d_slots.get(),
                        .records = d_rec.get(),
                        .num_records = N,
                        .hidden = H,
                        .skip_slot = skip},
                       nullptr);
    sync_and_check();
    const std::vector<uint8_t> rec = download(d_rec);
    std::vector<float> xr(H);
    for (int32_t i = 0; i < N; ++i) {
        const uint8_t* got = rec.data() + i * RB;
        if (slots[i] >= skip) {
            for (int64_t b = 0; b < RB; ++b) ASSERT_EQ(got[b], 0xa5) << "unused record " << i << " was written";
            continue;
        }
        for (int32_t c = 0; c < H; ++c) xr[c] = ref::round_bf16(x[size_t(rows[i]) * H + c]);
        const std::vector<uint8_t> want = cpu_record(xr.data(), H);
        ASSERT_EQ(std::memcmp(got, want.data(), size_t(RB)), 0) << "record " << i << " (row " << rows[i] << ")";
    }
}

TEST_P(EpFp8Records, UnpackGivesWhatQuantizingAfterTheExchangeGives) {
    const int32_t H = GetParam(), T = 29, K = 3, rows = T * K + 6;
    const int32_t groups = (H + 127) / 128, ld = fp8_scale_ld(rows);
    std::mt19937 rng(H + 1);
    const std::vector<float> x = grouped_rows(T, H, rng);
    std::vector<int32_t> dest(size_t(T) * K), identity(T);
    for (size_t i = 0; i < dest.size(); ++i) dest[i] = int32_t(i);
    std::shuffle(dest.begin(), dest.end(), rng);  // 6 rows left unwritten
    for (int32_t t = 0; t < T; ++t) identity[t] = t;
    auto d_x = upload_bf16(x);
    auto d_dest = upload(dest), d_identity = upload(identity);
    device_buffer<uint8_t> d_rec(size_t(T) * ep_fp8_record_bytes(H));
    device_buffer<uint8_t> q_after(size_t(rows) * H), q_before(size_t(rows) * H);
    device_buffer<float> s_after(size_t(groups) * ld), s_before(size_t(groups) * ld);
    for (auto* b : {&q_after, &q_before}) b->poison(0x7f);
    for (auto* b : {&s_after, &s_before}) b->poison();
    // After the exchange: the receiver quantizes BF16 rows into the permuted order.
    launch_fp8_quantize({.x = d_x.get(),
                         .dest_rows = d_dest.get(),
                         .q = q_after.get(),
                         .scales = s_after.get(),
                         .num_tokens = T,
                         .top_k = K,
                         .cols = H,
                         .scale_ld = ld},
                        nullptr);
    // Before: the sender packs records, the receiver unpacks them into the same places.
    launch_ep_fp8_pack(
        {.x = d_x.get(), .rows = d_identity.get(), .records = d_rec.get(), .num_records = T, .hidden = H}, nullptr);
    launch_ep_fp8_unpack({.records = d_rec.get(),
                          .dest_rows = d_dest.get(),
                          .q = q_before.get(),
                          .scales = s_before.get(),
                          .num_tokens = T,
                          .top_k = K,
                          .cols = H,
                          .scale_ld = ld},
                         nullptr);
    sync_and_check();
    EXPECT_EQ(download(q_before), download(q_after));
    const std::vector<float> sb = download(s_before), sa = download(s_after);
    ASSERT_EQ(sb.size(), sa.size());
    EXPECT_EQ(std::memcmp(sb.data(), sa.data(), sb.size() * sizeof(float)), 0) << "scales differ";
}

TEST_P(EpFp8Records, PeerToPeerDispatchWritesTheRecords) {
    const int32_t H = GetParam();
    if (H % 8 != 0) GTEST_SKIP() << "the peer-to-peer exchange needs hidden a multiple of 8";
    const int32_t W = 3, T = 17, C = 11, S = 4;  // C below T: some rows of a window unused, none overflowing here
    const int64_t RB = ep_fp8_record_bytes(H);
    const ep_p2p_window_layout layout = ep_p2p_layout(W, C, H, true);
    ASSERT_GE(layout.recv_slot, size_t(W) * C * RB);
    std::vector<device_buffer<char>> windows;
    std::vector<device_buffer<uint32_t>> state;
    for (int32_t r = 0; r < W; ++r) {
        windows.emplace_back(layout.bytes);
        ZMOE_CUDA_CHECK(cudaMemset(windows.back().get(), 0, layout.bytes));
        ZMOE_CUDA_CHECK(cudaMemset(windows.back().get() + layout.recv_x, 0x5a, size_t(W) * C * RB));
        state.push_back(upload(std::vector<uint32_t>{0, 0, 0}));
    }
    std::mt19937 rng(H + 2);
    std::vector<std::vector<float>> x(W);
    std::vector<std::vector<int32_t>> token(W), slot(W);
    std::vector<device_buffer<bf16>> d_x;
    std::vector<device_buffer<int32_t>> d_token, d_slot;
    for (int32_t s = 0; s < W; ++s) {
        x[s] = grouped_rows(T, H, rng);
        token[s].resize(size_t(W) * C);
        slot[s].resize(size_t(W) * C);
        for (int32_t i = 0; i < W * C; ++i) {
            const bool used = i % C < C - 2 - s;  // the last rows of each destination unused, more for higher s
            token[s][i] = used ? int32_t(rng() % T) : 0;
            slot[s][i] = used ? int32_t(rng() % S) : S;
        }
        d_x.push_back(upload_bf16(x[s]));
        d_token.push_back(upload(token[s]));
        d_slot.push_back(upload(slot[s]));
    }
    for (int32_t s = 0; s < W; ++s) {
        ep_p2p_params p{.layout = layout,
                        .rank = s,
                        .num_ranks = W,
                        .capacity = C,
                        .slots_per_rank = S,
                        .hidden = H,
                        .epoch = state[size_t(s)].get(),
                        .done = state[size_t(s)].get() + 1,
                        .fp8 = true};
        for (int32_t r = 0; r < W; ++r) p.windows[r] = windows[size_t(r)].get();
        launch_ep_p2p_dispatch(p, d_x[s].get(), d_token[s].get(), d_slot[s].get(), nullptr);
    }
    sync_and_check();
    std::vector<float> xr(H);
    for (int32_t d = 0; d < W; ++d) {
        std::vector<uint8_t> recv(size_t(W) * C * RB);
        std::vector<int32_t> recv_slot(size_t(W) * C);
        ZMOE_CUDA_CHECK(cudaMemcpy(recv.data(), windows[d].get() + layout.recv_x, recv.size(), cudaMemcpyDeviceToHost));
        ZMOE_CUDA_CHECK(cudaMemcpy(recv_slot.data(), windows[d].get() + layout.recv_slot, recv_slot.size() * 4,
                                   cudaMemcpyDeviceToHost));
        for (int32_t s = 0; s < W; ++s)
            for (int32_t pos = 0; pos < C; ++pos) {
                const int32_t i = d * C + pos, at = s * C + pos;
                ASSERT_EQ(recv_slot[at], slot[s][i]) << "rank " << d << " row " << at;
                const uint8_t* got = recv.data() + at * RB;
                if (slot[s][i] >= S) {
                    for (int64_t b = 0; b < RB; ++b) ASSERT_EQ(got[b], 0x5a) << "unused row " << at << " was written";
                    continue;
                }
                for (int32_t c = 0; c < H; ++c) xr[c] = ref::round_bf16(x[s][size_t(token[s][i]) * H + c]);
                const std::vector<uint8_t> want = cpu_record(xr.data(), H);
                ASSERT_EQ(std::memcmp(got, want.data(), size_t(RB)), 0) << "rank " << d << " row " << at;
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Hidden, EpFp8Records, ::testing::Values(16, 132, 144, 2048, 7168),
                         [](const ::testing::TestParamInfo<int32_t>& info) { return make_name("h", info.param); });

/// The FP8 experts over records (what an expert-parallel receiver runs) against the same experts over the BF16
/// rows: the same output bits, with the fixed window's unused rows (slot num_slots) grouped past the experts.
TEST(MoeExpertsFp8Records, BitIdenticalToQuantizingTheRows) {
    if (!device_is_sm90()) GTEST_SKIP() << "the FP8 grouped GEMM needs compute capability 9.x";
    for (const int32_t rows_in : {1, 37, 700}) {
        SCOPED_TRACE(make_name("rows ", rows_in));
        const int32_t E = 8, H = 272, I = 208, P = E + 1;  // ragged K and N blocks
        const int32_t kbH = (H + 127) / 128, kbI = (I + 127) / 128;
        std::mt19937 rng(rows_in);
        std::vector<uint8_t> gu_q(size_t(E) * 2 * I * H), dn_q(size_t(E) * H * I);
        std::vector<float> gu_s(size_t(E) * 2 * kbI * kbH), dn_s(size_t(E) * kbH * kbI);
        for (int32_t e = 0; e < E; ++e) {
            for (int32_t part = 0; part < 2; ++part) {
                const std::vector<float> w = random_f32(size_t(I) * H, 1.f / std::sqrt(float(H)), rng);
                quantize_fp8_blocks(w.data(), I, H, H, gu_q.data() + (size_t(e) * 2 + part) * I * H,
                                    gu_s.data() + (size_t(e) * 2 + part) * kbI * kbH);
            }
            const std::vector<float> w = random_f32(size_t(H) * I, 1.f / std::sqrt(float(I)), rng);
            quantize_fp8_blocks(w.data(), H, I, I, dn_q.data() + size_t(e) * H * I,
                                dn_s.data() + size_t(e) * kbH * kbI);
        }
        // One choice per received row (top_k 1, weight 1, as the receiver runs), every ninth an unused row.
        const int32_t T = rows_in;
        std::vector<int32_t> slots(T), identity(T);
        for (int32_t t = 0; t < T; ++t) {
            slots[t] = t % 9 == 4 ? E : int32_t(rng() % E);
            identity[t] = t;
        }
        const std::vector<float> ones(T, 1.f), x = grouped_rows(T, H, rng);
        const int32_t max_rows = moe_experts_rows(T, 1, P, 64), ld = fp8_scale_ld(max_rows);
        auto d_x = upload_bf16(x);
        auto d_slots = upload(slots), d_identity = upload(identity);
        auto d_ones = upload(ones);
        auto d_gu = upload(gu_q), d_dn = upload(dn_q);
        auto d_gu_s = upload(gu_s), d_dn_s = upload(dn_s);
        device_buffer<uint8_t> d_rec(size_t(T) * ep_fp8_record_bytes(H));
        launch_ep_fp8_pack(
            {.x = d_x.get(), .rows = d_identity.get(), .records = d_rec.get(), .num_records = T, .hidden = H}, nullptr);
        std::vector<float> out[2];
        for (int from_records = 0; from_records < 2; ++from_records) {
            device_buffer<int32_t> d_offsets(P + 1), d_dest(T), d_row_token(max_rows);
            device_buffer<uint8_t> d_ws(moe_permute_workspace_bytes(T, 1, P));
            device_buffer<uint8_t> d_xq(size_t(max_rows) * H), d_aq(size_t(max_rows) * I);
            device_buffer<float> d_xs(size_t(kbH) * ld), d_as(size_t(kbI) * ld);
            device_buffer<bf16> d_y(size_t(max_rows) * H), d_out(size_t(T) * H);
            d_xq.poison(0x7f);
            d_aq.poison(0x7f);
            d_xs.poison();
            d_as.poison();
            d_y.poison(0);
            d_out.poison(0);
            const moe_fp8_experts f{.w_gate_up = d_gu.get(),
                                    .w_gate_up_scales = d_gu_s.get(),
                                    .w_down = d_dn.get(),
                                    .w_down_scales = d_dn_s.get(),
                                    .x_q = d_xq.get(),
                                    .x_scales = d_xs.get(),
                                    .act_q = d_aq.get(),
                                    .act_scales = d_as.get(),
                                    .x_records = from_records ? d_rec.get() : nullptr};
            launch_moe_experts({.slots = d_slots.get(),
                                .x = from_records ? nullptr : d_x.get(),
                                .topk_weights = d_ones.get(),
                                .out = d_out.get(),
                                .expert_offsets = d_offsets.get(),
                                .dest_rows = d_dest.get(),
                                .row_token = d_row_token.get(),
                                .permute_workspace = d_ws.get(),
                                .y = d_y.get(),
                                .max_rows = max_rows,
                                .num_tokens = T,
                                .top_k = 1,
                                .num_slots = E,
                                .permute_slots = P,
                                .hidden = H,
                                .inter = I,
                                .row_align = 64,
                                .fp8 = &f},
                               nullptr);
            sync_and_check();
            out[from_records] = download_bf16(d_out);
        }
        double amax = 0;
        for (int32_t t = 0; t < T; ++t)
            if (slots[t] < E)
                for (int32_t c = 0; c < H; ++c) amax = std::max(amax, std::abs(double(out[0][size_t(t) * H + c])));
        EXPECT_GT(amax, 0.0) << "the experts computed nothing";
        for (int32_t t = 0; t < T; ++t) {
            if (slots[t] >= E) continue;  // an unused row: combined from a y row nothing wrote
            ASSERT_EQ(std::memcmp(out[0].data() + size_t(t) * H, out[1].data() + size_t(t) * H, size_t(H) * 4), 0)
                << "row " << t;
        }
    }
}

}  // namespace
}  // namespace zmoe::kernels::test
