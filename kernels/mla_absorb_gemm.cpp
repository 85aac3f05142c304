// The MLA absorbed projections as strided-batched cuBLASLt GEMMs, one batch entry per head. In cuBLAS's column-major
// terms, with r = kv_lora_rank, dn / dv the nope / v head dims and W_h kv_b's rows of head h:
//   q_absorb: q_lat_h^T (r x T, ld heads r) = W_k,h (r x dn, ld r, the rows h (dn + dv) .. + dn read as columns)
//             . q_nope_h^T (dn x T, ld heads (dn + dr));
//   v_up:     out_h^T (dv x T, ld heads dv) = W_v,h^T (W_v,h: r x dv, ld r, op T) . o_lat_h^T (r x T, ld heads r).
// Batch strides: (dn + dv) r for the weights, the head's width for the activations. Plans (layouts and the
// heuristic's algorithm) are cached per shape, as gemm_bf16.cpp's.

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda_check.hpp"
#include "kernels/mla_gemm.hpp"

namespace zmoe::kernels {
namespace {

struct batched_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

/// One column-major operand: rows x cols, leading dimension ld, `batch` entries `stride` elements apart.
cublasLtMatrixLayout_t layout(uint64_t rows, uint64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, ld));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    ZMOE_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    return l;
}

// (handle, v_up?, tokens, heads, nope, rope, v, rank, workspace bytes)
using plan_key = std::tuple<cublasLtHandle_t, bool, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, size_t>;

const batched_plan& plan_for(const mla_absorb_gemm_params& p, bool v_up) {
    static std::mutex mutex;
    static std::map<plan_key, batched_plan> plans;  // never freed: a shape per decode batch size
    std::lock_guard lock(mutex);
    const plan_key key{p.handle,   v_up,    p.num_tokens,   p.num_heads,      p.nope_dim,
                       p.rope_dim, p.v_dim, p.kv_lora_rank, p.workspace_bytes};
    if (auto it = plans.find(key); it != plans.end()) return it->second;

    const int64_t r = p.kv_lora_rank, dn = p.nope_dim, dv = p.v_dim, heads = p.num_heads, T = p.num_tokens;
    const int64_t w_stride = (dn + dv) * r;
    batched_plan plan;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = v_up ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (v_up) {
        plan.a = layout(r, dv, r, p.num_heads, w_stride);
        plan.b = layout(r, T, heads * r, p.num_heads, r);
        plan.c = layout(dv, T, heads * dv, p.num_heads, dv);
    } else {
        plan.a = layout(r, dn, r, p.num_heads, w_stride);
        plan.b = layout(dn, T, heads * (dn + p.rope_dim), p.num_heads, dn + p.rope_dim);
        plan.c = layout(r, T, heads * r, p.num_heads, r);
    }
    cublasLtMatmulPreference_t pref = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &p.workspace_bytes, sizeof(p.workspace_bytes)));
    // Only 16-byte alignment is promised (the heads' offsets within a row).
    const uint32_t align = 16;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ZMOE_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(p.handle, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    ZMOE_KERNEL_REQUIRE(found > 0, "mla absorbed GEMM: cuBLASLt found no algorithm for this shape");
    plan.algo = result.algo;
    return plans.emplace(key, plan).first->second;
}

void run(const mla_absorb_gemm_params& p, bool v_up, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.handle != nullptr, "mla absorbed GEMM: no cuBLASLt handle");
    ZMOE_KERNEL_REQUIRE(p.nope_dim % 8 == 0 && p.rope_dim % 8 == 0 && p.v_dim % 8 == 0 && p.kv_lora_rank % 8 == 0,
                        "mla absorbed GEMM: nope_dim, rope_dim, v_dim and kv_lora_rank must be multiples of 8");
    ZMOE_KERNEL_REQUIRE(((reinterpret_cast<uintptr_t>(p.kv_b) | reinterpret_cast<uintptr_t>(p.in) |
                          reinterpret_cast<uintptr_t>(p.out)) %
                         16) == 0,
                        "mla absorbed GEMM: pointers must be 16-byte aligned");
    if (p.num_tokens == 0 || p.num_heads == 0) return;
    const batched_plan& plan = plan_for(p, v_up);
    const float alpha = 1.f, beta = 0.f;
    const bf16* a = v_up ? p.kv_b + size_t(p.nope_dim) * p.kv_lora_rank : p.kv_b;
    ZMOE_CUBLAS_CHECK(cublasLtMatmul(p.handle, plan.op, &alpha, a, plan.a, p.in, plan.b, &beta, p.out, plan.c, p.out,
                                     plan.c, &plan.algo, p.workspace, p.workspace_bytes, stream));
}

}  // namespace

void launch_mla_q_absorb_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream) { run(p, false, stream); }

void launch_mla_v_up_gemm(const mla_absorb_gemm_params& p, cudaStream_t stream) { run(p, true, stream); }

}  // namespace zmoe::kernels
