#include "engine_core/stats_line.hpp"

#include <cstdio>

namespace zmoe {

std::optional<std::string> stats_line::next(const stats_sample& now) {
    if (!last_) {
        last_ = now;
        return std::nullopt;
    }
    const double secs = std::chrono::duration<double>(now.at - last_->at).count();
    const double prompt = now.prompt_tokens - last_->prompt_tokens;
    const double generated = now.generation_tokens - last_->generation_tokens;
    const double preempted = now.preemptions - last_->preemptions;
    const double queried = now.prefix_cache_queries - last_->prefix_cache_queries;
    const double hit = now.prefix_cache_hits - last_->prefix_cache_hits;
    last_ = now;
    const bool idle = prompt == 0 && generated == 0 && now.num_running == 0 && now.num_waiting == 0;
    const bool was_idle = last_idle_;
    last_idle_ = idle;
    if (idle && was_idle) return std::nullopt;
    const double per_s = secs > 0 ? 1.0 / secs : 0.0;
    const double kv_pct =
        now.kv_blocks_total > 0 ? 100.0 * static_cast<double>(now.kv_blocks_used) / now.kv_blocks_total : 0.0;
    // Over the interval's newly scheduled requests, as vLLM's "Prefix cache hit rate".
    const double hit_pct = queried > 0 ? 100.0 * hit / queried : 0.0;
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "prompt throughput %.1f tok/s, generation throughput %.1f tok/s, running %lld, waiting %lld, "
                  "KV cache %.1f%% (%lld of %lld blocks), preemptions %.0f, prefix cache hit rate %.1f%%",
                  prompt * per_s, generated * per_s, static_cast<long long>(now.num_running),
                  static_cast<long long>(now.num_waiting), kv_pct, static_cast<long long>(now.kv_blocks_used),
                  static_cast<long long>(now.kv_blocks_total), preempted, hit_pct);
    return std::string(buf);
}

}  // namespace zmoe
