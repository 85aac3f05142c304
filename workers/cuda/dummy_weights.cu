// `--load-format dummy` on the device: every weight generated in place from a counter-based hash, so a model of a
// real model's dimensions loads in seconds with no checkpoint on disk.

#include <cuda_bf16.h>

#include "kernels/cuda_check.hpp"
#include "workers/cuda/cuda_weights.hpp"

namespace zmoe::cuda {
namespace {

constexpr float kStd = 0.02f;  // transformers' initializer_range for these architectures

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/// out[i] = bf16(mean + std * z_i), z_i standard normal (Box-Muller over two 24-bit uniforms of hash(stream, i)).
__global__ void fill_normal_kernel(__nv_bfloat16* out, size_t n, uint64_t stream, float mean, float std) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint64_t h = mix64(stream * 0x9e3779b97f4a7c15ull + i);
        const float u1 = (float(h >> 40) + 0.5f) * (1.f / 16777216.f);
        const float u2 = float((h >> 16) & 0xffffff) * (1.f / 16777216.f);
        const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
        out[i] = __float2bfloat16(mean + std * z);
    }
}

class generator {
  public:
    /// n values of the tensor numbered `stream` at dst.
    void fill(void* dst, size_t n, uint64_t stream, float mean, float std) {
        if (n == 0) return;
        const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 4096));
        fill_normal_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(dst), n, stream, mean, std);
        ZMOE_CUDA_CHECK_LAUNCH();
    }
    device_buffer matrix(size_t n, uint64_t stream) { return make(n, stream, 0.f, kStd); }
    device_buffer ones(size_t n) { return make(n, 0, 1.f, 0.f); }
    device_buffer zeros(size_t n) { return make(n, 0, 0.f, 0.f); }
    int64_t bytes = 0;

  private:
    device_buffer make(size_t n, uint64_t stream, float mean, float std) {
        device_buffer b(n * 2);
        fill(b.as<void>(), n, stream, mean, std);
        bytes += static_cast<int64_t>(n * 2);
        return b;
    }
};

/// A tensor's stream number: (layer, tensor kind, expert) packed; distinct for every tensor of the model.
uint64_t stream_of(int64_t layer, int kind, int64_t expert = 0) {
    return (uint64_t(layer + 1) << 40) | (uint64_t(kind) << 32) | uint64_t(expert);
}

}  // namespace

cuda_weights cuda_weights::dummy(const model_config& c, const expert_placement& placement, int rank) {
    generator g;
    cuda_weights out;
    const size_t H = static_cast<size_t>(c.hidden_size), V = static_cast<size_t>(c.vocab_size);
    const size_t D = static_cast<size_t>(c.head_dim);
    const size_t q_dim = static_cast<size_t>(c.num_heads) * D, kv_dim = static_cast<size_t>(c.num_kv_heads) * D;
    out.embed = g.matrix(V * H, stream_of(-1, 1));
    if (!c.tie_word_embeddings) out.lm_head = g.matrix(V * H, stream_of(-1, 2));
    out.final_norm = g.ones(H);
    const auto moe_index = c.moe_layer_indices();
    auto mlp = [&](int64_t layer, int kind, int64_t inter) {
        cuda_mlp m;
        m.gate_up = g.matrix(2 * static_cast<size_t>(inter) * H, stream_of(layer, kind));
        m.down = g.matrix(H * static_cast<size_t>(inter), stream_of(layer, kind + 1));
        m.inter = inter;
        return m;
    };
    for (int64_t li = 0; li < c.num_layers; ++li) {
        cuda_layer& l = out.layers.emplace_back();
        l.input_norm = g.ones(H);
        l.post_norm = g.ones(H);
        if (c.is_mla()) {
            const mla_params& m = c.mla;
            const size_t heads = static_cast<size_t>(c.num_heads), r = static_cast<size_t>(m.kv_lora_rank);
            const size_t qk = static_cast<size_t>(m.qk_nope_head_dim + m.qk_rope_head_dim);
            const size_t dr = static_cast<size_t>(m.qk_rope_head_dim), dv = static_cast<size_t>(m.v_head_dim);
            const size_t qr = static_cast<size_t>(m.q_lora_rank);
            if (qr > 0) {
                l.mla.q_a = g.matrix(qr * H, stream_of(li, 13));
                l.mla.q_a_norm = g.ones(qr);
                l.mla.q_b = g.matrix(heads * qk * qr, stream_of(li, 14));
            } else {
                l.mla.q_b = g.matrix(heads * qk * H, stream_of(li, 14));
            }
            l.mla.kv_a = g.matrix((r + dr) * H, stream_of(li, 15));
            l.mla.kv_a_norm = g.ones(r);
            l.mla.kv_b = g.matrix(heads * (qk - dr + dv) * r, stream_of(li, 16));
            l.o = g.matrix(H * heads * dv, stream_of(li, 4));
        } else {
            l.qkv = g.matrix((q_dim + 2 * kv_dim) * H, stream_of(li, 3));
            if (c.qkv_bias) l.qkv_bias = g.zeros(q_dim + 2 * kv_dim);
            l.o = g.matrix(H * q_dim, stream_of(li, 4));
        }
        if (c.o_bias) l.o_bias = g.zeros(H);
        if (c.qk_norm == qk_norm_kind::per_head) {
            l.q_norm = g.ones(D);
            l.k_norm = g.ones(D);
        } else if (c.qk_norm == qk_norm_kind::full) {
            l.q_norm = g.ones(q_dim);
            l.k_norm = g.ones(kv_dim);
        }
        l.moe_index = moe_index[li];
        if (l.moe_index < 0) {
            l.dense = mlp(li, 5, c.dense_intermediate_size);
            continue;
        }
        l.router = g.matrix(static_cast<size_t>(c.num_experts) * H, stream_of(li, 7));
        if (c.router_bias) {  // e_score_correction_bias: fp32 zeros
            l.router_bias = device_buffer(static_cast<size_t>(c.num_experts) * sizeof(float));
            ZMOE_CUDA_CHECK(cudaMemset(l.router_bias.as<void>(), 0, l.router_bias.bytes()));
            g.bytes += static_cast<int64_t>(l.router_bias.bytes());
        }
        const auto slots = placement.slots(static_cast<int32_t>(l.moe_index), rank);
        l.num_slots = static_cast<int32_t>(slots.size());
        const size_t I = static_cast<size_t>(c.moe_intermediate_size);
        l.experts_gate_up = device_buffer(slots.size() * 2 * I * H * 2);
        l.experts_down = device_buffer(slots.size() * H * I * 2);
        for (size_t s = 0; s < slots.size(); ++s) {
            g.fill(l.experts_gate_up.as<std::byte>() + s * 2 * I * H * 2, 2 * I * H, stream_of(li, 8, slots[s]), 0.f,
                   kStd);
            g.fill(l.experts_down.as<std::byte>() + s * H * I * 2, H * I, stream_of(li, 9, slots[s]), 0.f, kStd);
        }
        g.bytes += static_cast<int64_t>(slots.size() * 3 * I * H * 2);
        if (c.shared_expert_intermediate_size > 0) {
            l.has_shared = true;
            l.shared = mlp(li, 10, c.shared_expert_intermediate_size);
            if (c.shared_expert_gated) l.shared_gate = g.matrix(H, stream_of(li, 12));
        }
    }
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    out.bytes = g.bytes;
    return out;
}

}  // namespace zmoe::cuda
