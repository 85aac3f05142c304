#include "workers/cuda/cuda_ep_exchange.hpp"

#include "base/check.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

std::vector<int64_t> bytes_of(const std::vector<int64_t>& rows, int64_t per_row) {
    std::vector<int64_t> b(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) b[i] = rows[i] * per_row;
    return b;
}

}  // namespace

cuda_ep_exchange::cuda_ep_exchange(const ep_exchange_params& p) : p_(p) {
    ZMOE_CHECK(p_.comm != nullptr && p_.ws != nullptr, "expert-parallel exchange without a communicator");
}

int64_t cuda_ep_exchange::dispatch(const ep_dispatch_params& p, cudaStream_t stream) {
    // Plan on the host from the slots launch_moe_route chose. plan = [token of each sent row | its slot on the
    // destination rank | for each (token, k) the sent row holding it]; rows are grouped by destination rank, in
    // (token, k) order.
    cuda_workspace& ws = *p_.ws;
    const int32_t H = p_.hidden, K = p_.top_k, S = p.slots_per_rank;
    const int world = p_.comm->world_size();
    const int64_t TK = int64_t(p.num_tokens) * K;
    send_rows_.assign(world, 0);
    std::vector<int32_t> plan(3 * TK);
    if (TK > 0) {
        std::vector<int32_t> slot_h(TK);
        ZMOE_CUDA_CHECK(
            cudaMemcpyAsync(slot_h.data(), p.slot_ids, TK * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int64_t i = 0; i < TK; ++i) {
            ZMOE_CHECK(slot_h[i] >= 0 && slot_h[i] < S * world, "routed to slot " << slot_h[i]);
            ++send_rows_[slot_h[i] / S];
        }
        std::vector<int64_t> next(world, 0);
        for (int r = 1; r < world; ++r) next[r] = next[r - 1] + send_rows_[r - 1];
        for (int64_t i = 0; i < TK; ++i) {
            const int64_t pos = next[slot_h[i] / S]++;
            plan[pos] = static_cast<int32_t>(i / K);
            plan[TK + pos] = slot_h[i] % S;
            plan[2 * TK + i] = static_cast<int32_t>(pos);
        }
    }
    int32_t* plan_d = ws.moe_plan.as<int32_t>();
    if (TK > 0)
        ZMOE_CUDA_CHECK(
            cudaMemcpyAsync(plan_d, plan.data(), plan.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    bf16* send_x = ws.send_x.as<bf16>();
    kernels::launch_gather_rows(
        {.in = p.x, .rows = plan_d, .out = send_x, .num_rows = static_cast<int32_t>(TK), .hidden = H}, stream);

    // Every rank takes part, with zero rows too.
    recv_rows_ = p_.comm->exchange_counts(send_rows_, stream);
    int64_t R = 0;
    for (int64_t n : recv_rows_) R += n;
    ZMOE_CHECK(R <= ws.max_recv_rows, "received " << R << " rows, the workspace holds " << ws.max_recv_rows);
    const int64_t row_bytes = int64_t(H) * sizeof(bf16);
    p_.comm->all_to_all(send_x, bytes_of(send_rows_, row_bytes), ws.recv_x.as<bf16>(), bytes_of(recv_rows_, row_bytes),
                        stream);
    p_.comm->all_to_all(plan_d + TK, bytes_of(send_rows_, sizeof(int32_t)), ws.recv_slot.as<int32_t>(),
                        bytes_of(recv_rows_, sizeof(int32_t)), stream);
    return R;
}

void cuda_ep_exchange::combine(const ep_combine_params& p, cudaStream_t stream) {
    cuda_workspace& ws = *p_.ws;
    const int32_t H = p_.hidden, K = p_.top_k;
    const int64_t TK = int64_t(p.num_tokens) * K;
    const int64_t row_bytes = int64_t(H) * sizeof(bf16);
    bf16* y_back = ws.y_back.as<bf16>();
    p_.comm->all_to_all(p.y_recv, bytes_of(recv_rows_, row_bytes), y_back, bytes_of(send_rows_, row_bytes), stream);
    if (p.num_tokens == 0) return;
    kernels::launch_moe_combine({.y = y_back,
                                 .dest_rows = ws.moe_plan.as<int32_t>() + 2 * TK,
                                 .topk_weights = p.topk_weights,
                                 .out = p.out,
                                 .num_tokens = p.num_tokens,
                                 .top_k = K,
                                 .hidden = H},
                                stream);
}

}  // namespace zmoe::cuda
