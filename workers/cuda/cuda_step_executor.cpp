#include "workers/cuda/cuda_step_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/check.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/cuda/worker_kernels.hpp"
#include "workers/step_validation.hpp"

namespace zmoe {

std::unique_ptr<step_executor> make_cuda_step_executor(const std::string& model_dir, const executor_options& options,
                                                       const expert_placement& placement) {
    return std::make_unique<cuda::cuda_step_executor>(model_dir, options, placement);
}

std::string make_nccl_unique_id() { return cuda::nccl_unique_id_bytes(); }

}  // namespace zmoe

namespace zmoe::cuda {
namespace {

using kernels::bf16;

// Device memory kept out of the KV budget for activations and cuBLASLt: steps grow their scratch on demand.
constexpr int64_t kActivationReserve = 512ll << 20;
constexpr size_t kBlasWorkspace = 32u << 20;

/// Rejects configurations the kernels cannot run, at load time rather than as an abort mid-step.
void check_supported(const model_config& c) {
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw error(errc::unsupported, std::string("CUDA backend: ") + model_arch_name(c.arch) + ": " + what);
    };
    need(!c.is_mla(),
         "multi-head latent attention (deepseek_v2 / deepseek_v3) is not implemented on the GPU yet; "
         "run it with --device cpu");
    need(c.router == router_kind::softmax_topk && c.routed_scaling_factor == 1.0,
         "only the softmax top-k router is implemented on the GPU");
    need(c.hidden_size % 8 == 0, "hidden_size must be a multiple of 8");
    need(c.head_dim == 16 || c.head_dim == 32 || c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256,
         "head_dim must be 16, 32, 64, 128 or 256");
    need(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads");
    need(c.num_experts <= 512, "at most 512 experts (router kernel)");
    need(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= 16, "num_experts_per_tok in [1, 16]");
    need(c.moe_intermediate_size % 8 == 0, "moe_intermediate_size must be a multiple of 8");
}

}  // namespace

struct cuda_step_executor::host_batch {
    std::vector<int32_t> tokens, positions, slots;
    std::vector<int32_t> query_start{0}, start_pos, block_tables;
    int32_t max_blocks = 0;
    std::vector<int32_t> logit_rows;
    sample_batch samples;  // one row per logit row
    std::vector<uint64_t> sample_ids;
    int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
    int32_t num_seqs() const { return static_cast<int32_t>(start_pos.size()); }
};

void cuda_step_executor::check(cudaError_t e) { ZMOE_CUDA_CHECK(e); }

cuda_step_executor::cuda_step_executor(const std::string& model_dir, const executor_options& options,
                                       const expert_placement& placement)
    : config_(model_config::load(model_dir)), options_(options), placement_(placement) {
    check_supported(config_);
    if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size)
        throw error(errc::invalid_argument,
                    "rank " + std::to_string(options.rank) + " of world " + std::to_string(options.world_size));
    if (placement_.world_size() != options.world_size)
        throw error(errc::invalid_argument, "expert placement spans " + std::to_string(placement_.world_size()) +
                                                " ranks, world size is " + std::to_string(options.world_size));
    if (options.block_size <= 0) throw error(errc::invalid_argument, "block_size must be positive");
    int num_devices = 0;
    if (cudaGetDeviceCount(&num_devices) != cudaSuccess || num_devices == 0) {
        (void)cudaGetLastError();
        throw error(errc::unsupported, "--device cuda: no CUDA device is visible");
    }
    device_ = options.rank % num_devices;
    check(cudaSetDevice(device_));
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    sampler_ = std::make_unique<cuda_sampler>(static_cast<int32_t>(config_.vocab_size));
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&blas_));
    blas_workspace_ = device_buffer(kBlasWorkspace);
    {
        const model_weights host(model_dir, config_, placement_, options.rank);
        weights_ = cuda_weights::upload(host);
    }  // unmaps the checkpoint
    if (options.world_size > 1)
        comm_ = std::make_unique<nccl_comm>(options.collective_id, options.rank, options.world_size);

    const int64_t block_bytes =
        2 * options.block_size * config_.num_kv_heads * config_.head_dim * static_cast<int64_t>(sizeof(bf16));
    if (options.num_kv_blocks > 0) {
        num_kv_blocks_ = options.num_kv_blocks;
    } else {
        size_t free_bytes = 0, total_bytes = 0;
        check(cudaMemGetInfo(&free_bytes, &total_bytes));
        const auto used = static_cast<int64_t>(total_bytes - free_bytes);
        const auto budget = static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(total_bytes)) -
                            used - kActivationReserve;
        num_kv_blocks_ = std::max<int64_t>(0, budget / (block_bytes * config_.num_layers));
        if (num_kv_blocks_ == 0)
            throw error(errc::out_of_memory, "GPU " + std::to_string(device_) + ": no room for one KV block after " +
                                                 std::to_string(weights_.bytes >> 20) +
                                                 " MiB of weights at gpu_memory_utilization " +
                                                 std::to_string(options.gpu_memory_utilization));
    }
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        k_cache_.emplace_back(static_cast<size_t>(num_kv_blocks_ * block_bytes / 2));
        v_cache_.emplace_back(static_cast<size_t>(num_kv_blocks_ * block_bytes / 2));
    }
    ZMOE_LOG(info, "cuda worker " << options.rank << " on GPU " << device_ << ": " << (weights_.bytes >> 20)
                                  << " MiB weights, " << num_kv_blocks_ << " KV blocks (" << (kv_cache_bytes() >> 20)
                                  << " MiB)");
}

cuda_step_executor::~cuda_step_executor() {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    comm_.reset();
    if (blas_) cublasLtDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
}

int64_t cuda_step_executor::kv_cache_bytes() const {
    int64_t n = 0;
    for (size_t l = 0; l < k_cache_.size(); ++l) n += static_cast<int64_t>(k_cache_[l].bytes() + v_cache_[l].bytes());
    return n;
}

cuda_step_executor::host_batch cuda_step_executor::prepare(const step_request& request) {
    const auto tokens = validate_step(request, options_.block_size, num_kv_blocks_, config_.vocab_size, last_sampled_);
    host_batch b;
    b.samples = gather_samples(request, tokens, history_, b.sample_ids);
    const int64_t bs = options_.block_size;
    for (size_t i = 0; i < request.seqs.size(); ++i) {
        const scheduled_seq& s = request.seqs[i];
        b.tokens.insert(b.tokens.end(), tokens[i].begin(), tokens[i].end());
        const auto n = static_cast<int32_t>(s.token_ids.size());
        const size_t at = b.positions.size();
        b.positions.resize(at + n);
        b.slots.resize(at + n);
        kernels::kv_slots_plan(s.block_table, s.start_pos, n, static_cast<int32_t>(bs), b.positions.data() + at,
                               b.slots.data() + at);
        b.start_pos.push_back(s.start_pos);
        b.query_start.push_back(b.num_tokens());
        b.max_blocks = std::max(b.max_blocks, static_cast<int32_t>(s.block_table.size()));
        if (s.do_sample) b.logit_rows.push_back(b.num_tokens() - 1);
    }
    b.block_tables.assign(static_cast<size_t>(b.num_seqs()) * b.max_blocks, 0);
    for (size_t i = 0; i < request.seqs.size(); ++i)
        std::copy(request.seqs[i].block_table.begin(), request.seqs[i].block_table.end(),
                  b.block_tables.begin() + static_cast<int64_t>(i) * b.max_blocks);
    return b;
}

void cuda_step_executor::gemm(const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k, bool y_fp32) {
    kernels::gemm_bf16_params g;
    g.handle = blas_;
    g.workspace = blas_workspace_.as<void>();
    g.workspace_bytes = kBlasWorkspace;
    g.x = static_cast<const bf16*>(x);
    g.w = static_cast<const bf16*>(w);
    g.y = y;
    g.m = m;
    g.n = n;
    g.k = k;
    g.y_fp32 = y_fp32;
    kernels::launch_gemm_bf16(g, stream_);
}

void cuda_step_executor::attention(int64_t layer, const host_batch& b) {
    const model_config& c = config_;
    const cuda_layer& w = weights_.layers[layer];
    const int32_t T = b.num_tokens(), H = static_cast<int32_t>(c.hidden_size), D = static_cast<int32_t>(c.head_dim);
    const int32_t hq = static_cast<int32_t>(c.num_heads), hkv = static_cast<int32_t>(c.num_kv_heads);
    const int32_t qkv_dim = (hq + 2 * hkv) * D;
    bf16* xn = scratch<bf16>("xn", size_t(T) * H);
    bf16* qkv = scratch<bf16>("qkv", size_t(T) * qkv_dim);
    bf16* q = scratch<bf16>("q", size_t(T) * hq * D);
    bf16* attn = scratch<bf16>("attn", size_t(T) * hq * D);
    gemm(xn, w.qkv.as<bf16>(), qkv, T, qkv_dim, H);
    if (!w.qkv_bias.empty()) launch_add_bias(qkv, w.qkv_bias.as<bf16>(), T, qkv_dim, stream_);

    kernels::rope_qk_norm_kv_params r;
    r.qkv = qkv;
    r.positions = scratch<int32_t>("positions", T);
    r.slot_mapping = scratch<int32_t>("slots", T);
    r.q_out = q;
    r.k_cache = k_cache_[layer].as<bf16>();
    r.v_cache = v_cache_[layer].as<bf16>();
    r.num_tokens = T;
    r.num_q_heads = hq;
    r.num_kv_heads = hkv;
    r.head_dim = D;
    r.block_size = static_cast<int32_t>(options_.block_size);
    r.rope_theta = static_cast<float>(c.rope_theta);
    r.eps = c.rms_norm_eps;
    if (c.clip_qkv > 0.f) {
        // OLMoE clamps after the q/k norms and before RoPE: the fused kernel has no clamp, so norm here.
        launch_qk_norm_clip(qkv, w.q_norm.as<bf16>(), w.k_norm.as<bf16>(), T, hq, hkv, D,
                            c.qk_norm == qk_norm_kind::per_head, c.rms_norm_eps, c.clip_qkv, stream_);
    } else if (c.qk_norm != qk_norm_kind::none) {
        r.norm = c.qk_norm == qk_norm_kind::per_head ? kernels::qk_norm_mode::per_head : kernels::qk_norm_mode::whole;
        r.q_norm_weight = w.q_norm.as<bf16>();
        r.k_norm_weight = w.k_norm.as<bf16>();
    }
    kernels::launch_rope_qk_norm_kv(r, stream_);

    kernels::paged_attention_params p;
    p.q = q;
    p.k_cache = r.k_cache;
    p.v_cache = r.v_cache;
    p.block_tables = scratch<int32_t>("block_tables", b.block_tables.size());
    p.query_start = scratch<int32_t>("query_start", b.query_start.size());
    p.start_pos = scratch<int32_t>("start_pos", b.start_pos.size());
    p.work_items = scratch<int32_t>("work_items", 2 * static_cast<size_t>(num_work_items_));  // planned in forward()
    p.out = attn;
    p.num_seqs = b.num_seqs();
    p.num_work_items = num_work_items_;
    p.num_q_heads = hq;
    p.num_kv_heads = hkv;
    p.head_dim = D;
    p.block_size = static_cast<int32_t>(options_.block_size);
    p.max_blocks_per_seq = b.max_blocks;
    p.scale = 1.f / std::sqrt(static_cast<float>(D));
    kernels::launch_paged_attention(p, stream_);

    bf16* delta = scratch<bf16>("delta", size_t(T) * H);
    gemm(attn, w.o.as<bf16>(), delta, T, H, hq * D);
    if (!w.o_bias.empty()) launch_add_bias(delta, w.o_bias.as<bf16>(), T, H, stream_);
}

void cuda_step_executor::dense_mlp(const cuda_mlp& m, const bf16* x, int32_t T, bf16* out) {
    const auto H = static_cast<int32_t>(config_.hidden_size), I = static_cast<int32_t>(m.inter);
    bf16* gu = scratch<bf16>("mlp_gate_up", size_t(T) * 2 * I);
    bf16* act = scratch<bf16>("mlp_act", size_t(T) * I);
    gemm(x, m.gate_up.as<bf16>(), gu, T, 2 * I, H);
    launch_silu_mul(gu, act, T, I, stream_);
    gemm(act, m.down.as<bf16>(), out, T, H, I);
}

void cuda_step_executor::moe(int64_t layer, int32_t T, std::vector<uint32_t>& expert_counts) {
    const model_config& c = config_;
    const cuda_layer& w = weights_.layers[layer];
    const int64_t mi = w.moe_index;
    const auto H = static_cast<int32_t>(c.hidden_size), E = static_cast<int32_t>(c.num_experts);
    const auto K = static_cast<int32_t>(c.num_experts_per_tok), I = static_cast<int32_t>(c.moe_intermediate_size);
    const int32_t S = w.num_slots;
    const int world = options_.world_size;
    const int64_t TK = int64_t(T) * K;
    bf16* xn = scratch<bf16>("xn", size_t(T) * H);
    bf16* delta = scratch<bf16>("delta", size_t(T) * H);
    float* topk_w = scratch<float>("topk_weights", TK);

    // Route, then plan the dispatch on the host. plan = [token of each sent row | its slot on the destination rank
    // | for each (token, k) the sent row holding it]; rows are grouped by destination rank, in (token, k) order.
    std::vector<int64_t> send_rows(world, 0);
    std::vector<int32_t> plan(3 * TK);
    if (T > 0) {
        float* logits = scratch<float>("router_logits", size_t(T) * E);
        int32_t* ids = scratch<int32_t>("topk_ids", TK);
        gemm(xn, w.router.as<bf16>(), logits, T, E, H, true);
        kernels::launch_router_topk(
            {logits, ids, topk_w, scratch<int32_t>("expert_counts", E), T, E, K, c.norm_topk_prob}, stream_);
        std::vector<int32_t> ids_h(TK);
        check(cudaMemcpyAsync(ids_h.data(), ids, TK * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
        check(cudaStreamSynchronize(stream_));
        std::vector<int32_t> dst(TK), slot(TK);
        for (int64_t i = 0; i < TK; ++i) {
            const int32_t e = ids_h[i];
            ZMOE_CHECK(e >= 0 && e < E, "router picked expert " << e);
            ++expert_counts[mi * E + e];
            const expert_replica& rep = placement_.pick(mi, e, i / K);
            dst[i] = rep.rank;
            slot[i] = rep.slot;
            ++send_rows[rep.rank];
        }
        std::vector<int64_t> next(world, 0);
        for (int r = 1; r < world; ++r) next[r] = next[r - 1] + send_rows[r - 1];
        for (int64_t i = 0; i < TK; ++i) {
            const int64_t pos = next[dst[i]]++;
            plan[pos] = static_cast<int32_t>(i / K);
            plan[TK + pos] = slot[i];
            plan[2 * TK + i] = static_cast<int32_t>(pos);
        }
    }
    int32_t* plan_d = upload("moe_plan", plan);
    bf16* send_x = scratch<bf16>("send_x", TK * H);
    launch_gather_rows(xn, plan_d, send_x, static_cast<int32_t>(TK), H, stream_);

    // Dispatch: every rank takes part, with zero rows too.
    std::vector<int64_t> recv_rows = comm_ ? comm_->exchange_counts(send_rows, stream_) : send_rows;
    int64_t R = 0;
    for (int64_t n : recv_rows) R += n;
    bf16* recv_x = send_x;
    int32_t* recv_slot = plan_d + TK;
    auto bytes = [](const std::vector<int64_t>& rows, int64_t per_row) {
        std::vector<int64_t> b(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) b[i] = rows[i] * per_row;
        return b;
    };
    const int64_t row_bytes = int64_t(H) * sizeof(bf16);
    if (comm_) {
        recv_x = scratch<bf16>("recv_x", R * H);
        recv_slot = scratch<int32_t>("recv_slot", R);
        comm_->all_to_all(send_x, bytes(send_rows, row_bytes), recv_x, bytes(recv_rows, row_bytes), stream_);
        comm_->all_to_all(plan_d + TK, bytes(send_rows, sizeof(int32_t)), recv_slot, bytes(recv_rows, sizeof(int32_t)),
                          stream_);
    }

    // This rank's experts over every received row: permute by slot, gate/up with SiLU·up, down, un-permute.
    bf16* y_recv = scratch<bf16>("y_recv", R * H);
    if (R > 0) {
        const auto Ri = static_cast<int32_t>(R);
        const int32_t align = kernels::moe_row_align_for(Ri, 1, S);
        const int32_t max_rows = kernels::moe_permuted_rows_bound(Ri, 1, S, align);
        kernels::moe_permute_params pp;
        pp.topk_ids = recv_slot;
        pp.x = recv_x;
        pp.expert_offsets = scratch<int32_t>("perm_offsets", S + 1);
        pp.dest_rows = scratch<int32_t>("perm_dest", R);
        pp.row_token = scratch<int32_t>("perm_row_token", max_rows);
        pp.x_permuted = scratch<bf16>("perm_x", size_t(max_rows) * H);
        pp.workspace = scratch<std::byte>("perm_ws", kernels::moe_permute_workspace_bytes(Ri, 1, S));
        pp.num_tokens = Ri;
        pp.top_k = 1;
        pp.num_experts = S;
        pp.hidden = H;
        pp.row_align = align;
        pp.max_rows = max_rows;
        kernels::launch_moe_permute(pp, stream_);
        bf16* act = scratch<bf16>("perm_act", size_t(max_rows) * I);
        bf16* yp = scratch<bf16>("perm_y", size_t(max_rows) * H);
        kernels::launch_grouped_gemm(
            {pp.x_permuted, w.experts_gate_up.as<bf16>(), pp.expert_offsets, act, max_rows, I, H, S, align, true},
            stream_);
        kernels::launch_grouped_gemm(
            {act, w.experts_down.as<bf16>(), pp.expert_offsets, yp, max_rows, H, I, S, align, false}, stream_);
        // Weight 1 per row: the un-permute is exact, the routing weights are applied on the token's own rank.
        const float* ones = upload("ones", std::vector<float>(static_cast<size_t>(R), 1.f));
        kernels::launch_moe_combine({yp, pp.dest_rows, ones, y_recv, Ri, 1, H}, stream_);
    }

    // Combine: rows back to their ranks, then the weighted sum in top-k order.
    bf16* y_back = y_recv;
    if (comm_) {
        y_back = scratch<bf16>("y_back", TK * H);
        comm_->all_to_all(y_recv, bytes(recv_rows, row_bytes), y_back, bytes(send_rows, row_bytes), stream_);
    }
    if (T == 0) return;
    kernels::launch_moe_combine({y_back, plan_d + 2 * TK, topk_w, delta, T, K, H}, stream_);
    if (w.has_shared) {
        bf16* shared = scratch<bf16>("shared_out", size_t(T) * H);
        dense_mlp(w.shared, xn, T, shared);
        float* gate = scratch<float>("shared_gate", T);
        gemm(xn, w.shared_gate.as<bf16>(), gate, T, 1, H, true);
        launch_add_gated(delta, shared, gate, T, H, stream_);
    }
}

void cuda_step_executor::forward(const host_batch& b, std::vector<uint32_t>& expert_counts) {
    const model_config& c = config_;
    const int32_t T = b.num_tokens();
    const auto H = static_cast<int32_t>(c.hidden_size), V = static_cast<int32_t>(c.vocab_size);
    bf16* residual = scratch<bf16>("residual", size_t(T) * H);
    bf16* xn = scratch<bf16>("xn", size_t(T) * H);
    bf16* delta = scratch<bf16>("delta", size_t(T) * H);
    if (T > 0) {
        const int32_t* tokens = upload("tokens", b.tokens);
        upload("positions", b.positions);
        upload("slots", b.slots);
        upload("block_tables", b.block_tables);
        upload("query_start", b.query_start);
        upload("start_pos", b.start_pos);
        const std::vector<int32_t> items = kernels::paged_attention_plan(
            b.query_start, static_cast<int32_t>(c.num_heads), static_cast<int32_t>(c.num_kv_heads));
        upload("work_items", items);
        num_work_items_ = static_cast<int32_t>(items.size() / 2);
        kernels::launch_embedding({tokens, weights_.embed.as<bf16>(), residual, T, H, V}, stream_);
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const cuda_layer& w = weights_.layers[l];
        if (T > 0) {
            // The residual stream: layer 0 normalises the embeddings, later layers add the last MLP output first.
            kernels::launch_rms_norm({l == 0 ? residual : delta, l == 0 ? nullptr : residual, w.input_norm.as<bf16>(),
                                      xn, T, H, c.rms_norm_eps},
                                     stream_);
            attention(l, b);
            kernels::launch_rms_norm({delta, residual, w.post_norm.as<bf16>(), xn, T, H, c.rms_norm_eps}, stream_);
        }
        if (w.moe_index >= 0)
            moe(l, T, expert_counts);  // a collective: joined with no tokens too
        else if (T > 0)
            dense_mlp(w.dense, xn, T, delta);
    }
    const auto R = static_cast<int32_t>(b.logit_rows.size());
    if (T == 0 || R == 0) return;
    kernels::launch_rms_norm({delta, residual, weights_.final_norm.as<bf16>(), xn, T, H, c.rms_norm_eps}, stream_);
    bf16* last = scratch<bf16>("last_rows", size_t(R) * H);
    launch_gather_rows(xn, upload("logit_rows", b.logit_rows), last, R, H, stream_);
    float* logits = scratch<float>("logits", size_t(R) * V);
    gemm(last, weights_.head().as<bf16>(), logits, R, V, H, true);
    sampler_->sample(logits, stream_);
}

step_result cuda_step_executor::execute(const step_request& request, std::vector<std::vector<float>>* logits_out) {
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaSetDevice(device_));
    for (uint64_t id : request.finished_ids) last_sampled_.erase(id);
    step_result result;
    result.step_id = request.step_id;
    result.rank = options_.rank;
    result.expert_counts.assign(static_cast<size_t>(config_.num_moe_layers() * config_.num_experts), 0);
    host_batch batch;
    try {
        batch = prepare(request);
    } catch (const error&) {
        // Keep the collective whole: the other ranks are already waiting in this step's exchanges.
        forward(host_batch{}, result.expert_counts);
        check(cudaStreamSynchronize(stream_));
        throw;
    }
    sampler_->upload(std::move(batch.samples), stream_);
    forward(batch, result.expert_counts);
    const size_t R = batch.logit_rows.size();
    std::vector<float> logits;
    if (R > 0) {
        sampler_->download(stream_);
        if (logits_out) {
            logits.resize(R * config_.vocab_size);
            check(cudaMemcpyAsync(logits.data(), scratch<float>("logits", logits.size()), logits.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
        }
    }
    check(cudaStreamSynchronize(stream_));
    if (logits_out) logits_out->clear();
    if (R > 0) result.tokens = sampler_->results(batch.sample_ids);
    for (size_t out = 0; out < result.tokens.size(); ++out) {
        last_sampled_[result.tokens[out].request_id] = result.tokens[out].token_id;
        if (logits_out)
            logits_out->emplace_back(logits.begin() + static_cast<int64_t>(out * config_.vocab_size),
                                     logits.begin() + static_cast<int64_t>((out + 1) * config_.vocab_size));
    }
    result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

}  // namespace zmoe::cuda
