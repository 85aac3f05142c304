#include "workers/cuda/cuda_weights.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/dummy_weights.hpp"
#include "workers/fp8.hpp"

namespace zmoe::cuda {
namespace {

constexpr size_t kBf16 = 2;

bool is_fp8(const matrix_view& m) { return !m.empty() && m.type == dtype::f8_e4m3; }

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
    out.inter = m.gate.rows;
    if (is_fp8(m.gate) || is_fp8(m.up) || is_fp8(m.down)) return out;  // the FP8 copy (fp8_mlp) instead
    out.gate_up = stack({&m.gate, &m.up}, bytes);
    out.down = stack({&m.down}, bytes);
    return out;
}

device_buffer zeroed(size_t bytes, int64_t& total) {
    device_buffer b(bytes);
    ZMOE_CUDA_CHECK(cudaMemset(b.as<void>(), 0, bytes));
    total += static_cast<int64_t>(bytes);
    return b;
}

/// Copies the FP8 view `m` into device codes (row stride `ld`) and its block scales [fp8_blocks(rows),
/// fp8_blocks(cols)] into `scales`.
void put_fp8(const matrix_view& m, const std::string& what, uint8_t* codes, int64_t ld, float* scales) {
    if (m.scale_row0 % kFp8Block != 0)
        throw error(errc::unsupported, "CUDA backend: FP8 " + what +
                                           " is a slice of a block-quantized matrix that "
                                           "starts inside a 128-row block (row " +
                                           std::to_string(m.scale_row0) +
                                           "); the FP8 GEMMs take one scale per 128 rows of each weight");
    if (m.rows > 0 && m.cols > 0)
        ZMOE_CUDA_CHECK(cudaMemcpy2D(codes, static_cast<size_t>(ld), m.data, static_cast<size_t>(m.cols),
                                     static_cast<size_t>(m.cols), static_cast<size_t>(m.rows), cudaMemcpyHostToDevice));
    const int64_t nb = fp8_blocks(m.rows), kb = fp8_blocks(m.cols);
    ZMOE_CUDA_CHECK(cudaMemcpy(scales, m.scale + (m.scale_row0 / kFp8Block) * kb,
                               static_cast<size_t>(nb * kb) * sizeof(float), cudaMemcpyHostToDevice));
}

int64_t scale_count(int64_t n, int64_t k) { return fp8_blocks(n) * fp8_blocks(k); }

/// Several FP8 views [rows_i, k] stacked row-wise into one matrix (every part but the last a multiple of 128 rows).
cuda_fp8_matrix fp8_stack(std::initializer_list<const matrix_view*> parts, const std::string& what, int64_t& bytes) {
    cuda_fp8_matrix out;
    int64_t n = 0, nb = 0;
    const int64_t k = (*parts.begin())->cols;
    for (const matrix_view* m : parts) {
        n += m->rows;
        nb += fp8_blocks(m->rows);
    }
    out.n = static_cast<int32_t>(n);
    out.k = static_cast<int32_t>(k);
    out.n_pad = fp8_padded(n);
    out.k_pad = fp8_padded(k);
    out.codes = zeroed(static_cast<size_t>(out.n_pad) * out.k_pad, bytes);
    out.scales = zeroed(static_cast<size_t>(nb * fp8_blocks(k)) * sizeof(float), bytes);
    int64_t row = 0, block_row = 0;
    for (const matrix_view* m : parts) {
        put_fp8(*m, what, out.codes.as<uint8_t>() + row * out.k_pad, out.k_pad,
                out.scales.as<float>() + block_row * fp8_blocks(k));
        row += m->rows;
        block_row += fp8_blocks(m->rows);
    }
    return out;
}

/// gate/up/down of an FP8 MLP as cuda_fp8_mlp lays them out.
cuda_fp8_mlp fp8_mlp(const mlp_weights& m, const std::string& what, int64_t& bytes) {
    if (!is_fp8(m.gate) || !is_fp8(m.up) || !is_fp8(m.down))
        throw error(errc::unsupported,
                    "CUDA backend: " + what + " mixes FP8 and unquantized projections (gate, up and down must agree)");
    const int64_t I = m.gate.rows, H = m.gate.cols;
    if (H % 16 != 0)
        throw error(errc::unsupported,
                    "CUDA backend: FP8 MLPs need hidden_size a multiple of 16 (got " + std::to_string(H) + ")");
    cuda_fp8_mlp out;
    const int32_t Ip = fp8_padded(I);
    cuda_fp8_matrix& gu = out.gate_up;
    gu.n = static_cast<int32_t>(I), gu.n_pad = Ip, gu.k = gu.k_pad = static_cast<int32_t>(H);
    gu.codes = zeroed(static_cast<size_t>(2 * Ip * H), bytes);
    gu.scales = zeroed(static_cast<size_t>(2 * scale_count(I, H)) * sizeof(float), bytes);
    put_fp8(m.gate, what + " gate", gu.codes.as<uint8_t>(), H, gu.scales.as<float>());
    put_fp8(m.up, what + " up", gu.codes.as<uint8_t>() + Ip * H, H, gu.scales.as<float>() + scale_count(I, H));
    cuda_fp8_matrix& dn = out.down;
    dn.n = dn.n_pad = static_cast<int32_t>(H), dn.k = static_cast<int32_t>(I), dn.k_pad = Ip;
    dn.codes = zeroed(static_cast<size_t>(H * Ip), bytes);
    dn.scales = zeroed(static_cast<size_t>(scale_count(H, I)) * sizeof(float), bytes);
    put_fp8(m.down, what + " down", dn.codes.as<uint8_t>(), Ip, dn.scales.as<float>());
    return out;
}

}  // namespace

int64_t expert_bytes(const model_config& c) {
    const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
    if (!c.quantization.fp8()) return 3 * I * H * static_cast<int64_t>(kBf16);
    const int64_t Ip = fp8_padded(I);
    return 3 * Ip * H + 3 * scale_count(I, H) * static_cast<int64_t>(sizeof(float));
}

std::vector<expert_part> expert_parts(const cuda_layer& l, const model_config& c) {
    const size_t H = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.moe_intermediate_size);
    if (!l.fp8_experts())
        return {{l.experts_gate_up.as<std::byte>(), 2 * I * H * kBf16},
                {l.experts_down.as<std::byte>(), I * H * kBf16}};
    const size_t Ip = static_cast<size_t>(l.fp8.inter_pad);
    const size_t grid = static_cast<size_t>(scale_count(c.moe_intermediate_size, c.hidden_size)) * sizeof(float);
    return {{l.fp8.experts_gate_up.as<std::byte>(), 2 * Ip * H},
            {l.fp8.experts_gate_up_scales.as<std::byte>(), 2 * grid},
            {l.fp8.experts_down.as<std::byte>(), H * Ip},
            {l.fp8.experts_down_scales.as<std::byte>(), grid}};
}

namespace {

void upload_bf16_experts(const moe_weights& m, const model_config& c, cuda_layer& l, int64_t& bytes) {
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
}

/// The routed experts in moe_fp8_experts' layout, the FFN width zero-padded to inter_pad.
void upload_fp8_experts(const moe_weights& m, const model_config& c, const std::string& at, cuda_layer& l,
                        int64_t& bytes) {
    const int64_t H = c.hidden_size, I = c.moe_intermediate_size, Ip = fp8_padded(I);
    const auto S = static_cast<int64_t>(m.experts.size());
    const int64_t grid = scale_count(I, H);
    cuda_layer_fp8& f = l.fp8;
    f.inter_pad = static_cast<int32_t>(Ip);
    f.experts_gate_up = zeroed(static_cast<size_t>(S * 2 * Ip * H), bytes);
    f.experts_gate_up_scales = zeroed(static_cast<size_t>(S * 2 * grid) * sizeof(float), bytes);
    f.experts_down = zeroed(static_cast<size_t>(S * H * Ip), bytes);
    f.experts_down_scales = zeroed(static_cast<size_t>(S * grid) * sizeof(float), bytes);
    for (int64_t s = 0; s < S; ++s) {
        const mlp_weights& e = m.experts[static_cast<size_t>(s)];
        const std::string what = at + "expert slot " + std::to_string(s);
        if (!is_fp8(e.gate) || !is_fp8(e.up) || !is_fp8(e.down))
            throw error(errc::unsupported, "CUDA backend: " + what + " is not FP8 while the layer's first expert is");
        uint8_t* gu = f.experts_gate_up.as<uint8_t>() + s * 2 * Ip * H;
        float* gu_scales = f.experts_gate_up_scales.as<float>() + s * 2 * grid;
        put_fp8(e.gate, what + " gate", gu, H, gu_scales);
        put_fp8(e.up, what + " up", gu + Ip * H, H, gu_scales + grid);
        put_fp8(e.down, what + " down", f.experts_down.as<uint8_t>() + s * H * Ip, Ip,
                f.experts_down_scales.as<float>() + s * grid);
    }
}

}  // namespace

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
        const std::string at = "layer " + std::to_string(&lw - w.layers().data()) + " ";
        // One linear: BF16 into `bf16_dst`, or FP8 into `fp8_dst`.
        auto linear = [&](const matrix_view& m, device_buffer& bf16_dst, cuda_fp8_matrix& fp8_dst,
                          const std::string& what) {
            if (is_fp8(m)) {
                fp8_dst = fp8_stack({&m}, at + what, bytes);
                out.fp8 = true;
            } else {
                bf16_dst = stack({&m}, bytes);
            }
        };
        if (c.is_mla()) {
            const mla_weights& m = a.mla;
            if (!m.q_a.empty()) {
                linear(m.q_a, l.mla.q_a, l.fp8.q_a, "q_a_proj");
                l.mla.q_a_norm = vec(m.q_a_norm, bytes);
                linear(m.q_b, l.mla.q_b, l.fp8.q_b, "q_b_proj");
                linear(m.kv_a, l.mla.kv_a, l.fp8.kv_a, "kv_a_proj_with_mqa");
            } else if (!is_fp8(a.q) && !is_fp8(m.kv_a)) {
                l.mla.q_kv_a = stack({&a.q, &m.kv_a}, bytes);  // one GEMV for both at a decode token
            } else {
                linear(a.q, l.mla.q_b, l.fp8.q_b, "q_proj");
                linear(m.kv_a, l.mla.kv_a, l.fp8.kv_a, "kv_a_proj_with_mqa");
            }
            l.mla.kv_a_norm = vec(m.kv_a_norm, bytes);
            // Widened from the checkpoint's BF16 on load (exact), or dequantized from FP8 in fp32 (as the CPU
            // backend keeps it) and rounded to BF16 here: the attention absorbs it, its input is never quantized.
            l.mla.kv_b = vec(m.kv_b, bytes);
        } else if (is_fp8(a.q) || is_fp8(a.k) || is_fp8(a.v)) {
            if (!is_fp8(a.q) || !is_fp8(a.k) || !is_fp8(a.v))
                throw error(errc::unsupported,
                            "CUDA backend: " + at + "mixes FP8 and unquantized q/k/v projections (they must agree)");
            out.fp8 = true;
            if (a.q.rows % kFp8Block == 0 && a.k.rows % kFp8Block == 0) {
                l.fp8.qkv.push_back(fp8_stack({&a.q, &a.k, &a.v}, at + "qkv", bytes));
            } else {
                l.fp8.qkv.push_back(fp8_stack({&a.q}, at + "q_proj", bytes));
                l.fp8.qkv.push_back(fp8_stack({&a.k}, at + "k_proj", bytes));
                l.fp8.qkv.push_back(fp8_stack({&a.v}, at + "v_proj", bytes));
            }
        } else {
            l.qkv = stack({&a.q, &a.k, &a.v}, bytes);
        }
        if (!a.q_bias.empty()) {
            std::vector<float> b = a.q_bias;
            b.insert(b.end(), a.k_bias.begin(), a.k_bias.end());
            b.insert(b.end(), a.v_bias.begin(), a.v_bias.end());
            l.qkv_bias = vec(b, bytes);
        }
        linear(a.o, l.o, l.fp8.o, "o_proj");
        l.o_bias = vec(a.o_bias, bytes);
        l.q_norm = vec(a.q_norm, bytes);
        l.k_norm = vec(a.k_norm, bytes);
        l.moe_index = lw.moe_index;
        auto any_mlp = [&](const mlp_weights& m, cuda_mlp& bf16_dst, cuda_fp8_mlp& fp8_dst, const std::string& what) {
            bf16_dst = mlp(m, bytes);
            if (bf16_dst.gate_up.empty()) {
                fp8_dst = fp8_mlp(m, at + what, bytes);
                out.fp8 = true;
            }
        };
        if (lw.moe_index < 0) {
            any_mlp(lw.dense, l.dense, l.fp8.dense, "mlp");
            continue;
        }
        const moe_weights& m = lw.moe;
        l.router = stack({&m.router}, bytes);
        l.router_bias = vec_f32(m.router_bias, bytes);
        l.num_slots = static_cast<int32_t>(m.experts.size());
        if (!m.experts.empty() && is_fp8(m.experts[0].gate)) {
            upload_fp8_experts(m, c, at, l, bytes);
            out.fp8 = true;
        } else {
            upload_bf16_experts(m, c, l, bytes);
        }
        if (m.has_shared) {
            l.has_shared = true;
            any_mlp(m.shared, l.shared, l.fp8.shared, "shared expert");
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
    // FP8 linears: the codes of the same column / row set to zero (code 0 is +0; the block scales stay).
    auto zero_column0_fp8 = [&](const cuda_fp8_matrix& m, size_t rows) {
        if (m.empty()) return;
        ZMOE_CUDA_CHECK(cudaMemset2D(m.codes.as<void>(), static_cast<size_t>(m.k_pad), 0, 1, rows));
    };
    auto zero_row0_fp8 = [&](const cuda_fp8_matrix& m) {
        if (!m.empty()) ZMOE_CUDA_CHECK(cudaMemset(m.codes.as<void>(), 0, static_cast<size_t>(m.k_pad)));
    };
    set_column0(w.embed, std::vector<uint16_t>(static_cast<size_t>(c.vocab_size), f32_to_bf16(dummy_embed_column0(c))));
    for (size_t li = 0; li < w.layers.size(); ++li) {
        cuda_layer& l = w.layers[li];
        zero_row0(l.o, l.o.bytes() / (H * 2), 1);
        zero_column0(l.qkv);
        zero_column0(l.mla.kv_a);
        zero_column0(l.mla.q_kv_a);
        // q_b reads the residual only without q LoRA (BF16 or FP8)
        zero_column0(l.mla.q_a.empty() && l.fp8.q_a.empty() ? l.mla.q_b : l.mla.q_a);
        zero_column0(l.dense.gate_up);
        if (!l.dense.down.empty()) zero_row0(l.dense.down, static_cast<size_t>(l.dense.inter), 1);
        const cuda_layer_fp8& f = l.fp8;
        for (const cuda_fp8_matrix& m : f.qkv) zero_column0_fp8(m, static_cast<size_t>(m.n_pad));
        zero_row0_fp8(f.o);
        zero_column0_fp8(f.kv_a, static_cast<size_t>(f.kv_a.n_pad));
        zero_column0_fp8(f.q_a.empty() ? f.q_b : f.q_a, static_cast<size_t>((f.q_a.empty() ? f.q_b : f.q_a).n_pad));
        auto fp8_mlp_skew = [&](const cuda_fp8_mlp& m) {
            if (m.empty()) return;
            zero_column0_fp8(m.gate_up, 2 * static_cast<size_t>(m.gate_up.n_pad));
            zero_row0_fp8(m.down);
        };
        fp8_mlp_skew(f.dense);
        if (l.moe_index < 0) continue;
        const auto I = static_cast<size_t>(c.moe_intermediate_size);
        zero_column0(l.experts_gate_up);
        zero_row0(l.experts_down, I, static_cast<size_t>(l.num_slots));
        if (l.fp8_experts()) {
            const size_t Ip = static_cast<size_t>(f.inter_pad), slots = static_cast<size_t>(l.num_slots);
            ZMOE_CUDA_CHECK(cudaMemset2D(f.experts_gate_up.as<void>(), H, 0, 1, 2 * Ip * slots));
            ZMOE_CUDA_CHECK(cudaMemset2D(f.experts_down.as<void>(), H * Ip, 0, Ip, slots));
        }
        if (l.has_shared) {
            zero_column0(l.shared.gate_up);
            zero_column0(l.shared_gate);
            if (!l.shared.down.empty()) zero_row0(l.shared.down, static_cast<size_t>(l.shared.inter), 1);
            fp8_mlp_skew(f.shared);
        }
        std::vector<uint16_t> lean;
        for (int64_t e = 0; e < c.num_experts; ++e)
            lean.push_back(f32_to_bf16(dummy_router_column0(c, skew, static_cast<int64_t>(li), e)));
        set_column0(l.router, lean);
    }
}

}  // namespace zmoe::cuda
