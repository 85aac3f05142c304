// `--load-format dummy` on the device: every weight generated in place from a counter-based hash, so a model of a
// real model's dimensions loads in seconds with no checkpoint on disk.

#include <cuda_bf16.h>

#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_weight_quantize.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/fp8.hpp"

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

    /// FP8: a [rows, cols] matrix generated as matrix() would, quantized on the device into `codes` (row stride ld)
    /// and `scales` [ceil(rows / 128), ceil(cols / 128)]; the BF16 values live only in the scratch meanwhile.
    void quantized(size_t rows, size_t cols, uint64_t stream, uint8_t* codes, size_t ld, float* scales) {
        scratch_.ensure(rows * cols * 2);
        fill(scratch_.as<void>(), rows * cols, stream, 0.f, kStd);
        kernels::launch_fp8_weight_quantize({.w = scratch_.as<kernels::bf16>(),
                                             .rows = static_cast<int64_t>(rows),
                                             .cols = static_cast<int32_t>(cols),
                                             .codes = codes,
                                             .codes_ld = static_cast<int32_t>(ld),
                                             .scales = scales},
                                            nullptr);
    }
    /// Parts [part_rows[i], cols] of a row-wise stacked matrix generated from one stream (as matrix() of the whole
    /// would), each quantized with its own block grid: into one stacked cuda_fp8_matrix (block rows of the parts one
    /// after the other), or into one matrix per part.
    void stacked(const size_t (&part_rows)[3], size_t cols, uint64_t stream, std::vector<cuda_fp8_matrix>& out) {
        const size_t rows = part_rows[0] + part_rows[1] + part_rows[2];
        scratch_.ensure(rows * cols * 2);
        fill(scratch_.as<void>(), rows * cols, stream, 0.f, kStd);
        size_t row = 0, block_row = 0;
        const size_t kb = static_cast<size_t>(fp8_blocks(static_cast<int64_t>(cols)));
        for (size_t i = 0; i < 3; ++i) {
            cuda_fp8_matrix& m = out.size() == 1 ? out[0] : out[i];
            const size_t r0 = out.size() == 1 ? row : 0, b0 = out.size() == 1 ? block_row : 0;
            kernels::launch_fp8_weight_quantize({.w = scratch_.as<kernels::bf16>() + row * cols,
                                                 .rows = static_cast<int64_t>(part_rows[i]),
                                                 .cols = static_cast<int32_t>(cols),
                                                 .codes = m.codes.as<uint8_t>() + r0 * static_cast<size_t>(m.k_pad),
                                                 .codes_ld = m.k_pad,
                                                 .scales = m.scales.as<float>() + b0 * kb},
                                                nullptr);
            row += part_rows[i];
            block_row += static_cast<size_t>(fp8_blocks(static_cast<int64_t>(part_rows[i])));
        }
    }
    /// The BF16 matrix w [rows, cols] replaced by its FP8 quantization's values (launch_fp8_weight_dequantize).
    void round_trip(device_buffer& w, size_t rows, size_t cols) {
        device_buffer codes(rows * cols);
        device_buffer scales(
            static_cast<size_t>(fp8_blocks(static_cast<int64_t>(rows)) * fp8_blocks(static_cast<int64_t>(cols))) *
            sizeof(float));
        kernels::launch_fp8_weight_quantize({.w = w.as<kernels::bf16>(),
                                             .rows = static_cast<int64_t>(rows),
                                             .cols = static_cast<int32_t>(cols),
                                             .codes = codes.as<uint8_t>(),
                                             .codes_ld = static_cast<int32_t>(cols),
                                             .scales = scales.as<float>()},
                                            nullptr);
        kernels::launch_fp8_weight_dequantize({.codes = codes.as<uint8_t>(),
                                               .scales = scales.as<float>(),
                                               .rows = static_cast<int64_t>(rows),
                                               .cols = static_cast<int32_t>(cols),
                                               .w = w.as<kernels::bf16>()},
                                              nullptr);
        ZMOE_CUDA_CHECK(cudaDeviceSynchronize());  // before codes and scales are freed
    }
    /// A zeroed device buffer counted in the weights' bytes.
    device_buffer zeroed_bytes(size_t n) {
        device_buffer b(n);
        ZMOE_CUDA_CHECK(cudaMemset(b.as<void>(), 0, n));
        bytes += static_cast<int64_t>(n);
        return b;
    }
    /// One FP8 linear [rows, cols] (cuda_fp8_matrix, padded to multiples of 16).
    cuda_fp8_matrix fp8_matrix(size_t rows, size_t cols, uint64_t stream) {
        cuda_fp8_matrix m;
        m.n = static_cast<int32_t>(rows), m.k = static_cast<int32_t>(cols);
        m.n_pad = fp8_padded(m.n), m.k_pad = fp8_padded(m.k);
        m.codes = zeroed_bytes(static_cast<size_t>(m.n_pad) * m.k_pad);
        m.scales = zeroed_bytes(static_cast<size_t>(fp8_blocks(m.n) * fp8_blocks(m.k)) * sizeof(float));
        quantized(rows, cols, stream, m.codes.as<uint8_t>(), static_cast<size_t>(m.k_pad), m.scales.as<float>());
        return m;
    }
    /// A gated MLP [inter, hidden] in cuda_fp8_mlp's layout; gate_up's stream as matrix() of the stacked [2 * inter,
    /// hidden] would use, its first inter rows gate, the rest up: generated as one matrix, quantized per half.
    cuda_fp8_mlp fp8_mlp(size_t inter, size_t hidden, uint64_t gate_up_stream, uint64_t down_stream) {
        cuda_fp8_mlp m;
        const int32_t Ip = fp8_padded(static_cast<int64_t>(inter));
        const size_t grid =
            static_cast<size_t>(fp8_blocks(static_cast<int64_t>(inter)) * fp8_blocks(static_cast<int64_t>(hidden)));
        cuda_fp8_matrix& gu = m.gate_up;
        gu.n = static_cast<int32_t>(inter), gu.n_pad = Ip, gu.k = gu.k_pad = static_cast<int32_t>(hidden);
        gu.codes = zeroed_bytes(2 * static_cast<size_t>(Ip) * hidden);
        gu.scales = zeroed_bytes(2 * grid * sizeof(float));
        gated(inter, hidden, gate_up_stream, gu.codes.as<uint8_t>(), static_cast<size_t>(Ip), gu.scales.as<float>());
        cuda_fp8_matrix& dn = m.down;
        dn.n = dn.n_pad = static_cast<int32_t>(hidden), dn.k = static_cast<int32_t>(inter), dn.k_pad = Ip;
        dn.codes = zeroed_bytes(hidden * static_cast<size_t>(Ip));
        dn.scales = zeroed_bytes(grid * sizeof(float));
        quantized(hidden, inter, down_stream, dn.codes.as<uint8_t>(), static_cast<size_t>(Ip), dn.scales.as<float>());
        return m;
    }
    /// gate_up [2 * inter, hidden] generated from one stream, quantized as gate [inter, hidden] then up (each its own
    /// block grid) into codes [2 * inter_pad, hidden] and scales [2, grid].
    void gated(size_t inter, size_t hidden, uint64_t stream, uint8_t* codes, size_t inter_pad, float* scales) {
        scratch_.ensure(2 * inter * hidden * 2);
        fill(scratch_.as<void>(), 2 * inter * hidden, stream, 0.f, kStd);
        const size_t grid =
            static_cast<size_t>(fp8_blocks(static_cast<int64_t>(inter)) * fp8_blocks(static_cast<int64_t>(hidden)));
        for (size_t half = 0; half < 2; ++half)
            kernels::launch_fp8_weight_quantize({.w = scratch_.as<kernels::bf16>() + half * inter * hidden,
                                                 .rows = static_cast<int64_t>(inter),
                                                 .cols = static_cast<int32_t>(hidden),
                                                 .codes = codes + half * inter_pad * hidden,
                                                 .codes_ld = static_cast<int32_t>(hidden),
                                                 .scales = scales + half * grid},
                                                nullptr);
    }
    device_buffer ones(size_t n) { return make(n, 0, 1.f, 0.f); }
    device_buffer zeros(size_t n) { return make(n, 0, 0.f, 0.f); }
    int64_t bytes = 0;

  private:
    device_buffer scratch_;
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

void generate_bf16_experts(generator& g, cuda_layer& l, std::span<const int32_t> slots, size_t I, size_t H,
                           int64_t li) {
    l.experts_gate_up = device_buffer(slots.size() * 2 * I * H * 2);
    l.experts_down = device_buffer(slots.size() * H * I * 2);
    for (size_t s = 0; s < slots.size(); ++s) {
        g.fill(l.experts_gate_up.as<std::byte>() + s * 2 * I * H * 2, 2 * I * H, stream_of(li, 8, slots[s]), 0.f, kStd);
        g.fill(l.experts_down.as<std::byte>() + s * H * I * 2, H * I, stream_of(li, 9, slots[s]), 0.f, kStd);
    }
    g.bytes += static_cast<int64_t>(slots.size() * 3 * I * H * 2);
}

/// FP8 dummy weights quantize every linear the format covers; a modules_to_not_convert entry that exempts one of
/// this model's linears (its Hugging Face tensor name contains the entry, as model_weights reads it) would need that
/// linear in BF16: refused, naming it, rather than ignored.
void check_dummy_fp8(const model_config& c) {
    const quantization_params& q = c.quantization;
    if (c.hidden_size % 16 != 0)
        throw error(errc::unsupported,
                    "CUDA backend: FP8 needs hidden_size a multiple of 16 (got " + std::to_string(c.hidden_size) + ")");
    if (q.modules_to_not_convert.empty()) return;
    auto check = [&](const std::string& name) {
        if (q.not_converted(name))
            throw error(errc::unsupported,
                        "CUDA backend: --load-format dummy with FP8 quantizes every decoder "
                        "linear; modules_to_not_convert exempts " +
                            name + " (use a checkpoint, or drop the entry)");
    };
    const auto moe_index = c.moe_layer_indices();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const std::vector<std::string> attn =
            c.is_mla() ? std::vector<std::string>{"q_a_proj",           "q_b_proj",  "q_proj",
                                                  "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}
                       : std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"};
        for (const std::string& a : attn) check(p + "self_attn." + a + ".weight");
        const std::vector<std::string> mlp{"gate_proj", "up_proj", "down_proj"};
        if (moe_index[static_cast<size_t>(l)] < 0) {
            for (const std::string& m : mlp) check(p + "mlp." + m + ".weight");
            continue;
        }
        for (const std::string block : {"mlp.", "block_sparse_moe."})
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const std::string ep = p + block + "experts." + std::to_string(e) + ".";
                for (const std::string& m : mlp) check(ep + m + ".weight");
                for (const char* w : {"w1", "w2", "w3"}) check(ep + w + ".weight");
            }
        if (c.shared_expert_intermediate_size > 0)
            for (const std::string& m : mlp)
                check(p + (c.shared_expert_gated ? "mlp.shared_expert." : "mlp.shared_experts.") + m + ".weight");
    }
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
    const bool fp8 = c.quantization.fp8();
    if (fp8) check_dummy_fp8(c);
    out.fp8 = fp8;
    auto mlp = [&](int64_t layer, int kind, int64_t inter) {
        cuda_mlp m;
        m.inter = inter;
        if (fp8) return m;  // fp8_mlp instead
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
            // One linear [rows, cols], BF16 or FP8.
            auto linear = [&](device_buffer& bf16_dst, cuda_fp8_matrix& fp8_dst, size_t rows, size_t cols,
                              uint64_t stream) {
                if (fp8)
                    fp8_dst = g.fp8_matrix(rows, cols, stream);
                else
                    bf16_dst = g.matrix(rows * cols, stream);
            };
            if (qr > 0) {
                linear(l.mla.q_a, l.fp8.q_a, qr, H, stream_of(li, 13));
                l.mla.q_a_norm = g.ones(qr);
                linear(l.mla.q_b, l.fp8.q_b, heads * qk, qr, stream_of(li, 14));
                linear(l.mla.kv_a, l.fp8.kv_a, r + dr, H, stream_of(li, 15));
            } else if (!fp8) {
                // Stacked as cuda_weights::upload stacks them; each part's values as its own matrix would have.
                l.mla.q_kv_a = device_buffer((heads * qk + r + dr) * H * 2);
                g.fill(l.mla.q_kv_a.as<void>(), heads * qk * H, stream_of(li, 14), 0.f, kStd);
                g.fill(l.mla.q_kv_a.as<std::byte>() + heads * qk * H * 2, (r + dr) * H, stream_of(li, 15), 0.f, kStd);
                g.bytes += static_cast<int64_t>((heads * qk + r + dr) * H * 2);
            } else {
                linear(l.mla.q_b, l.fp8.q_b, heads * qk, H, stream_of(li, 14));
                linear(l.mla.kv_a, l.fp8.kv_a, r + dr, H, stream_of(li, 15));
            }
            l.mla.kv_a_norm = g.ones(r);
            // FP8: quantized, then dequantized to BF16 (as the CPU backend keeps it, in fp32, and the upload rounds).
            l.mla.kv_b = g.matrix(heads * (qk - dr + dv) * r, stream_of(li, 16));
            if (fp8) g.round_trip(l.mla.kv_b, heads * (qk - dr + dv), r);
            linear(l.o, l.fp8.o, H, heads * dv, stream_of(li, 4));
        } else if (fp8) {
            // q, k and v generated as the stacked BF16 matrix would be, quantized as three matrices (their own block
            // grids, as a checkpoint's) into one when q's and k's rows are whole blocks, else three.
            const size_t rows = q_dim + 2 * kv_dim;
            const bool stacked = q_dim % kFp8Block == 0 && kv_dim % kFp8Block == 0;
            const size_t part_rows[3] = {q_dim, kv_dim, kv_dim};
            size_t nb = 0;
            for (size_t p : part_rows) nb += static_cast<size_t>(fp8_blocks(static_cast<int64_t>(p)));
            if (stacked) {
                cuda_fp8_matrix m;
                m.n = static_cast<int32_t>(rows), m.k = m.k_pad = static_cast<int32_t>(H);
                m.n_pad = fp8_padded(m.n);
                m.codes = g.zeroed_bytes(static_cast<size_t>(m.n_pad) * H);
                m.scales = g.zeroed_bytes(nb * static_cast<size_t>(fp8_blocks(m.k)) * sizeof(float));
                l.fp8.qkv.push_back(std::move(m));
            } else {
                for (size_t p : part_rows) {
                    cuda_fp8_matrix m;
                    m.n = static_cast<int32_t>(p), m.k = m.k_pad = static_cast<int32_t>(H);
                    m.n_pad = fp8_padded(m.n);
                    m.codes = g.zeroed_bytes(static_cast<size_t>(m.n_pad) * H);
                    m.scales = g.zeroed_bytes(static_cast<size_t>(fp8_blocks(m.n) * fp8_blocks(m.k)) * sizeof(float));
                    l.fp8.qkv.push_back(std::move(m));
                }
            }
            g.stacked(part_rows, H, stream_of(li, 3), l.fp8.qkv);
            if (c.qkv_bias) l.qkv_bias = g.zeros(q_dim + 2 * kv_dim);
            l.fp8.o = g.fp8_matrix(H, q_dim, stream_of(li, 4));
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
            if (fp8)
                l.fp8.dense =
                    g.fp8_mlp(static_cast<size_t>(c.dense_intermediate_size), H, stream_of(li, 5), stream_of(li, 6));
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
        if (fp8) {
            cuda_layer_fp8& f = l.fp8;
            const size_t Ip = static_cast<size_t>(fp8_padded(c.moe_intermediate_size));
            const size_t grid = static_cast<size_t>(fp8_blocks(c.moe_intermediate_size) * fp8_blocks(c.hidden_size));
            f.inter_pad = static_cast<int32_t>(Ip);
            f.experts_gate_up = g.zeroed_bytes(slots.size() * 2 * Ip * H);
            f.experts_gate_up_scales = g.zeroed_bytes(slots.size() * 2 * grid * sizeof(float));
            f.experts_down = g.zeroed_bytes(slots.size() * H * Ip);
            f.experts_down_scales = g.zeroed_bytes(slots.size() * grid * sizeof(float));
            for (size_t s = 0; s < slots.size(); ++s) {
                g.gated(I, H, stream_of(li, 8, slots[s]), f.experts_gate_up.as<uint8_t>() + s * 2 * Ip * H, Ip,
                        f.experts_gate_up_scales.as<float>() + s * 2 * grid);
                g.quantized(H, I, stream_of(li, 9, slots[s]), f.experts_down.as<uint8_t>() + s * H * Ip, Ip,
                            f.experts_down_scales.as<float>() + s * grid);
            }
        } else {
            generate_bf16_experts(g, l, slots, I, H, li);
        }
        if (c.shared_expert_intermediate_size > 0) {
            l.has_shared = true;
            l.shared = mlp(li, 10, c.shared_expert_intermediate_size);
            if (fp8)
                l.fp8.shared = g.fp8_mlp(static_cast<size_t>(c.shared_expert_intermediate_size), H, stream_of(li, 10),
                                         stream_of(li, 11));
            if (c.shared_expert_gated) l.shared_gate = g.matrix(H, stream_of(li, 12));
        }
    }
    ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
    out.bytes = g.bytes;
    return out;
}

}  // namespace zmoe::cuda
