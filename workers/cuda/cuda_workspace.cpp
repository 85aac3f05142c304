#include "workers/cuda/cuda_workspace.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/error.hpp"
#include "kernels/cuda_check.hpp"

namespace zmoe::cuda {

pinned_buffer::pinned_buffer(size_t bytes) : bytes_(bytes) {
    const cudaError_t e = cudaMallocHost(&ptr_, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ptr_ = nullptr;
        throw error(errc::out_of_memory,
                    "cudaMallocHost of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(e));
    }
}

pinned_buffer::~pinned_buffer() {
    if (ptr_) cudaFreeHost(ptr_);
}

pinned_buffer::pinned_buffer(pinned_buffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
        if (ptr_) cudaFreeHost(ptr_);
        ptr_ = std::exchange(o.ptr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

namespace {

/// Lays out typed fields one after another in a region, 16-byte aligned.
class region_layout {
  public:
    template <typename T>
    size_t add(size_t count) {
        const size_t at = end_;
        end_ = (end_ + count * sizeof(T) + 15) / 16 * 16;
        return at;
    }
    size_t bytes() const { return end_; }

  private:
    size_t end_ = 0;
};

template <typename T>
mirrored<T> view(const device_buffer& d, const pinned_buffer& h, size_t offset) {
    return {reinterpret_cast<T*>(d.as<std::byte>() + offset), reinterpret_cast<T*>(h.as<std::byte>() + offset)};
}

}  // namespace

cuda_workspace::cuda_workspace(const workspace_shape& s) : shape(s) {
    const size_t T = static_cast<size_t>(s.max_tokens), S = static_cast<size_t>(s.max_seqs);
    const size_t H = static_cast<size_t>(s.hidden), K = static_cast<size_t>(s.top_k);
    const int32_t group = s.num_q_heads / std::max(s.num_kv_heads, 1);
    max_work_items =
        (s.max_tokens * group + kernels::kAttentionRowsPerItem - 1) / kernels::kAttentionRowsPerItem + s.max_seqs;
    if (kernels::decode_attention_supported(s.num_q_heads, s.num_kv_heads, s.head_dim))
        attn_slots = kernels::decode_attention_slots(s.num_q_heads, s.num_kv_heads, s.head_dim);
    attn_splits_fixed = parse_attention_splits(std::getenv("ZMOE_DECODE_ATTENTION_SPLITS"));
    const bool ep = s.world_size > 1;
    max_recv_rows = ep ? s.world_size * s.max_tokens * s.top_k : 0;
    max_moe_rows = s.num_experts == 0 ? 0
                   : ep               ? kernels::moe_permuted_rows_bound(max_recv_rows, 1, s.num_slots + 1, 128)
                                      : kernels::moe_permuted_rows_bound(s.max_tokens, s.top_k, s.num_slots, 128);

    auto alloc = [&](device_buffer& b, size_t bytes) {
        b = device_buffer(bytes);
        bytes_ += static_cast<int64_t>(bytes);
    };

    region_layout in;
    const size_t o_sampling = in.add<kernels::sample_seq_params>(S);
    const size_t o_tokens = in.add<int32_t>(T), o_positions = in.add<int32_t>(T), o_slots = in.add<int32_t>(T);
    const size_t o_qs = in.add<int32_t>(S + 1), o_sp = in.add<int32_t>(S), o_rows = in.add<int32_t>(S);
    const size_t o_items = in.add<int32_t>(2 * static_cast<size_t>(max_work_items));
    const size_t o_valid = in.add<int32_t>(1);
    small_inputs_bytes = in.bytes();
    const size_t o_tables = in.add<int32_t>(S * static_cast<size_t>(s.max_blocks_per_seq));
    alloc(inputs, in.bytes());
    inputs_host = pinned_buffer(in.bytes());
    sampling = view<kernels::sample_seq_params>(inputs, inputs_host, o_sampling);
    tokens = view<int32_t>(inputs, inputs_host, o_tokens);
    positions = view<int32_t>(inputs, inputs_host, o_positions);
    kv_slots = view<int32_t>(inputs, inputs_host, o_slots);
    query_start = view<int32_t>(inputs, inputs_host, o_qs);
    start_pos = view<int32_t>(inputs, inputs_host, o_sp);
    logit_rows = view<int32_t>(inputs, inputs_host, o_rows);
    work_items = view<int32_t>(inputs, inputs_host, o_items);
    num_valid = view<int32_t>(inputs, inputs_host, o_valid);
    block_tables = view<int32_t>(inputs, inputs_host, o_tables);

    region_layout out;
    const size_t o_sampled = out.add<int32_t>(S);
    const size_t o_counts = out.add<int32_t>(static_cast<size_t>(s.num_moe_layers) * s.num_experts);
    const size_t o_token_lp = out.add<float>(S);
    const size_t o_top_ids = out.add<int32_t>(S * kernels::kMaxLogprobs);
    const size_t o_top_lp = out.add<float>(S * kernels::kMaxLogprobs);
    alloc(outputs, out.bytes());
    outputs_host = pinned_buffer(out.bytes());
    sampled = view<int32_t>(outputs, outputs_host, o_sampled);
    expert_counts = view<int32_t>(outputs, outputs_host, o_counts);
    token_logprobs = view<float>(outputs, outputs_host, o_token_lp);
    top_ids = view<int32_t>(outputs, outputs_host, o_top_ids);
    top_logprobs = view<float>(outputs, outputs_host, o_top_lp);

    const size_t bf = sizeof(kernels::bf16), f32 = sizeof(float), i32 = sizeof(int32_t);
    const size_t q_dim = static_cast<size_t>(s.num_q_heads) * s.head_dim;
    const size_t qkv_dim = q_dim + 2 * static_cast<size_t>(s.num_kv_heads) * s.head_dim;
    alloc(residual, T * H * bf);
    alloc(xn, T * H * bf);
    alloc(delta, T * H * bf);
    alloc(qkv, T * qkv_dim * bf);
    alloc(q, T * q_dim * bf);
    alloc(attn, T * q_dim * bf);
    size_t attn_partial_bytes = 0;  // the largest over every batch size a step (eager or graph) can have
    for (int32_t b = 1; attn_slots > 0 && b <= s.max_seqs; ++b)
        attn_partial_bytes = std::max(attn_partial_bytes, kernels::decode_attention_workspace_bytes(
                                                              b, s.num_q_heads, s.head_dim, attn_splits(b)));
    alloc(attn_partial, attn_partial_bytes);
    alloc(mlp_gate_up, T * 2 * s.dense_inter * bf);
    alloc(mlp_act, T * s.dense_inter * bf);
    alloc(shared_out, s.dense_inter > 0 ? T * H * bf : 0);
    alloc(shared_gate, T * f32);

    const size_t E = static_cast<size_t>(s.num_experts), slots = static_cast<size_t>(s.num_slots);
    const size_t moe_rows = static_cast<size_t>(max_moe_rows), recv = static_cast<size_t>(max_recv_rows);
    alloc(router_logits, T * E * f32);
    alloc(topk_ids, T * K * i32);
    alloc(topk_weights, T * K * f32);
    alloc(slot_ids, T * K * i32);
    alloc(replica_offsets, static_cast<size_t>(s.num_moe_layers) * (E + 1) * i32);
    alloc(replica_slots, static_cast<size_t>(s.num_moe_layers) * slots * s.world_size * i32);
    alloc(perm_offsets, (slots + 2) * i32);  // expert parallelism permutes one more (unused-row) slot
    alloc(perm_dest, std::max(T * K, recv) * i32);
    alloc(perm_row_token, moe_rows * i32);
    alloc(perm_y, moe_rows * H * bf);
    alloc(perm_act, moe_rows * s.moe_inter * bf);
    if (s.fp8_moe_inter > 0 && moe_rows > 0) {
        const size_t ld = static_cast<size_t>(kernels::fp8_scale_ld(max_moe_rows));
        const size_t Ip = static_cast<size_t>(s.fp8_moe_inter);
        alloc(fp8_x_q, moe_rows * H);
        alloc(fp8_x_scales, (H + 127) / 128 * ld * f32);
        // The FP8 decode path keeps its fp32 act [tokens * top_k, inter] here: room for 4 bytes per element.
        alloc(fp8_act_q, std::max(moe_rows, 4 * K * static_cast<size_t>(kernels::kMoeDecodeMaxTokens)) * Ip);
        alloc(fp8_act_scales, (Ip + 127) / 128 * ld * f32);
    }
    alloc(perm_workspace, E == 0 ? 0
                          : ep   ? kernels::moe_permute_workspace_bytes(max_recv_rows, 1, s.num_slots + 1)
                                 : kernels::moe_permute_workspace_bytes(s.max_tokens, s.top_k, s.num_slots));
    alloc(combine_ones, recv * f32);
    alloc(moe_decode_scratch,
          E == 0
              ? 0
              : kernels::moe_decode_scratch_ints(std::min(s.max_tokens, kernels::kMoeDecodeMaxTokens), s.top_k) * i32);
    if (moe_decode_scratch.bytes() > 0)  // launch_moe_decode needs it zeroed once
        ZMOE_CUDA_CHECK(cudaMemset(moe_decode_scratch.as<void>(), 0, moe_decode_scratch.bytes()));
    if (ep) {
        std::vector<float> ones(recv, 1.f);
        if (!ones.empty())
            ZMOE_CUDA_CHECK(cudaMemcpy(combine_ones.as<void>(), ones.data(), recv * f32, cudaMemcpyHostToDevice));
        alloc(moe_plan, 3 * T * K * i32);
        alloc(send_x, T * K * H * bf);
        alloc(y_back, T * K * H * bf);
        alloc(recv_x, recv * H * bf);
        alloc(y_recv, recv * H * bf);
        alloc(recv_slot, recv * i32);
    }
    alloc(last_rows, S * H * bf);
    alloc(logits, S * static_cast<size_t>(s.vocab_size) * f32);
    alloc(processed, S * static_cast<size_t>(s.vocab_size) * f32);
    alloc(counts, S * static_cast<size_t>(s.vocab_size) * i32);
    sample_side.allocate();
    bytes_ += static_cast<int64_t>(sample_side.bytes());
}

int32_t parse_attention_splits(const char* value) {
    if (value == nullptr || *value == '\0') return 0;
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (*end != '\0' || v < 1 || v > kernels::kDecodeAttentionMaxSplits)
        throw error(errc::invalid_argument, std::string("ZMOE_DECODE_ATTENTION_SPLITS must be an integer in [1, ") +
                                                std::to_string(kernels::kDecodeAttentionMaxSplits) + "], got '" +
                                                value + "'");
    return int32_t(v);
}

int32_t cuda_workspace::attn_splits(int32_t num_seqs) const {
    if (attn_splits_fixed > 0) return attn_splits_fixed;
    return kernels::decode_attention_splits(num_seqs, shape.num_kv_heads, shape.max_kv_len, attn_slots);
}

bool cuda_workspace::stage_samples(const sample_batch& batch) {
    ZMOE_CHECK(static_cast<int64_t>(batch.seqs.size()) <= shape.max_seqs, "sampled rows beyond the workspace");
    std::copy(batch.seqs.begin(), batch.seqs.end(), sampling.host);
    return sample_side.stage(batch);
}

kernels::sample_params cuda_workspace::sample_args(int32_t num_seqs) const {
    return {.logits = logits.as<float>(),
            .seqs = sampling.device,
            .tokens = sampled.device,
            .num_seqs = num_seqs,
            .vocab_size = shape.vocab_size,
            .processed = processed.as<float>(),
            .counts = counts.as<uint32_t>(),
            .history = sample_side.history(),
            .bias_ids = sample_side.bias_ids(),
            .bias_values = sample_side.bias_values(),
            .banned = sample_side.banned(),
            .token_logprobs = token_logprobs.device,
            .top_ids = top_ids.device,
            .top_logprobs = top_logprobs.device};
}

zmoe::token_logprobs cuda_workspace::logprobs_of(int32_t row) const {
    const kernels::sample_seq_params& s = sampling.host[row];
    zmoe::token_logprobs lp;
    lp.logprob = token_logprobs.host[row];
    const auto k = static_cast<size_t>(std::min({s.num_logprobs, kernels::kMaxLogprobs, shape.vocab_size}));
    const size_t at = static_cast<size_t>(row) * kernels::kMaxLogprobs;
    lp.top_ids.assign(top_ids.host + at, top_ids.host + at + k);
    lp.top_logprobs.assign(top_logprobs.host + at, top_logprobs.host + at + k);
    return lp;
}

// ---------------------------------------------------------------------------------------------------------

namespace {

/// Byte offsets of the four side arrays for the given element capacities, 16-byte aligned, and the end.
void side_layout(const size_t (&cap)[4], size_t (&offsets)[5]) {
    region_layout r;
    offsets[0] = r.add<int32_t>(cap[0]);
    offsets[1] = r.add<int32_t>(cap[1]);
    offsets[2] = r.add<float>(cap[2]);
    offsets[3] = r.add<int32_t>(cap[3]);
    offsets[4] = r.bytes();
}

}  // namespace

void sample_side_arrays::allocate() {
    side_layout({kHistory, kBias, kBias, kBanned}, offsets_);
    fixed_ = device_buffer(offsets_[4]);
    host_ = pinned_buffer(offsets_[4]);
    overflowed_ = false;
}

bool sample_side_arrays::stage(const sample_batch& b) {
    overflowed_ = b.history.size() > kHistory || b.bias_ids.size() > kBias || b.banned.size() > kBanned;
    const size_t cap[4] = {std::max(kHistory, b.history.size()), std::max(kBias, b.bias_ids.size()),
                           std::max(kBias, b.bias_values.size()), std::max(kBanned, b.banned.size())};
    side_layout(cap, offsets_);
    if (overflowed_) overflow_.ensure(offsets_[4]);  // the previous step has finished: nothing reads it now
    if (host_.bytes() < offsets_[4]) host_ = pinned_buffer(offsets_[4]);
    auto put = [&](int i, const auto& v) {
        used_[i] = v.size() * sizeof(v[0]);
        if (used_[i] > 0) std::memcpy(host_.as<std::byte>() + offsets_[i], v.data(), used_[i]);
    };
    put(0, b.history);
    put(1, b.bias_ids);
    put(2, b.bias_values);
    put(3, b.banned);
    return !overflowed_;
}

void sample_side_arrays::upload(cudaStream_t stream) const {
    std::byte* dst = (overflowed_ ? overflow_ : fixed_).as<std::byte>();
    for (int i = 0; i < 4; ++i)
        if (used_[i] > 0)
            ZMOE_CUDA_CHECK(cudaMemcpyAsync(dst + offsets_[i], host_.as<std::byte>() + offsets_[i], used_[i],
                                            cudaMemcpyHostToDevice, stream));
}

}  // namespace zmoe::cuda
