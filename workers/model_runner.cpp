#include "workers/model_runner.hpp"

#include <chrono>

#include "base/error.hpp"
#include "workers/micro_batch.hpp"
#include "workers/sampler.hpp"
#include "workers/step_validation.hpp"

namespace zmoe {
namespace {

expert_placement make_placement(const model_config& c, const runner_options& o) {
    if (o.placement) {
        if (o.placement->num_moe_layers() > 0) o.placement->validate();
        return *o.placement;
    }
    return expert_placement::initial(static_cast<int32_t>(c.num_moe_layers()), static_cast<int32_t>(c.num_experts), 0,
                                     o.world_size);
}

expert_comm* check_comm(expert_comm* comm, const runner_options& o) {
    if (o.world_size <= 0 || o.rank < 0 || o.rank >= o.world_size)
        throw error(errc::invalid_argument,
                    "rank " + std::to_string(o.rank) + " of world " + std::to_string(o.world_size));
    if (comm->world_size() != o.world_size || comm->rank() != o.rank)
        throw error(errc::invalid_argument, "expert_comm is rank " + std::to_string(comm->rank()) + " of " +
                                                std::to_string(comm->world_size()) + ", options say " +
                                                std::to_string(o.rank) + " of " + std::to_string(o.world_size));
    return comm;
}

}  // namespace

int64_t kv_blocks_for_budget(const model_config& config, int64_t block_size, int64_t budget_bytes) {
    return kv_cache::blocks_for_budget(config, block_size, budget_bytes);
}

model_runner::model_runner(const std::string& model_dir, const runner_options& options)
    : model_runner(model_config::load(model_dir), model_dir, options) {}

namespace {

model_config with_quantization(model_config c, const std::string& flag) {
    c.apply_quantization_flag(flag);
    return c;
}

}  // namespace

model_runner::model_runner(const model_config& config, const std::string& model_dir, const runner_options& options)
    : config_(with_quantization(config, options.quantization)),
      options_(options),
      placement_(make_placement(config_, options)),
      own_comm_(options.comm ? nullptr : std::make_unique<local_expert_comm>()),
      comm_(check_comm(options.comm ? options.comm : own_comm_.get(), options)),
      weights_(model_dir, config_, placement_, options.rank, options.load_format, options.dummy_router_skew),
      pool_(options.num_threads),
      cache_(kv_cache::for_model(config_, options.num_kv_blocks, options.block_size)),
      model_(weights_, placement_, *comm_, pool_, {.bf16 = options.bf16_activations}),
      masks_(options.grammar_tokenizer.empty() ? model_dir : options.grammar_tokenizer, config_.eos_token_ids,
             static_cast<int32_t>(config_.vocab_size)) {
    if (placement_.num_ranks != options.world_size)
        throw error(errc::invalid_argument, "expert placement spans " + std::to_string(placement_.num_ranks) +
                                                " ranks, world size is " + std::to_string(options.world_size));
}

forward_batch model_runner::prepare(const step_request& request, sample_batch& samples,
                                    std::vector<uint64_t>& sample_ids) {
    const auto tokens =
        validate_step(request, cache_.block_size(), cache_.num_blocks(), config_.vocab_size, last_sampled_);
    samples = gather_samples(request, tokens, history_, sample_ids);
    masks_.begin_step(request, samples);  // computed while the forward pass runs
    forward_batch b;
    for (size_t i = 0; i < request.seqs.size(); ++i) {
        const scheduled_seq& s = request.seqs[i];
        attention_seq a;
        a.first_row = static_cast<int64_t>(b.tokens.size());
        a.num_tokens = static_cast<int64_t>(s.token_ids.size());
        a.start_pos = s.start_pos;
        a.block_table = s.block_table.data();
        b.seqs.push_back(a);
        for (size_t t = 0; t < tokens[i].size(); ++t) {
            b.tokens.push_back(tokens[i][t]);
            b.positions.push_back(s.start_pos + static_cast<int64_t>(t));
        }
        if (s.do_sample) b.logit_rows.push_back(static_cast<int64_t>(b.tokens.size()) - 1);
    }
    if (request.dual_batch) {
        std::vector<int64_t> seq_tokens;
        for (const attention_seq& a : b.seqs) seq_tokens.push_back(a.num_tokens);
        b.micro_batch_split = micro_batch_split_row(seq_tokens);
    }
    return b;
}

step_result model_runner::execute(const step_request& request, std::vector<std::vector<float>>* logits_out) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t id : request.finished_ids) last_sampled_.erase(id);
    step_result result;
    result.step_id = request.step_id;
    result.rank = options_.rank;
    forward_batch batch;
    sample_batch samples;
    std::vector<uint64_t> sample_ids;
    std::vector<float> logits;
    try {
        batch = prepare(request, samples, sample_ids);
    } catch (const error&) {
        // Keep the collective whole: the other ranks are already waiting in this step's exchanges.
        forward_batch empty;
        if (request.dual_batch) empty.micro_batch_split = 0;
        model_.forward(empty, cache_, logits, result.expert_counts);
        throw;
    }
    model_.forward(batch, cache_, logits, result.expert_counts);

    const int64_t V = config_.vocab_size;
    masks_.finish_masks(samples);
    result.tokens = sample_rows(logits.data(), V, samples, sample_ids);
    masks_.end_step(result.tokens);
    for (const sampled_token& t : result.tokens) last_sampled_[t.request_id] = t.token_id;
    if (logits_out) {
        logits_out->clear();
        for (size_t r = 0; r < result.tokens.size(); ++r)
            logits_out->emplace_back(logits.begin() + static_cast<int64_t>(r) * V,
                                     logits.begin() + static_cast<int64_t>(r + 1) * V);
    }
    result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

}  // namespace zmoe
