// launch_ep_p2p_dispatch / _combine / _wait against ref::ep_p2p_dispatch / _combine, with every rank's window on
// one GPU (each "rank" a launch with its own rank, counters and view of the same windows): received rows and slots,
// the rows sent back, the flags and counters after two exchanges in a row, over world sizes, capacities, hidden
// sizes, bounded grids, and windows with unused rows.

#include "kernels/reference/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace zmoe::kernels::test {
namespace {

struct p2p_case {
    int32_t num_ranks, num_tokens, top_k, slots_per_rank, hidden, blocks;
};

class EpP2p : public ::testing::TestWithParam<p2p_case> {};

std::vector<uint16_t> random_bits(size_t n, std::mt19937& rng) {
    std::vector<uint16_t> v(n);
    for (auto& b : v) b = static_cast<uint16_t>(rng() & 0x7f7f);  // finite BF16 bit patterns
    return v;
}

TEST_P(EpP2p, MatchesReferenceTwiceInARow) {
    const auto c = GetParam();
    const int32_t W = c.num_ranks, H = c.hidden, S = c.slots_per_rank, TK = c.num_tokens * c.top_k;
    const int32_t C = std::max(1, TK);  // every choice fits: the plan never overflows
    const size_t rows = size_t(W) * C;
    std::mt19937 rng(W * 131 + c.num_tokens * 7 + H);
    const ep_p2p_window_layout layout = ep_p2p_layout(W, C, H);
    std::vector<device_buffer<char>> windows;
    std::vector<device_buffer<uint32_t>> state;  // per rank [epoch, dispatch counter, combine counter]
    for (int32_t r = 0; r < W; ++r) {
        windows.emplace_back(layout.bytes);
        ZMOE_CUDA_CHECK(cudaMemset(windows.back().get(), 0, layout.bytes));
        state.push_back(upload(std::vector<uint32_t>{0, 0, 0}));
    }
    auto params = [&](int32_t rank, bool combine) {
        ep_p2p_params p{.layout = layout,
                        .rank = rank,
                        .num_ranks = W,
                        .capacity = C,
                        .slots_per_rank = S,
                        .hidden = H,
                        .blocks = c.blocks,
                        .epoch = state[size_t(rank)].get(),
                        .done = state[size_t(rank)].get() + (combine ? 2 : 1)};
        for (int32_t r = 0; r < W; ++r) p.windows[r] = windows[size_t(r)].get();
        return p;
    };
    // n values of type T at `offset` of rank r's window.
    auto window_part = [&]<typename T>(int32_t r, size_t offset, size_t n, T) {
        std::vector<T> h(n);
        ZMOE_CUDA_CHECK(cudaMemcpy(h.data(), windows[size_t(r)].get() + offset, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    };
    for (uint32_t round = 1; round <= 2; ++round) {
        // Every rank's plan (some rows unused: the window holds every choice, routing spreads them over the ranks).
        std::vector<std::vector<uint16_t>> x(W), ref_recv_x(W);
        std::vector<std::vector<int32_t>> token(W, std::vector<int32_t>(rows)), slot(W, std::vector<int32_t>(rows)),
            ref_recv_slot(W);
        std::vector<device_buffer<uint16_t>> d_x;
        std::vector<device_buffer<int32_t>> d_token, d_slot;
        // Rows never written keep what the window held: start the reference from the device's window.
        for (int32_t d = 0; d < W; ++d) {
            ref_recv_x[d] = window_part(d, layout.recv_x, rows * H, uint16_t{});
            ref_recv_slot[d] = window_part(d, layout.recv_slot, rows, int32_t{});
        }
        std::vector<uint16_t*> rx(W);
        std::vector<int32_t*> rs(W);
        for (int32_t d = 0; d < W; ++d) {
            rx[d] = ref_recv_x[d].data();
            rs[d] = ref_recv_slot[d].data();
        }
        for (int32_t s = 0; s < W; ++s) {
            x[s] = random_bits(size_t(std::max(c.num_tokens, 1)) * H, rng);
            std::vector<int32_t> slots(static_cast<size_t>(TK)), src(static_cast<size_t>(TK)), counts(W);
            for (auto& v : slots) v = static_cast<int32_t>(rng() % (W * S));
            ref::ep_dispatch_plan(slots.data(), c.num_tokens, c.top_k, W, S, C, token[s].data(), slot[s].data(),
                                  src.data(), counts.data());
            ref::ep_p2p_dispatch(s, W, C, S, H, x[s].data(), token[s].data(), slot[s].data(), rx.data(), rs.data());
            d_x.push_back(upload(x[s]));
            d_token.push_back(upload(token[s]));
            d_slot.push_back(upload(slot[s]));
        }
        for (int32_t s = 0; s < W; ++s)
            launch_ep_p2p_dispatch(params(s, false), reinterpret_cast<const bf16*>(d_x[s].get()), d_token[s].get(),
                                   d_slot[s].get(), nullptr);
        for (int32_t d = 0; d < W; ++d) launch_ep_p2p_wait(params(d, false), false, nullptr);
        sync_and_check();
        for (int32_t d = 0; d < W; ++d) {
            EXPECT_EQ(window_part(d, layout.recv_x, rows * H, uint16_t{}), ref_recv_x[d])
                << "rank " << d << " round " << round;
            EXPECT_EQ(window_part(d, layout.recv_slot, rows, int32_t{}), ref_recv_slot[d])
                << "rank " << d << " round " << round;
            EXPECT_EQ(download(state[size_t(d)])[0], round) << "epoch";
        }

        // Combine: every rank sends each used received row's output back to its source.
        std::vector<std::vector<uint16_t>> y(W), ref_back(W);
        std::vector<uint16_t*> rb(W);
        for (int32_t s = 0; s < W; ++s) {
            ref_back[s] = window_part(s, layout.y_back, rows * H, uint16_t{});
            rb[s] = ref_back[s].data();
        }
        std::vector<device_buffer<uint16_t>> d_y;
        for (int32_t d = 0; d < W; ++d) {
            y[d] = random_bits(rows * H, rng);
            ref::ep_p2p_combine(d, W, C, S, H, y[d].data(), ref_recv_slot[d].data(), rb.data());
            d_y.push_back(upload(y[d]));
        }
        for (int32_t d = 0; d < W; ++d)
            launch_ep_p2p_combine(params(d, true), reinterpret_cast<const bf16*>(d_y[d].get()), nullptr);
        for (int32_t s = 0; s < W; ++s) launch_ep_p2p_wait(params(s, true), true, nullptr);
        sync_and_check();
        for (int32_t s = 0; s < W; ++s) {
            EXPECT_EQ(window_part(s, layout.y_back, rows * H, uint16_t{}), ref_back[s])
                << "rank " << s << " round " << round;
            EXPECT_EQ(window_part(s, layout.flags, 2 * size_t(W), uint32_t{}),
                      std::vector<uint32_t>(2 * size_t(W), round))
                << "every source raised both flags";
            const auto st = download(state[size_t(s)]);
            EXPECT_EQ(st[1], 0u) << "dispatch block counter left for the next launch";
            EXPECT_EQ(st[2], 0u) << "combine block counter left for the next launch";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EpP2p,
                         ::testing::Values(p2p_case{2, 1, 2, 4, 8, 0}, p2p_case{2, 16, 8, 64, 2048, 0},
                                           p2p_case{4, 33, 4, 8, 264, 3}, p2p_case{8, 7, 2, 4, 64, 1},
                                           p2p_case{2, 40, 8, 16, 512, 64}),
                         [](const auto& info) {
                             const auto& c = info.param;
                             return make_name("ranks", c.num_ranks, "_t", c.num_tokens, "_k", c.top_k, "_slots",
                                              c.slots_per_rank, "_h", c.hidden, "_blocks", c.blocks);
                         });

}  // namespace
}  // namespace zmoe::kernels::test
