// The expert-parallel FP8 dispatch's records (api.hpp, "The FP8 dispatch"): launch_ep_fp8_pack quantizes the rows a
// rank sends into records (the NCCL and exact paths; peer to peer, launch_ep_p2p_dispatch quantizes straight into
// the receiver's window), launch_ep_fp8_unpack copies received records into the FP8 grouped GEMM's A operand in
// permuted order. One warp per (record, 128-channel group), 4 channels per lane, as launch_fp8_quantize.

#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_group.cuh"

namespace zmoe::kernels {
namespace {

constexpr int kWarps = 8;

__global__ void ep_fp8_pack_kernel(const ep_fp8_pack_params p) {
    const int32_t groups = (p.hidden + 127) / 128;
    const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (w >= int64_t(p.num_records) * groups) return;
    const int32_t i = int32_t(w / groups), g = int32_t(w % groups);
    if (p.slots != nullptr && p.slots[i] >= p.skip_slot) return;  // an unused row: nothing reads it
    const int lane = threadIdx.x % 32;
    const int32_t c = g * 128 + lane * 4;
    float v[4];
    fp8_load4(p.x + int64_t(p.rows[i]) * p.hidden, c, p.hidden, v);
    float scale;
    const uint32_t codes = fp8_quantize_group4(v, scale);
    uint8_t* rec = p.records + int64_t(i) * ep_fp8_record_bytes(p.hidden);
    if (c < p.hidden) *reinterpret_cast<uint32_t*>(rec + c) = codes;
    if (lane == 0) reinterpret_cast<float*>(rec + p.hidden)[g] = scale;
    if (g == groups - 1 && lane < 4) {  // the padding after the scales: under 16 bytes, zeroed 4 at a time
        const int64_t at = p.hidden + 4 * int64_t(groups) + 4 * lane;
        if (at < ep_fp8_record_bytes(p.hidden)) *reinterpret_cast<uint32_t*>(rec + at) = 0;
    }
}

__global__ void ep_fp8_unpack_kernel(const ep_fp8_unpack_params p) {
    const int32_t groups = (p.cols + 127) / 128;
    const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (w >= int64_t(p.num_tokens) * groups) return;
    const int32_t t = int32_t(w / groups), g = int32_t(w % groups);
    const int lane = threadIdx.x % 32;
    const int32_t c = g * 128 + lane * 4;
    const uint8_t* rec = p.records + int64_t(t) * ep_fp8_record_bytes(p.cols);
    const uint32_t codes = c < p.cols ? *reinterpret_cast<const uint32_t*>(rec + c) : 0u;
    const float scale = reinterpret_cast<const float*>(rec + p.cols)[g];
    for (int32_t j = 0; j < p.top_k; ++j) {
        const int32_t row = p.dest_rows[int64_t(t) * p.top_k + j];
        if (c < p.cols) *reinterpret_cast<uint32_t*>(p.q + int64_t(row) * p.cols + c) = codes;
        if (lane == 0) p.scales[int64_t(g) * p.scale_ld + row] = scale;
    }
}

unsigned grid_of(int64_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }

}  // namespace

void launch_ep_fp8_pack(const ep_fp8_pack_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.hidden % 4 == 0 && p.hidden > 0, "ep_fp8_pack: hidden a positive multiple of 4");
    if (p.num_records == 0) return;
    ep_fp8_pack_kernel<<<grid_of(int64_t(p.num_records) * ((p.hidden + 127) / 128)), kWarps * 32, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

void launch_ep_fp8_unpack(const ep_fp8_unpack_params& p, cudaStream_t stream) {
    ZMOE_KERNEL_REQUIRE(p.cols % 4 == 0 && p.cols > 0 && p.top_k >= 1,
                        "ep_fp8_unpack: cols a positive multiple of 4, top_k >= 1");
    if (p.num_tokens == 0) return;
    ep_fp8_unpack_kernel<<<grid_of(int64_t(p.num_tokens) * ((p.cols + 127) / 128)), kWarps * 32, 0, stream>>>(p);
    ZMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace zmoe::kernels
