#include "workers/sampler.hpp"

#include <algorithm>

namespace zmoe {

void token_history::feed(uint64_t request_id, int32_t start_pos, std::span<const int32_t> tokens) {
    std::vector<int32_t>& h = tokens_[request_id];
    h.resize(static_cast<size_t>(std::max(start_pos, 0)), kPlaceholderToken);
    h.insert(h.end(), tokens.begin(), tokens.end());
}

const std::vector<int32_t>* token_history::find(uint64_t request_id) const {
    auto it = tokens_.find(request_id);
    return it == tokens_.end() ? nullptr : &it->second;
}

bool needs_history(const sampling_params& p) { return p.reads_token_history(); }

void sample_batch::add(const scheduled_seq& seq, const std::vector<int32_t>* fed) {
    const sampling_params& p = seq.sampling;
    kernels::sample_seq_params s{.temperature = p.temperature,
                                 .top_p = p.top_p,
                                 .top_k = p.top_k,
                                 .counter = seq.sample_index,
                                 .seed = p.seed,
                                 .min_p = p.min_p,
                                 .presence_penalty = p.presence_penalty,
                                 .frequency_penalty = p.frequency_penalty,
                                 .repetition_penalty = p.repetition_penalty,
                                 .num_logprobs = p.logprobs};
    if (needs_history(p) && fed) {
        // The fed tokens end with the last generated one: the last sample_index of them are output.
        const auto len = static_cast<int32_t>(fed->size());
        s.history_begin = static_cast<int32_t>(history.size());
        s.num_output = std::min<int32_t>(static_cast<int32_t>(seq.sample_index), len);
        s.num_prompt = len - s.num_output;
        history.insert(history.end(), fed->begin(), fed->end());
    }
    s.bias_begin = static_cast<int32_t>(bias_ids.size());
    s.num_bias = static_cast<int32_t>(std::min(p.logit_bias_ids.size(), p.logit_bias_values.size()));
    bias_ids.insert(bias_ids.end(), p.logit_bias_ids.begin(), p.logit_bias_ids.begin() + s.num_bias);
    bias_values.insert(bias_values.end(), p.logit_bias_values.begin(), p.logit_bias_values.begin() + s.num_bias);
    s.banned_begin = static_cast<int32_t>(banned.size());
    if (seq.sample_index < p.min_tokens) {
        s.num_banned = static_cast<int32_t>(p.min_tokens_stop_ids.size());
        banned.insert(banned.end(), p.min_tokens_stop_ids.begin(), p.min_tokens_stop_ids.end());
    }
    any_logprobs = any_logprobs || p.logprobs >= 0;
    seqs.push_back(s);
}

sample_batch gather_samples(const step_request& request, const std::vector<std::vector<int32_t>>& tokens,
                            token_history& history, std::vector<uint64_t>& request_ids) {
    for (uint64_t id : request.finished_ids) history.erase(id);
    sample_batch batch;
    request_ids.clear();
    for (size_t i = 0; i < request.seqs.size(); ++i) {
        const scheduled_seq& s = request.seqs[i];
        const bool keep = needs_history(s.sampling);
        if (keep) history.feed(s.request_id, s.start_pos, tokens.at(i));
        if (!s.do_sample) continue;
        batch.add(s, keep ? history.find(s.request_id) : nullptr);
        request_ids.push_back(s.request_id);
    }
    return batch;
}

std::vector<sampled_token> sample_rows(const float* logits, int64_t vocab, const sample_batch& batch,
                                       std::span<const uint64_t> request_ids) {
    const auto V = static_cast<int32_t>(vocab);
    const kernels::ref::sample_inputs in = batch.inputs();
    std::vector<sampled_token> out(batch.seqs.size());
    for (size_t r = 0; r < batch.seqs.size(); ++r) {
        const kernels::sample_seq_params& s = batch.seqs[r];
        const float* row = logits + r * static_cast<size_t>(vocab);
        out[r].request_id = request_ids[r];
        out[r].token_id = kernels::ref::process_and_sample(row, V, s, in);
        if (s.num_logprobs >= 0) {
            token_logprobs lp;
            const int32_t k = std::min({s.num_logprobs, kernels::kMaxLogprobs, V});
            lp.top_ids.resize(static_cast<size_t>(k));
            lp.top_logprobs.resize(static_cast<size_t>(k));
            kernels::ref::logprobs(row, V, out[r].token_id, k, &lp.logprob, lp.top_ids.data(), lp.top_logprobs.data());
            out[r].logprobs = std::move(lp);
        }
    }
    return out;
}

int32_t sample_token(const float* logits, int64_t vocab, const sampling_params& params, uint32_t sample_index) {
    scheduled_seq seq;
    seq.sample_index = sample_index;
    seq.sampling = params;
    sample_batch b;
    b.add(seq, nullptr);
    return kernels::ref::process_and_sample(logits, static_cast<int32_t>(vocab), b.seqs[0], b.inputs());
}

}  // namespace zmoe
