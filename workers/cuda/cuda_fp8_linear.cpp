#include "workers/cuda/cuda_fp8_linear.hpp"

#include <algorithm>
#include <vector>

#include "base/check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_fp8_sm90.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

constexpr int32_t kRowAlign = 64;  // the FP8 grouped GEMM's row groups

constexpr size_t kBlasWorkspace = 32u << 20;  // as the executor's BF16 GEMMs'

/// Whether products of m rows (without SwiGLU) take the cuBLASLt path: they then compute m rounded up to 64 rows.
bool blas_rows(int32_t m) { return m >= kFp8BlasMinRows && m <= kFp8BlasMaxRows; }

int32_t round_up(int32_t v, int32_t a) { return (v + a - 1) / a * a; }
int32_t blocks128(int32_t v) { return (v + 127) / 128; }

/// The dense FP8 GEMM's parameters (c = nullptr: only the kernel's choice asked).
kernels::gemm_fp8_params dense_params(const uint8_t* a, const float* a_scales, int32_t scale_ld, const uint8_t* b,
                                      const float* b_scales, int32_t m, int32_t n, int32_t k, bf16* c) {
    return {.a = a,
            .a_scales = a_scales,
            .a_scale_ld = scale_ld,
            .w = b,
            .w_scales = b_scales,
            .c = c,
            .m = m,
            .n = n,
            .k = k};
}

/// Whether launch_gemm_fp8 takes a product without SwiGLU (then it writes rows [0, m) of c, and a row's bits do not
/// depend on m): up to kGemmFp8SkinnyMaxRows rows always (the skinny kernel), up to kGemmFp8Sm90MaxRoutedRows where
/// it routes the product to its sm_90 kernel (c's pointer aside). Else the grouped kernel takes it, writing whole
/// 64-row groups.
bool dense_kernel_takes(kernels::gemm_fp8_params p) {
    if (p.m <= kernels::kGemmFp8SkinnyMaxRows) return true;
    p.c = reinterpret_cast<bf16*>(uintptr_t(256));  // any pointer: the choice does not depend on c
    return kernels::detail::gemm_fp8_sm90_routed(p);
}

/// Rows of c a GEMM writes: m on launch_gemm_fp8's kernels, whole 64-row groups on the grouped one and cuBLASLt.
int32_t rows_written(const kernels::gemm_fp8_params& p) {
    return !blas_rows(p.m) && dense_kernel_takes(p) ? p.m : round_up(p.m, kRowAlign);
}

}  // namespace

fp8_linear_dims fp8_linear_dims_of(const cuda_weights& w, int32_t max_rows) {
    fp8_linear_dims d;
    auto see = [&](const cuda_fp8_matrix& m) {
        if (m.empty()) return;
        d.max_k = std::max(d.max_k, m.k_pad);
        d.max_n = std::max(d.max_n, m.n_pad);
        d.pads_k = d.pads_k || m.k_pad != m.k;
    };
    auto see_mlp = [&](const cuda_fp8_mlp& m) {
        if (m.empty()) return;
        see(m.down);
        d.max_k = std::max(d.max_k, m.gate_up.k_pad);
        d.max_inter = std::max(d.max_inter, m.gate_up.n_pad);
    };
    for (const cuda_layer& l : w.layers) {
        for (const cuda_fp8_matrix& m : l.fp8.qkv) see(m);
        see(l.fp8.o);
        see(l.fp8.q_a);
        see(l.fp8.q_b);
        see(l.fp8.kv_a);
        see_mlp(l.fp8.dense);
        see_mlp(l.fp8.shared);
    }
    if (d.max_n > 0 || d.max_inter > 0) {
        d.max_rows = max_rows;
        d.hidden = static_cast<int32_t>(w.final_norm.bytes() / sizeof(kernels::bf16));  // [hidden] BF16
    }
    return d;
}

fp8_linear_runner::fp8_linear_runner(const fp8_linear_dims& d) : dims_(d) {
    if (d.max_rows == 0) return;
    int device = 0;
    ZMOE_CUDA_CHECK(cudaGetDevice(&device));
    ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
    max_mp_ = round_up(d.max_rows, kRowAlign);
    scale_ld_ = kernels::fp8_scale_ld(max_mp_);
    auto alloc = [&](device_buffer& b, size_t bytes) {
        if (bytes == 0) return;
        b = device_buffer(bytes);
        // Zeroed: the GEMMs read whole 64-row groups, the rows past a call's m included; they hold finite values.
        ZMOE_CUDA_CHECK(cudaMemset(b.as<void>(), 0, bytes));
        bytes_ += static_cast<int64_t>(bytes);
    };
    const auto mp = static_cast<size_t>(max_mp_), ld = static_cast<size_t>(scale_ld_);
    const int32_t k_in = std::max(d.max_k, d.max_inter);  // the down GEMM's input is the MLP's act
    alloc(a_q_, mp * static_cast<size_t>(d.max_k));
    alloc(a_scales_, static_cast<size_t>(blocks128(k_in)) * ld * sizeof(float));
    if (d.pads_k) alloc(x_pad_, mp * static_cast<size_t>(d.max_k) * sizeof(bf16));
    alloc(in_q_, mp * static_cast<size_t>(d.hidden));
    alloc(in_scales_, static_cast<size_t>(blocks128(d.hidden)) * ld * sizeof(float));
    alloc(c_, mp * static_cast<size_t>(std::max(d.max_n, 16)) * sizeof(bf16));
    if (d.max_inter > 0) {
        alloc(act_q_, mp * static_cast<size_t>(d.max_inter));
        alloc(act_scales_, static_cast<size_t>(blocks128(d.max_inter)) * ld * sizeof(float));
    }
    if (blas_rows(std::min(d.max_rows, kFp8BlasMaxRows))) {
        cublasLtHandle_t h = nullptr;
        ZMOE_CUBLAS_CHECK(cublasLtCreate(&h));
        blas_.reset(h);
        blas_workspace_ = device_buffer(kBlasWorkspace);
        bytes_ += static_cast<int64_t>(kBlasWorkspace);
    }
    std::vector<int32_t> offsets;
    for (int32_t i = 0; i <= max_mp_ / kRowAlign; ++i) {
        offsets.push_back(0);
        offsets.push_back(i * kRowAlign);
    }
    alloc(offsets_, offsets.size() * sizeof(int32_t));
    ZMOE_CUDA_CHECK(
        cudaMemcpy(offsets_.as<void>(), offsets.data(), offsets.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
}

void fp8_linear_runner::blas_deleter::operator()(cublasLtHandle_t h) const { cublasLtDestroy(h); }

bool fp8_linear_runner::blas_layout(int32_t m) const { return blas_rows(m) && blas_ != nullptr; }

int32_t fp8_linear_runner::scale_ld(int32_t m) const { return blas_layout(m) ? round_up(m, kRowAlign) : scale_ld_; }

kernels::gemm_fp8_blas_params fp8_linear_runner::blas_params(const uint8_t* a, const float* a_scales, const uint8_t* b,
                                                             const float* b_scales, int32_t m, int32_t n, int32_t k,
                                                             bf16* c) const {
    return {.handle = blas_.get(),
            .workspace = blas_workspace_.as<void>(),
            .workspace_bytes = blas_workspace_.bytes(),
            .a = a,
            .a_scales = a_scales,
            .w = b,
            .w_scales = b_scales,
            .c = c,
            .m = round_up(m, kRowAlign),
            .n = n,
            .k = k};
}

bool fp8_linear_runner::uses_cublaslt(const cuda_fp8_matrix& w, int32_t m) const {
    return blas_layout(m) && kernels::gemm_fp8_blas_supported(blas_params(a_q_.as<uint8_t>(), a_scales_.as<float>(),
                                                                          w.codes.as<uint8_t>(), w.scales.as<float>(),
                                                                          m, w.n_pad, w.k_pad, c_.as<bf16>()));
}

void fp8_linear_runner::quantize(const bf16* x, int32_t m, int32_t k, int32_t k_pad, cudaStream_t stream) const {
    const bf16* src = x;
    if (k_pad != k) {
        // The input into a zero-padded copy: zero columns change neither a group's amax nor a product.
        bf16* pad = x_pad_.as<bf16>();
        const size_t pitch = static_cast<size_t>(k_pad) * sizeof(bf16);
        ZMOE_CUDA_CHECK(cudaMemcpy2DAsync(pad, pitch, x, static_cast<size_t>(k) * sizeof(bf16),
                                          static_cast<size_t>(k) * sizeof(bf16), static_cast<size_t>(m),
                                          cudaMemcpyDeviceToDevice, stream));
        ZMOE_CUDA_CHECK(cudaMemset2DAsync(pad + k, pitch, 0, static_cast<size_t>(k_pad - k) * sizeof(bf16),
                                          static_cast<size_t>(m), stream));
        src = pad;
    }
    kernels::launch_fp8_quantize({.x = src,
                                  .q = a_q_.as<uint8_t>(),
                                  .scales = a_scales_.as<float>(),
                                  .num_tokens = m,
                                  .cols = k_pad,
                                  .scale_ld = scale_ld(m)},
                                 stream);
}

void fp8_linear_runner::gemm(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales,
                             int32_t m, int32_t n, int32_t k, bf16* c, uint8_t* c_q, float* c_scales, bool swiglu,
                             cudaStream_t stream) const {
    const int32_t ld = scale_ld(m);
    const int32_t mp = round_up(m, kRowAlign);
    if (!swiglu && blas_layout(m)) {
        // 129-512 rows: cuBLASLt's block-scaled FP8 over the mp rows the grouped kernel would write (the scales'
        // leading dimension is its row count: ld == mp; rows m.. hold finite stale codes).
        const kernels::gemm_fp8_blas_params bp = blas_params(a, a_scales, b, b_scales, m, n, k, c);
        if (kernels::gemm_fp8_blas_supported(bp)) {
            kernels::launch_gemm_fp8_blas(bp, stream);
            return;
        }
    }
    const kernels::gemm_fp8_params dense = dense_params(a, a_scales, ld, b, b_scales, m, n, k, c);
    if (!swiglu && !blas_rows(m) && dense_kernel_takes(dense)) {
        // Decode steps: launch_gemm_fp8 (rows [0, m) of c only; a row's bits do not depend on m up to 64 rows on the
        // skinny kernel, up to 128 on sm_90's wgmma kernel).
        kernels::launch_gemm_fp8(dense, stream);
        return;
    }
    // The grouped kernel picks its wide tiles (128 rows x 256 columns) from 191 rows. With one group they leave most
    // SMs idle until the rows are many: narrow tiles (128 x 128 there) while the wide ones would not fill the GPU
    // once (H100, gemm_fp8_bench at 256 rows: Qwen3-30B-A3B's q/k/v 12.0 against 17.6 us, o 17.9 against 28.7).
    const int64_t wide_tiles = int64_t(mp + 127) / 128 * ((n + 255) / 256);
    const kernels::fp8_gemm_tiles tiles =
        !swiglu && wide_tiles < num_sms_ ? kernels::fp8_gemm_tiles::narrow : kernels::fp8_gemm_tiles::automatic;
    const kernels::grouped_gemm_fp8_params p{.a = a,
                                             .a_scales = a_scales,
                                             .a_scale_ld = ld,
                                             .b = b,
                                             .b_scales = b_scales,
                                             .expert_offsets = offsets_.as<int32_t>() + 2 * (mp / kRowAlign),
                                             .c = c,
                                             .c_q = c_q,
                                             .c_scales = c_scales,
                                             .c_scale_ld = ld,
                                             .max_rows = mp,
                                             .n = n,
                                             .k = k,
                                             .num_experts = 1,
                                             .row_align = kRowAlign,
                                             .swiglu = swiglu,
                                             .tiles = tiles};
    kernels::launch_grouped_gemm_fp8(p, stream);
}

void fp8_linear_runner::linear(const cuda_fp8_matrix& w, const bf16* x, int32_t m, bf16* y, int32_t ldy, int32_t y_rows,
                               cudaStream_t stream) const {
    if (m == 0) return;
    ZMOE_CHECK(!empty() && m <= dims_.max_rows && w.k_pad <= dims_.max_k && w.n_pad <= dims_.max_n,
               "fp8_linear: a call beyond the scratch (" << m << " rows, " << w.n_pad << " x " << w.k_pad << ")");
    quantize(x, m, w.k, w.k_pad, stream);
    linear_from(w, a_q_.as<uint8_t>(), a_scales_.as<float>(), m, y, ldy, y_rows, stream);
}

void fp8_linear_runner::rms_norm(const bf16* x, bf16* residual, const bf16* weight, bf16* out, int32_t m, float eps,
                                 cudaStream_t stream) const {
    ZMOE_CHECK(!empty() && m <= dims_.max_rows, "fp8_linear: a norm of " << m << " rows beyond the scratch");
    kernels::launch_rms_norm_fp8({.x = x,
                                  .residual = residual,
                                  .weight = weight,
                                  .out = out,
                                  .q = in_q_.as<uint8_t>(),
                                  .scales = in_scales_.as<float>(),
                                  .scale_ld = scale_ld(m),
                                  .num_tokens = m,
                                  .hidden = dims_.hidden,
                                  .eps = eps},
                                 stream);
}

void fp8_linear_runner::linear_normed(const cuda_fp8_matrix& w, int32_t m, bf16* y, int32_t ldy, int32_t y_rows,
                                      cudaStream_t stream) const {
    if (m == 0) return;
    ZMOE_CHECK(!empty() && m <= dims_.max_rows && w.k == dims_.hidden && w.k_pad == w.k && w.n_pad <= dims_.max_n,
               "fp8_linear: a projection of the normed input (" << m << " rows, " << w.n_pad << " x " << w.k_pad
                                                                << ") beyond the scratch or not of the hidden width");
    linear_from(w, in_q_.as<uint8_t>(), in_scales_.as<float>(), m, y, ldy, y_rows, stream);
}

void fp8_linear_runner::linear_from(const cuda_fp8_matrix& w, const uint8_t* a, const float* a_scales, int32_t m,
                                    bf16* y, int32_t ldy, int32_t y_rows, cudaStream_t stream) const {
    const bool in_place =
        ldy == w.n_pad && y_rows >= rows_written(dense_params(a, a_scales, scale_ld(m), w.codes.as<uint8_t>(),
                                                              w.scales.as<float>(), m, w.n_pad, w.k_pad, nullptr));
    bf16* c = in_place ? y : c_.as<bf16>();
    gemm(a, a_scales, w.codes.as<uint8_t>(), w.scales.as<float>(), m, w.n_pad, w.k_pad, c, nullptr, nullptr, false,
         stream);
    if (!in_place)
        ZMOE_CUDA_CHECK(cudaMemcpy2DAsync(
            y, static_cast<size_t>(ldy) * sizeof(bf16), c, static_cast<size_t>(w.n_pad) * sizeof(bf16),
            static_cast<size_t>(w.n) * sizeof(bf16), static_cast<size_t>(m), cudaMemcpyDeviceToDevice, stream));
}

void fp8_linear_runner::mlp(const cuda_fp8_mlp& w, const bf16* x, int32_t m, bf16* out, int32_t out_rows,
                            cudaStream_t stream) const {
    if (m == 0) return;
    ZMOE_CHECK(!empty() && m <= dims_.max_rows && w.gate_up.n_pad <= dims_.max_inter,
               "fp8_linear: an MLP call beyond the scratch");
    quantize(x, m, w.gate_up.k, w.gate_up.k_pad, stream);
    gemm(a_q_.as<uint8_t>(), a_scales_.as<float>(), w.gate_up.codes.as<uint8_t>(), w.gate_up.scales.as<float>(), m,
         w.gate_up.n_pad, w.gate_up.k_pad, nullptr, act_q_.as<uint8_t>(), act_scales_.as<float>(), true, stream);
    const cuda_fp8_matrix& d = w.down;
    const bool in_place = out_rows >= rows_written(dense_params(act_q_.as<uint8_t>(), act_scales_.as<float>(),
                                                                scale_ld(m), d.codes.as<uint8_t>(),
                                                                d.scales.as<float>(), m, d.n_pad, d.k_pad, nullptr)) &&
                          d.n == d.n_pad;
    bf16* c = in_place ? out : c_.as<bf16>();
    gemm(act_q_.as<uint8_t>(), act_scales_.as<float>(), d.codes.as<uint8_t>(), d.scales.as<float>(), m, d.n_pad,
         d.k_pad, c, nullptr, nullptr, false, stream);
    if (!in_place)
        ZMOE_CUDA_CHECK(
            cudaMemcpyAsync(out, c, static_cast<size_t>(m) * d.n * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace zmoe::cuda
