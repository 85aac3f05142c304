// CPU reference of the expert-parallel dispatch plan.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/reference/reference.hpp"

namespace zmoe::kernels::ref {

bool ep_dispatch_plan(const int32_t* slot_ids, int32_t num_tokens, int32_t top_k, int32_t num_ranks,
                      int32_t slots_per_rank, int32_t capacity, int32_t* send_token, int32_t* send_slot,
                      int32_t* src_row, int32_t* send_counts) {
    const size_t rows = size_t(num_ranks) * capacity;
    std::fill(send_token, send_token + rows, 0);
    std::fill(send_slot, send_slot + rows, slots_per_rank);
    std::fill(send_counts, send_counts + num_ranks, 0);
    bool overflow = false;
    for (int32_t i = 0; i < num_tokens * top_k; ++i) {
        const int32_t dst = slot_ids[i] / slots_per_rank;
        const int32_t pos = send_counts[dst]++;
        if (pos < capacity) {
            const int32_t row = dst * capacity + pos;
            send_token[row] = i / top_k;
            send_slot[row] = slot_ids[i] % slots_per_rank;
            src_row[i] = row;
        } else {
            src_row[i] = 0;
            overflow = true;
        }
    }
    return overflow;
}

void ep_p2p_dispatch(int32_t rank, int32_t num_ranks, int32_t capacity, int32_t slots_per_rank, int32_t hidden,
                     const uint16_t* x, const int32_t* send_token, const int32_t* send_slot, uint16_t* const* recv_x,
                     int32_t* const* recv_slot) {
    for (int32_t i = 0; i < num_ranks * capacity; ++i) {
        const int32_t d = i / capacity, at = rank * capacity + i % capacity;
        recv_slot[d][at] = send_slot[i];
        if (send_slot[i] < slots_per_rank)
            std::copy_n(x + int64_t(send_token[i]) * hidden, hidden, recv_x[d] + int64_t(at) * hidden);
    }
}

void ep_p2p_combine(int32_t rank, int32_t num_ranks, int32_t capacity, int32_t slots_per_rank, int32_t hidden,
                    const uint16_t* y, const int32_t* recv_slot, uint16_t* const* y_back) {
    for (int32_t r = 0; r < num_ranks * capacity; ++r) {
        if (recv_slot[r] >= slots_per_rank) continue;
        const int32_t s = r / capacity, at = rank * capacity + r % capacity;
        std::copy_n(y + int64_t(r) * hidden, hidden, y_back[s] + int64_t(at) * hidden);
    }
}

}  // namespace zmoe::kernels::ref
