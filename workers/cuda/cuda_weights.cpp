#include "workers/cuda/cuda_weights.hpp"

#include <cuda_bf16.h>

#include <cstring>

#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {
namespace {

constexpr size_t kBf16 = 2;

size_t matrix_elems(const matrix_view& m) { return static_cast<size_t>(m.rows * m.cols); }

/// Copies `m` into device memory at `dst` as BF16.
void put_matrix(const matrix_view& m, std::byte* dst) {
    const size_t n = matrix_elems(m);
    if (m.type == dtype::bf16) {
        ZMOE_CUDA_CHECK(cudaMemcpy(dst, m.data, n * kBf16, cudaMemcpyHostToDevice));
        return;
    }
    std::vector<uint16_t> bits(n);
    std::vector<float> row(static_cast<size_t>(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        m.row_to_f32(r, row.data());
        for (int64_t c = 0; c < m.cols; ++c) bits[static_cast<size_t>(r * m.cols + c)] = f32_to_bf16(row[c]);
    }
    ZMOE_CUDA_CHECK(cudaMemcpy(dst, bits.data(), n * kBf16, cudaMemcpyHostToDevice));
}

/// Several matrices stacked row-wise into one device buffer.
device_buffer stack(std::initializer_list<const matrix_view*> parts, int64_t& bytes) {
    size_t n = 0;
    for (const matrix_view* m : parts) n += matrix_elems(*m);
    device_buffer b(n * kBf16);
    std::byte* at = b.as<std::byte>();
    for (const matrix_view* m : parts) {
        put_matrix(*m, at);
        at += matrix_elems(*m) * kBf16;
    }
    bytes += static_cast<int64_t>(n * kBf16);
    return b;
}

device_buffer vec(const std::vector<float>& v, int64_t& bytes) {
    if (v.empty()) return {};
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);  // the checkpoint's BF16 values, exactly
    device_buffer b(bits.size() * kBf16);
    ZMOE_CUDA_CHECK(cudaMemcpy(b.as<void>(), bits.data(), bits.size() * kBf16, cudaMemcpyHostToDevice));
    bytes += static_cast<int64_t>(bits.size() * kBf16);
    return b;
}

device_buffer vec_f32(const std::vector<float>& v, int64_t& bytes) {
    if (v.empty()) return {};
    device_buffer b(v.size() * sizeof(float));
    ZMOE_CUDA_CHECK(cudaMemcpy(b.as<void>(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    bytes += static_cast<int64_t>(v.size() * sizeof(float));
    return b;
}

cuda_mlp mlp(const mlp_weights& m, int64_t& bytes) {
    cuda_mlp out;
    out.gate_up = stack({&m.gate, &m.up}, bytes);
    out.down = stack({&m.down}, bytes);
    out.inter = m.gate.rows;
    return out;
}

}  // namespace

int64_t expert_bytes(const model_config& c) {
    return 3 * c.moe_intermediate_size * c.hidden_size * static_cast<int64_t>(kBf16);
}

cuda_weights cuda_weights::upload(const model_weights& w) {
    const model_config& c = w.config();
    cuda_weights out;
    int64_t& bytes = out.bytes;
    out.embed = stack({&w.embed()}, bytes);
    if (w.lm_head().data != w.embed().data) out.lm_head = stack({&w.lm_head()}, bytes);
    out.final_norm = vec(w.final_norm(), bytes);
    for (const layer_weights& lw : w.layers()) {
        cuda_layer& l = out.layers.emplace_back();
        l.input_norm = vec(lw.input_norm, bytes);
        l.post_norm = vec(lw.post_norm, bytes);
        const attention_weights& a = lw.attn;
        if (c.is_mla()) {
            const mla_weights& m = a.mla;
            if (!m.q_a.empty()) {
                l.mla.q_a = stack({&m.q_a}, bytes);
                l.mla.q_a_norm = vec(m.q_a_norm, bytes);
                l.mla.q_b = stack({&m.q_b}, bytes);
            } else {
                l.mla.q_b = stack({&a.q}, bytes);
            }
            l.mla.kv_a = stack({&m.kv_a}, bytes);
            l.mla.kv_a_norm = vec(m.kv_a_norm, bytes);
            l.mla.kv_b = vec(m.kv_b, bytes);  // widened from the checkpoint's BF16 on load: exact
        } else {
            l.qkv = stack({&a.q, &a.k, &a.v}, bytes);
        }
        if (!a.q_bias.empty()) {
            std::vector<float> b = a.q_bias;
            b.insert(b.end(), a.k_bias.begin(), a.k_bias.end());
            b.insert(b.end(), a.v_bias.begin(), a.v_bias.end());
            l.qkv_bias = vec(b, bytes);
        }
        l.o = stack({&a.o}, bytes);
        l.o_bias = vec(a.o_bias, bytes);
        l.q_norm = vec(a.q_norm, bytes);
        l.k_norm = vec(a.k_norm, bytes);
        l.moe_index = lw.moe_index;
        if (lw.moe_index < 0) {
            l.dense = mlp(lw.dense, bytes);
            continue;
        }
        const moe_weights& m = lw.moe;
        l.router = stack({&m.router}, bytes);
        l.router_bias = vec_f32(m.router_bias, bytes);
        l.num_slots = static_cast<int32_t>(m.experts.size());
        const size_t gu = static_cast<size_t>(2 * c.moe_intermediate_size * c.hidden_size) * kBf16;
        const size_t dn = gu / 2;
        l.experts_gate_up = device_buffer(gu * m.experts.size());
        l.experts_down = device_buffer(dn * m.experts.size());
        for (size_t s = 0; s < m.experts.size(); ++s) {
            put_matrix(m.experts[s].gate, l.experts_gate_up.as<std::byte>() + s * gu);
            put_matrix(m.experts[s].up, l.experts_gate_up.as<std::byte>() + s * gu + gu / 2);
            put_matrix(m.experts[s].down, l.experts_down.as<std::byte>() + s * dn);
        }
        bytes += static_cast<int64_t>((gu + dn) * m.experts.size());
        if (m.has_shared) {
            l.has_shared = true;
            l.shared = mlp(m.shared, bytes);
            if (!m.shared_gate.empty()) l.shared_gate = stack({&m.shared_gate}, bytes);
        }
    }
    return out;
}

}  // namespace zmoe::cuda
