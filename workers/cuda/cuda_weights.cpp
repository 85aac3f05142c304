#include "workers/cuda/cuda_weights.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/dummy_weights.hpp"

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

void apply_dummy_router_skew(cuda_weights& w, const model_config& c, double skew) {
    if (!(skew >= 0) || !std::isfinite(skew))
        throw error(errc::invalid_argument, "dummy router skew " + std::to_string(skew) + " (must be >= 0)");
    if (skew == 0) return;
    const auto H = static_cast<size_t>(c.hidden_size);
    // Column 0 of a row-major [rows, H] BF16 matrix set from `col`, one strided copy.
    auto set_column0 = [&](const device_buffer& m, const std::vector<uint16_t>& col) {
        ZMOE_CUDA_CHECK(cudaMemcpy2D(m.as<void>(), H * 2, col.data(), 2, 2, col.size(), cudaMemcpyHostToDevice));
    };
    // Row 0 of each of `count` row-major [H, cols] BF16 matrices stored back to back: zeros.
    auto zero_row0 = [&](const device_buffer& m, size_t cols, size_t count) {
        if (m.empty() || count == 0) return;
        ZMOE_CUDA_CHECK(cudaMemset2D(m.as<void>(), H * cols * 2, 0, cols * 2, count));
    };
    // Column 0 of a row-major [rows, H] BF16 matrix (every row of it): zeros.
    auto zero_column0 = [&](const device_buffer& m) {
        if (m.empty()) return;
        ZMOE_CUDA_CHECK(cudaMemset2D(m.as<void>(), H * 2, 0, 2, m.bytes() / (H * 2)));
    };
    set_column0(w.embed, std::vector<uint16_t>(static_cast<size_t>(c.vocab_size), f32_to_bf16(dummy_embed_column0(c))));
    for (size_t li = 0; li < w.layers.size(); ++li) {
        cuda_layer& l = w.layers[li];
        zero_row0(l.o, l.o.bytes() / (H * 2), 1);
        zero_column0(l.qkv);
        zero_column0(l.mla.kv_a);
        zero_column0(l.mla.q_a.empty() ? l.mla.q_b : l.mla.q_a);  // q_b reads the residual only without q LoRA
        zero_column0(l.dense.gate_up);
        if (!l.dense.down.empty()) zero_row0(l.dense.down, static_cast<size_t>(l.dense.inter), 1);
        if (l.moe_index < 0) continue;
        const auto I = static_cast<size_t>(c.moe_intermediate_size);
        zero_column0(l.experts_gate_up);
        zero_row0(l.experts_down, I, static_cast<size_t>(l.num_slots));
        if (l.has_shared) {
            zero_column0(l.shared.gate_up);
            zero_column0(l.shared_gate);
            zero_row0(l.shared.down, static_cast<size_t>(l.shared.inter), 1);
        }
        std::vector<uint16_t> lean;
        for (int64_t e = 0; e < c.num_experts; ++e)
            lean.push_back(f32_to_bf16(dummy_router_column0(c, skew, static_cast<int64_t>(li), e)));
        set_column0(l.router, lean);
    }
}

}  // namespace zmoe::cuda
