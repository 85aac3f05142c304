// The MLA decode step of mla_attention_runner at DeepSeek's latent shape (kv_lora_rank 512, rope 64, nope / v 128,
// 16 heads): the tensor-core path (batched absorb GEMM, launch_mla_decode_bf16 with BF16 latents, batched v_up GEMM)
// against the fp32-latent path (launch_mla_q_absorb, launch_mla_attention, launch_mla_v_up, each tested against
// the CPU reference in tests/kernels), on the same dummy weights and cache: one layer's o_proj output, over batches
// whose split counts differ (1 sequence: the most splits; 3; 40) and contexts across tile edges; and its graph
// capture replaying the eager result.

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "messages/expert_placement.hpp"
#include "reference_fixture.hpp"
#include "synthetic_model.hpp"
#include "workers/cuda/cuda_deepseek.hpp"
#include "workers/cuda/cuda_weights.hpp"
#include "workers/cuda/device_buffer.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

uint16_t to_bf16_bits(float x) {
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof(u));
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16_bits(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float x = 0.f;
    std::memcpy(&x, &u, sizeof(x));
    return x;
}

device_buffer upload(const void* host, size_t bytes) {
    device_buffer d(bytes);
    ZMOE_CUDA_CHECK(cudaMemcpy(d.as<void>(), host, bytes, cudaMemcpyHostToDevice));
    return d;
}

std::vector<float> download_bf16(const device_buffer& d, size_t n) {
    std::vector<uint16_t> bits(n);
    ZMOE_CUDA_CHECK(cudaMemcpy(bits.data(), d.as<void>(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    std::vector<float> out;
    out.reserve(n);
    for (uint16_t b : bits) out.push_back(from_bf16_bits(b));
    return out;
}

/// DeepSeek-V2-Lite's attention shape on a narrow residual stream: the deepseek_v2 fixture's config with the
/// latent, head and rope dims of the real model (no q LoRA), two layers.
model_config latent_shape_config(const zmoe::testing::temp_dir& dir) {
    nlohmann::json c = nlohmann::json::parse(std::ifstream(zmoe::testing::fixture_dir("deepseek_v2") + "/config.json"));
    c["hidden_size"] = 256;
    c["num_attention_heads"] = 16;
    c["num_key_value_heads"] = 16;
    c["kv_lora_rank"] = 512;
    c["qk_rope_head_dim"] = 64;
    c["qk_nope_head_dim"] = 128;
    c["qk_head_dim"] = 192;
    c["v_head_dim"] = 128;
    c["head_dim"] = 64;
    c["q_lora_rank"] = nullptr;
    c["num_hidden_layers"] = 2;
    std::ofstream(dir.file("config.json")) << c.dump(2);
    return model_config::load(dir.str());
}

TEST(CudaMlaDecode, TensorCorePathMatchesTheFp32LatentPath) {
    const zmoe::testing::temp_dir dir;
    const model_config c = latent_shape_config(dir);
    ASSERT_TRUE(kernels::mla_decode_supported(static_cast<int32_t>(c.mla.kv_lora_rank),
                                              static_cast<int32_t>(c.mla.qk_rope_head_dim)));
    const cuda_weights w =
        cuda_weights::dummy(c, expert_placement::initial(c.num_moe_layers(), c.num_experts, 0, 1), 0);
    const cuda_layer& layer = w.layers.at(1);
    constexpr int32_t kBlock = 16, kMaxSeqs = 64, kMaxLen = 1100;
    const auto H = static_cast<size_t>(c.hidden_size);
    const size_t width = static_cast<size_t>(c.mla.kv_lora_rank + c.mla.qk_rope_head_dim);
    mla_attention_runner tc(c, kMaxSeqs, kMaxSeqs, kMaxLen, 0, true);
    mla_attention_runner fp32(c, kMaxSeqs, kMaxSeqs, kMaxLen, 0, false);
    cublasLtHandle_t handle = nullptr;
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&handle));
    device_buffer blas_ws(32u << 20);
    const gemm_context g{.handle = handle, .workspace = blas_ws.as<void>(), .workspace_bytes = blas_ws.bytes()};
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);

    for (const std::vector<int32_t>& positions :
         {std::vector<int32_t>{1000}, std::vector<int32_t>{0, 31, 33}, std::vector<int32_t>(40, 0)}) {
        std::vector<int32_t> pos = positions;
        if (pos.size() == 40)
            for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(rng() % 1000);
        const auto B = static_cast<int32_t>(pos.size());
        const int32_t max_blocks = (kMaxLen + kBlock - 1) / kBlock;
        // Sequence s owns blocks [s max_blocks, (s + 1) max_blocks) in reverse order; the cache is random.
        std::vector<int32_t> tables(static_cast<size_t>(B) * max_blocks), query_start(B + 1), slots(B);
        for (int32_t s = 0; s < B; ++s) {
            for (int32_t b = 0; b < max_blocks; ++b) tables[s * max_blocks + b] = (s + 1) * max_blocks - 1 - b;
            query_start[s + 1] = s + 1;
            slots[s] = tables[s * max_blocks + pos[s] / kBlock] * kBlock + pos[s] % kBlock;
        }
        const size_t cache_elems = static_cast<size_t>(B) * max_blocks * kBlock * width;
        std::vector<uint16_t> cache_host(cache_elems), xn_host(static_cast<size_t>(B) * H);
        for (auto& v : cache_host) v = to_bf16_bits(normal(rng));
        for (auto& v : xn_host) v = to_bf16_bits(normal(rng));
        device_buffer cache_tc = upload(cache_host.data(), cache_elems * 2);
        device_buffer cache_fp32 = upload(cache_host.data(), cache_elems * 2);
        device_buffer xn = upload(xn_host.data(), xn_host.size() * 2);
        device_buffer d_pos = upload(pos.data(), pos.size() * 4), d_slots = upload(slots.data(), slots.size() * 4);
        device_buffer d_tables = upload(tables.data(), tables.size() * 4);
        device_buffer d_qs = upload(query_start.data(), query_start.size() * 4);
        device_buffer out_tc(static_cast<size_t>(B) * H * 2), out_fp32(static_cast<size_t>(B) * H * 2);
        const mla_host_step h{.query_start = query_start,
                              .start_pos = pos,
                              .block_tables = tables.data(),
                              .block_size = kBlock,
                              .max_blocks_per_seq = max_blocks};
        const mla_step s{.positions = d_pos.as<int32_t>(),
                         .kv_slots = d_slots.as<int32_t>(),
                         .block_tables = d_tables.as<int32_t>(),
                         .query_start = d_qs.as<int32_t>(),
                         .start_pos = d_pos.as<int32_t>(),
                         .num_tokens = B,
                         .num_seqs = B,
                         .block_size = kBlock,
                         .max_blocks_per_seq = max_blocks};
        tc.prepare(h, nullptr);
        fp32.prepare(h, nullptr);
        ASSERT_TRUE(tc.plan().decode_only);
        tc.run(layer, s, xn.as<bf16>(), cache_tc.as<bf16>(), out_tc.as<bf16>(), g, nullptr);
        fp32.run(layer, s, xn.as<bf16>(), cache_fp32.as<bf16>(), out_fp32.as<bf16>(), g, nullptr);
        ZMOE_CUDA_CHECK(cudaDeviceSynchronize());
        // The same step captured in a graph (as the executor's decode graphs capture it) and replayed on a fresh copy
        // of the cache: bit for bit the eager output.
        {
            device_buffer cache_graph = upload(cache_host.data(), cache_elems * 2);
            device_buffer out_graph(static_cast<size_t>(B) * H * 2);
            cudaStream_t stream = nullptr;
            ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            cudaGraph_t graph = nullptr;
            cudaGraphExec_t exec = nullptr;
            ZMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            tc.run(layer, s, xn.as<bf16>(), cache_graph.as<bf16>(), out_graph.as<bf16>(), g, stream);
            ZMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            ZMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            ZMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
            EXPECT_EQ(download_bf16(out_graph, static_cast<size_t>(B) * H),
                      download_bf16(out_tc, static_cast<size_t>(B) * H))
                << B << " sequences: graph replay";
            ZMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
            ZMOE_CUDA_CHECK(cudaGraphDestroy(graph));
            ZMOE_CUDA_CHECK(cudaStreamDestroy(stream));
        }
        const std::vector<float> got = download_bf16(out_tc, static_cast<size_t>(B) * H);
        const std::vector<float> want = download_bf16(out_fp32, static_cast<size_t>(B) * H);
        double err = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
            err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
            scale = std::max(scale, std::abs(static_cast<double>(want[i])));
        }
        ASSERT_GT(scale, 0);
        // BF16 latents (q_lat, o_lat) and probabilities against fp32 ones: a few BF16 roundings.
        EXPECT_LT(err / scale, 2e-2) << B << " sequences";
        std::printf("[cuda] MLA decode, %d sequences: tensor-core path vs fp32 latents, max relative error %.3g\n", B,
                    err / scale);
    }
    ZMOE_CUBLAS_CHECK(cublasLtDestroy(handle));
}

}  // namespace
}  // namespace zmoe::cuda
