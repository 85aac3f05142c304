#include "workers/moe_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/check.hpp"
#include "workers/cpu_kernels.hpp"
#include "workers/fp8.hpp"

namespace zmoe {
namespace {

// Rows of an expert's weight handed to one work item: big enough to amortise the bf16 widening, small enough to
// spread one hot expert over all threads.
constexpr int64_t kExpertRowChunk = 32;

struct expert_batch {
    int32_t slot = 0;
    std::vector<float> x;                             // [n, H] inputs gathered from all ranks (f32 dispatch)
    std::vector<float> xq, xs;                        // fp8 dispatch: [n, H] e4m3 values, [n, fp8_blocks(H)] scales
    std::vector<float> act;                           // [n, I] silu(gate) * up
    std::vector<float> y;                             // [n, H]
    std::vector<std::pair<int32_t, int64_t>> origin;  // (source rank, record index) of each row
    int64_t n() const { return static_cast<int64_t>(origin.size()); }
};

bool is_fp8(const matrix_view& m) { return m.type == dtype::f8_e4m3; }

// Runs every gathered batch through its expert, parallel over (batch, row chunk) items. A batch of FP8 records
// (xq/xs) feeds FP8 gate/up projections as is; an expert without them gets the dequantized rows.
void run_experts(thread_pool& pool, const moe_weights& w, std::vector<expert_batch>& batches, int64_t H, int64_t I,
                 activation_rounding round) {
    struct item {
        expert_batch* b;
        int64_t r0, r1;
    };
    std::vector<item> gate_items, down_items;
    const int64_t kb = fp8_blocks(H);
    for (expert_batch& b : batches) {
        const mlp_weights& e = w.experts[b.slot];
        if (!b.xq.empty() && !(is_fp8(e.gate) && is_fp8(e.up))) {
            b.x.resize(b.xq.size());
            for (int64_t i = 0; i < static_cast<int64_t>(b.xq.size()); ++i)
                b.x[i] = b.xq[i] * b.xs[(i / H) * kb + (i % H) / kFp8Block];
        }
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
            if (it.b->x.empty()) {  // FP8 records into FP8 projections: the quantization the sender did
                linear_rows_fp8(it.b->xq.data(), it.b->xs.data(), n, e.gate, it.r0, it.r1, nullptr, gate.data(), cols,
                                scratch.data());
                linear_rows_fp8(it.b->xq.data(), it.b->xs.data(), n, e.up, it.r0, it.r1, nullptr, up.data(), cols,
                                scratch.data());
            } else {
                linear_rows(it.b->x.data(), n, H, e.gate, it.r0, it.r1, nullptr, gate.data(), cols, scratch.data());
                linear_rows(it.b->x.data(), n, H, e.up, it.r0, it.r1, nullptr, up.data(), cols, scratch.data());
            }
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
            for (int64_t t = 0; t < it.b->n(); ++t) round(it.b->y.data() + t * H + it.r0, it.r1 - it.r0);
        }
    });
}

}  // namespace

ep_dispatch_format ep_dispatch_format_of(const model_config& config) {
    return config.quantization.fp8() ? ep_dispatch_format::fp8 : ep_dispatch_format::f32;
}

int64_t ep_dispatch_record_words(ep_dispatch_format format, int64_t hidden) {
    switch (format) {
        case ep_dispatch_format::f32:
            return 1 + hidden;
        case ep_dispatch_format::fp8:
            return 1 + fp8_blocks(hidden) + (hidden + 3) / 4;
    }
    ZMOE_CHECK(false, "dispatch format " << static_cast<int>(format));
    return 0;
}

routing route_token(const float* logits, int64_t num_experts, int64_t top_k, bool norm_topk_prob) {
    return route(logits, {.kind = router_kind::softmax_topk,
                          .num_experts = num_experts,
                          .top_k = top_k,
                          .norm_topk_prob = norm_topk_prob});
}

void mlp_forward(thread_pool& pool, const mlp_weights& w, const float* x, int64_t num_tokens, float* out,
                 activation_rounding round) {
    if (num_tokens == 0) return;
    const int64_t I = w.gate.rows;
    std::vector<float> gate(static_cast<size_t>(num_tokens * I)), up(gate.size());
    linear(pool, x, num_tokens, w.gate, nullptr, gate.data());
    linear(pool, x, num_tokens, w.up, nullptr, up.data());
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    linear(pool, gate.data(), num_tokens, w.down, nullptr, out);
    round(out, num_tokens * w.down.rows);
}

namespace {

// One micro-batch's routing state between its dispatch and its combine.
struct moe_exchange {
    std::vector<routing> routes;                     // [n]
    std::vector<std::pair<int32_t, int64_t>> where;  // [n * K]: (rank, record index) of every (token, k)
    std::vector<std::vector<float>> send;            // [world] dispatch records
};

// Routes rows x[0, n) (global token indices first_token + t, for the replica choice) and packs the dispatch, one
// record (ep_dispatch_format) per (token, k). Slot ids are small integers, exact in a float. The buffers are 32-bit
// words moved bit for bit (expert_comm): the FP8 records' codes travel as raw bytes inside them.
moe_exchange route_and_pack(thread_pool& pool, const model_config& config, const moe_weights& weights,
                            const expert_placement& placement, int64_t moe_layer, int world, const float* x,
                            int64_t first_token, int64_t n, uint32_t* expert_counts, ep_dispatch_format format) {
    const int64_t H = config.hidden_size, E = config.num_experts, K = config.num_experts_per_tok;
    moe_exchange ex;
    std::vector<float> logits(static_cast<size_t>(n * E));
    linear(pool, x, n, weights.router, nullptr, logits.data());
    ex.routes.resize(static_cast<size_t>(n));
    const router_params rp =
        router_params_of(config, weights.router_bias.empty() ? nullptr : weights.router_bias.data());
    for (int64_t t = 0; t < n; ++t) {
        ex.routes[t] = route(logits.data() + t * E, rp);
        for (int32_t e : ex.routes[t].experts) ++expert_counts[e];
    }
    const int64_t rec = ep_dispatch_record_words(format, H);
    // FP8: each token's row quantized once, the payload after the slot word: [scales | codes], rec - 1 words.
    std::vector<float> payload;
    if (format == ep_dispatch_format::fp8) {
        const int64_t kb = fp8_blocks(H), words = rec - 1;
        payload.assign(static_cast<size_t>(n * words), 0.f);
        pool.parallel_for(
            n,
            [&](int64_t t0, int64_t t1) {
                std::vector<float> q(static_cast<size_t>(H));
                std::vector<uint8_t> codes(static_cast<size_t>(H));
                for (int64_t t = t0; t < t1; ++t) {
                    float* p = payload.data() + t * words;
                    quantize_fp8_activation_row(x + t * H, H, q.data(), p);
                    for (int64_t i = 0; i < H; ++i) codes[i] = f32_to_e4m3(q[i]);  // q is exact in e4m3
                    std::memcpy(p + kb, codes.data(), static_cast<size_t>(H));
                }
            },
            16);
    }
    ex.send.resize(static_cast<size_t>(world));
    ex.where.resize(static_cast<size_t>(n * K));
    for (int64_t t = 0; t < n; ++t) {
        const float* row = format == ep_dispatch_format::fp8 ? payload.data() + t * (rec - 1) : x + t * H;
        for (int64_t k = 0; k < K; ++k) {
            const expert_replica rep =
                placement.pick(static_cast<int32_t>(moe_layer), ex.routes[t].experts[k], first_token + t);
            std::vector<float>& buf = ex.send[rep.rank];
            ex.where[t * K + k] = {rep.rank, static_cast<int64_t>(buf.size()) / rec};
            buf.push_back(static_cast<float>(rep.slot));
            buf.insert(buf.end(), row, row + (rec - 1));
        }
    }
    return ex;
}

// Computes the experts of this rank's slots for every rank's dispatched records; returns the combine buffers.
std::vector<std::vector<float>> compute_experts(thread_pool& pool, const model_config& config,
                                                const moe_weights& weights, const expert_placement& placement,
                                                int64_t moe_layer, int rank,
                                                const std::vector<std::vector<float>>& received,
                                                ep_dispatch_format format, activation_rounding round) {
    const int64_t H = config.hidden_size, I = config.moe_intermediate_size;
    const int64_t rec = ep_dispatch_record_words(format, H), kb = fp8_blocks(H);
    const float* e4m3 = e4m3_table();
    const int world = static_cast<int>(received.size());
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
            const float* body = buf.data() + r * rec + 1;
            switch (format) {
                case ep_dispatch_format::f32:
                    b.x.insert(b.x.end(), body, body + H);
                    break;
                case ep_dispatch_format::fp8: {
                    b.xs.insert(b.xs.end(), body, body + kb);
                    const auto* codes = reinterpret_cast<const uint8_t*>(body + kb);
                    for (int64_t i = 0; i < H; ++i) b.xq.push_back(e4m3[codes[i]]);
                    break;
                }
            }
            b.origin.emplace_back(src, r);
        }
    }
    run_experts(pool, weights, batches, H, I, round);
    std::vector<std::vector<float>> reply(static_cast<size_t>(world));
    for (int src = 0; src < world; ++src) reply[src].resize(received[src].size() / rec * H);  // fp32 combine
    for (const expert_batch& b : batches)
        for (int64_t i = 0; i < b.n(); ++i)
            std::memcpy(reply[b.origin[i].first].data() + b.origin[i].second * H, b.y.data() + i * H,
                        sizeof(float) * H);
    return reply;
}

// out[t] = the top-k expert outputs of row t summed in top-k order, for rows [0, n) of one micro-batch.
void combine_rows(thread_pool& pool, const model_config& config, const moe_exchange& ex,
                  const std::vector<std::vector<float>>& results, int64_t n, float* out) {
    const int64_t H = config.hidden_size, K = config.num_experts_per_tok;
    pool.parallel_for(
        n,
        [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float* o = out + t * H;
                std::fill(o, o + H, 0.f);
                for (int64_t k = 0; k < K; ++k) {
                    const auto [r, idx] = ex.where[t * K + k];
                    const float* y = results[r].data() + idx * H;
                    const float wk = ex.routes[t].weights[k];
                    for (int64_t i = 0; i < H; ++i) o[i] += wk * y[i];
                }
            }
        },
        16);
}

// The shared expert's output for rows x[0, n), and its sigmoid gate per row (qwen2_moe; empty for DeepSeek, which
// adds it as is). Nothing when the layer has no shared expert.
struct shared_output {
    std::vector<float> y;     // [n, H]
    std::vector<float> gate;  // [n] or empty
};

shared_output shared_expert(thread_pool& pool, const model_config& config, const moe_weights& weights, const float* x,
                            int64_t n, activation_rounding round) {
    shared_output s;
    if (!weights.has_shared || n == 0) return s;
    s.y.resize(static_cast<size_t>(n * config.hidden_size));
    mlp_forward(pool, weights.shared, x, n, s.y.data(), round);
    if (!weights.shared_gate.empty()) {
        s.gate.resize(static_cast<size_t>(n));
        linear(pool, x, n, weights.shared_gate, nullptr, s.gate.data());
    }
    return s;
}

void add_shared(const model_config& config, const shared_output& s, int64_t n, float* out) {
    if (s.y.empty()) return;
    const int64_t H = config.hidden_size;
    if (s.gate.empty()) {
        for (int64_t i = 0; i < n * H; ++i) out[i] += s.y[i];
        return;
    }
    for (int64_t t = 0; t < n; ++t) {
        const float g = 1.0f / (1.0f + std::exp(-s.gate[t]));
        for (int64_t i = 0; i < H; ++i) out[t * H + i] += g * s.y[t * H + i];
    }
}

}  // namespace

void moe_forward(thread_pool& pool, const model_config& config, const moe_weights& weights,
                 const expert_placement& placement, int64_t moe_layer, expert_comm& comm, const float* x,
                 int64_t num_tokens, float* out, uint32_t* expert_counts, ep_dispatch_format format,
                 activation_rounding round) {
    const int world = comm.world_size();
    ZMOE_CHECK(placement.num_ranks == world, "placement world " << placement.num_ranks << " vs comm " << world);
    moe_exchange ex =
        route_and_pack(pool, config, weights, placement, moe_layer, world, x, 0, num_tokens, expert_counts, format);
    const auto received = comm.all_to_all(std::move(ex.send));
    const auto results = comm.all_to_all(
        compute_experts(pool, config, weights, placement, moe_layer, comm.rank(), received, format, round));
    combine_rows(pool, config, ex, results, num_tokens, out);
    round(out, num_tokens * config.hidden_size);
    const shared_output shared = shared_expert(pool, config, weights, x, num_tokens, round);
    add_shared(config, shared, num_tokens, out);
    if (!shared.y.empty()) round(out, num_tokens * config.hidden_size);
}

void moe_forward_dual(thread_pool& pool, const model_config& config, const moe_weights& weights,
                      const expert_placement& placement, int64_t moe_layer, comm_stream& stream, int rank, int world,
                      const float* x, int64_t num_tokens, int64_t split_row, float* out, uint32_t* expert_counts,
                      ep_dispatch_format format, activation_rounding round) {
    ZMOE_CHECK(placement.num_ranks == world, "placement world " << placement.num_ranks << " vs comm " << world);
    ZMOE_CHECK(split_row >= 0 && split_row <= num_tokens, "split row " << split_row << " of " << num_tokens);
    const int64_t H = config.hidden_size;
    const int64_t n_a = split_row, n_b = num_tokens - split_row;
    const float* x_b = x + n_a * H;
    // Every wait below follows the queue order (A dispatch, B dispatch, A combine, B combine), the same on every
    // rank; what runs between a queue and its wait is the other micro-batch's compute, overlapping the exchange.
    moe_exchange a =
        route_and_pack(pool, config, weights, placement, moe_layer, world, x, 0, n_a, expert_counts, format);
    auto a_dispatch = stream.all_to_all(std::move(a.send));
    moe_exchange b =
        route_and_pack(pool, config, weights, placement, moe_layer, world, x_b, n_a, n_b, expert_counts, format);
    auto b_dispatch = stream.all_to_all(std::move(b.send));
    auto a_combine = stream.all_to_all(
        compute_experts(pool, config, weights, placement, moe_layer, rank, a_dispatch.get(), format, round));
    auto b_combine = stream.all_to_all(
        compute_experts(pool, config, weights, placement, moe_layer, rank, b_dispatch.get(), format, round));
    // The shared expert needs no exchange: it runs while the combines are in flight.
    const shared_output shared = shared_expert(pool, config, weights, x, num_tokens, round);
    combine_rows(pool, config, a, a_combine.get(), n_a, out);
    combine_rows(pool, config, b, b_combine.get(), n_b, out + n_a * H);
    round(out, num_tokens * H);
    add_shared(config, shared, num_tokens, out);
    if (!shared.y.empty()) round(out, num_tokens * H);
}

}  // namespace zmoe
