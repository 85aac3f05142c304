#include "workers/cuda/cuda_deepseek.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "base/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mla_gemm.hpp"
#include "workers/cuda/cuda_fp8_linear.hpp"

namespace zmoe::cuda {
namespace {

using kernels::bf16;

// transformers' DeepSeek q_a_layernorm / kv_a_layernorm use the RMSNorm default eps, not rms_norm_eps (as the CPU
// backend, workers/mla_attention.cpp).
constexpr float kLatentNormEps = 1e-6f;

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

/// y = x . w^T through linear_bf16 (the GEMV or skinny GEMM for a decode step's few rows, cuBLASLt beyond).
void gemm(const gemm_context& g, const void* x, const void* w, void* y, int32_t m, int32_t n, int32_t k,
          cudaStream_t stream) {
    linear_bf16(g, x, w, y, m, n, k, false, nullptr, stream);
}

/// y [m, n] = x [m, k] . w^T: the BF16 weight `w`, or `f` in FP8 when it is not empty (y_rows: rows of y the FP8
/// GEMM may overwrite). x_is_xn: x is the layer's normed input, which the FP8 runner may hold quantized already
/// (gemm_context::xn_quantized).
void project(const gemm_context& g, const cuda_fp8_matrix& f, const bf16* w, const bf16* x, bf16* y, int32_t m,
             int32_t n, int32_t k, int32_t y_rows, cudaStream_t stream, bool x_is_xn = false) {
    if (f.empty()) {
        gemm(g, x, w, y, m, n, k, stream);
        return;
    }
    ZMOE_CHECK(g.fp8 != nullptr, "MLA: an FP8 projection without the FP8 runner");
    if (x_is_xn && g.xn_quantized)
        g.fp8->linear_normed(f, m, y, n, y_rows, stream);
    else
        g.fp8->linear(f, x, m, y, n, y_rows, stream);
}

constexpr size_t kSideBlasWorkspace = size_t(8) << 20;

}  // namespace

cuda_side_stream::cuda_side_stream() {
    ZMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : events_) ZMOE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

cuda_side_stream::~cuda_side_stream() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
}

void cuda_side_stream::hop(cudaStream_t from, cudaStream_t to, int i) const {
    ZMOE_CHECK(i >= 0 && i < kEvents, "cuda_side_stream: event index out of range");
    ZMOE_CUDA_CHECK(cudaEventRecord(events_[i], from));
    ZMOE_CUDA_CHECK(cudaStreamWaitEvent(to, events_[i], 0));
}

void check_deepseek_supported(const model_config& c) {
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw error(errc::unsupported, std::string("CUDA backend: ") + model_arch_name(c.arch) + ": " + what);
    };
    if (c.is_mla()) {
        const mla_params& m = c.mla;
        need(m.kv_lora_rank % 8 == 0, "kv_lora_rank must be a multiple of 8");
        need(m.qk_rope_head_dim % 8 == 0 && m.qk_rope_head_dim <= 128,
             "qk_rope_head_dim must be a multiple of 8 and at most 128");
        need(m.kv_lora_rank + m.qk_rope_head_dim <= 1024, "kv_lora_rank + qk_rope_head_dim must be at most 1024");
        need(m.qk_nope_head_dim >= 1 && m.qk_nope_head_dim <= 256, "qk_nope_head_dim must be in [1, 256]");
        need(m.q_lora_rank % 8 == 0, "q_lora_rank must be a multiple of 8");
        need(m.v_head_dim >= 1, "v_head_dim must be positive");
    }
    if (uses_grouped_router(c)) {
        need(c.n_group >= 1 && c.n_group <= 32, "n_group must be in [1, 32] (router kernel)");
        need(c.topk_group >= 1 && c.topk_group <= c.n_group, "topk_group must be in [1, n_group]");
        need(c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group),
             "num_experts_per_tok must fit in the topk_group kept groups");
    }
}

bool uses_grouped_router(const model_config& c) {
    return c.router != router_kind::softmax_topk || c.routed_scaling_factor != 1.0;
}

void launch_deepseek_router(const model_config& c, const cuda_layer& w, const float* logits, int32_t* topk_ids,
                            float* topk_weights, int32_t num_tokens, cudaStream_t stream) {
    const bool grouped = c.router != router_kind::softmax_topk;
    const bool sigmoid = c.router == router_kind::sigmoid_group_limited;
    kernels::launch_router_grouped(
        {.logits = logits,
         .bias = sigmoid ? w.router_bias.as<float>() : nullptr,
         .topk_ids = topk_ids,
         .topk_weights = topk_weights,
         .num_tokens = num_tokens,
         .num_experts = i32(c.num_experts),
         .top_k = i32(c.num_experts_per_tok),
         .n_group = grouped ? i32(c.n_group) : 1,
         .topk_group = grouped ? i32(c.topk_group) : 1,
         .scoring = sigmoid ? kernels::router_scoring::sigmoid : kernels::router_scoring::softmax,
         .renormalize = c.norm_topk_prob,
         .scaling = static_cast<float>(c.routed_scaling_factor)},
        stream);
}

mla_prefill_plan plan_mla_prefill(const mla_host_step& h, int32_t num_heads, int32_t capacity_rows, bool expanded,
                                  int32_t rows_per_item) {
    mla_prefill_plan p;
    p.rows_per_item = rows_per_item;
    const auto num_seqs = static_cast<int32_t>(h.start_pos.size());
    const std::span<const int32_t> qs = h.query_start;
    p.num_tokens = num_seqs > 0 ? qs[num_seqs] : 0;
    auto padded = [](int32_t n) { return (n + kMlaExpandBlock - 1) / kMlaExpandBlock * kMlaExpandBlock; };
    auto kv_end = [&](int32_t s) { return h.start_pos[s] + qs[s + 1] - qs[s]; };
    auto takes_expanded = [&](int32_t s) {
        return expanded && qs[s + 1] - qs[s] >= 2 && padded(kv_end(s)) <= capacity_rows;
    };
    int32_t s = 0;
    while (s < num_seqs) {
        if (!takes_expanded(s)) {
            for (int32_t t = qs[s]; t < qs[s + 1]; ++t) p.absorbed_tokens.push_back(t);
            ++s;
            continue;
        }
        mla_prefill_plan::group g;
        g.first_seq = s;
        g.first_token = qs[s];
        while (s < num_seqs && takes_expanded(s) && g.num_rows + padded(kv_end(s)) <= capacity_rows) {
            g.num_rows += padded(kv_end(s));
            g.table_width = std::max(g.table_width, padded(kv_end(s)) / kMlaExpandBlock);
            ++s;
        }
        g.num_seqs = s - g.first_seq;
        g.num_tokens = qs[s] - g.first_token;
        p.groups.push_back(g);
    }
    p.all_absorbed = p.groups.empty();
    p.decode_only = num_seqs > 0 && p.num_tokens == num_seqs;
    for (int32_t i = 0; i < num_seqs && p.decode_only; ++i) p.decode_only = qs[i + 1] - qs[i] == 1;
    std::vector<int32_t>& d = p.data;
    if (!p.all_absorbed) {
        p.absorbed_offset = d.size();
        d.insert(d.end(), p.absorbed_tokens.begin(), p.absorbed_tokens.end());
    }
    for (mla_prefill_plan::group& g : p.groups) {
        // Expanded rows: sequence i of the group owns rows [base_i, base_i + padded(end_i)); row base_i + pos holds
        // position pos (its cache slot through the sequence's block table), the padding rows none (-1).
        g.slots = d.size();
        std::vector<int32_t> base;
        int32_t row = 0;
        for (int32_t i = 0; i < g.num_seqs; ++i) {
            const int32_t sq = g.first_seq + i, end = kv_end(sq);
            const int32_t* table = h.block_tables + static_cast<size_t>(sq) * h.max_blocks_per_seq;
            base.push_back(row);
            for (int32_t pos = 0; pos < padded(end); ++pos)
                d.push_back(pos < end ? table[pos / h.block_size] * h.block_size + pos % h.block_size : -1);
            row += padded(end);
        }
        g.tables = d.size();
        for (int32_t i = 0; i < g.num_seqs; ++i)
            for (int32_t b = 0; b < g.table_width; ++b)
                d.push_back(base[i] / kMlaExpandBlock +
                            std::min(b, padded(kv_end(g.first_seq + i)) / kMlaExpandBlock - 1));
        g.query_start = d.size();
        for (int32_t i = 0; i <= g.num_seqs; ++i) d.push_back(qs[g.first_seq + i]);
        g.start_pos = d.size();
        for (int32_t i = 0; i < g.num_seqs; ++i) d.push_back(h.start_pos[g.first_seq + i]);
        g.work_items = d.size();
        const std::vector<int32_t> items = kernels::paged_attention_plan(
            std::span<const int32_t>(d.data() + g.query_start, static_cast<size_t>(g.num_seqs) + 1), num_heads,
            num_heads, rows_per_item);
        g.num_work_items = static_cast<int32_t>(items.size() / 2);
        d.insert(d.end(), items.begin(), items.end());
    }
    return p;
}

mla_attention_runner::mla_attention_runner(const model_config& c, int32_t max_tokens, int32_t max_seqs,
                                           int32_t max_kv_len, int64_t expand_budget_bytes, bool tensor_core_decode)
    : c_(c), max_tokens_(max_tokens) {
    const mla_params& m = c.mla;
    const size_t T = static_cast<size_t>(max_tokens), heads = static_cast<size_t>(c.num_heads);
    const size_t r = static_cast<size_t>(m.kv_lora_rank), dr = static_cast<size_t>(m.qk_rope_head_dim);
    const size_t qk = static_cast<size_t>(m.qk_nope_head_dim) + dr;
    auto alloc = [&](device_buffer& b, size_t bytes) {
        b = device_buffer(bytes);
        bytes_ += static_cast<int64_t>(bytes);
    };
    alloc(qa_, T * static_cast<size_t>(m.q_lora_rank) * sizeof(bf16));
    alloc(q_, (T * heads * qk + r + dr) * sizeof(bf16));  // a one-token step's latent row after its q (run)
    alloc(kv_, T * (r + dr) * sizeof(bf16));
    alloc(q_lat_, T * heads * r * sizeof(float));
    alloc(o_lat_, T * heads * r * sizeof(float));
    alloc(attn_, T * heads * static_cast<size_t>(m.v_head_dim) * sizeof(bf16));
    // Expanded prefill: the kernel's head dims for the model's (192 / 128 as they are; others zero-padded to one
    // plain head dim), and the scratch rows the budget allows (no more than the longest sequence needs).
    const auto dn = static_cast<int32_t>(m.qk_nope_head_dim), dv = static_cast<int32_t>(m.v_head_dim);
    const int32_t qk_dim = dn + static_cast<int32_t>(dr);
    if (qk_dim != dv && kernels::paged_attention_dims_supported(qk_dim, dv)) {
        k_dim_ = qk_dim;
        v_dim_ = dv;
    } else {
        for (int32_t d : {16, 32, 64, 128, 256})
            if (d >= std::max(qk_dim, dv)) {
                k_dim_ = v_dim_ = d;
                break;
            }
    }
    // The kernel's head dims are the model's (DeepSeek's 192 / 128) and 8-aligned: K and V straight from the latents by
    // the batched GEMMs, no kv_up.
    expand_direct_ = k_dim_ == qk_dim && v_dim_ == dv && dn % 8 == 0 && dr % 8 == 0 && dv % 8 == 0 && r % 8 == 0;
    if (k_dim_ > 0 && expand_budget_bytes > 0) {
        const int64_t up = expand_direct_ ? 0 : dn + dv;
        const int64_t per_row = static_cast<int64_t>(sizeof(bf16)) *
                                (static_cast<int64_t>(r) + static_cast<int64_t>(heads) * (up + k_dim_ + v_dim_));
        const int64_t need =
            (static_cast<int64_t>(std::max(max_kv_len, 1)) + kMlaExpandBlock - 1) / kMlaExpandBlock * kMlaExpandBlock;
        const int64_t rows = std::min(expand_budget_bytes / per_row, need) / kMlaExpandBlock * kMlaExpandBlock;
        expand_rows_ = static_cast<int32_t>(std::min<int64_t>(rows, int64_t{1} << 30));
    }
    if (expand_rows_ > 0) {
        // 128-row items where a wgmma kernel takes the dims (DeepSeek's 192 / 128: the warp-specialised one).
        attn_rows_ = kernels::paged_attention_rows_per_item(k_dim_, v_dim_);
        const size_t R = static_cast<size_t>(expand_rows_);
        alloc(latent_, R * r * sizeof(bf16));
        if (!expand_direct_) alloc(kv_up_, R * heads * static_cast<size_t>(dn + dv) * sizeof(bf16));
        alloc(k_, R * heads * static_cast<size_t>(k_dim_) * sizeof(bf16));
        alloc(v_, R * heads * static_cast<size_t>(v_dim_) * sizeof(bf16));
        if (k_dim_ != qk_dim) alloc(q_pad_, T * heads * static_cast<size_t>(k_dim_) * sizeof(bf16));
        if (v_dim_ != dv) alloc(out_pad_, T * heads * static_cast<size_t>(v_dim_) * sizeof(bf16));
    }
    tc_decode_ = tensor_core_decode && kernels::mla_decode_supported(r, static_cast<int32_t>(dr)) && dn % 8 == 0;
    if (tc_decode_) {
        int device = 0;
        ZMOE_CUDA_CHECK(cudaGetDevice(&device));
        ZMOE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
        size_t floats = 1;
        for (int32_t b = 1; b <= max_seqs; ++b)
            floats = std::max(
                floats, kernels::mla_decode_workspace_floats(b, heads, kernels::mla_decode_splits(b, heads, num_sms_)));
        alloc(decode_ws_, floats * sizeof(float));
        const size_t latents = static_cast<size_t>(std::max(max_seqs, 1)) * heads * r;
        alloc(q_lat_bf16_, latents * sizeof(bf16));
        alloc(o_lat_bf16_, latents * sizeof(bf16));
        if (m.q_lora_rank == 0 && max_seqs > kernels::kMlaAbsorbGemvMaxTokens) {
            side_ = std::make_unique<cuda_side_stream>();
            alloc(side_blas_ws_, kSideBlasWorkspace);
        }
    }
    const std::vector<float> inv_freq = c.rope_inv_freq();
    alloc(inv_freq_, inv_freq.size() * sizeof(float));
    ZMOE_CUDA_CHECK(
        cudaMemcpy(inv_freq_.as<void>(), inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void mla_attention_runner::prepare(const mla_host_step& h, cudaStream_t stream) {
    plan_ = plan_mla_prefill(h, i32(c_.num_heads), expand_rows_, expand_rows_ > 0, attn_rows_);
    if (plan_.data.empty()) return;
    const size_t bytes = plan_.data.size() * sizeof(int32_t);
    if (bytes > plan_host_.bytes()) {
        // Grown outside any graph capture (prepare runs before the forward pass); the previous step has finished
        // with the old buffers (every step ends synchronised).
        ZMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        const size_t grown = std::max(bytes, plan_host_.bytes() * 3 / 2);
        plan_dev_ = device_buffer(grown);
        plan_host_ = pinned_buffer(grown);
    }
    std::copy(plan_.data.begin(), plan_.data.end(), plan_host_.as<int32_t>());
    ZMOE_CUDA_CHECK(
        cudaMemcpyAsync(plan_dev_.as<void>(), plan_host_.as<void>(), bytes, cudaMemcpyHostToDevice, stream));
}

void mla_attention_runner::run(const cuda_layer& w, const mla_step& s, const bf16* xn, bf16* cache, bf16* out,
                               const gemm_context& g, cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t T = s.num_tokens, H = i32(c_.hidden_size), heads = i32(c_.num_heads);
    const int32_t r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim), dr = i32(m.qk_rope_head_dim);
    const int32_t dv = i32(m.v_head_dim), qk = dn + dr;
    if (T == 0) return;
    bf16* q = q_.as<bf16>();
    if (!w.mla.q_a.empty() || !w.fp8.q_a.empty()) {  // q LoRA (BF16 or FP8)
        const int32_t qr = i32(m.q_lora_rank);
        bf16* qa = qa_.as<bf16>();
        project(g, w.fp8.q_a, w.mla.q_a.as<bf16>(), xn, qa, T, qr, H, max_tokens_, stream, true);
        kernels::launch_rms_norm({.x = qa,
                                  .weight = w.mla.q_a_norm.as<bf16>(),
                                  .out = qa,
                                  .num_tokens = T,
                                  .hidden = qr,
                                  .eps = kLatentNormEps},
                                 stream);
        project(g, w.fp8.q_b, w.mla.q_b.as<bf16>(), qa, q, T, heads * qk, qr, max_tokens_, stream);
    }
    ZMOE_CHECK(plan_.num_tokens == T, "MLA attention: the step was not prepared (plan of " +
                                          std::to_string(plan_.num_tokens) + " tokens, step of " + std::to_string(T) +
                                          ")");
    const bool decode = tc_decode_ && plan_.all_absorbed && plan_.decode_only && s.num_seqs == T;
    // A decode step beyond the streaming absorb kernels with the stacked BF16 q / kv_a: kv_a's GEMM and the RoPE on
    // the side stream, beside q's GEMM and the q absorption (plain launches there, no programmatic edge lost).
    const bool beside =
        side_ != nullptr && decode && !w.mla.q_kv_a.empty() && !kernels::mla_absorb_gemv_supported(T, dn, dv, r);
    bf16* kv = kv_.as<bf16>();
    if (beside) {
        const bf16* q_w = w.mla.q_kv_a.as<bf16>();
        const gemm_context side_g{
            .handle = g.handle, .workspace = side_blas_ws_.as<void>(), .workspace_bytes = side_blas_ws_.bytes()};
        side_->hop(stream, side_->get(), 0);  // xn
        gemm(g, xn, q_w, q, T, heads * qk, H, stream);
        gemm(side_g, xn, q_w + static_cast<size_t>(heads) * qk * H, kv, T, r + dr, H, side_->get());
        side_->hop(stream, side_->get(), 1);  // q, for the RoPE of q_pe (launched below)
    } else if (!w.mla.q_kv_a.empty() && T == 1) {
        // One token: q and the latent row side by side in q_'s row (its allocation holds the latent row after it),
        // both projections in one GEMV over the stacked weights.
        kv = q + static_cast<size_t>(heads) * qk;
        gemm(g, xn, w.mla.q_kv_a.as<bf16>(), q, 1, heads * qk + r + dr, H, stream);
    } else if (!w.mla.q_kv_a.empty()) {
        const bf16* q_w = w.mla.q_kv_a.as<bf16>();
        gemm(g, xn, q_w, q, T, heads * qk, H, stream);
        gemm(g, xn, q_w + static_cast<size_t>(heads) * qk * H, kv, T, r + dr, H, stream);
    } else {
        if (w.mla.q_a.empty() && w.fp8.q_a.empty())
            project(g, w.fp8.q_b, w.mla.q_b.as<bf16>(), xn, q, T, heads * qk, H, max_tokens_, stream, true);
        project(g, w.fp8.kv_a, w.mla.kv_a.as<bf16>(), xn, kv, T, r + dr, H, max_tokens_, stream, true);
    }
    const kernels::mla_rope_kv_params rope{.q = q,
                                           .kv = kv,
                                           .kv_norm_weight = w.mla.kv_a_norm.as<bf16>(),
                                           .positions = s.positions,
                                           .slot_mapping = s.kv_slots,
                                           .inv_freq = inv_freq_.as<float>(),
                                           .cache = cache,
                                           .num_tokens = T,
                                           .num_heads = heads,
                                           .nope_dim = dn,
                                           .rope_dim = dr,
                                           .kv_lora_rank = r,
                                           .block_size = s.block_size,
                                           .attention_factor = static_cast<float>(c_.rope.attention_factor),
                                           .eps = kLatentNormEps,
                                           .interleave = m.rope_interleave};
    bf16* attn = attn_.as<bf16>();
    if (beside) kernels::launch_mla_rope_kv(rope, side_->get());
    if (decode) {
        run_decode(w, s, rope, cache, attn, g, stream, beside);
        project(g, w.fp8.o, w.o.as<bf16>(), attn, out, T, H, heads * dv, max_tokens_, stream);
        return;
    }
    kernels::launch_mla_rope_kv(rope, stream);
    const int32_t* plan = plan_dev_.as<int32_t>();
    for (const mla_prefill_plan::group& pg : plan_.groups) run_expanded(w, pg, q, cache, attn, g, stream);
    const int32_t* rows = plan_.all_absorbed ? nullptr : plan + plan_.absorbed_offset;
    const int32_t num_rows = plan_.all_absorbed ? T : static_cast<int32_t>(plan_.absorbed_tokens.size());
    if (num_rows > 0) run_absorbed(w, s, rows, num_rows, q, cache, attn, stream);
    project(g, w.fp8.o, w.o.as<bf16>(), attn, out, T, H, heads * dv, max_tokens_, stream);
}

void mla_attention_runner::run_decode(const cuda_layer& w, const mla_step& s, const kernels::mla_rope_kv_params& rope,
                                      const bf16* cache, bf16* attn, const gemm_context& g, cudaStream_t stream,
                                      bool rope_on_side) const {
    const bf16* q = rope.q;
    const mla_params& m = c_.mla;
    const int32_t heads = i32(c_.num_heads), r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim);
    const int32_t dr = i32(m.qk_rope_head_dim), dv = i32(m.v_head_dim);
    kernels::mla_absorb_gemm_params ab{.handle = g.handle,
                                       .workspace = g.workspace,
                                       .workspace_bytes = g.workspace_bytes,
                                       .kv_b = w.mla.kv_b.as<bf16>(),
                                       .in = q,
                                       .out = q_lat_bf16_.as<bf16>(),
                                       .num_tokens = s.num_seqs,
                                       .num_heads = heads,
                                       .nope_dim = dn,
                                       .rope_dim = dr,
                                       .v_dim = dv,
                                       .kv_lora_rank = r};
    // A few tokens: the streaming kernels (weights loaded under the kernels before, the PDL chain kept), the latent
    // rows and q_pe's RoPE done by the absorb kernel, and at one token the split combine by the v_up kernel; more:
    // the rope kernel and the batched GEMMs.
    // (H100, DeepSeek-V2-Lite dims, context 1 024, batch 1: the step 2.906 ms with the kernels, 2.992 with the GEMMs;
    // 2026-11-28, the RoPE and the combine folded in: 2.957 -> 2.739 ms. The combine in v_up repeats the split merge
    // in every block: one layer's chain at batch 4 took 23.3 us that way against 19.7 us with the combine launch,
    // mla_decode_bench, so from two tokens the combine stays a launch of its own.)
    const bool gemv = kernels::mla_absorb_gemv_supported(s.num_seqs, dn, dv, r);
    if (gemv) {
        kernels::launch_mla_rope_q_absorb_gemv(rope, ab, stream);
    } else {
        if (!rope_on_side) kernels::launch_mla_rope_kv(rope, stream);
        kernels::launch_mla_q_absorb_gemm(ab, stream);
        if (rope_on_side) side_->hop(side_->get(), stream, 2);  // the rotated q_pe and the cache rows
    }
    const kernels::mla_decode_params dp{.q = q,
                                        .cache = cache,
                                        .block_tables = s.block_tables,
                                        .start_pos = s.start_pos,
                                        .workspace = decode_ws_.as<float>(),
                                        .num_seqs = s.num_seqs,
                                        .num_heads = heads,
                                        .nope_dim = dn,
                                        .rope_dim = dr,
                                        .kv_lora_rank = r,
                                        .block_size = s.block_size,
                                        .max_blocks_per_seq = s.max_blocks_per_seq,
                                        .num_splits = kernels::mla_decode_splits(s.num_seqs, heads, num_sms_),
                                        .scale = c_.softmax_scale()};
    const kernels::mla_latents_bf16 lat{.q = q_lat_bf16_.as<bf16>(), .o = o_lat_bf16_.as<bf16>()};
    ab.in = o_lat_bf16_.as<bf16>();
    ab.out = attn;
    if (gemv && s.num_seqs == 1) {
        kernels::launch_mla_decode_v_up_gemv(dp, lat, ab, stream);
    } else if (gemv) {
        kernels::launch_mla_decode_bf16(dp, lat, stream);
        kernels::launch_mla_v_up_gemv(ab, stream);
    } else {
        kernels::launch_mla_decode_bf16(dp, lat, stream);
        kernels::launch_mla_v_up_gemm(ab, stream);
    }
}

void mla_attention_runner::run_absorbed(const cuda_layer& w, const mla_step& s, const int32_t* rows, int32_t num_rows,
                                        const bf16* q, const bf16* cache, bf16* attn, cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t heads = i32(c_.num_heads), r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim);
    const int32_t dr = i32(m.qk_rope_head_dim), dv = i32(m.v_head_dim);
    kernels::launch_mla_q_absorb({.q = q,
                                  .kv_b = w.mla.kv_b.as<bf16>(),
                                  .q_lat = q_lat_.as<float>(),
                                  .rows = rows,
                                  .num_tokens = num_rows,
                                  .num_heads = heads,
                                  .nope_dim = dn,
                                  .rope_dim = dr,
                                  .v_dim = dv,
                                  .kv_lora_rank = r},
                                 stream);
    kernels::launch_mla_attention({.q_lat = q_lat_.as<float>(),
                                   .q = q,
                                   .cache = cache,
                                   .block_tables = s.block_tables,
                                   .query_start = s.query_start,
                                   .start_pos = s.start_pos,
                                   .o_lat = o_lat_.as<float>(),
                                   .rows = rows,
                                   .num_tokens = num_rows,
                                   .num_seqs = s.num_seqs,
                                   .num_heads = heads,
                                   .nope_dim = dn,
                                   .rope_dim = dr,
                                   .kv_lora_rank = r,
                                   .block_size = s.block_size,
                                   .max_blocks_per_seq = s.max_blocks_per_seq,
                                   .scale = c_.softmax_scale()},
                                  stream);
    kernels::launch_mla_v_up({.o_lat = o_lat_.as<float>(),
                              .kv_b = w.mla.kv_b.as<bf16>(),
                              .out = attn,
                              .rows = rows,
                              .num_tokens = num_rows,
                              .num_heads = heads,
                              .nope_dim = dn,
                              .v_dim = dv,
                              .kv_lora_rank = r},
                             stream);
}

void mla_attention_runner::run_expanded(const cuda_layer& w, const mla_prefill_plan::group& pg, const bf16* q,
                                        const bf16* cache, bf16* attn, const gemm_context& g,
                                        cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t heads = i32(c_.num_heads), r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim);
    const int32_t dr = i32(m.qk_rope_head_dim), dv = i32(m.v_head_dim);
    const int32_t* slots = plan_dev_.as<int32_t>() + pg.slots;
    const int32_t N = pg.num_rows;
    if (expand_direct_) {
        kernels::launch_mla_gather_latent_rope({.cache = cache,
                                                .slots = slots,
                                                .latent = latent_.as<bf16>(),
                                                .k = k_.as<bf16>(),
                                                .num_rows = N,
                                                .num_heads = heads,
                                                .nope_dim = dn,
                                                .rope_dim = dr,
                                                .kv_lora_rank = r},
                                               stream);
        kernels::launch_mla_expand_gemm({.handle = g.handle,
                                         .workspace = g.workspace,
                                         .workspace_bytes = g.workspace_bytes,
                                         .kv_b = w.mla.kv_b.as<bf16>(),
                                         .latent = latent_.as<bf16>(),
                                         .k = k_.as<bf16>(),
                                         .v = v_.as<bf16>(),
                                         .num_rows = N,
                                         .num_heads = heads,
                                         .nope_dim = dn,
                                         .rope_dim = dr,
                                         .v_dim = dv,
                                         .kv_lora_rank = r},
                                        stream);
    } else {
        expand_via_kv_up(w, pg, cache, g, stream);
    }
    run_expanded_attention(pg, q, attn, stream);
}

void mla_attention_runner::expand_via_kv_up(const cuda_layer& w, const mla_prefill_plan::group& pg, const bf16* cache,
                                            const gemm_context& g, cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t heads = i32(c_.num_heads), r = i32(m.kv_lora_rank), dn = i32(m.qk_nope_head_dim);
    const int32_t dr = i32(m.qk_rope_head_dim), dv = i32(m.v_head_dim);
    const int32_t* slots = plan_dev_.as<int32_t>() + pg.slots;
    const int32_t N = pg.num_rows;
    kernels::launch_mla_gather_latent({.cache = cache,
                                       .slots = slots,
                                       .latent = latent_.as<bf16>(),
                                       .num_rows = N,
                                       .kv_lora_rank = r,
                                       .rope_dim = dr},
                                      stream);
    gemm(g, latent_.as<bf16>(), w.mla.kv_b.as<bf16>(), kv_up_.as<bf16>(), N, heads * (dn + dv), r, stream);
    kernels::launch_mla_build_kv({.kv_up = kv_up_.as<bf16>(),
                                  .cache = cache,
                                  .slots = slots,
                                  .k = k_.as<bf16>(),
                                  .v = v_.as<bf16>(),
                                  .num_rows = N,
                                  .num_heads = heads,
                                  .nope_dim = dn,
                                  .rope_dim = dr,
                                  .v_dim = dv,
                                  .kv_lora_rank = r,
                                  .k_dim = k_dim_,
                                  .v_out_dim = v_dim_},
                                 stream);
}

void mla_attention_runner::run_expanded_attention(const mla_prefill_plan::group& pg, const bf16* q, bf16* attn,
                                                  cudaStream_t stream) const {
    const mla_params& m = c_.mla;
    const int32_t heads = i32(c_.num_heads), dv = i32(m.v_head_dim);
    const int32_t qk = i32(m.qk_nope_head_dim) + i32(m.qk_rope_head_dim);
    const int32_t* plan = plan_dev_.as<int32_t>();
    const size_t t0 = static_cast<size_t>(pg.first_token);
    const bf16* q_in = q;
    if (k_dim_ != qk) {
        kernels::launch_mla_repack_heads({.in = q + t0 * heads * qk,
                                          .out = q_pad_.as<bf16>() + t0 * heads * k_dim_,
                                          .num_rows = pg.num_tokens,
                                          .num_heads = heads,
                                          .in_dim = qk,
                                          .out_dim = k_dim_},
                                         stream);
        q_in = q_pad_.as<bf16>();
    }
    bf16* o = v_dim_ != dv ? out_pad_.as<bf16>() : attn;
    kernels::launch_paged_attention({.q = q_in,
                                     .k_cache = k_.as<bf16>(),
                                     .v_cache = v_.as<bf16>(),
                                     .block_tables = plan + pg.tables,
                                     .query_start = plan + pg.query_start,
                                     .start_pos = plan + pg.start_pos,
                                     .work_items = plan + pg.work_items,
                                     .out = o,
                                     .num_seqs = pg.num_seqs,
                                     .num_work_items = pg.num_work_items,
                                     .num_q_heads = heads,
                                     .num_kv_heads = heads,
                                     .head_dim = k_dim_,
                                     .block_size = kMlaExpandBlock,
                                     .max_blocks_per_seq = pg.table_width,
                                     .scale = c_.softmax_scale(),
                                     .rows_per_item = plan_.rows_per_item,
                                     .v_head_dim = v_dim_},
                                    stream);
    if (v_dim_ != dv)
        kernels::launch_mla_repack_heads({.in = out_pad_.as<bf16>() + t0 * heads * v_dim_,
                                          .out = attn + t0 * heads * dv,
                                          .num_rows = pg.num_tokens,
                                          .num_heads = heads,
                                          .in_dim = v_dim_,
                                          .out_dim = dv},
                                         stream);
}

}  // namespace zmoe::cuda
