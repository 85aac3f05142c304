#include "workers/cuda/cuda_step_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "base/check.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "kernels/api.hpp"
#include "kernels/cuda_check.hpp"
#include "workers/micro_batch.hpp"
#include "workers/step_validation.hpp"

namespace zmoe {

std::unique_ptr<step_executor> make_cuda_step_executor(const executor_options& options,
                                                       const expert_placement& placement) {
    return std::make_unique<cuda::cuda_step_executor>(options, placement);
}

std::string make_nccl_unique_id() { return cuda::nccl_unique_id_bytes(); }

}  // namespace zmoe

namespace zmoe::cuda {
namespace {

using kernels::bf16;

constexpr size_t kBlasWorkspace = 32u << 20;

/// The model's config with `--quantization` applied (an unknown value refused by name).
model_config with_quantization(model_config c, const std::string& flag) {
    c.apply_quantization_flag(flag);
    return c;
}

/// Rejects configurations the kernels cannot run, at load time rather than as an abort mid-step.
void check_supported(const model_config& c) {
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw error(errc::unsupported, std::string("CUDA backend: ") + model_arch_name(c.arch) + ": " + what);
    };
    check_deepseek_supported(c);  // MLA and the group-limited routers
    need(c.hidden_size % 8 == 0, "hidden_size must be a multiple of 8");
    need(c.is_mla() || c.head_dim == 16 || c.head_dim == 32 || c.head_dim == 64 || c.head_dim == 128 ||
             c.head_dim == 256,
         "head_dim must be 16, 32, 64, 128 or 256");
    need(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads");
    need(c.num_experts <= 512, "at most 512 experts (router kernel)");
    need(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= 16, "num_experts_per_tok in [1, 16]");
    need(c.moe_intermediate_size % 8 == 0, "moe_intermediate_size must be a multiple of 8");
    // FP8 (docs/fp8.md): the activation quantization and the FP8 GEMMs take rows of a multiple of 16 channels; the
    // FFN widths and projection outputs are zero-padded at load, the residual stream cannot be.
    need(!c.quantization.fp8() || c.hidden_size % 16 == 0, "FP8 needs hidden_size a multiple of 16");
}

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

}  // namespace

std::vector<int32_t> decode_graph_batch_sizes(int32_t max_num_seqs) {
    std::vector<int32_t> sizes;
    for (int32_t b = 1; b <= std::min(max_num_seqs, 8); b *= 2) sizes.push_back(b);
    for (int32_t b = 16; b <= max_num_seqs; b += b < 64 ? 8 : b < 256 ? 16 : 32) sizes.push_back(b);
    if (max_num_seqs >= 1 && sizes.back() != max_num_seqs) sizes.push_back(max_num_seqs);
    return sizes;
}

void cuda_step_executor::check(cudaError_t e) { ZMOE_CUDA_CHECK(e); }

cuda_step_executor::cuda_step_executor(const executor_options& options, const expert_placement& placement)
    : config_(with_quantization(options.model, options.config.quantization)),
      options_(options),
      placement_(placement),
      masks_(options.config.grammar_tokenizer.empty() ? options.config.model : options.config.grammar_tokenizer,
             options.model.eos_token_ids, static_cast<int32_t>(options.model.vocab_size), 4) {
    const engine_config& run = options.config;
    const int world_size = options.world_size();
    // Every step holds at most this many tokens (a decode of max_num_seqs sequences included).
    const int32_t max_tokens = std::max(run.max_num_batched_tokens, run.max_num_seqs);
    check_supported(config_);
    if (world_size <= 0 || options.rank < 0 || options.rank >= world_size)
        throw error(errc::invalid_argument,
                    "rank " + std::to_string(options.rank) + " of world " + std::to_string(world_size));
    if (placement_.num_ranks != world_size)
        throw error(errc::invalid_argument, "expert placement spans " + std::to_string(placement_.num_ranks) +
                                                " ranks, world size is " + std::to_string(world_size));
    if (run.block_size <= 0) throw error(errc::invalid_argument, "block_size must be positive");
    if (run.max_num_seqs <= 0 || max_tokens < run.max_num_seqs)
        throw error(errc::invalid_argument, "max_num_seqs must be in [1, max_num_batched_tokens]");
    if (run.load_format != "auto" && run.load_format != "dummy")
        throw error(errc::invalid_argument, "load format '" + run.load_format + "' (auto or dummy)");
    int num_devices = 0;
    if (cudaGetDeviceCount(&num_devices) != cudaSuccess || num_devices == 0) {
        (void)cudaGetLastError();
        throw error(errc::unsupported, "--device cuda: no CUDA device is visible");
    }
    device_ = options.rank % num_devices;
    check(cudaSetDevice(device_));
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZMOE_CUBLAS_CHECK(cublasLtCreate(&blas_));
    blas_workspace_ = device_buffer(kBlasWorkspace);
    if (run.load_format == "dummy") {
        weights_ = cuda_weights::dummy(config_, placement_, options.rank);
        apply_dummy_router_skew(weights_, config_, run.dummy_router_skew);  // EPLB hook: hot experts on request
    } else {
        if (run.dummy_router_skew != 0)
            throw error(errc::invalid_argument, "--dummy-router-skew needs --load-format dummy");
        const model_weights host(run.model, config_, placement_, options.rank);
        weights_ = cuda_weights::upload(host);
    }  // unmaps the checkpoint
    if (world_size > 1) comm_ = std::make_unique<nccl_comm>(options.collective_id, options.rank, world_size);
    // EPLB hook: the expert mover's communicator is joined now rather than at the first rebalance.
    if (run.enable_eplb) mover_ = std::make_unique<cuda_expert_mover>(options.rank, comm_.get(), stream_);

    const int64_t bs = run.block_size;
    const int64_t max_len = run.max_model_len > 0 ? run.max_model_len : config_.max_position_embeddings;
    int64_t dense_inter = 0;
    int32_t num_slots = 0;
    for (const cuda_layer& l : weights_.layers) {
        dense_inter = std::max({dense_inter, l.dense.inter, l.has_shared ? l.shared.inter : int64_t{0}});
        num_slots = std::max(num_slots, l.num_slots);
    }
    workspace_shape shape{
        .max_tokens = max_tokens,
        .max_seqs = run.max_num_seqs,
        .max_blocks_per_seq = i32(std::max<int64_t>(1, (std::max<int64_t>(max_len, 1) + bs - 1) / bs)),
        .max_kv_len = i32(std::max<int64_t>(1, (std::max<int64_t>(max_len, 1) + bs - 1) / bs) * bs),
        .hidden = i32(config_.hidden_size),
        .num_q_heads = i32(config_.num_heads),
        .num_kv_heads = i32(config_.num_kv_heads),
        .head_dim = config_.is_mla() ? 0 : i32(config_.head_dim),  // MLA: its own buffers (mla_attention_runner)
        .vocab_size = i32(config_.vocab_size),
        .num_experts = i32(config_.num_experts),
        .top_k = i32(config_.num_experts_per_tok),
        .num_slots = num_slots,
        .moe_inter = i32(config_.moe_intermediate_size),
        .dense_inter = i32(dense_inter),
        .num_moe_layers = i32(config_.num_moe_layers()),
        .world_size = world_size,
    };
    for (const cuda_layer& l : weights_.layers)
        if (l.fp8_experts()) shape.fp8_moe_inter = std::max(shape.fp8_moe_inter, l.fp8.inter_pad);
    ws_ = cuda_workspace(shape);
    if (weights_.fp8) {
        fp8_ = fp8_linear_runner(fp8_linear_dims_of(weights_, max_tokens));
        for (const cuda_layer& l : weights_.layers) {
            if (l.moe_index < 0) continue;
            fp8_moe_.push_back({});
            if (!l.fp8_experts()) continue;
            fp8_moe_.back() = {.w_gate_up = l.fp8.experts_gate_up.as<uint8_t>(),
                               .w_gate_up_scales = l.fp8.experts_gate_up_scales.as<float>(),
                               .w_down = l.fp8.experts_down.as<uint8_t>(),
                               .w_down_scales = l.fp8.experts_down_scales.as<float>(),
                               .x_q = ws_.fp8_x_q.as<uint8_t>(),
                               .x_scales = ws_.fp8_x_scales.as<float>(),
                               .act_q = ws_.fp8_act_q.as<uint8_t>(),
                               .act_scales = ws_.fp8_act_scales.as<float>()};
        }
    }
    if (comm_) {
        // The fixed exchange holds a decode graph's largest batch (or either micro-batch of it); with DBO on, a
        // whole prefill step too, so that its micro-batches can overlap (the exact path runs them one by one).
        // An FP8 model whose MoE layers all run FP8 experts dispatches FP8 records (docs/fp8.md) on the NCCL paths;
        // peer to peer it sends BF16 rows, the FP8 copy kernel being the slower one there today.
        const bool p2p = options.ep_peer_to_peer && run.num_nodes <= 1 &&
                         ep_transport_mode_of(run.ep_transport) == ep_transport_mode::automatic;
        const bool fp8_moe = !fp8_moe_.empty() && std::all_of(fp8_moe_.begin(), fp8_moe_.end(),
                                                              [](const auto& f) { return f.w_gate_up != nullptr; });
        ep_ = std::make_unique<cuda_ep_exchange>(ep_exchange_params{
            .comm = comm_.get(),
            .ws = &ws_,
            .hidden = shape.hidden,
            .top_k = shape.top_k,
            .max_fixed_tokens = run.enable_dbo ? std::max(run.max_num_seqs, max_tokens) : run.max_num_seqs,
            .peer_to_peer = p2p,
            .fp8_dispatch = fp8_moe && !p2p});
        // The exchanges' stream first whenever SMs free up: its kernels are short and the other micro-batch waits.
        int least = 0, greatest = 0;
        check(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        check(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
    }
    if (config_.is_mla())
        mla_ = std::make_unique<mla_attention_runner>(config_, max_tokens, run.max_num_seqs, shape.max_kv_len);
    upload_replica_tables();

    // K and V rows of kv_width() values per token; MLA: one row (latent + rope key), no V.
    const int64_t k_block_bytes = run.block_size * config_.kv_width() * static_cast<int64_t>(sizeof(bf16));
    const int64_t block_bytes = (config_.is_mla() ? 1 : 2) * k_block_bytes;
    if (run.num_kv_blocks > 0) {
        num_kv_blocks_ = run.num_kv_blocks;
    } else {
        size_t free_bytes = 0, total_bytes = 0;
        check(cudaMemGetInfo(&free_bytes, &total_bytes));
        const auto used = static_cast<int64_t>(total_bytes - free_bytes);
        // What cuBLASLt and the graphs still take is small next to the workspace; keep 256 MiB for them.
        const auto budget =
            static_cast<int64_t>(run.gpu_memory_utilization * static_cast<double>(total_bytes)) - used - (256ll << 20);
        num_kv_blocks_ = std::max<int64_t>(0, budget / (block_bytes * config_.num_layers));
        if (num_kv_blocks_ == 0)
            throw error(errc::out_of_memory, "GPU " + std::to_string(device_) + ": no room for one KV block after " +
                                                 std::to_string(weights_.bytes >> 20) + " MiB of weights and " +
                                                 std::to_string(ws_.bytes() >> 20) +
                                                 " MiB of workspace at gpu_memory_utilization " +
                                                 std::to_string(run.gpu_memory_utilization));
    }
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        k_cache_.emplace_back(static_cast<size_t>(num_kv_blocks_ * k_block_bytes));
        v_cache_.emplace_back(config_.is_mla() ? size_t{0} : static_cast<size_t>(num_kv_blocks_ * k_block_bytes));
        // Zeroed: a graph's padding rows read block 0, which must hold finite values.
        check(cudaMemsetAsync(k_cache_.back().as<void>(), 0, k_cache_.back().bytes(), stream_));
        check(cudaMemsetAsync(v_cache_.back().as<void>(), 0, v_cache_.back().bytes(), stream_));
    }
    check(cudaStreamSynchronize(stream_));
    if (!run.enforce_eager) capture_decode_graphs();
    ZMOE_LOG(info, "cuda worker " << options.rank << " on GPU " << device_ << ": " << (weights_.bytes >> 20)
                                  << " MiB weights (" << run.load_format << (weights_.fp8 ? ", FP8" : "") << "), "
                                  << (fp8_.bytes() >> 20) << " MiB FP8 scratch, " << (ws_.bytes() >> 20)
                                  << " MiB workspace, " << num_kv_blocks_ << " KV blocks (" << (kv_cache_bytes() >> 20)
                                  << " MiB), " << graphs_.size() << " decode graphs captured in "
                                  << static_cast<int64_t>(graph_capture_ms_) << " ms"
                                  << (!ep_                  ? ""
                                      : ep_->peer_to_peer() ? ", MoE exchange peer to peer"
                                      : ep_->fp8_dispatch() ? ", MoE exchange over NCCL, FP8 dispatch"
                                                            : ", MoE exchange over NCCL"));
}

cuda_step_executor::~cuda_step_executor() {
    if (comm_)
        ZMOE_LOG(info, "cuda worker " << options_.rank << ": " << graph_replays_ << " graph replays, "
                                      << dual_batch_steps_ << " dual-batch steps, " << ep_overflow_steps_
                                      << " steps redone after a fixed exchange window overflowed");
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (decode_graph& g : graphs_) cudaGraphExecDestroy(g.exec);
    for (decode_graph& g : dbo_graphs_) cudaGraphExecDestroy(g.exec);
    ep_.reset();
    mover_.reset();
    comm_.reset();
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    if (blas_) cublasLtDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
}

int64_t cuda_step_executor::kv_cache_bytes() const {
    int64_t n = 0;
    for (size_t l = 0; l < k_cache_.size(); ++l) n += static_cast<int64_t>(k_cache_[l].bytes() + v_cache_[l].bytes());
    return n;
}

std::vector<int32_t> cuda_step_executor::graph_batch_sizes() const {
    std::vector<int32_t> b;
    for (const decode_graph& g : graphs_) b.push_back(g.batch);
    return b;
}

void cuda_step_executor::upload_replica_tables() {
    const auto E = config_.num_experts;
    const int64_t L = config_.num_moe_layers();
    if (L == 0 || E == 0) return;
    const int64_t per_rank = placement_.slots_per_rank;
    const size_t slots_stride = static_cast<size_t>(ws_.shape.num_slots) * options_.world_size();
    std::vector<int32_t> offsets(static_cast<size_t>(L * (E + 1))), slots(static_cast<size_t>(L) * slots_stride, 0);
    for (int64_t l = 0; l < L; ++l) {
        int32_t at = 0;
        for (int64_t e = 0; e < E; ++e) {
            offsets[l * (E + 1) + e] = at;
            for (const expert_replica& r : placement_.replicas(static_cast<int32_t>(l), static_cast<int32_t>(e)))
                slots[l * slots_stride + at++] = i32(r.rank * per_rank + r.slot);
        }
        offsets[l * (E + 1) + E] = at;
    }
    check(cudaMemcpyAsync(ws_.replica_offsets.as<void>(), offsets.data(), offsets.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream_));
    check(cudaMemcpyAsync(ws_.replica_slots.as<void>(), slots.data(), slots.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream_));
    check(cudaStreamSynchronize(stream_));  // the host vectors go out of scope
}

// ---------------------------------------------------------------------------------------------------------
// Staging: the step's inputs into the pinned mirror, then one upload.

cuda_step_executor::step_shape cuda_step_executor::stage(const step_request& request,
                                                         const std::vector<std::vector<int32_t>>& tokens) {
    const workspace_shape& cap = ws_.shape;
    int64_t total = 0;
    for (const auto& t : tokens) total += static_cast<int64_t>(t.size());
    if (total > cap.max_tokens || static_cast<int64_t>(request.seqs.size()) > cap.max_seqs)
        throw error(errc::invalid_argument,
                    "step of " + std::to_string(total) + " tokens in " + std::to_string(request.seqs.size()) +
                        " sequences exceeds max_num_batched_tokens " + std::to_string(cap.max_tokens) +
                        " / max_num_seqs " + std::to_string(cap.max_seqs));
    for (const scheduled_seq& s : request.seqs)
        if (static_cast<int64_t>(s.block_table.size()) > cap.max_blocks_per_seq)
            throw error(errc::invalid_argument, "request " + std::to_string(s.request_id) + ": block table of " +
                                                    std::to_string(s.block_table.size()) + " blocks exceeds " +
                                                    std::to_string(cap.max_blocks_per_seq) + " (max_model_len)");
    step_shape s;
    const auto bs = static_cast<int32_t>(options_.config.block_size);
    ws_.query_start.host[0] = 0;
    for (size_t i = 0; i < request.seqs.size(); ++i) {
        const scheduled_seq& q = request.seqs[i];
        const auto n = static_cast<int32_t>(tokens[i].size());
        s.one_token_each = s.one_token_each && n == 1;
        std::copy(tokens[i].begin(), tokens[i].end(), ws_.tokens.host + s.num_tokens);
        kernels::kv_slots_plan(q.block_table, q.start_pos, n, bs, ws_.positions.host + s.num_tokens,
                               ws_.kv_slots.host + s.num_tokens);
        s.num_tokens += n;
        ws_.start_pos.host[i] = q.start_pos;
        ws_.query_start.host[i + 1] = s.num_tokens;
        int32_t* row = ws_.block_tables.host + i * static_cast<size_t>(cap.max_blocks_per_seq);
        std::copy(q.block_table.begin(), q.block_table.end(), row);
        if (q.do_sample) ws_.logit_rows.host[s.num_sampled++] = s.num_tokens - 1;
    }
    s.num_seqs = static_cast<int32_t>(request.seqs.size());
    // The sampled rows as the CPU backend gathers them (one definition of sampling: workers/sampler.hpp).
    std::vector<uint64_t> sample_ids;
    sample_batch batch = gather_samples(request, tokens, history_, sample_ids);
    masks_.begin_step(request, batch);  // computed on the host while the forward pass runs; sample() waits
    s.samples_fit_graph = ws_.stage_samples(batch);
    return s;
}

void cuda_step_executor::pad_decode(step_shape& s, int32_t batch) {
    // Padding sequences: one token (id 0) at position 0 that writes no KV (slot -1), reads block 0 (zeroed at
    // start-up or real data: finite either way), and is sampled greedily; its outputs are dropped.
    for (int32_t i = s.num_seqs; i < batch; ++i) {
        ws_.tokens.host[i] = 0;
        ws_.positions.host[i] = 0;
        ws_.kv_slots.host[i] = -1;
        ws_.start_pos.host[i] = 0;
        ws_.query_start.host[i + 1] = i + 1;
        ws_.logit_rows.host[i] = i;
        ws_.sampling.host[i] = kernels::sample_seq_params{};
        std::fill_n(ws_.block_tables.host + i * static_cast<size_t>(ws_.shape.max_blocks_per_seq),
                    ws_.shape.max_blocks_per_seq, 0);
    }
    s.num_tokens = s.num_seqs = s.num_sampled = batch;
    s.one_token_each = true;
}

void cuda_step_executor::finish_staging(step_shape& s, int32_t num_valid) {
    const std::vector<int32_t> items = kernels::paged_attention_plan(
        std::span<const int32_t>(ws_.query_start.host, static_cast<size_t>(s.num_seqs) + 1), i32(config_.num_heads),
        i32(config_.num_kv_heads), kernels::paged_attention_rows_per_item(i32(config_.head_dim)));
    ZMOE_CHECK(static_cast<int32_t>(items.size() / 2) <= ws_.max_work_items,
               "attention work items beyond the workspace");
    std::copy(items.begin(), items.end(), ws_.work_items.host);
    s.num_work_items = static_cast<int32_t>(items.size() / 2);
    ws_.num_valid.host[0] = num_valid;
}

void cuda_step_executor::upload_inputs(const step_shape& s) {
    check(cudaMemcpyAsync(ws_.inputs.as<void>(), ws_.inputs_host.as<void>(), ws_.small_inputs_bytes,
                          cudaMemcpyHostToDevice, stream_));
    ws_.sample_side.upload(stream_);
    if (mla_)
        mla_->prepare(
            {.query_start = std::span<const int32_t>(ws_.query_start.host, static_cast<size_t>(s.num_seqs) + 1),
             .start_pos = std::span<const int32_t>(ws_.start_pos.host, static_cast<size_t>(s.num_seqs)),
             .block_tables = ws_.block_tables.host,
             .block_size = i32(options_.config.block_size),
             .max_blocks_per_seq = ws_.shape.max_blocks_per_seq},
            stream_);
    const size_t table_bytes = static_cast<size_t>(s.num_seqs) * ws_.shape.max_blocks_per_seq * sizeof(int32_t);
    if (table_bytes > 0)
        check(cudaMemcpyAsync(ws_.block_tables.device, ws_.block_tables.host, table_bytes, cudaMemcpyHostToDevice,
                              stream_));
}

// ---------------------------------------------------------------------------------------------------------
// The forward pass: only launches on stream_ (capturable), except the expert-parallel host plan (cuda_ep_exchange).

void cuda_step_executor::gemm(const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k, bool y_fp32,
                              const void* bias) {
    linear_bf16({.handle = blas_, .workspace = blas_workspace_.as<void>(), .workspace_bytes = kBlasWorkspace}, x, w, y,
                m, n, k, y_fp32, bias, stream_);
}

cuda_step_executor::batch_view cuda_step_executor::whole_view(const step_shape& s) const {
    return {.first = 0,
            .num_tokens = s.num_tokens,
            .num_seqs = s.num_seqs,
            .num_work_items = s.num_work_items,
            .one_token_each = s.one_token_each,
            .query_start = ws_.query_start.device,
            .start_pos = ws_.start_pos.device,
            .block_tables = ws_.block_tables.device,
            .work_items = ws_.work_items.device,
            .num_valid = ws_.num_valid.device};
}

void cuda_step_executor::layer_attention(int64_t layer, const batch_view& v) {
    // The residual stream: layer 0 normalises the embeddings, later layers add the last MLP output first.
    const model_config& c = config_;
    const cuda_layer& w = weights_.layers[layer];
    const int64_t at = int64_t(v.first) * c.hidden_size;
    bf16* residual = ws_.residual.as<bf16>() + at;
    bf16* xn = ws_.xn.as<bf16>() + at;
    bf16* delta = ws_.delta.as<bf16>() + at;
    const int32_t T = v.num_tokens, H = i32(c.hidden_size);
    if (fp8_normed_input(w)) {
        fp8_.rms_norm(layer == 0 ? residual : delta, layer == 0 ? nullptr : residual, w.input_norm.as<bf16>(), xn, T,
                      c.rms_norm_eps, stream_);
    } else {
        kernels::launch_rms_norm({.x = layer == 0 ? residual : delta,
                                  .residual = layer == 0 ? nullptr : residual,
                                  .weight = w.input_norm.as<bf16>(),
                                  .out = xn,
                                  .num_tokens = T,
                                  .hidden = H,
                                  .eps = c.rms_norm_eps},
                                 stream_);
    }
    attention(layer, v);
    kernels::launch_rms_norm({.x = delta,
                              .residual = residual,
                              .weight = w.post_norm.as<bf16>(),
                              .out = xn,
                              .num_tokens = T,
                              .hidden = H,
                              .eps = c.rms_norm_eps},
                             stream_);
}

bool cuda_step_executor::fp8_normed_input(const cuda_layer& w) const {
    if (mla_) return !w.fp8.kv_a.empty() || !w.fp8.q_a.empty() || (w.mla.q_a.empty() && !w.fp8.q_b.empty());
    return !w.fp8.qkv.empty();
}

void cuda_step_executor::attention(int64_t layer, const batch_view& v) {
    // Row-indexed buffers are offset to the view's first row; query_start stays in rows of the whole step.
    const model_config& c = config_;
    const cuda_layer& w = weights_.layers[layer];
    const int32_t T = v.num_tokens, H = i32(c.hidden_size), D = i32(c.head_dim);
    const int32_t hq = i32(c.num_heads), hkv = i32(c.num_kv_heads);
    const int64_t f = v.first;
    if (mla_) {
        ZMOE_CHECK(f == 0, "MLA attention over a part of the step");
        mla_->run(w,
                  {.positions = ws_.positions.device,
                   .kv_slots = ws_.kv_slots.device,
                   .block_tables = v.block_tables,
                   .query_start = v.query_start,
                   .start_pos = v.start_pos,
                   .num_tokens = T,
                   .num_seqs = v.num_seqs,
                   .block_size = i32(options_.config.block_size),
                   .max_blocks_per_seq = ws_.shape.max_blocks_per_seq},
                  ws_.xn.as<bf16>(), k_cache_[layer].as<bf16>(), ws_.delta.as<bf16>(),
                  {.handle = blas_,
                   .workspace = blas_workspace_.as<void>(),
                   .workspace_bytes = kBlasWorkspace,
                   .fp8 = &fp8_,
                   .xn_quantized = fp8_normed_input(w)},
                  stream_);
        return;
    }
    const int32_t qkv_dim = (hq + 2 * hkv) * D;
    bf16* qkv = ws_.qkv.as<bf16>() + f * qkv_dim;
    if (!w.fp8.qkv.empty()) {
        // q, k, v side by side in the row (or the one stacked matrix), from the codes the input norm wrote.
        int32_t col = 0;
        for (const cuda_fp8_matrix& m : w.fp8.qkv) {
            fp8_.linear_normed(m, T, qkv + col, qkv_dim, writable_rows(v), stream_);
            col += m.n;
        }
        if (!w.qkv_bias.empty())
            kernels::launch_add_bias({.y = qkv, .bias = w.qkv_bias.as<bf16>(), .num_tokens = T, .n = qkv_dim}, stream_);
    } else {
        gemm(ws_.xn.as<bf16>() + f * H, w.qkv.as<bf16>(), qkv, T, qkv_dim, H, false,
             w.qkv_bias.empty() ? nullptr : w.qkv_bias.as<bf16>());
    }

    kernels::rope_qk_norm_kv_params r{.qkv = qkv,
                                      .positions = ws_.positions.device + f,
                                      .slot_mapping = ws_.kv_slots.device + f,
                                      .q_out = ws_.q.as<bf16>() + f * hq * D,
                                      .k_cache = k_cache_[layer].as<bf16>(),
                                      .v_cache = v_cache_[layer].as<bf16>(),
                                      .num_tokens = T,
                                      .num_q_heads = hq,
                                      .num_kv_heads = hkv,
                                      .head_dim = D,
                                      .block_size = i32(options_.config.block_size),
                                      .rope_theta = static_cast<float>(c.rope_theta),
                                      .eps = c.rms_norm_eps};
    if (c.clip_qkv > 0.f) {
        // OLMoE clamps after the q/k norms and before RoPE: the fused kernel has no clamp, so norm here.
        kernels::launch_qk_norm_clip({.qkv = qkv,
                                      .q_norm_weight = w.q_norm.as<bf16>(),
                                      .k_norm_weight = w.k_norm.as<bf16>(),
                                      .num_tokens = T,
                                      .num_q_heads = hq,
                                      .num_kv_heads = hkv,
                                      .head_dim = D,
                                      .per_head = c.qk_norm == qk_norm_kind::per_head,
                                      .eps = c.rms_norm_eps,
                                      .clip = c.clip_qkv},
                                     stream_);
    } else if (c.qk_norm != qk_norm_kind::none) {
        r.norm = c.qk_norm == qk_norm_kind::per_head ? kernels::qk_norm_mode::per_head : kernels::qk_norm_mode::whole;
        r.q_norm_weight = w.q_norm.as<bf16>();
        r.k_norm_weight = w.k_norm.as<bf16>();
    }
    kernels::launch_rope_qk_norm_kv(r, stream_);

    if (v.one_token_each && kernels::decode_attention_supported(hq, hkv, D)) {
        // A decode step: one query token per sequence, split over the KV by the batch's shape.
        kernels::launch_decode_attention({.q = r.q_out,
                                          .k_cache = r.k_cache,
                                          .v_cache = r.v_cache,
                                          .block_tables = v.block_tables,
                                          .start_pos = v.start_pos,
                                          .workspace = ws_.attn_partial.as<float>(),
                                          .out = ws_.attn.as<bf16>() + f * hq * D,
                                          .num_seqs = v.num_seqs,
                                          .num_q_heads = hq,
                                          .num_kv_heads = hkv,
                                          .head_dim = D,
                                          .block_size = i32(options_.config.block_size),
                                          .max_blocks_per_seq = ws_.shape.max_blocks_per_seq,
                                          .num_splits = ws_.attn_splits(v.num_seqs),
                                          .scale = 1.f / std::sqrt(static_cast<float>(D))},
                                         stream_);
    } else {
        kernels::launch_paged_attention({.q = ws_.q.as<bf16>(),
                                         .k_cache = r.k_cache,
                                         .v_cache = r.v_cache,
                                         .block_tables = v.block_tables,
                                         .query_start = v.query_start,
                                         .start_pos = v.start_pos,
                                         .work_items = v.work_items,
                                         .out = ws_.attn.as<bf16>(),
                                         .num_seqs = v.num_seqs,
                                         .num_work_items = v.num_work_items,
                                         .num_q_heads = hq,
                                         .num_kv_heads = hkv,
                                         .head_dim = D,
                                         .block_size = i32(options_.config.block_size),
                                         .max_blocks_per_seq = ws_.shape.max_blocks_per_seq,
                                         .scale = 1.f / std::sqrt(static_cast<float>(D)),
                                         .rows_per_item = kernels::paged_attention_rows_per_item(D)},
                                        stream_);
    }

    bf16* delta = ws_.delta.as<bf16>() + f * H;
    if (!w.fp8.o.empty()) {
        fp8_.linear(w.fp8.o, ws_.attn.as<bf16>() + f * hq * D, T, delta, H, writable_rows(v), stream_);
        if (!w.o_bias.empty())
            kernels::launch_add_bias({.y = delta, .bias = w.o_bias.as<bf16>(), .num_tokens = T, .n = H}, stream_);
    } else {
        gemm(ws_.attn.as<bf16>() + f * hq * D, w.o.as<bf16>(), delta, T, H, hq * D, false,
             w.o_bias.empty() ? nullptr : w.o_bias.as<bf16>());
    }
}

int32_t cuda_step_executor::writable_rows(const batch_view& v) const {
    return dual_batch_layers() ? v.num_tokens : ws_.shape.max_tokens - v.first;
}

void cuda_step_executor::dense_mlp(const cuda_mlp& m, const cuda_fp8_mlp& f, const bf16* x, int32_t T, bf16* out,
                                   int32_t out_rows, const bf16* add) {
    ZMOE_CHECK(add == nullptr || (f.empty() && T == 1), "dense_mlp: an added row only to a BF16 MLP's one token");
    if (!f.empty()) {
        fp8_.mlp(f, x, T, out, out_rows, stream_);
        return;
    }
    const auto H = i32(config_.hidden_size), I = i32(m.inter);
    bf16* gu = ws_.mlp_gate_up.as<bf16>();
    bf16* act = ws_.mlp_act.as<bf16>();
    gemm(x, m.gate_up.as<bf16>(), gu, T, 2 * I, H);
    kernels::launch_silu_mul({.gate_up = gu, .out = act, .num_tokens = T, .n = I}, stream_);
    gemm(act, m.down.as<bf16>(), out, T, H, I, false, add);
}

void cuda_step_executor::moe(int64_t layer, const batch_view& v) {
    const model_config& c = config_;
    const cuda_layer& w = weights_.layers[layer];
    const int64_t mi = w.moe_index;
    const int32_t T = v.num_tokens, E = i32(c.num_experts), K = i32(c.num_experts_per_tok);
    bf16* xn = ws_.xn.as<bf16>();
    ZMOE_CHECK(v.first == 0, "a MoE layer over a part of the step");
    // One GPU with the softmax top-k router: the routed experts' whole launch sequence (decode path or router GEMM,
    // top-k, permute, grouped GEMMs, combine) is kernels::launch_moe_layer's, the one moe_layer_bench times.
    // DeepSeek's group-limited routers and expert parallelism take the general path below.
    const bool local_softmax = !comm_ && !uses_grouped_router(c);
    // One token on one GPU, BF16 ungated shared experts: the routed experts' output goes to shared_out and the shared
    // experts' down GEMV adds it as its bias (the GEMV's bias meets the BF16-rounded product, as add_shared's sum
    // does: the same bits, one launch fewer in the step's chain).
    const bool shared_adds_routed = T == 1 && !comm_ && w.has_shared && w.fp8.shared.empty() && w.shared_gate.empty();
    bf16* routed_out = shared_adds_routed ? ws_.shared_out.as<bf16>() : ws_.delta.as<bf16>();
    bool shared_in_moe = false;  // the shared experts computed inside the routed experts' launch
    if (local_softmax && T > 0) {
        kernels::moe_layer_params layer{
            .experts = expert_params(w, xn, T, K, routed_out),
            .router_w = w.router.as<bf16>(),
            .router_logits = ws_.router_logits.as<float>(),
            .blas = blas_,
            .blas_workspace = blas_workspace_.as<void>(),
            .blas_workspace_bytes = kBlasWorkspace,
            .replica_offsets = ws_.replica_offsets.as<int32_t>() + mi * (E + 1),
            .replica_slots = ws_.replica_slots.as<int32_t>() + mi * int64_t(ws_.shape.num_slots),
            .num_valid = v.num_valid,
            .expert_counts = ws_.expert_counts.device + mi * E,
            .topk_ids = ws_.topk_ids.as<int32_t>(),
            .topk_weights = ws_.topk_weights.as<float>(),
            .slot_ids = ws_.slot_ids.as<int32_t>(),
            .decode_scratch = ws_.moe_decode_scratch.as<int32_t>(),
            .num_experts = E,
            .renormalize = c.norm_topk_prob};
        // One token's BF16 ungated shared experts (DeepSeek's) inside the one-token routed launch (launch_moe_decode
        // with shared_inter), its out straight into delta; the same bits as the shared MLP's launches with the routed
        // out as the down GEMV's bias (launch_moe_decode's contract).
        shared_in_moe = shared_adds_routed && kernels::moe_layer_takes_shared(layer, i32(w.shared.inter));
        if (shared_in_moe) {
            layer.experts.out = ws_.delta.as<bf16>();
            layer.shared_gate_up = w.shared.gate_up.as<bf16>();
            layer.shared_down = w.shared.down.as<bf16>();
            layer.shared_inter = i32(w.shared.inter);
        }
        kernels::launch_moe_layer(layer, stream_);
    } else if (T > 0) {
        route(w, v);
    }
    if (comm_)
        moe_expert_parallel(w, T);  // a collective: joined with no tokens too
    else if (T > 0 && !local_softmax)
        moe_local(w, T, routed_out);
    if (shared_adds_routed) {
        if (!shared_in_moe)  // else they ran in the routed launch above
            dense_mlp(w.shared, w.fp8.shared, xn, T, ws_.delta.as<bf16>(), writable_rows(v), routed_out);
    } else if (T > 0 && w.has_shared) {
        shared_expert(w, v);
        add_shared(w, v);
    }
}

void cuda_step_executor::route(const cuda_layer& w, const batch_view& v) {
    const model_config& c = config_;
    const int64_t mi = w.moe_index, f = v.first;
    const int32_t T = v.num_tokens, H = i32(c.hidden_size), E = i32(c.num_experts), K = i32(c.num_experts_per_tok);
    float* logits = ws_.router_logits.as<float>();
    int32_t* topk_ids = ws_.topk_ids.as<int32_t>() + f * K;
    float* topk_weights = ws_.topk_weights.as<float>() + f * K;
    int32_t* slot_ids = ws_.slot_ids.as<int32_t>() + f * K;
    const int32_t* replica_offsets = ws_.replica_offsets.as<int32_t>() + mi * (E + 1);
    const int32_t* replica_slots =
        ws_.replica_slots.as<int32_t>() + mi * int64_t(ws_.shape.num_slots) * options_.world_size();
    int32_t* load_counts = ws_.expert_counts.device + mi * E;
    if (uses_grouped_router(c)) {  // DeepSeek: its router, then the replica choice
        gemm(ws_.xn.as<bf16>() + f * H, w.router.as<bf16>(), logits, T, E, H, true);
        launch_deepseek_router(c, w, logits, topk_ids, topk_weights, T, stream_);
        if (router_trace_ != nullptr) trace_router(w, f, T);
        kernels::launch_moe_route({.topk_ids = topk_ids,
                                   .replica_offsets = replica_offsets,
                                   .replica_slots = replica_slots,
                                   .num_valid = v.num_valid,
                                   .slot_ids = slot_ids,
                                   .expert_counts = load_counts,
                                   .num_tokens = T,
                                   .top_k = K,
                                   .num_experts = E},
                                  stream_);
    } else {  // the softmax top-k router launch_moe_layer runs, with the replica choice fused in
        kernels::launch_moe_router({.x = ws_.xn.as<bf16>() + f * H,
                                    .router_w = w.router.as<bf16>(),
                                    .router_logits = logits,
                                    .blas = blas_,
                                    .blas_workspace = blas_workspace_.as<void>(),
                                    .blas_workspace_bytes = kBlasWorkspace,
                                    .topk_ids = topk_ids,
                                    .topk_weights = topk_weights,
                                    .replica_offsets = replica_offsets,
                                    .replica_slots = replica_slots,
                                    .num_valid = v.num_valid,
                                    .slot_ids = slot_ids,
                                    .load_counts = load_counts,
                                    .num_tokens = T,
                                    .num_experts = E,
                                    .hidden = H,
                                    .top_k = K,
                                    .renormalize = c.norm_topk_prob},
                                   stream_);
    }
}

void cuda_step_executor::trace_router(const cuda_layer& w, int64_t first, int32_t num_tokens) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream_, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;
    const model_config& c = config_;
    const auto T = static_cast<size_t>(num_tokens), H = static_cast<size_t>(c.hidden_size);
    const auto E = static_cast<size_t>(c.num_experts), K = static_cast<size_t>(c.num_experts_per_tok);
    router_trace_entry e;
    e.moe_layer = w.moe_index;
    e.num_tokens = num_tokens;
    std::vector<uint16_t> input(T * H);
    e.logits.resize(T * E);
    e.topk_ids.resize(T * K);
    check(cudaMemcpyAsync(input.data(), ws_.xn.as<bf16>() + first * static_cast<int64_t>(H), T * H * sizeof(uint16_t),
                          cudaMemcpyDeviceToHost, stream_));
    check(cudaMemcpyAsync(e.logits.data(), ws_.router_logits.as<float>(), T * E * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_));
    check(cudaMemcpyAsync(e.topk_ids.data(), ws_.topk_ids.as<int32_t>() + first * static_cast<int64_t>(K),
                          T * K * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    check(cudaStreamSynchronize(stream_));
    e.input.reserve(input.size());
    for (uint16_t b : input) {
        const uint32_t bits = static_cast<uint32_t>(b) << 16;
        float x = 0.f;
        std::memcpy(&x, &bits, sizeof(x));
        e.input.push_back(x);
    }
    router_trace_->push_back(std::move(e));
}

void cuda_step_executor::shared_expert(const cuda_layer& w, const batch_view& v) {
    const int64_t f = v.first;
    const int32_t T = v.num_tokens, H = i32(config_.hidden_size);
    const bf16* xn = ws_.xn.as<bf16>() + f * H;
    dense_mlp(w.shared, w.fp8.shared, xn, T, ws_.shared_out.as<bf16>() + f * H, writable_rows(v));
    if (!w.shared_gate.empty()) gemm(xn, w.shared_gate.as<bf16>(), ws_.shared_gate.as<float>() + f, T, 1, H, true);
}

void cuda_step_executor::add_shared(const cuda_layer& w, const batch_view& v) {
    const int64_t f = v.first;
    const int32_t H = i32(config_.hidden_size);
    float* gate = w.shared_gate.empty() ? nullptr : ws_.shared_gate.as<float>() + f;  // DeepSeek: ungated
    kernels::launch_add_gated({.out = ws_.delta.as<bf16>() + f * H,
                               .shared = ws_.shared_out.as<bf16>() + f * H,
                               .gate_logits = gate,
                               .num_tokens = v.num_tokens,
                               .hidden = H},
                              stream_);
}

void cuda_step_executor::moe_local(const cuda_layer& w, int32_t T, bf16* out) {
    // One GPU: every slot is here. Run the experts over the (token, k) choices and combine with the routing weights
    // straight into out.
    run_experts(w, ws_.slot_ids.as<int32_t>(), ws_.xn.as<bf16>(), T, i32(config_.num_experts_per_tok),
                ws_.topk_weights.as<float>(), out);
}

kernels::moe_experts_params cuda_step_executor::expert_params(const cuda_layer& w, const bf16* x, int32_t num_tokens,
                                                              int32_t top_k, bf16* out) const {
    return {.x = x,
            .w_gate_up = w.experts_gate_up.as<bf16>(),
            .w_down = w.experts_down.as<bf16>(),
            .out = out,
            .expert_offsets = ws_.perm_offsets.as<int32_t>(),
            .dest_rows = ws_.perm_dest.as<int32_t>(),
            .row_token = ws_.perm_row_token.as<int32_t>(),
            .permute_workspace = ws_.perm_workspace.as<void>(),
            .act = ws_.perm_act.as<bf16>(),
            .y = ws_.perm_y.as<bf16>(),
            .max_rows = ws_.max_moe_rows,
            .num_tokens = num_tokens,
            .top_k = top_k,
            .num_slots = w.num_slots,
            .hidden = i32(config_.hidden_size),
            .inter = w.fp8_experts() ? w.fp8.inter_pad : i32(config_.moe_intermediate_size),
            .fp8 = w.fp8_experts() ? &fp8_moe_[static_cast<size_t>(w.moe_index)] : nullptr};
}

void cuda_step_executor::run_experts(const cuda_layer& w, const int32_t* slots, const bf16* x, int32_t num_tokens,
                                     int32_t top_k, const float* weights, bf16* out, int32_t permute_slots,
                                     int32_t max_ctas) {
    kernels::moe_experts_params p = expert_params(w, x, num_tokens, top_k, out);
    p.slots = slots;
    p.topk_weights = weights;
    p.permute_slots = permute_slots;
    p.max_ctas = max_ctas;
    kernels::launch_moe_experts(p, stream_);
}

void cuda_step_executor::sample(const step_shape& s) {
    kernels::sample_params p = ws_.sample_args(s.num_sampled);
    sample_batch masks;
    masks_.finish_masks(masks);
    if (masks.masks != nullptr) {
        // The masked rows are the first rows of the masks array (mask_row); its size is what begin_step filled.
        int32_t rows = 0;
        for (int32_t i = 0; i < s.num_sampled; ++i) rows = std::max(rows, ws_.sampling.host[i].mask_row + 1);
        const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(masks.mask_words) * sizeof(uint32_t);
        masks_device_.ensure(bytes);
        check(cudaMemcpyAsync(masks_device_.as<void>(), masks.masks, bytes, cudaMemcpyHostToDevice, stream_));
        p.masks = masks_device_.as<uint32_t>();
        p.mask_words = masks.mask_words;
    }
    kernels::launch_sample(p, stream_);
}

void cuda_step_executor::forward(const step_shape& s) {
    const model_config& c = config_;
    const int32_t T = s.num_tokens, H = i32(c.hidden_size), V = i32(c.vocab_size);
    bf16* residual = ws_.residual.as<bf16>();
    bf16* xn = ws_.xn.as<bf16>();
    bf16* delta = ws_.delta.as<bf16>();
    if (ws_.expert_counts.device != nullptr && c.num_moe_layers() > 0)
        check(cudaMemsetAsync(ws_.expert_counts.device, 0, size_t(c.num_moe_layers()) * c.num_experts * 4, stream_));
    const bool ep_fixed = comm_ && ep_mode_.fixed();
    if (ep_fixed) ep_->begin_step(stream_);
    if (T > 0)
        kernels::launch_embedding({.token_ids = ws_.tokens.device,
                                   .table = weights_.embed.as<bf16>(),
                                   .out = residual,
                                   .num_tokens = T,
                                   .hidden = H,
                                   .vocab_size = V},
                                  stream_);
    if (dual_batch_layers()) {
        forward_dual_batch();  // dual-batch overlap (cuda_step_executor_ep.cpp)
    } else {
        const batch_view v = whole_view(s);
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const cuda_layer& w = weights_.layers[l];
            if (T > 0) layer_attention(l, v);
            if (w.moe_index >= 0)
                moe(l, v);
            else if (T > 0)
                dense_mlp(w.dense, w.fp8.dense, xn, T, delta, writable_rows(v));
        }
    }
    if (ep_fixed) ep_->end_step(stream_);
    const int32_t R = s.num_sampled;
    if (T == 0 || R == 0) return;
    kernels::launch_rms_norm({.x = delta,
                              .residual = residual,
                              .weight = weights_.final_norm.as<bf16>(),
                              .out = xn,
                              .num_tokens = T,
                              .hidden = H,
                              .eps = c.rms_norm_eps},
                             stream_);
    bf16* last = ws_.last_rows.as<bf16>();
    kernels::launch_gather_rows({.in = xn, .rows = ws_.logit_rows.device, .out = last, .num_rows = R, .hidden = H},
                                stream_);
    gemm(last, weights_.head().as<bf16>(), ws_.logits.as<float>(), R, V, H, true);
}

// ---------------------------------------------------------------------------------------------------------
// Decode graphs

const cuda_step_executor::decode_graph* cuda_step_executor::graph_for(int32_t num_seqs, bool dual) const {
    for (const decode_graph& g : dual ? dbo_graphs_ : graphs_)
        if (g.batch >= num_seqs) return &g;
    return nullptr;
}

void cuda_step_executor::capture_decode_graphs() {
    const auto t0 = std::chrono::steady_clock::now();
    // Expert parallelism: every rank captures the same batches in the same order (the warm-up runs are
    // collectives), each with its fixed-capacity exchange, once as one batch and once as two micro-batches.
    for (const bool dual : {false, true}) {
        if (dual && !comm_) break;
        for (int32_t batch : decode_graph_batch_sizes(ws_.shape.max_seqs)) {
            if (comm_) ep_mode_ = ep_graph_mode(batch, dual);
            // A batch of padding rows: run once eagerly (cuBLASLt plans, kernel attributes, lazy module loads,
            // NCCL connections happen outside the capture), then capture the same launches.
            step_shape s;
            pad_decode(s, batch);
            finish_staging(s, 0);
            upload_inputs(s);
            if (dual_batch_layers()) stage_dual_batch(s, ep_mode_.split, 0);
            forward(s);
            check(cudaStreamSynchronize(stream_));
            cudaGraph_t graph = nullptr;
            check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
            forward(s);
            check(cudaStreamEndCapture(stream_, &graph));
            decode_graph g{.batch = batch};
            const cudaError_t e = cudaGraphInstantiate(&g.exec, graph, 0);
            cudaGraphDestroy(graph);
            check(e);
            (dual ? dbo_graphs_ : graphs_).push_back(g);
        }
    }
    check(cudaStreamSynchronize(stream_));
    graph_capture_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------------------

step_result cuda_step_executor::execute(const step_request& request, std::vector<std::vector<float>>* logits_out) {
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaSetDevice(device_));
    for (uint64_t id : request.finished_ids) last_sampled_.erase(id);
    step_result result;
    result.step_id = request.step_id;
    result.rank = options_.rank;
    step_shape s;
    int32_t split = 0;  // dual-batch overlap: this rank's first row of micro-batch B
    try {
        const auto tokens =
            validate_step(request, options_.config.block_size, num_kv_blocks_, config_.vocab_size, last_sampled_);
        s = stage(request, tokens);
        if (comm_ && request.dual_batch) {
            std::vector<int64_t> seq_tokens;
            for (const auto& t : tokens) seq_tokens.push_back(static_cast<int64_t>(t.size()));
            split = static_cast<int32_t>(micro_batch_split_row(seq_tokens));
        }
    } catch (const error&) {
        // Keep the collective whole: the other ranks are already waiting in this step's agreement and exchanges.
        step_shape empty;
        if (comm_) {
            ep_mode_ = ep_eager_mode(ep_agree(empty, false, request.dual_batch, 0), 0);  // the others' mode
        }
        finish_staging(empty, 0);
        if (dual_batch_layers()) stage_dual_batch(empty, 0, 0);
        forward(empty);
        check(cudaStreamSynchronize(stream_));
        throw;
    }
    const int32_t num_real = s.num_tokens;
    const bool decode = s.num_seqs > 0 && s.num_tokens == s.num_seqs && s.num_sampled == s.num_seqs;
    const decode_graph* g = nullptr;
    if (comm_) {
        // All ranks take the same mode: the graph of the largest decode batch, or eager.
        const bool graphable = (decode && s.samples_fit_graph) || s.num_seqs == 0;
        const ep_agreement a = ep_agree(s, graphable, request.dual_batch, split);
        if (a.all_decode && a.max_seqs > 0) g = graph_for(a.max_seqs, a.dual);
        ep_mode_ = g != nullptr ? ep_graph_mode(g->batch, a.dual) : ep_eager_mode(a, split);
        if (a.dual) ++dual_batch_steps_;
    } else if (decode && s.samples_fit_graph && router_trace_ == nullptr) {  // a traced step runs eagerly
        g = graph_for(s.num_seqs);
    }
    if (g != nullptr) pad_decode(s, g->batch);
    finish_staging(s, num_real);
    upload_inputs(s);
    if (dual_batch_layers()) stage_dual_batch(s, ep_mode_.split, num_real);
    if (g != nullptr) {
        check(cudaGraphLaunch(g->exec, stream_));
        ++graph_replays_;
    } else {
        forward(s);
    }
    if (comm_ && ep_mode_.fixed()) {
        check(cudaStreamSynchronize(stream_));
        if (ep_->overflowed()) {
            // Some rank's fixed window overflowed (every rank sees the all-reduced flag): redo the step on the exact
            // exchange. The inputs are still on the device, and the KV rows are rewritten with the right values.
            ++ep_overflow_steps_;
            ep_mode_.capacity[0] = ep_mode_.capacity[1] = 0;
            forward(s);
        }
    }
    if (s.num_tokens > 0 && s.num_sampled > 0) sample(s);
    // One copy back after sampling: the sampled tokens, then the load counts.
    check(cudaMemcpyAsync(ws_.outputs_host.as<void>(), ws_.outputs.as<void>(), ws_.outputs.bytes(),
                          cudaMemcpyDeviceToHost, stream_));
    std::vector<float> logits;
    const size_t V = static_cast<size_t>(config_.vocab_size);
    size_t R = 0;
    for (const scheduled_seq& q : request.seqs) R += q.do_sample ? 1 : 0;
    if (logits_out != nullptr && R > 0) {
        logits.resize(R * V);
        check(cudaMemcpyAsync(logits.data(), ws_.logits.as<float>(), logits.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, stream_));
    }
    check(cudaStreamSynchronize(stream_));
    const size_t num_counts = static_cast<size_t>(config_.num_moe_layers() * config_.num_experts);
    result.expert_counts.assign(ws_.expert_counts.host, ws_.expert_counts.host + num_counts);
    if (logits_out) logits_out->clear();
    size_t out = 0;
    for (const scheduled_seq& q : request.seqs) {
        if (!q.do_sample) continue;
        const int32_t token = ws_.sampled.host[out];
        result.tokens.push_back({q.request_id, token});
        if (ws_.sampling.host[out].num_logprobs >= 0) result.tokens.back().logprobs = ws_.logprobs_of(i32(out));
        last_sampled_[q.request_id] = token;
        if (logits_out)
            logits_out->emplace_back(logits.begin() + static_cast<int64_t>(out * V),
                                     logits.begin() + static_cast<int64_t>((out + 1) * V));
        ++out;
    }
    masks_.end_step(result.tokens);
    result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    result.exchange_steps_redone = static_cast<uint64_t>(ep_overflow_steps_);
    return result;
}

}  // namespace zmoe::cuda
