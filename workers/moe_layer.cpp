#include "workers/moe_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/check.hpp"
#include "workers/cpu_kernels.hpp"

namespace zmoe {
namespace {

// Rows of an expert's weight handed to one work item: big enough to amortise the bf16 widening, small enough to
// spread one hot expert over all threads.
constexpr int64_t kExpertRowChunk = 32;

struct expert_batch {
    int32_t slot = 0;
    std::vector<float> x;                             // [n, H] inputs gathered from all ranks
    std::vector<float> act;                           // [n, I] silu(gate) * up
    std::vector<float> y;                             // [n, H]
    std::vector<std::pair<int32_t, int64_t>> origin;  // (source rank, record index) of each row
    int64_t n() const { return static_cast<int64_t>(origin.size()); }
};

// Runs every gathered batch through its expert, parallel over (batch, row chunk) items.
void run_experts(thread_pool& pool, const moe_weights& w, std::vector<expert_batch>& batches, int64_t H, int64_t I) {
    struct item {
        expert_batch* b;
        int64_t r0, r1;
    };
    std::vector<item> gate_items, down_items;
    for (expert_batch& b : batches) {
        b.act.assign(static_cast<size_t>(b.n() * I), 0.f);
        b.y.assign(static_cast<size_t>(b.n() * H), 0.f);
        for (int64_t r = 0; r < I; r += kExpertRowChunk)
            gate_items.push_back({&b, r, std::min(I, r + kExpertRowChunk)});
        for (int64_t r = 0; r < H; r += kExpertRowChunk)
            down_items.push_back({&b, r, std::min(H, r + kExpertRowChunk)});
    }
    pool.parallel_for(static_cast<int64_t>(gate_items.size()), [&](int64_t i0, int64_t i1) {
        thread_local std::vector<float> scratch, gate, up;
        scratch.resize(static_cast<size_t>(kLinearRowBlock * H));
        for (int64_t i = i0; i < i1; ++i) {
            const item& it = gate_items[i];
            const mlp_weights& e = w.experts[it.b->slot];
            const int64_t n = it.b->n(), cols = it.r1 - it.r0;
            gate.resize(static_cast<size_t>(n * cols));
            up.resize(static_cast<size_t>(n * cols));
            linear_rows(it.b->x.data(), n, H, e.gate, it.r0, it.r1, nullptr, gate.data(), cols, scratch.data());
            linear_rows(it.b->x.data(), n, H, e.up, it.r0, it.r1, nullptr, up.data(), cols, scratch.data());
            for (int64_t t = 0; t < n; ++t)
                for (int64_t c = 0; c < cols; ++c)
                    it.b->act[t * I + it.r0 + c] = silu(gate[t * cols + c]) * up[t * cols + c];
        }
    });
    pool.parallel_for(static_cast<int64_t>(down_items.size()), [&](int64_t i0, int64_t i1) {
        thread_local std::vector<float> scratch;
        scratch.resize(static_cast<size_t>(kLinearRowBlock * I));
        for (int64_t i = i0; i < i1; ++i) {
            const item& it = down_items[i];
            linear_rows(it.b->act.data(), it.b->n(), I, w.experts[it.b->slot].down, it.r0, it.r1, nullptr,
                        it.b->y.data() + it.r0, H, scratch.data());
        }
    });
}

}  // namespace

routing route_token(const float* logits, int64_t num_experts, int64_t top_k, bool norm_topk_prob) {
    return route(logits, {.kind = router_kind::softmax_topk,
                          .num_experts = num_experts,
                          .top_k = top_k,
                          .norm_topk_prob = norm_topk_prob});
}

void mlp_forward(thread_pool& pool, const mlp_weights& w, const float* x, int64_t num_tokens, float* out) {
    if (num_tokens == 0) return;
    const int64_t I = w.gate.rows;
    std::vector<float> gate(static_cast<size_t>(num_tokens * I)), up(gate.size());
    linear(pool, x, num_tokens, w.gate, nullptr, gate.data());
    linear(pool, x, num_tokens, w.up, nullptr, up.data());
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    linear(pool, gate.data(), num_tokens, w.down, nullptr, out);
}

void moe_forward(thread_pool& pool, const model_config& config, const moe_weights& weights,
                 const expert_placement& placement, int64_t moe_layer, expert_comm& comm, const float* x,
                 int64_t num_tokens, float* out, uint32_t* expert_counts) {
    const int64_t H = config.hidden_size, E = config.num_experts, K = config.num_experts_per_tok;
    const int64_t I = config.moe_intermediate_size;
    const int world = comm.world_size();
    ZMOE_CHECK(placement.world_size() == world, "placement world " << placement.world_size() << " vs comm " << world);

    // Route.
    std::vector<float> logits(static_cast<size_t>(num_tokens * E));
    linear(pool, x, num_tokens, weights.router, nullptr, logits.data());
    std::vector<routing> routes(static_cast<size_t>(num_tokens));
    const router_params rp =
        router_params_of(config, weights.router_bias.empty() ? nullptr : weights.router_bias.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
        routes[t] = route(logits.data() + t * E, rp);
        for (int32_t e : routes[t].experts) ++expert_counts[e];
    }

    // Dispatch: a record is [slot id, H floats of the row]; (rank, record index) of every (token, k) is kept for
    // the combine. Slot ids are small integers, exact in a float.
    const int64_t rec = H + 1;
    std::vector<std::vector<float>> send(static_cast<size_t>(world));
    std::vector<std::pair<int32_t, int64_t>> where(static_cast<size_t>(num_tokens * K));
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t k = 0; k < K; ++k) {
            const expert_replica& rep = placement.pick(moe_layer, routes[t].experts[k], t);
            std::vector<float>& buf = send[rep.rank];
            where[t * K + k] = {rep.rank, static_cast<int64_t>(buf.size()) / rec};
            buf.push_back(static_cast<float>(rep.slot));
            buf.insert(buf.end(), x + t * H, x + (t + 1) * H);
        }
    }
    std::vector<std::vector<float>> received = comm.all_to_all(std::move(send));

    // Compute the experts of this rank's slots for every rank's records.
    const int rank = comm.rank();
    const auto num_slots = static_cast<int32_t>(weights.experts.size());
    ZMOE_CHECK(static_cast<int64_t>(placement.slots(moe_layer, rank).size()) == num_slots,
               "rank " << rank << " holds " << num_slots << " expert slots, placement says "
                       << placement.slots(moe_layer, rank).size());
    std::vector<int32_t> batch_of(static_cast<size_t>(num_slots), -1);
    std::vector<expert_batch> batches;
    for (int src = 0; src < world; ++src) {
        const std::vector<float>& buf = received[src];
        ZMOE_CHECK(buf.size() % rec == 0, "dispatch buffer from rank " << src << " has " << buf.size() << " floats");
        for (int64_t r = 0; r < static_cast<int64_t>(buf.size()) / rec; ++r) {
            const auto slot = static_cast<int32_t>(buf[r * rec]);
            ZMOE_CHECK(slot >= 0 && slot < num_slots, "rank " << src << " sent slot " << slot);
            if (batch_of[slot] < 0) {
                batch_of[slot] = static_cast<int32_t>(batches.size());
                batches.emplace_back().slot = slot;
            }
            expert_batch& b = batches[batch_of[slot]];
            b.x.insert(b.x.end(), buf.begin() + r * rec + 1, buf.begin() + (r + 1) * rec);
            b.origin.emplace_back(src, r);
        }
    }
    run_experts(pool, weights, batches, H, I);
    std::vector<std::vector<float>> reply(static_cast<size_t>(world));
    for (int src = 0; src < world; ++src) reply[src].resize(received[src].size() / rec * H);
    for (const expert_batch& b : batches)
        for (int64_t i = 0; i < b.n(); ++i)
            std::memcpy(reply[b.origin[i].first].data() + b.origin[i].second * H, b.y.data() + i * H,
                        sizeof(float) * H);
    std::vector<std::vector<float>> results = comm.all_to_all(std::move(reply));

    // Combine in top-k order, then the shared expert: qwen2_moe gates it by sigmoid, DeepSeek adds it as is.
    pool.parallel_for(
        num_tokens,
        [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float* o = out + t * H;
                std::fill(o, o + H, 0.f);
                for (int64_t k = 0; k < K; ++k) {
                    const auto [r, idx] = where[t * K + k];
                    const float* y = results[r].data() + idx * H;
                    const float wk = routes[t].weights[k];
                    for (int64_t i = 0; i < H; ++i) o[i] += wk * y[i];
                }
            }
        },
        16);
    if (weights.has_shared && num_tokens > 0) {
        std::vector<float> shared(static_cast<size_t>(num_tokens * H)), gate(static_cast<size_t>(num_tokens));
        mlp_forward(pool, weights.shared, x, num_tokens, shared.data());
        if (weights.shared_gate.empty()) {
            for (int64_t i = 0; i < num_tokens * H; ++i) out[i] += shared[i];
        } else {
            linear(pool, x, num_tokens, weights.shared_gate, nullptr, gate.data());
            for (int64_t t = 0; t < num_tokens; ++t) {
                const float g = 1.0f / (1.0f + std::exp(-gate[t]));
                for (int64_t i = 0; i < H; ++i) out[t * H + i] += g * shared[t * H + i];
            }
        }
    }
}

}  // namespace zmoe
