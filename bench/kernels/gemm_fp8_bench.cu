// The block-scaled FP8 dense projections (launch_gemm_fp8) at the dense shapes of Qwen3-30B-A3B and DeepSeek-V3,
// beside the BF16 GEMMs the engine runs today and cuBLASLt's own block-scaled FP8 where it serves on this device.
//
// Variants per (shape, m): fp8 (launch_gemm_fp8: on sm_90 the wgmma kernel of gemm_fp8_sm90.cu up to 128 rows,
// the grouped FP8 GEMM above; elsewhere skinny up to 64 rows, grouped above);
// fp8_sm90 (that kernel, where launch_gemm_fp8 does not take it), and with --sweep-sm90 fp8_sm90_wW (W
// math warpgroups a CTA), fp8_sm90_tN (N tokens per CTA: narrower than the automatic tile, or 256), fp8_sm90_o
// (promotions overlapping the next block's wgmmas) and fp8_sm90_sS (S CTAs per cluster); with --sweep
// fp8_tN_stT[_h] (the skinny kernel with N rows of a per CTA, a T-stage ring, _h: f16 MMAs on the e4m3 values
// converted) and fp8_sS (S CTAs per cluster), the others automatic; past 64 rows fp8_skinny[_h], the skinny kernel
// over 64-row slices, and fp8_narrow / fp8_wide, the grouped kernel's tiles; bf16 (launch_gemm_bf16, cuBLASLt);
// bf16_skinny (launch_skinny_gemm_bf16, the engine's BF16 path up to 64 rows); cublas_fp8
// (cuBLASLt e4m3 with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F on the weights and VEC128_32F on the activations: the
// format's scales, the same data as fp8). cublas_fp8 is checked against fp8's output (the same arithmetic up to
// accumulation order: max |diff| / max |c| below 2e-2) under each candidate layout of the scale tensors, and only a
// layout that matches is timed; the heuristic's status is printed where cuBLASLt refuses.
//
// Each (shape, variant) runs as a step runs it: a CUDA graph of `layers` launches, each on its own copy of the weights
// (no launch finds its weights in L2), replayed --iters times; the median replay / layers is the time per launch.
// Ceilings measured in the same run: copy bandwidth (1 GiB device to device, read + write) and the dense FP8 peak
// (cuBLASLt e4m3 GEMM 8192^3, per-tensor scales, BF16 out). TB/s = (weights + activations + output bytes) / time;
// %bw = that / copy bandwidth (the floor of small m); TFLOP/s = 2 m n k / time; %peak = that / the FP8 peak.
//
//   gemm_fp8_bench [--m 1,4,16,64,256,4096,16384] [--shapes qwen_qkv,...] [--no-cublas-fp8] [--sweep]
//                  [--sweep-sm90] [--iters N] [--json PATH]

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.hpp"
#include "bench/kernels/bench_util.cuh"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_fp8.hpp"
#include "kernels/gemm_fp8_sm90.hpp"

namespace {

using zmoe::bench::device_alloc;
using zmoe::bench::fill;
using zmoe::bench::parse_list;
using zmoe::kernels::bf16;

/// Random e4m3 codes, never NaN (0x7f / 0xff), from a hash of (i, seed).
__global__ void fill_e4m3(uint8_t* out, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 0x9e3779b9u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        out[i] = uint8_t(h >> 8) & 0xbf;  // exponent field below 8: |value| < 2, never a NaN code
    }
}

/// Random positive scales in [0.5, 1.5) x scale.
__global__ void fill_scales(float* out, size_t n, float scale, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 0x85ebca6bu ^ seed;
        h ^= h >> 13;
        h *= 0xc2b2ae35u;
        h ^= h >> 16;
        out[i] = (0.5f + float(h >> 8) * (1.f / 16777216.f)) * scale;
    }
}

template <typename F>
double time_op_ms(F&& run, cudaStream_t stream, int warmup, int iters) {
    cudaEvent_t e0, e1;
    ZMOE_CUDA_CHECK(cudaEventCreate(&e0));
    ZMOE_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; ++i) run();
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
        ZMOE_CUDA_CHECK(cudaEventRecord(e0, stream));
        run();
        ZMOE_CUDA_CHECK(cudaEventRecord(e1, stream));
        ZMOE_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        ZMOE_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    ZMOE_CUDA_CHECK(cudaEventDestroy(e0));
    ZMOE_CUDA_CHECK(cudaEventDestroy(e1));
    return zmoe::median(ms);
}

/// Median ms of a graph of what enqueue() launches on stream (one call outside the capture first: attributes,
/// cuBLASLt plans).
double time_graph_ms(const std::function<void()>& enqueue, cudaStream_t stream, int iters) {
    enqueue();
    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = time_op_ms([&] { ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream, 3, iters);
    ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
    return ms;
}

double copy_bandwidth(cudaStream_t stream) {
    const size_t n = size_t(1) << 30;
    void* src = device_alloc<char>(n);
    void* dst = device_alloc<char>(n);
    ZMOE_CUDA_CHECK(cudaMemsetAsync(src, 1, n, stream));
    const double ms = time_op_ms(
        [&] { ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream)); }, stream, 2, 10);
    ZMOE_CUDA_CHECK(cudaFree(src));
    ZMOE_CUDA_CHECK(cudaFree(dst));
    return 2.0 * double(n) / (ms * 1e-3);
}

/// cuBLASLt's e4m3 GEMM 8192^3 with per-tensor scales (BF16 out): the dense FP8 peak of this device.
double fp8_peak_flops(cublasLtHandle_t blas, void* ws, size_t ws_bytes, cudaStream_t stream) {
    constexpr int32_t kDim = 8192;
    uint8_t* a = device_alloc<uint8_t>(size_t(kDim) * kDim);
    uint8_t* b = device_alloc<uint8_t>(size_t(kDim) * kDim);
    bf16* d = device_alloc<bf16>(size_t(kDim) * kDim);
    fill_e4m3<<<1024, 256, 0, stream>>>(a, size_t(kDim) * kDim, 1);
    fill_e4m3<<<1024, 256, 0, stream>>>(b, size_t(kDim) * kDim, 2);
    cublasLtMatmulDesc_t op;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, kDim, kDim, kDim));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, kDim, kDim, kDim));
    ZMOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, kDim, kDim, kDim));
    cublasLtMatmulPreference_t pref;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ZMOE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                           sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    ZMOE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(blas, op, la, lb, ld, ld, pref, 1, &heur, &found));
    ZMOE_KERNEL_REQUIRE(found > 0, "gemm_fp8_bench: cuBLASLt has no e4m3 algorithm");
    const float alpha = 1.f, beta = 0.f;
    const double ms = time_op_ms(
        [&] {
            ZMOE_CUBLAS_CHECK(
                cublasLtMatmul(blas, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws, ws_bytes, stream));
        },
        stream, 3, 20);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    ZMOE_CUDA_CHECK(cudaFree(a));
    ZMOE_CUDA_CHECK(cudaFree(b));
    ZMOE_CUDA_CHECK(cudaFree(d));
    return 2.0 * kDim * double(kDim) * kDim / (ms * 1e-3);
}

/// cuBLASLt block-scaled FP8: y[m, n] = x . w^T as y^T = w . x^T in column-major terms (A = w, k x n, op T; B = x,
/// k x m; D = y^T, n x m), scale modes BLK128x128 on A, VEC128 on B.
struct cublas_fp8 {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulAlgo_t algo{};
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // of the first failing call; success: usable
    std::string failed_at;

    cublas_fp8(cublasLtHandle_t blas, int32_t m, int32_t n, int32_t k, const float* w_scales, const float* a_scales,
               size_t ws_bytes) {
        auto check = [&](cublasStatus_t s, const char* what) {
            if (s != CUBLAS_STATUS_SUCCESS && status == CUBLAS_STATUS_SUCCESS) {
                status = s;
                failed_at = what;
            }
            return s == CUBLAS_STATUS_SUCCESS;
        };
        if (!check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate")) return;
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const cublasLtMatmulMatrixScale_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                          mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a),
              "A_SCALE_MODE BLK128x128_32F");
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b),
              "B_SCALE_MODE VEC128_32F");
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales),
              "A_SCALE_POINTER");
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scales, sizeof a_scales),
              "B_SCALE_POINTER");
        check(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k), "layout A");
        check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k), "layout B");
        check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, m, n), "layout D");
        if (status != CUBLAS_STATUS_SUCCESS) return;
        cublasLtMatmulPreference_t pref;
        check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
        check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                   sizeof ws_bytes),
              "MAX_WORKSPACE_BYTES");
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        if (check(cublasLtMatmulAlgoGetHeuristic(blas, op, la, lb, ld, ld, pref, 1, &heur, &found),
                  "AlgoGetHeuristic") &&
            found == 0)
            check(CUBLAS_STATUS_NOT_SUPPORTED, "AlgoGetHeuristic (no algorithm found)");
        algo = heur.algo;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    ~cublas_fp8() {
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (ld) cublasLtMatrixLayoutDestroy(ld);
        if (op) cublasLtMatmulDescDestroy(op);
    }
    bool ok() const { return status == CUBLAS_STATUS_SUCCESS; }
    cublasStatus_t run(cublasLtHandle_t blas, const uint8_t* w, const uint8_t* a, bf16* c, void* ws, size_t ws_bytes,
                       cudaStream_t stream) const {
        const float alpha = 1.f, beta = 0.f;
        return cublasLtMatmul(blas, op, &alpha, w, la, a, lb, &beta, c, ld, c, ld, &algo, ws, ws_bytes, stream);
    }
};

/// The cuBLAS status enumerator's name (cublasGetStatusName lives in libcublas, which nothing else here needs).
const char* status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS:
            return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR:
            return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR:
            return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR:
            return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "unknown status";
}

/// max |a - b| / max |b| over BF16 arrays.
double max_rel_diff(const bf16* a, const bf16* b, size_t n) {
    std::vector<bf16> ha(n), hb(n);
    ZMOE_CUDA_CHECK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
    ZMOE_CUDA_CHECK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
        const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        if (std::isnan(x) || std::isnan(y)) return INFINITY;
        err = std::max(err, std::fabs(x - y));
        ref = std::max(ref, std::fabs(y));
    }
    return ref > 0 ? err / ref : err;
}

/// [rows, cols] row-major fp32 on the device -> [cols, rows] (a host round trip: setup only).
std::vector<float> transposed(const float* d, int64_t rows, int64_t cols) {
    std::vector<float> h(size_t(rows * cols)), t(h.size());
    ZMOE_CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = h[size_t(r * cols + c)];
    return t;
}

struct shape {
    const char* name;
    int32_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<int32_t> ms_list = {1, 4, 16, 64, 256, 4096, 16384};
    std::string only;
    int iters = 20;
    std::string json_path;
    bool with_cublas = true, sweep = false, sweep_sm90 = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--m" && i + 1 < argc)
            ms_list = parse_list(argv[++i]);
        else if (a == "--shapes" && i + 1 < argc)
            only = "," + std::string(argv[++i]) + ",";
        else if (a == "--iters" && i + 1 < argc)
            iters = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc)
            json_path = argv[++i];
        else if (a == "--no-cublas-fp8")
            with_cublas = false;
        else if (a == "--sweep")
            sweep = true;
        else if (a == "--sweep-sm90")
            sweep_sm90 = true;
        else
            return std::fprintf(stderr,
                                "usage: gemm_fp8_bench [--m 1,4,16,64,256,4096,16384] [--no-cublas-fp8] [--sweep] "
                                "[--sweep-sm90] "
                                "[--shapes "
                                "qwen_qkv,qwen_o,ds_q_a,ds_q_b,ds_kv_a,ds_o,ds_shared_gate_up,ds_shared_down] "
                                "[--iters N] [--json PATH]\n"),
                   2;
    }
    // Qwen3-30B-A3B (hidden 2048, 32 query / 4 KV heads of 128; every MLP is MoE) and DeepSeek-V3 (hidden 7168,
    // q_lora_rank 1536, kv_lora_rank 512 + rope 64, 128 heads of 192 (q) / 128 (v), one shared expert of 2048).
    const std::vector<shape> shapes = {{"qwen_qkv", (32 + 4 + 4) * 128, 2048},
                                       {"qwen_o", 2048, 32 * 128},
                                       {"ds_q_a", 1536, 7168},
                                       {"ds_q_b", 128 * 192, 1536},
                                       {"ds_kv_a", 512 + 64, 7168},
                                       {"ds_o", 7168, 128 * 128},
                                       {"ds_shared_gate_up", 2 * 2048, 7168},
                                       {"ds_shared_down", 7168, 2048}};
    cudaStream_t stream = nullptr;
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasLtHandle_t blas = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&blas));
    const size_t ws_bytes = 32u << 20;
    void* ws = device_alloc<char>(ws_bytes);
    cudaDeviceProp prop{};
    ZMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = copy_bandwidth(stream);
    const double peak = fp8_peak_flops(blas, ws, ws_bytes, stream);
    std::printf(
        "device %s (sm_%d%d), cuBLASLt %zu; copy bandwidth %.0f GB/s (read + write), dense FP8 peak %.0f "
        "TFLOP/s (cuBLASLt e4m3 8192^3)\n",
        prop.name, prop.major, prop.minor, cublasLtGetVersion(), bw / 1e9, peak / 1e12);

    const int32_t max_m = *std::max_element(ms_list.begin(), ms_list.end());
    std::ostringstream json;
    json << "{\"device\": \"" << prop.name << "\", \"cublaslt_version\": " << cublasLtGetVersion()
         << ", \"copy_bytes_per_s\": " << bw << ", \"fp8_peak_flops_per_s\": " << peak << ", \"rows\": [";
    bool first_row = true;
    std::printf("%-18s %5s %-12s %9s %7s %5s %8s %6s %8s\n", "shape", "m", "variant", "us", "TB/s", "%bw", "TFLOP/s",
                "%peak", "vs_bf16");
    for (const shape& sh : shapes) {
        if (!only.empty() && only.find("," + std::string(sh.name) + ",") == std::string::npos) continue;
        const int32_t n = sh.n, k = sh.k, kb = (k + 127) / 128, nb = (n + 127) / 128;
        const size_t w_elems = size_t(n) * k;
        // As many weight copies as fit in 3 GB per precision (at most 16): no launch finds its weights in L2.
        const int copies = int(std::clamp<size_t>((size_t(3) << 30) / (w_elems * 2), 1, 16));
        std::vector<uint8_t*> w8(copies);
        std::vector<bf16*> w16(copies);
        std::vector<float*> w_s(copies);
        for (int l = 0; l < copies; ++l) {
            w8[l] = device_alloc<uint8_t>(w_elems);
            w16[l] = device_alloc<bf16>(w_elems);
            w_s[l] = device_alloc<float>(size_t(nb + 4) * (kb + 4));  // slack: cuBLASLt might read padded scales
            fill_e4m3<<<1024, 256, 0, stream>>>(w8[l], w_elems, 100 + l);
            fill(w16[l], w_elems, 1.f / std::sqrt(float(k)), 200 + l, stream);
            fill_scales<<<64, 256, 0, stream>>>(w_s[l], size_t(nb) * kb, 1.f / 64.f, 300 + l);
        }
        // Activations: random BF16 quantized per token and 128-channel group by launch_fp8_quantize.
        const int32_t ld_max = zmoe::kernels::fp8_scale_ld(max_m);
        bf16* x16 = device_alloc<bf16>(size_t(max_m) * k);
        uint8_t* x8 = device_alloc<uint8_t>(size_t(max_m) * k);
        float* x_s = device_alloc<float>(size_t(kb) * ld_max);
        float* x_s_t = device_alloc<float>(size_t(kb + 4) * (max_m + 128));  // cuBLASLt's candidate layouts
        bf16* c = device_alloc<bf16>(size_t(max_m) * n);
        bf16* c_ref = device_alloc<bf16>(size_t(max_m) * n);
        fill(x16, size_t(max_m) * k, 1.f, 7, stream);
        for (const int32_t m : ms_list) {
            const int32_t ld = zmoe::kernels::fp8_scale_ld(m);
            zmoe::kernels::launch_fp8_quantize(
                {.x = x16, .q = x8, .scales = x_s, .num_tokens = m, .cols = k, .scale_ld = ld}, stream);
            const double flops = 2.0 * m * double(n) * k;
            const int layers = m >= 256 ? std::min(copies, 4) : copies;
            auto fp8_params = [&](int l) {
                return zmoe::kernels::gemm_fp8_params{.a = x8,
                                                      .a_scales = x_s,
                                                      .a_scale_ld = ld,
                                                      .w = w8[l],
                                                      .w_scales = w_s[l],
                                                      .c = c,
                                                      .m = m,
                                                      .n = n,
                                                      .k = k};
            };
            // fp8's output of copy 0: what cuBLASLt's candidates are checked against.
            zmoe::kernels::gemm_fp8_params ref_p = fp8_params(0);
            ref_p.c = c_ref;
            zmoe::kernels::launch_gemm_fp8(ref_p, stream);
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));

            std::vector<std::pair<std::string, std::function<void(int)>>> variants;
            std::map<std::string, double> bytes_of;
            const double bytes8 = double(w_elems) + double(m) * k + double(m) * n * 2;
            const double bytes16 = double(w_elems) * 2 + double(m) * k * 2 + double(m) * n * 2;
            variants.emplace_back("bf16", [&](int l) {
                zmoe::kernels::launch_gemm_bf16({.handle = blas,
                                                 .workspace = ws,
                                                 .workspace_bytes = ws_bytes,
                                                 .x = x16,
                                                 .w = w16[l],
                                                 .y = c,
                                                 .m = m,
                                                 .n = n,
                                                 .k = k},
                                                stream);
            });
            bytes_of["bf16"] = bytes16;
            variants.emplace_back("fp8", [&](int l) { zmoe::kernels::launch_gemm_fp8(fp8_params(l), stream); });
            bytes_of["fp8"] = bytes8;
            const bool sm90 = zmoe::kernels::detail::gemm_fp8_sm90_applies(fp8_params(0));
            const bool routed = zmoe::kernels::detail::gemm_fp8_sm90_routed(fp8_params(0));
            if (sm90) {
                const auto choice = zmoe::kernels::detail::gemm_fp8_sm90_choice(fp8_params(0));
                std::printf("  [%s m=%d] %s = sm90, splits %d, tokens per CTA %d, math warpgroups %d\n", sh.name, m,
                            routed ? "fp8" : "fp8_sm90", choice.splits, choice.tokens_per_cta, choice.math_warpgroups);
            }
            if (!routed && m <= zmoe::kernels::kGemmFp8SkinnyMaxRows) {
                const auto choice = zmoe::kernels::detail::gemm_fp8_skinny_choice(fp8_params(0));
                std::printf("  [%s m=%d] fp8 = skinny, splits %d, stages %d\n", sh.name, m, choice.splits,
                            choice.stages);
            }
            if (sm90 && !routed) {  // the sm_90 kernel beside launch_gemm_fp8's default path
                variants.emplace_back(
                    "fp8_sm90", [&](int l) { zmoe::kernels::detail::launch_gemm_fp8_sm90(fp8_params(l), {}, stream); });
                bytes_of["fp8_sm90"] = bytes8;
            }
            if (routed && m <= zmoe::kernels::kGemmFp8SkinnyMaxRows) {  // the default path's skinny kernel beside
                variants.emplace_back("fp8_skinny", [&](int l) {
                    zmoe::kernels::detail::launch_gemm_fp8_skinny(fp8_params(l), {}, stream);
                });
                bytes_of["fp8_skinny"] = bytes8;
            }
            if (sm90 && sweep_sm90) {
                for (const int32_t wg : {1, 2}) {
                    const std::string name = "fp8_sm90_w" + std::to_string(wg);
                    variants.emplace_back(name, [&, wg](int l) {
                        zmoe::kernels::detail::launch_gemm_fp8_sm90(fp8_params(l), {.math_warpgroups = wg}, stream);
                    });
                    bytes_of[name] = bytes8;
                }
                // Narrower token tiles than the automatic one (more token slices, more CTAs).
                const int32_t auto_tokens = zmoe::kernels::detail::gemm_fp8_sm90_choice(fp8_params(0)).tokens_per_cta;
                for (const int32_t t : {16, 32, 64})
                    if (t < auto_tokens && 4 * t >= auto_tokens) {
                        const std::string name = "fp8_sm90_t" + std::to_string(t);
                        variants.emplace_back(name, [&, t](int l) {
                            zmoe::kernels::detail::launch_gemm_fp8_sm90(fp8_params(l), {.tokens_per_cta = t}, stream);
                        });
                        bytes_of[name] = bytes8;
                    }
                if (m > 128) {  // wider: 256 tokens on two warpgroups (two wgmma N = 128 halves a K block)
                    variants.emplace_back("fp8_sm90_t256", [&](int l) {
                        zmoe::kernels::detail::launch_gemm_fp8_sm90(
                            fp8_params(l), {.tokens_per_cta = 256, .math_warpgroups = 2}, stream);
                    });
                    bytes_of["fp8_sm90_t256"] = bytes8;
                }
                variants.emplace_back("fp8_sm90_o", [&](int l) {
                    zmoe::kernels::detail::launch_gemm_fp8_sm90(fp8_params(l), {.overlap = 2}, stream);
                });
                bytes_of["fp8_sm90_o"] = bytes8;
                for (const int32_t sp : {1, 2, 4, 8})
                    if (sp <= kb) {
                        const std::string name = "fp8_sm90_s" + std::to_string(sp);
                        variants.emplace_back(name, [&, sp](int l) {
                            zmoe::kernels::detail::launch_gemm_fp8_sm90(fp8_params(l), {.splits = sp}, stream);
                        });
                        bytes_of[name] = bytes8;
                    }
            }
            if (m <= zmoe::kernels::kGemmFp8SkinnyMaxRows && max_m >= 64) {
                // The grouped kernel with one group of m rounded up to 64 rows (what fp8_linear_runner ran at every
                // row count before the skinny kernel took decode steps), for the crossover. Timing only: the scale
                // rows past m are whatever the buffer holds.
                const int32_t mp = (m + 63) / 64 * 64;
                int32_t* offsets = device_alloc<int32_t>(2);
                const int32_t host_offsets[2] = {0, mp};
                ZMOE_CUDA_CHECK(cudaMemcpy(offsets, host_offsets, sizeof(host_offsets), cudaMemcpyHostToDevice));
                variants.emplace_back("fp8_grouped", [&, offsets, mp](int l) {
                    zmoe::kernels::launch_grouped_gemm_fp8({.a = x8,
                                                            .a_scales = x_s,
                                                            .a_scale_ld = ld_max,
                                                            .b = w8[l],
                                                            .b_scales = w_s[l],
                                                            .expert_offsets = offsets,
                                                            .c = c,
                                                            .max_rows = mp,
                                                            .n = n,
                                                            .k = k,
                                                            .num_experts = 1,
                                                            .row_align = 64},
                                                           stream);
                });
                bytes_of["fp8_grouped"] = bytes8;
            }
            if (m > zmoe::kernels::kGemmFp8SkinnyMaxRows && m % 64 == 0) {
                // The grouped kernel's tile shapes forced (fp8 runs what launch_grouped_gemm_fp8 picks: wide from 191
                // rows): more, smaller tiles for the shapes whose wide tiles leave most SMs idle.
                int32_t* offsets = device_alloc<int32_t>(2);
                const int32_t host_offsets[2] = {0, m};
                ZMOE_CUDA_CHECK(cudaMemcpy(offsets, host_offsets, sizeof(host_offsets), cudaMemcpyHostToDevice));
                for (const auto& [name, tiles] : {std::pair{"fp8_narrow", zmoe::kernels::fp8_gemm_tiles::narrow},
                                                  std::pair{"fp8_wide", zmoe::kernels::fp8_gemm_tiles::wide}}) {
                    variants.emplace_back(name, [&, offsets, tiles](int l) {
                        zmoe::kernels::launch_grouped_gemm_fp8({.a = x8,
                                                                .a_scales = x_s,
                                                                .a_scale_ld = ld,
                                                                .b = w8[l],
                                                                .b_scales = w_s[l],
                                                                .expert_offsets = offsets,
                                                                .c = c,
                                                                .max_rows = m,
                                                                .n = n,
                                                                .k = k,
                                                                .num_experts = 1,
                                                                .row_align = 64,
                                                                .tiles = tiles},
                                                               stream);
                    });
                    bytes_of[name] = bytes8;
                }
            }
            if (m > zmoe::kernels::kGemmFp8SkinnyMaxRows) {  // the skinny kernel over 64-row slices, for the crossover
                for (const bool f16 : {false, true}) {
                    const std::string name = f16 ? "fp8_skinny_h" : "fp8_skinny";
                    const zmoe::kernels::detail::gemm_fp8_skinny_config cfg{
                        .mma =
                            f16 ? zmoe::kernels::detail::gemm_fp8_mma::f16 : zmoe::kernels::detail::gemm_fp8_mma::e4m3};
                    variants.emplace_back(name, [&, cfg](int l) {
                        zmoe::kernels::detail::launch_gemm_fp8_skinny(fp8_params(l), cfg, stream);
                    });
                    bytes_of[name] = bytes8;
                }
            }
            if (sweep && m <= zmoe::kernels::kGemmFp8SkinnyMaxRows) {
                auto add = [&](const std::string& name, zmoe::kernels::detail::gemm_fp8_skinny_config cfg) {
                    variants.emplace_back(name, [&, cfg](int l) {
                        zmoe::kernels::detail::launch_gemm_fp8_skinny(fp8_params(l), cfg, stream);
                    });
                    bytes_of[name] = bytes8;
                };
                for (const int32_t tok : {8, 16, 32, 64}) {
                    if (tok > 8 && tok / 2 >= m) continue;  // no CTA would have more than half its rows
                    for (const int32_t st : {4, 8})
                        for (const bool f16 : {false, true})
                            add("fp8_t" + std::to_string(tok) + "_st" + std::to_string(st) + (f16 ? "_h" : ""),
                                {.stages = st,
                                 .tokens_per_cta = tok,
                                 .mma = f16 ? zmoe::kernels::detail::gemm_fp8_mma::f16
                                            : zmoe::kernels::detail::gemm_fp8_mma::e4m3});
                }
                for (const int32_t sp : {1, 2, 4, 8})
                    if (sp <= kb) add("fp8_s" + std::to_string(sp), {.splits = sp});
            }
            if (zmoe::kernels::skinny_gemm_bf16_supported(m, n, k)) {
                variants.emplace_back("bf16_skinny", [&](int l) {
                    zmoe::kernels::launch_skinny_gemm_bf16({.x = x16, .w = w16[l], .y = c, .m = m, .n = n, .k = k},
                                                           stream);
                });
                bytes_of["bf16_skinny"] = bytes16;
            }
            // cuBLASLt block-scaled FP8: candidate scale layouts (weights: the checkpoint's [n/128][k/128] or its
            // transpose; activations: [k/128][m] or [m][k/128]); the first whose output matches fp8's is timed.
            std::string cublas_note;
            std::vector<float*> w_s_t(copies, nullptr);
            std::unique_ptr<cublas_fp8> cub;
            {
                const std::vector<float> xs_host_t = [&] {
                    // [kb][ld] -> [m][kb] compact
                    std::vector<float> h(size_t(kb) * ld), t(size_t(m) * kb);
                    ZMOE_CUDA_CHECK(cudaMemcpy(h.data(), x_s, h.size() * 4, cudaMemcpyDeviceToHost));
                    for (int32_t r = 0; r < m; ++r)
                        for (int32_t b = 0; b < kb; ++b) t[size_t(r) * kb + b] = h[size_t(b) * ld + r];
                    return t;
                }();
                std::vector<float> xs_host_km(size_t(kb) * m);  // [kb][m] compact
                for (int32_t r = 0; r < m; ++r)
                    for (int32_t b = 0; b < kb; ++b) xs_host_km[size_t(b) * m + r] = xs_host_t[size_t(r) * kb + b];
                const std::vector<float> ws_t = transposed(w_s[0], nb, kb);
                float* ws_t_dev = device_alloc<float>(size_t(nb + 4) * (kb + 4));
                ZMOE_CUDA_CHECK(cudaMemcpy(ws_t_dev, ws_t.data(), ws_t.size() * 4, cudaMemcpyHostToDevice));
                if (!with_cublas) cublas_note = "not run (--no-cublas-fp8)";
                for (int cand = 0; cand < 4 && !cub && with_cublas; ++cand) {
                    const bool w_transposed = cand & 1, x_token_major = cand & 2;
                    const std::vector<float>& xs_h = x_token_major ? xs_host_t : xs_host_km;
                    ZMOE_CUDA_CHECK(cudaMemcpy(x_s_t, xs_h.data(), xs_h.size() * 4, cudaMemcpyHostToDevice));
                    auto trial =
                        std::make_unique<cublas_fp8>(blas, m, n, k, w_transposed ? ws_t_dev : w_s[0], x_s_t, ws_bytes);
                    if (!trial->ok()) {
                        cublas_note = "cuBLASLt refuses: " + trial->failed_at + " -> status " +
                                      std::to_string(int(trial->status)) + " (" + status_name(trial->status) + ")";
                        break;  // the same refusal for every layout (layouts are not part of the query)
                    }
                    ZMOE_CUDA_CHECK(cudaMemsetAsync(c, 0xff, size_t(m) * n * 2, stream));
                    const cublasStatus_t s = trial->run(blas, w8[0], x8, c, ws, ws_bytes, stream);
                    ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
                    if (s != CUBLAS_STATUS_SUCCESS) {
                        cublas_note = std::string("cublasLtMatmul status ") + status_name(s);
                        break;
                    }
                    const double diff = max_rel_diff(c, c_ref, size_t(std::min(m, 256)) * n);  // rows checked
                    char buf[160];
                    std::snprintf(buf, sizeof buf, "%sscales w %s, x %s: max rel diff vs fp8 %.3g",
                                  cublas_note.empty() ? "" : "; ", w_transposed ? "[k/128][n/128]" : "[n/128][k/128]",
                                  x_token_major ? "[m][k/128]" : "[k/128][m]", diff);
                    cublas_note += buf;
                    if (diff < 2e-2) {
                        cub = std::move(trial);
                        if (w_transposed) {  // every copy's scales in the layout that matched
                            for (int l = 0; l < copies; ++l) {
                                const std::vector<float> t = transposed(w_s[l], nb, kb);
                                w_s_t[l] = device_alloc<float>(size_t(nb + 4) * (kb + 4));
                                ZMOE_CUDA_CHECK(cudaMemcpy(w_s_t[l], t.data(), t.size() * 4, cudaMemcpyHostToDevice));
                            }
                        }
                    }
                }
                ZMOE_CUDA_CHECK(cudaFree(ws_t_dev));
            }
            std::printf("  [%s m=%d] cublas_fp8: %s\n", sh.name, m, cublas_note.c_str());
            std::vector<std::unique_ptr<cublas_fp8>> cub_per_copy;
            if (cub) {
                // One descriptor per weight copy (the scale pointers live in the descriptor).
                const bool w_transposed = !w_s_t.empty() && w_s_t[0] != nullptr;
                for (int l = 0; l < copies; ++l)
                    cub_per_copy.push_back(
                        std::make_unique<cublas_fp8>(blas, m, n, k, w_transposed ? w_s_t[l] : w_s[l], x_s_t, ws_bytes));
                variants.emplace_back("cublas_fp8", [&](int l) {
                    ZMOE_CUBLAS_CHECK(cub_per_copy[l]->run(blas, w8[l], x8, c, ws, ws_bytes, stream));
                });
                bytes_of["cublas_fp8"] = bytes8;
            }

            double bf16_us = 0;
            for (const auto& [name, launch] : variants) {
                const double ms = time_graph_ms(
                    [&] {
                        for (int l = 0; l < layers; ++l) launch(l);
                    },
                    stream, iters);
                const double us = ms * 1e3 / layers;
                if (name == "bf16") bf16_us = us;
                const double tbs = bytes_of[name] / (us * 1e-6) / 1e12;
                const double tflops = flops / (us * 1e-6) / 1e12;
                std::printf("%-18s %5d %-12s %9.2f %7.2f %4.0f%% %8.1f %5.1f%% %7.2fx\n", sh.name, m, name.c_str(), us,
                            tbs, 100.0 * tbs * 1e12 / bw, tflops, 100.0 * tflops * 1e12 / peak,
                            bf16_us > 0 ? bf16_us / us : 0.0);
                json << (first_row ? "" : ", ") << "{\"shape\": \"" << sh.name << "\", \"m\": " << m << ", \"n\": " << n
                     << ", \"k\": " << k << ", \"variant\": \"" << name << "\", \"layers\": " << layers
                     << ", \"us\": " << us << ", \"tb_per_s\": " << tbs << ", \"tflop_per_s\": " << tflops << "}";
                first_row = false;
            }
            for (float* p : w_s_t)
                if (p) ZMOE_CUDA_CHECK(cudaFree(p));
            json << (first_row ? "" : ", ") << "{\"shape\": \"" << sh.name << "\", \"m\": " << m
                 << ", \"variant\": \"cublas_fp8_note\", \"note\": \"" << cublas_note << "\"}";
            first_row = false;
        }
        for (int l = 0; l < copies; ++l) {
            ZMOE_CUDA_CHECK(cudaFree(w8[l]));
            ZMOE_CUDA_CHECK(cudaFree(w16[l]));
            ZMOE_CUDA_CHECK(cudaFree(w_s[l]));
        }
        for (void* p : {(void*)x16, (void*)x8, (void*)x_s, (void*)x_s_t, (void*)c, (void*)c_ref})
            ZMOE_CUDA_CHECK(cudaFree(p));
    }
    json << "]}\n";
    if (!json_path.empty()) std::ofstream(json_path) << json.str();
    std::printf("vs_bf16: the bf16 (cuBLASLt) row's time / this row's; %%bw: bytes moved / copy bandwidth\n");
    cublasLtDestroy(blas);
    return 0;
}
