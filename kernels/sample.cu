// Sampling, one block per sequence: logits processing (logit bias, penalties, banned ids, the structured-output
// token mask) into a scratch row, then
// greedy argmax, or temperature -> top-k -> min-p -> top-p -> Gumbel-max draw, then the raw logprobs asked for.
// The top-k and top-p cut-offs are found without sorting, by a radix select over order-preserving 32-bit keys of
// the scaled logits: four passes of 8 bits, each a 256-bin histogram of counts (top-k) or probability mass (top-p).

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/sampling.hpp"

namespace zmoe::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 256;

__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Block-wide argmax; lowest index wins ties. `vals`/`idxs` hold 32 entries each.
__device__ int32_t block_argmax(float v, int32_t i, float* vals, int32_t* idxs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(detail::kFullMask, v, o);
            const int32_t oi = __shfl_xor_sync(detail::kFullMask, i, o);
            if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = ov, i = oi;
        }
        if (pass == 1) break;
        __syncthreads();
        if (lane == 0) vals[warp] = v, idxs[warp] = i;
        __syncthreads();
        v = lane < kThreads / 32 ? vals[lane] : -INFINITY;
        i = lane < kThreads / 32 ? idxs[lane] : -1;
    }
    return i;
}

struct select_smem {
    float hist[kBins];  // counts or mass per digit value among the candidates
    uint32_t prefix;    // digits fixed so far
    float remaining;    // weight still to cover below the fixed prefix
};

/// The largest key tau with weight(key >= tau) >= target, among keys >= min_key (weight 1 or exp(z - z_max)).
template <bool kMass>
__device__ uint32_t radix_select(const float* logits, int32_t vocab, float temperature, float z_max, uint32_t min_key,
                                 float target, select_smem& s) {
    if (threadIdx.x == 0) s.prefix = 0, s.remaining = target;
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0.f;
        __syncthreads();
        const uint32_t prefix = s.prefix;
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
            const float z = logits[i] / temperature;
            const uint32_t key = order_key(z);
            if ((key & mask) != prefix || key < min_key) continue;
            atomicAdd(&s.hist[(key >> shift) & 0xff], kMass ? expf(z - z_max) : 1.f);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float above = 0.f;
            int chosen = -1, lowest_nonempty = 0;
            for (int b = kBins - 1; b >= 0; --b) {
                if (s.hist[b] > 0.f) lowest_nonempty = b;
                if (above + s.hist[b] >= s.remaining && s.hist[b] > 0.f) {
                    chosen = b;
                    break;
                }
                above += s.hist[b];
            }
            if (chosen < 0) {  // rounding left the total short of the target: take everything
                chosen = lowest_nonempty;
                above -= s.hist[chosen];
            }
            s.remaining -= above;
            s.prefix = prefix | (uint32_t(chosen) << shift);
        }
        mask |= 0xffu << shift;
        __syncthreads();
    }
    return s.prefix;
}

/// Writes the processed row `out` from `raw` (see kernels/sampling.hpp for the order of the rules); the block's
/// threads all take part. `counts` [vocab]: bit 31 = seen in the prompt, bits 0..30 = occurrences in the output.
__device__ void process_row(const sample_params& p, const sample_seq_params& sp, const float* raw, float* out,
                            uint32_t* counts) {
    const int32_t vocab = p.vocab_size;
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) out[i] = raw[i];
    __syncthreads();
    for (int32_t j = threadIdx.x; j < sp.num_bias; j += kThreads) {
        const int32_t id = p.bias_ids[sp.bias_begin + j];
        if (id >= 0 && id < vocab) out[id] += p.bias_values[sp.bias_begin + j];  // ids are unique: no race
    }
    if (has_penalties(sp)) {
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) counts[i] = 0;
        __syncthreads();
        const int32_t* h = p.history + sp.history_begin;
        for (int32_t j = threadIdx.x; j < sp.num_prompt + sp.num_output; j += kThreads) {
            const int32_t t = h[j];
            if (t < 0 || t >= vocab) continue;
            if (j < sp.num_prompt)
                atomicOr(&counts[t], 0x80000000u);
            else
                atomicAdd(&counts[t], 1u);
        }
        __syncthreads();
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
            const uint32_t c = counts[i];
            if (c != 0) out[i] = apply_penalties(out[i], true, c & 0x7fffffffu, sp);
        }
    }
    __syncthreads();
    for (int32_t j = threadIdx.x; j < sp.num_banned; j += kThreads) {
        const int32_t id = p.banned[sp.banned_begin + j];
        if (id >= 0 && id < vocab) out[id] = -INFINITY;
    }
    if (sp.mask_row >= 0) {
        __syncthreads();
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads)
            if (!mask_allows(p.masks, p.mask_words, sp.mask_row, i)) out[i] = -INFINITY;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const sample_params p) {
    __shared__ float vals[32];
    __shared__ int32_t idxs[32];
    __shared__ select_smem sel;
    const sample_seq_params sp = p.seqs[blockIdx.x];
    const int32_t vocab = p.vocab_size;
    const float* raw = p.logits + size_t(blockIdx.x) * vocab;
    const float* logits = raw;
    if (has_processing(sp)) {
        float* out = p.processed + size_t(blockIdx.x) * vocab;
        process_row(p, sp, raw, out, p.counts + size_t(blockIdx.x) * vocab);
        logits = out;
    }

    int32_t token;
    if (sp.temperature <= 0.f) {
        float best = -INFINITY;
        int32_t best_i = -1;
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads)
            if (best_i < 0 || logits[i] > best) best = logits[i], best_i = i;
        token = block_argmax(best, best_i, vals, idxs);
    } else {
        const float temp = sp.temperature;
        float local_max = -INFINITY;
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) local_max = fmaxf(local_max, logits[i] / temp);
        const float z_max = detail::block_max(local_max, vals);

        uint32_t threshold = 0;
        if (sp.top_k > 0 && sp.top_k < vocab)
            threshold = radix_select<false>(logits, vocab, temp, z_max, 0, float(sp.top_k), sel);
        if (sp.min_p > 0.f) threshold = max(threshold, order_key(min_p_floor(z_max, sp.min_p)));
        if (sp.top_p < 1.f) {
            float mass = 0.f;
            for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
                const float z = logits[i] / temp;
                if (order_key(z) >= threshold) mass += expf(z - z_max);
            }
            const float total = detail::block_sum(mass, vals);
            __syncthreads();
            threshold = radix_select<true>(logits, vocab, temp, z_max, threshold, sp.top_p * total, sel);
        }

        float best = -INFINITY;
        int32_t best_i = -1;
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
            const float z = logits[i] / temp;
            if (order_key(z) < threshold) continue;
            const float score = z - logf(-logf(sample_uniform(sp.seed, sp.counter, uint32_t(i))));
            if (best_i < 0 || score > best) best = score, best_i = i;
        }
        __syncthreads();
        token = block_argmax(best, best_i, vals, idxs);
    }
    if (threadIdx.x == 0) p.tokens[blockIdx.x] = token;
    if (sp.num_logprobs < 0) return;

    // Raw logprobs: log-softmax of the unprocessed logits, as vLLM reports by default.
    float m = -INFINITY;
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) m = fmaxf(m, raw[i]);
    m = detail::block_max(m, vals);
    float sum = 0.f;
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) sum += expf(raw[i] - m);
    const float lse = m + logf(detail::block_sum(sum, vals));
    if (threadIdx.x == 0) p.token_logprobs[blockIdx.x] = raw[token] - lse;
    // The k largest by (logit descending, id ascending): k block argmaxes, each below the previous one.
    float prev_v = INFINITY;
    int32_t prev_i = -1;
    const int32_t k = min(sp.num_logprobs, kMaxLogprobs);
    for (int32_t j = 0; j < k; ++j) {
        float bv = -INFINITY;
        int32_t bi = -1;
        for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
            const float v = raw[i];
            if (!(v < prev_v || (v == prev_v && i > prev_i))) continue;
            if (bi < 0 || v > bv) bv = v, bi = i;
        }
        __syncthreads();
        const int32_t w = block_argmax(bv, bi, vals, idxs);
        if (w < 0) break;
        prev_v = raw[w];
        prev_i = w;
        if (threadIdx.x == 0) {
            p.top_ids[size_t(blockIdx.x) * kMaxLogprobs + j] = w;
            p.top_logprobs[size_t(blockIdx.x) * kMaxLogprobs + j] = prev_v - lse;
        }
    }
}

}  // namespace

void launch_sample(const sample_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.vocab_size > 0, "sample: vocab_size must be positive");
    if (p.num_seqs == 0) return;
    sample_kernel<<<p.num_seqs, kThreads, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
