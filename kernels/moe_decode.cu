// The routed-expert block of a decode step of a few tokens (at most kMoeDecodeMaxTokens), in three launches and
// with no permuted copies of the activations:
//   1. route (one block): softmax top-k per token (one warp per token), the replica slot of each choice, the EPLB
//      load counts, and the distinct slots of the step in ascending order with, for each, the choice of every
//      token that picked it (-1 where a token did not);
//   2. gate|up (one block per distinct slot and slice of kGateUpCols FFN columns; each warp a column): every gate
//      and up row is read once, 16-byte loads, and dotted with the x of each token of that slot (x in shared
//      memory); act[choice] = bf16(silu(gate) * up);
//   3. down + combine (one block per kDownRows rows of the hidden size; each warp a (slot, row) item): every down
//      row is read once per slot and dotted with the act of each choice of that slot; y = bf16(.) in shared memory;
//      then out[t] = bf16(sum_j weights[t, j] * y[t, j]) in top-k order.
// Every dot product is summed in a fixed order (lanes, then a warp reduction), so a token's result does not depend
// on which other tokens share the batch.

#include <algorithm>

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/dispatch.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGateUpCols = 16;  // FFN columns per gate|up block
constexpr int kDownRows = 4;     // hidden rows per down block
constexpr int kGateUpUnroll = 8;  // 16-byte vectors per lane in flight, per row (gate and up each)
constexpr int kDownUnroll = 4;
constexpr int kMaxT = kMoeDecodeMaxTokens;

/// Scratch layout: [num_unique | unique slots [TK] | choices [TK][T]].
struct scratch_view {
    int32_t* num_unique;
    int32_t* slots;
    int32_t* choices;
    __device__ scratch_view(int32_t* s, int32_t T, int32_t K) : num_unique(s), slots(s + 1), choices(s + 1 + T * K) {}
};

template <int kPerLane>
__global__ void __launch_bounds__(kThreads) moe_decode_route_kernel(const moe_decode_params p) {
    __shared__ int32_t slot_s[kMoeDecodeMaxPairs];
    __shared__ int32_t first_s[kMoeDecodeMaxPairs];
    const int32_t T = p.num_tokens, K = p.top_k, TK = T * K;
    const scratch_view sv(p.scratch, T, K);
    for (int32_t i = threadIdx.x; i < TK * T; i += kThreads) sv.choices[i] = -1;
    const int32_t num_valid = p.num_valid != nullptr ? *p.num_valid : T;

    const int lane = threadIdx.x % 32, t = threadIdx.x / 32;
    if (t < T) {
        // As router_topk_kernel: lane j ends up holding the j-th choice.
        const float* row = p.router_logits + size_t(t) * p.num_experts;
        float v[kPerLane];
        float max_v = -INFINITY;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int32_t e = i * 32 + lane;
            v[i] = e < p.num_experts ? row[e] : -INFINITY;
            max_v = fmaxf(max_v, v[i]);
        }
        max_v = detail::warp_max(max_v);
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) sum += i * 32 + lane < p.num_experts ? expf(v[i] - max_v) : 0.f;
        sum = detail::warp_sum(sum);
        int32_t my_id = -1;
        float my_weight = 0.f;
        for (int j = 0; j < K; ++j) {
            float best = -INFINITY;
            int32_t best_id = INT32_MAX;
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int32_t e = i * 32 + lane;
                if (e < p.num_experts && (v[i] > best || (v[i] == best && e < best_id))) best = v[i], best_id = e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(detail::kFullMask, best, o);
                const int32_t oi = __shfl_xor_sync(detail::kFullMask, best_id, o);
                if (ob > best || (ob == best && oi < best_id)) best = ob, best_id = oi;
            }
#pragma unroll
            for (int i = 0; i < kPerLane; ++i)
                if (i * 32 + lane == best_id) v[i] = -INFINITY;
            if (lane == j) my_id = best_id, my_weight = expf(best - max_v) / sum;
        }
        if (p.renormalize) my_weight /= detail::warp_sum(lane < K ? my_weight : 0.f);
        if (lane < K) {
            const int32_t a = t * K + lane;
            const int32_t first = p.replica_offsets[my_id], n = p.replica_offsets[my_id + 1] - first;
            const int32_t slot = p.replica_slots[first + t % n];
            p.topk_weights[a] = my_weight;
            p.slot_ids[a] = slot;
            slot_s[a] = slot;
            if (t < num_valid && p.expert_counts != nullptr) atomicAdd(&p.expert_counts[my_id], 1);
        }
    }
    __syncthreads();
    // Distinct slots, ascending: a choice is its slot's first if no earlier choice has the slot; its slot's rank is
    // the number of first choices with a smaller slot.
    const int32_t a = threadIdx.x;
    bool first = false;
    if (a < TK) {
        first = true;
        for (int32_t b = 0; b < a; ++b) first = first && slot_s[b] != slot_s[a];
        first_s[a] = first;
    }
    const int32_t num_unique = __syncthreads_count(first);
    if (a < TK) {
        int32_t rank = 0;
        for (int32_t b = 0; b < TK; ++b) rank += first_s[b] && slot_s[b] < slot_s[a];
        if (first) sv.slots[rank] = slot_s[a];
        sv.choices[rank * T + a / K] = a;
    }
    if (a == 0) *sv.num_unique = num_unique;
}

__global__ void __launch_bounds__(kThreads) moe_decode_gate_up_kernel(const moe_decode_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* x_s = reinterpret_cast<bf16*>(smem);  // [T, hidden]
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden;
    const scratch_view sv(p.scratch, T, K);
    const int32_t u = blockIdx.x;
    if (u >= *sv.num_unique) return;
    const int32_t slot = sv.slots[u];
    int32_t choice[kMaxT];
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) choice[t] = t < T ? sv.choices[u * T + t] : -1;
    for (int32_t v = threadIdx.x; v < T * H / 8; v += kThreads)
        reinterpret_cast<detail::bf16x8*>(x_s)[v] = reinterpret_cast<const detail::bf16x8*>(p.x)[v];
    __syncthreads();

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t nvec = H / 8;
    const bf16* w = p.w_gate_up + size_t(slot) * 2 * p.inter * H;
    for (int c = warp; c < kGateUpCols; c += kWarps) {
        const int32_t j = blockIdx.y * kGateUpCols + c;
        if (j >= p.inter) break;
        const bf16* g_row = w + size_t(j) * H;
        const bf16* u_row = w + size_t(p.inter + j) * H;
        float ag[kMaxT] = {}, au[kMaxT] = {};
        for (int32_t v0 = 0; v0 < nvec; v0 += 32 * kGateUpUnroll) {
            detail::bf16x8 gv[kGateUpUnroll], uv[kGateUpUnroll];
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < nvec) {
                    gv[i] = reinterpret_cast<const detail::bf16x8*>(g_row)[v];
                    uv[i] = reinterpret_cast<const detail::bf16x8*>(u_row)[v];
                }
            }
#pragma unroll
            for (int i = 0; i < kGateUpUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= nvec) break;
                float g[8], up[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 gf = __bfloat1622float2(gv[i].h[e]), uf = __bfloat1622float2(uv[i].h[e]);
                    g[2 * e] = gf.x, g[2 * e + 1] = gf.y, up[2 * e] = uf.x, up[2 * e + 1] = uf.y;
                }
#pragma unroll
                for (int t = 0; t < kMaxT; ++t) {
                    if (choice[t] < 0) continue;
                    float xv[8];
                    detail::load_f32x8(x_s + size_t(t) * H + v * 8, xv);
#pragma unroll
                    for (int e = 0; e < 8; ++e) ag[t] += g[e] * xv[e], au[t] += up[e] * xv[e];
                }
            }
        }
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) {
            if (choice[t] < 0) continue;
            const float g = detail::warp_sum(ag[t]), up = detail::warp_sum(au[t]);
            if (lane == 0) p.act[size_t(choice[t]) * p.inter + j] = __float2bfloat16(g / (1.f + __expf(-g)) * up);
        }
    }
}

__global__ void __launch_bounds__(kThreads) moe_decode_down_kernel(const moe_decode_params p) {
    __shared__ float y_s[kMoeDecodeMaxPairs][kDownRows];
    const int32_t T = p.num_tokens, K = p.top_k, H = p.hidden, I = p.inter;
    const scratch_view sv(p.scratch, T, K);
    const int32_t num_unique = *sv.num_unique;
    const int32_t h0 = blockIdx.x * kDownRows;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int32_t nvec = I / 8;
    for (int32_t item = warp; item < num_unique * kDownRows; item += kWarps) {
        const int32_t u = item / kDownRows, r = item % kDownRows, h = h0 + r;
        if (h >= H) continue;
        const int32_t slot = sv.slots[u];
        int32_t choice[kMaxT];
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) choice[t] = t < T ? sv.choices[u * T + t] : -1;
        const bf16* row = p.w_down + (size_t(slot) * H + h) * I;
        float acc[kMaxT] = {};
        for (int32_t v0 = 0; v0 < nvec; v0 += 32 * kDownUnroll) {
            detail::bf16x8 wv[kDownUnroll];
#pragma unroll
            for (int i = 0; i < kDownUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v < nvec) wv[i] = reinterpret_cast<const detail::bf16x8*>(row)[v];
            }
#pragma unroll
            for (int i = 0; i < kDownUnroll; ++i) {
                const int32_t v = v0 + i * 32 + lane;
                if (v >= nvec) break;
                float wf[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __bfloat1622float2(wv[i].h[e]);
                    wf[2 * e] = f.x, wf[2 * e + 1] = f.y;
                }
#pragma unroll
                for (int t = 0; t < kMaxT; ++t) {
                    if (choice[t] < 0) continue;
                    float av[8];
                    detail::load_f32x8(p.act + size_t(choice[t]) * I + v * 8, av);
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[t] += wf[e] * av[e];
                }
            }
        }
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) {
            if (choice[t] < 0) continue;
            const float y = detail::warp_sum(acc[t]);
            if (lane == 0) y_s[choice[t]][r] = __bfloat162float(__float2bfloat16(y));
        }
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < T * kDownRows; i += kThreads) {
        const int32_t t = i / kDownRows, r = i % kDownRows, h = h0 + r;
        if (h >= H) continue;
        float acc = 0.f;
        for (int32_t j = 0; j < K; ++j) acc += p.topk_weights[t * K + j] * y_s[t * K + j][r];
        p.out[size_t(t) * H + h] = __float2bfloat16(acc);
    }
}

}  // namespace

bool moe_decode_supported(int32_t num_tokens, int32_t top_k, int32_t num_experts, int32_t hidden, int32_t inter) {
    return num_tokens >= 1 && num_tokens <= kMoeDecodeMaxTokens && top_k >= 1 && top_k <= 16 &&
           num_tokens * top_k <= kMoeDecodeMaxPairs && num_experts >= top_k && num_experts <= 512 &&
           hidden % 8 == 0 && inter % 8 == 0 && hidden > 0 && inter > 0;
}

size_t moe_decode_scratch_ints(int32_t num_tokens, int32_t top_k) {
    const size_t tk = size_t(num_tokens) * top_k;
    return 1 + tk + tk * num_tokens;
}

void launch_moe_decode(const moe_decode_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(moe_decode_supported(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter),
                        "moe_decode: 1..8 tokens, tokens x top_k <= 64, top_k <= 16, <= 512 experts, hidden and "
                        "inter multiples of 8");
    DISPATCH_EXPERTS_PER_LANE(p.num_experts, kPerLane, moe_decode_route_kernel<kPerLane><<<1, kThreads, 0, stream>>>(p));
    ZMOE_CUDA_CHECK_LAUNCH();
    const int32_t tk = p.num_tokens * p.top_k;
    const size_t x_bytes = size_t(p.num_tokens) * p.hidden * sizeof(bf16);
    if (x_bytes > 48 * 1024)
        ZMOE_CUDA_CHECK(
            cudaFuncSetAttribute(moe_decode_gate_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(x_bytes)));
    moe_decode_gate_up_kernel<<<dim3(tk, (p.inter + kGateUpCols - 1) / kGateUpCols), kThreads, x_bytes, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
    moe_decode_down_kernel<<<(p.hidden + kDownRows - 1) / kDownRows, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
