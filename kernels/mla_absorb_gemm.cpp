// MLA's per-head projections through kv_b as strided-batched cuBLASLt GEMMs, one batch entry per head. In cuBLAS's
// column-major terms, with r = kv_lora_rank, dn / dr / dv the nope / rope / v head dims, T tokens (N expanded rows)
// and W_h kv_b's rows of head h (W_k,h its first dn rows, W_v,h the next dv, each row r wide):
//   q_absorb: q_lat_h^T (r x T, ld heads r) = W_k,h (r x dn, ld r: its rows read as columns)
//             . q_nope_h^T (dn x T, ld heads (dn + dr));
//   v_up:     out_h^T (dv x T, ld heads dv) = W_v,h^T (W_v,h: r x dv, ld r, op T) . o_lat_h^T (r x T, ld heads r);
//   expand:   K_h^T (dn x N, ld heads (dn + dr)) = W_k,h^T . latent^T (r x N, ld r, the same for every head) and
//             V_h^T (dv x N, ld heads dv) = W_v,h^T . latent^T.
// Batch strides: (dn + dv) r for the weights, the head's width for the activations, 0 for the shared latents. Plans
// (layouts and the heuristic's algorithm) are cached per shape, as gemm_bf16.cpp's.

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda_check.hpp"
#include "kernels/mla_gemm.hpp"

namespace zmoe::kernels {
namespace {

/// One column-major operand of a batched GEMM: rows x cols, leading dimension ld, entries `stride` elements apart.
struct operand {
    int64_t rows = 0, cols = 0, ld = 0, stride = 0;
    auto key() const { return std::make_tuple(rows, cols, ld, stride); }
};

/// C = op(A) . B over `batch` entries, BF16 in and out, fp32 accumulation.
struct batched_shape {
    bool transpose_a = false;
    operand a, b, c;
    int32_t batch = 0;
    auto key() const { return std::make_tuple(transpose_a, a.key(), b.key(), c.key(), batch); }
};

struct batched_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t layout(const operand& o, int32_t batch) {
    cublasLtMatrixLayout_t l = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, uint64_t(o.rows), uint64_t(o.cols), o.ld));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    ZMOE_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.stride, sizeof(o.stride)));
    return l;
}

const batched_plan& plan_for(cublasLtHandle_t handle, size_t workspace_bytes, const batched_shape& s) {
    using key_t = std::tuple<cublasLtHandle_t, size_t, decltype(s.key())>;
    static std::mutex mutex;
    static std::map<key_t, batched_plan> plans;  // never freed: a shape per decode batch size and prefill length
    std::lock_guard lock(mutex);
    const key_t key{handle, workspace_bytes, s.key()};
    if (auto it = plans.find(key); it != plans.end()) return it->second;

    batched_plan plan;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    plan.a = layout(s.a, s.batch);
    plan.b = layout(s.b, s.batch);
    plan.c = layout(s.c, s.batch);
    cublasLtMatmulPreference_t pref = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof(workspace_bytes)));
    // Only 16-byte alignment is promised (the heads' offsets within a row).
    const uint32_t align = 16;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    ZMOE_KERNEL_REQUIRE(found > 0, "mla batched GEMM: cuBLASLt found no algorithm for this shape");
    plan.algo = result.algo;
    return plans.emplace(key, plan).first->second;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_dims(int32_t nope, int32_t rope, int32_t v, int32_t rank) {
    ZMOE_KERNEL_REQUIRE(nope % 8 == 0 && rope % 8 == 0 && v % 8 == 0 && rank % 8 == 0,
                        "mla batched GEMM: nope_dim, rope_dim, v_dim and kv_lora_rank must be multiples of 8");
}

void run(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, const batched_shape& s, const bf16* a,
         const bf16* b, bf16* c, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(handle != nullptr, "mla batched GEMM: no cuBLASLt handle");
    ZMOE_KERNEL_REQUIRE(aligned16(a) && aligned16(b) && aligned16(c),
                        "mla batched GEMM: pointers must be 16-byte aligned");
    const batched_plan& plan = plan_for(handle, workspace_bytes, s);
    const float alpha = 1.f, beta = 0.f;
    ZMOE_CUBLAS_CHECK(cublasLtMatmul(handle, plan.op, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c, plan.c,
                                     &plan.algo, workspace, workspace_bytes, stream));
}

}  // namespace

void launch_mla_q_absorb_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream) {
    check_dims(p.nope_dim, p.rope_dim, p.v_dim, p.kv_lora_rank);
    if (p.num_tokens == 0 || p.num_heads == 0) return;
    const int64_t r = p.kv_lora_rank, dn = p.nope_dim, dv = p.v_dim, heads = p.num_heads, T = p.num_tokens;
    const int64_t qk = dn + p.rope_dim;
    const batched_shape s{.transpose_a = false,
                          .a = {.rows = r, .cols = dn, .ld = r, .stride = (dn + dv) * r},
                          .b = {.rows = dn, .cols = T, .ld = heads * qk, .stride = qk},
                          .c = {.rows = r, .cols = T, .ld = heads * r, .stride = r},
                          .batch = p.num_heads};
    run(p.handle, p.workspace, p.workspace_bytes, s, p.kv_b, p.in, p.out, stream);
}

void launch_mla_v_up_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream) {
    check_dims(p.nope_dim, p.rope_dim, p.v_dim, p.kv_lora_rank);
    if (p.num_tokens == 0 || p.num_heads == 0) return;
    const int64_t r = p.kv_lora_rank, dn = p.nope_dim, dv = p.v_dim, heads = p.num_heads, T = p.num_tokens;
    const batched_shape s{.transpose_a = true,
                          .a = {.rows = r, .cols = dv, .ld = r, .stride = (dn + dv) * r},
                          .b = {.rows = r, .cols = T, .ld = heads * r, .stride = r},
                          .c = {.rows = dv, .cols = T, .ld = heads * dv, .stride = dv},
                          .batch = p.num_heads};
    run(p.handle, p.workspace, p.workspace_bytes, s, p.kv_b + size_t(dn) * r, p.in, p.out, stream);
}

void launch_mla_expand_gemm(const mla_expand_gemm_params& p, cudaStream_t stream) {
    check_dims(p.nope_dim, p.rope_dim, p.v_dim, p.kv_lora_rank);
    if (p.num_rows == 0 || p.num_heads == 0) return;
    const int64_t r = p.kv_lora_rank, dn = p.nope_dim, dv = p.v_dim, heads = p.num_heads, N = p.num_rows;
    const int64_t qk = dn + p.rope_dim;
    const operand latent{.rows = r, .cols = N, .ld = r, .stride = 0};
    const batched_shape k{.transpose_a = true,
                          .a = {.rows = r, .cols = dn, .ld = r, .stride = (dn + dv) * r},
                          .b = latent,
                          .c = {.rows = dn, .cols = N, .ld = heads * qk, .stride = qk},
                          .batch = p.num_heads};
    run(p.handle, p.workspace, p.workspace_bytes, k, p.kv_b, p.latent, p.k, stream);
    const batched_shape v{.transpose_a = true,
                          .a = {.rows = r, .cols = dv, .ld = r, .stride = (dn + dv) * r},
                          .b = latent,
                          .c = {.rows = dv, .cols = N, .ld = heads * dv, .stride = dv},
                          .batch = p.num_heads};
    run(p.handle, p.workspace, p.workspace_bytes, v, p.kv_b + size_t(dn) * r, p.latent, p.v, stream);
}

}  // namespace zmoe::kernels
